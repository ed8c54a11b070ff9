import CountersignAppStore
import CountersignCore
import Crypto
import Foundation
import SwiftASN1
import Testing
import X509

@Suite("Pinned Apple root")
struct AppleRootTests {
    @Test("the embedded Apple Root CA - G3 has Apple's published fingerprint")
    func fingerprint() throws {
        var serializer = DER.Serializer()
        try serializer.serialize(AppleRootCertificates.rootCAG3)
        #expect(SHA256.hash(data: serializer.serializedBytes).hexString == "63343abfb89a6a03ebb57e9b3f5fa7be7c4f5c756f3017b3a8c488c3653e9179")
        #expect(AppleRootCertificates.rootCAG3.subject.description.contains("Apple Root CA - G3"))
    }
}
