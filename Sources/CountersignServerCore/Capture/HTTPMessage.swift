import CountersignCore
import Foundation

/// A raw HTTP/1.1 message as captured from the wire (`\r\n` or `\n` line ends).
///
/// Used to check captured traffic offline. Parsing is strict: a message cut short in its start
/// line, headers or body is an error that says where, never a silently shorter message.
public struct HTTPMessage: Sendable {
    /// The request line or status line.
    public var startLine: String
    /// Header fields in order, names as written.
    public var headers: [(name: String, value: String)]
    public var body: Data

    /// The first value of a header, compared case-insensitively.
    public subscript(header name: String) -> String? {
        headers.first { $0.name.caseInsensitiveCompare(name) == .orderedSame }?.value
    }

    /// Parses one message. The header block ends at an empty line or, when there is no body,
    /// at the end of the text after a complete line.
    public init(parsing data: Data) throws(HTTPMessageError) {
        let bytes = [UInt8](data)
        var lines: [String] = []
        var index = 0
        var sawEmptyLine = false
        while index < bytes.count {
            guard let newline = bytes[index...].firstIndex(of: 0x0A) else {
                throw HTTPMessageError(
                    lines.isEmpty ? "truncated: the start line has no line end" : "truncated: the last header line has no line end")
            }
            var end = newline
            if end > index && bytes[end - 1] == 0x0D { end -= 1 }
            let line = bytes[index..<end]
            index = newline + 1
            if line.isEmpty {
                if lines.isEmpty { continue }  // tolerate blank lines before the start line
                sawEmptyLine = true
                break
            }
            guard let text = String(bytes: line, encoding: .utf8) else {
                throw HTTPMessageError("header line \(lines.count + 1) is not UTF-8")
            }
            lines.append(text)
        }
        guard let startLine = lines.first else { throw HTTPMessageError("empty: no start line") }
        self.startLine = startLine
        headers = []
        for line in lines.dropFirst() {
            guard let colon = line.firstIndex(of: ":"), colon != line.startIndex else {
                throw HTTPMessageError("malformed header line '\(line.prefix(40))': no name before ':'")
            }
            let name = String(line[..<colon])
            guard !name.contains(where: \.isWhitespace) else {
                throw HTTPMessageError("malformed header name '\(name.prefix(40))'")
            }
            headers.append((name, line[line.index(after: colon)...].trimmingCharacters(in: .whitespaces)))
        }
        let rest = Data(bytes[index...])
        if !sawEmptyLine && !rest.isEmpty { throw HTTPMessageError("no empty line after the headers") }
        body = try Self.decodeBody(rest, headers: headers)
    }

    private static func decodeBody(_ rest: Data, headers: [(name: String, value: String)]) throws(HTTPMessageError) -> Data {
        let find = { (name: String) in headers.first { $0.name.caseInsensitiveCompare(name) == .orderedSame }?.value }
        if let encoding = find("Transfer-Encoding") {
            // Both framings at once is how requests are smuggled past a second parser (RFC 9112,
            // 6.1); a capture that has both is refused rather than read one way.
            guard find("Content-Length") == nil else {
                throw HTTPMessageError("both Transfer-Encoding and Content-Length: the body could be read two ways")
            }
            guard encoding.lowercased() == "chunked" else {
                throw HTTPMessageError("Transfer-Encoding '\(encoding.prefix(40))' is not supported (only chunked)")
            }
            return try decodeChunked(rest)
        }
        guard let lengthText = find("Content-Length") else { return rest }
        guard !lengthText.isEmpty, lengthText.utf8.count <= 18, lengthText.utf8.allSatisfy({ (0x30...0x39).contains($0) }),
            let length = Int(lengthText)
        else {
            throw HTTPMessageError("Content-Length '\(lengthText.prefix(20))' is not a number")
        }
        guard rest.count >= length else {
            throw HTTPMessageError("truncated body: Content-Length is \(length) but only \(rest.count) bytes follow")
        }
        guard rest.count == length else {
            throw HTTPMessageError("body is \(rest.count) bytes but Content-Length is \(length)")
        }
        return rest
    }

    private static func decodeChunked(_ data: Data) throws(HTTPMessageError) -> Data {
        let bytes = [UInt8](data)
        var body = Data()
        var index = 0
        while true {
            guard let newline = bytes[index...].firstIndex(of: 0x0A) else {
                throw HTTPMessageError("truncated chunked body: missing chunk size line")
            }
            let sizeField =
                String(decoding: bytes[index..<newline], as: UTF8.self)
                .split(separator: ";", maxSplits: 1).first.map { $0.trimmingCharacters(in: .whitespacesAndNewlines) } ?? ""
            guard !sizeField.isEmpty, sizeField.utf8.count <= 15, sizeField.allSatisfy(\.isHexDigit), let size = Int(sizeField, radix: 16) else {
                throw HTTPMessageError("malformed chunk size '\(sizeField.prefix(20))'")
            }
            index = newline + 1
            if size == 0 { return body }
            guard bytes.count - index >= size else { throw HTTPMessageError("truncated chunked body: chunk of \(size) bytes cut short") }
            body.append(contentsOf: bytes[index..<index + size])
            index += size
            if index < bytes.count && bytes[index] == 0x0D { index += 1 }
            guard index < bytes.count && bytes[index] == 0x0A else {
                throw HTTPMessageError("truncated chunked body: chunk not followed by a line end")
            }
            index += 1
        }
    }
}

/// A captured HTTP message that cannot be parsed.
public struct HTTPMessageError: Error, Hashable, CustomStringConvertible {
    public let message: String
    public init(_ message: String) { self.message = message }
    public var description: String { message }
}
