import CountersignCore
import CountersignServerCore
import Foundation

/// What happened to a posted purchase; sent back as `purchase_status`.
public enum PurchaseStatus: String, Codable, Sendable {
    case new
    case alreadyRecorded = "already_recorded"
    case transferred
    /// Recorded for the user its app account token names, not for the one who posted it.
    case boundToAnotherUser = "bound_to_another_user"
}

/// What the store holds about a posted purchase, read before anything is decided: with these
/// the ownership rules (``Ownership/plan(_:_:app:poster:now:)``) need nothing else.
public struct PurchaseFacts: Sendable {
    public enum ChainOwner: Sendable, Equatable {
        /// The chain has no owner row.
        case none
        /// Its owner was deleted.
        case deleted
        case user(CustomerID)
    }

    /// The poster's first and last visit (milliseconds); nil for a new customer.
    public var posterSeen: (first: Int64, last: Int64)?
    /// The customer whose alias the poster's id is, if any (the poster then has no row).
    public var posterAliasOf: CustomerID?
    /// The customer whose app account token the transaction carries, if any.
    public var tokenUser: CustomerID?
    /// When the stored copy of the transaction was signed; nil when it is new.
    public var storedSignedDate: Int64?
    public var chainOwner: ChainOwner
    /// When the chain's current transfer window opened (milliseconds): the last move that
    /// made a `TRANSFER` event; nil if it never moved.
    public var chainMoved: Int64?
    /// The stored copy's expiry and revocation (milliseconds), when it is stored.
    public var storedExpires: Int64?
    public var storedRevoked: Int64?
    /// The stored copy is an imported record (not the store's signed copy).
    public var storedIsImported: Bool
    /// Whether the chain still gives its current owner an active entitlement: read only for an
    /// app that moves purchases only from users they give nothing (`transferIfNoActive`), when
    /// the chain is another user's (``Ownership/needsOwnerEntitlements(_:app:poster:)``).
    public var chainGivesOwnerEntitlement: Bool?

    public init(
        posterSeen: (first: Int64, last: Int64)?, posterAliasOf: CustomerID? = nil, tokenUser: CustomerID?, storedSignedDate: Int64?,
        chainOwner: ChainOwner, chainMoved: Int64? = nil, storedExpires: Int64? = nil, storedRevoked: Int64? = nil,
        storedIsImported: Bool = false, chainGivesOwnerEntitlement: Bool? = nil
    ) {
        self.posterSeen = posterSeen
        self.posterAliasOf = posterAliasOf
        self.tokenUser = tokenUser
        self.storedSignedDate = storedSignedDate
        self.chainOwner = chainOwner
        self.chainMoved = chainMoved
        self.storedExpires = storedExpires
        self.storedRevoked = storedRevoked
        self.storedIsImported = storedIsImported
        self.chainGivesOwnerEntitlement = chainGivesOwnerEntitlement
    }

    /// What the store held of the transaction; nil when it is new.
    public var storedCopy: StoredCopy? {
        storedSignedDate.map { StoredCopy(signedMs: $0, expiresMs: storedExpires, revokedMs: storedRevoked) }
    }
}

/// What recording a purchase writes, and what the poster hears.
public struct PurchasePlan: Sendable, Equatable {
    public enum CustomerWrite: Sendable, Equatable {
        case none
        case insert
        /// `last_seen` is over an hour old.
        case touch
    }

    public enum PurchaseWrite: Sendable, Equatable {
        case none
        case insert
        /// The posted copy was signed after the stored one: its revocation and upgrade state win.
        case refresh
        /// The store's signed copy of an imported record: it replaces the record.
        case confirm
    }

    public enum OwnerWrite: Sendable, Equatable {
        case none
        case insert(CustomerID)
        case update(CustomerID)
    }

    public var status: PurchaseStatus
    public var customer: CustomerWrite
    public var purchase: PurchaseWrite
    public var owner: OwnerWrite
    /// The chain moved within the transfer window: it moves again, without a `TRANSFER`
    /// event and without starting a new window.
    public var dampsTransfer = false

    public init(status: PurchaseStatus, customer: CustomerWrite, purchase: PurchaseWrite, owner: OwnerWrite, dampsTransfer: Bool = false) {
        self.status = status
        self.customer = customer
        self.purchase = purchase
        self.owner = owner
        self.dampsTransfer = dampsTransfer
    }

    /// Whom the transaction's own events go to: the chain's owner after the plan.
    public func eventOwner(_ facts: PurchaseFacts) -> CustomerID? {
        switch owner {
        case .insert(let user), .update(let user): user
        case .none: if case .user(let user) = facts.chainOwner { user } else { nil }
        }
    }
}

/// Who owns a purchase chain after a post, and what recording it writes.
///
/// - A token naming a known customer who logged in (not an anonymous id) pins the chain to
///   that customer, whoever posts it: a purchase made while signed in can never be replayed to
///   unlock another account.
/// - A token naming an anonymous id pins nothing: the anonymous id is gone after a reinstall or
///   was merged into a real user by logIn, so the transfer behaviour decides as for a purchase
///   without a token.
/// - A chain whose owner was deleted is owned by nobody: `transfer` and `transferIfNoActive` give
///   it to the poster, `keepWithOriginal` refuses.
/// - A chain held by another user moves to the poster (`transfer`), never (`keepWithOriginal`),
///   or only when it gives that user no active entitlement (`transferIfNoActive`).
public enum Ownership {
    /// How stale `last_seen` may get (milliseconds) before a visit updates it.
    public static let lastSeenResolution: Int64 = 3_600_000

    /// The window (milliseconds) that damps `TRANSFER` events: a chain that moved within it
    /// moves again when posted (entitlements always follow the latest poster the rules allow),
    /// but only the move that opened the window makes an event and its webhook deliveries. The
    /// same purchase posted alternately as two ids made an event and a delivery per post.
    public static let transferWindow: Int64 = 600_000

    /// Whether a customer last seen at `lastSeen` (milliseconds) needs no new `last_seen` at `now`.
    public static func isRecent(_ lastSeen: Int64, now: Int64) -> Bool { now - lastSeen < lastSeenResolution }

    /// Whether the plan needs ``PurchaseFacts/chainGivesOwnerEntitlement``: the app moves chains
    /// only from users they give nothing, and the chain is held by someone the poster is not.
    public static func needsOwnerEntitlements(_ facts: PurchaseFacts, app: AppConfiguration, poster: CustomerID) -> Bool {
        guard app.transferBehavior == .transferIfNoActive, case .user(let holder) = facts.chainOwner else { return false }
        return holder != poster
    }

    /// What recording a purchase writes of the poster's customer row (at most one write an hour)
    /// and of the transaction's row (a copy signed later refreshes the stored one; the store's
    /// signed copy replaces an imported record; an imported record never replaces a signed copy).
    public static func rowWrites(_ facts: PurchaseFacts, _ transaction: VerifiedTransaction, now: Int64)
        -> (customer: PurchasePlan.CustomerWrite, purchase: PurchasePlan.PurchaseWrite)
    {
        let customer: PurchasePlan.CustomerWrite = facts.posterSeen.map { isRecent($0.last, now: now) ? .none : .touch } ?? .insert
        let purchase: PurchasePlan.PurchaseWrite
        switch (facts.storedSignedDate, facts.storedIsImported, transaction.isImported) {
        case (nil, _, _): purchase = .insert
        case (_, true, false): purchase = .confirm
        case (_, false, true): purchase = .none
        case (let stored?, _, _): purchase = (transaction.payload.signedDate?.epochMilliseconds ?? now) > stored ? .refresh : .none
        }
        return (customer, purchase)
    }

    /// The user a posted transaction belongs to: the customer its app account token names, when
    /// that is a known customer who logged in and the token is not the poster's own; else the poster.
    public static func claimant(_ facts: PurchaseFacts, _ transaction: VerifiedTransaction, poster: CustomerID) -> CustomerID {
        guard let token = transaction.payload.appAccountToken?.lowercased(),
            token != AppAccountToken.forAppUserID(poster.rawValue).uuidString.lowercased(),
            let bound = facts.tokenUser, !bound.isAnonymous
        else { return poster }
        return bound
    }

    /// The ownership rules (see the type's documentation): who owns the purchase's chain after it
    /// is posted by `poster` at `now` (milliseconds), and what that writes. Throws
    /// ``LedgerError/purchaseOwnedByAnotherUser(_:)`` when the chain may not move.
    public static func plan(_ facts: PurchaseFacts, _ transaction: VerifiedTransaction, app: AppConfiguration, poster: CustomerID, now: Int64)
        throws(LedgerError) -> PurchasePlan
    {
        let (customer, purchase) = rowWrites(facts, transaction, now: now)
        func plan(_ status: PurchaseStatus, _ owner: PurchasePlan.OwnerWrite) -> PurchasePlan {
            PurchasePlan(status: status, customer: customer, purchase: purchase, owner: owner)
        }
        let owner = claimant(facts, transaction, poster: poster)
        let current: CustomerID?
        switch facts.chainOwner {
        case .none:
            return plan(owner == poster ? .new : .boundToAnotherUser, .insert(owner))
        case .user(let user) where user == owner:
            if owner != poster { return plan(.boundToAnotherUser, .none) }
            return plan(purchase == .insert ? .new : .alreadyRecorded, .none)
        case .user(let user):
            current = user
        case .deleted:
            current = nil
        }
        // The token's user wins over whoever holds the chain now.
        if owner != poster { return plan(.boundToAnotherUser, .update(owner)) }
        switch app.transferBehavior {
        case .transfer:
            break
        case .keepWithOriginal:
            throw .purchaseOwnedByAnotherUser("this purchase belongs to another user and the app keeps purchases with their first owner")
        case .transferIfNoActive:
            // Unknown counts as active: a purchase never moves on a fact nobody read.
            if current != nil, facts.chainGivesOwnerEntitlement ?? true {
                throw .purchaseOwnedByAnotherUser("this purchase still gives another user an active entitlement")
            }
        }
        var transferred = plan(.transferred, .update(poster))
        // Posted back and forth: it moves each time, but one TRANSFER a window tells of it.
        transferred.dampsTransfer = facts.chainMoved.map { now - $0 < transferWindow } ?? false
        return transferred
    }
}
