import ArgumentParser
import Countersign
import CountersignServer
import Foundation

@main
struct CountersignCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "countersign",
        abstract: "Self-hosted, signed in-app purchase entitlements.",
        subcommands: [
            ServeCommand.self, DemoCommand.self, KeysCommand.self, VerifyCommand.self, VerifyWebhookCommand.self, VerifyTokenCommand.self,
            ProxyCommand.self, StoreCommand.self, ClientCommand.self, ImportCommand.self,
        ]
    )

    /// Runs the command and turns every error into one line on stderr and a non-zero exit:
    /// 1 for a failed verification, 2 for bad input, ArgumentParser's own codes for usage errors.
    static func main() async {
        // The commands print what the SDK found themselves; its log adds only warnings and errors.
        Purchases.logLevel = .warn
        do {
            var command = try parseAsRoot()
            if command is ServeCommand || command is DemoCommand {
                // Still on the main thread: nothing has been awaited yet.
                ServerProcess.prepare()
            }
            if var command = command as? AsyncParsableCommand {
                try await command.run()
            } else {
                try command.run()
            }
        } catch let error as CLIError {
            FileHandle.standardError.write(Data("error: \(error.message)\n".utf8))
            Foundation.exit(2)
        } catch {
            exit(withError: error)
        }
    }
}

/// Bad input to the command line: printed as `error: <message>` with exit code 2.
struct CLIError: Error, CustomStringConvertible {
    let message: String
    init(_ message: String) { self.message = message }
    var description: String { message }
}

extension CLIError {
    /// Runs `body`, turning any error into a CLIError that starts with `context`.
    static func wrapping<T>(_ context: String, _ body: () throws -> T) throws(CLIError) -> T {
        do {
            return try body()
        } catch let error as CLIError {
            throw error
        } catch {
            throw CLIError("\(context): \(error)")
        }
    }
}

/// Reads a whole file, naming it in the error.
func readInputFile(_ path: String, what: String) throws(CLIError) -> Data {
    guard FileManager.default.fileExists(atPath: path) else { throw CLIError("\(what) file not found: \(path)") }
    do {
        return try Data(contentsOf: URL(fileURLWithPath: path))
    } catch {
        throw CLIError("cannot read \(what) file \(path)")
    }
}
