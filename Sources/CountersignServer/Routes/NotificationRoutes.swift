import CountersignAppStore
import CountersignCore
import CountersignServerCore
import CountersignStorage
import Foundation
import HTTPTypes
import Hummingbird
import Logging

/// `POST /v1/notifications/apple`: App Store Server Notifications V2. Authenticated by Apple's
/// signature, not by an API key; answered 200 only once the notification is stored, so Apple
/// retries anything we did not keep.
struct NotificationRoutes: Sendable {
    let deployment: DeploymentConfiguration
    let store: CustomerDatabase
    let verifiers: [String: SignedDataVerifier]
    let stripe: StripeWeb
    let now: @Sendable () -> Date

    struct Body: Decodable {
        var signedPayload: String
    }

    func add(to router: ServerRouter) {
        addStripe(to: router)
        router.post("/v1/notifications/apple") { request, context in
            // Anything but a 200 (a refusal, or an error RequestObservation logs) makes Apple retry.
            var request = request
            let body = try await JSONBody.body(Body.self, of: &request, context: context)
            guard let bundleId = SignedDataVerifier.claimedBundleId(ofNotification: body.signedPayload) else {
                throw APIError(.invalidStoreSignature, "signedPayload is not an App Store notification: no JWS whose payload names a bundleId")
            }
            guard let app = deployment.apps.first(where: { $0.bundleId == bundleId }), let verifier = verifiers[app.id] else {
                throw APIError(.wrongApp, "the notification is for bundle \"\(bundleId.prefix(155))\", not an app this server serves")
            }
            let notification: SignedDataVerifier.VerifiedNotification
            do throws(SignedDataError) {
                notification = try await verifier.verifyNotification(body.signedPayload)
            } catch {
                context.logger.notice(
                    "notification refused",
                    metadata: [
                        "store_status": "\(error.status.rawValue)", "store_reason": "\(error.reason.rawValue)",
                    ])
                if error.reason == .futureSignedDate { ServerClock.warnBehind(context.logger, detail: "\(error)") }
                throw APIError(storeRefusal: error, of: "signedPayload")
            }
            let outcome = try await store.apply(notification, app: app, now: now())
            context.logger.info(
                "notification stored",
                metadata: [
                    "type": "\(notification.notification.notificationType)", "outcome": "\(outcome.rawValue)",
                ])
            return Response(status: .ok, headers: [.contentType: "application/json"], body: .init(byteBuffer: ByteBuffer(string: "{}\n")))
        }
    }
}

extension APIError {
    /// Refused App Store signed data: the API code that says what kind of problem it is, with
    /// Apple's status and our reason alongside.
    init(storeRefusal error: SignedDataError, of field: String) {
        let code: APIErrorCode =
            switch error.status {
            case .invalidAppIdentifier: .wrongApp
            case .invalidEnvironment: .wrongEnvironment
            // Apple's VERIFICATION_FAILURE all the same (store_status says so), but not the data's
            // fault: the server's clock is behind, and the same data is taken once it catches up.
            case .verificationFailure where error.reason == .futureSignedDate: .signedDateAhead
            case .verificationFailure, .invalidCertificate, .invalidChainLength: .invalidStoreSignature
            }
        self.init(code, "\(field) was refused: \(error)", storeStatus: error.status.rawValue, storeReason: error.reason.rawValue)
    }
}

/// The server's clock against the store's: signed data dated ahead of it means this machine's
/// clock is behind (or the data is forged, which the signature check already rules out for
/// anything it lets through this far). Said at warning level, so an operator fixes NTP.
enum ServerClock {
    static func warnBehind(_ logger: Logger, detail: String) {
        logger.warning(
            "store-signed data is dated ahead of this server's clock; is the clock behind? (the data is refused until it catches up)",
            metadata: ["detail": "\(detail)"])
    }
}
