import CountersignImportFormats
import Foundation
import Testing

/// The `--chains` file of `countersign import appstore`, read by the exports' reader: what one
/// reader takes as one field, the other does too.
@Suite("The chains file")
struct ChainsFileTests {
    static func read(_ text: String) throws -> [String] {
        try DelimitedText.chains(Data(text.utf8)).map { "\($0.originalTransactionId)|\($0.appUserId)" }
    }

    @Test("with or without its header, a BOM, the semicolon, quotes holding a comma, blank lines")
    func accepted() throws {
        #expect(try Self.read("600000,alice\n600001,bob\n") == ["600000|alice", "600001|bob"])
        #expect(try Self.read("original_transaction_id,app_user_id\r\n600000,alice\r\n") == ["600000|alice"])
        #expect(try Self.read("\u{FEFF}original_transaction_id;app_user_id\n600000;\"a;b\"\n") == ["600000|a;b"])
        #expect(try Self.read("600000,\"smith, jane\"\n\n600001, bob \n") == ["600000|smith, jane", "600001|bob"])
    }

    @Test("refused whole with the file's own line: an empty field, a third field, an open quote")
    func refused() throws {
        let cases: [(String, String)] = [
            ("600000,alice\n600001,\n", "line 2: expected 'original_transaction_id,app_user_id'"),
            ("600000,alice,extra\n", "line 1: 3 fields where the header has 2"),
            ("original_transaction_id,app_user_id\n600000,\"alice\n", "line 2:"),
        ]
        for (text, message) in cases {
            do {
                _ = try Self.read(text)
                Issue.record("accepted: \(text)")
            } catch {
                #expect("\(error)".hasPrefix(message), "\(text): \(error)")
            }
        }
    }
}
