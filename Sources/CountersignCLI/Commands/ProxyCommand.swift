import ArgumentParser
import CountersignCore
import CountersignProxy
import CountersignServerCore
import Foundation
import Hummingbird

/// `countersign proxy`: a tampering HTTP proxy in front of a server.
struct ProxyCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "proxy",
        abstract: "Forward to a server and tamper with its answers the way on-device piracy tools do.",
        discussion: "Attacks: \(TamperingProxy.Attack.allCases.map(\.rawValue).joined(separator: ", "))."
    )

    @Option(help: "HOST:PORT to listen on (port 0: any free port).")
    var listen = "127.0.0.1:8081"

    @Option(help: "The server to forward to, e.g. http://127.0.0.1:8080.")
    var upstream: String

    @Option(help: "The attack.")
    var attack: String = "none"

    @Option(help: "The entitlement grant-entitlement, foreign-root and expired-intermediate add.")
    var entitlement = "pro"

    @Option(name: .customLong("other-user"), help: "Whose answer cross-user serves.")
    var otherUser = "paying-user"

    @Option(name: .customLong("expired-intermediate"), help: "An expired intermediate key file of the real root, for expired-intermediate.")
    var expiredIntermediate: String?

    @Option(name: .customLong("unavailable-count"), help: "For unavailable: how many requests are refused before the proxy forwards again.")
    var unavailableCount = 2

    @Option(name: .customLong("unavailable-status"), help: "For unavailable: 503 or 429.")
    var unavailableStatus = 503

    @Option(
        name: .customLong("stolen-intermediate"), help: "A valid intermediate key file of the real root (keys/intermediate-*.key), for future-time.")
    var stolenIntermediate: String?

    func run() async throws {
        guard let attack = TamperingProxy.Attack(rawValue: attack) else {
            throw CLIError("unknown attack '\(attack)'; one of \(TamperingProxy.Attack.allCases.map(\.rawValue).joined(separator: ", "))")
        }
        guard let upstreamURL = URL(string: upstream), upstreamURL.scheme == "http" || upstreamURL.scheme == "https" else {
            throw CLIError("--upstream '\(upstream)' is not an http(s) URL")
        }
        let parts = listen.split(separator: ":", omittingEmptySubsequences: false)
        guard parts.count == 2, let port = Int(parts[1]), (0...65_535).contains(port) else { throw CLIError("--listen must be HOST:PORT") }
        var configuration = TamperingProxy.Configuration(upstream: upstreamURL, attack: attack)
        configuration.entitlement = entitlement
        configuration.otherUser = otherUser
        guard unavailableStatus == 503 || unavailableStatus == 429, unavailableCount >= 0 else {
            throw CLIError("--unavailable-status must be 503 or 429 and --unavailable-count 0 or more")
        }
        configuration.unavailableCount = unavailableCount
        configuration.unavailableStatus = unavailableStatus
        if let expiredIntermediate {
            configuration.expiredIntermediate = try CLIError.wrapping("--expired-intermediate") {
                try KeyFile.loadIntermediate(from: URL(fileURLWithPath: expiredIntermediate))
            }
        }
        if let stolenIntermediate {
            configuration.stolenIntermediate = try CLIError.wrapping("--stolen-intermediate") {
                try KeyFile.loadIntermediate(from: URL(fileURLWithPath: stolenIntermediate))
            }
        }
        let proxy = try CLIError.wrapping("proxy") { try TamperingProxy(configuration: configuration) }
        let host = String(parts[0])
        let application = proxy.makeApplication(host: host, port: port) { port in
            FileHandle.standardOutput.write(
                Data("proxying http://\(host):\(port) → \(upstreamURL.absoluteString) with attack \(attack.rawValue)\n".utf8))
        }
        try await application.runService()
    }
}
