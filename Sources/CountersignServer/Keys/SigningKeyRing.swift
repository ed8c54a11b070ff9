import CountersignCore
import CountersignServerCore
import Crypto
import Foundation
import Logging

/// The intermediate keys a server signs with.
///
/// **Managed mode** (the embedded default, for development): the root lives in
/// `DATA/keys/root.key`, its public half in `DATA/keys/root.pub`, and the server issues itself a
/// new 30-day intermediate whenever the newest one has 7 days or less left.
/// **Offline mode**: intermediates issued with `countersign keys intermediate` are read from a
/// directory; the server refuses to start if none is valid and warns as the newest nears expiry.
/// It always signs with the newest valid intermediate and never with an expired one.
public final class SigningKeyRing: @unchecked Sendable {
    public enum Mode: Sendable {
        case managed(dataDirectory: URL)
        case offline(intermediatesDirectory: URL)
    }

    public static let intermediateValidityDays = 30
    public static let renewalWindow: TimeInterval = 7 * 86_400

    public let mode: Mode
    private let lock = NSLock()
    private var signer: ResponseSigner
    private let now: @Sendable () -> Date
    private let logger: Logger

    /// The root's public key in managed mode (offline mode does not know it).
    public let managedRootPublicKey: Curve25519.Signing.PublicKey?

    public init(mode: Mode, now: @escaping @Sendable () -> Date, logger: Logger) throws {
        self.mode = mode
        self.now = now
        self.logger = logger
        switch mode {
        case .managed(let dataDirectory):
            let root = try Self.loadOrCreateRoot(in: dataDirectory, logger: logger)
            managedRootPublicKey = root.publicKey
            signer = ResponseSigner(key: try Self.newestManagedIntermediate(root: root, dataDirectory: dataDirectory, now: now(), logger: logger))
        case .offline(let directory):
            managedRootPublicKey = nil
            guard let newest = try Self.newestValid(in: directory, now: now()) else {
                throw ConfigurationError("no valid intermediate key in \(directory.path); issue one with `countersign keys intermediate`")
            }
            signer = ResponseSigner(key: newest)
        }
    }

    /// The signer for the next answer.
    public var currentSigner: ResponseSigner {
        lock.withLock { signer }
    }

    /// The signer for an answer made at `date`; throws when the newest intermediate has expired
    /// by then (the caller answers 503: an answer signed with an expired key would be refused by
    /// every client, and an unsigned one would teach clients to accept unsigned answers).
    public func signer(at date: Date) throws(APIError) -> ResponseSigner {
        let signer = currentSigner
        guard signer.key.certificate.isValid(at: date) else {
            throw APIError(.signingKeyExpired, "the server's signing key expired; answers cannot be signed until a new intermediate key is installed")
        }
        return signer
    }

    /// Days until the current intermediate expires (fractional).
    public var daysUntilExpiry: Double {
        currentSigner.key.certificate.expirationDate.timeIntervalSince(now()) / 86_400
    }

    /// Issues (managed) or picks up (offline) a newer intermediate when the current one is near
    /// expiry. Call at start and periodically.
    public func rotateIfNeeded() throws {
        let current = currentSigner.key.certificate
        let date = now()
        guard current.expirationDate.timeIntervalSince(date) <= Self.renewalWindow else { return }
        let replacement: IntermediateSigningKey?
        switch mode {
        case .managed(let dataDirectory):
            // Never create a root here: a vanished root must stop rotation, not replace the pinned one.
            let root = try KeyFile.loadRoot(from: DataDirectory(dataDirectory).rootKey)
            replacement = try Self.newestManagedIntermediate(root: root, dataDirectory: dataDirectory, now: date, logger: logger)
        case .offline(let directory):
            replacement = try Self.newestValid(in: directory, now: date)
        }
        if let replacement, replacement.certificate.expirationDays > current.expirationDays {
            lock.withLock { signer = ResponseSigner(key: replacement) }
            logger.info("signing with a new intermediate key", metadata: ["expires": "\(replacement.certificate.expirationDate)"])
        } else if !current.isValid(at: date) {
            throw ConfigurationError("the intermediate key expired and there is no newer one; answers can no longer be signed")
        } else {
            logger.warning("intermediate key expires soon and no newer one is available", metadata: ["expires": "\(current.expirationDate)"])
        }
    }

    /// Every intermediate in the key directory (the data directory's in managed mode, the
    /// offline directory otherwise), latest expiry first: the rotation history the dashboard
    /// shows. Only public parts leave this function; unreadable files are left out.
    public func intermediates() -> [IntermediateCertificate] {
        let directory =
            switch mode {
            case .managed(let dataDirectory): DataDirectory(dataDirectory).intermediates
            case .offline(let directory): directory
            }
        let files = (try? FileManager.default.contentsOfDirectory(at: directory, includingPropertiesForKeys: nil)) ?? []
        return files.filter { $0.pathExtension == "key" }
            .compactMap { try? KeyFile.loadIntermediate(from: $0).certificate }
            .sorted { $0.expirationDays > $1.expirationDays }
    }

    // MARK: Files

    static func loadOrCreateRoot(in dataDirectory: URL, logger: Logger) throws -> RootSigningKey {
        let layout = DataDirectory(dataDirectory)
        let file = layout.rootKey
        if FileManager.default.fileExists(atPath: file.path) {
            return try KeyFile.loadRoot(from: file)
        }
        try FileManager.default.createDirectory(at: layout.intermediates, withIntermediateDirectories: true)
        let root = RootSigningKey()
        try KeyFile.writePrivate(KeyFile.encode(root), to: file)
        let publicKey = root.publicKey.rawRepresentation.base64EncodedString()
        try Data((publicKey + "\n").utf8).write(to: layout.rootPublicKey, options: .atomic)
        logger.warning(
            "MANAGED KEY MODE: created a root key in the data directory. This is for development only: keep a production root offline (countersign keys root).",
            metadata: ["root_public_key": "\(publicKey)"]
        )
        return root
    }

    static func newestManagedIntermediate(root: RootSigningKey, dataDirectory: URL, now: Date, logger: Logger) throws -> IntermediateSigningKey {
        let directory = DataDirectory(dataDirectory).intermediates
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        if let newest = try newestValid(in: directory, now: now),
            newest.certificate.isIssued(by: root.publicKey),
            newest.certificate.expirationDate.timeIntervalSince(now) > renewalWindow
        {
            return newest
        }
        let issued = try root.issueIntermediate(validForDays: intermediateValidityDays, now: now)
        let name = "\(issued.certificate.expirationDays)-\(issued.certificate.publicKey.prefix(4).hexString).key"
        try KeyFile.writePrivate(KeyFile.encode(issued), to: directory.appendingPathComponent(name))
        logger.info("issued a managed intermediate key", metadata: ["expires": "\(issued.certificate.expirationDate)"])
        return issued
    }

    /// The valid intermediate with the latest expiry among `*.key` files in `directory`.
    static func newestValid(in directory: URL, now: Date) throws -> IntermediateSigningKey? {
        let files = (try? FileManager.default.contentsOfDirectory(at: directory, includingPropertiesForKeys: nil)) ?? []
        return try files.filter { $0.pathExtension == "key" }
            .map { try KeyFile.loadIntermediate(from: $0) }
            .filter { $0.certificate.isValid(at: now) }
            .max { $0.certificate.expirationDays < $1.certificate.expirationDays }
    }
}
