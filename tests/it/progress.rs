//! Progress of a call in flight: a tool's reports reach the person who called it — through
//! the client, `mesh call` on a terminal, and the MCP relay as `notifications/progress` to
//! the official Python SDK — and nobody else; a hostile person cannot listen in or point a
//! module's reports at someone else, and a hostile module can neither forge another module's
//! reports nor flood a caller with reports it does not read.

use std::time::Duration;

use futures_util::StreamExt;
use serde_json::{Value, json};
use tokio::sync::watch;

use mesh_core::client::Client;
use mesh_core::runtime::{Call, Module, Tool};
use mesh_core::subjects::{FullName, HEADER_PROGRESS, Progress, ToolResult};

use crate::bus::{Bus, python};
use crate::raw::{Raw, Reply};

const DEADLINE: Duration = Duration::from_secs(20);
const PROGRESS_PY: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/py/progress.py");
const MESH: &str = env!("CARGO_BIN_EXE_mesh");

/// A tool that counts to `n`, reporting each step (and, each time, a step back, which must
/// never reach anyone), and says whether its caller listened.
fn counter() -> Module {
    Module::new("slow", "1.0.0", "counts, saying how far it has got").tool(Tool::new(
        "count",
        "counts to n, a step every gap_ms",
        json!({"type": "object", "properties": {
            "n": {"type": "integer"}, "gap_ms": {"type": "integer"}
        }}),
        |c: Call| async move {
            let n = c.args.get("n").and_then(Value::as_u64).unwrap_or(5);
            let gap = c.args.get("gap_ms").and_then(Value::as_u64).unwrap_or(150);
            for i in 1..=n {
                c.progress
                    .report(i as f64, Some(n as f64), Some(&format!("step {i}")));
                tokio::time::sleep(Duration::from_millis(gap)).await;
                c.progress.report(i as f64 - 0.5, Some(n as f64), None);
            }
            ToolResult::text(if c.progress.is_wanted() {
                "wanted"
            } else {
                "unwanted"
            })
        },
    ))
}

/// Calls `tool` watching its progress; the result's text and every report seen, in order.
async fn watched(client: &Client, tool: &str, args: Value) -> (ToolResult, Vec<Progress>) {
    let (reports, mut seen) = watch::channel(None);
    let recorder = tokio::spawn(async move {
        let mut all = Vec::new();
        while seen.changed().await.is_ok() {
            if let Some(p) = seen.borrow_and_update().clone() {
                all.push(p);
            }
        }
        all
    });
    let tool = FullName::parse(tool).unwrap();
    let result = client
        .call_watched(&tool, &args, DEADLINE, &reports)
        .await
        .expect("the call is answered");
    drop(reports);
    (result, recorder.await.unwrap())
}

fn assert_growing(seen: &[Progress], last: f64) {
    assert!(!seen.is_empty(), "no report reached the caller");
    for pair in seen.windows(2) {
        assert!(pair[1].progress > pair[0].progress, "{seen:?}");
    }
    assert_eq!(seen.last().unwrap().progress, last, "{seen:?}");
    assert!(seen.iter().all(|p| p.progress.fract() == 0.0), "{seen:?}");
}

/// In the accounts layout a person hears each step, the last included, only growing; a call
/// that does not ask gets none and the tool knows it.
#[tokio::test]
async fn a_person_hears_the_steps_of_their_own_call() {
    let bus = Bus::accounts(&["slow"], &[("ann", &["mesh.slow.>"])]).await;
    let _slow = bus.serve(counter()).await;
    let ann = bus.client_as(Some("ann")).await;
    let (result, seen) = watched(&ann, "slow_count", json!({"n": 5})).await;
    assert_eq!(result.text_content(), "wanted");
    assert_growing(&seen, 5.0);
    assert!(seen.iter().all(|p| p.total == Some(5.0)), "{seen:?}");
    assert_eq!(seen.last().unwrap().message.as_deref(), Some("step 5"));

    let plain = ann
        .call(
            &FullName::parse("slow_count").unwrap(),
            &json!({"n": 1}),
            DEADLINE,
        )
        .await
        .unwrap();
    assert_eq!(plain.text_content(), "unwanted");
}

/// On a bus without accounts (a laptop), reports come all the same.
#[tokio::test]
async fn reports_come_on_a_single_account_bus() {
    let bus = Bus::single().await;
    let _slow = bus.serve(counter()).await;
    let (result, seen) = watched(&bus.client().await, "slow_count", json!({"n": 3})).await;
    assert_eq!(result.text_content(), "wanted");
    assert_growing(&seen, 3.0);
}

/// Nothing is pending for `sub` once the server has answered a round trip on its connection.
async fn nothing_came(client: &Client, sub: &mut async_nats::Subscriber, what: &str) {
    crate::bus::round_trip(client.nats()).await;
    let next = tokio::time::timeout(Duration::from_millis(200), sub.next()).await;
    assert!(next.is_err(), "{what}: {:?}", next.unwrap());
}

/// Bob may not listen to Ann's reports, nor make a module send its reports of his call where
/// Ann listens; a module may not report under another module's name.
#[tokio::test]
async fn nobody_else_hears_or_forges_a_persons_reports() {
    let bus = Bus::accounts(
        &["slow", "evil"],
        &[("ann", &["mesh.slow.>"]), ("bob", &["mesh.slow.>"])],
    )
    .await;
    let _slow = bus.serve(counter()).await;

    let mut bob = Raw::connect(&bus.url(), "bob", "pw-bob").await;
    for theirs in [
        "mesh-progress.slow.ann.k1",
        "mesh-progress.slow.ann.>",
        "mesh-progress.*.ann.>",
        "mesh-progress.>",
        "mesh-progress.slow.*.k1",
    ] {
        let refused = bob.subscribe(theirs).await;
        assert!(
            refused
                .as_deref()
                .is_some_and(|e| e.contains("Permissions Violation for Subscription")),
            "bob listened on {theirs}: {refused:?}"
        );
    }
    assert_eq!(bob.subscribe("mesh-progress.*.bob.>").await, None);

    // Ann listens where her next call's reports would go; Bob names that subject in his call.
    let ann = bus.client_as(Some("ann")).await;
    let hers = "mesh-progress.slow.ann.k1";
    let mut listening = ann.nats().subscribe(hers).await.unwrap();
    crate::bus::round_trip(ann.nats()).await;
    let header = format!("NATS/1.0\r\n{HEADER_PROGRESS}: {hers}\r\n\r\n");
    let reply = bob
        .request(
            "mesh.slow.count",
            header.as_bytes(),
            br#"{"n":2,"gap_ms":20}"#,
        )
        .await;
    let Reply::Message { payload, .. } = &reply else {
        panic!("bob's call was not answered: {reply:?}");
    };
    let result: ToolResult = serde_json::from_slice(payload).unwrap();
    assert_eq!(
        result.text_content(),
        "unwanted",
        "the module took ann's subject"
    );
    nothing_came(&ann, &mut listening, "a report of bob's call reached ann").await;

    // A module with its own credentials cannot report as another module, to anyone.
    let mut evil = Raw::connect(&bus.url(), "evil", "pw-evil").await;
    let refused = evil.publish(hers, br#"{"progress":99}"#).await;
    assert!(
        refused
            .as_deref()
            .is_some_and(|e| e.contains("Permissions Violation for Publish")),
        "evil reported as slow: {refused:?}"
    );
    nothing_came(&ann, &mut listening, "evil's forged report reached ann").await;
    // Under its own name it may report, but only to someone listening there.
    assert_eq!(
        evil.publish("mesh-progress.evil.ann.k1", br#"{"progress":99}"#)
            .await,
        None
    );
    nothing_came(&ann, &mut listening, "evil's report crossed modules").await;
}

/// A module that floods its caller's progress subject with what is not a report — too long,
/// not JSON, going backwards, numbers no one can show: the caller passes every one of them
/// over, sees only the real, growing reports, the last included, and gets the result.
#[tokio::test]
async fn a_flood_of_bad_reports_is_passed_over() {
    let bus = Bus::accounts(&["evil"], &[("ann", &["mesh.evil.>"])]).await;
    let evil = bus.client_as(Some("evil")).await.nats().clone();
    let mut calls = evil.subscribe("mesh.evil.flood").await.unwrap();
    crate::bus::module_round_trip(&evil).await;
    let serving = tokio::spawn(async move {
        let call = calls.next().await.unwrap();
        let to = call
            .headers
            .as_ref()
            .and_then(|h| h.get(HEADER_PROGRESS))
            .expect("the caller named its progress subject")
            .to_string();
        assert!(to.starts_with("mesh-progress.evil.ann."), "{to}");
        let long = format!(r#"{{"progress":50,"message":"{}"}}"#, "x".repeat(5000));
        let junk: [&[u8]; 8] = [
            b"not json",
            br#"{"progress":-1}"#,
            br#"{"progress":"2"}"#,
            br#"{"progress":2,"extra":true}"#,
            br#"{"progress":1e999}"#,
            long.as_bytes(),
            b"",
            b"\xff\xfe",
        ];
        for round in 0..500u32 {
            for j in junk {
                evil.publish(to.clone(), j.to_vec().into()).await.unwrap();
            }
            // Real reports, every tenth round, with one going backwards after each.
            if round % 100 == 0 {
                let p = f64::from(round / 100 + 1);
                let report = json!({"progress": p, "total": 5});
                evil.publish(to.clone(), report.to_string().into())
                    .await
                    .unwrap();
                let back = json!({"progress": p - 0.5});
                evil.publish(to.clone(), back.to_string().into())
                    .await
                    .unwrap();
            }
        }
        evil.flush().await.unwrap();
        let done = serde_json::to_vec(&ToolResult::text("flooded")).unwrap();
        evil.publish(call.reply.unwrap(), done.into())
            .await
            .unwrap();
        evil.flush().await.unwrap();
    });
    let ann = bus.client_as(Some("ann")).await;
    let (result, seen) = watched(&ann, "evil_flood", json!({})).await;
    serving.await.unwrap();
    assert_eq!(result.text_content(), "flooded");
    assert_growing(&seen, 5.0);
    assert!(seen.iter().all(|p| p.message.is_none()), "{seen:?}");
}

/// The MCP relay forwards a tool's reports as `notifications/progress` to a client that sent
/// a `progressToken` — the official Python SDK, on both protocol generations — growing, and
/// none after the result.
#[tokio::test]
async fn the_relay_forwards_reports_to_an_mcp_client() {
    let bus = Bus::accounts(&["catalog", "slow"], &[("ann", &["mesh.slow.>"])]).await;
    let _catalog = bus.serve_catalog().await;
    let _slow = bus.serve(counter()).await;
    let ann: Vec<String> = bus.flags("ann");
    let (_console, url) = crate::mcp::console_with(&ann, &["--timeout", "20s"]).await;
    for (mode, target) in [
        ("legacy", MESH),
        ("2026-07-28", MESH),
        ("legacy", url.as_str()),
        ("2026-07-28", url.as_str()),
    ] {
        let out = crate::bus::json_of(
            tokio::process::Command::new(python())
                .env("MESH_CONSOLE_TOKEN", crate::mcp::TOKEN)
                .arg(PROGRESS_PY)
                .args([mode, target, "slow_count", r#"{"n": 4}"#])
                .args(&ann),
        )
        .await;
        let mode = format!("{mode} on {target}");
        assert_eq!(out["isError"], false, "{mode}: {out}");
        assert_eq!(out["text"], "wanted", "{mode}: {out}");
        let seen: Vec<Progress> = serde_json::from_value(out["progress"].clone()).unwrap();
        assert_growing(&seen, 4.0);
        assert!(seen.iter().all(|p| p.total == Some(4.0)), "{mode}: {out}");
        assert_eq!(
            out["after_result"], 0,
            "{mode}: a report came after the result: {out}"
        );
    }
}

/// `mesh call` on a terminal draws the tool's reports as a bar on stderr and clears it before
/// the result; through a pipe it draws nothing and the result is the same.
#[tokio::test]
async fn mesh_call_shows_a_bar_on_a_terminal_only() {
    let bus = Bus::accounts(&["slow"], &[("ann", &["mesh.slow.>"])]).await;
    let _slow = bus.serve(counter()).await;
    let home = tempfile::tempdir().unwrap();
    let mut args = vec!["call".to_owned()];
    args.extend(bus.flags("ann"));
    args.extend(["slow_count", "n=4"].map(String::from));
    let on_terminal = {
        let (home, args) = (home.path().to_owned(), args.clone());
        tokio::task::spawn_blocking(move || {
            let mut cmd = crate::cli::std_command(&home);
            cmd.args(&args);
            crate::pty::run(&mut cmd, 80, 24)
        })
        .await
        .unwrap()
    };
    assert_eq!(on_terminal.code, 0, "{}", on_terminal.output);
    let shown = &on_terminal.output;
    assert!(shown.contains("slow_count ["), "no bar: {shown:?}");
    assert!(
        shown.contains("100%"),
        "the bar never reached the end: {shown:?}"
    );
    assert!(shown.contains("step 4"), "{shown:?}");
    assert!(
        shown.trim_end().ends_with("wanted") && !shown.contains("unwanted"),
        "{shown:?}"
    );

    let piped = crate::cli::command(home.path())
        .args(&args)
        .output()
        .await
        .unwrap();
    let (out, err) = (
        String::from_utf8_lossy(&piped.stdout),
        String::from_utf8_lossy(&piped.stderr),
    );
    assert!(piped.status.success(), "{err}");
    assert_eq!(out.trim(), "unwanted", "a pipe asks for no reports");
    assert!(!err.contains('%') && !err.contains('\u{1b}'), "{err:?}");
}

/// Through a console (`mesh call --console`, an MCP client of `mesh serve`), the reports come
/// as `notifications/progress` and are drawn the same way.
#[tokio::test]
async fn mesh_call_through_a_console_shows_the_bar_too() {
    let bus = Bus::accounts(&["catalog", "slow"], &[("ann", &["mesh.slow.>"])]).await;
    let _catalog = bus.serve_catalog().await;
    let _slow = bus.serve(counter()).await;
    let ann: Vec<String> = bus.flags("ann");
    let (_console, url) = crate::mcp::console_as(&ann).await;
    let slow_url = url.clone();
    let home = tempfile::tempdir().unwrap();
    let shown = {
        let home = home.path().to_owned();
        tokio::task::spawn_blocking(move || {
            let mut cmd = crate::cli::std_command(&home);
            cmd.env("MESH_CONSOLE_TOKEN", crate::mcp::TOKEN).args([
                "call",
                "--console",
                &url,
                "slow_count",
                "n=3",
                "gap_ms=100",
            ]);
            crate::pty::run(&mut cmd, 80, 24)
        })
        .await
        .unwrap()
    };
    assert_eq!(shown.code, 0, "{}", shown.output);
    assert!(
        shown.output.contains("slow_count ["),
        "no bar: {:?}",
        shown.output
    );
    assert!(shown.output.contains("step "), "{:?}", shown.output);
    assert!(
        shown.output.trim_end().ends_with("wanted") && !shown.output.contains("unwanted"),
        "{:?}",
        shown.output
    );
    // A call that outlasts its deadline while listening: said slow, at the deadline.
    let slow = {
        let home = home.path().to_owned();
        let url = slow_url;
        tokio::task::spawn_blocking(move || {
            let mut cmd = crate::cli::std_command(&home);
            cmd.env("MESH_CONSOLE_TOKEN", crate::mcp::TOKEN).args([
                "call",
                "--console",
                &url,
                "slow_count",
                "n=20",
                "gap_ms=100",
                "--timeout",
                "400ms",
            ]);
            crate::pty::run(&mut cmd, 80, 24)
        })
        .await
        .unwrap()
    };
    assert_eq!(slow.code, 5, "{}", slow.output);
}
