import CZlib
import Foundation

/// A CSV file as RevenueCat's exports write it (RFC 4180): a header row, then records whose
/// fields may be quoted (`"…"`, a quote inside written twice) and may then hold the delimiter
/// and line breaks. The delimiter is the comma or the semicolon, whichever the header uses
/// outside quotes (a header with both, or neither while it has several names, is refused).
/// Each record is named by the physical line it starts on, the header being line 1.
///
/// Refused rather than guessed (a second reader could read them otherwise): a header naming a
/// column twice, a quote that is never closed, text after a closing quote, a record with more
/// or fewer fields than the header.
public struct DelimitedText: Sendable {
    public struct Record: Sendable {
        /// The physical line the record starts on.
        public var line: Int
        public var fields: [String]

        public init(line: Int, fields: [String]) {
            self.line = line
            self.fields = fields
        }
    }

    public struct Failure: Error, CustomStringConvertible {
        public var line: Int?
        public var message: String
        public var description: String { line.map { "line \($0): \(message)" } ?? message }

        public init(line: Int? = nil, message: String) {
            self.line = line
            self.message = message
        }
    }

    /// Column name to position.
    public var columns: [String: Int]
    public var records: [Record]
    /// Records that could not be split into the header's fields: line and reason.
    public var malformed: [(line: Int, reason: String)]

    /// Reads `data`, gzipped or not (a gzip stream is recognised by its magic bytes).
    public init(_ data: Data) throws {
        var bytes = try Self.decompressedIfGzip(data)
        if bytes.starts(with: [0xEF, 0xBB, 0xBF]) { bytes.removeFirst(3) }
        guard String(validating: bytes, as: UTF8.self) != nil else { throw Failure(message: "the file is not UTF-8 text") }
        var parser = Parser(bytes: bytes)
        guard let header = try parser.headerRecord() else { throw Failure(message: "the file is empty") }
        var columns: [String: Int] = [:]
        for (index, name) in header.fields.enumerated() {
            let key = name.trimmingCharacters(in: .whitespaces).lowercased()
            guard columns[key] == nil else { throw Failure(line: 1, message: "the header names column '\(key)' twice") }
            columns[key] = index
        }
        self.columns = columns
        records = []
        malformed = []
        while let next = parser.nextRecord() {
            switch next {
            case .success(let record):
                if record.fields.count == 1, record.fields[0].isEmpty { continue }  // A blank line.
                if record.fields.count != header.fields.count {
                    malformed.append((record.line, "\(record.fields.count) fields where the header has \(header.fields.count)"))
                } else {
                    records.append(record)
                }
            case .failure(let failure):
                malformed.append((failure.line ?? 0, failure.message))
            }
        }
    }

    /// A byte-level reader over the whole file.
    struct Parser {
        let bytes: [UInt8]
        var position = 0
        var line = 1
        var delimiter: UInt8 = UInt8(ascii: ",")

        init(bytes: [UInt8]) { self.bytes = bytes }

        /// The header, choosing the delimiter from it.
        mutating func headerRecord() throws -> Record? {
            var commas = 0
            var semicolons = 0
            var quoted = false
            for byte in bytes {
                if byte == UInt8(ascii: "\"") { quoted.toggle() }
                if quoted { continue }
                if byte == UInt8(ascii: "\n") { break }
                if byte == UInt8(ascii: ",") { commas += 1 }
                if byte == UInt8(ascii: ";") { semicolons += 1 }
            }
            if commas > 0, semicolons > 0 {
                throw Failure(line: 1, message: "the header uses both ',' and ';': the delimiter is ambiguous")
            }
            delimiter = semicolons > 0 ? UInt8(ascii: ";") : UInt8(ascii: ",")
            switch nextRecord() {
            case nil: return nil
            case .success(let record)?: return record
            case .failure(let failure)?: throw failure
            }
        }

        /// The next record, or why it cannot be read (the reader then goes on at the next line).
        mutating func nextRecord() -> Result<Record, Failure>? {
            guard position < bytes.count else { return nil }
            let start = line
            var fields: [String] = []
            var field: [UInt8] = []
            while true {
                let quoted = position < bytes.count && bytes[position] == UInt8(ascii: "\"")
                if let problem = quoted ? readQuoted(into: &field) : readUnquoted(into: &field) {
                    return .failure(Failure(line: start, message: problem))
                }
                fields.append(String(decoding: field, as: UTF8.self))
                field.removeAll(keepingCapacity: true)
                if position < bytes.count, bytes[position] == UInt8(ascii: "\r") { position += 1 }
                if position >= bytes.count {
                    return .success(Record(line: start, fields: fields))
                }
                let byte = bytes[position]
                position += 1
                if byte == UInt8(ascii: "\n") {
                    line += 1
                    return .success(Record(line: start, fields: fields))
                }
                // The delimiter: another field follows.
            }
        }

        /// Reads a quoted field, the reader at its opening quote, into `field` (a doubled quote
        /// is one quote); what is wrong with it, if anything.
        private mutating func readQuoted(into field: inout [UInt8]) -> String? {
            position += 1
            while position < bytes.count {
                let byte = bytes[position]
                position += 1
                if byte != UInt8(ascii: "\"") {
                    if byte == UInt8(ascii: "\n") { line += 1 }
                    field.append(byte)
                } else if position < bytes.count, bytes[position] == UInt8(ascii: "\"") {
                    field.append(byte)
                    position += 1
                } else {
                    let next = position < bytes.count ? bytes[position] : UInt8(ascii: "\n")
                    guard next == delimiter || next == UInt8(ascii: "\n") || next == UInt8(ascii: "\r") else {
                        skipLine()
                        return "text after a closing quote"
                    }
                    return nil
                }
            }
            return "a quoted field is never closed"
        }

        /// Reads an unquoted field into `field`, up to the delimiter or the end of the line; what
        /// is wrong with it, if anything.
        private mutating func readUnquoted(into field: inout [UInt8]) -> String? {
            while position < bytes.count, bytes[position] != delimiter, bytes[position] != UInt8(ascii: "\n") {
                if bytes[position] == UInt8(ascii: "\"") {
                    skipLine()
                    return "a quote inside an unquoted field"
                }
                field.append(bytes[position])
                position += 1
            }
            if field.last == UInt8(ascii: "\r") { field.removeLast() }
            return nil
        }

        private mutating func skipLine() {
            while position < bytes.count {
                let byte = bytes[position]
                position += 1
                if byte == UInt8(ascii: "\n") {
                    line += 1
                    return
                }
            }
        }
    }

    /// The most a gzip stream may inflate to: 100 times its size, and never less than 64 MiB. A
    /// CSV export compresses about ten to one; a gzip bomb (a 2 MB file that inflates to 512 MB)
    /// is refused when its output passes the bound, with at most the bound held in memory.
    public static func inflationLimit(compressed: Int) -> Int {
        max(64 << 20, compressed.multipliedReportingOverflow(by: 100).overflow ? .max : compressed * 100)
    }

    /// The data itself, or its gzip stream inflated: every member of it (`cat a.gz b.gz` is one
    /// valid gzip stream of two members, as gzip(1) reads it), each checked against its trailer.
    /// Refused: a stream cut short or corrupt, bytes after the last member that are not another
    /// member, output beyond `limit` (``inflationLimit(compressed:)`` by default).
    public static func decompressedIfGzip(_ data: Data, limit: Int? = nil) throws -> [UInt8] {
        guard data.count >= 2, data[data.startIndex] == 0x1F, data[data.startIndex + 1] == 0x8B else { return [UInt8](data) }
        let limit = limit ?? inflationLimit(compressed: data.count)
        var stream = z_stream()
        // 16 + MAX_WBITS: a gzip header and trailer (checked: a corrupt stream is an error).
        guard inflateInit2_(&stream, 16 + MAX_WBITS, ZLIB_VERSION, Int32(MemoryLayout<z_stream>.size)) == Z_OK else {
            throw Failure(message: "zlib cannot start")
        }
        defer { inflateEnd(&stream) }
        var output: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 1 << 16)
        var members = 1
        try data.withUnsafeBytes { (input: UnsafeRawBufferPointer) in
            let base = input.bindMemory(to: UInt8.self).baseAddress!
            var offset = 0
            // zlib counts input in 32 bits: a larger file is fed a gigabyte at a time.
            func feed() {
                let count = min(input.count - offset, 1 << 30)
                stream.next_in = UnsafeMutablePointer(mutating: base + offset)
                stream.avail_in = uInt(count)
                offset += count
            }
            feed()
            while true {
                let status = chunk.withUnsafeMutableBufferPointer { chunk in
                    stream.next_out = chunk.baseAddress
                    stream.avail_out = uInt(chunk.count)
                    let status = inflate(&stream, Z_NO_FLUSH)
                    output.append(contentsOf: chunk[..<(chunk.count - Int(stream.avail_out))])
                    return status
                }
                guard output.count <= limit else {
                    throw Failure(
                        message: "the gzip stream of \(data.count) bytes inflates to more than \(limit): refused as a gzip bomb")
                }
                let remaining = Int(stream.avail_in) + (input.count - offset)
                switch status {
                case Z_OK:
                    if stream.avail_in == 0, offset < input.count { feed() }
                case Z_STREAM_END:
                    guard remaining > 0 else { return }
                    // Another member must follow; anything else is refused rather than dropped.
                    if stream.avail_in == 0 { feed() }
                    guard stream.avail_in >= 2, stream.next_in[0] == 0x1F, stream.next_in[1] == 0x8B else {
                        throw Failure(message: "\(remaining) bytes after gzip member \(members) are not another gzip member")
                    }
                    members += 1
                    guard inflateReset(&stream) == Z_OK else { throw Failure(message: "zlib cannot read gzip member \(members)") }
                case Z_BUF_ERROR where remaining == 0:
                    throw Failure(message: "gzip member \(members) is cut short")
                default:
                    throw Failure(message: "gzip member \(members) is corrupt (zlib status \(status))")
                }
            }
        }
        return output
    }
}

extension DelimitedText {
    /// The chains file of `countersign import appstore --chains`: `original_transaction_id,app_user_id`
    /// a record, read by the same reader as the exports (quotes, the semicolon, a BOM), with or
    /// without that header line. Refused whole, with the line, when a record is malformed or a
    /// field is empty: an import must not skip a chain it was named.
    public static func chains(_ data: Data) throws -> [(originalTransactionId: String, appUserId: String)] {
        let header = "original_transaction_id,app_user_id"
        var body = data
        if body.starts(with: [0xEF, 0xBB, 0xBF]) { body.removeFirst(3) }
        let first = String(decoding: body.prefix(while: { $0 != 0x0A && $0 != 0x0D }), as: UTF8.self)
        let hasHeader = first.lowercased().replacingOccurrences(of: ";", with: ",").replacingOccurrences(of: " ", with: "") == header
        // Without a header, one is supplied: the file's own lines are then one further down.
        let offset = hasHeader ? 0 : 1
        let table = try DelimitedText(hasHeader ? body : Data((header + "\n").utf8) + body)
        guard let chainColumn = table.columns["original_transaction_id"], let userColumn = table.columns["app_user_id"],
            table.columns.count == 2
        else { throw Failure(line: 1, message: "expected the columns original_transaction_id,app_user_id") }
        if let (line, reason) = table.malformed.first { throw Failure(line: line - offset, message: reason) }
        return try table.records.map { record in
            let chain = record.fields[chainColumn].trimmingCharacters(in: .whitespaces)
            let user = record.fields[userColumn].trimmingCharacters(in: .whitespaces)
            guard !chain.isEmpty, !user.isEmpty else {
                throw Failure(line: record.line - offset, message: "expected 'original_transaction_id,app_user_id'")
            }
            return (chain, user)
        }
    }
}
