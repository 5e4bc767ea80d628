//! Progress of a call in flight, as an attacker sees it: header blocks naming odd progress
//! subjects (duplicates, case variants, huge, wildcards, spaces, bytes that are not UTF-8), a
//! person whose credential may not listen for reports, a module that reports more than the
//! wire format allows or never answers, and tools that keep their reporter, panic, or are
//! dropped in a drain. None of it may break a call, leak a task, or let a report through
//! where it does not belong; and the last report sent before the reply reaches the caller.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use futures_util::{FutureExt, StreamExt};
use serde_json::json;
use tokio::sync::watch;

use mesh_core::actor::Layout;
use mesh_core::client::Client;
use mesh_core::runtime::{Call, Module, Reporter, ServeOptions, Tool};
use mesh_core::subjects::progress::MAX_MESSAGE_CHARS;
use mesh_core::subjects::{FullName, HEADER_PROGRESS, Progress, ToolResult};

use crate::bus::{Bus, GENEROUS};
use crate::raw::{Raw, Reply};

/// Only catches a hang: no healthy step here comes near it.
const HANG: Duration = Duration::from_secs(60);

/// Reports from a thread of the tool's own, growing every few milliseconds, until `stop`.
fn keep_reporting(reporter: Reporter, stop: Arc<AtomicBool>) {
    std::thread::spawn(move || {
        let mut i = 0.0;
        while !stop.load(Ordering::Relaxed) {
            i += 1.0;
            reporter.report(i, None, Some("still going"));
            std::thread::sleep(Duration::from_millis(2));
        }
    });
}

fn said(c: &Call) -> ToolResult {
    ToolResult::text(if c.progress.is_wanted() {
        "wanted"
    } else {
        "unwanted"
    })
}

/// Module `prog`: `once` reports that it is done and returns at once; `keep` hands its
/// reporter to a thread that reports forever and returns; `panic` reports and panics; `hang`
/// hands its reporter on and never returns. Threads stop when `stop` is set.
fn prog(stop: Arc<AtomicBool>) -> Module {
    let schema = json!({"type": "object"});
    let keep_stop = stop.clone();
    Module::new("prog", "1.0.0", "reports, as tools may")
        .tool(Tool::new(
            "once",
            "reports it is done, then answers",
            schema.clone(),
            |c: Call| async move {
                c.progress.report(1.0, Some(1.0), Some("done"));
                said(&c)
            },
        ))
        .tool(Tool::new(
            "keep",
            "keeps its reporter after answering",
            schema.clone(),
            move |c: Call| {
                keep_reporting(c.progress.clone(), keep_stop.clone());
                async move { said(&c) }
            },
        ))
        .tool(Tool::new(
            "panic",
            "reports, then panics",
            schema.clone(),
            |c: Call| async move {
                c.progress.report(1.0, None, None);
                if c.progress.is_wanted() {
                    panic!("on purpose");
                }
                said(&c)
            },
        ))
        .tool(Tool::new(
            "hang",
            "reports from a thread and never answers",
            schema,
            move |c: Call| {
                keep_reporting(c.progress.clone(), stop.clone());
                std::future::pending()
            },
        ))
}

/// Calls `tool` watching its progress; the call's outcome and every report seen, in order.
async fn watched(
    client: &Client,
    tool: &str,
    deadline: Duration,
) -> (Result<ToolResult, String>, Vec<Progress>) {
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
    let result = tokio::time::timeout(
        HANG,
        client.call_watched(&tool, &json!({}), deadline, &reports),
    )
    .await
    .expect("the call hung")
    .map_err(|e| e.to_string());
    drop(reports);
    (result, recorder.await.unwrap())
}

/// Whatever is already waiting on `sub`, without waiting for more.
fn pending(sub: &mut async_nats::Subscriber) -> Vec<async_nats::Message> {
    let mut all = Vec::new();
    while let Some(Some(m)) = sub.next().now_or_never() {
        all.push(m);
    }
    all
}

/// Nothing more arrives on `sub` once everything sent so far has been delivered and a while
/// has passed in which a task still reporting would have sent many times.
async fn nothing_more(client: &Client, sub: &mut async_nats::Subscriber, what: &str) {
    crate::bus::round_trip(client.nats()).await;
    tokio::time::sleep(Duration::from_millis(400)).await;
    crate::bus::round_trip(client.nats()).await;
    let late = pending(sub);
    assert!(
        late.is_empty(),
        "{what}: {} report(s) came after the reply, the last {:?}",
        late.len(),
        late.last()
            .map(|m| String::from_utf8_lossy(&m.payload).into_owned())
    );
}

/// A person's request with a header block of any bytes: every one is answered — as a call
/// without reports unless it names the person's own subject under the module, as a refusal
/// when the block does not parse — the module serves on, and no report goes where another
/// person listens.
#[tokio::test]
async fn odd_progress_headers_never_break_a_call() {
    let stop = Arc::new(AtomicBool::new(false));
    let bus = Bus::accounts(&["prog"], &[("ann", &["mesh.prog.>"]), ("bob", &[])]).await;
    let _prog = bus.serve(prog(stop.clone())).await;
    let bob = bus.client_as(Some("bob")).await;
    let mut bobs = bob.nats().subscribe("mesh-progress.*.bob.>").await.unwrap();
    crate::bus::round_trip(bob.nats()).await;

    let own = "mesh-progress.prog.ann.k1";
    let his = "mesh-progress.prog.bob.k1";
    let huge = format!("mesh-progress.prog.ann.{}", "k".repeat(60_000));
    let blocks: Vec<(Vec<u8>, &str)> = vec![
        (
            format!("NATS/1.0\r\n{HEADER_PROGRESS}: {own}\r\n\r\n").into(),
            "wanted",
        ),
        // Duplicates: the first one counts, and only if it is the person's own.
        (
            format!("NATS/1.0\r\n{HEADER_PROGRESS}: {his}\r\n{HEADER_PROGRESS}: {own}\r\n\r\n")
                .into(),
            "unwanted",
        ),
        (
            format!("NATS/1.0\r\n{HEADER_PROGRESS}: {own}\r\n{HEADER_PROGRESS}: {his}\r\n\r\n")
                .into(),
            "wanted",
        ),
        // Another letter case is another header: none asked for.
        (
            format!("NATS/1.0\r\nmesh-progress: {own}\r\nMESH-PROGRESS: {his}\r\n\r\n").into(),
            "unwanted",
        ),
        (
            format!("NATS/1.0\r\n{HEADER_PROGRESS}: {huge}\r\n\r\n").into(),
            "unwanted",
        ),
        (
            format!("NATS/1.0\r\n{HEADER_PROGRESS}: {his}\r\n\r\n").into(),
            "unwanted",
        ),
        (
            format!("NATS/1.0\r\n{HEADER_PROGRESS}: mesh-progress.prog.ann.>\r\n\r\n").into(),
            "unwanted",
        ),
        (
            format!("NATS/1.0\r\n{HEADER_PROGRESS}: mesh-progress.prog.*.k1\r\n\r\n").into(),
            "unwanted",
        ),
        (
            format!("NATS/1.0\r\n{HEADER_PROGRESS}: mesh-progress.>\r\n\r\n").into(),
            "unwanted",
        ),
        (
            format!("NATS/1.0\r\n{HEADER_PROGRESS}: mesh-progress.prog.ann.k 1\r\n\r\n").into(),
            "unwanted",
        ),
        (
            format!("NATS/1.0\r\n{HEADER_PROGRESS}: mesh-progress.prog.ann bob.k1\r\n\r\n").into(),
            "unwanted",
        ),
        (
            format!("NATS/1.0\r\n{HEADER_PROGRESS}: mesh-progress.prog.ann.k1.x\r\n\r\n").into(),
            "unwanted",
        ),
        (
            format!("NATS/1.0\r\n{HEADER_PROGRESS}: mesh-progress.echo.ann.k1\r\n\r\n").into(),
            "unwanted",
        ),
        (
            format!("NATS/1.0\r\n{HEADER_PROGRESS}:\r\n\r\n").into(),
            "unwanted",
        ),
        (
            format!("NATS/1.0\r\n{HEADER_PROGRESS}: _INBOX.ann.x\r\n\r\n").into(),
            "unwanted",
        ),
    ];
    let mut ann = Raw::connect(&bus.url(), "ann", "pw-ann").await;
    for (block, expected) in &blocks {
        let shown = String::from_utf8_lossy(&block[..block.len().min(120)]).into_owned();
        let reply = ann.request("mesh.prog.once", block, b"{}").await;
        let Reply::Message { payload, .. } = &reply else {
            panic!("{shown:?} was not answered: {reply:?}");
        };
        let result: ToolResult = serde_json::from_slice(payload).unwrap();
        assert_eq!(result.text_content(), *expected, "{shown:?}");
    }
    // Bytes that are not UTF-8 in the value: a block that does not parse names nobody, so
    // the call is refused, saying why; the module is still there for the next one.
    let mut bytes = format!("NATS/1.0\r\n{HEADER_PROGRESS}: mesh-progress.prog.ann.").into_bytes();
    bytes.extend_from_slice(b"\xff\xfe\r\n\r\n");
    let r = ann.request("mesh.prog.once", &bytes, b"{}").await.json();
    assert_eq!(r["isError"], true, "{r}");
    let r = ann
        .request(
            "mesh.prog.once",
            format!("NATS/1.0\r\n{HEADER_PROGRESS}: {own}\r\n\r\n").as_bytes(),
            b"{}",
        )
        .await
        .json();
    assert_eq!(r["content"][0]["text"], "wanted", "{r}");

    let heard = pending(&mut bobs);
    crate::bus::round_trip(bob.nats()).await;
    assert!(
        heard.is_empty() && pending(&mut bobs).is_empty(),
        "ann's calls reported where bob listens: {:?}",
        heard
            .iter()
            .map(|m| m.subject.to_string())
            .collect::<Vec<_>>()
    );
    stop.store(true, Ordering::Relaxed);
}

/// A credential that may not listen for reports (a configuration from before reports):
/// the watched call is answered all the same, and so is another call in flight on the
/// same connection — the refused subscription is not the inbox's.
#[tokio::test]
async fn a_refused_progress_subscription_ends_no_call() {
    let stop = Arc::new(AtomicBool::new(false));
    let dir = tempfile::tempdir().unwrap();
    let conf = mesh_bus::layout::accounts(
        -1,
        &dir.path().join("js"),
        &[crate::bus::module("prog")],
        &[mesh_bus::layout::Person {
            user: "ann".into(),
            password: "pw-ann".into(),
            may_call: vec!["mesh.prog.>".into()],
        }],
    );
    let without = conf.replace(r#", "mesh-progress.*.ann.>""#, "");
    assert_ne!(without, conf, "the grant to listen was not found to remove");
    let bus = Bus::from_config(&without, Layout::Accounts).await;
    let _prog = bus.serve(prog(stop.clone())).await;
    let ann = bus.client_as(Some("ann")).await;

    for _ in 0..3 {
        let other = {
            let ann = ann.clone();
            tokio::spawn(async move {
                ann.call(&FullName::parse("prog_once").unwrap(), &json!({}), GENEROUS)
                    .await
            })
        };
        let (result, seen) = watched(&ann, "prog_once", GENEROUS).await;
        assert_eq!(result.unwrap().text_content(), "wanted");
        assert!(seen.is_empty(), "{seen:?}");
        let other = other.await.unwrap().expect("the other call was ended");
        assert_eq!(other.text_content(), "unwanted");
    }
    stop.store(true, Ordering::Relaxed);
}

/// A module sends its caller a report whose message is far past the 512 characters a report
/// may carry (within the 4 KiB a report may be): the caller reads at most 512 of them, as
/// the format says, and never hands more to a terminal or an MCP client.
#[tokio::test]
async fn a_report_message_reaches_the_caller_cut_to_its_bound() {
    let bus = Bus::accounts(&["evil"], &[("ann", &["mesh.evil.>"])]).await;
    let evil = bus.client_as(Some("evil")).await.nats().clone();
    let mut calls = evil.subscribe("mesh.evil.long").await.unwrap();
    crate::bus::module_round_trip(&evil).await;
    let serving = tokio::spawn(async move {
        let call = calls.next().await.unwrap();
        let to = call
            .headers
            .as_ref()
            .and_then(|h| h.get(HEADER_PROGRESS))
            .expect("the caller named its progress subject")
            .to_string();
        let report = json!({"progress": 1, "message": "x".repeat(4000)}).to_string();
        assert!(report.len() <= 4096);
        evil.publish(to, report.into()).await.unwrap();
        evil.flush().await.unwrap();
        // Time for the report to be read before the reply ends the call.
        tokio::time::sleep(Duration::from_millis(300)).await;
        let done = serde_json::to_vec(&ToolResult::text("done")).unwrap();
        evil.publish(call.reply.unwrap(), done.into())
            .await
            .unwrap();
        evil.flush().await.unwrap();
    });
    let ann = bus.client_as(Some("ann")).await;
    let (result, seen) = watched(&ann, "evil_long", GENEROUS).await;
    serving.await.unwrap();
    assert_eq!(result.unwrap().text_content(), "done");
    for p in &seen {
        let chars = p.message.as_deref().map_or(0, |m| m.chars().count());
        assert!(
            chars <= MAX_MESSAGE_CHARS,
            "a report's message of {chars} characters reached the caller"
        );
    }
}

/// A module that reports, growing, as fast as it can and never answers: the call still ends
/// at its deadline, not later, and the caller keeps only the newest report.
#[tokio::test]
async fn endless_reports_do_not_hold_a_call_past_its_deadline() {
    let bus = Bus::accounts(&["evil"], &[("ann", &["mesh.evil.>"])]).await;
    let evil = bus.client_as(Some("evil")).await.nats().clone();
    let mut calls = evil.subscribe("mesh.evil.endless").await.unwrap();
    crate::bus::module_round_trip(&evil).await;
    let sent = Arc::new(AtomicU64::new(0));
    let serving = tokio::spawn({
        let sent = sent.clone();
        async move {
            let call = calls.next().await.unwrap();
            let to = call
                .headers
                .as_ref()
                .and_then(|h| h.get(HEADER_PROGRESS))
                .unwrap()
                .to_string();
            let mut i = 0u64;
            loop {
                i += 1;
                let report = json!({"progress": i, "message": "m".repeat(400)}).to_string();
                if evil.publish(to.clone(), report.into()).await.is_err() {
                    return;
                }
                sent.store(i, Ordering::Relaxed);
                if i.is_multiple_of(256) {
                    tokio::task::yield_now().await;
                }
            }
        }
    });
    let ann = bus.client_as(Some("ann")).await;
    let started = std::time::Instant::now();
    let (result, seen) = watched(&ann, "evil_endless", Duration::from_secs(2)).await;
    let took = started.elapsed();
    serving.abort();
    assert!(result.is_err(), "{result:?}");
    assert!(
        took < Duration::from_secs(15),
        "a two-second call took {took:?} under a flood of reports"
    );
    assert!(sent.load(Ordering::Relaxed) > 0, "no report was sent");
    for pair in seen.windows(2) {
        assert!(pair[1].progress > pair[0].progress);
    }
}

/// A tool's last report goes just before its reply; a caller that stops listening at the
/// reply must still have it (it often says "done"): every one of many calls sees it.
#[tokio::test]
async fn the_last_report_before_the_reply_reaches_the_caller() {
    let stop = Arc::new(AtomicBool::new(false));
    let bus = Bus::accounts(&["prog"], &[("ann", &["mesh.prog.>"])]).await;
    let _prog = bus.serve(prog(stop.clone())).await;
    let ann = bus.client_as(Some("ann")).await;
    // Another connection of Ann's hears what the module sent, to tell a report never sent
    // from one the caller passed over.
    let witness = bus.client_as(Some("ann")).await;
    let mut heard = witness
        .nats()
        .subscribe("mesh-progress.prog.ann.>")
        .await
        .unwrap();
    crate::bus::round_trip(witness.nats()).await;
    let mut missed = 0;
    for _ in 0..30 {
        let (result, seen) = watched(&ann, "prog_once", GENEROUS).await;
        assert_eq!(result.unwrap().text_content(), "wanted");
        match seen.last() {
            Some(p) => assert_eq!(p.message.as_deref(), Some("done"), "{seen:?}"),
            None => missed += 1,
        }
    }
    stop.store(true, Ordering::Relaxed);
    crate::bus::round_trip(witness.nats()).await;
    let sent = pending(&mut heard).len();
    assert_eq!(sent, 30, "the module did not send every call's report");
    assert_eq!(
        missed, 0,
        "{missed} of 30 calls lost the report the module sent before the reply"
    );
}

/// Sends a request naming `subject` for reports on `ann`'s own connection (which listens
/// there): the reply, and the reports that came before it.
async fn call_naming(
    ann: &Client,
    tool: &str,
    subject: &str,
    sub: &mut async_nats::Subscriber,
) -> (async_nats::Message, Vec<async_nats::Message>) {
    let mut headers = async_nats::HeaderMap::new();
    headers.insert(HEADER_PROGRESS, subject);
    let reply = tokio::time::timeout(
        HANG,
        ann.nats()
            .request_with_headers(tool.to_owned(), headers, "{}".into()),
    )
    .await
    .expect("the call hung")
    .expect("the call is answered");
    // On one connection the reports sent before the reply were delivered before it.
    (reply, pending(sub))
}

/// Tools that keep their reporter past the reply, or panic: no report follows the reply,
/// and the runtime's sending tasks end with their calls (none is left per call). A call in
/// flight that a drain drops stops reporting too, however long its tool reports.
#[tokio::test]
async fn the_sending_task_ends_with_its_call() {
    let stop = Arc::new(AtomicBool::new(false));
    let bus = Bus::accounts(&["prog"], &[("ann", &["mesh.prog.>"])]).await;
    let mut prog_running = bus
        .serve_with(
            prog(stop.clone()),
            ServeOptions {
                drain_timeout: Duration::from_millis(300),
                ..Default::default()
            },
        )
        .await;
    let ann = bus.client_as(Some("ann")).await;
    let mut sub = ann
        .nats()
        .subscribe("mesh-progress.prog.ann.>")
        .await
        .unwrap();
    crate::bus::round_trip(ann.nats()).await;

    // Warm up, then count the runtime's tasks.
    let _ = call_naming(&ann, "mesh.prog.once", "mesh-progress.prog.ann.w", &mut sub).await;
    let metrics = tokio::runtime::Handle::current().metrics();
    let before = metrics.num_alive_tasks();
    for i in 0..20 {
        let subject = format!("mesh-progress.prog.ann.keep{i}");
        let (reply, _) = call_naming(&ann, "mesh.prog.keep", &subject, &mut sub).await;
        let result: ToolResult = serde_json::from_slice(&reply.payload).unwrap();
        assert_eq!(result.text_content(), "wanted");
        let subject = format!("mesh-progress.prog.ann.panic{i}");
        let (reply, _) = call_naming(&ann, "mesh.prog.panic", &subject, &mut sub).await;
        let result: ToolResult = serde_json::from_slice(&reply.payload).unwrap();
        assert!(result.is_error, "{}", result.text_content());
    }
    nothing_more(&ann, &mut sub, "a tool that kept its reporter").await;
    let after = metrics.num_alive_tasks();
    assert!(
        after <= before + 2,
        "{} tasks alive after 40 calls, {before} before",
        after
    );

    // A call the drain gives up on: its tool reports on, but nothing leaves for it once the
    // module has stopped.
    let hanging = {
        let ann = ann.clone();
        tokio::spawn(async move {
            let mut headers = async_nats::HeaderMap::new();
            headers.insert(HEADER_PROGRESS, "mesh-progress.prog.ann.hang");
            ann.nats()
                .request_with_headers("mesh.prog.hang".to_owned(), headers, "{}".into())
                .await
        })
    };
    // It has begun once its reports come.
    let first = tokio::time::timeout(HANG, sub.next())
        .await
        .expect("the hanging call never reported")
        .unwrap();
    assert_eq!(first.subject.as_str(), "mesh-progress.prog.ann.hang");
    prog_running.begin_stop();
    tokio::time::timeout(HANG, prog_running.join())
        .await
        .expect("the module did not stop");
    // The dropped call's sending task may still send the newest report as it ends (it is
    // not awaited when its call is dropped); after that, nothing.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let _ = pending(&mut sub);
    nothing_more(&ann, &mut sub, "a call dropped in the drain").await;
    hanging.abort();
    stop.store(true, Ordering::Relaxed);
}
