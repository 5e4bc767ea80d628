//! Attacker tests for `mesh serve`'s answers to `tools/call`s on a session, in raw bytes
//! over a plain socket: odd bodies and headers, pipelining, chunking, smuggling, large and
//! slow bodies, a hundred calls at once, the session bound, and a session kept through a
//! call longer than its idle limit (rmcp runs a session's call in the HTTP task: the
//! vendored patch, vendor/rmcp/README.mesh.md). And the console kept its owner's: a flood
//! of connections without the token, connections that dribble, one client of the owner's
//! holding every connection or every session; the owner gets in through each.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use mesh_core::runtime::{Call, Module, Tool};
use mesh_core::subjects::ToolResult;
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::mcp::{
    RawSession, Setup, TOKEN, authority_of, bearer, console_with, forging, header_of, http_whole,
    message_in,
};

/// A bound on one exchange, so that a hung console fails the test.
const WITHIN: Duration = Duration::from_secs(20);
/// The `Accept` MCP clients send.
const ACCEPT: &str = "Accept: application/json, text/event-stream";

/// One response read off the wire.
#[derive(Debug)]
struct Resp {
    status: u16,
    head: String,
    body: String,
}

impl Resp {
    /// The status and, for a 200, the JSON-RPC message.
    fn verdict(&self) -> (u16, Value) {
        if self.status == 200 {
            (self.status, message_in(&self.head, &self.body))
        } else {
            (self.status, Value::Null)
        }
    }
}

/// Writes `raw` on a new connection and reads every response until the console closes it.
async fn exchange(authority: &str, raw: &[u8]) -> Vec<Resp> {
    let mut stream = TcpStream::connect(authority).await.unwrap();
    stream.write_all(raw).await.unwrap();
    let mut got = Vec::new();
    let _ = tokio::time::timeout(WITHIN, stream.read_to_end(&mut got)).await;
    parse_responses(&got)
}

/// Reads one response off `stream`, which stays open: its head, and a body of the length it
/// names.
async fn read_one(stream: &mut TcpStream) -> Resp {
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    let read = tokio::time::timeout(WITHIN, async {
        loop {
            if let Some(end) = got.windows(4).position(|w| w == b"\r\n\r\n") {
                let head = String::from_utf8_lossy(&got[..end]).into_owned();
                let len = header_of(&head, "content-length").and_then(|n| n.parse().ok());
                if got.len() >= end + 4 + len.unwrap_or(0) {
                    return;
                }
            }
            let n = stream.read(&mut buf).await.unwrap();
            assert!(
                n > 0,
                "closed mid-response: {}",
                String::from_utf8_lossy(&got)
            );
            got.extend_from_slice(&buf[..n]);
        }
    });
    read.await.expect("a response");
    parse_responses(&got).remove(0)
}

/// Whether the console has closed `stream` (or closes it within a moment).
async fn closed(stream: &mut TcpStream) -> bool {
    let mut buf = [0u8; 1];
    let read = tokio::time::timeout(Duration::from_secs(2), stream.read(&mut buf));
    matches!(read.await, Ok(Ok(0) | Err(_)))
}

/// An `initialize` with the token and no session id, as MCP clients before 2026-07-28 send.
fn initialize_bytes(authority: &str) -> Vec<u8> {
    let init = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"raw","version":"0"}}}"#;
    format!(
        "POST /mcp HTTP/1.1\r\nHost: {authority}\r\n{}\r\nContent-Type: application/json\r\n{ACCEPT}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{init}",
        bearer(TOKEN),
        init.len()
    )
    .into_bytes()
}

/// HTTP/1.1 responses one after another: bodies by `content-length`, chunked, or to the end.
fn parse_responses(mut bytes: &[u8]) -> Vec<Resp> {
    let mut all = Vec::new();
    while let Some(end) = bytes.windows(4).position(|w| w == b"\r\n\r\n") {
        let head = String::from_utf8_lossy(&bytes[..end]).into_owned();
        bytes = &bytes[end + 4..];
        let status = head
            .split_whitespace()
            .nth(1)
            .and_then(|c| c.parse().ok())
            .unwrap_or(0);
        let mut body = Vec::new();
        if let Some(n) = header_of(&head, "content-length").and_then(|n| n.parse::<usize>().ok()) {
            let n = n.min(bytes.len());
            body.extend_from_slice(&bytes[..n]);
            bytes = &bytes[n..];
        } else if header_of(&head, "transfer-encoding") == Some("chunked") {
            loop {
                let Some(line) = bytes.windows(2).position(|w| w == b"\r\n") else {
                    bytes = &[];
                    break;
                };
                let size = String::from_utf8_lossy(&bytes[..line]);
                let size =
                    usize::from_str_radix(size.split(';').next().unwrap().trim(), 16).unwrap_or(0);
                bytes = &bytes[line + 2..];
                if size == 0 {
                    bytes = bytes.get(2..).unwrap_or_default();
                    break;
                }
                let n = size.min(bytes.len());
                body.extend_from_slice(&bytes[..n]);
                bytes = bytes.get(n + 2..).unwrap_or_default();
            }
        } else {
            body.extend_from_slice(bytes);
            bytes = &[];
        }
        all.push(Resp {
            status,
            head,
            body: String::from_utf8_lossy(&body).into_owned(),
        });
    }
    all
}

/// A console as ann with `more` arguments, and one raw session on it.
struct Console {
    _child: tokio::process::Child,
    authority: String,
    port: String,
    session: RawSession,
}

impl Console {
    async fn start(s: &Setup, more: &[&str]) -> Console {
        let (child, url) = console_with(&s.ann(), more).await;
        let authority = authority_of(&url).to_owned();
        let port = authority.rsplit(':').next().unwrap().to_owned();
        let session = RawSession::open(&url).await;
        Console {
            _child: child,
            authority,
            port,
            session,
        }
    }

    /// A POST of `body` on session `id` with `accept`; `lines` replace the default of a
    /// header they name (a line with no colon is the request line).
    fn call_bytes(&self, id: &str, accept: &str, lines: &[String], body: &str) -> Vec<u8> {
        let named = |name: &str| {
            lines.iter().any(|l| {
                l.split_once(':')
                    .is_some_and(|(k, _)| k.trim().eq_ignore_ascii_case(name))
            })
        };
        let request_line = lines
            .iter()
            .find(|l| l.starts_with("POST "))
            .cloned()
            .unwrap_or_else(|| "POST /mcp HTTP/1.1".to_owned());
        let mut head = format!("{request_line}\r\n");
        let defaults = [
            ("host", format!("Host: {}", self.authority)),
            ("authorization", bearer(TOKEN)),
            ("mcp-session-id", format!("Mcp-Session-Id: {id}")),
            (
                "mcp-protocol-version",
                "Mcp-Protocol-Version: 2025-11-25".into(),
            ),
            ("content-type", "Content-Type: application/json".into()),
            ("accept", accept.to_owned()),
            ("content-length", format!("Content-Length: {}", body.len())),
            ("connection", "Connection: close".into()),
        ];
        for (name, line) in defaults {
            if !named(name) {
                head.push_str(&line);
                head.push_str("\r\n");
            }
        }
        for l in lines.iter().filter(|l| !l.starts_with("POST ")) {
            if name_of(l).as_deref() == Some("accept") {
                head.push_str(accept);
            } else {
                head.push_str(l);
            }
            head.push_str("\r\n");
        }
        let mut bytes = format!("{head}\r\n").into_bytes();
        bytes.extend_from_slice(body.as_bytes());
        bytes
    }

    /// A new initialised session whose client can be asked (it declares elicitation).
    async fn asking_session(&self) -> String {
        let init = r#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{"elicitation":{}},"clientInfo":{"name":"raw","version":"0"}}}"#;
        let url = format!("http://{}/mcp", self.authority);
        let (status, head, _) = http_whole(&url, "POST", &[bearer(TOKEN)], init).await;
        assert_eq!(status, Some(200), "{head}");
        let id = header_of(&head, "mcp-session-id").unwrap().to_owned();
        let initialized = r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#;
        let r = self
            .one(&self.call_bytes(&id, ACCEPT, &[], initialized))
            .await;
        assert_eq!(r.status, 202, "{r:?}");
        id
    }

    /// A new session, by a raw `initialize`: its id.
    async fn initialize(&self) -> String {
        let r = self.one(&initialize_bytes(&self.authority)).await;
        assert_eq!(r.status, 200, "{r:?}");
        header_of(&r.head, "mcp-session-id")
            .unwrap_or_else(|| panic!("no session id: {r:?}"))
            .to_owned()
    }

    /// Whether session `id` is open: a ping on it is answered, not 404.
    async fn is_open(&self, id: &str) -> bool {
        let ping = r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#;
        let r = self.one(&self.call_bytes(id, ACCEPT, &[], ping)).await;
        assert!(matches!(r.status, 200 | 404), "{id}: {r:?}");
        r.status == 200
    }

    async fn one(&self, raw: &[u8]) -> Resp {
        let mut all = exchange(&self.authority, raw).await;
        assert_eq!(all.len(), 1, "{all:?}");
        all.pop().unwrap()
    }

    /// Sends `body` with header `lines` on the session: an answer, never a server error,
    /// and a 200 carries one JSON-RPC answer (a result or an error).
    async fn answer(&self, what: &str, lines: &[String], body: &str) -> Resp {
        let r = self
            .one(&self.call_bytes(&self.session.id, ACCEPT, lines, body))
            .await;
        assert!(r.status < 500, "{what}: {r:?}");
        if r.status == 200 {
            let m = r.verdict().1;
            assert!(
                m.get("result").is_some() != m.get("error").is_some(),
                "{what}: {r:?}"
            );
        }
        r
    }
}

/// A response as the expectations name it: `result` or `error` for a JSON-RPC answer in a
/// 200, else the HTTP status.
fn verdict(r: &Resp) -> String {
    match r.status {
        200 if r.verdict().1.get("result").is_some() => "result".into(),
        200 => "error".into(),
        other => other.to_string(),
    }
}

fn name_of(line: &str) -> Option<String> {
    line.split_once(':')
        .map(|(k, _)| k.trim().to_ascii_lowercase())
}

fn echo(id: impl Into<Value>, text: &str) -> String {
    json!({"jsonrpc": "2.0", "id": id.into(), "method": "tools/call",
        "params": {"name": "echo", "arguments": {"text": text}}})
    .to_string()
}

/// Bodies no SDK sends, each answered as rmcp reads it (an answer, never a server error, and
/// no smuggled state reaching the tool): ids at and past what MCP allows, `_meta` that rmcp
/// reads (a per-request protocol version) or cannot read, duplicate keys, arguments that
/// are no object, names with control characters.
#[tokio::test]
async fn odd_bodies_get_rmcps_answers() {
    let s = Setup::new().await;
    let c = Console::start(&s, &[]).await;
    let call = |id: &str, params: &str| {
        format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{params}}}"#)
    };
    let plain = r#"{"name":"echo","arguments":{"text":"hi"}}"#;
    let bodies = [
        // Ids: the largest i64 is one rmcp takes; past it, or a u64 only, it refuses.
        call("9223372036854775807", plain),
        call("-9223372036854775808", plain),
        call("9223372036854775808", plain),
        call("18446744073709551615", plain),
        call("-0", plain),
        call("1e2", plain),
        call("1.0", plain),
        call(r#""a\u0000b\"\\""#, plain),
        call(r#""\ud800""#, plain),
        call("0x10", plain),
        // _meta: rmcp reads a protocol version in it (and wants the header to match).
        call(
            "7",
            r#"{"name":"echo","arguments":{"text":"hi"},"_meta":{"io.modelcontextprotocol/protocolVersion":"2025-11-25"}}"#,
        ),
        call(
            "7",
            r#"{"name":"echo","arguments":{"text":"hi"},"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}}"#,
        ),
        call(
            "7",
            r#"{"name":"echo","arguments":{"text":"hi"},"_meta":5}"#,
        ),
        call(
            "7",
            r#"{"name":"echo","arguments":{"text":"hi"},"_meta":null}"#,
        ),
        call(
            "7",
            r#"{"name":"echo","arguments":{"text":"hi"},"_meta":{"progressToken":"p"}}"#,
        ),
        call(
            "7",
            r#"{"name":"echo","arguments":{"text":"hi"},"_meta":{"progressToken":{}}}"#,
        ),
        // Duplicate keys, at the top and in the params.
        r#"{"jsonrpc":"2.0","id":8,"method":"tools/call","method":"ping","params":{"name":"echo","arguments":{"text":"hi"}}}"#.to_owned(),
        r#"{"jsonrpc":"2.0","id":8,"method":"ping","method":"tools/call","params":{"name":"echo","arguments":{"text":"hi"}}}"#.to_owned(),
        call("8", r#"{"name":"echo_fail","name":"echo","arguments":{"text":"hi"}}"#),
        call("8", r#"{"name":"echo","arguments":{"text":"a","text":"b"}}"#),
        r#"{"jsonrpc":"2.0","jsonrpc":"2.0","id":8,"method":"tools/call","params":{"name":"echo","arguments":{"text":"hi"}}}"#.to_owned(),
        // Escapes in keys and values.
        r#"{"jsonrpc":"2.0","id":9,"met\u0068od":"tools\/call","params":{"name":"echo\u005fecho","arguments":{"text":"hi"}}}"#.to_owned(),
        // Arguments that are no object.
        call("10", r#"{"name":"echo","arguments":null}"#),
        call("10", r#"{"name":"echo","arguments":[]}"#),
        call("10", r#"{"name":"echo","arguments":"text"}"#),
        call("10", r#"{"name":"echo"}"#),
        // Names no tool has.
        call("11", r#"{"name":"echo\u0000","arguments":{"text":"hi"}}"#),
        call("11", r#"{"name":"echo\necho","arguments":{"text":"hi"}}"#),
        call("11", r#"{"name":"","arguments":{}}"#),
        call("11", r#"{"name":"nobody_here","arguments":{}}"#),
        call("11", r#"{"name":5,"arguments":{}}"#),
        // A message that is also a response, or has no params.
        r#"{"jsonrpc":"2.0","id":12,"method":"tools/call","params":{"name":"echo"},"error":{"code":1,"message":"x"}}"#.to_owned(),
        r#"{"jsonrpc":"2.0","id":12,"method":"tools/call"}"#.to_owned(),
        r#"{"jsonrpc":"2.0","id":12,"method":"tools/call","params":null}"#.to_owned(),
        // The questions' state and answers in the arguments, and as the params' own.
        call(
            "13",
            r#"{"name":"echo","arguments":{"text":"plain","requestState":"x","inputResponses":{}}}"#,
        ),
        call(
            "13",
            r#"{"name":"echo","arguments":{"text":"plain"},"requestState":"x"}"#,
        ),
        // Trailing bytes after the message.
        format!("{} ", echo(14, "hi")),
        format!("{}\n{}", echo(14, "hi"), echo(15, "hi")),
    ];
    // As rmcp reads each: a result, an error answer (200), or an HTTP status.
    let expected = [
        "result", "result", "415", "415", "result", "result", "result", "result", "415", "400",
        "result", "400", "415", "result", "result", "result", "415", "415", "error", "result",
        "415", "result", "result", "error", "error", "result", "error", "error", "error", "error",
        "error", "415", "error", "error", "result", "result", "result", "400",
    ];
    assert_eq!(bodies.len(), expected.len());
    let mut wrong = Vec::new();
    for (body, want) in bodies.iter().zip(expected) {
        let r = c.answer(body, &[], body).await;
        let m = r.verdict().1;
        if verdict(&r) != want {
            wrong.push(format!("{body}: expected {want}, got {r:?}"));
        }
        if r.status == 200 {
            assert!(
                m["result"]["content"][0]["text"] != "x",
                "{body}: smuggled state reached the tool: {m}"
            );
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n\n"));
}

/// Header tricks, each refused or answered as expected: spaces and case in `Host`, a `Host`
/// with a trailing dot, absolute-form targets, Origin spellings, content types, duplicate
/// protocol versions and session ids, session ids that are not text.
#[tokio::test]
async fn header_tricks_get_the_expected_answers() {
    let s = Setup::new().await;
    let c = Console::start(&s, &[]).await;
    let (port, authority) = (&c.port, &c.authority);
    let id = &c.session.id;
    let variants: Vec<Vec<String>> = vec![
        vec![format!("host:   {authority}   ")],
        vec![format!("HOST: LOCALHOST:{port}")],
        vec![format!("Host: 127.0.0.1:{port}.")],
        vec![format!("Host: localhost.:{port}")],
        vec![format!("Host: 127.0.0.1:0{port}")],
        vec![format!("Host: 127.0.0.1:{port}@evil.example")],
        vec![format!("Host: evil.example:{port}")],
        vec!["Host: ".to_owned()],
        vec![format!("Host: [::1]:{port}")],
        vec![format!("POST http://evil.example:{port}/mcp HTTP/1.1")],
        vec![format!("POST http://{authority}/mcp HTTP/1.1")],
        vec![
            format!("POST http://evil.example/mcp HTTP/1.1"),
            "Host: evil.example".into(),
        ],
        vec!["POST /elsewhere HTTP/1.1".to_owned()],
        vec!["POST * HTTP/1.1".to_owned()],
        vec![format!("Origin: http://localhost:{port}")],
        vec![format!("Origin: HTTP://LOCALHOST:{port}")],
        vec![format!("Origin: http://localhost:{port}/")],
        vec![format!("Origin: http://localhost:{port}.")],
        vec![format!("Origin: http://localhost:{port}@evil.example")],
        vec![format!("Origin: http://evil.example:{port}")],
        vec!["Origin: null".to_owned()],
        vec!["Origin: ".to_owned()],
        vec!["Content-Type: APPLICATION/JSON".to_owned()],
        vec!["Content-Type: application/json; charset=utf-8".to_owned()],
        vec!["Content-Type: application/json, text/plain".to_owned()],
        vec!["Content-Type: text/plain".to_owned()],
        vec![
            "Content-Type: application/json".to_owned(),
            "Content-Type: text/plain".to_owned(),
        ],
        vec![
            "Mcp-Protocol-Version: 2025-11-25".to_owned(),
            "Mcp-Protocol-Version: 2025-11-25".to_owned(),
        ],
        vec![
            "Mcp-Protocol-Version: 2025-11-25".to_owned(),
            "Mcp-Protocol-Version: 1999-01-01".to_owned(),
        ],
        vec!["Mcp-Protocol-Version: 2025-06-18".to_owned()],
        vec!["Mcp-Protocol-Version: 2026-07-28".to_owned()],
        vec!["Mcp-Protocol-Version:".to_owned()],
        vec![
            format!("Mcp-Session-Id: {id}"),
            "Mcp-Session-Id: not-a-session".to_owned(),
        ],
        vec![
            "Mcp-Session-Id: not-a-session".to_owned(),
            format!("Mcp-Session-Id: {id}"),
        ],
        vec![format!("Mcp-Session-Id: {}", id.to_uppercase())],
        vec![format!("Mcp-Session-Id: {id} x")],
        vec!["Mcp-Session-Id:".to_owned()],
        vec![format!("Mcp-Method: tools/list")],
        vec![format!("Mcp-Name: echo_fail")],
        vec!["Authorization: bearer a-console-token-for-the-tests".to_owned()],
        vec![format!("Authorization: Bearer  {TOKEN} ")],
        vec!["Accept: application/json".to_owned()],
        vec!["Accept: text/event-stream".to_owned()],
        vec!["Accept: */*".to_owned()],
    ];
    // As the console and rmcp answer each (the three `Accept`s last, each 406).
    // (The third: a `Host` whose port does not read as the console's own is refused.)
    let mut expected = [
        "result", "result", "403", "403", "result", "403", "403", "400", "result", "403", "result",
        "403", "result", "result", "result", "result", "result", "403", "403", "403", "403", "403",
        "result", "result", "415", "415", "result", "result", "result", "result", "400", "400",
        "result", "404", "404", "404", "404", "result", "result", "401", "result",
    ]
    .into_iter();
    let mut wrong = Vec::new();
    let body = echo(21, "trick");
    for lines in &variants {
        let what = format!("{lines:?}");
        // An `Accept` line of the variant is replaced by the path's own in `call_bytes`;
        // compare the variant's own Accept as it is.
        if lines
            .iter()
            .any(|l| name_of(l).as_deref() == Some("accept"))
        {
            let raw = c.call_bytes(id, &lines[0], lines, &body);
            let r = c.one(&raw).await;
            assert_eq!(r.status, 406, "{what}: {r:?}");
            continue;
        }
        let r = c.answer(&what, lines, &body).await;
        let want = expected.next().expect("an expectation per variant");
        if verdict(&r) != want {
            wrong.push(format!("{what}: expected {want}, got {r:?}"));
        }
    }
    assert!(
        expected.next().is_none() && wrong.is_empty(),
        "{}",
        wrong.join("\n")
    );
    // Bytes in a session id that are not text: no answer on a session.
    let mut raw = c.call_bytes("\u{1}", ACCEPT, &[], &body);
    let at = raw.windows(3).position(|w| w == b": \x01").unwrap() + 2;
    raw[at] = 0xff;
    let r = c.one(&raw).await;
    assert_ne!(r.status, 200, "{r:?}");
}

/// Requests pipelined on one connection are answered in order, each as one JSON body; HTTP/1.0 and chunked bodies are answered
/// as HTTP/1.1 with a length.
#[tokio::test]
async fn pipelined_and_chunked_calls_are_answered_in_order() {
    let s = Setup::new().await;
    let c = Console::start(&s, &[]).await;
    let id = &c.session.id;
    let keep = ["Connection: keep-alive".to_owned()];
    let mut raw = c.call_bytes(id, ACCEPT, &keep, &echo(1, "one"));
    raw.extend(c.call_bytes(id, ACCEPT, &keep, &echo(2, "two")));
    raw.extend(c.call_bytes(
        id,
        ACCEPT,
        &keep,
        r#"{"jsonrpc":"2.0","id":3,"method":"ping"}"#,
    ));
    raw.extend(c.call_bytes(id, ACCEPT, &[], &echo(4, "four")));
    let all = exchange(&c.authority, &raw).await;
    assert_eq!(all.len(), 4, "{all:?}");
    for (n, r) in all.iter().enumerate() {
        let m = r.verdict().1;
        assert_eq!(m["id"], n + 1, "{all:?}");
    }
    assert_eq!(all[1].verdict().1["result"]["content"][0]["text"], "two");
    assert!(
        all.iter()
            .all(|r| header_of(&r.head, "content-type") == Some("application/json")),
        "{all:?}"
    );

    // HTTP/1.0.
    let old = c.call_bytes(
        id,
        ACCEPT,
        &["POST /mcp HTTP/1.0".to_owned()],
        &echo(5, "old"),
    );
    let r = c.one(&old).await;
    assert_eq!(
        r.verdict().1["result"]["content"][0]["text"],
        "old",
        "{r:?}"
    );

    // Chunked, with extensions and a trailer; and with a Content-Length too (smuggling).
    let body = echo(6, "chunked");
    let (a, b) = body.split_at(10);
    let chunked = format!(
        "{:x};ext=1\r\n{a}\r\n{:x}\r\n{b}\r\n0\r\nX-Trailer: t\r\n\r\n",
        a.len(),
        b.len()
    );
    for lines in [
        vec!["Transfer-Encoding: chunked".to_owned()],
        vec![
            "Transfer-Encoding: chunked".to_owned(),
            "Content-Length: 5".to_owned(),
        ],
    ] {
        let mut raw = c.call_bytes(id, ACCEPT, &lines, "");
        // call_bytes wrote a Content-Length for an empty body unless the variant named
        // one: drop it for the pure chunked request.
        if lines.len() == 1 {
            let text = String::from_utf8(raw)
                .unwrap()
                .replace("Content-Length: 0\r\n", "");
            raw = text.into_bytes();
        }
        raw.extend_from_slice(chunked.as_bytes());
        // A second request smuggled after the chunked body is never answered as one.
        raw.extend(c.call_bytes(id, ACCEPT, &[], &echo(66, "smuggled")));
        let all = exchange(&c.authority, &raw).await;
        let texts: Vec<_> = all
            .iter()
            .filter(|r| r.status == 200)
            .map(|r| r.verdict().1["result"]["content"][0]["text"].clone())
            .collect();
        if lines.len() == 1 {
            assert_eq!(texts.first(), Some(&json!("chunked")), "{all:?}");
        } else {
            // Transfer-Encoding wins over Content-Length (RFC 9112), and the connection
            // is closed after: what follows the chunked body is never read as a request.
            assert_eq!(texts, [json!("chunked")], "{lines:?}: {all:?}");
        }
    }
}

/// A body past the bound and a body that trickles in, on a session: JSON-RPC errors.
#[tokio::test]
async fn large_and_slow_bodies_on_a_session() {
    let s = Setup::new().await;
    let c = Console::start(&s, &["--idle", "2s"]).await;
    let huge = echo(1, &"x".repeat(4 << 20));
    let r = c.answer("4 MiB", &[], &huge).await;
    assert_eq!(r.status, 413, "{r:?}");
    assert!(r.body.contains("larger than"), "{r:?}");

    let body = echo(2, "slow");
    let raw = c.call_bytes(&c.session.id, ACCEPT, &[], &body);
    let head_len = raw.len() - body.len();
    let mut stream = TcpStream::connect(&c.authority).await.unwrap();
    stream.write_all(&raw[..head_len]).await.unwrap();
    let started = std::time::Instant::now();
    let trickle = async {
        for b in body.as_bytes() {
            if stream.write_all(&[*b]).await.is_err() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(300)).await;
            if started.elapsed() > Duration::from_secs(8) {
                break;
            }
        }
    };
    let _ = tokio::time::timeout(Duration::from_secs(8), trickle).await;
    let mut got = Vec::new();
    let _ = tokio::time::timeout(WITHIN, stream.read_to_end(&mut got)).await;
    let all = parse_responses(&got);
    assert_eq!(all.first().map(|r| r.status), Some(408), "{all:?}");
    assert!(started.elapsed() < Duration::from_secs(10));
}

/// A tool `ping` that asks the person which, counting its first rounds in `counted`; with
/// `"bad": true` its form is one rmcp's types do not read.
fn asking(counted: Arc<AtomicUsize>) -> Tool {
    Tool::new(
        "ping",
        "asks which",
        json!({"type": "object"}),
        move |c: Call| {
            let counted = counted.clone();
            async move {
                if c.continuation.is_none() {
                    counted.fetch_add(1, Ordering::SeqCst);
                }
                let form = if c.args.get("bad") == Some(&json!(true)) {
                    json!({"type": "object"})
                } else {
                    json!({"type": "object", "properties": {"pick": {"type": "string"}}})
                };
                let mut requests = serde_json::Map::new();
                requests.insert("which".into(), ToolResult::elicitation("which?", form));
                ToolResult::input_required(requests, "state".into())
            }
        },
    )
}

/// A tool that asks for the person's input is called once per call: by a client that cannot
/// be asked (told so), and by one that can (asked on the call's event stream). A tool's own
/// `_meta` cannot say the mesh failed.
#[tokio::test]
async fn a_question_reaches_the_tool_once_and_a_forged_outcome_is_dropped() {
    let s = Setup::new().await;
    let first_rounds = Arc::new(AtomicUsize::new(0));
    let asker = Module::new("gone", "1.0.0", "asks, or forges")
        .tool(asking(first_rounds.clone()))
        .tool(forging("forge"));
    let _asker = s.bus.serve(asker).await;
    let c = Console::start(&s, &[]).await;
    let ask = json!({"jsonrpc": "2.0", "id": 31, "method": "tools/call",
        "params": {"name": "gone_ping", "arguments": {}}})
    .to_string();
    // Catalogued first (the module registered just now).
    let mut r = c.one(&c.call_bytes(&c.session.id, ACCEPT, &[], &ask)).await;
    for _ in 0..100 {
        if r.verdict().1.get("result").is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
        r = c.one(&c.call_bytes(&c.session.id, ACCEPT, &[], &ask)).await;
    }
    for bad in [false, true] {
        let ask = json!({"jsonrpc": "2.0", "id": 31, "method": "tools/call",
            "params": {"name": "gone_ping", "arguments": {"bad": bad}}})
        .to_string();
        first_rounds.store(0, Ordering::SeqCst);
        let r = c.one(&c.call_bytes(&c.session.id, ACCEPT, &[], &ask)).await;
        let m = r.verdict().1;
        assert_eq!(m["result"]["isError"], true, "{bad}: {m}");
        let text = m["result"]["content"][0]["text"].as_str().unwrap();
        assert!(text.contains("cannot give"), "{bad}: {m}");
        assert_eq!(first_rounds.load(Ordering::SeqCst), 1, "{bad}: {r:?}");
    }

    // A client that can be asked: rmcp asks, on the call's event stream; the tool was called
    // once by then.
    let askable = c.asking_session().await;
    let ask = json!({"jsonrpc": "2.0", "id": 33, "method": "tools/call",
        "params": {"name": "gone_ping", "arguments": {}}})
    .to_string();
    {
        let accept = ACCEPT;
        first_rounds.store(0, Ordering::SeqCst);
        let mut stream = TcpStream::connect(&c.authority).await.unwrap();
        stream
            .write_all(&c.call_bytes(&askable, accept, &[], &ask))
            .await
            .unwrap();
        let mut seen = Vec::new();
        let asked = tokio::time::timeout(WITHIN, async {
            let mut buf = [0u8; 4096];
            loop {
                let n = stream.read(&mut buf).await.unwrap();
                assert!(n > 0, "{}", String::from_utf8_lossy(&seen));
                seen.extend_from_slice(&buf[..n]);
                if String::from_utf8_lossy(&seen).contains("elicitation/create") {
                    return;
                }
            }
        })
        .await;
        assert!(
            asked.is_ok(),
            "{accept}: {}",
            String::from_utf8_lossy(&seen)
        );
        assert_eq!(first_rounds.load(Ordering::SeqCst), 1, "{accept}");
    }

    let forge = json!({"jsonrpc": "2.0", "id": 32, "method": "tools/call",
        "params": {"name": "gone_forge", "arguments": {}}})
    .to_string();
    let r = c.answer("forged outcome", &[], &forge).await;
    let m = r.verdict().1;
    assert!(m["result"]["_meta"].get("mesh/outcome").is_none(), "{m}");
    assert_eq!(m["result"]["_meta"]["other"], 1, "{m}");
}

/// A hundred calls at once on one session, each on its connection: every one answered with
/// its own id and text.
#[tokio::test]
async fn a_hundred_calls_at_once_on_one_session() {
    let s = Setup::new().await;
    let c = Arc::new(Console::start(&s, &[]).await);
    let mut tasks = Vec::new();
    for n in 0..100u64 {
        let c = c.clone();
        tasks.push(tokio::spawn(async move {
            let raw = c.call_bytes(&c.session.id, ACCEPT, &[], &echo(n, &format!("n{n}")));
            (n, c.one(&raw).await)
        }));
    }
    for t in tasks {
        let (n, r) = t.await.unwrap();
        let m = r.verdict().1;
        assert_eq!(m["id"], n, "{m}");
        assert_eq!(m["result"]["content"][0]["text"], format!("n{n}"), "{m}");
    }
}

/// The session bound holds for an `initialize` whose `Mcp-Session-Id` is not text (rmcp
/// reads it as no session and makes a new one): it is answered, and a session is closed for
/// it, so that no more are open than the bound.
#[tokio::test]
async fn a_session_id_that_is_not_text_does_not_pass_the_session_bound() {
    let s = Setup::new().await;
    let c = Console::start(&s, &["--max-sessions", "2"]).await;
    let second = RawSession::open(&format!("http://{}/mcp", c.authority)).await;
    let mut made = vec![c.session.id.clone(), second.id.clone()];
    let init = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"raw","version":"0"}}}"#;
    for odd in [b"\xff".as_slice(), b"\x80abc", b"a\x7fb"] {
        let mut raw = c.call_bytes("\u{1}", ACCEPT, &[], init);
        let at = raw.windows(3).position(|w| w == b": \x01").unwrap() + 2;
        raw.splice(at..at + 1, odd.iter().copied());
        let r = c.one(&raw).await;
        // A byte HTTP does not allow in a header (DEL) is hyper's 400 first.
        if r.status == 400 {
            continue;
        }
        assert_eq!(r.status, 200, "{odd:?}: {r:?}");
        made.push(header_of(&r.head, "mcp-session-id").unwrap().to_owned());
    }
    let mut open = 0;
    for id in &made {
        open += usize::from(c.is_open(id).await);
    }
    assert_eq!(open, 2, "{open} sessions open, past a bound of 2");
    let r = c
        .one(&c.call_bytes("", ACCEPT, &["Mcp-Session-Id: x".into()], init))
        .await;
    assert_ne!(r.status, 200, "{r:?}");
}

/// A DELETE the console refuses (a foreign `Origin`: a page elsewhere that learned the token
/// and the session id) ends nothing: the session goes on.
#[tokio::test]
async fn a_refused_delete_leaves_the_session_as_it_was() {
    let s = Setup::new().await;
    let c = Console::start(&s, &[]).await;
    let raw = format!(
        "DELETE /mcp HTTP/1.1\r\nHost: {}\r\n{}\r\nMcp-Session-Id: {}\r\nOrigin: http://evil.example\r\nConnection: close\r\n\r\n",
        c.authority,
        bearer(TOKEN),
        c.session.id
    );
    assert_eq!(c.one(raw.as_bytes()).await.status, 403);
    let r = c
        .one(&c.call_bytes(&c.session.id, ACCEPT, &[], &echo(2, "still")))
        .await;
    assert_eq!(
        r.verdict().1["result"]["content"][0]["text"],
        "still",
        "{r:?}"
    );
}

/// A session is in use while it waits on its own call: a call longer than the session's
/// idle limit, with nothing else said on the session, is answered, and the session goes on.
/// (Nothing the relay makes up keeps it alive, so nothing can be mistaken for a request of
/// the client's: the call's id is one a keep-alive might have used.)
#[tokio::test]
async fn a_call_longer_than_the_session_idle_limit_keeps_its_session() {
    let s = Setup::new().await;
    let c = Console::start(&s, &["--session-idle", "1s", "--timeout", "10s"]).await;
    let slow = json!({"jsonrpc": "2.0", "id": "mesh-console-keep-alive", "method": "tools/call",
        "params": {"name": "echo_sleep", "arguments": {"ms": 2500}}})
    .to_string();
    let r = c.answer("slow", &[], &slow).await;
    assert_eq!(r.status, 200, "{r:?}");
    let m = r.verdict().1;
    assert_eq!(m["id"], "mesh-console-keep-alive", "{m}");
    assert_eq!(m["result"]["content"][0]["text"], "slept 2500 ms", "{m}");
    let r = c.answer("after", &[], &echo(2, "after")).await;
    assert_eq!(
        r.verdict().1["result"]["content"][0]["text"],
        "after",
        "{r:?}"
    );
    // Idle past the limit, the session ends (404 to its id).
    tokio::time::sleep(Duration::from_millis(2500)).await;
    let r = c
        .one(&c.call_bytes(&c.session.id, ACCEPT, &[], &echo(3, "late")))
        .await;
    assert_eq!(r.status, 404, "{r:?}");
}

/// A client that leaves while its call waits on a question to it (a crash, or on purpose,
/// to hold a session slot for ever) does not keep its session: left idle past the limit, the
/// session ends (404 to its id) and its slot is free again.
#[tokio::test]
async fn a_client_gone_mid_question_does_not_keep_its_session() {
    let s = Setup::new().await;
    let asker = Module::new("gone", "1.0.0", "asks").tool(asking(Arc::default()));
    let _asker = s.bus.serve(asker).await;
    let c = Console::start(&s, &["--session-idle", "1s", "--max-sessions", "2"]).await;
    let askable = c.asking_session().await;
    let ask = json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call",
        "params": {"name": "gone_ping", "arguments": {}}})
    .to_string();
    // Catalogued first (the module registered just now): asked, then the client leaves.
    let mut asked = false;
    for _ in 0..100 {
        let mut stream = TcpStream::connect(&c.authority).await.unwrap();
        let raw = c.call_bytes(&askable, ACCEPT, &["Connection: keep-alive".into()], &ask);
        stream.write_all(&raw).await.unwrap();
        let mut seen = Vec::new();
        let mut buf = [0u8; 4096];
        while let Ok(Ok(n)) = tokio::time::timeout(WITHIN, stream.read(&mut buf)).await {
            if n == 0 {
                break;
            }
            seen.extend_from_slice(&buf[..n]);
            let text = String::from_utf8_lossy(&seen);
            if text.contains("elicitation/create") {
                asked = true;
                break;
            }
            if text.contains("unknown tool") {
                break;
            }
        }
        drop(stream);
        if asked {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(asked, "the tool's question never reached the client");
    // Gone; nothing else said on the session for well past its idle limit (1 s).
    tokio::time::sleep(Duration::from_millis(3500)).await;
    let r = c
        .one(&c.call_bytes(&askable, ACCEPT, &[], &echo(8, "late")))
        .await;
    assert_eq!(
        r.status, 404,
        "a session whose client left is still open: {r:?}"
    );
    // And its slot is free: a second session besides the console's own can be made.
    c.asking_session().await;
}

/// Many `initialize`s at the same moment: each could see fewer sessions than the bound while
/// the others were still being made, and pass it. Sessions are made one at a time: every
/// `initialize` is answered (the least recently used session closed for it past the bound),
/// and no more sessions are left open than `--max-sessions` allows, however many come at
/// once.
#[tokio::test]
async fn initializes_at_the_same_moment_do_not_pass_the_session_bound() {
    let s = Setup::new().await;
    // The console's own session is one of the three.
    let c = Console::start(&s, &["--max-sessions", "3"]).await;
    let raw = initialize_bytes(&c.authority);
    let barrier = Arc::new(tokio::sync::Barrier::new(64));
    let tasks: Vec<_> = (0..64)
        .map(|_| {
            let (authority, raw, barrier) = (c.authority.clone(), raw.clone(), barrier.clone());
            tokio::spawn(async move {
                barrier.wait().await;
                exchange(&authority, &raw).await
            })
        })
        .collect();
    let mut made = vec![c.session.id.clone()];
    for t in tasks {
        let answers = t.await.unwrap();
        assert!(
            answers.len() == 1 && answers[0].status == 200,
            "an initialize was not answered: {answers:?}"
        );
        made.push(
            header_of(&answers[0].head, "mcp-session-id")
                .unwrap()
                .to_owned(),
        );
    }
    let mut open = 0;
    for id in &made {
        open += usize::from(c.is_open(id).await);
    }
    assert_eq!(open, 3, "{open} sessions open, with a bound of 3");
}

/// A page on another local port (a dev server the browser trusts, DNS rebinding to it) names
/// its own port in `Host`: the console answers only to its own.
#[tokio::test]
async fn a_host_naming_another_port_is_refused() {
    let s = Setup::new().await;
    let c = Console::start(&s, &[]).await;
    let port: u16 = c.port.parse().expect("a port");
    let other = if port == 65535 { port - 1 } else { port + 1 };
    let body = echo(22, "port");
    for (host, want) in [
        (format!("Host: 127.0.0.1:{port}"), "result"),
        (format!("Host: localhost:{port}"), "result"),
        (format!("Host: 127.0.0.1:{other}"), "403"),
        (format!("Host: localhost:{other}"), "403"),
        (format!("Host: [::1]:{other}"), "403"),
        ("Host: 127.0.0.1:80".to_owned(), "403"),
    ] {
        let r = c.answer(&host, std::slice::from_ref(&host), &body).await;
        assert_eq!(verdict(&r), want, "{host}: {r:?}");
    }
}

/// The issue's attack: a local process without the token holds as many connections as it
/// can (a request begun, a byte now and then, opened again whenever closed). The owner's
/// `initialize`s and calls are answered while it lasts, and the flood's connections are
/// closed, not held. (Before: every place was the flood's, and the owner was answered 503.)
#[tokio::test]
async fn a_flood_without_the_token_does_not_keep_the_owner_out() {
    let s = Setup::new().await;
    let c = Console::start(&s, &["--max-connections", "16"]).await;
    let stop = Arc::new(AtomicBool::new(false));
    let flood: Vec<_> = (0..48)
        .map(|_| {
            let (authority, stop) = (c.authority.clone(), stop.clone());
            tokio::spawn(async move {
                let mut ended = 0usize;
                while !stop.load(Ordering::SeqCst) {
                    let Ok(mut stream) = TcpStream::connect(&authority).await else {
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    };
                    let mut open = stream.write_all(b"P").await.is_ok();
                    let mut buf = [0u8; 256];
                    while open && !stop.load(Ordering::SeqCst) {
                        tokio::select! {
                            // Closed, or answered: either way the console let it go.
                            _ = stream.read(&mut buf) => open = false,
                            () = tokio::time::sleep(Duration::from_millis(200)) => {
                                open = stream.write_all(b"O").await.is_ok();
                            }
                        }
                        ended += usize::from(!open);
                    }
                    // Then again, a second later.
                    tokio::time::sleep(Duration::from_secs(1)).await;
                }
                ended
            })
        })
        .collect();
    // The flood takes every place it can, and comes back once.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    for n in 0..5 {
        let r = c.one(&initialize_bytes(&c.authority)).await;
        assert_eq!(
            r.status, 200,
            "the owner's initialize under the flood: {r:?}"
        );
        assert!(header_of(&r.head, "mcp-session-id").is_some(), "{r:?}");
        let r = c
            .one(&c.call_bytes(&c.session.id, ACCEPT, &[], &echo(n, "mine")))
            .await;
        let m = r.verdict().1;
        assert_eq!(m["result"]["content"][0]["text"], "mine", "{r:?}");
    }
    stop.store(true, Ordering::SeqCst);
    let mut ended = 0;
    for t in flood {
        ended += t.await.unwrap();
    }
    assert!(
        ended >= 48,
        "the console held the flood: {ended} connections closed"
    );
}

/// Connections that dribble without the token are closed a few seconds after their accept,
/// whatever they send: a request line then a byte a second; the token's header then a byte a
/// second (the headers never end, so no request carried the token). (Before: each was held
/// for the idle limit, 30 s, and a flood of them, opened again, held the console.)
#[tokio::test]
async fn connections_dribbling_without_the_token_are_closed() {
    let s = Setup::new().await;
    let c = Console::start(&s, &[]).await;
    let starts = [
        "POST /mcp HTTP/1.1\r\n".to_owned(),
        format!(
            "POST /mcp HTTP/1.1\r\nHost: {}\r\n{}\r\n",
            c.authority,
            bearer(TOKEN)
        ),
    ];
    let dribbles = starts.clone().map(|start| {
        let authority = c.authority.clone();
        tokio::spawn(async move {
            let mut stream = TcpStream::connect(&authority).await.unwrap();
            stream.write_all(start.as_bytes()).await.unwrap();
            let (mut reading, mut writing) = stream.split();
            let dripping = async {
                loop {
                    tokio::time::sleep(Duration::from_secs(1)).await;
                    if writing.write_all(b"X").await.is_err() {
                        return;
                    }
                }
            };
            let mut seen = Vec::new();
            tokio::select! {
                _ = reading.read_to_end(&mut seen) => true,
                () = dripping => true,
                () = tokio::time::sleep(WITHIN) => false,
            }
        })
    });
    for (start, dribble) in starts.iter().zip(dribbles) {
        assert!(
            dribble.await.unwrap(),
            "{start:?} and a byte a second held a connection for {WITHIN:?}"
        );
    }
}

/// One client of the owner's holding every connection (kept alive, each used once) does not
/// keep the owner's other client out: the least recently active connection is closed for the
/// newcomer. (Before: 503 until the idle limit let one go.)
#[tokio::test]
async fn a_client_holding_every_connection_does_not_keep_the_owners_other_client_out() {
    let s = Setup::new().await;
    let c = Console::start(&s, &["--max-connections", "8"]).await;
    let keep = ["Connection: keep-alive".to_owned()];
    let mut held = Vec::new();
    for n in 0..8 {
        let mut stream = TcpStream::connect(&c.authority).await.unwrap();
        let raw = c.call_bytes(&c.session.id, ACCEPT, &keep, &echo(n, "runaway"));
        stream.write_all(&raw).await.unwrap();
        let r = read_one(&mut stream).await;
        assert_eq!(r.status, 200, "{n}: {r:?}");
        held.push(stream);
    }
    let r = c.one(&initialize_bytes(&c.authority)).await;
    assert_eq!(r.status, 200, "the other client's initialize: {r:?}");
    // The oldest went first; the newest is still there.
    assert!(
        closed(&mut held[0]).await,
        "the least recently active is open"
    );
    let last = held.last_mut().unwrap();
    let raw = c.call_bytes(&c.session.id, ACCEPT, &keep, &echo(9, "still"));
    last.write_all(&raw).await.unwrap();
    let r = read_one(last).await;
    assert_eq!(
        r.verdict().1["result"]["content"][0]["text"],
        "still",
        "{r:?}"
    );
}

/// The issue's other attack: `initialize`s with the token fill the sessions. Past the bound,
/// each `initialize` is answered and the least recently used session closed (its client
/// initialises again): the owner's session in use stays, the flood's oldest go. (Before:
/// 503 until sessions expired, two minutes.)
#[tokio::test]
async fn initializes_past_the_session_bound_close_the_least_recently_used() {
    let s = Setup::new().await;
    let c = Console::start(&s, &["--max-sessions", "3"]).await;
    let mut made = Vec::new();
    for n in 0..6 {
        made.push(c.initialize().await);
        // The owner's session, in use meanwhile.
        let r = c
            .one(&c.call_bytes(&c.session.id, ACCEPT, &[], &echo(n, "mine")))
            .await;
        assert_eq!(
            r.verdict().1["result"]["content"][0]["text"],
            "mine",
            "{r:?}"
        );
    }
    for (n, id) in made.iter().enumerate() {
        assert_eq!(c.is_open(id).await, n >= 4, "session {n} of 6, bound 3");
    }
    assert!(
        c.is_open(&c.session.id).await,
        "the session in use was closed"
    );
}

/// Calls in flight are not cut off for a newcomer: when every connection the owner's
/// clients hold is answering a call, a new one is answered 503 (and may try again), and
/// every call is answered.
#[tokio::test]
async fn calls_in_flight_keep_their_connections() {
    let s = Setup::new().await;
    // Four proven places.
    let c = Console::start(&s, &["--max-connections", "8", "--timeout", "20s"]).await;
    let mut calls = Vec::new();
    for n in 0..4 {
        let slow = json!({"jsonrpc": "2.0", "id": 10 + n, "method": "tools/call",
            "params": {"name": "echo_sleep", "arguments": {"ms": 3000}}})
        .to_string();
        let mut stream = TcpStream::connect(&c.authority).await.unwrap();
        stream
            .write_all(&c.call_bytes(&c.session.id, ACCEPT, &[], &slow))
            .await
            .unwrap();
        calls.push(stream);
    }
    // Each call is in hand (its connection proven) before the newcomer comes.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let r = c
        .one(&c.call_bytes(&c.session.id, ACCEPT, &[], &echo(2, "new")))
        .await;
    assert_eq!(r.status, 503, "{r:?}");
    assert!(r.body.contains("all answering requests"), "{r:?}");
    for mut stream in calls {
        let mut got = Vec::new();
        let _ = tokio::time::timeout(WITHIN, stream.read_to_end(&mut got)).await;
        let r = parse_responses(&got).remove(0);
        let m = r.verdict().1;
        assert_eq!(m["result"]["content"][0]["text"], "slept 3000 ms", "{r:?}");
    }
    let r = c
        .one(&c.call_bytes(&c.session.id, ACCEPT, &[], &echo(3, "later")))
        .await;
    assert_eq!(
        r.verdict().1["result"]["content"][0]["text"],
        "later",
        "{r:?}"
    );
}

/// A 2026-07-28 request on no session, as a stateless client sends it: `lines` added to
/// its head.
fn stateless_bytes(authority: &str, lines: &[String], body: &str) -> Vec<u8> {
    let mut head = format!(
        "POST /mcp HTTP/1.1\r\nHost: {authority}\r\n{}\r\nMCP-Protocol-Version: 2026-07-28\r\n\
         Content-Type: application/json\r\n{ACCEPT}\r\nContent-Length: {}\r\nConnection: close\r\n",
        bearer(TOKEN),
        body.len()
    );
    for l in lines {
        head.push_str(l);
        head.push_str("\r\n");
    }
    let mut bytes = format!("{head}\r\n").into_bytes();
    bytes.extend_from_slice(body.as_bytes());
    bytes
}

/// A stateless 2026-07-28 request's body: `method` with `params` and the `_meta` such a
/// client sends.
fn stateless_body(id: u64, method: &str, mut params: Value) -> String {
    params["_meta"] = json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientInfo": {"name": "raw", "version": "0"},
        "io.modelcontextprotocol/clientCapabilities": {}
    });
    json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}).to_string()
}

/// A tool taking a `region` that HTTP clients mirror into `Mcp-Param-Region`, answering with
/// it; the count of calls that reached it.
fn routing(name: &str) -> (Tool, Arc<AtomicUsize>) {
    let heard = Arc::new(AtomicUsize::new(0));
    let counted = heard.clone();
    let tool = Tool::new(
        name,
        "answers with the region it was routed for",
        json!({"type": "object", "properties": {
            "region": {"type": "string", "x-mcp-header": "Region"},
            "query": {"type": "string"}
        }, "required": ["region"]}),
        move |c: Call| {
            let counted = counted.clone();
            async move {
                counted.fetch_add(1, Ordering::SeqCst);
                ToolResult::text(c.args["region"].as_str().unwrap_or_default())
            }
        },
    );
    (tool, heard)
}

/// Waits until a stateless `tools/list` of the console holds `needle`.
async fn until_listed(c: &Console, needle: &str) {
    let list = stateless_body(1, "tools/list", json!({}));
    tokio::time::timeout(WITHIN, async {
        loop {
            let r = c
                .one(&stateless_bytes(
                    &c.authority,
                    &["Mcp-Method: tools/list".into()],
                    &list,
                ))
                .await;
            if r.status == 200 && r.body.contains(needle) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
    .await
    .unwrap_or_else(|_| panic!("{needle} is listed"));
}

/// SEP-2243: a tool's parameters marked `x-mcp-header` travel in `Mcp-Param-*` headers too,
/// for the boxes on the way to route by; a request whose header says otherwise than its body
/// (another value, none, bad base64) is refused by the console (400, -32020) before any
/// module hears of it — one at a time or fifty at once — and one that agrees (plain or
/// base64) is called.
#[tokio::test]
async fn a_header_that_says_otherwise_than_the_body_never_reaches_the_tool() {
    let s = Setup::new().await;
    let (route, heard) = routing("route");
    let _gone = s
        .bus
        .serve(Module::new("gone", "1.0.0", "routes").tool(route))
        .await;
    let c = Console::start(&s, &[]).await;
    let authority = c.authority.clone();
    // Listed first: the console checks the headers against the list it keeps.
    until_listed(&c, "gone_route").await;
    let call = |id: u64, region: &str| {
        stateless_body(
            id,
            "tools/call",
            json!({"name": "gone_route", "arguments": {"region": region, "query": "q"}}),
        )
    };
    let heads = |param: Option<&str>| {
        let mut lines = vec![
            "Mcp-Method: tools/call".to_owned(),
            "Mcp-Name: gone_route".to_owned(),
        ];
        lines.extend(param.map(|p| format!("Mcp-Param-Region: {p}")));
        lines
    };
    let agreed = c
        .one(&stateless_bytes(
            &authority,
            &heads(Some("eu")),
            &call(2, "eu"),
        ))
        .await;
    assert_eq!(agreed.status, 200, "{agreed:?}");
    assert_eq!(
        agreed.verdict().1["result"]["content"][0]["text"],
        "eu",
        "{agreed:?}"
    );
    let encoded = c
        .one(&stateless_bytes(
            &authority,
            &heads(Some("=?base64?ZXU=?=")),
            &call(3, "eu"),
        ))
        .await;
    assert_eq!(encoded.status, 200, "{encoded:?}");
    assert_eq!(heard.load(Ordering::SeqCst), 2);
    for (what, param) in [
        ("another region", Some("us")),
        ("no header", None),
        ("bad base64", Some("=?base64?ZX!U=?=")),
    ] {
        let r = c
            .one(&stateless_bytes(&authority, &heads(param), &call(4, "eu")))
            .await;
        assert_eq!(r.status, 400, "{what}: {r:?}");
        let e: Value = serde_json::from_str(&r.body).unwrap_or_default();
        assert_eq!(e["error"]["code"], -32020, "{what}: {r:?}");
    }
    // A crowd, each header saying otherwise.
    let refused = futures_util::future::join_all((0..50u64).map(|n| {
        let raw = stateless_bytes(&authority, &heads(Some("us")), &call(100 + n, "eu"));
        let authority = authority.clone();
        async move { exchange(&authority, &raw).await }
    }))
    .await;
    for r in refused.iter().flatten() {
        assert_eq!(r.status, 400, "{r:?}");
    }
    assert_eq!(refused.iter().flatten().count(), 50);
    assert_eq!(
        heard.load(Ordering::SeqCst),
        2,
        "no refused call reached the tool"
    );
}

/// SEP-2243 for an eponymous tool called by its long form: module `gone`'s tool `gone` is
/// listed as `gone`, and `gone_gone` names it too — a call by that name whose
/// `Mcp-Param-Region` says otherwise than its body is refused as the short name's is, and
/// never reaches the tool.
#[tokio::test]
async fn an_eponymous_tool_called_by_its_long_name_has_its_headers_checked() {
    let s = Setup::new().await;
    let (route, heard) = routing("gone");
    let _gone = s
        .bus
        .serve(Module::new("gone", "1.0.0", "routes").tool(route))
        .await;
    let c = Console::start(&s, &[]).await;
    let authority = c.authority.clone();
    until_listed(&c, r#""name":"gone""#).await;
    for (id, name) in [(2, "gone"), (3, "gone_gone")] {
        let body = stateless_body(
            id,
            "tools/call",
            json!({"name": name, "arguments": {"region": "eu"}}),
        );
        let heads = [
            "Mcp-Method: tools/call".to_owned(),
            format!("Mcp-Name: {name}"),
            "Mcp-Param-Region: us".to_owned(),
        ];
        let r = c.one(&stateless_bytes(&authority, &heads, &body)).await;
        assert_eq!(r.status, 400, "{name}: {r:?}");
    }
    assert_eq!(
        heard.load(Ordering::SeqCst),
        0,
        "no refused call reached the tool"
    );
}
