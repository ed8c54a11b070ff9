import CountersignCore
import CountersignLedger
import CountersignStorage
import Foundation
import Hummingbird

/// Webhook deliveries of the app whose secret key is presented:
///
/// - `GET /v1/admin/webhooks/deliveries?status=pending|delivered|failed&limit=N`: newest first
///   (limit 1 to 500, default 100), each with its status, attempts, next attempt and last error.
/// - `POST /v1/admin/webhooks/deliveries/{event_id}/redeliver`: the event's deliveries queued
///   again, attempts counted afresh (the same event id, so receivers can tell a repeat).
/// - `POST /v1/admin/webhooks/test`: a `TEST` event to every endpoint of the app.
extension AdminRoutes {
    struct DeliveryList: Encodable {
        var deliveries: [CustomerDatabase.Delivery]
    }

    struct Queued: Encodable {
        var eventId: String
        var endpoints: Int

        enum CodingKeys: String, CodingKey {
            case eventId = "event_id", endpoints
        }
    }

    func addWebhookRoutes(to router: RouterGroup<ServerRequestContext>) {
        route(router, .get, "/v1/admin/webhooks/deliveries") { app, request, _ in
            let query = request.uri.queryParameters
            var status: CustomerDatabase.DeliveryStatus?
            if let text = query.get("status") {
                guard let known = CustomerDatabase.DeliveryStatus(rawValue: text) else {
                    throw APIError(
                        .invalidField, "status must be one of \(CustomerDatabase.DeliveryStatus.allCases.map(\.rawValue).joined(separator: ", "))")
                }
                status = known
            }
            var limit = 100
            if let text = query.get("limit") {
                guard let number = Int(text), (1...500).contains(number) else {
                    throw APIError(.invalidField, "limit must be a whole number from 1 to 500")
                }
                limit = number
            }
            return try await Self.json(DeliveryList(deliveries: try await store.deliveries(app: app.id, status: status, limit: limit)))
        }
        route(router, .post, "/v1/admin/webhooks/deliveries/:event_id/redeliver") { app, _, context in
            let id = context.parameters.get("event_id") ?? ""
            guard id.utf8.count <= 64, try await store.redeliver(app: app.id, eventId: id, now: now()) else {
                throw APIError(.notFound, "app '\(app.id)' has no webhook delivery of event '\(id.prefix(64))'")
            }
            context.logger.info("webhook redelivery queued", metadata: ["app": "\(app.id)", "event": "\(id)"])
            return try await Self.json(Queued(eventId: id, endpoints: app.webhooks?.count ?? 0), status: .accepted)
        }
        route(router, .post, "/v1/admin/webhooks/test") { app, _, _ in
            guard let endpoints = app.webhooks, !endpoints.isEmpty else {
                throw APIError(.invalidField, "app '\(app.id)' has no webhooks configured in countersign.json")
            }
            let event = WebhookEvent.test(app: app, now: now())
            try await store.emit(event, app: app, now: now())
            return try await Self.json(Queued(eventId: event.id, endpoints: endpoints.count), status: .accepted)
        }
    }
}
