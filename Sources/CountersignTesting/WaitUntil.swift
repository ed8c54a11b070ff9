/// Polls `condition` every `interval` until it holds; true when it did, false when `limit`
/// passed first. The limit guards against a hang (minutes), never states how fast something
/// should be: a test waiting on background work (webhook deliveries, key rotation, a cache's
/// refresh) passes however busy the machine is.
public func waitUntil(
    limit: Duration = .seconds(300), interval: Duration = .milliseconds(20), _ condition: () async throws -> Bool
) async throws -> Bool {
    let clock = ContinuousClock()
    let deadline = clock.now + limit
    while clock.now < deadline {
        if try await condition() { return true }
        try await Task.sleep(for: interval)
    }
    return try await condition()
}
