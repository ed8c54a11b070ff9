import Foundation

/// What a webhook delivery's signature binds besides its request time and body: the endpoint
/// it was sent to and the app it is about. A delivery captured at one receiver therefore fails
/// at another endpoint (another host, port or path) and for another app.
///
/// The signed message is the answers' (docs/wire-format.md) with the parts a delivery has: the
/// URL's path where an answer has its path, and where an answer has `X-Headers-Hash`, the fields
/// hash of `app_id` and `endpoint` (the URL's lowercased host, `:port` unless the scheme's
/// default, and its path): `app_id,endpoint:sha256:<hex>`. The hash is of fixed shape, so no
/// byte can move between it and its neighbours.
public enum WebhookSignature {
    /// The signed request parts of a delivery from `appId` to `url` (the endpoint as configured,
    /// an absolute http(s) URL); nil when `url` has no host.
    public static func requestParts(appId: String, url: String) -> SignedRequestParts? {
        guard let components = URLComponents(string: url), let host = components.host?.lowercased(), !host.isEmpty else { return nil }
        let path = components.percentEncodedPath.isEmpty ? "/" : components.percentEncodedPath
        let defaultPort = components.scheme?.lowercased() == "https" ? 443 : 80
        let port = components.port.flatMap { $0 == defaultPort ? nil : ":\($0)" } ?? ""
        return SignedRequestParts(path: path, headersHash: FieldsHash.headerValue([("app_id", appId), ("endpoint", host + port + path)]))
    }
}
