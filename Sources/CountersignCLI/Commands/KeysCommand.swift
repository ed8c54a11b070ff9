import ArgumentParser
import CountersignCore
import CountersignServerCore
import Crypto
import Foundation

struct KeysCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "keys",
        abstract: "Create and inspect root and intermediate signing keys.",
        subcommands: [Root.self, Intermediate.self, Show.self]
    )

    struct Root: ParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Create a root key: writes DIR/root.key (0600) and prints the public key last."
        )

        @Option(help: "Directory to write root.key into (created if needed).")
        var out: String

        @Flag(help: "Replace an existing root.key.")
        var force = false

        func run() throws {
            let directory = URL(fileURLWithPath: out)
            let file = directory.appendingPathComponent("root.key")
            if FileManager.default.fileExists(atPath: file.path) && !force {
                throw CLIError("\(file.path) already exists; pass --force to replace it (apps pinning the old root will stop verifying)")
            }
            try CLIError.wrapping("cannot create \(directory.path)") {
                try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
            }
            let root = RootSigningKey()
            try CLIError.wrapping("cannot write root key") { try KeyFile.writePrivate(KeyFile.encode(root), to: file) }
            print("wrote \(file.path) (keep it offline; pin the public key below in your app)")
            print(root.publicKey.rawRepresentation.base64EncodedString())
        }
    }

    struct Intermediate: ParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Issue an intermediate key signed by a root key."
        )

        @Option(help: "The root key file (root.key).")
        var root: String

        @Option(help: "Days the intermediate stays valid (rounded up to a UTC day boundary).")
        var days: Int = 30

        @Option(help: "The intermediate key file to write (0600).")
        var out: String

        func run() throws {
            guard (1...3650).contains(days) else { throw CLIError("--days must be between 1 and 3650, got \(days)") }
            let rootKey = try CLIError.wrapping("root key \(root)") {
                try KeyFile.loadRoot(from: URL(fileURLWithPath: root))
            }
            let intermediate = try rootKey.issueIntermediate(validForDays: days)
            let file = URL(fileURLWithPath: out)
            try CLIError.wrapping("cannot write intermediate key") {
                try KeyFile.writePrivate(KeyFile.encode(intermediate), to: file)
            }
            print("wrote \(file.path)")
            print("expires \(formatDay(intermediate.certificate.expirationDate))")
            print(intermediate.certificate.publicKey.base64EncodedString())
        }
    }

    struct Show: ParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Print a key file's kind, public key and (for an intermediate) expiry."
        )

        @Argument(help: "A root or intermediate key file.")
        var file: String

        @Option(name: .customLong("root-key"), help: "A root public key (base64) to check an intermediate against.")
        var rootKey: String?

        func run() throws {
            let data = try readInputFile(file, what: "key")
            let contents = try CLIError.wrapping("malformed key file \(file)") { try KeyFile.decode(data) }
            switch contents {
            case .root(let root):
                print("kind: root")
                print("public key: \(root.publicKey.rawRepresentation.base64EncodedString())")
            case .intermediate(let key):
                try show(key.certificate, hasPrivateKey: true)
            case .intermediateCertificate(let certificate):
                try show(certificate, hasPrivateKey: false)
            }
        }

        private func show(_ certificate: IntermediateCertificate, hasPrivateKey: Bool) throws {
            let now = Date()
            print("kind: intermediate\(hasPrivateKey ? "" : " (public half only)")")
            print("public key: \(certificate.publicKey.base64EncodedString())")
            print(
                "expires: \(formatDay(certificate.expirationDate)) (day \(certificate.expirationDays))\(certificate.isValid(at: now) ? "" : " EXPIRED")"
            )
            if let rootKey {
                let root = try CLIError.wrapping("--root-key") { try Curve25519.Signing.PublicKey(base64: rootKey, name: "root key") }
                print("issued by root: \(certificate.isIssued(by: root) ? "yes" : "NO")")
            }
        }
    }
}

func formatDay(_ date: Date) -> String {
    date.formatted(.iso8601)
}
