import CountersignCore
import Foundation

/// The SDK's cache files: small JSON files in its storage directory, written atomically under a lock.
final class CacheFiles: @unchecked Sendable {
    let directory: URL
    private let lock = NSLock()

    init(directory: URL) throws {
        self.directory = directory
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
    }

    func read<T: Decodable>(_ type: T.Type, _ name: String) -> T? {
        lock.withLock {
            guard let data = try? Data(contentsOf: directory.appendingPathComponent(name)) else { return nil }
            return try? JSONDecoder().decode(T.self, from: data)
        }
    }

    func write(_ value: some Encodable, _ name: String) {
        lock.withLock {
            guard let data = try? JSONEncoder().encode(value) else { return }
            try? data.write(to: directory.appendingPathComponent(name), options: .atomic)
        }
    }

    func remove(_ name: String) {
        lock.withLock { _ = try? FileManager.default.removeItem(at: directory.appendingPathComponent(name)) }
    }

    /// A file name for any key (an app user id, a path): its SHA-256, so no key can escape the
    /// directory.
    static func fileName(_ prefix: String, _ key: String) -> String {
        "\(prefix)-\(SHA256Hex.of(Data(key.utf8)).prefix(32)).json"
    }
}

/// ETag → answer, per path: only answers the current mode accepts are stored and sent back.
final class ETagCache: @unchecked Sendable {
    struct Entry: Codable, Sendable {
        var etag: String
        var body: Data
        var verification: VerificationResult
    }

    private let store: CacheFiles
    private let lock = NSLock()
    private var entries: [String: Entry]
    static let fileName = "etags.json"

    init(store: CacheFiles) {
        self.store = store
        entries = store.read([String: Entry].self, Self.fileName) ?? [:]
    }

    func entry(for path: String, acceptable: (VerificationResult) -> Bool) -> Entry? {
        lock.withLock { entries[path].flatMap { acceptable($0.verification) ? $0 : nil } }
    }

    func store(_ entry: Entry, for path: String) {
        let snapshot = lock.withLock {
            entries[path] = entry; return entries
        }
        store.write(snapshot, Self.fileName)
    }

    func remove(_ path: String) {
        let snapshot = lock.withLock {
            entries[path] = nil; return entries
        }
        store.write(snapshot, Self.fileName)
    }

    func clear() {
        lock.withLock { entries = [:] }
        store.remove(Self.fileName)
    }

    var count: Int { lock.withLock { entries.count } }
}

/// A cached answer on disk: CustomerInfo per app user id, the product→entitlement mapping.
struct CachedAnswer: Codable, Sendable {
    var body: Data
    var verification: VerificationResult
    var failure: String?
    var fetchedAt: Date
}

/// The latest signed request time of any verified answer, kept on disk. The server vouched for
/// that time, so the device clock can never be earlier than it: a clock set back cannot make an
/// expired intermediate key valid again, nor an ended entitlement active.
final class VerifiedTimeFloor: @unchecked Sendable {
    private let store: CacheFiles
    private let lock = NSLock()
    private var current: Date?
    static let fileName = "verified-time.json"

    init(store: CacheFiles) {
        self.store = store
        current = store.read(Date.self, Self.fileName)
    }

    var value: Date? { lock.withLock { current } }

    func raise(to date: Date) {
        let changed = lock.withLock { () -> Bool in
            guard current.map({ date > $0 }) ?? true else { return false }
            current = date
            return true
        }
        if changed { store.write(date, Self.fileName) }
    }
}
