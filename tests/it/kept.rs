//! `mesh call` keeps a module's schemas from one command to the next: the module's `tools`
//! verb asked once per change of its tools, a call typed by tools the module no longer has
//! refused unrun (`Mesh-Tools`, 412) and typed again (a round carrying the person's answers
//! made again as it was), and a module that does not say it checks (raw NATS as the module)
//! asked every time.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use futures_util::StreamExt;
use serde_json::{Value, json};

use mesh_core::runtime::{Call, Module, Tool};
use mesh_core::subjects::{HEADER_TOOLS, ToolResult};

use crate::bus::{Bus, GENEROUS};
use crate::cli::mesh;

/// Module `shape` whose one tool `n` takes `n` of the JSON type `kind` and says what it got.
fn shape(kind: &str) -> Module {
    Module::new("shape", "1.0.0", "says what it was given").tool(Tool::new(
        "n",
        "says n as JSON",
        json!({"type": "object", "properties": {"n": {"type": kind}}, "required": ["n"]}),
        |c: Call| async move { ToolResult::text(c.args["n"].to_string()) },
    ))
}

/// Module `module` whose one tool `n` counts its calls and answers `answer()`; the count.
fn counting(module: &str, answer: fn() -> ToolResult) -> (Module, Arc<AtomicUsize>) {
    let ran = Arc::new(AtomicUsize::new(0));
    let counted = ran.clone();
    let module = Module::new(module, "1.0.0", "counts").tool(Tool::new(
        "n",
        "counts its calls",
        json!({"type": "object"}),
        move |_c: Call| {
            counted.fetch_add(1, Ordering::SeqCst);
            async move { answer() }
        },
    ));
    (module, ran)
}

/// `mesh call <args>` as ann, with `home` as the person's home (and so their kept tools).
async fn call_as_ann<const N: usize>(
    bus: &Bus,
    home: &std::path::Path,
    args: [&str; N],
) -> (i32, String, String) {
    let flags = bus.flags("ann");
    let mut all: Vec<&str> = flags.iter().map(String::as_str).collect();
    all.push("call");
    all.extend(args);
    mesh(home, &all).await
}

/// How often `endpoint` of the running `module` was asked, and its last error.
async fn asked(bus: &Bus, module: &str, endpoint: &str) -> (u64, String) {
    let ann = bus.client_as(Some("ann")).await;
    let reply = ann
        .nats()
        .request(format!("$SRV.STATS.{module}"), "".into())
        .await
        .unwrap();
    let stats: Value = serde_json::from_slice(&reply.payload).unwrap();
    let e = stats["endpoints"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["name"] == endpoint)
        .unwrap_or_else(|| panic!("no endpoint {endpoint}: {stats}"));
    (
        e["num_requests"].as_u64().unwrap(),
        e["last_error"].as_str().unwrap_or_default().to_owned(),
    )
}

/// The schema is asked once and kept; a module back with other tools refuses the call typed
/// by the old ones without running it, and the call is read, typed and made again by the new.
#[tokio::test]
async fn a_modules_tools_are_asked_once_per_change() {
    let bus = Bus::accounts(&["catalog", "shape"], &[("ann", &["mesh.shape.>"])]).await;
    let _catalog = bus.serve_catalog().await;
    let home = tempfile::tempdir().unwrap();
    let call = |arg: &'static str| call_as_ann(&bus, home.path(), ["shape_n", arg]);

    let v1 = bus.serve(shape("string")).await;
    for _ in 0..3 {
        let (code, out, err) = call("n=5").await;
        assert_eq!((code, out.as_str()), (0, "\"5\"\n"), "{err}");
    }
    assert_eq!(asked(&bus, "shape", "tools").await.0, 1, "asked once");
    v1.stop().await;

    // Back with n a whole number: the kept schema would send "5".
    let _v2 = bus.serve(shape("integer")).await;
    let (code, out, err) = call("n=5").await;
    assert_eq!((code, out.as_str()), (0, "5\n"), "{err}");
    assert_eq!(
        asked(&bus, "shape", "n").await,
        (2, "412:tools changed".to_owned()),
        "the call typed by the old tools was refused, then made again"
    );
    // Made again naming no digest (another instance may still have other tools), the call
    // confirmed nothing: the next command asks once more, and the one after keeps.
    for n in ["n=6", "n=7"] {
        let (code, out, err) = call(n).await;
        assert_eq!((code, out), (0, format!("{}\n", &n[2..])), "{err}");
    }
    assert_eq!(
        asked(&bus, "shape", "tools").await.0,
        2,
        "the new tools asked twice, then kept"
    );

    // A kept listing changed on disk is not believed: it is asked again.
    let dir = home.path().join(".cache/mesh/tools");
    for entry in std::fs::read_dir(&dir).unwrap().flatten() {
        if entry.path().extension().is_some_and(|x| x == "json") {
            let text = std::fs::read_to_string(entry.path()).unwrap();
            std::fs::write(entry.path(), text.replace("integer", "string")).unwrap();
        }
    }
    let (code, out, err) = call("n=8").await;
    assert_eq!((code, out.as_str()), (0, "8\n"), "{err}");
    assert_eq!(asked(&bus, "shape", "tools").await.0, 3);
}

/// A call naming tools the module does not have is refused before its arguments are read,
/// whoever sends it (raw NATS, not the mesh's client): nothing runs, and the answer names
/// the kind. A call naming the module's own digest runs and hears it back.
#[tokio::test]
async fn a_call_typed_by_other_tools_runs_nothing() {
    let bus = Bus::accounts(&["catalog", "shape"], &[("ann", &["mesh.shape.>"])]).await;
    let (module, ran) = counting("shape", || ToolResult::text("ran"));
    let _shape = bus.serve(module).await;
    let ann = bus.client_as(Some("ann")).await;
    let listing = ann.listing_of("shape", GENEROUS).await.unwrap();
    let digest = mesh_core::subjects::tools_digest(&listing.tools);
    let send = |typed_by: String| {
        let nats = ann.nats().clone();
        async move {
            let mut headers = async_nats::HeaderMap::new();
            headers.insert(HEADER_TOOLS, typed_by.as_str());
            nats.request_with_headers("mesh.shape.n", headers, "{}".into())
                .await
                .unwrap()
        }
    };
    for other in ["0".repeat(32), "not a digest".into(), String::new()] {
        let reply = send(other.clone()).await;
        let result: ToolResult = serde_json::from_slice(&reply.payload).unwrap();
        assert!(result.refuses_tools(), "{other:?}: {result:?}");
        let headers = reply.headers.unwrap();
        assert_eq!(
            headers.get("Nats-Service-Error-Code").unwrap().as_str(),
            "412"
        );
        assert_eq!(headers.get(HEADER_TOOLS).unwrap().as_str(), digest);
    }
    assert_eq!(ran.load(Ordering::SeqCst), 0, "nothing ran");
    let reply = send(digest.clone()).await;
    let result: ToolResult = serde_json::from_slice(&reply.payload).unwrap();
    assert_eq!(result.text_content(), "ran");
    assert_eq!(
        reply.headers.unwrap().get(HEADER_TOOLS).unwrap().as_str(),
        digest
    );
    assert_eq!(ran.load(Ordering::SeqCst), 1);
}

/// A module that does not say it checks the tools a call was typed by (raw NATS, no
/// `Mesh-Tools` on its answers) is asked its tools before every call: nothing kept can type
/// a call by tools it may no longer have.
#[tokio::test]
async fn a_module_that_does_not_check_is_asked_every_time() {
    let bus = Bus::accounts(&["catalog", "plain"], &[("ann", &["mesh.plain.>"])]).await;
    let plain = bus.client_as(Some("plain")).await;
    let nats = plain.nats().clone();
    let mut tools = nats.subscribe("mesh.plain.tools").await.unwrap();
    let mut calls = nats.subscribe("mesh.plain.x").await.unwrap();
    let asked = Arc::new(AtomicUsize::new(0));
    let answering = {
        let (nats, asked) = (nats.clone(), asked.clone());
        tokio::spawn(async move {
            let listing = json!({"module": "plain", "version": "1.0.0", "description": "",
                "tools": [{"name": "x", "description": "", "inputSchema": {"type": "object",
                    "properties": {"a": {"type": "integer"}}}}]})
            .to_string();
            loop {
                tokio::select! {
                    Some(m) = tools.next() => {
                        asked.fetch_add(1, Ordering::SeqCst);
                        let _ = nats.publish(m.reply.unwrap(), listing.clone().into()).await;
                    }
                    Some(m) = calls.next() => {
                        let said = String::from_utf8_lossy(&m.payload).into_owned();
                        let ok = serde_json::to_vec(&ToolResult::text(said)).unwrap();
                        let _ = nats.publish(m.reply.unwrap(), ok.into()).await;
                    }
                    else => break,
                }
            }
        })
    };
    crate::bus::module_round_trip(&nats).await;
    let home = tempfile::tempdir().unwrap();
    for n in 1..=3 {
        let (code, out, err) = call_as_ann(&bus, home.path(), ["plain_x", "a=5"]).await;
        assert_eq!((code, out.as_str()), (0, "{\"a\":5}\n"), "{err}");
        assert_eq!(asked.load(Ordering::SeqCst), n);
    }
    answering.abort();
}

/// Arguments the kept schema refuses are not refused on its word: the tools are read again
/// and the call checked by them (a module back with a looser schema is called, not blocked
/// by what an earlier command kept).
#[tokio::test]
async fn a_kept_schema_does_not_refuse_what_the_module_takes_now() {
    let bus = Bus::accounts(&["catalog", "shape"], &[("ann", &["mesh.shape.>"])]).await;
    let home = tempfile::tempdir().unwrap();
    let call = |arg: &'static str| call_as_ann(&bus, home.path(), ["shape_n", arg]);
    let v1 = bus.serve(shape("integer")).await;
    let (code, out, err) = call("n=5").await;
    assert_eq!((code, out.as_str()), (0, "5\n"), "{err}");
    v1.stop().await;
    let _v2 = bus.serve(shape("string")).await;
    let (code, out, err) = call("n=abc").await;
    assert_eq!((code, out.as_str()), (0, "\"abc\"\n"), "{err}");
}

/// A tool's own result that says "tools changed" in its body (it ran) is not made again:
/// only the runtime's refusal, in headers no handler writes, is.
#[tokio::test]
async fn a_result_that_only_says_tools_changed_is_not_run_twice() {
    let bus = Bus::accounts(&["catalog", "liar"], &[("ann", &["mesh.liar.>"])]).await;
    // It runs, then says its tools changed.
    let (module, ran) = counting("liar", || ToolResult::tools_changed("liar_n"));
    let _liar = bus.serve(module).await;
    let home = tempfile::tempdir().unwrap();
    for n in 1..=2 {
        let (code, _, err) = call_as_ann(&bus, home.path(), ["liar_n"]).await;
        assert_eq!(code, 1, "a tool error: {err}");
        assert_eq!(ran.load(Ordering::SeqCst), n, "run once per command");
    }
}

/// Nor on a later round: a tool that asks, then, answered, runs and says "tools changed" in
/// its body, runs that round once.
#[tokio::test]
async fn an_answered_round_that_only_says_tools_changed_is_not_run_twice() {
    let bus = Bus::accounts(&["catalog", "liar"], &[("ann", &["mesh.liar.>"])]).await;
    let answered = Arc::new(AtomicUsize::new(0));
    let counted = answered.clone();
    let liar = Module::new("liar", "1.0.0", "asks, then lies").tool(Tool::new(
        "n",
        "asks which, then says its tools changed",
        json!({"type": "object"}),
        move |c: Call| {
            let counted = counted.clone();
            async move {
                if c.continuation.is_some() {
                    counted.fetch_add(1, Ordering::SeqCst);
                    return ToolResult::tools_changed("liar_n");
                }
                let form = json!({"type": "object", "properties": {"which": {"type": "string"}}});
                let mut requests = serde_json::Map::new();
                requests.insert("which".into(), ToolResult::elicitation("which?", form));
                ToolResult::input_required(requests, "state".into())
            }
        },
    ));
    let _liar = bus.serve(liar).await;
    let home = tempfile::tempdir().unwrap();
    // Twice: the second command types by the tools the first one kept (a typed call).
    for n in 1..=2 {
        let (code, _, err) =
            call_as_ann(&bus, home.path(), ["liar_n", "--answer", "which=blue"]).await;
        assert_eq!(code, 1, "a tool error: {err}");
        assert_eq!(
            answered.load(Ordering::SeqCst),
            n,
            "the answered round run once"
        );
    }
}

/// Module `shift`, tool `pick`: asks `which`, then says the answer; its first rounds counted
/// in `first`. `extra` names more tools (another version's). With `hold`, a first round says
/// so and waits to be let go before it asks.
fn shift(
    extra: &[&str],
    first: Arc<AtomicUsize>,
    hold: Option<(tokio::sync::mpsc::Sender<()>, Arc<tokio::sync::Notify>)>,
) -> Module {
    let mut module = Module::new("shift", "1.0.0", "asks which").tool(Tool::new(
        "pick",
        "asks which, then says it",
        json!({"type": "object"}),
        move |c: Call| {
            let (first, hold) = (first.clone(), hold.clone());
            async move {
                let answer = c
                    .continuation
                    .as_ref()
                    .and_then(|c| c.input_responses.as_ref())
                    .and_then(|r| r.get("which"))
                    .cloned();
                if let Some(answer) = answer {
                    return ToolResult::text(format!("picked {answer}"));
                }
                first.fetch_add(1, Ordering::SeqCst);
                if let Some((held, go)) = hold {
                    let _ = held.send(()).await;
                    go.notified().await;
                }
                let form = json!({"type": "object", "properties": {"which": {"type": "string"}}});
                let mut requests = serde_json::Map::new();
                requests.insert("which".into(), ToolResult::elicitation("which?", form));
                ToolResult::input_required(requests, "state".into())
            }
        },
    ));
    for name in extra.iter().copied() {
        module = module.tool(Tool::new(
            name,
            "another version's tool",
            json!({"type": "object"}),
            |_c: Call| async { ToolResult::text("extra") },
        ));
    }
    module
}

/// The module's tools change while the person answers its question (an instance with other
/// tools takes over): the round carrying the answers, refused unrun (412), is made again
/// naming no tools, and the person is not asked again from the start.
#[tokio::test]
async fn tools_changed_while_the_person_answers_do_not_start_over() {
    let bus = Bus::accounts(&["catalog", "shift"], &[("ann", &["mesh.shift.>"])]).await;
    let _catalog = bus.serve_catalog().await;
    let home = tempfile::tempdir().unwrap();
    let first = Arc::new(AtomicUsize::new(0));
    let (held, mut holding) = tokio::sync::mpsc::channel(1);
    let go = Arc::new(tokio::sync::Notify::new());
    let mut v1 = bus
        .serve(shift(&[], first.clone(), Some((held, go.clone()))))
        .await;
    let call = call_as_ann(&bus, home.path(), ["shift_pick", "--answer", "which=blue"]);
    let swap = async {
        // v1 holds the first round: v2 (other tools) comes, v1 leaves, then v1 asks.
        holding.recv().await.expect("the first round reached v1");
        let v2 = bus.serve(shift(&["more"], first.clone(), None)).await;
        v1.begin_stop();
        tokio::time::sleep(std::time::Duration::from_millis(500)).await;
        go.notify_one();
        v1.join().await;
        v2
    };
    let ((code, out, err), _v2) = tokio::join!(call, swap);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("picked") && out.contains("blue"), "{out}");
    assert_eq!(
        first.load(Ordering::SeqCst),
        1,
        "asked again from the start"
    );
    assert_eq!(
        asked(&bus, "shift", "pick").await,
        (2, "412:tools changed".to_owned()),
        "the answered round was refused by v2, then made again"
    );
}
