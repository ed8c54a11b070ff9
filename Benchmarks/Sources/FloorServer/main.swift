// The floor for the server benchmarks: the least a signed HTTP answer can cost on this stack.
// A minimal Hummingbird 2 app that answers every `GET /` with the same 1 KiB body and one
// Ed25519 signature over it, made anew for each answer. `scripts/bench-server.py` runs it next to
// Countersign, pinned to the same core, and reports Countersign's server CPU per request as a
// ratio to this one's.
//
//     FloorServer [port]      (0 or nothing: a free port; prints "listening on http://127.0.0.1:PORT")
import Crypto
import Foundation
import HTTPTypes
import Hummingbird
import Logging

let port = CommandLine.arguments.count > 1 ? Int(CommandLine.arguments[1]) ?? 0 : 0
let key = Curve25519.Signing.PrivateKey()
// 1 KiB of JSON-looking text, the size of a typical CustomerInfo.
let body: [UInt8] = {
    let filler = String(repeating: "x", count: 1024 - #"{"filler":""}"#.utf8.count)
    return Array(#"{"filler":"\#(filler)"}"#.utf8)
}()
precondition(body.count == 1024)
let signatureHeader = HTTPField.Name("X-Signature")!

let router = Router()
router.get("/") { _, _ -> Response in
    let signature = try key.signature(for: body)
    return Response(
        status: .ok,
        headers: [.contentType: "application/json", signatureHeader: signature.base64EncodedString()],
        body: .init(byteBuffer: ByteBuffer(bytes: body))
    )
}

var logger = Logger(label: "floor")
logger.logLevel = .warning
let app = Application(
    router: router,
    configuration: .init(address: .hostname("127.0.0.1", port: port), serverName: "Floor"),
    onServerRunning: { channel in
        // Unbuffered: the benchmark script waits for this line on a pipe.
        FileHandle.standardOutput.write(Data("listening on http://127.0.0.1:\(channel.localAddress?.port ?? 0)\n".utf8))
    },
    logger: logger
)
try await app.runService()
