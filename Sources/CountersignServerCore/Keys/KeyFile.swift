import CountersignCore
import Crypto
import Foundation

/// Reading and writing key files (JSON with base64 fields, see docs/trust-model.md).
///
/// `root.key`: `{"privateKey": <32-byte seed>, "publicKey": <32 bytes>}`.
/// Intermediate: `{"publicKey", "expirationDays", "rootSignature", "privateKey"}`.
/// `privateKey` is optional in an intermediate file so its public half can be shared alone.
public enum KeyFile {
    /// What a key file holds.
    public enum Contents: Sendable {
        case root(RootSigningKey)
        /// An intermediate with its private key, as the server needs it.
        case intermediate(IntermediateSigningKey)
        /// The public half of an intermediate only.
        case intermediateCertificate(IntermediateCertificate)
    }

    struct RootJSON: Codable {
        var privateKey: Data
        var publicKey: Data
    }

    struct IntermediateJSON: Codable {
        var publicKey: Data
        var expirationDays: UInt32
        var rootSignature: Data
        var privateKey: Data?
    }

    /// Encodes a root key file.
    public static func encode(_ root: RootSigningKey) -> Data {
        encodeJSON(RootJSON(privateKey: root.privateKey.rawRepresentation, publicKey: root.publicKey.rawRepresentation))
    }

    /// Encodes an intermediate key file, with its private key.
    public static func encode(_ intermediate: IntermediateSigningKey) -> Data {
        let certificate = intermediate.certificate
        return encodeJSON(
            IntermediateJSON(
                publicKey: certificate.publicKey,
                expirationDays: certificate.expirationDays,
                rootSignature: certificate.rootSignature,
                privateKey: intermediate.privateKey.rawRepresentation
            ))
    }

    private static func encodeJSON(_ value: some Encodable) -> Data {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.prettyPrinted, .sortedKeys, .withoutEscapingSlashes]
        // Encoding plain Data and integers cannot fail.
        var data = try! encoder.encode(value)
        data.append(0x0A)
        return data
    }

    /// Decodes either kind of key file, checking every field's size and that halves match.
    public static func decode(_ data: Data) throws(KeyFormatError) -> Contents {
        guard let object = try? JSONSerialization.jsonObject(with: data) as? [String: Any] else {
            throw KeyFormatError("key file is not a JSON object")
        }
        let decoder = JSONDecoder()
        if object["rootSignature"] != nil || object["expirationDays"] != nil {
            guard let json = try? decoder.decode(IntermediateJSON.self, from: data) else {
                throw KeyFormatError(
                    "intermediate key file needs base64 publicKey and rootSignature and an integer expirationDays (0...\(UInt32.max))")
            }
            let certificate = try IntermediateCertificate(
                publicKey: json.publicKey, expirationDays: json.expirationDays, rootSignature: json.rootSignature
            )
            guard let seed = json.privateKey else { return .intermediateCertificate(certificate) }
            let privateKey = try Curve25519.Signing.PrivateKey.fromSeed(seed, name: "intermediate")
            return .intermediate(try IntermediateSigningKey(privateKey: privateKey, certificate: certificate))
        }
        guard let json = try? decoder.decode(RootJSON.self, from: data) else {
            throw KeyFormatError("root key file needs base64 privateKey and publicKey fields")
        }
        let root = try RootSigningKey(seed: json.privateKey)
        guard root.publicKey.rawRepresentation == json.publicKey else {
            throw KeyFormatError("root key file's publicKey does not match its privateKey")
        }
        return .root(root)
    }

    /// Loads a root key file.
    public static func loadRoot(from url: URL) throws -> RootSigningKey {
        guard case .root(let root) = try decode(readFile(url)) else {
            throw KeyFormatError("\(url.path) is an intermediate key file, not a root key file")
        }
        return root
    }

    /// Loads an intermediate key file that includes its private key.
    public static func loadIntermediate(from url: URL) throws -> IntermediateSigningKey {
        guard case .intermediate(let key) = try decode(readFile(url)) else {
            throw KeyFormatError("\(url.path) is not an intermediate key file with a private key")
        }
        return key
    }

    static func readFile(_ url: URL) throws(KeyFormatError) -> Data {
        do {
            return try Data(contentsOf: url)
        } catch {
            throw KeyFormatError("cannot read key file \(url.path)")
        }
    }

    /// Writes `data` to `url` readable by the owner only (0600), replacing the file atomically.
    ///
    /// The temporary file is created with mode 0600 from the start (never briefly readable by
    /// others) and flushed to disk before it is renamed into place.
    public static func writePrivate(_ data: Data, to url: URL) throws {
        let temporary = url.deletingLastPathComponent()
            .appendingPathComponent(".\(url.lastPathComponent).\(UUID().uuidString).tmp")
        let descriptor = open(temporary.path, O_WRONLY | O_CREAT | O_EXCL, 0o600)
        guard descriptor >= 0 else { throw KeyFormatError("cannot write \(url.path): \(String(cString: strerror(errno)))") }
        let written = data.withUnsafeBytes { buffer in
            var offset = 0
            while offset < buffer.count {
                let count = write(descriptor, buffer.baseAddress! + offset, buffer.count - offset)
                if count <= 0 { return false }
                offset += count
            }
            return true
        }
        let synced = fsync(descriptor) == 0
        close(descriptor)
        guard written, synced, rename(temporary.path, url.path) == 0 else {
            unlink(temporary.path)
            throw KeyFormatError("cannot write \(url.path): \(String(cString: strerror(errno)))")
        }
    }
}
