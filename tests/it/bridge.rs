//! MCP servers as modules (`mesh run --mcp`): servers nobody here wrote (PyPI's
//! mcp-server-time, npm's server-everything) and one written with the official Python SDK
//! (`tests/py/mcp_server.py`), each behind the bus's permissions, called by people through
//! the mesh's client and command line, attacked over raw NATS, and made to fail.

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use base64::Engine;
use mesh_core::client::{Client, Outcome};
use mesh_core::subjects::{FullName, ToolResult};
use serde_json::{Value, json};
use tokio::process::{Child, Command};
use tokio::sync::watch;

use crate::bus::{Bus, GENEROUS, node_path, python};
use crate::raw::Raw;

/// A bound that only catches a hang.
const HANG: Duration = Duration::from_secs(60);

const TEST_SERVER: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/py/mcp_server.py");
const CALL_TOOL_PY: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/py/call_tool.py");
const CALL_TOOL_TS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/js/call_tool.cjs");

/// `mesh run --mcp <name> -- <command>` with module `name`'s credential; its log in `log`.
pub(crate) fn bridge(bus: &Bus, name: &str, command: &[&str], log: &Path) -> Child {
    bridge_with(bus, name, &[], &[], command, log)
}

/// [`bridge`] with more `mesh run` flags (`--url` instead of a command when `command` is
/// empty) and more environment for the bridge.
fn bridge_with(
    bus: &Bus,
    name: &str,
    flags: &[&std::ffi::OsStr],
    env: &[(&str, &std::ffi::OsStr)],
    command: &[&str],
    log: &Path,
) -> Child {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_mesh"));
    cmd.args(["-v", "run", "--mcp", name])
        .args(bus.flags(name))
        .args(["--layout", "accounts"])
        .args(flags);
    if !command.is_empty() {
        cmd.arg("--").args(command);
    }
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(log).unwrap())
        .kill_on_drop(true)
        .spawn()
        .unwrap()
}

/// Waits until `module` serves `tool` (listed by its `tools` verb).
pub(crate) async fn served(client: &Client, module: &str, tool: &str, log: &Path) {
    let listed = async {
        loop {
            if let Ok(reply) = client.tools(module, Duration::from_secs(1)).await
                && reply.tools.iter().any(|t| t.name == tool)
            {
                return;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    };
    if tokio::time::timeout(HANG, listed).await.is_err() {
        panic!(
            "{module} never served {tool}; its log:\n{}",
            std::fs::read_to_string(log).unwrap_or_default()
        );
    }
}

async fn call(client: &Client, tool: &str, args: Value) -> ToolResult {
    client
        .call(&FullName::parse(tool).unwrap(), &args, GENEROUS)
        .await
        .unwrap_or_else(|e| panic!("{tool}: {e}"))
}

pub(crate) fn everything() -> String {
    format!(
        "{}/@modelcontextprotocol/server-everything/dist/index.js",
        node_path()
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn servers_nobody_here_wrote_are_modules_under_the_bus_permissions() {
    let dir = tempfile::tempdir().unwrap();
    let bus = Bus::accounts(
        &["catalog", "time", "everything", "tsecho"],
        &[
            (
                "ann",
                &["mesh.time.>", "mesh.everything.>", "mesh.tsecho.>"],
            ),
            ("bob", &["mesh.echo.>"]),
        ],
    )
    .await;
    let _catalog = bus.serve_catalog().await;
    let (time_log, everything_log) = (dir.path().join("time.log"), dir.path().join("ev.log"));
    let py = python();
    let _time = bridge(
        &bus,
        "time",
        &[&py, "-m", "mcp_server_time", "--local-timezone", "UTC"],
        &time_log,
    );
    let ev = everything();
    let _everything = bridge(&bus, "everything", &["node", &ev, "stdio"], &everything_log);
    // A server written with the official TypeScript SDK (the relay benchmark's echo).
    let ts_log = dir.path().join("ts.log");
    let ts_server = concat!(env!("CARGO_MANIFEST_DIR"), "/benches/js/stdio_echo.cjs");
    let node_path_env = format!("NODE_PATH={}", node_path());
    let _tsecho = bridge(
        &bus,
        "tsecho",
        &["env", &node_path_env, "node", ts_server],
        &ts_log,
    );
    let ann = bus.client_as(Some("ann")).await;
    served(&ann, "time", "get_current_time", &time_log).await;
    served(&ann, "everything", "get_sum", &everything_log).await;
    served(&ann, "tsecho", "echo", &ts_log).await;
    let r = call(
        &ann,
        "tsecho_echo",
        json!({"text": "from the TypeScript SDK"}),
    )
    .await;
    assert_eq!(r.text_content(), "from the TypeScript SDK");

    // The listing as the server wrote it, under subject-safe names that map back.
    let listed = ann.tools("everything", GENEROUS).await.unwrap();
    let sum = listed.tools.iter().find(|t| t.name == "get_sum").unwrap();
    assert_eq!(
        sum.meta.as_ref().unwrap()["mesh/mcpName"],
        "get-sum",
        "{sum:?}"
    );
    assert_eq!(sum.title.as_deref(), Some("Get Sum Tool"), "{sum:?}");
    assert!(sum.annotations.is_some(), "{sum:?}");
    let structured = listed
        .tools
        .iter()
        .find(|t| t.name == "get_structured_content")
        .unwrap();
    assert!(structured.output_schema.is_some(), "{structured:?}");

    // Calls, each answer whole.
    let r = call(
        &ann,
        "time_get_current_time",
        json!({"timezone": "Europe/Paris"}),
    )
    .await;
    assert!(
        !r.is_error && r.text_content().contains("Europe/Paris"),
        "{r:?}"
    );
    let r = call(&ann, "everything_get_sum", json!({"a": 2, "b": 3})).await;
    assert!(!r.is_error && r.text_content().contains('5'), "{r:?}");
    let r = call(&ann, "everything_get_tiny_image", json!({})).await;
    let image = r
        .content
        .iter()
        .find(|c| c.0["type"] == "image")
        .unwrap_or_else(|| panic!("an image: {r:?}"));
    assert_eq!(image.0["mimeType"], "image/png");
    let png = base64::engine::general_purpose::STANDARD
        .decode(image.0["data"].as_str().unwrap())
        .unwrap();
    assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n");
    let r = call(
        &ann,
        "everything_get_structured_content",
        json!({"location": "Chicago"}),
    )
    .await;
    assert!(r.structured_content.is_some(), "{r:?}");
    // Resource links and embedded resources, whole.
    let r = call(&ann, "everything_get_resource_links", json!({"count": 2})).await;
    let links: Vec<_> = r
        .content
        .iter()
        .filter(|c| c.0["type"] == "resource_link")
        .collect();
    assert_eq!(links.len(), 2, "{r:?}");
    assert!(
        links[0].0["uri"].as_str().unwrap().starts_with("demo://"),
        "{r:?}"
    );
    let r = call(
        &ann,
        "everything_get_resource_reference",
        json!({"resourceType": "Blob", "resourceId": 2}),
    )
    .await;
    let embedded = r
        .content
        .iter()
        .find(|c| c.0["type"] == "resource")
        .unwrap_or_else(|| panic!("an embedded resource: {r:?}"));
    assert!(embedded.0["resource"]["uri"].is_string(), "{r:?}");
    // The server's progress is the call's, to its last report (the one saying it is done,
    // which the server sends just before its answer), call after call.
    for _ in 0..25 {
        let (progress, seen) = watch::channel(None);
        let r = ann
            .call_watched(
                &FullName::parse("everything_trigger_long_running_operation").unwrap(),
                &json!({"duration": 0.1, "steps": 2}),
                GENEROUS,
                &progress,
            )
            .await
            .unwrap();
        assert!(!r.is_error, "{r:?}");
        let last = seen.borrow().clone().expect("progress reached the caller");
        assert_eq!(
            (last.progress, last.total),
            (2.0, Some(2.0)),
            "the last report was lost: {last:?}"
        );
    }
    // A tool the server does not list is served by nobody, as for any module.
    let e = ann
        .call(
            &FullName::parse("time_no_such_tool").unwrap(),
            &json!({}),
            GENEROUS,
        )
        .await
        .unwrap_err();
    assert_eq!(e.outcome(), Outcome::NobodyServes, "{e}");

    // Who may call is the bus's: bob may not, through our client or raw bytes.
    let bob = bus.client_as(Some("bob")).await;
    let e = bob
        .call(
            &FullName::parse("time_get_current_time").unwrap(),
            &json!({"timezone": "UTC"}),
            GENEROUS,
        )
        .await
        .unwrap_err();
    assert_eq!(e.outcome(), Outcome::Denied, "{e}");
    let mut raw = Raw::connect(&bus.url(), "bob", "pw-bob").await;
    for subject in ["mesh.time.get_current_time", "mesh.everything.get_env"] {
        let refused = raw.publish(subject, br#"{"timezone":"UTC"}"#).await;
        assert!(
            refused
                .as_deref()
                .is_some_and(|e| e.contains("Permissions Violation")),
            "{subject}: {refused:?}"
        );
    }
    // Agents reach them through both relays, with the official SDKs' clients.
    let (_console, url) = crate::mcp::console_with(&bus.flags("ann"), &["--timeout", "10s"]).await;
    let py_sdk = crate::bus::json_of(
        Command::new(python())
            .arg(CALL_TOOL_PY)
            .arg(env!("CARGO_BIN_EXE_mesh"))
            .arg("everything_get_sum")
            .arg(r#"{"a": 20, "b": 22}"#)
            .args(bus.flags("ann")),
    )
    .await;
    assert_eq!(py_sdk["isError"], false, "{py_sdk}");
    assert!(py_sdk["text"].as_str().unwrap().contains("42"), "{py_sdk}");
    assert!(
        py_sdk["tools"]
            .as_array()
            .unwrap()
            .contains(&json!("time_convert_time")),
        "{py_sdk}"
    );
    let ts_sdk = crate::bus::json_of(
        Command::new("node")
            .env("NODE_PATH", node_path())
            .env("MESH_CONSOLE_TOKEN", crate::mcp::TOKEN)
            .arg(CALL_TOOL_TS)
            .arg("everything_get_tiny_image")
            .arg("{}")
            .arg(&url),
    )
    .await;
    assert_eq!(ts_sdk["isError"], false, "{ts_sdk}");
    assert!(
        ts_sdk["types"]
            .as_array()
            .unwrap()
            .contains(&json!("image")),
        "{ts_sdk}"
    );
    // The console tells bob's denial apart too (the relay marks the kind).
    let (_bobs, bobs_url) =
        crate::mcp::console_with(&bus.flags("bob"), &["--timeout", "10s"]).await;
    let denied = crate::bus::json_of(
        Command::new("node")
            .env("NODE_PATH", node_path())
            .env("MESH_CONSOLE_TOKEN", crate::mcp::TOKEN)
            .arg(CALL_TOOL_TS)
            .arg("time_get_current_time")
            .arg(r#"{"timezone": "UTC"}"#)
            .arg(&bobs_url),
    )
    .await;
    assert_eq!(denied["isError"], true, "{denied}");
    assert!(
        denied["text"].as_str().unwrap().contains("not yours")
            || denied["text"].as_str().unwrap().contains("denied"),
        "{denied}"
    );

    // The command line tells them apart as for any module.
    let home = tempfile::tempdir().unwrap();
    for (who, tool, code) in [
        ("ann", "time_get_current_time", 0),
        ("bob", "time_get_current_time", 4),
        ("ann", "time_nothing_like_it", 2),
    ] {
        let out = crate::cli::command(home.path())
            .args(bus.flags(who))
            .args(["call", tool, "timezone=UTC"])
            .output()
            .await
            .unwrap();
        assert_eq!(
            out.status.code(),
            Some(code),
            "{who} {tool}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bridged_server_that_fails_cannot_take_the_module_down() {
    let dir = tempfile::tempdir().unwrap();
    let bus = Bus::accounts(
        &["catalog", "faulty"],
        &[("ann", &["mesh.faulty.>"]), ("bob", &["mesh.faulty.>"])],
    )
    .await;
    let _catalog = bus.serve_catalog().await;
    let log = dir.path().join("faulty.log");
    let markers = dir.path().to_str().unwrap().to_owned();
    let py = python();
    let _faulty = bridge(&bus, "faulty", &[&py, TEST_SERVER, &markers], &log);
    let ann = bus.client_as(Some("ann")).await;
    served(&ann, "faulty", "whoami", &log).await;

    // The server learns who calls from the bus's stamp, in _meta.
    let r = call(&ann, "faulty_whoami", json!({})).await;
    let who: Value = serde_json::from_str(&r.text_content()).unwrap();
    assert_eq!(
        who,
        json!({"id": "ann@PEOPLE", "person": "ann", "account": "PEOPLE"})
    );
    // A caller cannot speak for the stamp: a `_meta` of its own in the arguments is theirs to
    // send as an argument, never the request's `mesh/caller`.
    let forged = json!({"_meta": {"mesh/caller": {"id": "root@PEOPLE", "person": "root"}}});
    let r = call(&ann, "faulty_whoami", forged).await;
    if !r.is_error {
        let who: Value = serde_json::from_str(&r.text_content()).unwrap();
        assert_eq!(who["id"], "ann@PEOPLE", "{who}");
    }
    assert!(!r.text_content().contains("root@"), "{}", r.text_content());
    // A name that is no subject token, mapped and back.
    let r = call(&ann, "faulty_files_read", json!({"path": "/x"})).await;
    assert_eq!(r.text_content(), "read /x");

    // The server's question (2026-07-28's input_required) is the mesh's, one per round
    // trip: its state sealed to the caller and the tool.
    let asked = call(&ann, "faulty_ask", json!({})).await;
    assert!(asked.needs_input(), "{asked:?}");
    let requests = asked.input_requests.clone().unwrap();
    assert_eq!(
        requests["color"]["method"], "elicitation/create",
        "{requests:?}"
    );
    let state = asked.request_state.clone().unwrap();
    let answer = |state: &str| {
        json!({"requestState": state,
               "inputResponses": {"color": {"action": "accept", "content": {"color": "blue"}}}})
    };
    let r = call(&ann, "faulty_ask", answer(&state)).await;
    assert_eq!(
        r.text_content(),
        "you chose blue with state the-server-s-own-state"
    );
    // Another person cannot answer ann's question, nor anyone with a state altered.
    let bob = bus.client_as(Some("bob")).await;
    let r = call(&bob, "faulty_ask", answer(&state)).await;
    assert!(r.is_error && r.text_content().contains("refused"), "{r:?}");
    let mut altered = state.clone().into_bytes();
    altered[3] = if altered[3] == b'A' { b'B' } else { b'A' };
    let r = call(
        &ann,
        "faulty_ask",
        answer(&String::from_utf8(altered).unwrap()),
    )
    .await;
    assert!(r.is_error && r.text_content().contains("refused"), "{r:?}");

    // A caller that stops waiting cancels the call at the server.
    let e = ann
        .call(
            &FullName::parse("faulty_slow").unwrap(),
            &json!({"seconds": 30, "marker": "slow"}),
            Duration::from_secs(1),
        )
        .await
        .unwrap_err();
    assert_eq!(e.outcome(), Outcome::Slow, "{e}");
    let marker = dir.path().join("slow");
    let cancelled = async {
        while std::fs::read_to_string(&marker).unwrap_or_default() != "cancelled" {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    };
    tokio::time::timeout(HANG, cancelled)
        .await
        .expect("the server heard the call was cancelled");

    // A caller that drops its call (an agent's cancellation, Ctrl-C) long before its
    // deadline: the module is told, and so is the server.
    let dropped = tokio::time::timeout(
        Duration::from_secs(1),
        ann.call(
            &FullName::parse("faulty_slow").unwrap(),
            &json!({"seconds": 30, "marker": "dropped"}),
            Duration::from_secs(60),
        ),
    )
    .await;
    assert!(dropped.is_err(), "still running when dropped");
    let marker = dir.path().join("dropped");
    let told = async {
        while std::fs::read_to_string(&marker).unwrap_or_default() != "cancelled" {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    };
    tokio::time::timeout(HANG, told)
        .await
        .expect("the server heard the dropped call was cancelled");

    // A server that dies mid-call: the call is answered as failed, never hung, and the
    // module comes back with a new server.
    let r = call(&ann, "faulty_crash", json!({})).await;
    assert!(r.is_error, "{r:?}");
    assert!(r.text_content().contains("started again"), "{r:?}");
    served(&ann, "faulty", "whoami", &log).await;
    let back = async {
        loop {
            match ann
                .call(
                    &FullName::parse("faulty_whoami").unwrap(),
                    &json!({}),
                    GENEROUS,
                )
                .await
            {
                Ok(r) if !r.is_error => return,
                _ => tokio::time::sleep(Duration::from_millis(100)).await,
            }
        }
    };
    tokio::time::timeout(HANG, back)
        .await
        .expect("the module serves again");

    // Garbage on stdout does not take it down.
    let _ = call(&ann, "faulty_garbage", json!({})).await;
    let r = call(&ann, "faulty_files_read", json!({"path": "/y"})).await;
    assert_eq!(r.text_content(), "read /y");

    // A 6 MB result arrives whole (the claim-check carries it past the bus's 1 MiB; the
    // Python SDK sends it twice in one message, as text and as structured content).
    let r = call(&ann, "faulty_big", json!({"megabytes": 6})).await;
    assert!(
        !r.is_error,
        "{}",
        &r.text_content()[..200.min(r.text_content().len())]
    );
    assert_eq!(r.text_content().len(), 6 * 1024 * 1024);
    // One of 20 MB (a line of 40 MB, twice what rmcp reads) arrives whole too.
    let r = ann
        .call(
            &FullName::parse("faulty_big").unwrap(),
            &json!({"megabytes": 20}),
            HANG,
        )
        .await
        .unwrap();
    assert!(!r.is_error, "{}", &r.text_content()[..200]);
    assert_eq!(r.text_content().len(), 20 * 1024 * 1024);
    let r = call(&ann, "faulty_files_read", json!({"path": "/z"})).await;
    assert_eq!(r.text_content(), "read /z");

    // The server's tools change: the module serves the new listing, and an agent following
    // the list through `mesh mcp` (the TypeScript SDK's client) hears of it.
    use tokio::io::AsyncBufReadExt;
    let mut follower = Command::new("node")
        .env("NODE_PATH", node_path())
        .arg(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/js/list_changed.cjs"
        ))
        .arg("5")
        .arg(env!("CARGO_BIN_EXE_mesh"))
        .args(bus.flags("ann"))
        .arg("mcp")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lists = tokio::io::BufReader::new(follower.stdout.take().unwrap()).lines();
    let first = tokio::time::timeout(HANG, lists.next_line())
        .await
        .expect("the agent lists")
        .unwrap()
        .unwrap();
    assert!(!first.contains("faulty_grown"), "{first}");
    let r = call(&ann, "faulty_grow", json!({})).await;
    assert_eq!(r.text_content(), "grew");
    served(&ann, "faulty", "grown", &log).await;
    let r = call(&ann, "faulty_grown", json!({})).await;
    assert_eq!(r.text_content(), "grown");
    let heard = async {
        loop {
            let list = lists.next_line().await.unwrap().expect("a list");
            if list.contains("faulty_grown") {
                return;
            }
        }
    };
    tokio::time::timeout(HANG, heard)
        .await
        .expect("the agent heard the tools changed");
}

/// A free loopback port, as the kernel gives one.
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// The Python SDK's server over streamable HTTP on `port`.
fn http_server(markers: &str, port: u16) -> Child {
    Command::new(python())
        .args([TEST_SERVER, markers, "http", &port.to_string()])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_over_http_gets_its_headers_from_a_file_and_is_reached_again() {
    let dir = tempfile::tempdir().unwrap();
    let bus = Bus::accounts(&["catalog", "faulty"], &[("ann", &["mesh.faulty.>"])]).await;
    let _catalog = bus.serve_catalog().await;
    let markers = dir.path().to_str().unwrap().to_owned();
    let port = free_port();
    let mut server = http_server(&markers, port);
    let headers = dir.path().join("headers");
    std::fs::write(
        &headers,
        "# for the server\nAuthorization: Bearer t0ken-in-a-file\n",
    )
    .unwrap();
    let log = dir.path().join("bridge.log");
    let url = format!("http://127.0.0.1:{port}/mcp");
    let flags = [
        "--url".as_ref(),
        url.as_ref(),
        "--headers".as_ref(),
        headers.as_os_str(),
    ];
    let bridge = bridge_with(&bus, "faulty", &flags, &[], &[], &log);
    let ann = bus.client_as(Some("ann")).await;
    served(&ann, "faulty", "authorization", &log).await;
    let r = call(&ann, "faulty_authorization", json!({})).await;
    assert_eq!(r.text_content(), "Bearer t0ken-in-a-file");
    // The token is nowhere a process listing shows.
    let cmdline = std::fs::read(format!("/proc/{}/cmdline", bridge.id().unwrap())).unwrap();
    assert!(!String::from_utf8_lossy(&cmdline).contains("t0ken"));
    // Nor in the bridge's log.
    assert!(!std::fs::read_to_string(&log).unwrap().contains("t0ken"));

    // A response of 40 MB (the Python SDK's 20 MB result, as text and structured content)
    // arrives whole; one past what the bridge reads (132 MiB) is a tool error saying so, at
    // once, and the session goes on.
    let big = async |megabytes: usize| {
        let tool = FullName::parse("faulty_big").unwrap();
        ann.call(&tool, &json!({"megabytes": megabytes}), HANG)
            .await
    };
    let r = big(20).await.unwrap();
    assert!(!r.is_error, "{}", &r.text_content()[..200]);
    assert_eq!(r.text_content().len(), 20 * 1024 * 1024);
    let r = big(66).await.unwrap();
    assert!(
        r.is_error
            && r.text_content()
                .contains("was not read: it is more than the 128 MiB"),
        "{r:?}"
    );
    let r = call(&ann, "faulty_authorization", json!({})).await;
    assert_eq!(r.text_content(), "Bearer t0ken-in-a-file");

    // The server goes away and comes back on the same address: the bridge reaches it again.
    server.kill().await.unwrap();
    let _ = server.wait().await;
    let _server = http_server(&markers, port);
    let back = async {
        loop {
            match ann
                .call(
                    &FullName::parse("faulty_authorization").unwrap(),
                    &json!({}),
                    GENEROUS,
                )
                .await
            {
                Ok(r) if !r.is_error => return r,
                _ => tokio::time::sleep(Duration::from_millis(200)).await,
            }
        }
    };
    let r = tokio::time::timeout(HANG, back).await.unwrap_or_else(|_| {
        panic!(
            "the bridge never reached the server again; its log:\n{}",
            std::fs::read_to_string(&log).unwrap_or_default()
        )
    });
    assert_eq!(r.text_content(), "Bearer t0ken-in-a-file");
}

#[tokio::test]
async fn headers_never_come_from_the_command_line_and_bad_ones_are_named() {
    let dir = tempfile::tempdir().unwrap();
    let headers = dir.path().join("headers");
    std::fs::write(&headers, "Authorization Bearer s3cret\n").unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_mesh"))
        .args([
            "run",
            "--mcp",
            "x",
            "--url",
            "http://127.0.0.1:9/mcp",
            "--headers",
        ])
        .arg(&headers)
        .output()
        .await
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("line 1 is not `Name: value`"), "{err}");
    assert!(!err.contains("s3cret"), "{err}");
    // There is no flag that takes a header's value.
    let out = Command::new(env!("CARGO_BIN_EXE_mesh"))
        .args([
            "run",
            "--mcp",
            "x",
            "--url",
            "http://127.0.0.1:9/mcp",
            "--header",
            "A: b",
        ])
        .output()
        .await
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
}

const HOSTILE_SERVER: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/py/hostile_mcp_server.py"
);

/// The peak resident memory of a process, in MiB.
fn peak_mib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let kb: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .expect("VmHWM");
    kb / 1024
}

/// `mesh run --mcp <name>` of the hostile server in `mode`, with a bus credential and the
/// mesh's settings in its own environment that the server must not inherit.
fn hostile(bus: &Bus, name: &str, mode: &str, log: &Path) -> Child {
    let env = [
        ("NATS_PASSWORD", "a-credential-of-the-bridge".as_ref()),
        ("MESH_STATE_DIR", "/the/mesh/state".as_ref()),
    ];
    let py = python();
    bridge_with(bus, name, &[], &env, &[&py, HOSTILE_SERVER, mode], log)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hostile_server_cannot_name_its_way_in_read_the_credential_or_exhaust_the_bridge() {
    let dir = tempfile::tempdir().unwrap();
    let modules = ["catalog", "names", "env", "bomb", "pages", "storm"];
    let people: Vec<(&str, &[&str])> = vec![("ann", &["mesh.>"])];
    let bus = Bus::accounts(&modules, &people).await;
    let _catalog = bus.serve_catalog().await;
    let log = |m: &str| dir.path().join(format!("{m}.log"));
    let _names = hostile(&bus, "names", "names", &log("names"));
    let env = hostile(&bus, "env", "env", &log("env"));
    let bomb = hostile(&bus, "bomb", "bomb", &log("bomb"));
    let pages = hostile(&bus, "pages", "pages", &log("pages"));
    let _storm = hostile(&bus, "storm", "storm", &log("storm"));
    let ann = bus.client_as(Some("ann")).await;

    // Names that clash, repeat, mark each other or are the mesh's verbs: each served under a
    // name of its own, the mesh's verbs never a tool, no `mesh/` word of the server's kept.
    served(&ann, "names", "echo", &log("names")).await;
    let listed = ann.tools("names", GENEROUS).await.unwrap();
    let names: Vec<&str> = listed.tools.iter().map(|t| t.name.as_str()).collect();
    let unique: std::collections::BTreeSet<&&str> = names.iter().collect();
    assert_eq!(unique.len(), names.len(), "{names:?}");
    assert_eq!(names.len(), 6, "echo once: {names:?}");
    assert!(
        !names.contains(&"tools") && !names.contains(&"result"),
        "{names:?}"
    );
    for t in &listed.tools {
        let meta = t.meta.as_ref().unwrap();
        assert!(meta.get("mesh/actsForPeople").is_none(), "{meta}");
        assert_eq!(meta["their/own"], 1, "{meta}");
        let r = call(&ann, &format!("names_{}", t.name), json!({})).await;
        assert_eq!(
            r.text_content(),
            meta["mesh/mcpName"].as_str().unwrap(),
            "{}",
            t.name
        );
    }

    // The server gets nothing of the bridge's environment: no bus credential, no settings.
    served(&ann, "env", "env", &log("env")).await;
    let r = call(&ann, "env_env", json!({})).await;
    let seen: serde_json::Map<String, Value> = serde_json::from_str(&r.text_content()).unwrap();
    let leaked: Vec<&String> = seen
        .keys()
        .filter(|k| k.starts_with("NATS_") || k.starts_with("MESH_"))
        .collect();
    assert!(leaked.is_empty(), "{leaked:?}");
    assert!(!r.text_content().contains("a-credential-of-the-bridge"));
    drop(env);

    // A line of six million values before the answer: cut short, the answer still read, and
    // the bridge's memory far from the hundred times the line that parsing it whole costs.
    served(&ann, "bomb", "bomb", &log("bomb")).await;
    let r = call(&ann, "bomb_bomb", json!({})).await;
    assert_eq!(r.text_content(), "bomb");
    let peak = peak_mib(bomb.id().unwrap());
    assert!(peak < 512, "the bridge peaked at {peak} MiB");

    // A listing that pages for ever is refused (and tried again), never served, bounded.
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(ann.tools("pages", Duration::from_secs(1)).await.is_err());
    let peak = peak_mib(pages.id().unwrap());
    assert!(peak < 256, "the bridge peaked at {peak} MiB");
    let said = std::fs::read_to_string(log("pages")).unwrap();
    assert!(said.contains("past 64 pages"), "{said}");

    // A storm of tool-list changes: listed again once a second at most, and served all along.
    served(&ann, "storm", "echo", &log("storm")).await;
    let r = call(&ann, "storm_echo", json!({})).await;
    assert_eq!(r.text_content(), "echo");
    let said = std::fs::read_to_string(log("storm")).unwrap();
    let served_times = said.matches("serving the MCP server's tools").count();
    assert!(served_times <= 3, "served {served_times} times:\n{said}");
}

/// A server from before 2026-07-28 asks its question in the middle of a call
/// (`elicitation/create`): the caller is asked, one question per round trip, the call at the
/// server held open meanwhile; the answer is the caller's alone, and is taken once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_older_servers_question_mid_call_is_asked_of_its_caller() {
    let dir = tempfile::tempdir().unwrap();
    let bus = Bus::accounts(
        &["catalog", "asker", "fresh"],
        &[
            ("ann", &["mesh.asker.>", "mesh.fresh.>"]),
            ("bob", &["mesh.asker.>", "mesh.fresh.>"]),
        ],
    )
    .await;
    let _catalog = bus.serve_catalog().await;
    let log = dir.path().join("asker.log");
    let _asker = hostile(&bus, "asker", "ask", &log);
    let ann = bus.client_as(Some("ann")).await;
    served(&ann, "asker", "ask", &log).await;

    // A call given up before its server answered leaves nothing open behind it: the next
    // call's question is still that call's alone (not declined as one of several).
    let dropped = tokio::time::timeout(
        Duration::from_millis(500),
        ann.call(
            &FullName::parse("asker_hang").unwrap(),
            &json!({}),
            GENEROUS,
        ),
    )
    .await;
    assert!(dropped.is_err(), "hang never answers");
    // (A call cancelled at the server counts as open there half a second more.)
    tokio::time::sleep(Duration::from_secs(1)).await;

    let asked = call(&ann, "asker_ask", json!({})).await;
    assert!(asked.needs_input(), "{asked:?}");
    let question = &asked.input_requests.as_ref().unwrap()["question"];
    assert_eq!(question["method"], "elicitation/create");
    assert_eq!(question["params"]["message"], "Which colour?");
    let state = asked.request_state.clone().unwrap();
    let answer = |color: &str| {
        json!({"requestState": state,
               "inputResponses": {"question": {"action": "accept", "content": {"color": color}}}})
    };
    // Not bob's to answer.
    let bob = bus.client_as(Some("bob")).await;
    let r = call(&bob, "asker_ask", answer("blue")).await;
    assert!(r.is_error && r.text_content().contains("refused"), "{r:?}");
    let r = call(&ann, "asker_ask", answer("red")).await;
    assert_eq!(r.text_content(), "you chose red");
    // Answered once.
    let r = call(&ann, "asker_ask", answer("blue")).await;
    assert!(
        r.is_error && r.text_content().contains("answered already"),
        "{r:?}"
    );

    // An older server says its tools changed unasked: the module serves the new listing.
    let r = call(&ann, "asker_grow", json!({})).await;
    assert_eq!(r.text_content(), "grew");
    served(&ann, "asker", "grown", &log).await;

    // The command line asks the same way (here answered up front).
    let home = tempfile::tempdir().unwrap();
    let out = crate::cli::command(home.path())
        .args(bus.flags("ann"))
        .args(["call", "asker_ask", "--answer", "question.color=blue"])
        .output()
        .await
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("you chose blue"));

    // The server has asked: its calls take turns, so a question is never another's. Bob's
    // call that hangs holds the turn; ann's waits for it, and once bob gives his up (it is
    // cancelled at the server) hers is made and asked her question.
    let hanging = {
        let bob = bob.clone();
        tokio::spawn(async move {
            bob.call(
                &FullName::parse("asker_hang").unwrap(),
                &json!({}),
                Duration::from_secs(2),
            )
            .await
        })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    let asked = call(&ann, "asker_ask", json!({})).await;
    assert!(asked.needs_input(), "{asked:?}");
    assert!(hanging.is_finished(), "ann's call was made beside bob's");
    let e = hanging.await.unwrap().unwrap_err();
    assert_eq!(e.outcome(), Outcome::Slow, "{e}");
    let state = asked.request_state.clone().unwrap();
    let r = call(
        &ann,
        "asker_ask",
        json!({"requestState": state,
               "inputResponses": {"question": {"action": "accept", "content": {"color": "red"}}}}),
    )
    .await;
    assert_eq!(r.text_content(), "you chose red");
    // An answer that is none is nobody's "decline": the call is cancelled, and says so.
    let asked = call(&ann, "asker_ask", json!({})).await;
    let state = asked.request_state.clone().unwrap();
    let r = call(
        &ann,
        "asker_ask",
        json!({"requestState": state, "inputResponses": {"other": {"action": "accept"}}}),
    )
    .await;
    assert!(
        r.is_error
            && r.text_content()
                .contains("missing from inputResponses.question"),
        "{r:?}"
    );

    // A server that never asked is called without turns: its first question, with two calls
    // open, has no one owner. It is refused to the server, saying why (nobody is asked, and
    // nobody's "decline" made up); and the calls after it take turns, the one open before
    // waited for too, so the next question is ann's.
    let fresh_log = dir.path().join("fresh.log");
    let _fresh = hostile(&bus, "fresh", "ask", &fresh_log);
    served(&ann, "fresh", "ask", &fresh_log).await;
    let hanging = {
        let bob = bob.clone();
        tokio::spawn(async move {
            bob.call(
                &FullName::parse("fresh_hang").unwrap(),
                &json!({}),
                Duration::from_secs(2),
            )
            .await
        })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    let refused = call(&ann, "fresh_ask", json!({})).await;
    assert!(!refused.needs_input(), "{refused:?}");
    let said = refused.text_content();
    assert!(
        said.starts_with("you chose nothing: ") && said.contains("asked nobody"),
        "{said}"
    );
    let asked = call(&ann, "fresh_ask", json!({})).await;
    assert!(asked.needs_input(), "{asked:?}");
    assert!(hanging.is_finished(), "ann's call was made beside bob's");
}

/// Issue 46: a question reaches the call that asked it. server-everything (a server before
/// 2026-07-28, on stdio) asks in the middle of `trigger-elicitation-request`; a person whose
/// client cannot answer is told so at once and leaves nothing that turns the next person's
/// question into a refusal nobody gave; two people asking at once each get their own
/// question and their own answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_question_reaches_the_call_that_asked_it() {
    let dir = tempfile::tempdir().unwrap();
    let people: Vec<(&str, &[&str])> = vec![
        ("ann", &["mesh.everything.>"]),
        ("bob", &["mesh.everything.>"]),
        ("cid", &["mesh.everything.>"]),
    ];
    let bus = Bus::accounts(&["catalog", "everything"], &people).await;
    let _catalog = bus.serve_catalog().await;
    let log = dir.path().join("everything.log");
    let _everything = bridge(&bus, "everything", &["node", &everything()], &log);
    let ann = bus.client_as(Some("ann")).await;
    served(&ann, "everything", "trigger_elicitation_request", &log).await;
    let home = tempfile::tempdir().unwrap();
    // `mesh call` of the tool as `who`, answering the name up front (or with nothing to
    // answer with: no terminal, no `--answer`).
    let asking = |who: &'static str, name: Option<&'static str>| {
        let mut cmd = crate::cli::command(home.path());
        cmd.args(bus.flags(who))
            .args(["call", "everything_trigger_elicitation_request"]);
        if let Some(name) = name {
            cmd.args(["--answer", &format!("question.name={name}")]);
        }
        async move {
            let out = tokio::time::timeout(HANG, cmd.output())
                .await
                .expect("mesh call hung")
                .unwrap();
            let said = format!(
                "{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
            (out.status.code(), said)
        }
    };

    // cid's client cannot ask: it says so, at once.
    let (code, said) = asking("cid", None).await;
    assert_eq!(code, Some(6), "{said}");
    // ann, right after: her question, her answer.
    let (code, said) = asking("ann", Some("Ann")).await;
    assert_eq!(code, Some(0), "{said}");
    assert!(said.contains("- Name: Ann"), "{said}");
    assert!(!said.contains("declined"), "{said}");
    // ann and bob at once: each their own.
    let ((ann_code, ann_said), (bob_code, bob_said)) =
        tokio::join!(asking("ann", Some("Ann")), asking("bob", Some("Bob")));
    assert_eq!(ann_code, Some(0), "{ann_said}");
    assert_eq!(bob_code, Some(0), "{bob_said}");
    assert!(
        ann_said.contains("- Name: Ann") && !ann_said.contains("Bob"),
        "{ann_said}"
    );
    assert!(
        bob_said.contains("- Name: Bob") && !bob_said.contains("Ann"),
        "{bob_said}"
    );
    // And through the mesh's client, two at once, each answering their own question.
    let bob = bus.client_as(Some("bob")).await;
    let answering = |client: Client, name: &'static str| async move {
        let tool = FullName::parse("everything_trigger_elicitation_request").unwrap();
        let asked = client.call(&tool, &json!({}), GENEROUS).await.unwrap();
        assert!(asked.needs_input(), "{asked:?}");
        let answer = json!({
            "requestState": asked.request_state.unwrap(),
            "inputResponses": {"question": {"action": "accept", "content": {"name": name}}},
        });
        client.call(&tool, &answer, GENEROUS).await.unwrap()
    };
    let (a, b) = tokio::join!(answering(ann.clone(), "Ann"), answering(bob.clone(), "Bob"));
    assert!(a.text_content().contains("- Name: Ann"), "{a:?}");
    assert!(b.text_content().contains("- Name: Bob"), "{b:?}");
}

/// `--per-person`: each caller's calls go to a server process of their own, started on their
/// first call; at most `--max-processes` at once (the least recently used idle one makes
/// room), each stopped after `--idle` unused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn per_person_servers_are_each_callers_own_bounded_and_stopped_when_idle() {
    let dir = tempfile::tempdir().unwrap();
    let people: Vec<(&str, &[&str])> = vec![
        ("ann", &["mesh.mine.>"]),
        ("bob", &["mesh.mine.>"]),
        ("cat", &["mesh.mine.>"]),
    ];
    let bus = Bus::accounts(&["catalog", "mine"], &people).await;
    let _catalog = bus.serve_catalog().await;
    let log = dir.path().join("mine.log");
    let markers = dir.path().to_str().unwrap().to_owned();
    let py = python();
    let flags = ["--per-person", "--max-processes", "2", "--idle", "10s"].map(std::ffi::OsStr::new);
    let _bridge = bridge_with(
        &bus,
        "mine",
        &flags,
        &[],
        &[&py, TEST_SERVER, &markers],
        &log,
    );
    let [ann, bob, cat] = [
        bus.client_as(Some("ann")).await,
        bus.client_as(Some("bob")).await,
        bus.client_as(Some("cat")).await,
    ];
    served(&ann, "mine", "pid", &log).await;
    let pid_of = |r: ToolResult| -> i32 { r.text_content().trim().parse().unwrap() };
    let a = pid_of(call(&ann, "mine_pid", json!({})).await);
    assert_eq!(
        a,
        pid_of(call(&ann, "mine_pid", json!({})).await),
        "ann's, again"
    );
    let b = pid_of(call(&bob, "mine_pid", json!({})).await);
    assert_ne!(a, b, "bob's is not ann's");
    let r = call(&bob, "mine_whoami", json!({})).await;
    assert!(
        r.text_content().contains("bob@PEOPLE"),
        "{}",
        r.text_content()
    );
    // A third caller past the bound of two: ann's (the least recently used) makes room.
    let c = pid_of(call(&cat, "mine_pid", json!({})).await);
    assert!(c != a && c != b);
    let gone = |pid: i32| async move {
        for _ in 0..600 {
            if !crate::bus::alive(pid) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        panic!("process {pid} still runs");
    };
    gone(a).await;
    // Made room for, not idle: bob's, used after ann's, still runs.
    assert!(crate::bus::alive(b), "bob's process stopped with ann's");
    // Unused for the idle time, the others stop too.
    gone(b).await;
    gone(c).await;
    // And a caller's next call starts theirs again.
    let again = pid_of(call(&ann, "mine_pid", json!({})).await);
    assert!(crate::bus::alive(again));
}

/// `--credential-helper`: each caller's own server is started with the credential a helper
/// gives for them (and started again with a fresh one when it expires); a helper that fails
/// is a tool error that says nothing of what it printed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_callers_server_gets_the_credential_a_helper_gives_for_them() {
    let dir = tempfile::tempdir().unwrap();
    let people: Vec<(&str, &[&str])> = vec![
        ("ann", &["mesh.mine.>"]),
        ("bob", &["mesh.mine.>"]),
        ("cat", &["mesh.mine.>"]),
    ];
    let bus = Bus::accounts(&["catalog", "mine"], &people).await;
    let _catalog = bus.serve_catalog().await;
    let log = dir.path().join("mine.log");
    let helper = dir.path().join("helper");
    std::fs::write(
        &helper,
        format!(
            "#!/bin/sh\nexec {} {}/tests/py/credential_helper.py \"$@\"\n",
            python(),
            env!("CARGO_MANIFEST_DIR")
        ),
    )
    .unwrap();
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&helper, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let markers = dir.path().to_str().unwrap().to_owned();
    let py = python();
    let flags = [
        "--per-person".as_ref(),
        "--credential-helper".as_ref(),
        helper.as_os_str(),
    ];
    let env = [("HELPER_DIR", dir.path().as_os_str())];
    let _bridge = bridge_with(
        &bus,
        "mine",
        &flags,
        &env,
        &[&py, TEST_SERVER, &markers],
        &log,
    );
    let [ann, bob, cat] = [
        bus.client_as(Some("ann")).await,
        bus.client_as(Some("bob")).await,
        bus.client_as(Some("cat")).await,
    ];
    served(&ann, "mine", "token", &log).await;
    let token = |c: &Client| {
        let c = c.clone();
        async move { call(&c, "mine_token", json!({})).await.text_content() }
    };
    let first = token(&ann).await;
    assert_eq!(first, "token-for-ann@PEOPLE-1");
    assert_eq!(token(&bob).await, "token-for-bob@PEOPLE-2");
    assert_eq!(token(&ann).await, first, "held until it expires");
    // Expired (five seconds): a fresh one, in a server started with it.
    tokio::time::sleep(Duration::from_millis(5500)).await;
    assert_eq!(token(&ann).await, "token-for-ann@PEOPLE-3");
    // A helper that fails for cat: cat's call says so, and nothing of what it printed.
    let r = call(&cat, "mine_token", json!({})).await;
    assert!(r.is_error, "{r:?}");
    assert!(
        r.text_content().contains("credential helper failed"),
        "{r:?}"
    );
    assert!(!r.text_content().contains("secret"), "{r:?}");
    assert!(
        !std::fs::read_to_string(&log)
            .unwrap()
            .contains("token-for-")
    );
}

/// The official reference servers people run most — memory and filesystem (npm), git
/// (PyPI) — each a module the same way, listed under subject-safe names and called.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_reference_servers_memory_filesystem_and_git_are_modules_too() {
    let dir = tempfile::tempdir().unwrap();
    let people: Vec<(&str, &[&str])> =
        vec![("ann", &["mesh.memory.>", "mesh.files.>", "mesh.git.>"])];
    let bus = Bus::accounts(&["catalog", "memory", "files", "git"], &people).await;
    let _catalog = bus.serve_catalog().await;
    let npm = |server: &str| {
        format!(
            "{}/@modelcontextprotocol/{server}/dist/index.js",
            node_path()
        )
    };
    // memory keeps its graph in the file MEMORY_FILE_PATH names.
    let memory_file = format!(
        "MEMORY_FILE_PATH={}",
        dir.path().join("memory.jsonl").display()
    );
    let memory_js = npm("server-memory");
    let _memory = bridge(
        &bus,
        "memory",
        &["env", &memory_file, "node", &memory_js],
        &dir.path().join("memory.log"),
    );
    let shared = dir.path().join("shared");
    std::fs::create_dir_all(&shared).unwrap();
    std::fs::write(shared.join("hello.txt"), "hello from the mesh").unwrap();
    let shared = shared.canonicalize().unwrap();
    let files_js = npm("server-filesystem");
    let _files = bridge(
        &bus,
        "files",
        &["node", &files_js, shared.to_str().unwrap()],
        &dir.path().join("files.log"),
    );
    let repo = dir.path().join("repo");
    std::fs::create_dir_all(&repo).unwrap();
    for args in [
        &["init", "-q", "-b", "main"][..],
        &[
            "-c",
            "user.name=t",
            "-c",
            "user.email=t@x",
            "commit",
            "-q",
            "--allow-empty",
            "-m",
            "first",
        ],
    ] {
        let ok = std::process::Command::new("git")
            .args(args)
            .current_dir(&repo)
            .status()
            .unwrap();
        assert!(ok.success());
    }
    let py = python();
    let _git = bridge(
        &bus,
        "git",
        &[
            &py,
            "-m",
            "mcp_server_git",
            "--repository",
            repo.to_str().unwrap(),
        ],
        &dir.path().join("git.log"),
    );
    let ann = bus.client_as(Some("ann")).await;

    served(
        &ann,
        "memory",
        "create_entities",
        &dir.path().join("memory.log"),
    )
    .await;
    let r = call(
        &ann,
        "memory_create_entities",
        json!({"entities": [{"name": "ann", "entityType": "person", "observations": ["likes maps"]}]}),
    )
    .await;
    assert!(!r.is_error, "{r:?}");
    let r = call(&ann, "memory_read_graph", json!({})).await;
    assert!(r.text_content().contains("likes maps"), "{r:?}");

    served(
        &ann,
        "files",
        "list_directory",
        &dir.path().join("files.log"),
    )
    .await;
    let r = call(
        &ann,
        "files_list_directory",
        json!({"path": shared.to_str().unwrap()}),
    )
    .await;
    assert!(r.text_content().contains("hello.txt"), "{r:?}");
    let r = call(
        &ann,
        "files_read_text_file",
        json!({"path": shared.join("hello.txt").to_str().unwrap()}),
    )
    .await;
    assert!(r.text_content().contains("hello from the mesh"), "{r:?}");
    // Outside the directory it was given: the server's own refusal, a tool error.
    let r = call(&ann, "files_read_text_file", json!({"path": "/etc/passwd"})).await;
    assert!(r.is_error, "{r:?}");

    served(&ann, "git", "git_log", &dir.path().join("git.log")).await;
    let r = call(
        &ann,
        "git_git_log",
        json!({"repo_path": repo.to_str().unwrap()}),
    )
    .await;
    assert!(r.text_content().contains("first"), "{r:?}");
}

/// Results of any size from servers nobody here wrote: a 10 MB file from server-filesystem
/// (a line of its stdout past what rmcp reads) reaches its caller whole, through the
/// runtime's claim, as any module's large result does; an answer past what the bridge reads
/// from a server (a hostile server's line of 129 MiB) is a tool error naming its size, at
/// once, never a call that waits out its deadline, and costs the bridge no more than its bound.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_large_result_arrives_whole_and_one_past_the_bound_fails_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let people: Vec<(&str, &[&str])> = vec![("ann", &["mesh.files.>", "mesh.huge.>"])];
    let bus = Bus::accounts(&["catalog", "files", "huge"], &people).await;
    let _catalog = bus.serve_catalog().await;
    let shared = dir.path().join("shared");
    std::fs::create_dir_all(&shared).unwrap();
    let shared = shared.canonicalize().unwrap();
    // 10 MB of text with what JSON escapes (quotes, backslashes, tabs, newlines) and more
    // than one byte a character: the line is larger than the file.
    let mut text = String::with_capacity(10_500_000);
    let mut n = 0u64;
    while text.len() < 10_000_000 {
        text.push_str(&format!("line {n}: \"quoted\" \\ back\tslash, é ü → ✓\n"));
        n += 1;
    }
    let big = shared.join("big.txt");
    std::fs::write(&big, &text).unwrap();
    let files_js = format!(
        "{}/@modelcontextprotocol/server-filesystem/dist/index.js",
        node_path()
    );
    let log = |m: &str| dir.path().join(format!("{m}.log"));
    let _files = bridge(
        &bus,
        "files",
        &["node", &files_js, shared.to_str().unwrap()],
        &log("files"),
    );
    let huge = hostile(&bus, "huge", "huge", &log("huge"));
    let ann = bus.client_as(Some("ann")).await;

    served(&ann, "files", "read_text_file", &log("files")).await;
    let read = ann
        .call(
            &FullName::parse("files_read_text_file").unwrap(),
            &json!({"path": big.to_str().unwrap()}),
            HANG,
        )
        .await
        .unwrap_or_else(|e| {
            panic!(
                "{e}; the bridge's log:\n{}",
                std::fs::read_to_string(log("files")).unwrap_or_default()
            )
        });
    assert!(!read.is_error, "{}", &read.text_content()[..200]);
    let got = read.text_content();
    assert_eq!(got.len(), text.len());
    assert!(got == text, "the text differs");
    // The command line too.
    let home = tempfile::tempdir().unwrap();
    let out = crate::cli::command(home.path())
        .args(bus.flags("ann"))
        .args(["call", "files_read_text_file", "--timeout", "60s"])
        .arg(format!("path={}", big.display()))
        .output()
        .await
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(out.stdout.len(), text.len() + 1);
    assert!(out.stdout.starts_with(text.as_bytes()));

    // Past the bound: a tool error saying how large, well within the call's deadline.
    served(&ann, "huge", "huge", &log("huge")).await;
    let r = ann
        .call(&FullName::parse("huge_huge").unwrap(), &json!({}), HANG)
        .await
        .unwrap();
    assert!(r.is_error, "{r:?}");
    let said = r.text_content();
    assert!(
        said.contains("was not read") && said.contains("129.0 MiB") && said.contains("128.0 MiB"),
        "{said}"
    );
    // The server goes on, and the bridge never held more than its bound of the line.
    let r = call(&ann, "huge_echo", json!({})).await;
    assert_eq!(r.text_content(), "echo");
    let peak = peak_mib(huge.id().unwrap());
    assert!(peak < 512, "the bridge peaked at {peak} MiB");
}

/// A server that cannot start says why in the bridge's own warning, without `-v`: the last
/// lines it wrote on stderr ("No module named mcp_server_time"), not only "it did not answer
/// initialize: connection closed".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_cannot_start_says_why() {
    let bus = Bus::accounts(&["broken"], &[]).await;
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("bridge.log");
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_mesh"));
    cmd.args(["run", "--mcp", "broken"])
        .args(bus.flags("broken"))
        .args(["--layout", "accounts", "--"])
        .args([
            "python3",
            "-c",
            "import sys; sys.stderr.write('Traceback\\nModuleNotFoundError: No module named mcp_server_time\\n'); sys.exit(1)",
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .kill_on_drop(true);
    let _bridge = cmd.spawn().unwrap();
    let said = tokio::time::timeout(HANG, async {
        loop {
            let text = std::fs::read_to_string(&log).unwrap_or_default();
            if text.contains("did not start") {
                return text;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
    .await
    .expect("the bridge says the server did not start");
    assert!(
        said.contains(
            "it said on stderr: Traceback | ModuleNotFoundError: No module named mcp_server_time"
        ),
        "{said}"
    );
}

/// A command that is not there is said once and the bridge ends (exit 2), instead of
/// "trying again in 6.4s" for ever.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_command_that_is_not_there_ends_the_bridge_with_why() {
    let bus = Bus::accounts(&["gone"], &[]).await;
    let out = tokio::time::timeout(
        HANG,
        Command::new(env!("CARGO_BIN_EXE_mesh"))
            .args(["run", "--mcp", "gone"])
            .args(bus.flags("gone"))
            .args(["--layout", "accounts", "--", "no-such-mcp-server-anywhere"])
            .stdin(Stdio::null())
            .kill_on_drop(true)
            .output(),
    )
    .await
    .expect("the bridge ends")
    .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("cannot run \"no-such-mcp-server-anywhere\"") && !err.contains("trying again"),
        "{err}"
    );
}
