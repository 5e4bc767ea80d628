//! A call its caller gives up on reaches its module (`Mesh-Call`, `Mesh-Cancel`): the
//! handler's future is dropped at the deadline, on Ctrl-C at a terminal, and on a cancel from
//! the caller over raw NATS — never on a cancel from anyone else.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use mesh_core::client::Outcome;
use mesh_core::runtime::{Call, Module, Tool};
use mesh_core::subjects::{FullName, ToolResult};
use serde_json::json;

use crate::bus::{Bus, GENEROUS};
use crate::raw::Raw;

/// Whether the slow tool ran to its end, or was dropped before.
#[derive(Default)]
struct Ran {
    finished: AtomicBool,
    dropped: AtomicBool,
}

/// Sets `dropped` when the handler's future goes before it finished.
struct Watch(Arc<Ran>);

impl Drop for Watch {
    fn drop(&mut self) {
        if !self.0.finished.load(Ordering::SeqCst) {
            self.0.dropped.store(true, Ordering::SeqCst);
        }
    }
}

/// `slow_wait`: sleeps `ms`, recording in `ran` whether it got to the end.
fn slow(ran: Arc<Ran>) -> Module {
    Module::new("slow", "1.0.0", "waits").tool(Tool::new(
        "wait",
        "sleeps ms milliseconds",
        json!({"type": "object", "properties": {"ms": {"type": "integer"}}}),
        move |call: Call| {
            let ran = ran.clone();
            async move {
                let watch = Watch(ran.clone());
                let ms = call.args["ms"].as_u64().unwrap_or(30_000);
                tokio::time::sleep(Duration::from_millis(ms)).await;
                ran.finished.store(true, Ordering::SeqCst);
                drop(watch);
                ToolResult::text("woke")
            }
        },
    ))
}

async fn until(what: &str, check: impl Fn() -> bool) {
    for _ in 0..600 {
        if check() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("{what} never happened");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_given_up_at_its_deadline_is_dropped_by_its_module() {
    let bus = Bus::accounts(&["slow"], &[("ann", &["mesh.slow.>"])]).await;
    let ran = Arc::new(Ran::default());
    // Two instances: the cancel reaches whichever runs the call.
    let _slow = bus.serve(slow(ran.clone())).await;
    let _again = bus.serve(slow(ran.clone())).await;
    let ann = bus.client_as(Some("ann")).await;
    let e = ann
        .call(
            &FullName::parse("slow_wait").unwrap(),
            &json!({"ms": 30_000}),
            Duration::from_millis(300),
        )
        .await
        .unwrap_err();
    assert_eq!(e.outcome(), Outcome::Slow);
    until("the module dropping the call", || {
        ran.dropped.load(Ordering::SeqCst)
    })
    .await;
    assert!(!ran.finished.load(Ordering::SeqCst));

    // What the module counted, over both instances: the call, cancelled.
    let r = ann
        .call(
            &FullName::parse("slow_wait").unwrap(),
            &json!({"ms": 1}),
            GENEROUS,
        )
        .await
        .unwrap();
    assert_eq!(r.text_content(), "woke");
    let home = tempfile::tempdir().unwrap();
    let out = crate::cli::command(home.path())
        .args(bus.flags("ann"))
        .args(["tools", "--stats", "slow", "--json"])
        .output()
        .await
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stats: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let wait = &stats[0];
    assert_eq!(wait["tool"], "slow_wait", "{stats}");
    assert_eq!(wait["instances"], 2, "{stats}");
    assert_eq!(wait["cancelled"], 1, "{stats}");
    assert_eq!(wait["calls"], 1, "the answered one: {stats}");
}

/// Raw protocol: a cancel counts only from the caller nats-server stamped on the call.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_the_caller_can_cancel_its_call() {
    let bus = Bus::accounts(
        &["slow"],
        &[("ann", &["mesh.slow.>"]), ("bob", &["mesh.slow.>"])],
    )
    .await;
    let ran = Arc::new(Ran::default());
    let _slow = bus.serve(slow(ran.clone())).await;
    let mut bob = Raw::connect(&bus.url(), "bob", "pw-bob").await;
    let ann = bus.client_as(Some("ann")).await;
    // ann's call names itself; bob sends its cancel, by id, as raw bytes.
    let call = tokio::spawn({
        let ann = ann.clone();
        async move {
            ann.nats()
                .request_with_headers(
                    "mesh.slow.wait",
                    {
                        let mut h = async_nats::HeaderMap::new();
                        h.insert("Mesh-Call", "the-id-of-anns-call");
                        h
                    },
                    br#"{"ms": 1500}"#.to_vec().into(),
                )
                .await
        }
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    let refused = bob
        .publish_with_headers(
            "mesh.slow.cancel",
            b"NATS/1.0\r\nMesh-Cancel: the-id-of-anns-call\r\n\r\n",
            b"",
        )
        .await;
    assert!(refused.is_none(), "bob may publish there: {refused:?}");
    let answered = tokio::time::timeout(GENEROUS, call)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert!(
        String::from_utf8_lossy(&answered.payload).contains("woke"),
        "bob's cancel did nothing"
    );
    assert!(ran.finished.load(Ordering::SeqCst) && !ran.dropped.load(Ordering::SeqCst));

    // ann's own, the same way: the call is dropped, and answered by nobody.
    let ran2 = Arc::new(Ran::default());
    let bus2 = Bus::accounts(&["slow"], &[("ann", &["mesh.slow.>"])]).await;
    let _slow2 = bus2.serve(slow(ran2.clone())).await;
    let mut ann_raw = Raw::connect(&bus2.url(), "ann", "pw-ann").await;
    let ann2 = bus2.client_as(Some("ann")).await;
    let waiting = tokio::spawn(async move {
        let mut h = async_nats::HeaderMap::new();
        h.insert("Mesh-Call", "mine");
        tokio::time::timeout(
            Duration::from_secs(3),
            ann2.nats().request_with_headers(
                "mesh.slow.wait",
                h,
                br#"{"ms": 30000}"#.to_vec().into(),
            ),
        )
        .await
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    let refused = ann_raw
        .publish_with_headers(
            "mesh.slow.cancel",
            b"NATS/1.0\r\nMesh-Cancel: mine\r\n\r\n",
            b"",
        )
        .await;
    assert!(refused.is_none(), "{refused:?}");
    until("ann's cancel dropping her call", || {
        ran2.dropped.load(Ordering::SeqCst)
    })
    .await;
    assert!(
        waiting.await.unwrap().is_err(),
        "nothing answers a cancelled call"
    );
}

/// Ctrl-C at a terminal (SIGINT to `mesh call`'s process group): exit 130, and the tool
/// stops at the module.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ctrl_c_at_the_terminal_stops_the_tool() {
    let bus = Bus::accounts(&["slow"], &[("ann", &["mesh.slow.>"])]).await;
    let ran = Arc::new(Ran::default());
    let _slow = bus.serve(slow(ran.clone())).await;
    let home = tempfile::tempdir().unwrap();
    let flags = bus.flags("ann");
    let home_path = home.path().to_owned();
    let t = tokio::task::spawn_blocking(move || {
        let mut cmd = crate::cli::std_command(&home_path);
        cmd.args(&flags)
            .args(["call", "slow_wait", "ms=60000", "--timeout", "60s"]);
        crate::pty::run_typing_after(&mut cmd, 80, 24, "\x03", Duration::from_secs(2))
    })
    .await
    .unwrap();
    assert_eq!(t.code, 130, "{}", t.output);
    assert!(t.output.contains("interrupted"), "{}", t.output);
    until("the module dropping the call", || {
        ran.dropped.load(Ordering::SeqCst)
    })
    .await;
    assert!(!ran.finished.load(Ordering::SeqCst));
}

/// An MCP client's `notifications/cancelled` through `mesh mcp` (the official Python SDK,
/// both protocol generations): the tool stops at the module.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_mcp_clients_cancellation_stops_the_tool() {
    for mode in ["legacy", "2026-07-28"] {
        let bus = Bus::accounts(&["catalog", "slow"], &[("ann", &["mesh.slow.>"])]).await;
        let _catalog = bus.serve_catalog().await;
        let ran = Arc::new(Ran::default());
        let _slow = bus.serve(slow(ran.clone())).await;
        let out = crate::bus::json_of(
            tokio::process::Command::new(crate::bus::python())
                .arg(concat!(
                    env!("CARGO_MANIFEST_DIR"),
                    "/tests/py/cancel_call.py"
                ))
                .arg(mode)
                .arg(env!("CARGO_BIN_EXE_mesh"))
                .arg("slow_wait")
                .arg(r#"{"ms": 60000}"#)
                .args(bus.flags("ann")),
        )
        .await;
        assert_eq!(out["cancelled"], true);
        until(&format!("{mode}: the module dropping the call"), || {
            ran.dropped.load(Ordering::SeqCst)
        })
        .await;
        assert!(!ran.finished.load(Ordering::SeqCst));
    }
}

/// An MCP client over HTTP (the TypeScript SDK through the console) that aborts its call:
/// the tool stops at the module.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_console_clients_abort_stops_the_tool() {
    let bus = Bus::accounts(&["catalog", "slow"], &[("ann", &["mesh.slow.>"])]).await;
    let _catalog = bus.serve_catalog().await;
    let ran = Arc::new(Ran::default());
    let _slow = bus.serve(slow(ran.clone())).await;
    let (_console, url) = crate::mcp::console_with(&bus.flags("ann"), &["--timeout", "60s"]).await;
    let out = crate::bus::json_of(
        tokio::process::Command::new("node")
            .env("NODE_PATH", crate::bus::node_path())
            .env("MESH_CONSOLE_TOKEN", crate::mcp::TOKEN)
            .arg(concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/tests/js/cancel_call.cjs"
            ))
            .arg(&url)
            .arg("slow_wait")
            .arg(r#"{"ms": 60000}"#),
    )
    .await;
    assert_eq!(out["aborted"], true);
    until("the module dropping the call", || {
        ran.dropped.load(Ordering::SeqCst)
    })
    .await;
    assert!(!ran.finished.load(Ordering::SeqCst));
}
