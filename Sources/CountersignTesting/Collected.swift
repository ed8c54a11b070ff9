import Foundation

/// Values a test gathers from callbacks that may run on any thread, in arrival order.
public final class Collected<Element>: @unchecked Sendable {
    private let lock = NSLock()
    private var values: [Element] = []

    public init() {}

    public func add(_ value: Element) { lock.withLock { values.append(value) } }

    public var all: [Element] { lock.withLock { values } }
}
