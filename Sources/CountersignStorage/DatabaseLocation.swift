import CountersignCore
import CountersignLedger
import CountersignServerCore
import Foundation

/// Where the server keeps its data: SQLite in the data directory (the embedded default) or a
/// PostgreSQL server (the scale-out path: any number of stateless servers share it).
public enum DatabaseLocation: Sendable, Hashable, CustomStringConvertible {
    case sqlite(path: String)
    case postgres(url: String)

    /// The default: `DATA/countersign.sqlite`.
    public static func embedded(in dataDirectory: URL) -> DatabaseLocation {
        .sqlite(path: DataDirectory(dataDirectory).database.path)
    }

    /// Parses `--database`: `postgres://user:pass@host:5432/db`,
    /// `postgres+uds://user:pass@localhost/path/of/the/socket#db` (PostgreSQL on this machine
    /// through its Unix domain socket, e.g. `/var/run/postgresql/.s.PGSQL.5432`),
    /// `sqlite:///absolute/path` or a plain file path (SQLite).
    public init(argument: String) throws(ConfigurationError) {
        if ["postgres://", "postgresql://", "postgres+uds://", "postgresql+uds://"].contains(where: argument.hasPrefix) {
            self = .postgres(url: argument)
        } else if argument.hasPrefix("sqlite://") {
            let path = String(argument.dropFirst("sqlite://".count))
            guard !path.isEmpty else { throw ConfigurationError("--database sqlite:// needs a file path") }
            self = .sqlite(path: path)
        } else if argument.contains("://") {
            throw ConfigurationError("--database must be a postgres:// URL or an SQLite file path")
        } else {
            self = .sqlite(path: argument)
        }
    }

    /// Without the password.
    public var description: String {
        switch self {
        case .sqlite(let path): "sqlite:\(path)"
        case .postgres(let url):
            if let components = URLComponents(string: url), components.password != nil {
                if components.scheme?.hasSuffix("+uds") == true {
                    "postgres+uds://\(components.user ?? "")@\(components.host ?? "")\(components.path)#\(components.fragment ?? "")"
                } else {
                    "postgres://\(components.user ?? "")@\(components.host ?? ""):\(components.port ?? 5432)\(components.path)"
                }
            } else {
                "postgres (url given)"
            }
        }
    }
}
