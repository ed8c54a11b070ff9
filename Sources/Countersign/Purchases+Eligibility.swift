import CountersignCore
import Foundation

/// Whether the customer may have a product's introductory offer (RevenueCat's `IntroEligibility`).
public struct IntroEligibility: Sendable, Hashable {
    public let status: IntroEligibilityStatus

    public init(status: IntroEligibilityStatus) {
        self.status = status
    }
}

extension Purchases {
    /// Each product's introductory offer eligibility, answered by the server from the customer's
    /// history in each subscription group (one introductory offer per group, as App Store
    /// gives), in a signed answer. Products the server does not know, and every product when the
    /// answer cannot be had or fails verification (enforced mode) or does not answer exactly the
    /// products asked for, are `unknown`.
    public func checkTrialOrIntroDiscountEligibility(productIdentifiers: [String]) async -> [String: IntroEligibility] {
        let unknown = Dictionary(productIdentifiers.map { ($0, IntroEligibility(status: .unknown)) }, uniquingKeysWith: { first, _ in first })
        guard !productIdentifiers.isEmpty,
              let body = try? JSONEncoder().encode(IntroEligibilityRequest(productIdentifiers: Array(unknown.keys).sorted()))
        else { return unknown }
        let path = "/v1/subscribers/\(appUserID.pathSegmentEncoded)/intro_eligibility"
        do {
            let answer = try await backend.perform(.post(path, json: body))
            guard answer.verification != .failed,
                  let decoded = try? JSONDecoder().decode(IntroEligibilityAnswer.self, from: answer.body),
                  Set(decoded.eligibility.keys) == Set(unknown.keys)
            else {
                SDKLog.log(.warn, "introductory offer eligibility unknown: the answer did not verify or did not answer the products asked")
                return unknown
            }
            return decoded.eligibility.mapValues(IntroEligibility.init(status:))
        } catch {
            SDKLog.log(.warn, "introductory offer eligibility unknown: \(error)")
            return unknown
        }
    }
}
