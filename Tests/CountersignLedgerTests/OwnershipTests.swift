import CountersignAppStore
import CountersignCore
import CountersignLedger
import CountersignServerCore
import Foundation
import Testing

/// The ownership rules (``Ownership/plan(_:_:app:poster:now:)``) case by case, from facts alone:
/// the cases the database-backed lifecycle tests (CountersignServerTests' LifecycleTests,
/// PeriodAndOwnershipTests) reach through the API, each named after the one it stands under.
@Suite("Ownership rules")
struct OwnershipTests {
    typealias Facts = PurchaseFacts
    typealias Plan = PurchasePlan

    static func plan(
        _ facts: Facts, _ transaction: VerifiedTransaction, behavior: AppConfiguration.TransferBehavior = .transfer, poster: CustomerID = "alice"
    ) throws(LedgerError) -> Plan {
        try Ownership.plan(facts, transaction, app: Fixture.app(behavior), poster: poster, now: Fixture.nowMs)
    }

    @Test("a new purchase by a new customer: customer, purchase and owner inserted, answered new (LifecycleTests.reinstall's first purchase)")
    func newPurchase() throws {
        let plan = try Self.plan(Facts(posterSeen: nil, tokenUser: nil, storedSignedDate: nil, chainOwner: .none), Fixture.transaction())
        #expect(plan == Plan(status: .new, customer: .insert, purchase: .insert, owner: .insert("alice")))
    }

    @Test("a known customer is touched at most once an hour")
    func lastSeen() throws {
        let facts = Facts(posterSeen: Fixture.seenNow, tokenUser: nil, storedSignedDate: nil, chainOwner: .none)
        #expect(try Self.plan(facts, Fixture.transaction()).customer == .none)
        var stale = facts
        stale.posterSeen = (Fixture.seenNow.first, Fixture.seenNow.last - Ownership.lastSeenResolution)
        #expect(try Self.plan(stale, Fixture.transaction()).customer == .touch)
        stale.posterSeen = (Fixture.seenNow.first, Fixture.seenNow.last - Ownership.lastSeenResolution + 1)
        #expect(try Self.plan(stale, Fixture.transaction()).customer == .none)
    }

    @Test("the same copy again is already recorded; a copy signed later refreshes the stored one, an older one does not (secondDevice)")
    func repost() throws {
        let signed = Fixture.nowMs
        let facts = Facts(posterSeen: Fixture.seenNow, tokenUser: nil, storedSignedDate: signed, chainOwner: .user("alice"))
        #expect(try Self.plan(facts, Fixture.transaction()) == Plan(status: .alreadyRecorded, customer: .none, purchase: .none, owner: .none))
        var older = facts
        older.storedSignedDate = signed - 1000
        #expect(try Self.plan(older, Fixture.transaction()).purchase == .refresh)
        #expect(try Self.plan(facts, Fixture.transaction(signedAgo: 60)).purchase == .none)
    }

    @Test("the store's signed copy replaces an imported record; an imported record never replaces a signed copy (MoveFromRevenueCatTests)")
    func importedRecords() throws {
        var facts = Facts(posterSeen: Fixture.seenNow, tokenUser: nil, storedSignedDate: Fixture.nowMs + 60_000, chainOwner: .user("alice"))
        facts.storedIsImported = true
        // Confirmed whatever the dates: an export's row is dated by the export, not by Apple.
        #expect(try Self.plan(facts, Fixture.transaction()).purchase == .confirm)
        facts.storedIsImported = false
        facts.storedSignedDate = Fixture.nowMs - 60_000
        var payload = try Fixture.transaction().payload
        payload.signedDate = Fixture.now
        let imported = try VerifiedTransaction(imported: payload, app: Fixture.app(), deliversEvents: false)
        #expect(try Self.plan(facts, imported).purchase == .none)
        #expect(imported.eventHandling == (imported: true, delivered: false))
    }

    @Test("a stored transaction without an owner (a notification came first) is new to its poster")
    func storedWithoutOwner() throws {
        let facts = Facts(posterSeen: Fixture.seenNow, tokenUser: nil, storedSignedDate: Fixture.nowMs, chainOwner: .none)
        #expect(try Self.plan(facts, Fixture.transaction()) == Plan(status: .new, customer: .none, purchase: .none, owner: .insert("alice")))
    }

    @Test("a token naming a logged-in customer pins the chain to them, whoever posts it (logInThenRestore)")
    func tokenPins() throws {
        let token = AppAccountToken.forAppUserID("bob")
        let fresh = Facts(posterSeen: nil, tokenUser: "bob", storedSignedDate: nil, chainOwner: .none)
        #expect(try Self.plan(fresh, Fixture.transaction(token: token)).owner == .insert("bob"))
        #expect(try Self.plan(fresh, Fixture.transaction(token: token)).status == .boundToAnotherUser)
        var held = fresh
        held.chainOwner = .user("mallory")
        // Even an app that keeps purchases with their first owner: the token's user wins.
        let plan = try Self.plan(held, Fixture.transaction(token: token), behavior: .keepWithOriginal)
        #expect(plan.owner == .update("bob"))
        #expect(plan.status == .boundToAnotherUser)
        held.chainOwner = .user("bob")
        #expect(
            try Self.plan(held, Fixture.transaction(token: token))
                == Plan(status: .boundToAnotherUser, customer: .insert, purchase: .insert, owner: .none))
    }

    @Test("a token naming an anonymous id, or the poster's own token, pins nothing (reinstall)")
    func tokenPinsNothing() throws {
        let anonymous = ReservedAppUserID.anonymousPrefix + "0f3c2a56-9d1e-4b7a-8c21-5e6f7a8b9c0d"
        let facts = Facts(posterSeen: nil, tokenUser: CustomerID(anonymous), storedSignedDate: nil, chainOwner: .none)
        #expect(try Self.plan(facts, Fixture.transaction(token: AppAccountToken.forAppUserID(anonymous))).owner == .insert("alice"))
        let own = Facts(posterSeen: nil, tokenUser: "alice", storedSignedDate: nil, chainOwner: .none)
        #expect(try Self.plan(own, Fixture.transaction(token: AppAccountToken.forAppUserID("alice"))).status == .new)
    }

    @Test("a chain held by another user: moved, refused or moved only when it gives them nothing, by the app's setting (secondDevice)")
    func transferBehaviours() throws {
        let facts = Facts(posterSeen: Fixture.seenNow, tokenUser: nil, storedSignedDate: Fixture.nowMs, chainOwner: .user("bob"))
        #expect(try Self.plan(facts, Fixture.transaction()) == Plan(status: .transferred, customer: .none, purchase: .none, owner: .update("alice")))
        #expect(throws: LedgerError.self) { try Self.plan(facts, Fixture.transaction(), behavior: .keepWithOriginal) }
        // transferIfNoActive asks about the current owner, and refuses on a fact nobody read.
        #expect(Ownership.needsOwnerEntitlements(facts, app: Fixture.app(.transferIfNoActive), poster: "alice"))
        #expect(!Ownership.needsOwnerEntitlements(facts, app: Fixture.app(.transfer), poster: "alice"))
        #expect(throws: LedgerError.self) { try Self.plan(facts, Fixture.transaction(), behavior: .transferIfNoActive) }
        var active = facts
        active.chainGivesOwnerEntitlement = true
        #expect(throws: LedgerError.self) { try Self.plan(active, Fixture.transaction(), behavior: .transferIfNoActive) }
        active.chainGivesOwnerEntitlement = false
        #expect(try Self.plan(active, Fixture.transaction(), behavior: .transferIfNoActive).owner == .update("alice"))
    }

    @Test("a chain whose owner was deleted goes to the poster unless the app keeps purchases with their first owner (deletedCustomer)")
    func deletedOwner() throws {
        let facts = Facts(posterSeen: nil, tokenUser: nil, storedSignedDate: Fixture.nowMs, chainOwner: .deleted)
        #expect(!Ownership.needsOwnerEntitlements(facts, app: Fixture.app(.transferIfNoActive), poster: "alice"), "nobody to ask about")
        #expect(try Self.plan(facts, Fixture.transaction(), behavior: .transferIfNoActive).owner == .update("alice"))
        #expect(throws: LedgerError.self) { try Self.plan(facts, Fixture.transaction(), behavior: .keepWithOriginal) }
    }

    @Test("posted back and forth within the transfer window: it moves each time, one TRANSFER a window")
    func transferWindow() throws {
        var facts = Facts(posterSeen: Fixture.seenNow, tokenUser: nil, storedSignedDate: Fixture.nowMs, chainOwner: .user("bob"))
        facts.chainMoved = Fixture.nowMs - Ownership.transferWindow + 1
        #expect(try Self.plan(facts, Fixture.transaction()).dampsTransfer)
        facts.chainMoved = Fixture.nowMs - Ownership.transferWindow
        #expect(try !Self.plan(facts, Fixture.transaction()).dampsTransfer)
    }

    @Test("ids compare by their bytes: a composed and a decomposed é are two customers (IdentityTests)")
    func bytewiseIdentity() throws {
        let composed = CustomerID("caf\u{E9}")
        let decomposed = CustomerID("cafe\u{301}")
        #expect("caf\u{E9}" == "cafe\u{301}", "Swift's String == is Unicode equivalence")
        #expect(composed != decomposed)
        #expect(Set([composed, decomposed]).count == 2)
        let facts = Facts(posterSeen: nil, tokenUser: nil, storedSignedDate: Fixture.nowMs, chainOwner: .user(decomposed))
        #expect(try Self.plan(facts, Fixture.transaction(), poster: composed).status == .transferred)
    }

    @Test("a transaction the ledger cannot rely on is refused with what is wrong")
    func invalidTransactions() throws {
        var payload = try Fixture.transaction().payload
        payload.price = -1
        #expect(throws: LedgerError.invalidTransaction("the transaction's price -1 is outside 0 to 1000000000000000 milliunits")) {
            try VerifiedTransaction(jws: "", payload: payload, app: Fixture.app())
        }
        payload.price = 0
        payload.productId = "line\nbreak"
        #expect(throws: LedgerError.self) { try VerifiedTransaction(jws: "", payload: payload, app: Fixture.app()) }
        payload.productId = "not_configured"
        #expect(throws: LedgerError.self) { try VerifiedTransaction(imported: payload, app: Fixture.app(), deliversEvents: false) }
        payload.transactionId = ""
        #expect(throws: LedgerError.self) { try VerifiedTransaction(jws: "", payload: payload, app: Fixture.app()) }
    }
}
