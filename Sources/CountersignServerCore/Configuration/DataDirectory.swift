import CountersignCore
import Foundation

/// Where things live in a server's data directory (`serve --data-dir`), known in this one place
/// by the server, the CLI and the tests.
public struct DataDirectory: Sendable, Hashable {
    public let url: URL

    public init(_ url: URL) {
        self.url = url
    }

    /// The deployment's apps and keys, `countersign.json` (0600: it holds secret API keys).
    public var configurationFile: URL { url.appendingPathComponent("countersign.json") }
    /// The embedded SQLite database, used unless `--database` names another.
    public var database: URL { url.appendingPathComponent("countersign.sqlite") }
    /// Managed-mode signing keys.
    public var keys: URL { url.appendingPathComponent("keys") }
    /// The managed root key (0600).
    public var rootKey: URL { keys.appendingPathComponent("root.key") }
    /// The managed root's public key, base64, to pin in apps.
    public var rootPublicKey: URL { keys.appendingPathComponent("root.pub") }
    /// Managed-mode intermediate keys, one file each.
    public var intermediates: URL { keys.appendingPathComponent("intermediates") }
    /// The test store's certificate authority.
    public var testStore: URL { url.appendingPathComponent("test-store") }
    /// A name for what this directory's test store signs (its folder name).
    public var name: String { url.lastPathComponent }
}
