import ArgumentParser
import CountersignCore
import Crypto
import Foundation

struct VerifyWebhookCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "verify-webhook",
        abstract: "Check a captured webhook delivery offline.",
        discussion: """
            Reads the raw HTTP/1.1 POST the server sent (\\r\\n or \\n line ends). Prints 'verified' and \
            exits 0, or 'failed: <reason>' and exits 1. Unreadable input prints 'error: <problem>' and \
            exits 2. The signature covers the URL path, X-Request-Time and the body; check the event id \
            and the request time's age yourself to refuse replays.
            """
    )

    @Option(name: .customLong("root-key"), help: "A pinned root public key (base64); repeat to pin several.")
    var rootKeys: [String]

    @Option(help: "The captured delivery (request line, headers, body).")
    var request: String

    @Option(help: "Check with the clock set to this Unix time (seconds).")
    var at: Int?

    func run() throws {
        guard !rootKeys.isEmpty else { throw CLIError("give at least one --root-key") }
        let roots = try rootKeys.map { key throws(CLIError) in
            try CLIError.wrapping("--root-key") { try Curve25519.Signing.PublicKey(base64: key, name: "root key") }
        }
        let captured = try CLIError.wrapping("malformed capture") { try CapturedWebhook(request: readInputFile(request, what: "request")) }
        var configuration = SignatureVerifier.Configuration(rootKeys: roots)
        if let at {
            let clock = Date(timeIntervalSince1970: TimeInterval(at))
            configuration.now = { clock }
        }
        let outcome = SignatureVerifier(configuration: configuration).verify(request: captured.request, response: captured.delivery)
        print(outcome)
        if !outcome.isVerified { throw ExitCode(1) }
    }
}
