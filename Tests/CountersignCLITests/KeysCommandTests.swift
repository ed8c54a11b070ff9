import CountersignCore
import CountersignServerCore
import CountersignTesting
import Crypto
import Foundation
import Testing

@Suite("countersign keys")
struct KeysCommandTests {
    @Test("keys root writes a 0600 root.key and prints its public key as the last line")
    func root() throws {
        let directory = try makeTemporaryDirectory("countersign-cli")
        defer { try? FileManager.default.removeItem(at: directory) }
        let out = directory.appendingPathComponent("new/dir")
        let result = try CLIRunner.run(["keys", "root", "--out", out.path])
        #expect(result.status == 0)
        let file = out.appendingPathComponent("root.key")
        let root = try KeyFile.loadRoot(from: file)
        #expect(result.stdout.split(separator: "\n").last.map(String.init) == root.publicKey.rawRepresentation.base64EncodedString())
        let permissions = try FileManager.default.attributesOfItem(atPath: file.path)[.posixPermissions] as? NSNumber
        #expect(permissions?.intValue == 0o600)

        let again = try CLIRunner.run(["keys", "root", "--out", out.path])
        #expect(again.status == 2)
        #expect(again.lines == ["error: \(file.path) already exists; pass --force to replace it (apps pinning the old root will stop verifying)"])
    }

    @Test("keys intermediate issues a key another Ed25519 implementation accepts; keys show prints key and expiry")
    func intermediate() throws {
        let directory = try makeTemporaryDirectory("countersign-cli")
        defer { try? FileManager.default.removeItem(at: directory) }
        #expect(try CLIRunner.run(["keys", "root", "--out", directory.path]).status == 0)
        let rootFile = directory.appendingPathComponent("root.key")
        let intermediateFile = directory.appendingPathComponent("intermediate.key")
        let issued = try CLIRunner.run(["keys", "intermediate", "--root", rootFile.path, "--days", "30", "--out", intermediateFile.path])
        #expect(issued.status == 0, "\(issued.stderr)")

        let root = try KeyFile.loadRoot(from: rootFile)
        let key = try KeyFile.loadIntermediate(from: intermediateFile)
        #expect(key.certificate.isIssued(by: root.publicKey))
        let days = key.certificate.expirationDate.timeIntervalSinceNow / 86_400
        #expect(days >= 30 && days <= 31)

        try checkWithPythonCryptography(root: root.publicKey.rawRepresentation, certificate: key.certificate)

        let shown = try CLIRunner.run(["keys", "show", intermediateFile.path, "--root-key", root.publicKey.rawRepresentation.base64EncodedString()])
        #expect(shown.status == 0)
        #expect(shown.stdout.contains("public key: \(key.certificate.publicKey.base64EncodedString())"))
        #expect(shown.stdout.contains("expires: \(key.certificate.expirationDate.formatted(.iso8601))"))
        #expect(shown.stdout.contains("issued by root: yes"))

        let shownRoot = try CLIRunner.run(["keys", "show", rootFile.path])
        #expect(shownRoot.stdout.contains("public key: \(root.publicKey.rawRepresentation.base64EncodedString())"))
    }

    /// Checks the root signature over `expiration (4, LE) ‖ publicKey (32)` with Python's
    /// `cryptography` (OpenSSL), an implementation independent of swift-crypto's BoringSSL.
    func checkWithPythonCryptography(root: Data, certificate: IntermediateCertificate) throws {
        let probe = Process()
        probe.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        probe.arguments = ["python3", "-c", "import cryptography"]
        probe.standardError = FileHandle.nullDevice
        guard (try? probe.run()) != nil else {
            print("skipping the independent Ed25519 check: python3 not found")
            return
        }
        probe.waitUntilExit()
        guard probe.terminationStatus == 0 else {
            print("skipping the independent Ed25519 check: python3 has no 'cryptography' package")
            return
        }
        let script = """
            import base64, struct, sys
            from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
            root, pub, sig, days = sys.argv[1:5]
            message = struct.pack('<I', int(days)) + base64.b64decode(pub)
            Ed25519PublicKey.from_public_bytes(base64.b64decode(root)).verify(base64.b64decode(sig), message)
            print('ok')
            """
        let check = Process()
        check.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        check.arguments = [
            "python3", "-c", script, root.base64EncodedString(), certificate.publicKey.base64EncodedString(),
            certificate.rootSignature.base64EncodedString(), String(certificate.expirationDays),
        ]
        let out = Pipe()
        check.standardOutput = out
        try check.run()
        let output = String(decoding: out.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        check.waitUntilExit()
        #expect(check.terminationStatus == 0)
        #expect(output == "ok\n")
    }

    @Test(
        "bad input to keys commands is one error line and exit 2",
        arguments: [
            (["keys", "show", "/nonexistent/key"], "error: key file not found: /nonexistent/key"),
            (
                ["keys", "intermediate", "--root", "/nonexistent/root.key", "--out", "/tmp/x.key"],
                "error: root key /nonexistent/root.key: cannot read key file /nonexistent/root.key"
            ),
        ])
    func badInput(_ arguments: [String], _ expected: String) throws {
        let result = try CLIRunner.run(arguments)
        #expect(result.status == 2)
        #expect(result.lines == [expected])
    }

    @Test("malformed key files are one error line naming the problem")
    func malformedKeyFile() throws {
        let directory = try makeTemporaryDirectory("countersign-cli")
        defer { try? FileManager.default.removeItem(at: directory) }
        let file = directory.appendingPathComponent("bad.key")
        try Data(#"{"privateKey":"AAAA","publicKey":"AAAA"}"#.utf8).write(to: file)
        let shown = try CLIRunner.run(["keys", "show", file.path])
        #expect(shown.status == 2)
        #expect(shown.lines == ["error: malformed key file \(file.path): root private key must be a 32-byte seed, got 3 bytes"])
        let issued = try CLIRunner.run(["keys", "intermediate", "--root", file.path, "--out", directory.appendingPathComponent("i.key").path])
        #expect(issued.status == 2)
        #expect(issued.lines.count == 1)
        #expect(!FileManager.default.fileExists(atPath: directory.appendingPathComponent("i.key").path))
    }
}
