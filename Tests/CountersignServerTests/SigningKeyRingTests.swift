import CountersignCore
import CountersignServerCore
import CountersignTesting
import Foundation
import Logging
import Testing

@testable import CountersignServer
@testable import CountersignStorage

@Suite("Signing key ring")
struct SigningKeyRingTests {

    @Test("managed mode issues a new intermediate when 7 days or less are left, under the same root")
    func managedRotation() throws {
        let directory = try makeTemporaryDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let clock = ManualClock(Date(timeIntervalSince1970: 1_767_225_600))
        let ring = try SigningKeyRing(mode: .managed(dataDirectory: directory), now: { clock.now }, logger: Logger(label: "test"))
        let first = ring.currentSigner.key.certificate
        try ring.rotateIfNeeded()
        #expect(ring.currentSigner.key.certificate == first, "nothing to do with 30 days left")

        clock.now = first.expirationDate.addingTimeInterval(-6 * 86_400)
        try ring.rotateIfNeeded()
        let second = ring.currentSigner.key.certificate
        #expect(second != first)
        #expect(second.expirationDays > first.expirationDays)
        #expect(second.isIssued(by: ring.managedRootPublicKey!))
        let files = try FileManager.default.contentsOfDirectory(atPath: directory.appendingPathComponent("keys/intermediates").path)
        #expect(files.count == 2)
    }

    @Test("offline mode refuses to start without a valid intermediate and signs with the newest valid one")
    func offline() throws {
        let directory = try makeTemporaryDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let now = Date(timeIntervalSince1970: 1_767_225_600)
        #expect(throws: ConfigurationError.self) {
            _ = try SigningKeyRing(mode: .offline(intermediatesDirectory: directory), now: { now }, logger: Logger(label: "test"))
        }
        let root = RootSigningKey()
        let expired = try root.issueIntermediate(expirationDays: 20_000)
        let older = try root.issueIntermediate(validForDays: 10, now: now)
        let newer = try root.issueIntermediate(validForDays: 30, now: now)
        for (name, key) in [("a", expired), ("b", newer), ("c", older)] {
            try KeyFile.writePrivate(KeyFile.encode(key), to: directory.appendingPathComponent("\(name).key"))
        }
        let ring = try SigningKeyRing(mode: .offline(intermediatesDirectory: directory), now: { now }, logger: Logger(label: "test"))
        #expect(ring.currentSigner.key.certificate == newer.certificate)
    }
}
