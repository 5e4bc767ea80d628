//! The MCP surface with clients this project did not write: the official Python SDK over
//! stdio and HTTP under both protocol generations, and raw JSON-RPC lines.

use std::process::Stdio;
use std::time::Duration;

use mesh_core::runtime::{Call, Module, Tool};
use mesh_core::subjects::ToolResult;
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};

use crate::bus::{Bus, Running, python};

const MESH: &str = env!("CARGO_BIN_EXE_mesh");
const CLIENT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/py/mcp_client.py");
/// A bound on waiting for one line from a child, so a broken surface fails instead of hanging.
const LINE_WITHIN: Duration = Duration::from_secs(30);

/// catalog and echo running, `gone` registered and stopped; `ann` may call echo's tools
/// except `echo_whoami`, and `gone`'s.
pub(crate) struct Setup {
    pub(crate) bus: Bus,
    _modules: Vec<Running>,
}

impl Setup {
    pub(crate) async fn new() -> Setup {
        let bus = Bus::accounts(
            &["catalog", "echo", "gone"],
            &[
                (
                    "ann",
                    &[
                        "mesh.echo.echo",
                        "mesh.echo.fail",
                        "mesh.echo.sleep",
                        "mesh.echo.choose",
                        "mesh.gone.>",
                    ],
                ),
                ("root", &["mesh.>"]),
            ],
        )
        .await;
        let catalog = bus.serve_catalog().await;
        let echo = bus.serve(mesh_echo::module()).await;
        let gone = Module::new("gone", "1.0.0", "a module that stopped").tool(Tool::new(
            "ping",
            "answers pong",
            json!({"type": "object"}),
            |_c: Call| async { ToolResult::text("pong") },
        ));
        bus.serve(gone).await.stop().await;
        Setup {
            bus,
            _modules: vec![catalog, echo],
        }
    }

    /// `mesh` arguments that connect as ann.
    pub(crate) fn ann(&self) -> Vec<String> {
        self.bus.flags("ann")
    }
}

/// Runs the Python SDK client against `target` (a URL, or the mesh binary and its args).
/// The bearer token the tests' consoles are started with (the file path is `mesh up`'s test).
pub const TOKEN: &str = "a-console-token-for-the-tests";

async fn sdk(mode: &str, target: &[String]) -> Value {
    let out = Command::new(python())
        .env("MESH_CONSOLE_TOKEN", TOKEN)
        .arg(CLIENT)
        .arg(mode)
        .args(target)
        .stdin(Stdio::null())
        .kill_on_drop(true)
        .output()
        .await
        .expect("python runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "the MCP Python SDK client failed (bin/test installs it into target/py):\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_str(stdout.trim()).unwrap_or_else(|e| panic!("{e}: {stdout}"))
}

/// What every client must have seen, whatever the transport and protocol.
fn assert_seen(seen: &Value, protocol: &str) {
    assert_eq!(seen["protocol"], protocol);
    let tools: Vec<&str> = seen["tools"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .collect();
    for t in ["catalog_modules", "echo", "echo_choose"] {
        assert!(tools.contains(&t), "{t} not listed: {tools:?}");
    }
    assert!(
        !tools.contains(&"gone_ping"),
        "a stopped module's tools are not listed"
    );
    assert_eq!(seen["echo_schema_required"], json!(["text"]));
    assert_eq!(seen["result"], json!({"isError": false, "text": "hello"}));
    assert_eq!(
        seen["tool_error"],
        json!({"isError": true, "text": "said no"})
    );
    let text = |k: &str| seen[k]["text"].as_str().unwrap_or_default().to_owned();
    assert_eq!(seen["nobody_serves"]["isError"], true, "{seen}");
    assert!(
        text("nobody_serves").starts_with("nobody serves gone_ping"),
        "{seen}"
    );
    assert_eq!(seen["denied"]["isError"], true, "{seen}");
    assert!(text("denied").starts_with("not yours"), "{seen}");
    assert_eq!(seen["slow"]["isError"], true, "{seen}");
    assert!(
        text("slow").contains("did not answer within 0.5 s"),
        "{seen}"
    );
    assert_eq!(
        seen["asks"],
        json!({"isError": false, "text": "you chose b"})
    );
    assert_eq!(seen["unknown"]["error_code"], -32602, "{seen}");
}

#[tokio::test]
async fn python_sdk_over_stdio_both_protocol_generations() {
    let s = Setup::new().await;
    let mut target = vec![MESH.to_owned()];
    target.extend(s.ann());
    target.extend(["mcp", "--timeout", "500ms"].map(String::from));
    // legacy: initialize handshake at 2025-11-25, elicitation/create answered by the callback.
    assert_seen(&sdk("legacy", &target).await, "2025-11-25");
    // 2026-07-28: stateless, input_required passed through and driven by the SDK.
    assert_seen(&sdk("2026-07-28", &target).await, "2026-07-28");
}

/// `mesh serve --port 0` as ann; returns the child and its URL.
async fn console(s: &Setup) -> (Child, String) {
    console_as(&s.ann()).await
}

/// `mesh serve --port 0` connecting with `connect` (the `nats` flags); the child and its URL.
pub async fn console_as(connect: &[String]) -> (Child, String) {
    console_with(connect, &[]).await
}

/// `console_as` with more `mesh serve` arguments.
pub(crate) async fn console_with(connect: &[String], more: &[&str]) -> (Child, String) {
    let mut child = Command::new(MESH)
        .env("MESH_CONSOLE_TOKEN", TOKEN)
        .args(connect)
        .args(["serve", "--port", "0"])
        .args(if more.contains(&"--timeout") {
            &[][..]
        } else {
            &["--timeout", "500ms"][..]
        })
        .args(more)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let first = tokio::time::timeout(LINE_WITHIN, lines.next_line())
        .await
        .expect("mesh serve prints its address")
        .unwrap()
        .unwrap();
    let url = first
        .strip_prefix("console: ")
        .unwrap_or_else(|| panic!("{first}"))
        .to_owned();
    (child, url)
}

#[tokio::test]
async fn python_sdk_over_http_both_protocol_generations() {
    let s = Setup::new().await;
    let (_console, url) = console(&s).await;
    let target = vec![url];
    assert_seen(&sdk("legacy", &target).await, "2025-11-25");
    assert_seen(&sdk("2026-07-28", &target).await, "2026-07-28");
}

/// The `host:port` of an `http://` URL.
pub(crate) fn authority_of(url: &str) -> &str {
    url.trim_start_matches("http://").split('/').next().unwrap()
}

/// The URL `mesh serve` prints first, and its host:port.
async fn console_address(child: &mut Child) -> (String, String) {
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let first = lines.next_line().await.unwrap().unwrap();
    let url = first.strip_prefix("console: ").unwrap().to_owned();
    let authority = authority_of(&url).to_owned();
    (url, authority)
}

/// One HTTP/1.1 request by hand (`headers` as whole lines); returns the status code and
/// the body.
async fn http(url: &str, method: &str, headers: &[String], body: &str) -> (u16, String) {
    let (status, body) = try_http(url, method, headers, body).await;
    (
        status.unwrap_or_else(|| panic!("no status in the response, body {body:?}")),
        body,
    )
}

/// `http`, with no status when the connection closed before one came.
async fn try_http(
    url: &str,
    method: &str,
    headers: &[String],
    body: &str,
) -> (Option<u16>, String) {
    let (status, _, body) = http_whole(url, method, headers, body).await;
    (status, body)
}

/// One HTTP/1.1 request by hand: the status code, the response's head and its body.
pub(crate) async fn http_whole(
    url: &str,
    method: &str,
    headers: &[String],
    body: &str,
) -> (Option<u16>, String, String) {
    let authority = authority_of(url);
    let mut stream = tokio::net::TcpStream::connect(authority).await.unwrap();
    // The URL's own path and query, as raw as given (`/mcp?token=…`).
    let target = url
        .trim_start_matches("http://")
        .split_once('/')
        .map_or("/mcp".to_owned(), |(_, p)| format!("/{p}"));
    let mut head = format!("{method} {target} HTTP/1.1\r\n");
    if !headers.iter().any(|h| h.starts_with("Host:")) {
        head.push_str(&format!("Host: {authority}\r\n"));
    }
    for h in headers {
        head.push_str(h);
        head.push_str("\r\n");
    }
    let request = format!(
        "{head}Content-Type: application/json\r\nAccept: application/json, text/event-stream\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut response = String::new();
    let _ = tokio::time::timeout(LINE_WITHIN, stream.read_to_string(&mut response)).await;
    let status = response
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok());
    let (head, body) = response
        .split_once("\r\n\r\n")
        .map(|(h, b)| (h.to_owned(), b.to_owned()))
        .unwrap_or_default();
    (status, head, body)
}

pub(crate) fn bearer(token: &str) -> String {
    format!("Authorization: Bearer {token}")
}

/// A ping POSTed with the token, a `Host` and maybe an `Origin`; returns the status code.
async fn post_status(url: &str, host: &str, origin: Option<&str>) -> u16 {
    let mut headers = vec![bearer(TOKEN), format!("Host: {host}")];
    headers.extend(origin.map(|o| format!("Origin: {o}")));
    let ping = r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#;
    http(url, "POST", &headers, ping).await.0
}

#[tokio::test]
async fn the_console_needs_its_token_and_answers_bad_bodies_in_json_rpc() {
    let s = Setup::new().await;
    let (_console, url) = console(&s).await;
    let ping = r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#;
    // Without the token, or with another: 401, whatever else the request says.
    for headers in [vec![], vec![bearer("not-it")], vec![bearer(&TOKEN[1..])]] {
        let (status, body) = http(&url, "POST", &headers, ping).await;
        assert_eq!(status, 401, "{headers:?}: {body}");
        assert!(body.contains("bearer token"), "{body}");
    }
    // The token in the URL, for a client that cannot send headers: only the token, only
    // once, and never over a header that says otherwise.
    let query = |q: &str| format!("{url}?{q}");
    for (target, headers) in [
        (query(&format!("token={}", &TOKEN[1..])), vec![]),
        (query("token="), vec![]),
        (query(&format!("token={TOKEN}&token=x")), vec![]),
        (query(&format!("token=x&token={TOKEN}")), vec![]),
        (query(&format!("tok%65n={TOKEN}x")), vec![]),
        (query(&format!("token={TOKEN}")), vec![bearer("not-it")]),
        (
            query(&format!("token={TOKEN}")),
            vec!["Authorization: Basic eDp5".to_owned()],
        ),
        (format!("{url}/?token={TOKEN}x"), vec![]),
    ] {
        let (status, body) = http(&target, "POST", &headers, ping).await;
        assert_eq!(status, 401, "{target} {headers:?}: {body}");
    }
    for target in [
        query(&format!("token={TOKEN}")),
        // Percent-encoded as a URL may carry it, and beside other parameters.
        query(&format!("a=1&tok%65n={TOKEN}")),
    ] {
        let init = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"raw","version":"0"}}}"#;
        let (status, body) = http(&target, "POST", &[], init).await;
        assert_eq!(status, 200, "{target}: {body}");
        assert!(body.contains("serverInfo"), "{target}: {body}");
    }
    // `mesh --console` without the token says so, and how to fix it.
    let out = Command::new(MESH)
        .env("XDG_STATE_HOME", "/nonexistent")
        .env_remove("MESH_CONSOLE_TOKEN")
        .args(["tools", "--console", &url])
        .output()
        .await
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("bearer token"), "{err}");

    // With it: a body that is not JSON, or a batch, is answered 400 in JSON-RPC's words.
    let auth = [bearer(TOKEN)];
    let (status, body) = http(&url, "POST", &auth, "{not json").await;
    assert_eq!(status, 400, "{body}");
    let error: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(error["error"]["code"], -32700, "{body}");
    let (status, body) = http(&url, "POST", &auth, &format!("[{ping}]")).await;
    assert_eq!(status, 400, "{body}");
    let error: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(error["error"]["code"], -32600, "{body}");

    // Ending a session answers 200, as clients expect.
    let init = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"raw","version":"0"}}}"#;
    let authority = authority_of(&url);
    let mut stream = tokio::net::TcpStream::connect(authority).await.unwrap();
    let request = format!(
        "POST /mcp HTTP/1.1\r\nHost: {authority}\r\n{}\r\nContent-Type: application/json\r\n\
         Accept: application/json, text/event-stream\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{init}",
        bearer(TOKEN),
        init.len()
    );
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut response = String::new();
    let _ = tokio::time::timeout(LINE_WITHIN, stream.read_to_string(&mut response)).await;
    let session = response
        .lines()
        .find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.eq_ignore_ascii_case("mcp-session-id")
                .then(|| v.trim().to_owned())
        })
        .unwrap_or_else(|| panic!("no session in {response}"));
    let (status, body) = http(
        &url,
        "DELETE",
        &[bearer(TOKEN), format!("Mcp-Session-Id: {session}")],
        "",
    )
    .await;
    assert_eq!(status, 200, "{body}");
}

#[tokio::test]
async fn the_console_is_loopback_only() {
    let s = Setup::new().await;
    let (_console, url) = console(&s).await;
    let authority = authority_of(&url).to_owned();
    let port = authority.rsplit(':').next().unwrap();
    assert_eq!(
        post_status(&url, &authority, Some("http://evil.example")).await,
        403
    );
    assert_eq!(post_status(&url, "evil.example", None).await, 403);
    assert_eq!(
        post_status(&url, &format!("evil.example:{port}"), None).await,
        403
    );
    let local = format!("http://localhost:{port}");
    assert_ne!(post_status(&url, &authority, Some(&local)).await, 403);

    for host in ["0.0.0.0", "::", "192.168.1.10"] {
        let out = Command::new(MESH)
            .args(s.ann())
            .args(["serve", "--host", host, "--port", "0"])
            .output()
            .await
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{host} accepted");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("loopback only"), "{err}");
    }
}

/// `mesh mcp` driven line by line.
struct LineClient {
    _child: Child,
    stdin: ChildStdin,
    lines: Lines<BufReader<ChildStdout>>,
}

impl LineClient {
    async fn start(s: &Setup) -> LineClient {
        LineClient::start_with(s, &[], Stdio::null()).await
    }

    /// `mesh <flags> mcp` with its stderr where `stderr` says.
    async fn start_with(s: &Setup, flags: &[&str], stderr: Stdio) -> LineClient {
        let mut child = Command::new(MESH)
            .args(s.ann())
            .args(flags)
            .arg("mcp")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(stderr)
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        LineClient {
            stdin: child.stdin.take().unwrap(),
            lines: BufReader::new(child.stdout.take().unwrap()).lines(),
            _child: child,
        }
    }

    /// initialize (2025-11-25), initialized, and one tools/list, answers read and dropped.
    async fn handshake_and_list(&mut self) {
        self.send(
            r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"raw","version":"0"}}}"#,
        )
        .await;
        self.next().await;
        self.send(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#)
            .await;
        self.send(r#"{"jsonrpc":"2.0","id":2,"method":"tools/list"}"#)
            .await;
        self.next().await;
    }

    async fn send(&mut self, line: &str) {
        self.stdin
            .write_all(format!("{line}\n").as_bytes())
            .await
            .unwrap();
        self.stdin.flush().await.unwrap();
    }

    async fn next(&mut self) -> Value {
        let line = tokio::time::timeout(LINE_WITHIN, self.lines.next_line())
            .await
            .expect("an answer")
            .unwrap()
            .expect("stdout open");
        serde_json::from_str(&line)
            .unwrap_or_else(|e| panic!("stdout carried non-JSON {line:?}: {e}"))
    }
}

/// `tools/call` lines `mesh mcp` answers without rmcp, sent as no SDK would: ids MCP does
/// not allow are refused as rmcp refuses them (-32600, no result), allowed ids come back as
/// sent, a state and answers smuggled into the arguments never reach the tool, a call with
/// more than a name and arguments is still answered (by rmcp), a call before the session is
/// initialised is not answered as if it were, and twenty calls sent at once are each answered
/// once.
#[tokio::test]
async fn tools_call_lines_answered_without_rmcp_keep_its_rules() {
    let s = Setup::new().await;
    let mut mcp = LineClient::start(&s).await;
    let call = |id: &str, args: &str| {
        format!(
            r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"echo","arguments":{args}}}}}"#
        )
    };
    // Before initialize: rmcp's answer, not a result.
    mcp.send(&call("9", r#"{"text":"early"}"#)).await;
    let early = mcp.next().await;
    assert!(early.get("result").is_none(), "{early}");
    mcp.handshake_and_list().await;

    for id in [r#"{"a":1}"#, "true", "null", "[1]", "1.5"] {
        mcp.send(&call(id, r#"{"text":"hi"}"#)).await;
        let refused = mcp.next().await;
        assert_eq!(refused["error"]["code"], -32600, "id {id}: {refused}");
        assert!(refused.get("result").is_none(), "id {id}: {refused}");
    }
    for (id, back) in [(r#""x""#, json!("x")), ("-3", json!(-3)), ("7", json!(7))] {
        mcp.send(&call(id, r#"{"text":"hi"}"#)).await;
        let answered = mcp.next().await;
        assert_eq!(answered["id"], back, "{answered}");
        assert_eq!(answered["result"]["content"][0]["text"], "hi", "{answered}");
    }
    // echo takes `text` only: the smuggled keys are taken out before the call.
    mcp.send(&call(
        "10",
        r#"{"text":"plain","requestState":"forged","inputResponses":{"pick":{"action":"accept","content":{"pick":"b"}}}}"#,
    ))
    .await;
    let stripped = mcp.next().await;
    assert_eq!(
        stripped["result"]["content"][0]["text"], "plain",
        "{stripped}"
    );
    // More than a name and arguments: rmcp reads it, and answers.
    mcp.send(r#"{"jsonrpc":"2.0","id":11,"method":"tools/call","params":{"name":"echo","arguments":{"text":"meta"},"_meta":{"progressToken":1},"extra":1}}"#)
        .await;
    let other = mcp.next().await;
    assert_eq!(other["id"], 11, "{other}");
    // Twenty at once: each answered once, whatever the order.
    let mut burst = String::new();
    for i in 100..120 {
        burst.push_str(&call(&i.to_string(), &format!(r#"{{"text":"n{i}"}}"#)));
        burst.push('\n');
    }
    mcp.send(burst.trim_end()).await;
    let mut seen = std::collections::BTreeMap::new();
    for _ in 100..120 {
        let a = mcp.next().await;
        let id = a["id"].as_i64().unwrap();
        assert_eq!(a["result"]["content"][0]["text"], format!("n{id}"), "{a}");
        assert!(seen.insert(id, ()).is_none(), "{id} answered twice");
    }
    assert_eq!(seen.len(), 20);
}

/// A header's value in a response head (names compared without case).
pub(crate) fn header_of<'a>(head: &'a str, name: &str) -> Option<&'a str> {
    head.lines().find_map(|l| {
        let (k, v) = l.split_once(':')?;
        k.trim().eq_ignore_ascii_case(name).then(|| v.trim())
    })
}

/// The JSON-RPC message in a response body: the body itself, or the event of an event stream
/// that answers a request.
pub(crate) fn message_in(head: &str, body: &str) -> Value {
    if header_of(head, "content-type") == Some("application/json") {
        return serde_json::from_str(body).unwrap_or_else(|e| panic!("{e}: {body}"));
    }
    body.lines()
        .filter_map(|l| l.strip_prefix("data:"))
        .filter_map(|d| serde_json::from_str::<Value>(d.trim()).ok())
        .find(|m| m.get("result").is_some() || m.get("error").is_some())
        .unwrap_or_else(|| panic!("no answer in {head}\n\n{body}"))
}

/// A raw HTTP session with the console: initialised under 2025-11-25, its id kept.
pub(crate) struct RawSession {
    url: String,
    pub(crate) id: String,
}

impl RawSession {
    pub(crate) async fn open(url: &str) -> RawSession {
        let init = r#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"raw","version":"0"}}}"#;
        let (status, head, body) = http_whole(url, "POST", &[bearer(TOKEN)], init).await;
        assert_eq!(status, Some(200), "{head}\n\n{body}");
        let id = header_of(&head, "mcp-session-id")
            .unwrap_or_else(|| panic!("no session id: {head}"))
            .to_owned();
        let session = RawSession {
            url: url.to_owned(),
            id,
        };
        let initialized = r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#;
        assert_eq!(session.post(&[], initialized).await.0, Some(202));
        session
    }

    /// POSTs `body` on the session with the token, its id, its protocol version (unless
    /// `more` names one) and `more`.
    async fn post(&self, more: &[String], body: &str) -> (Option<u16>, String, String) {
        let mut headers = vec![bearer(TOKEN), format!("Mcp-Session-Id: {}", self.id)];
        if !more.iter().any(|h| h.starts_with("Mcp-Protocol-Version:")) {
            headers.push("Mcp-Protocol-Version: 2025-11-25".to_owned());
        }
        headers.extend(more.iter().cloned());
        http_whole(&self.url, "POST", &headers, body).await
    }

    /// Calls echo with `text` (request id 5); the status, head and the message.
    async fn echo(&self, more: &[String], text: &str) -> (Option<u16>, String, Option<Value>) {
        let call = json!({"jsonrpc": "2.0", "id": 5, "method": "tools/call",
            "params": {"name": "echo", "arguments": {"text": text}}});
        let (status, head, body) = self.post(more, &call.to_string()).await;
        let message = (status == Some(200)).then(|| message_in(&head, &body));
        (status, head, message)
    }
}

/// A `tools/call` over HTTP on a session is answered as one JSON body and keeps every rule,
/// sent as no SDK would: a foreign `Host` or `Origin` on a live session is 403, an unknown or
/// ended session is 404, an id MCP does not allow gets no result, smuggled questions' state
/// never reaches the tool, and a session busy with calls is not ended as idle (while one left
/// alone is).
#[tokio::test]
async fn http_tools_calls_on_a_session_keep_the_rules() {
    let s = Setup::new().await;
    let (mut child, _) = (console_with(&s.ann(), &["--session-idle", "2s"]).await, ());
    let url = child.1.clone();
    let authority = authority_of(&url);
    let port = authority.rsplit(':').next().unwrap().to_owned();
    let session = RawSession::open(&url).await;

    // Answered in one JSON response, not an event stream (a priming event and the answer,
    // written apart), from the session's first call on.
    for _ in 0..3 {
        let (status, head, answer) = session.echo(&[], "hi").await;
        assert_eq!(status, Some(200), "{head}");
        let answer = answer.unwrap();
        assert_eq!(answer["id"], 5, "{answer}");
        assert_eq!(answer["result"]["content"][0]["text"], "hi", "{answer}");
        assert!(answer["result"].get("resultType").is_none(), "{answer}");
        assert_eq!(
            header_of(&head, "content-type"),
            Some("application/json"),
            "{head}"
        );
    }
    let localhost = [format!("Host: localhost:{port}")];
    assert_eq!(session.echo(&localhost, "hi").await.0, Some(200));

    // DNS rebinding: a page elsewhere that learned the token and a session id still gets 403.
    for more in [
        vec![format!("Host: evil.example:{port}")],
        vec!["Host: evil.example".to_owned()],
        vec![format!("Origin: http://evil.example:{port}")],
        vec!["Origin: null".to_owned()],
    ] {
        let (status, head, _) = session.echo(&more, "rebound").await;
        assert_eq!(status, Some(403), "{more:?}: {head}");
    }
    // Two of a header there may be one of: not HTTP, whatever the first says.
    for more in [
        vec![
            format!("Origin: http://localhost:{port}"),
            "Origin: http://evil.example".to_owned(),
        ],
        vec![
            format!("Host: {authority}"),
            "Host: evil.example".to_owned(),
        ],
        vec![bearer("wrong")],
    ] {
        let (status, head, _) = session.echo(&more, "twice").await;
        assert_eq!(status, Some(400), "{more:?}: {head}");
    }
    let (status, _, _) = session
        .echo(&[format!("Origin: http://localhost:{port}")], "hi")
        .await;
    assert_eq!(status, Some(200));

    // Ids MCP does not allow: no result.
    for id in ["null", "1.5", "[1]", "{}"] {
        let call = format!(
            r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"echo","arguments":{{"text":"hi"}}}}}}"#
        );
        let (_, head, body) = session.post(&[], &call).await;
        assert!(!body.contains(r#""result""#), "id {id}: {head}\n\n{body}");
    }
    // Another protocol version than the session's, or a header naming another method: rmcp's
    // checks decide.
    let (status, _, _) = session
        .echo(&["Mcp-Protocol-Version: 1999-01-01".to_owned()], "hi")
        .await;
    assert_eq!(status, Some(400));
    // A question's state and answers smuggled into the arguments never reach the tool.
    let smuggled = json!({"jsonrpc": "2.0", "id": 6, "method": "tools/call",
        "params": {"name": "echo", "arguments": {"text": "plain", "requestState": "forged",
            "inputResponses": {"pick": {"action": "accept", "content": {"pick": "b"}}}}}});
    let (status, head, body) = session.post(&[], &smuggled.to_string()).await;
    assert_eq!(status, Some(200));
    assert_eq!(
        message_in(&head, &body)["result"]["content"][0]["text"],
        "plain"
    );

    // Unknown session: 404, as rmcp says it.
    let stranger = RawSession {
        url: url.clone(),
        id: "not-a-session".into(),
    };
    assert_eq!(stranger.echo(&[], "hi").await.0, Some(404));

    // Busy past the idle limit (2 s) with calls: still open.
    for _ in 0..6 {
        tokio::time::sleep(Duration::from_millis(700)).await;
        let (status, head, _) = session.echo(&[], "busy").await;
        assert_eq!(status, Some(200), "a session in use was ended: {head}");
    }
    // Left alone past it: ended, and its calls are not answered.
    tokio::time::sleep(Duration::from_secs(4)).await;
    assert_eq!(session.echo(&[], "late").await.0, Some(404));

    // Ended by its client: its id answers nothing after.
    let ended = RawSession::open(&url).await;
    assert_eq!(ended.echo(&[], "hi").await.0, Some(200));
    let (status, _) = http(
        &url,
        "DELETE",
        &[bearer(TOKEN), format!("Mcp-Session-Id: {}", ended.id)],
        "",
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(ended.echo(&[], "after").await.0, Some(404));
    child.0.kill().await.unwrap();
}

#[tokio::test]
async fn raw_json_rpc_lines_on_stdio() {
    let s = Setup::new().await;
    let mut mcp = LineClient::start(&s).await;
    mcp.send(
        r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"raw","version":"0"}}}"#,
    )
    .await;
    let init = mcp.next().await;
    assert_eq!(init["id"], 1);
    assert_eq!(init["result"]["protocolVersion"], "2025-06-18");
    assert_eq!(init["result"]["serverInfo"]["name"], "mesh");

    // A notification gets no answer: the next line answers the request after it.
    mcp.send(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#)
        .await;
    mcp.send(r#"{"jsonrpc":"2.0","id":2,"method":"ping"}"#)
        .await;
    assert_eq!(mcp.next().await["id"], 2);

    mcp.send("{this is not json").await;
    let parse = mcp.next().await;
    assert_eq!(parse["error"]["code"], -32700, "{parse}");
    assert_eq!(parse["id"], Value::Null);

    mcp.send(r#"{"jsonrpc":"2.0","id":3,"method":"no/such/method"}"#)
        .await;
    let unknown = mcp.next().await;
    assert_eq!(
        (unknown["id"].clone(), unknown["error"]["code"].clone()),
        (json!(3), json!(-32601))
    );

    // The connection still works, under 2025-06-18: a call and an input request that this
    // client (no elicitation capability) cannot be asked.
    mcp.send(r#"{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"echo","arguments":{"text":"still here"}}}"#)
        .await;
    let call = mcp.next().await;
    assert_eq!(call["id"], 4);
    assert_eq!(call["result"]["content"][0]["text"], "still here");
    assert!(
        call["result"].get("resultType").is_none(),
        "older protocols carry no resultType"
    );
    mcp.send(r#"{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"echo_choose","arguments":{"options":["a"]}}}"#)
        .await;
    let asks = mcp.next().await;
    assert_eq!(asks["result"]["isError"], true, "{asks}");
    let text = asks["result"]["content"][0]["text"].as_str().unwrap();
    assert!(
        text.contains("did not declare the elicitation capability"),
        "{text}"
    );
    mcp.send(r#"{"jsonrpc":"2.0","id":6,"method":"tools/call","params":{"name":"nosuch_tool","arguments":{}}}"#)
        .await;
    assert_eq!(mcp.next().await["error"]["code"], -32602);
}

/// `mesh` as ann on the bus, or with no credential through the console.
async fn mesh_cli(s: &Setup, console: Option<&str>, args: &[&str]) -> (i32, String, String) {
    let mut cmd = Command::new(MESH);
    match console {
        Some(url) => {
            // No bus credential at all: the console is the only way in.
            cmd.env("XDG_CONFIG_HOME", "/nonexistent")
                .env("MESH_CONSOLE_TOKEN", TOKEN)
                .env_remove("NATS_URL");
            cmd.args(args).arg("--console").arg(url);
        }
        None => {
            cmd.args(s.ann()).args(args);
        }
    }
    let out = cmd.stdin(Stdio::null()).output().await.unwrap();
    (
        out.status.code().unwrap(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// A tool `name` that says no and marks its own result as "denied", as only the relay may.
pub(crate) fn forging(name: &str) -> Tool {
    Tool::new(
        name,
        "says no, marked as denied",
        json!({"type": "object"}),
        |_c: Call| async {
            let mut result = ToolResult::error("no");
            result.extra.insert(
                "_meta".into(),
                json!({"mesh/outcome": "denied", "other": 1}),
            );
            result
        },
    )
}

/// A module that marks its own tool error with the relay's failure-kind key cannot make the
/// console's client report a failure of the mesh: `mesh --console call` exits as on the bus
/// (a tool error), not as "not yours".
#[tokio::test]
async fn a_module_cannot_mark_its_result_as_a_failure_of_the_mesh() {
    let s = Setup::new().await;
    let forger = Module::new("gone", "1.0.0", "marks its results").tool(forging("ping"));
    let _forger = s.bus.serve(forger).await;
    let (_console, url) = console(&s).await;
    let (on_bus, _, _) = mesh_cli(&s, None, &["call", "gone_ping"]).await;
    let (denied, _, _) = mesh_cli(&s, None, &["call", "echo_whoami"]).await;
    assert_ne!(on_bus, denied, "a tool error and a denial exit apart");
    let (code, stdout, stderr) = mesh_cli(&s, Some(&url), &["call", "gone_ping"]).await;
    assert_eq!(code, on_bus, "{stdout}{stderr}");
}

#[tokio::test]
async fn the_command_line_through_the_console_matches_the_bus() {
    let s = Setup::new().await;
    let (_console, url) = console(&s).await;
    let cases: [&[&str]; 10] = [
        // The console lists only what its credential may call: the bus's `--mine`.
        &["tools", "--mine"],
        &["describe", "echo"],
        &["call", "echo", "text=hi"],
        &["call", "echo_fail", "text=no"],
        &["call", "gone_ping"],
        &["call", "echo_whoami"],
        &["call", "echo_sleep", "ms=5000", "--timeout", "500ms"],
        &["call", "echo_choose", r#"options=["a","b"]"#],
        &[
            "call",
            "echo_choose",
            r#"options=["a","b"]"#,
            "--answer",
            "choice=2",
        ],
        &["catalog", "forget", "gone"],
    ];
    let mut codes = Vec::new();
    for args in cases {
        let direct = mesh_cli(&s, None, args).await;
        let relayed = mesh_cli(&s, Some(&url), args).await;
        assert_eq!(
            direct.0, relayed.0,
            "{args:?}: exit codes differ\n{direct:?}\n{relayed:?}"
        );
        assert_eq!(direct.1, relayed.1, "{args:?}: stdout differs");
        codes.push(direct.0);
    }
    // The console's own timeout (500ms) stands in for the command's on that path.
    assert_eq!(codes, [0, 0, 0, 1, 3, 4, 5, 6, 0, 4]);
}

#[tokio::test]
async fn raw_json_rpc_under_2026_07_28_is_stateless() {
    let s = Setup::new().await;
    let mut mcp = LineClient::start(&s).await;
    // No initialize: every request carries the protocol keys in its _meta.
    let meta = json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {"elicitation": {}},
        "io.modelcontextprotocol/clientInfo": {"name": "raw", "version": "0"}
    });
    let request = |id: u64, method: &str, mut params: Value| {
        params["_meta"] = meta.clone();
        json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}).to_string()
    };
    mcp.send(&request(1, "server/discover", json!({}))).await;
    let discover = mcp.next().await;
    assert_eq!(
        discover["result"]["supportedVersions"],
        json!(["2026-07-28", "2025-11-25", "2025-06-18"]),
        "{discover}"
    );
    mcp.send(&request(2, "tools/list", json!({}))).await;
    let list = mcp.next().await["result"].clone();
    assert_eq!(list["resultType"], "complete");
    assert!(
        list["ttlMs"].is_u64() && list["cacheScope"].is_string(),
        "{list}"
    );
    mcp.send(&request(
        3,
        "tools/call",
        json!({"name": "echo", "arguments": {"text": "x"}}),
    ))
    .await;
    assert_eq!(mcp.next().await["result"]["resultType"], "complete");
    // A tool's input_required result comes through as the module wrote it.
    let args = json!({"name": "echo_choose", "arguments": {"options": ["a", "b"]}});
    mcp.send(&request(4, "tools/call", args)).await;
    let asks = mcp.next().await["result"].clone();
    assert_eq!(asks["resultType"], "input_required", "{asks}");
    // Sealed: base64url(JSON).base64url(HMAC), nothing a client could write itself.
    let state = asks["requestState"].as_str().unwrap().to_owned();
    assert_eq!(state.split('.').count(), 2, "{state}");
    assert_eq!(
        asks["inputRequests"]["choice"]["method"],
        "elicitation/create"
    );
    let answered = json!({"name": "echo_choose", "arguments": {"options": ["a", "b"]},
        "requestState": state,
        "inputResponses": {"choice": {"action": "accept", "content": {"pick": "a"}}}});
    mcp.send(&request(5, "tools/call", answered.clone())).await;
    assert_eq!(
        mcp.next().await["result"]["content"][0]["text"],
        "you chose a"
    );
    // Once: the same state again is refused as used — the request's fault, a protocol
    // error (invalid params), not a result for the model.
    mcp.send(&request(6, "tools/call", answered)).await;
    let replay = mcp.next().await["error"].clone();
    assert_eq!(replay["code"], -32602, "{replay}");
    assert!(
        replay["message"].as_str().unwrap().contains("already used"),
        "{replay}"
    );
}

#[tokio::test]
async fn oversized_messages_get_a_clear_error_on_every_surface() {
    let s = Setup::new().await;
    // 2 MiB: past the bus's 1 MiB max payload, within what the surfaces read (4 MiB).
    let big = json!({"text": "x".repeat(2 << 20)}).to_string();
    let too_large = "too large for the bus";

    // The library.
    let ann = s.bus.client_as(Some("ann")).await;
    let e = ann
        .call(
            &mesh_core::subjects::FullName::parse("echo").unwrap(),
            &serde_json::from_str(&big).unwrap(),
            Duration::from_secs(10),
        )
        .await
        .unwrap_err();
    assert!(
        matches!(e, mesh_core::client::CallError::TooLarge { .. })
            && e.to_string().contains(too_large),
        "{e}"
    );

    // The command line, on the bus and through the console (HTTP): exit 2, the same words.
    let (_console, url) = console(&s).await;
    for through in [None, Some(url.as_str())] {
        let mut cmd = Command::new(MESH);
        match through {
            Some(u) => {
                cmd.env("MESH_CONSOLE_TOKEN", TOKEN)
                    .args(["call", "--console", u, "echo", "-"])
            }
            None => cmd.args(s.ann()).args(["call", "echo", "-"]),
        };
        let mut child = cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut stdin = child.stdin.take().unwrap();
        stdin.write_all(big.as_bytes()).await.unwrap();
        drop(stdin);
        let out = child.wait_with_output().await.unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{through:?}: {stderr}");
        assert!(stderr.contains(too_large), "{through:?}: {stderr}");
    }

    // stdio: an error result that says so; the connection lives on.
    let mut mcp = LineClient::start(&s).await;
    mcp.send(r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"raw","version":"0"}}}"#).await;
    mcp.next().await;
    mcp.send(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#)
        .await;
    let call = format!(
        r#"{{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{{"name":"echo","arguments":{big}}}}}"#
    );
    mcp.send(&call).await;
    let answer = mcp.next().await;
    assert_eq!(
        answer["result"]["isError"],
        true,
        "{}",
        &answer.to_string()[..300.min(answer.to_string().len())]
    );
    assert!(
        answer["result"]["content"][0]["text"]
            .as_str()
            .unwrap()
            .contains(too_large)
    );
    // Past what mesh mcp reads at all: refused without being held, and the next line works.
    let huge = format!(
        r#"{{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{{"name":"echo","arguments":{{"text":"{}"}}}}}}"#,
        "y".repeat(5 << 20)
    );
    mcp.send(&huge).await;
    let refused = mcp.next().await;
    assert_eq!(refused["error"]["code"], -32600, "{refused}");
    assert!(
        refused["error"]["message"]
            .as_str()
            .unwrap()
            .contains("past the 4194304 bytes")
    );
    mcp.send(r#"{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"echo","arguments":{"text":"small"}}}"#).await;
    assert_eq!(mcp.next().await["result"]["content"][0]["text"], "small");

    // HTTP: a body past 4 MiB is 413.
    let response = reqwest::Client::new()
        .post(&url)
        .header("authorization", format!("Bearer {TOKEN}"))
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .body(huge)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 413);
}

#[tokio::test]
async fn a_bus_that_is_gone_is_told_to_an_agent_at_once() {
    let mut s = Setup::new().await;
    // A relay deadline far beyond the bound below: the answer did not wait for it.
    let mut child = Command::new(MESH)
        .args(s.ann())
        .args(["mcp", "--timeout", "600s"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut mcp = LineClient {
        stdin: child.stdin.take().unwrap(),
        lines: BufReader::new(child.stdout.take().unwrap()).lines(),
        _child: child,
    };
    mcp.handshake_and_list().await;
    s.bus.server.stop().await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    mcp.send(r#"{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"echo","arguments":{"text":"x"}}}"#)
        .await;
    let r = mcp.next().await;
    assert_eq!(r["result"]["isError"], true, "{r}");
    assert_eq!(r["result"]["_meta"]["mesh/outcome"], "connection", "{r}");
    let text = r["result"]["content"][0]["text"].as_str().unwrap();
    assert!(text.contains("not reachable"), "{text}");
}

#[tokio::test]
async fn a_model_cannot_answer_a_question_meant_for_the_person() {
    let s = Setup::new().await;
    let script = format!("{}/tests/py/model_answers.py", env!("CARGO_MANIFEST_DIR"));
    // Older protocol: the person is asked through elicitation, whatever the arguments said.
    let mut command = Command::new(crate::bus::python());
    command
        .args([script.as_str(), "legacy", MESH])
        .args(s.ann());
    let seen = crate::bus::json_of(&mut command).await;
    assert_eq!(seen["asked"], 2, "{seen}");
    for key in ["answers_only", "with_a_state"] {
        assert_eq!(seen[key]["text"], "you chose b", "{key}: {seen}");
    }
    // 2026-07-28: the question comes back to the client to ask; the model's answer is not one.
    let mut command = Command::new(crate::bus::python());
    command
        .args([script.as_str(), "2026-07-28", MESH])
        .args(s.ann());
    let seen = crate::bus::json_of(&mut command).await;
    // The SDK runs the round trip itself: it asks the person, who picks b.
    assert_eq!(seen["asked"], 2, "{seen}");
    for key in ["answers_only", "with_a_state"] {
        assert_eq!(seen[key]["isError"], false, "{key}: {seen}");
        assert_eq!(seen[key]["text"], "you chose b", "{key}: {seen}");
    }
}

#[tokio::test]
async fn a_tool_of_a_forgotten_module_is_unknown_not_down() {
    let s = Setup::new().await;
    let mut mcp = LineClient::start(&s).await;
    mcp.handshake_and_list().await;
    let call = r#"{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"gone_ping","arguments":{}}}"#;
    mcp.send(call).await;
    let r = mcp.next().await;
    assert_eq!(r["result"]["_meta"]["mesh/outcome"], "nobody_serves", "{r}");
    // Forgotten since: now an unknown tool (-32602), as for any unknown name.
    let root = s.bus.client_as(Some("root")).await;
    let forgot = root
        .call(
            &mesh_core::subjects::FullName::parse("catalog_forget").unwrap(),
            &json!({"module": "gone"}),
            crate::bus::GENEROUS,
        )
        .await
        .unwrap();
    assert!(!forgot.is_error, "{}", forgot.text_content());
    let mut code = Value::Null;
    for _ in 0..100 {
        mcp.send(call).await;
        let r = mcp.next().await;
        code = r["error"]["code"].clone();
        if code == -32602 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(code, -32602);
}

/// A flood of connections under a low open-file limit (as under `mesh up` from a shell with
/// one): the console holds no more than its bound (half the files), closing the oldest
/// unproven connections, and its owner is answered while the flood holds; sessions past
/// their bound close the least recently used, and every `initialize` is answered.
#[tokio::test]
async fn the_console_bounds_its_sessions_and_connections() {
    let s = Setup::new().await;
    let mut child = Command::new(MESH);
    child
        .env("MESH_CONSOLE_TOKEN", TOKEN)
        .args(s.ann())
        .args(["serve", "--port", "0", "--max-sessions", "8"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true);
    // SAFETY: setrlimit between fork and exec touches nothing but the child's limits.
    unsafe {
        child.pre_exec(|| {
            let limit = libc::rlimit {
                rlim_cur: 64,
                rlim_max: 64,
            };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &limit) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let mut child = child.spawn().unwrap();
    let (url, authority) = console_address(&mut child).await;

    // Silent connections, as many as the console has files: the oldest are closed, and the
    // owner is answered while the rest are held.
    let mut flood = Vec::new();
    for _ in 0..64 {
        flood.push(tokio::net::TcpStream::connect(&authority).await.unwrap());
    }
    let ping = r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#;
    let headers = [bearer(TOKEN), format!("Host: {authority}")];
    let (status, body) = try_http(&url, "POST", &headers, ping).await;
    assert!(status.is_some_and(|s| s < 500), "{status:?}: {body}");
    let mut closed = 0;
    for stream in &mut flood {
        let mut buf = [0u8; 1];
        let read = tokio::time::timeout(Duration::from_millis(100), stream.read(&mut buf));
        closed += usize::from(matches!(read.await, Ok(Ok(0) | Err(_))));
    }
    assert!(
        closed >= 32,
        "{closed} of 64 closed: the console held more than its bound"
    );
    drop(flood);

    // Sessions (older protocol versions) are bounded too, and the newest always gets one.
    let init = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"raw","version":"0"}}}"#;
    for n in 0..12 {
        let (status, body) = http(&url, "POST", &[bearer(TOKEN)], init).await;
        assert_eq!(status, 200, "{n}: {body}");
    }
}

#[tokio::test]
async fn the_console_closes_connections_on_which_nothing_moves() {
    let s = Setup::new().await;
    let mut child = Command::new(MESH)
        .env("MESH_CONSOLE_TOKEN", TOKEN)
        .args(s.ann())
        .args(["serve", "--port", "0", "--idle", "1s", "--timeout", "10s"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let (url, authority) = console_address(&mut child).await;
    // Whatever the console still says, then the end of the connection (a bound, not a
    // measure: only a connection held for ever fails it).
    async fn until_closed(stream: &mut tokio::net::TcpStream) -> String {
        let mut seen = Vec::new();
        let read = tokio::time::timeout(Duration::from_secs(20), stream.read_to_end(&mut seen));
        read.await.expect("the console closed the connection").ok();
        String::from_utf8_lossy(&seen).into_owned()
    }
    // Silent from the start.
    let mut silent = tokio::net::TcpStream::connect(&authority).await.unwrap();
    assert_eq!(until_closed(&mut silent).await, "");
    // A body announced and never sent; a body that trickles.
    let head = |len: usize| {
        format!(
            "POST /mcp HTTP/1.1\r\nHost: {authority}\r\n{}\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nContent-Length: {len}\r\n\r\n",
            bearer(TOKEN)
        )
    };
    let mut stalled = tokio::net::TcpStream::connect(&authority).await.unwrap();
    stalled.write_all(head(99_999).as_bytes()).await.unwrap();
    let said = until_closed(&mut stalled).await;
    assert!(said.starts_with("HTTP/1.1 408"), "{said}");
    // The trickle stops when the console answers: bytes sent after it closes could reset
    // the connection and take its answer with them.
    let mut trickle = tokio::net::TcpStream::connect(&authority).await.unwrap();
    trickle.write_all(head(1_000).as_bytes()).await.unwrap();
    let (mut reading, mut writing) = trickle.split();
    let mut first = [0u8; 1];
    let dripping = async {
        for _ in 0..100 {
            writing.write_all(b" ").await.unwrap();
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        panic!("the console let a trickling body hold its connection for 20 s");
    };
    tokio::select! {
        read = reading.read_exact(&mut first) => { read.unwrap(); }
        () = dripping => unreachable!(),
    }
    let said = String::from_utf8_lossy(&first).into_owned() + &until_closed(&mut trickle).await;
    assert!(said.starts_with("HTTP/1.1 408"), "{said}");
    // A call that takes longer than the idle limit is answered: it is not idleness.
    let call = r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo_sleep","arguments":{"ms":2500},"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}}}"#;
    let (status, body) = http(
        &url,
        "POST",
        &[
            bearer(TOKEN),
            "MCP-Protocol-Version: 2026-07-28".into(),
            "Mcp-Method: tools/call".into(),
            "Mcp-Name: echo_sleep".into(),
        ],
        call,
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("slept 2500 ms"), "{body}");
}

/// `TCP_NODELAY` of the socket process `pid` holds for the connection whose far end is
/// `peer`, read from outside: the socket is duplicated out of the process (pidfd_getfd) and
/// asked. `None` when the process holds no such socket.
fn peer_nodelay(pid: u32, peer: std::net::SocketAddr) -> Option<bool> {
    use std::os::fd::{FromRawFd, OwnedFd};
    // SAFETY: plain syscalls on descriptors this function owns and closes.
    let pidfd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid as libc::pid_t, 0) };
    assert!(
        pidfd >= 0,
        "pidfd_open: {}",
        std::io::Error::last_os_error()
    );
    let pidfd = unsafe { OwnedFd::from_raw_fd(pidfd as i32) };
    let fds = std::fs::read_dir(format!("/proc/{pid}/fd")).unwrap();
    for entry in fds.flatten() {
        let is_socket = std::fs::read_link(entry.path())
            .is_ok_and(|l| l.to_string_lossy().starts_with("socket:"));
        let Some(target) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<i32>().ok())
        else {
            continue;
        };
        if !is_socket {
            continue;
        }
        use std::os::fd::AsRawFd;
        let fd = unsafe { libc::syscall(libc::SYS_pidfd_getfd, pidfd.as_raw_fd(), target, 0) };
        if fd < 0 {
            continue;
        }
        // A TcpStream only to ask: dropping it closes our duplicate, not theirs.
        let socket = unsafe { std::net::TcpStream::from_raw_fd(fd as i32) };
        if socket.peer_addr().ok() == Some(peer) {
            return Some(socket.nodelay().unwrap());
        }
    }
    None
}

/// The console answers each request as soon as it is written: its accepted sockets have
/// Nagle's algorithm off (without it, a kept-alive client waited for its own delayed ACK,
/// about 40 ms, on every call). Read from the console's own socket, from outside.
#[tokio::test]
async fn the_consoles_sockets_send_without_delay() {
    let s = Setup::new().await;
    let (child, url) = console(&s).await;
    let authority = authority_of(&url);
    let mut stream = tokio::net::TcpStream::connect(authority).await.unwrap();
    let ping = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"raw","version":"0"}}}"#;
    let request = format!(
        "POST /mcp HTTP/1.1\r\nHost: {authority}\r\n{}\r\nContent-Type: application/json\r\n\
         Accept: application/json, text/event-stream\r\nContent-Length: {}\r\n\r\n{ping}",
        bearer(TOKEN),
        ping.len()
    );
    stream.write_all(request.as_bytes()).await.unwrap();
    // Answered, and the connection kept: the console holds its end now.
    let mut first = [0u8; 12];
    let n = tokio::time::timeout(LINE_WITHIN, stream.read(&mut first))
        .await
        .expect("the console answers")
        .unwrap();
    let head = String::from_utf8_lossy(&first[..n]).into_owned();
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    let ours = stream.local_addr().unwrap();
    let nodelay =
        peer_nodelay(child.id().unwrap(), ours).expect("the console holds our connection");
    assert!(nodelay, "the console's socket has Nagle's algorithm on");
}

/// A client's mistakes (an unknown method, a call without its name) are answered, and not
/// logged as the relay's trouble: nothing on stderr at the default level; `-v` shows them.
#[tokio::test]
async fn routine_protocol_errors_are_not_warnings() {
    let s = Setup::new().await;
    for (flags, logged) in [(&[][..], false), (&["-v"][..], true)] {
        let mut mcp = LineClient::start_with(&s, flags, Stdio::piped()).await;
        mcp.handshake_and_list().await;
        mcp.send(r#"{"jsonrpc":"2.0","id":3,"method":"no/such/method"}"#)
            .await;
        assert_eq!(mcp.next().await["error"]["code"], -32601);
        mcp.send(r#"{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"arguments":{}}}"#)
            .await;
        // rmcp reads a call without its name as no request it knows.
        let nameless = mcp.next().await;
        assert_eq!(
            (nameless["id"].clone(), nameless["error"]["code"].clone()),
            (json!(4), json!(-32601)),
            "{nameless}"
        );
        let LineClient {
            mut _child, stdin, ..
        } = mcp;
        drop(stdin);
        let mut err = String::new();
        tokio::io::AsyncReadExt::read_to_string(_child.stderr.as_mut().unwrap(), &mut err)
            .await
            .unwrap();
        let _ = _child.wait().await;
        assert_eq!(err.contains("response error"), logged, "{flags:?}: {err}");
        if !logged {
            assert!(!err.contains("WARN"), "{flags:?}: {err}");
        }
    }
}
