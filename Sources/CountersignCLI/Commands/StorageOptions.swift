import ArgumentParser
import CountersignServer
import CountersignStorage
import Foundation

/// Where a server keeps its state: the options `serve` and both `import` commands share, so an
/// import opens the database the server uses from the same words.
struct StorageOptions: ParsableArguments {
    @Option(name: .customLong("data-dir"), help: "The server's data directory.")
    var dataDir = "countersign-data"

    @Option(help: "postgres://user:password@host:5432/db, or an SQLite file (default: DATA/countersign.sqlite; env COUNTERSIGN_DATABASE_URL).")
    var database: String?

    @Option(name: .customLong("database-connections"), help: "PostgreSQL connections this process keeps (2 to 1000, split between its event loops).")
    var databaseConnections = Database.defaultPostgresConnections

    @Option(help: "The apps' configuration file (default: DATA/countersign.json, written with the demo app on serve's first start).")
    var config: String?

    func validate() throws {
        guard (2...1_000).contains(databaseConnections) else { throw ValidationError("--database-connections must be 2 to 1000") }
    }

    /// A server configuration with these options. The database comes from `--database`, else
    /// `COUNTERSIGN_DATABASE_URL` (a URL holds a password: the environment keeps it out of `ps`).
    func serverConfiguration() throws -> ServerConfiguration {
        var configuration = ServerConfiguration(dataDirectory: URL(fileURLWithPath: dataDir))
        configuration.configurationFile = config.map { URL(fileURLWithPath: $0) }
        configuration.databaseConnections = databaseConnections
        if let database = database ?? ProcessInfo.processInfo.environment["COUNTERSIGN_DATABASE_URL"] {
            configuration.database = try CLIError.wrapping("--database") { try DatabaseLocation(argument: database) }
        }
        return configuration
    }
}
