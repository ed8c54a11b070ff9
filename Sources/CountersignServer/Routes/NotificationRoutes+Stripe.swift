import CountersignCore
import CountersignServerCore
import Foundation
import HTTPTypes
import Hummingbird

/// `POST /v1/notifications/stripe/{app_id}`: the app's Stripe webhook endpoint (docs/stripe.md).
/// Authenticated by `Stripe-Signature` over the body's exact bytes with one of the app's
/// `webhookSecrets`, within five minutes of the server's clock; the event itself is used only to
/// find which subscription to read again from Stripe's API. Answered 200 once applied (or once
/// known: a duplicate, or an event that changes no subscription), so Stripe retries anything
/// the server did not keep.
extension NotificationRoutes {
    static let stripeSignature = HTTPField.Name("Stripe-Signature")!
    static let stripeEventLimit = 1 << 20

    func addStripe(to router: ServerRouter) {
        router.post("/v1/notifications/stripe/:app_id") { request, context in
            let id = context.parameters.get("app_id") ?? ""
            guard let app = deployment.apps.first(where: { $0.id == id }) else {
                throw APIError(.notFound, "no app '\(id.prefix(64))' on this server")
            }
            let (settings, _) = try stripe.client(for: app)
            // An event with an invoice of many lines can pass the API's 64 KiB: up to 1 MiB here.
            let body: Data
            do {
                body = Data(try await request.body.collect(upTo: Self.stripeEventLimit).readableBytesView)
            } catch {
                throw APIError(.bodyTooLarge, "a Stripe event is at most \(Self.stripeEventLimit) bytes")
            }
            do throws(StripeSignature.Refusal) {
                try StripeSignature.verify(
                    header: request.headers[Self.stripeSignature], payload: Array(body), secrets: settings.webhookSecrets, now: now())
            } catch {
                context.logger.notice("Stripe event refused", metadata: ["app": "\(app.id)", "reason": "\(error)"])
                throw APIError(.stripeSignatureInvalid, error.description)
            }
            let event: Stripe.Event
            do {
                event = try Stripe.decoder().decode(Stripe.Event.self, from: body)
            } catch {
                throw APIError(.malformedJSON, "the body is not a Stripe event (id, type and data.object)")
            }
            var answer = EventAnswer(id: event.id, status: "applied")
            switch try await stripe.apply(event, app: app, now: now()) {
            case .applied: break
            case .duplicate: answer.status = "duplicate"
            case .ignored(let reason, let code): (answer.status, answer.reason, answer.code) = ("ignored", reason, code?.rawValue)
            }
            context.logger.info("Stripe event", metadata: ["app": "\(app.id)", "type": "\(event.type)", "status": "\(answer.status)"])
            let json = try WireJSON.encode(answer)
            return Response(status: .ok, headers: [.contentType: "application/json"], body: .init(byteBuffer: ByteBuffer(bytes: json)))
        }
    }
}

/// What became of a Stripe event: `{"id", "status"}`, and for an ignored one its `reason` and,
/// when it is a refusal, its `code`.
struct EventAnswer: Encodable {
    var id: String
    var status: String
    var reason: String?
    var code: Int?
}
