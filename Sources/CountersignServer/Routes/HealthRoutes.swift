import CountersignCore
import Foundation
import HTTPTypes
import Hummingbird

/// `GET /v1/health`: signed, unauthenticated, with the signing key's status.
struct HealthAnswer: Codable, Sendable {
    var status: String
    var intermediateExpires: String
    var intermediateDaysLeft: Int
    var warnings: [String]

    enum CodingKeys: String, CodingKey {
        case status
        case intermediateExpires = "intermediate_expires"
        case intermediateDaysLeft = "intermediate_days_left"
        case warnings
    }
}

extension ServerRouter {
    func addHealthRoutes(signing: ResponseSigning) {
        get("/v1/health") { request, context in
            try await signing.respond(to: request, context: context, endpoint: SignedEndpoint(authenticated: false)) {
                let certificate = signing.keys.currentSigner.key.certificate
                let daysLeft = signing.keys.daysUntilExpiry
                var warnings: [String] = []
                if daysLeft * 86_400 <= SigningKeyRing.renewalWindow {
                    warnings.append("intermediate key expires in \(Int(daysLeft.rounded(.down))) days")
                }
                let answer = HealthAnswer(
                    status: warnings.isEmpty ? "ok" : "degraded",
                    intermediateExpires: certificate.expirationDate.formatted(.iso8601),
                    intermediateDaysLeft: Int(daysLeft.rounded(.down)),
                    warnings: warnings
                )
                return try SignedAnswer.json(answer, cacheable: false)
            }
        }
    }
}
