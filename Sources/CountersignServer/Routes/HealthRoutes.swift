import CountersignCore
import CountersignServerCore
import Foundation
import HTTPTypes
import Hummingbird

/// `GET /v1/health`: signed, unauthenticated, with the signing key's status.
struct HealthAnswer: Sendable {
    var status: String
    var intermediateExpires: String
    var intermediateDaysLeft: Int
    var warnings: [String]
}

extension HealthAnswer {
    /// The answer's JSON (`intermediate_days_left`, `intermediate_expires`, `status`,
    /// `warnings`, keys sorted as every answer's are), written without `JSONEncoder`: monitors
    /// poll this endpoint. `LeanAnswerTests` holds it to golden files.
    func leanJSON() -> [UInt8] {
        var writer = LeanJSONWriter(capacity: 160)
        var first = true
        writer.byte(UInt8(ascii: "{"))
        writer.member("intermediate_days_left", first: &first)
        writer.integer(Int64(intermediateDaysLeft))
        writer.member("intermediate_expires", intermediateExpires, first: &first)
        writer.member("status", status, first: &first)
        writer.member("warnings", first: &first)
        writer.byte(UInt8(ascii: "["))
        for (index, warning) in warnings.enumerated() {
            if index > 0 { writer.byte(UInt8(ascii: ",")) }
            writer.string(warning)
        }
        writer.raw("]}\n")
        return writer.bytes
    }
}

extension ServerRouter {
    func addHealthRoutes(signing: ResponseSigning) {
        group().add(middleware: signing).group(context: SignedRequestContext.self).get("/v1/health") { request, context -> Response in
            let certificate = signing.keys.currentSigner.key.certificate
            let daysLeft = signing.keys.daysUntilExpiry
            var warnings: [String] = []
            if daysLeft * 86_400 <= SigningKeyRing.renewalWindow {
                warnings.append("intermediate key expires in \(Int(daysLeft.rounded(.down))) days")
            }
            let answer = HealthAnswer(
                status: warnings.isEmpty ? "ok" : "degraded",
                intermediateExpires: WireDate.format(certificate.expirationDate),
                intermediateDaysLeft: Int(daysLeft.rounded(.down)),
                warnings: warnings
            )
            return try context.respond(to: request, with: SignedAnswer(body: Data(answer.leanJSON()), cacheable: false))
        }
    }
}
