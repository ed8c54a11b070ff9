import Foundation

/// A small thread-safe map that forgets everything when it fills up.
///
/// Used for verification results that are expensive to compute and rarely change (checked
/// intermediates, certificate chains): when it is full the entries are most likely stale.
public final class BoundedCache<Key: Hashable & Sendable, Value: Sendable>: @unchecked Sendable {
    private let lock = NSLock()
    private var entries: [Key: Value] = [:]
    private let capacity: Int

    public init(capacity: Int) {
        precondition(capacity > 0, "a cache needs room for at least one entry")
        self.capacity = capacity
    }

    public subscript(key: Key) -> Value? {
        get { lock.withLock { entries[key] } }
        set {
            lock.withLock {
                if entries.count >= capacity && entries[key] == nil { entries.removeAll(keepingCapacity: true) }
                entries[key] = newValue
            }
        }
    }
}
