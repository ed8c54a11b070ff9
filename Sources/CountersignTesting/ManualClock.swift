import Foundation

/// A clock a test moves by hand; pass `{ clock.now }` where code takes a `now` closure.
public final class ManualClock: @unchecked Sendable {
    private let lock = NSLock()
    private var value: Date

    public init(_ start: Date) {
        value = start
    }

    public var now: Date {
        get { lock.withLock { value } }
        set { lock.withLock { value = newValue } }
    }
}
