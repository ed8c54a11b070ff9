import CountersignCore
import CountersignServerCore
import CountersignTesting
import Crypto
import Foundation
import Testing

@Suite("Key files")
struct KeyFileTests {

    @Test("root and intermediate files round trip, are 0600, and the intermediate checks against its root")
    func roundTrip() throws {
        let directory = try makeTemporaryDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let root = RootSigningKey()
        let rootFile = directory.appendingPathComponent("root.key")
        try KeyFile.writePrivate(KeyFile.encode(root), to: rootFile)
        let loadedRoot = try KeyFile.loadRoot(from: rootFile)
        #expect(loadedRoot.publicKey.rawRepresentation == root.publicKey.rawRepresentation)

        let intermediate = try loadedRoot.issueIntermediate(validForDays: 30, now: TestKeys.referenceDate)
        let intermediateFile = directory.appendingPathComponent("intermediate.key")
        try KeyFile.writePrivate(KeyFile.encode(intermediate), to: intermediateFile)
        let loaded = try KeyFile.loadIntermediate(from: intermediateFile)
        #expect(loaded.certificate == intermediate.certificate)
        #expect(loaded.certificate.isIssued(by: root.publicKey))
        #expect(!loaded.certificate.isIssued(by: TestKeys.foreignRoot.publicKey))

        for file in [rootFile, intermediateFile] {
            let permissions = try FileManager.default.attributesOfItem(atPath: file.path)[.posixPermissions] as? NSNumber
            #expect(permissions?.intValue == 0o600)
        }
    }

    @Test("the file fields are the documented JSON with base64 values")
    func documentedFields() throws {
        let object = try JSONSerialization.jsonObject(with: KeyFile.encode(TestKeys.intermediate)) as! [String: Any]
        #expect(Set(object.keys) == ["publicKey", "expirationDays", "rootSignature", "privateKey"])
        #expect(object["expirationDays"] as? Int == Int(TestKeys.referenceDay + 30))
        #expect(Data(base64Encoded: object["publicKey"] as! String) == TestKeys.intermediate.certificate.publicKey)
        let root = try JSONSerialization.jsonObject(with: KeyFile.encode(TestKeys.root)) as! [String: Any]
        #expect(Set(root.keys) == ["privateKey", "publicKey"])
        #expect(Data(base64Encoded: root["privateKey"] as! String) == Data(1...32))
    }

    @Test("validForDays gives at least that many days, rounded up to a UTC day")
    func expirationRounding() {
        let days = RootSigningKey.expirationDays(validForDays: 30, from: TestKeys.referenceDate)
        #expect(days == TestKeys.referenceDay + 31)
        let midnight = Date(timeIntervalSince1970: TimeInterval(TestKeys.referenceDay) * 86_400)
        #expect(RootSigningKey.expirationDays(validForDays: 30, from: midnight) == TestKeys.referenceDay + 30)
    }

    @Test(
        "malformed key files are rejected with a message naming the problem",
        arguments: [
            ("", "not a JSON object"),
            ("[1]", "not a JSON object"),
            (#"{"privateKey":"AAAA","publicKey":"AAAA"}"#, "32-byte seed"),
            (#"{"privateKey":"!!","publicKey":"AAAA"}"#, "root key file needs"),
            (#"{"publicKey":"AAAA","expirationDays":1,"rootSignature":"AAAA"}"#, "intermediate public key must be 32 bytes"),
            (#"{"publicKey":"AAAA","expirationDays":-1,"rootSignature":"AAAA"}"#, "integer expirationDays"),
        ])
    func malformed(_ text: String, _ expected: String) {
        #expect {
            _ = try KeyFile.decode(Data(text.utf8))
        } throws: { error in
            "\(error)".contains(expected)
        }
    }

    @Test("a root file whose public key does not match its seed is rejected")
    func mismatchedRoot() throws {
        var object = try JSONSerialization.jsonObject(with: KeyFile.encode(TestKeys.root)) as! [String: Any]
        object["publicKey"] = TestKeys.foreignRoot.publicKey.rawRepresentation.base64EncodedString()
        #expect(throws: KeyFormatError("root key file's publicKey does not match its privateKey")) {
            _ = try KeyFile.decode(JSONSerialization.data(withJSONObject: object))
        }
    }

    @Test("an intermediate file whose private key does not match its public key is rejected")
    func mismatchedIntermediate() throws {
        var object = try JSONSerialization.jsonObject(with: KeyFile.encode(TestKeys.intermediate)) as! [String: Any]
        object["privateKey"] = Data(repeating: 9, count: 32).base64EncodedString()
        #expect(throws: KeyFormatError("intermediate private key does not match its public key")) {
            _ = try KeyFile.decode(JSONSerialization.data(withJSONObject: object))
        }
    }
}
