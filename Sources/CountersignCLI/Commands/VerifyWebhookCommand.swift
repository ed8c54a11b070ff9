import ArgumentParser
import CountersignCore
import CountersignServerCore
import Crypto
import Foundation

struct VerifyWebhookCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "verify-webhook",
        abstract: "Check a captured webhook delivery offline.",
        discussion: """
            Reads the raw HTTP/1.1 POST the server sent (\\r\\n or \\n line ends). Prints 'verified' and \
            exits 0, or 'failed: <reason>' and exits 1. Unreadable input prints 'error: <problem>' and \
            exits 2. The signature covers the receiving endpoint (--url: host, port and path), the app \
            (--app-id), X-Request-Time and the body; check the event id and the request time's age \
            yourself to refuse replays.
            """
    )

    @Option(name: .customLong("root-key"), help: "A pinned root public key (base64); repeat to pin several.")
    var rootKeys: [String]

    @Option(help: "The captured delivery (request line, headers, body).")
    var request: String

    @Option(name: .customLong("app-id"), help: "The app the receiver serves (its id in countersign.json).")
    var appId: String

    @Option(help: "The receiver's endpoint URL, as configured in the app's webhooks.")
    var url: String

    @Option(help: "Check with the clock set to this Unix time (seconds).")
    var at: Int?

    func run() throws {
        guard !rootKeys.isEmpty else { throw CLIError("give at least one --root-key") }
        let roots = try rootKeys.map { key throws(CLIError) in
            try CLIError.wrapping("--root-key") { try Curve25519.Signing.PublicKey(base64: key, name: "root key") }
        }
        let captured = try CLIError.wrapping("malformed capture") { try CapturedWebhook(request: readInputFile(request, what: "request")) }
        guard let parts = WebhookSignature.requestParts(appId: appId, url: url) else {
            throw CLIError("--url must be an absolute http(s) URL with a host")
        }
        var configuration = SignatureVerifier.Configuration(rootKeys: roots)
        if let at {
            let clock = Date(timeIntervalSince1970: TimeInterval(at))
            configuration.now = { clock }
        }
        let outcome = SignatureVerifier(configuration: configuration).verify(request: parts, response: captured.delivery)
        print(outcome)
        if !outcome.isVerified { throw ExitCode(1) }
    }
}
