//! Attacker tests for discovery in one read of the catalogue: a hostile module or person
//! against the listing verb, the change events and the `$SRV.PING` answers discovery trusts.

use std::time::Duration;

use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;

use mesh_core::subjects::catalog::{CHANGED_SUBJECT, LISTING_SUBJECT};

use crate::bus::{Bus, GENEROUS};
use crate::listing::small_bus;
use crate::raw::{Raw, Reply};

/// How long a raw exchange may take before the test calls it hung.
const HANG: Duration = Duration::from_secs(10);

/// A plain socket that subscribes, for what a library would not let a test try: it reports
/// each subscription the server refuses, and can answer requests by hand.
struct Sub {
    stream: BufReader<TcpStream>,
}

impl Sub {
    async fn connect(url: &str, user: &str) -> Sub {
        let stream = TcpStream::connect(url.trim_start_matches("nats://"))
            .await
            .expect("tcp connect");
        let mut s = Sub {
            stream: BufReader::new(stream),
        };
        let info = s.line().await;
        assert!(info.starts_with("INFO "), "{info}");
        let connect = json!({
            "verbose": false, "pedantic": false, "headers": true, "no_responders": true,
            "protocol": 1, "lang": "raw", "version": "0", "user": user, "pass": format!("pw-{user}"),
        });
        s.send(format!("CONNECT {connect}\r\nPING\r\n").as_bytes())
            .await;
        assert_eq!(
            s.until_pong().await,
            Vec::<String>::new(),
            "{user} connects"
        );
        s
    }

    async fn send(&mut self, bytes: &[u8]) {
        self.stream.get_mut().write_all(bytes).await.unwrap();
    }

    async fn line(&mut self) -> String {
        let mut line = String::new();
        let n = tokio::time::timeout(HANG, self.stream.read_line(&mut line))
            .await
            .expect("the server said nothing: hung")
            .unwrap();
        assert!(n > 0, "the server closed the connection");
        line.trim_end_matches(['\r', '\n']).to_owned()
    }

    /// The `-ERR` lines that come before the next PONG.
    async fn until_pong(&mut self) -> Vec<String> {
        let mut errors = Vec::new();
        loop {
            let line = self.line().await;
            match line.as_str() {
                "PONG" => return errors,
                "PING" => self.send(b"PONG\r\n").await,
                l if l.starts_with("-ERR") => errors.push(l.to_owned()),
                _ => {}
            }
        }
    }

    /// Subscribes to `subject`; the server's refusal, if it refused.
    async fn subscribe(&mut self, sid: u32, subject: &str) -> Option<String> {
        self.send(format!("SUB {subject} {sid}\r\nPING\r\n").as_bytes())
            .await;
        self.until_pong().await.into_iter().next()
    }

    /// Answers every message that has a reply subject with `answer`, for ever.
    async fn answer_all(mut self, answer: Vec<u8>) {
        loop {
            let line = self.line().await;
            let words: Vec<&str> = line.split(' ').collect();
            let (reply, len) = match words[0] {
                "PING" => {
                    self.send(b"PONG\r\n").await;
                    continue;
                }
                // MSG <subject> <sid> [reply] <len>; HMSG <subject> <sid> [reply] <hlen> <len>
                "MSG" if words.len() == 5 => (words[3].to_owned(), words[4]),
                "HMSG" if words.len() == 6 => (words[3].to_owned(), words[5]),
                "MSG" | "HMSG" => (String::new(), *words.last().unwrap()),
                _ => continue,
            };
            let mut body = vec![0; len.parse::<usize>().unwrap() + 2];
            self.stream.read_exact(&mut body).await.unwrap();
            if reply.is_empty() {
                continue;
            }
            let mut frame = format!("PUB {reply} {}\r\n", answer.len()).into_bytes();
            frame.extend_from_slice(&answer);
            frame.extend_from_slice(b"\r\n");
            self.send(&frame).await;
        }
    }
}

/// Each of `subjects` is refused to `who` as a subscription.
async fn refused(sub: &mut Sub, sid: &mut u32, who: &str, subjects: &[&str]) {
    for subject in subjects {
        *sid += 1;
        let refused = sub.subscribe(*sid, subject).await;
        assert!(
            refused
                .as_deref()
                .is_some_and(|e| e.contains("Permissions Violation for Subscription")),
            "{who} subscribed to {subject}: {refused:?}"
        );
    }
}

/// Nobody but the catalogue can stand in its place: a module may not subscribe to the listing
/// verb, the change events or the registrations (it would hear or answer them), nor may a
/// person subscribe to anything of the catalogue but the change events; and after all these
/// tries the listing is the catalogue's, answered once.
#[tokio::test]
async fn nobody_answers_or_overhears_in_the_catalogues_place() {
    let bus = small_bus(&["catalog", "echo", "evil"]).await;
    let _catalog = bus.serve_catalog().await;
    let _echo = bus.serve(mesh_echo::module()).await;

    let mut evil = Sub::connect(&bus.url(), "evil").await;
    let mut sid = 0;
    let evils = [
        LISTING_SUBJECT,
        CHANGED_SUBJECT,
        "mesh.catalog.register",
        "mesh.catalog.>",
        "mesh.catalog.*",
        "mesh.*.listing",
        "mesh.>",
        ">",
        "mesh.echo.tools",
        "_INBOX.>",
        "_INBOX.ann.>",
    ];
    refused(&mut evil, &mut sid, "module evil", &evils).await;
    let mut ann = Sub::connect(&bus.url(), "ann").await;
    let anns = [
        LISTING_SUBJECT,
        "mesh.catalog.register",
        "mesh.catalog.>",
        "mesh.catalog.*",
        "$SRV.>",
        "_INBOX.evil.>",
        "_R_.>",
    ];
    refused(&mut ann, &mut sid, "ann", &anns).await;
    sid += 1;
    assert_eq!(ann.subscribe(sid, CHANGED_SUBJECT).await, None, "events");

    // A module that may subscribe to `$SRV.>` answers whatever comes there: it still cannot
    // reach the listing verb, whose answers are the catalogue's alone.
    let mut raw = Raw::connect(&bus.url(), "ann", "pw-ann").await;
    let page = raw.request(LISTING_SUBJECT, b"", b"{}").await.json();
    let listed: Vec<&str> = page["modules"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["module"].as_str().unwrap())
        .collect();
    assert_eq!(listed, ["catalog", "echo"], "{page}");
    // A module cannot ask the listing either: it is a person's verb.
    let mut evil_raw = Raw::connect(&bus.url(), "evil", "pw-evil").await;
    match evil_raw.request(LISTING_SUBJECT, b"", b"{}").await {
        Reply::Err(e) => assert!(e.contains("Permissions Violation"), "{e}"),
        other => panic!("module evil read the listing: {other:?}"),
    }
}

/// A registration that fits on the bus but whose entry, even without its tools in full, would
/// not fit in one page: the catalogue must not be left unable to answer the listing (its page
/// larger than the bus carries, so no page at all, for everyone). Either the registration is
/// refused, or the page that lists it fits.
#[tokio::test]
async fn a_registration_cannot_make_the_listing_too_large_to_send() {
    let bus = small_bus(&["catalog", "aaa", "echo"]).await;
    let _catalog = bus.serve_catalog().await;
    let _echo = bus.serve(mesh_echo::module()).await;
    // 4096 characters of four bytes each (the description's bound counts characters), then
    // as many 64-character tool names as bring the registration just under 64 KiB.
    let description = "\u{1F600}".repeat(4096);
    let mut tools: Vec<String> = Vec::new();
    let registration = |tools: &[String]| {
        json!({"module": "aaa", "version": "1.0.0", "description": description,
            "tools": tools, "instance": "i", "started_ms": 1})
        .to_string()
    };
    while registration(&tools).len() + 67 * 2 <= 65_536 {
        tools.push(format!("t{:0>63}", tools.len()));
    }
    // Two last names make the registration exactly as large as the bus carries (each costs
    // its length and three bytes: a comma and its quotes).
    let left = 65_536 - registration(&tools).len() - 6;
    for (i, len) in [left / 2, left - left / 2].into_iter().enumerate() {
        tools.push(format!("u{i}{}", "x".repeat(len - 2)));
    }
    let body = registration(&tools);
    assert_eq!(body.len(), 65_536);
    assert!(tools.len() <= 1024);

    let mut aaa = Raw::connect(&bus.url(), "aaa", "pw-aaa").await;
    let registered = aaa
        .request("mesh.catalog.register", b"", body.as_bytes())
        .await
        .json();

    let ann = bus.client_as(Some("ann")).await;
    let page = tokio::time::timeout(
        GENEROUS + GENEROUS,
        ann.nats().request(LISTING_SUBJECT, "{}".into()),
    )
    .await
    .expect("the listing request ends");
    let page =
        page.unwrap_or_else(|e| panic!("no listing page after the registration {registered}: {e}"));
    assert!(page.payload.len() <= 65_536, "{}", page.payload.len());
    let page: Value = serde_json::from_slice(&page.payload).unwrap();
    assert!(page.get("error").is_none(), "{page}");
    if registered["isError"] != json!(true) {
        assert_eq!(page["modules"][0]["module"], "aaa", "{registered}");
    }
    // And discovery goes on listing everyone else.
    let found = ann.discover(None, GENEROUS).await.unwrap();
    let echo = found
        .modules
        .iter()
        .find(|f| f.entry.module == "echo")
        .expect("echo is listed");
    assert!(echo.tools.is_ok(), "{:?}", echo.tools);
}

/// `$SRV.PING` reaches every module account from a person (each exports `$SRV.>`), and any
/// module may answer it under any name. A module that stopped (its instance unregistered:
/// the catalogue counts none running) must not be listed as answering because another module
/// answers pings in its name.
#[tokio::test]
async fn a_module_cannot_answer_pings_for_a_stopped_one() {
    let bus = small_bus(&["catalog", "echo", "evil"]).await;
    let _catalog = bus.serve_catalog().await;
    bus.serve(mesh_echo::module()).await.stop().await;

    let mut evil = Sub::connect(&bus.url(), "evil").await;
    // The services protocol's verbs only: any other $SRV subject would be a stamped way to
    // the module that the call log does not witness.
    for other in ["$SRV.>", "$SRV.COVERT.>"] {
        assert!(
            evil.subscribe(2, other).await.is_some(),
            "a module may listen on {other}"
        );
    }
    assert_eq!(
        evil.subscribe(1, "$SRV.PING").await,
        None,
        "modules hear $SRV.PING"
    );
    let pong = json!({"type": "io.nats.micro.v1.ping_response", "name": "echo",
        "id": "forged", "version": "1.0.0", "metadata": {}});
    let forger = tokio::spawn(evil.answer_all(pong.to_string().into_bytes()));

    let ann = bus.client_as(Some("ann")).await;
    let found = ann.discover(None, GENEROUS).await.unwrap();
    let echo = found
        .modules
        .iter()
        .find(|f| f.entry.module == "echo")
        .expect("echo is still in the catalogue");
    assert_eq!(echo.entry.instances, 0, "echo unregistered");
    let e = echo
        .tools
        .as_ref()
        .expect_err("echo stopped: it does not answer, whoever says it does");
    assert!(e.to_string().starts_with("nobody serves"), "{e}");
    forger.abort();
}

/// A module that registers over and over with something new each time makes the catalogue
/// say so each time; the catalogue keeps answering the listing meanwhile, each event names
/// only the module that changed, and nothing else is said about others.
#[tokio::test]
async fn a_module_flooding_registrations_names_only_itself() {
    use futures_util::StreamExt;
    let bus = small_bus(&["catalog", "echo", "evil"]).await;
    let _catalog = bus.serve_catalog().await;
    let _echo = bus.serve(mesh_echo::module()).await;
    let ann = bus.client_as(Some("ann")).await;
    let mut events = ann.nats().subscribe(CHANGED_SUBJECT).await.unwrap();
    crate::bus::round_trip(ann.nats()).await;

    let evil = bus.client_as(Some("evil")).await;
    let name = mesh_core::subjects::FullName::parse("catalog_register").unwrap();
    let flood = async {
        for i in 0..200 {
            // Another module's name is refused; its own with a new description each time.
            let other = json!({"module": "echo", "version": "9.9.9", "description": "x",
                "tools": ["echo"], "instance": "e", "started_ms": 1});
            let r = evil.call(&name, &other, GENEROUS).await.unwrap();
            assert!(r.is_error, "evil registered echo: {}", r.text_content());
            let own = json!({"module": "evil", "version": "1.0.0",
                "description": format!("round {i}"), "tools": ["t"],
                "specs": [{"name": "t", "inputSchema": {"type": "object"}}],
                "instance": "e", "started_ms": 1});
            let r = evil.call(&name, &own, GENEROUS).await.unwrap();
            assert!(!r.is_error, "{}", r.text_content());
        }
    };
    let listing = async {
        for _ in 0..20 {
            let page = ann.nats().request(LISTING_SUBJECT, "{}".into()).await;
            let page: Value = serde_json::from_slice(&page.unwrap().payload).unwrap();
            assert!(page.get("error").is_none(), "{page}");
        }
    };
    tokio::join!(flood, listing);
    let mut heard = 0;
    while let Ok(Some(event)) = tokio::time::timeout(Duration::from_secs(1), events.next()).await {
        let event: Value = serde_json::from_slice(&event.payload).unwrap();
        assert_eq!(event, json!({"module": "evil"}), "only evil changed");
        heard += 1;
    }
    assert_eq!(heard, 200, "one event per change");
    let echo = ann.discover(None, GENEROUS).await.unwrap();
    let echo = echo
        .modules
        .iter()
        .find(|f| f.entry.module == "echo")
        .unwrap();
    assert_eq!(echo.entry.version, mesh_echo::module().version);
}

const MESH: &str = env!("CARGO_BIN_EXE_mesh");

/// The catalogue and echo serving; ann may call echo's tools.
async fn echo_bus() -> (Bus, [crate::bus::Running; 2]) {
    let bus = Bus::accounts(&["catalog", "echo"], &[("ann", &["mesh.echo.>"])]).await;
    let running = [
        bus.serve_catalog().await,
        bus.serve(mesh_echo::module()).await,
    ];
    (bus, running)
}

/// `mesh mcp` as ann, driven line by line.
pub(crate) struct Stdio {
    _child: tokio::process::Child,
    stdin: tokio::process::ChildStdin,
    lines: tokio::io::Lines<BufReader<tokio::process::ChildStdout>>,
}

impl Stdio {
    /// `mesh mcp` as ann, initialised (2025-11-25, no capabilities).
    pub(crate) async fn start(bus: &Bus) -> Stdio {
        let mut s = Stdio::spawn(bus);
        s.send(r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"raw","version":"0"}}}"#).await;
        s.next().await;
        s.send(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#)
            .await;
        s
    }

    /// `mesh mcp` as ann, before anything is sent.
    fn spawn(bus: &Bus) -> Stdio {
        let mut child = tokio::process::Command::new(MESH)
            .args(bus.flags("ann"))
            .arg("mcp")
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        Stdio {
            stdin: child.stdin.take().unwrap(),
            lines: BufReader::new(child.stdout.take().unwrap()).lines(),
            _child: child,
        }
    }

    pub(crate) async fn send(&mut self, line: &str) {
        self.stdin
            .write_all(format!("{line}\n").as_bytes())
            .await
            .unwrap();
        self.stdin.flush().await.unwrap();
    }

    async fn next(&mut self) -> Value {
        let line = tokio::time::timeout(Duration::from_secs(30), self.lines.next_line())
            .await
            .expect("an answer: hung")
            .unwrap()
            .expect("stdout open");
        serde_json::from_str(&line).unwrap_or_else(|e| panic!("not JSON {line:?}: {e}"))
    }

    /// The answer to request `id`, counting the list-changed notifications that come first.
    pub(crate) async fn answer(&mut self, id: u64, notified: &mut usize) -> Value {
        loop {
            let v = self.next().await;
            if v["method"] == "notifications/tools/list_changed" {
                *notified += 1;
            } else if v["id"] == id {
                return v;
            }
        }
    }
}

/// A module that registers again and again, each time with another description of its tool,
/// makes the catalogue say so each time: a relay following the events keeps answering calls
/// meanwhile, builds its list at a bounded rate (so it tells its client the list changed at
/// most once per build, not once per registration), and ends with the module's last word.
#[tokio::test]
async fn a_relay_keeps_up_with_a_module_that_registers_nonstop() {
    // ann may call evil_t: the relay lists only what its person may call.
    let bus = Bus::accounts(
        &["catalog", "echo", "evil"],
        &[("ann", &["mesh.echo.echo", "mesh.evil.t"])],
    )
    .await;
    let _catalog = bus.serve_catalog().await;
    let _echo = bus.serve(mesh_echo::module()).await;
    let served = mesh_core::runtime::Module::new("evil", "1.0.0", "changes its mind").tool(
        mesh_core::runtime::Tool::new(
            "t",
            "round start",
            json!({"type": "object"}),
            |_c: mesh_core::runtime::Call| async { mesh_core::subjects::ToolResult::text("t") },
        ),
    );
    // Its own runtime refreshes its registration once an hour here, not every 30 s: a refresh
    // in the middle would put its first description back.
    let options = mesh_core::runtime::ServeOptions {
        register_every: Some(Duration::from_secs(3600)),
        ..Default::default()
    };
    let evil_running = bus.serve_with(served, options).await;
    let mut mcp = Stdio::start(&bus).await;
    let mut notified = 0;
    mcp.send(r#"{"jsonrpc":"2.0","id":2,"method":"tools/list"}"#)
        .await;
    let first = mcp.answer(2, &mut notified).await;
    assert!(
        first.to_string().contains("evil_t"),
        "evil is listed: {first}"
    );

    let evil = bus.client_as(Some("evil")).await;
    let name = mesh_core::subjects::FullName::parse("catalog_register").unwrap();
    let rounds = 150;
    let started = std::time::Instant::now();
    let mut id = 10;
    for i in 0..rounds {
        let own = json!({"module": "evil", "version": "1.0.0", "description": "changes its mind",
            "tools": ["t"], "specs": [{"name": "t", "description": format!("round {i}"),
            "inputSchema": {"type": "object"}}],
            "instance": evil_running.id, "started_ms": 1});
        let r = evil.call(&name, &own, GENEROUS).await.unwrap();
        assert!(!r.is_error, "{}", r.text_content());
        if i % 10 == 0 {
            // A call through the relay is answered while the list is built over and over.
            id += 1;
            mcp.send(&format!(
                r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"echo","arguments":{{"text":"r{i}"}}}}}}"#
            ))
            .await;
            let a = mcp.answer(id, &mut notified).await;
            assert_eq!(a["result"]["content"][0]["text"], format!("r{i}"), "{a}");
        }
    }
    // The list ends with the last description (asked until it does, within a hang bound).
    let last = format!("round {}", rounds - 1);
    loop {
        id += 1;
        mcp.send(&format!(
            r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/list"}}"#
        ))
        .await;
        let list = mcp.answer(id, &mut notified).await;
        let evil_t = list["result"]["tools"]
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["name"] == "evil_t")
            .cloned()
            .unwrap_or_else(|| panic!("evil_t is listed: {list}"));
        if evil_t["description"] == last.as_str() {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "never {last}: {evil_t}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let elapsed = started.elapsed();
    // One build per 250 ms at most, each told at most once.
    let bound = (elapsed.as_millis() / 250) as usize + 2;
    assert!(notified >= 1, "the relay said nothing of {rounds} changes");
    assert!(
        notified <= bound && notified < rounds,
        "{notified} notifications for {rounds} registrations in {elapsed:?}"
    );
}

/// `tools/call` lines no SDK would send to `mesh mcp`, which answers plain calls itself once
/// the session is initialised: duplicate keys, arguments that are not an object, a byte order
/// mark, ids with control characters or past 2^53, names that are NATS wildcards, and lines of
/// exactly the largest size read and one byte more. Each line gets exactly one answer, with its
/// id as sent; a refused line never runs a tool; and the session answers afterwards.
#[tokio::test]
async fn odd_tools_call_lines_get_one_answer_each_and_run_nothing_refused() {
    let (bus, _running) = echo_bus().await;
    let mut mcp = Stdio::start(&bus).await;
    mcp.send(r#"{"jsonrpc":"2.0","id":0,"method":"tools/list"}"#)
        .await;
    mcp.next().await;
    let call = |id: &str, params: &str| {
        format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{params}}}"#)
    };
    // Refused: an error (with the id when one can be read), never a result.
    let refused: Vec<(String, Option<Value>)> = vec![
        (
            call("1", r#"{"name":"echo_whoami","name":"echo","arguments":{"text":"a"}}"#),
            Some(json!(1)),
        ),
        (
            call("2", r#"{"name":"echo","arguments":{"text":"a"},"name":"echo_whoami"}"#),
            Some(json!(2)),
        ),
        (
            r#"{"jsonrpc":"2.0","id":3,"id":4,"method":"tools/call","params":{"name":"echo","arguments":{"text":"a"}}}"#.into(),
            None,
        ),
        (
            r#"{"jsonrpc":"2.0","id":5,"method":"tools/list","method":"tools/call","params":{"name":"echo","arguments":{"text":"a"}}}"#.into(),
            None,
        ),
        (call("6", r#"{"name":"echo","arguments":[1]}"#), Some(json!(6))),
        (call("7", r#"{"name":"echo","arguments":"x"}"#), Some(json!(7))),
        (call("8", r#"{"name":"echo","arguments":1}"#), Some(json!(8))),
        (
            format!("\u{feff}{}", call("9", r#"{"name":"echo","arguments":{"text":"bom"}}"#)),
            None,
        ),
        (call("10", r#"{"name":"echo_*","arguments":{"text":"a"}}"#), Some(json!(10))),
        (call("11", r#"{"name":"echo_>","arguments":{"text":"a"}}"#), Some(json!(11))),
        (call("12", r#"{"name":"echo.echo","arguments":{"text":"a"}}"#), Some(json!(12))),
        (call("13", r#"{"name":"Echo_echo","arguments":{"text":"a"}}"#), Some(json!(13))),
        (call("14", r#"{"name":"echo\u0000","arguments":{"text":"a"}}"#), Some(json!(14))),
        (call("15", r#"{"name":"echo_tools","arguments":{}}"#), Some(json!(15))),
        (call("16", r#"{"name":"catalog_listing","arguments":{}}"#), Some(json!(16))),
    ];
    for (line, id) in &refused {
        mcp.send(line).await;
        let a = mcp.next().await;
        assert!(a.get("result").is_none(), "{line}: ran: {a}");
        assert!(a["error"]["code"].is_i64(), "{line}: {a}");
        if let Some(id) = id {
            assert_eq!(&a["id"], id, "{line}: {a}");
        }
    }
    // Answered, the id as sent.
    for (id, back) in [
        (r#""\u0000\n""#, json!("\u{0}\n")),
        ("9007199254740993", json!(9_007_199_254_740_993_u64)),
        ("-9223372036854775808", json!(i64::MIN)),
    ] {
        mcp.send(&call(id, r#"{"name":"echo","arguments":{"text":"ok"}}"#))
            .await;
        let a = mcp.next().await;
        assert_eq!(a["id"], back, "{a}");
        assert_eq!(a["result"]["content"][0]["text"], "ok", "{a}");
    }
    // A line of exactly the largest size read is read (and answered: its text is more than
    // the bus carries); one byte more is refused as too long; neither ends the session.
    let max = 4 << 20;
    let frame = call("20", r#"{"name":"echo","arguments":{"text":""}}"#);
    let text = "a".repeat(max - frame.len());
    let exact = call(
        "20",
        &format!(r#"{{"name":"echo","arguments":{{"text":"{text}"}}}}"#),
    );
    assert_eq!(exact.len(), max);
    mcp.send(&exact).await;
    let a = mcp.next().await;
    assert_eq!(
        a["id"],
        20,
        "{}",
        &a.to_string()[..200.min(a.to_string().len())]
    );
    let over = call(
        "21",
        &format!(r#"{{"name":"echo","arguments":{{"text":"a{text}"}}}}"#),
    );
    assert_eq!(over.len(), max + 1);
    mcp.send(&over).await;
    let a = mcp.next().await;
    assert_eq!(a["error"]["code"], -32600, "{a}");
    assert!(a.get("result").is_none(), "{a}");
    mcp.send(&call(
        "22",
        r#"{"name":"echo","arguments":{"text":"after"}}"#,
    ))
    .await;
    let a = mcp.next().await;
    assert_eq!(a["id"], 22, "{a}");
    assert_eq!(a["result"]["content"][0]["text"], "after", "{a}");
}

/// The messages the catalogue's bucket holds (its stream's count), read as the catalogue.
async fn bucket_messages(bus: &Bus) -> u64 {
    let catalog = bus.client_as(Some("catalog")).await;
    let js = async_nats::jetstream::new(catalog.nats().clone());
    let mut stream = js
        .get_stream(format!("KV_{}", mesh_core::subjects::catalog::BUCKET))
        .await
        .unwrap();
    stream.info().await.unwrap().state.messages
}

/// A module that says instances it never registered have stopped changes nothing: the
/// catalogue writes nothing into its bucket (each purge of a new key would stay there as a
/// marker for ever: the bucket would grow with every call) and tells nobody that anything
/// changed.
#[tokio::test]
async fn unregistering_instances_never_registered_writes_and_says_nothing() {
    use futures_util::StreamExt;
    let bus = small_bus(&["catalog", "echo", "evil"]).await;
    let _catalog = bus.serve_catalog().await;
    let _echo = bus.serve(mesh_echo::module()).await;
    let ann = bus.client_as(Some("ann")).await;
    let mut events = ann.nats().subscribe(CHANGED_SUBJECT).await.unwrap();
    crate::bus::round_trip(ann.nats()).await;
    let before = bucket_messages(&bus).await;

    let evil = bus.client_as(Some("evil")).await;
    let name = mesh_core::subjects::FullName::parse("catalog_unregister").unwrap();
    for i in 0..300 {
        let body = json!({"module": "evil", "instance": format!("never-{i}")});
        let r = evil.call(&name, &body, GENEROUS).await.unwrap();
        assert!(!r.is_error, "{}", r.text_content());
    }
    // A person's word is refused as before, and another module's instances are not evil's.
    let echo_id = json!({"module": "echo", "instance": _echo.id});
    let r = evil.call(&name, &echo_id, GENEROUS).await.unwrap();
    assert!(r.is_error, "evil unregistered echo: {}", r.text_content());

    assert_eq!(bucket_messages(&bus).await, before, "the bucket grew");
    let quiet = tokio::time::timeout(Duration::from_millis(300), events.next()).await;
    assert!(quiet.is_err(), "an event for nothing: {quiet:?}");
    let found = ann.discover(None, GENEROUS).await.unwrap();
    let echo = found
        .modules
        .iter()
        .find(|f| f.entry.module == "echo")
        .unwrap();
    assert_eq!(echo.entry.instances, 1);
    assert!(echo.tools.is_ok(), "{:?}", echo.tools);
}

/// A call answered by `mesh mcp` itself that asks the person (elicitation through rmcp's
/// session) while other lines come: a plain call sent before the question is answered is
/// answered on its own; an answer under an id never asked, and a second answer to the same
/// question, change nothing; the question's real answer ends the call with the pick made.
#[tokio::test]
async fn a_question_asked_from_the_fast_path_is_answered_only_by_its_own_answer() {
    let (bus, _running) = echo_bus().await;
    let mut mcp = Stdio::spawn(&bus);
    mcp.send(r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{"elicitation":{"form":{}}},"clientInfo":{"name":"raw","version":"0"}}}"#).await;
    mcp.next().await;
    mcp.send(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#)
        .await;
    mcp.send(r#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"echo_choose","arguments":{"options":["a","b"]}}}"#).await;
    let question = mcp.next().await;
    assert_eq!(question["method"], "elicitation/create", "{question}");
    let asked = question["id"].clone();
    // Meanwhile, a plain call: answered, the question still open.
    mcp.send(r#"{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"echo","arguments":{"text":"meanwhile"}}}"#).await;
    let a = mcp.next().await;
    assert_eq!(a["id"], 3, "{a}");
    assert_eq!(a["result"]["content"][0]["text"], "meanwhile", "{a}");
    // An answer to a question never asked: the call waits on.
    let never = if asked == json!(999) {
        json!(998)
    } else {
        json!(999)
    };
    mcp.send(&json!({"jsonrpc": "2.0", "id": never, "result": {"action": "accept", "content": {"pick": "a"}}}).to_string()).await;
    // The real answer, then the same id again with another pick.
    mcp.send(&json!({"jsonrpc": "2.0", "id": asked, "result": {"action": "accept", "content": {"pick": "b"}}}).to_string()).await;
    mcp.send(&json!({"jsonrpc": "2.0", "id": asked, "result": {"action": "accept", "content": {"pick": "a"}}}).to_string()).await;
    mcp.send(r#"{"jsonrpc":"2.0","id":4,"method":"ping"}"#)
        .await;
    let mut chosen = None;
    loop {
        let v = mcp.next().await;
        if v["id"] == 2 {
            assert!(chosen.is_none(), "answered twice: {v}");
            chosen = Some(v);
        } else if v["id"] == 4 {
            break;
        } else {
            assert!(v.get("result").is_none(), "{v}");
        }
    }
    let chosen = match chosen {
        Some(c) => c,
        None => loop {
            let v = mcp.next().await;
            if v["id"] == 2 {
                break v;
            }
        },
    };
    assert_eq!(
        chosen["result"]["content"][0]["text"], "you chose b",
        "{chosen}"
    );
}

/// A line that is both a request and a response (`method` with `result` or `error`) is not a
/// JSON-RPC message: rmcp refuses it (-32600) for any method, and `mesh mcp`'s own answers to
/// `tools/call` must too — such a line, say an elicitation answer a client got wrong, must
/// never run a tool. A line that is not UTF-8 is a parse error, not a call with replacement
/// characters in its place.
#[tokio::test]
async fn a_line_that_is_a_request_and_a_response_runs_no_tool() {
    let (bus, _running) = echo_bus().await;
    let mut mcp = Stdio::start(&bus).await;
    let echo = r#"{"name":"echo","arguments":{"text":"x"}}"#;
    for (id, method, params, extra) in [
        (1, "tools/list", "{}", r#""result":{}"#),
        (2, "tools/call", echo, r#""result":{"action":"accept"}"#),
        (3, "tools/call", echo, r#""error":{"code":1,"message":"m"}"#),
    ] {
        let line = format!(
            r#"{{"jsonrpc":"2.0","id":{id},"method":"{method}","params":{params},{extra}}}"#
        );
        mcp.send(&line).await;
        let a = mcp.next().await;
        assert!(
            a.get("result").is_none(),
            "{line}: answered as a request: {a}"
        );
        assert_eq!(a["error"]["code"], -32600, "{line}: {a}");
    }
    let mut bytes =
        br#"{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"echo","arguments":{"text":""#
            .to_vec();
    bytes.extend_from_slice(b"\xff\xfe\"}}}\n");
    mcp.stdin.write_all(&bytes).await.unwrap();
    mcp.stdin.flush().await.unwrap();
    let a = mcp.next().await;
    assert_eq!(a["error"]["code"], -32700, "{a}");
    // And the session goes on.
    mcp.send(&format!(
        r#"{{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{echo}}}"#
    ))
    .await;
    assert_eq!(mcp.next().await["result"]["content"][0]["text"], "x");
}

/// A module that starts and stops instance after instance (each a new id) leaves the
/// catalogue's bucket no larger than its live instances need: each removal's marker is
/// dropped once watchers have seen it. A removed instance stays removed.
#[tokio::test]
async fn instances_come_and_go_without_growing_the_bucket() {
    let bus = small_bus(&["catalog", "evil"]).await;
    let _catalog = bus.serve_catalog().await;
    let evil = bus.client_as(Some("evil")).await;
    let register = mesh_core::subjects::FullName::parse("catalog_register").unwrap();
    let unregister = mesh_core::subjects::FullName::parse("catalog_unregister").unwrap();
    let one = |i: usize| {
        json!({"module": "evil", "version": "1.0.0", "description": "", "tools": ["t"],
            "instance": format!("i{i}"), "started_ms": 1})
    };
    let r = evil.call(&register, &one(0), GENEROUS).await.unwrap();
    assert!(!r.is_error, "{}", r.text_content());
    let before = bucket_messages(&bus).await;
    for i in 1..=300 {
        let r = evil.call(&register, &one(i), GENEROUS).await.unwrap();
        assert!(!r.is_error, "{}", r.text_content());
        let gone = json!({"module": "evil", "instance": format!("i{i}")});
        let r = evil.call(&unregister, &gone, GENEROUS).await.unwrap();
        assert!(!r.is_error, "{}", r.text_content());
    }
    // The markers go a few seconds after each removal; a bound only against a hang.
    let until = std::time::Instant::now() + Duration::from_secs(60);
    let mut after = bucket_messages(&bus).await;
    while after > before + 10 && std::time::Instant::now() < until {
        tokio::time::sleep(Duration::from_millis(500)).await;
        after = bucket_messages(&bus).await;
    }
    assert!(after <= before + 10, "{before} messages, then {after}");
    let name = mesh_core::subjects::FullName::parse("catalog_modules").unwrap();
    let ann = bus.client_as(Some("ann")).await;
    let listed = ann.call(&name, &json!({}), GENEROUS).await.unwrap();
    let evil_entry = listed.structured_content.unwrap()["modules"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["module"] == "evil")
        .cloned()
        .unwrap();
    assert_eq!(evil_entry["instances"], 1, "only i0 runs: {evil_entry}");
}

/// A long-running mesh (`mesh serve`, `mesh mcp`) writes to sockets whose peer may be gone at
/// any moment: an HTTP client that hung up mid-answer, a bus that went away. With SIGPIPE's
/// default action the first such write would kill it without a word (a `mesh up` stopping
/// under load was seen to die so); it ignores SIGPIPE and sees the write fail. Clients that
/// hang up as soon as they have asked do not take the console down.
#[tokio::test]
async fn a_peer_that_hangs_up_does_not_kill_a_long_running_mesh() {
    let (bus, _running) = echo_bus().await;
    let ann: Vec<String> = bus.flags("ann");
    let (console, url) = crate::mcp::console_as(&ann).await;
    let pid = console.id().unwrap();
    assert!(
        crate::bus::ignores_sigpipe(pid),
        "mesh serve dies of a peer that hangs up"
    );
    let mut stdio = Stdio::start(&bus).await;
    assert!(
        crate::bus::ignores_sigpipe(stdio._child.id().unwrap()),
        "mesh mcp likewise"
    );

    let address = crate::mcp::authority_of(&url).to_owned();
    let body = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"rude","version":"0"}}}"#;
    for _ in 0..20 {
        let mut socket = TcpStream::connect(&address).await.unwrap();
        let request = format!(
            "POST /mcp HTTP/1.1\r\nHost: {address}\r\nAuthorization: Bearer {}\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nContent-Length: {}\r\n\r\n{body}",
            crate::mcp::TOKEN,
            body.len()
        );
        socket.write_all(request.as_bytes()).await.unwrap();
        drop(socket);
    }
    // Still serving: a well-behaved client is answered.
    let mut socket = TcpStream::connect(&address).await.unwrap();
    let request = format!(
        "POST /mcp HTTP/1.1\r\nHost: {address}\r\nAuthorization: Bearer {}\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        crate::mcp::TOKEN,
        body.len()
    );
    socket.write_all(request.as_bytes()).await.unwrap();
    let mut answer = String::new();
    tokio::time::timeout(GENEROUS, socket.read_to_string(&mut answer))
        .await
        .expect("the console answers")
        .unwrap();
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    stdio
        .send(r#"{"jsonrpc":"2.0","id":9,"method":"tools/list"}"#)
        .await;
    assert!(stdio.next().await.get("result").is_some());
}
