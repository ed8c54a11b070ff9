import ArgumentParser
import CountersignCore
import CountersignServerCore
import Crypto
import Foundation

struct VerifyCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "verify",
        abstract: "Check a captured request/response pair offline.",
        discussion: """
            Reads raw HTTP/1.1 text (\\r\\n or \\n line ends). Prints 'verified' and exits 0, or \
            'failed: <reason>' and exits 1. Unreadable input prints 'error: <problem>' and exits 2.
            """
    )

    @Option(name: .customLong("root-key"), help: "A pinned root public key (base64); repeat to pin several.")
    var rootKeys: [String]

    @Option(help: "The captured request (request line, headers, optional body).")
    var request: String

    @Option(help: "The captured response (status line, headers, body).")
    var response: String

    @Option(help: "Check with the clock set to this Unix time (seconds).")
    var at: Int?

    @Option(name: .customLong("api-key"), help: "The API key the request was sent with, if the capture lacks it.")
    var apiKey: String?

    @Flag(help: "Accept any ETag shape and any JSON body, as RevenueCat's own captures need.")
    var revenuecatCompatible = false

    func run() throws {
        guard !rootKeys.isEmpty else { throw CLIError("give at least one --root-key") }
        let roots = try rootKeys.map { key throws(CLIError) in
            try CLIError.wrapping("--root-key") { try Curve25519.Signing.PublicKey(base64: key, name: "root key") }
        }
        let exchange = try CLIError.wrapping("malformed capture") {
            try CapturedExchange(
                request: readInputFile(request, what: "request"),
                response: readInputFile(response, what: "response"),
                apiKey: apiKey
            )
        }
        var configuration = SignatureVerifier.Configuration(rootKeys: roots)
        if let at {
            let clock = Date(timeIntervalSince1970: TimeInterval(at))
            configuration.now = { clock }
        }
        if revenuecatCompatible { configuration.etagFormat = .unchecked }
        let outcome = SignatureVerifier(configuration: configuration).verify(
            request: exchange.request,
            response: exchange.response,
            bodyFormat: revenuecatCompatible ? .json : .jsonObject
        )
        print(outcome)
        if !outcome.isVerified { throw ExitCode(1) }
    }
}
