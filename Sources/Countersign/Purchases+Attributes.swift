import CountersignCore
import Foundation

/// Subscriber attributes, as RevenueCat's: set locally at once (kept on disk per user), sent in
/// batches in the background, stored by the server and shown by its admin API.
extension Purchases {
    /// Sets attributes of the current user; an empty string deletes one. A malformed or reserved
    /// key (or a value over 500 characters) is left out and logged at `error` with the reason,
    /// as RevenueCat does (``syncAttributes()`` throws the server's refusal).
    public func setAttributes(_ attributes: [String: String]) { set(attributes) }
    public func setEmail(_ email: String?) { set(["$email": email]) }
    public func setDisplayName(_ displayName: String?) { set(["$displayName": displayName]) }
    public func setPhoneNumber(_ phoneNumber: String?) { set(["$phoneNumber": phoneNumber]) }

    /// RevenueCat's `Purchases.shared.attribution`, where its current documentation sets
    /// attributes (`Purchases.shared.attribution.setEmail(…)`): the same setters as above.
    public var attribution: Attribution { Attribution(purchases: self) }

    /// Keeps the attributes that pass ``SubscriberAttributeRules`` (an empty value is nil,
    /// which deletes) and queues them for sending; logs each one left out.
    private func set(_ attributes: [String: String?]) {
        let now = configuration.nowMilliseconds
        var accepted: [String: SubscriberAttributeValue] = [:]
        for (key, value) in attributes {
            let value = value?.isEmpty == true ? nil : value
            if let problem = SubscriberAttributeRules.problem(key: key, value: value) {
                SDKLog.log(.error, "subscriber attribute not set: \(problem)")
                continue
            }
            accepted[key] = SubscriberAttributeValue(value: value, updatedAtMs: now)
        }
        setValidated(accepted)
    }

    /// Attributes set but not yet stored by the server, for the current user.
    public var unsyncedAttributes: [String: String?] {
        pendingAttributes(for: appUserID).mapValues(\.value)
    }

    private func setValidated(_ attributes: [String: SubscriberAttributeValue]) {
        guard !attributes.isEmpty else { return }
        let user = appUserID
        state.withLock { _ in
            var pending = pendingAttributes(for: user)
            pending.merge(attributes) { _, new in new }
            disk.write(pending, CacheFiles.fileName("attributes", user))
        }
        SDKLog.log(.debug, "subscriber attributes set: \(attributes.keys.sorted().joined(separator: ", "))")
        // Sent in the background, one batch at a time; what is set meanwhile goes in the next.
        state.withLock { state in
            guard state.attributeSync == nil else { return }
            state.attributeSync = Task {
                while !self.pendingAttributes(for: self.appUserID).isEmpty {
                    do {
                        try await self.syncAttributes()
                    } catch {
                        SDKLog.log(.warn, "subscriber attributes not sent yet: \(error)")
                        break
                    }
                }
                self.state.withLock { $0.attributeSync = nil }
            }
        }
    }

    /// Sends the current user's unsent attributes now and waits for the server (ours: RevenueCat
    /// sends them on its own schedule). Throws ``ErrorCode/invalidSubscriberAttributesError``
    /// when the server refuses the batch (which is then dropped: sending it again cannot help),
    /// or the network error (the batch is kept for the next try).
    public func syncAttributes() async throws {
        let user = appUserID
        let batch = pendingAttributes(for: user)
        guard !batch.isEmpty else { return }
        let body = try JSONEncoder().encode(SubscriberAttributesBody(attributes: batch))
        let path = "/v1/subscribers/\(user.pathSegmentEncoded)/attributes"
        do {
            _ = try await backend.perform(.post(path, json: body))
        } catch let error as PurchasesError where error.errorCode == .invalidSubscriberAttributesError {
            removeSent(batch, for: user)
            SDKLog.log(.error, "the server refused subscriber attributes: \(error)")
            throw error
        }
        removeSent(batch, for: user)
        SDKLog.log(.info, "sent \(batch.count) subscriber attribute(s)")
    }

    /// Forgets what was sent, unless it was set again since.
    private func removeSent(_ batch: [String: SubscriberAttributeValue], for user: String) {
        state.withLock { _ in
            var pending = pendingAttributes(for: user)
            for (key, sent) in batch where pending[key] == sent { pending[key] = nil }
            disk.write(pending, CacheFiles.fileName("attributes", user))
        }
    }

    private func pendingAttributes(for user: String) -> [String: SubscriberAttributeValue] {
        disk.read([String: SubscriberAttributeValue].self, CacheFiles.fileName("attributes", user)) ?? [:]
    }
}

extension Configuration {
    /// The clock in milliseconds since 1970, as the wire carries times.
    var nowMilliseconds: Int64 { now().epochMilliseconds }
}

/// The attribute setters under RevenueCat's `Purchases.shared.attribution`.
public struct Attribution: Sendable {
    let purchases: Purchases

    public func setAttributes(_ attributes: [String: String]) { purchases.setAttributes(attributes) }
    public func setEmail(_ email: String?) { purchases.setEmail(email) }
    public func setDisplayName(_ displayName: String?) { purchases.setDisplayName(displayName) }
    public func setPhoneNumber(_ phoneNumber: String?) { purchases.setPhoneNumber(phoneNumber) }
}
