//! Tasks (MCP's tasks extension, SEP-2663) through the mesh: the conformance suite's tasks
//! scenarios against the console, a task's state kept by the catalogue (read from a second
//! relay process after the first is gone), and the attackers: another person reading or
//! cancelling a task by its id, a module writing a task it was not given, a person taking
//! another's task by offering its id with a call of their own, a flood of creations.

use std::time::Duration;

use serde_json::{Value, json};
use tokio::process::Command;

use crate::bus::Bus;
use crate::mcp::{TOKEN, console_with};
use mesh_core::client::{Client, TaskCall, TaskError};
use mesh_core::runtime::{Call, Module, Tool};
use mesh_core::subjects::task::{self, Status, TaskSupport, Write, WriteReply};
use mesh_core::subjects::{FullName, ToolResult};

/// What waits for a task to end gives up after this: a hang guard, not a measure.
const HANG: Duration = Duration::from_secs(60);

/// The conformance suite's checks of one scenario: (id, status, message).
async fn scenario(url: &str, name: &str) -> Vec<(String, String, String)> {
    let (node, suite) = crate::conformance::next::suite();
    let results = tempfile::tempdir().unwrap();
    let run = Command::new(node)
        .env(
            "NODE_OPTIONS",
            format!("--import {}", crate::conformance::next::BEARER),
        )
        .env("MESH_BEARER", TOKEN)
        .arg(suite)
        .args(["server", "--url", url, "--scenario", name])
        .args(["--output-dir", results.path().to_str().unwrap()])
        .kill_on_drop(true)
        .output();
    let out = tokio::time::timeout(Duration::from_secs(300), run)
        .await
        .expect("the suite ends")
        .unwrap();
    let mut checks = Vec::new();
    for entry in std::fs::read_dir(results.path())
        .into_iter()
        .flatten()
        .flatten()
    {
        let Ok(text) = std::fs::read_to_string(entry.path().join("checks.json")) else {
            continue;
        };
        let read: Vec<Value> = serde_json::from_str(&text).unwrap_or_default();
        for c in read {
            checks.push((
                c["id"].as_str().unwrap_or("?").to_owned(),
                c["status"].as_str().unwrap_or("?").to_owned(),
                c["errorMessage"].as_str().unwrap_or("").to_owned(),
            ));
        }
    }
    assert!(
        !checks.is_empty(),
        "scenario {name} wrote no checks:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    checks
}

/// Every tasks scenario passes against the console, with the suite's tools on the bus, but
/// for the checks of the suite's `greet`: a mesh tool's name is `<module>_<tool>`, and `greet`
/// names no module (tests/conformance-next-baseline.yml lists them, with why).
#[tokio::test]
async fn the_conformance_suites_tasks_scenarios_pass_through_the_console() {
    let bus = Bus::single().await;
    let _catalog = bus.serve_catalog().await;
    let _test = bus.serve(mesh_conformance::module()).await;
    let mut _tasks = Vec::new();
    for m in mesh_conformance::task_modules() {
        _tasks.push(bus.serve(m).await);
    }
    let connect = ["--server".to_owned(), bus.url()];
    let (_console, url) = console_with(&connect, &["--timeout", "10s"]).await;
    let url = format!("{url}?token={TOKEN}");
    // Checks of the suite's `greet`, which no mesh tool can be named.
    let greet = [
        "tasks-sync-tool-call",
        "tasks-headers-tolerate-mcp-method-on-tools-call",
        "sep-2663-legacy-task-param-ignored",
        "tasks-result-type-complete-on-non-task-responses",
    ];
    let mut failed = Vec::new();
    for name in [
        "tasks-lifecycle",
        "tasks-capability-negotiation",
        "tasks-wire-fields",
        "tasks-request-state-removal",
        "tasks-mrtr-input",
        "tasks-request-headers",
        "tasks-dispatch-and-envelope",
        "tasks-required-task-error",
        "tasks-mrtr-composition",
    ] {
        for (id, status, why) in scenario(&url, name).await {
            if (status == "FAILURE" || status == "WARNING") && !greet.contains(&id.as_str()) {
                failed.push(format!("{name} {id} {status}: {why}"));
            }
        }
    }
    assert!(failed.is_empty(), "failed checks:\n{}", failed.join("\n"));
}

/// Module `work`: `slow` sleeps `ms` (a task when offered one), `quick` answers at once,
/// `fails` answers a tool error after a while, `report` says how far it got, `big` answers
/// `bytes` of text, `only` runs only as a task.
fn work() -> Module {
    let slow = Tool::new(
        "slow",
        "Sleeps ms, then answers",
        json!({"type": "object", "properties": {"ms": {"type": "integer"}}}),
        |call: Call| async move {
            let ms = call.args.get("ms").and_then(Value::as_u64).unwrap_or(0);
            tokio::time::sleep(Duration::from_millis(ms)).await;
            ToolResult::text(format!("slept {ms} ms"))
        },
    )
    .task_support(TaskSupport::Optional);
    let report = Tool::new(
        "report",
        "Says it is halfway, then waits to be cancelled",
        json!({"type": "object", "properties": {}}),
        |call: Call| async move {
            tokio::task::yield_now().await;
            call.progress.report(1.0, Some(2.0), Some("halfway"));
            std::future::pending::<()>().await;
            ToolResult::text("never")
        },
    )
    .task_support(TaskSupport::Optional);
    let big = Tool::new(
        "big",
        "Answers `bytes` of text",
        json!({"type": "object", "properties": {"bytes": {"type": "integer"}}}),
        |call: Call| async move {
            tokio::task::yield_now().await;
            let bytes = call.args.get("bytes").and_then(Value::as_u64).unwrap_or(0);
            ToolResult::text("x".repeat(bytes as usize))
        },
    )
    .task_support(TaskSupport::Optional);
    let only = Tool::new(
        "only",
        "Runs only as a task, until cancelled",
        json!({"type": "object", "properties": {}}),
        |_c: Call| async move {
            std::future::pending::<()>().await;
            ToolResult::text("never")
        },
    )
    .task_support(TaskSupport::Required);
    let quick = Tool::new(
        "quick",
        "Answers at once",
        json!({"type": "object", "properties": {}}),
        |_c: Call| async move { ToolResult::text("at once") },
    )
    .task_support(TaskSupport::Optional);
    let fails = Tool::new(
        "fails",
        "Answers a tool error after a while",
        json!({"type": "object", "properties": {}}),
        |_c: Call| async move {
            tokio::time::sleep(Duration::from_millis(300)).await;
            ToolResult::error("it broke")
        },
    )
    .task_support(TaskSupport::Optional);
    Module::new("work", "1.0.0", "works slowly")
        .tool(slow)
        .tool(quick)
        .tool(fails)
        .tool(report)
        .tool(big)
        .tool(only)
}

/// The accounts layout with ann and bob, who may call `work`'s tools, and module `other`
/// with its own credentials.
async fn people_and_work() -> (Bus, Vec<crate::bus::Running>) {
    let bus = Bus::accounts(
        &["catalog", "work", "other"],
        &[("ann", &["mesh.work.>"]), ("bob", &["mesh.work.>"])],
    )
    .await;
    let running = vec![bus.serve_catalog().await, bus.serve(work()).await];
    (bus, running)
}

/// Waits (polling, within the hang guard) until ann's task `id` has a status that `done`
/// takes.
async fn until(client: &Client, id: &str, done: impl Fn(Status) -> bool) -> task::Record {
    tokio::time::timeout(HANG, async {
        loop {
            let t = client.task_get(id, Duration::from_secs(5)).await.unwrap();
            if done(t.status) {
                return t;
            }
            tokio::time::sleep(Duration::from_millis(task::POLL_MS)).await;
        }
    })
    .await
    .expect("the task reaches the status")
}

fn slow_tool() -> FullName {
    FullName::parse("work_slow").unwrap()
}

/// A person's task is theirs alone: another person can neither read, answer nor cancel it
/// by its id (to them it does not exist), while its owner reads it run to its end.
#[tokio::test]
async fn another_person_can_neither_read_answer_nor_cancel_a_task() {
    let (bus, _running) = people_and_work().await;
    let ann = bus.client_as(Some("ann")).await;
    let bob = bus.client_as(Some("bob")).await;
    let within = Duration::from_secs(5);
    let taken = ann
        .call_as_task(&slow_tool(), &json!({"ms": 1500}), within)
        .await
        .unwrap();
    let TaskCall::Taken(task) = taken else {
        panic!("a call still sleeping is taken as a task: {taken:?}")
    };
    assert_eq!(task.status, Status::Working);
    assert!(
        matches!(
            bob.task_get(&task.id, within).await,
            Err(TaskError::Unknown(_))
        ),
        "bob reads ann's task"
    );
    assert!(matches!(
        bob.task_cancel(&task.id, within).await,
        Err(TaskError::Unknown(_))
    ));
    assert!(matches!(
        bob.task_update(&task.id, serde_json::Map::new(), within)
            .await,
        Err(TaskError::Unknown(_))
    ));
    // An id of bob's own shape, the rest ann's: still none of his.
    let forged = format!(
        "{}-{}",
        task::owner_part("bob@PEOPLE"),
        task.id.split_once('-').unwrap().1
    );
    assert!(matches!(
        bob.task_get(&forged, within).await,
        Err(TaskError::Unknown(_))
    ));
    let done = until(&ann, &task.id, Status::is_terminal).await;
    assert_eq!(done.status, Status::Completed, "{done:?}");
    let result = ann.task_result(&done, within).await.unwrap().unwrap();
    assert_eq!(result.text_content(), "slept 1500 ms");
}

/// Its owner cancels a task: it reads cancelled at once, the module stops it, and nothing
/// the module wrote after makes it read otherwise.
#[tokio::test]
async fn a_cancelled_task_stays_cancelled() {
    let (bus, _running) = people_and_work().await;
    let ann = bus.client_as(Some("ann")).await;
    let within = Duration::from_secs(5);
    let TaskCall::Taken(task) = ann
        .call_as_task(&slow_tool(), &json!({"ms": 600_000}), within)
        .await
        .unwrap()
    else {
        panic!("not taken")
    };
    let cancelled = ann.task_cancel(&task.id, within).await.unwrap();
    assert_eq!(cancelled.status, Status::Cancelled);
    // Cancelling again is no error, and changes nothing.
    assert_eq!(
        ann.task_cancel(&task.id, within).await.unwrap().status,
        Status::Cancelled
    );
    assert_eq!(
        ann.task_get(&task.id, within).await.unwrap().status,
        Status::Cancelled
    );
}

/// A module with credentials of its own cannot write a task it was not given: the
/// catalogue takes a task's state only from the module the task names.
#[tokio::test]
async fn a_module_cannot_write_a_task_it_was_not_given() {
    let (bus, _running) = people_and_work().await;
    let ann = bus.client_as(Some("ann")).await;
    let other = bus.client_as(Some("other")).await;
    let within = Duration::from_secs(5);
    let TaskCall::Taken(task) = ann
        .call_as_task(&slow_tool(), &json!({"ms": 3000}), within)
        .await
        .unwrap()
    else {
        panic!("not taken")
    };
    let forged = Write {
        id: task.id.clone(),
        status: Some(Status::Completed),
        result: Some(json!({"content": [{"type": "text", "text": "forged"}]})),
        ..Write::default()
    };
    let said = other
        .nats()
        .request(
            task::WRITE_SUBJECT,
            serde_json::to_vec(&forged).unwrap().into(),
        )
        .await
        .unwrap();
    let said: WriteReply = serde_json::from_slice(&said.payload).unwrap();
    assert!(
        said.error
            .as_deref()
            .is_some_and(|e| e.contains("module work's to write")),
        "{said:?}"
    );
    let done = until(&ann, &task.id, Status::is_terminal).await;
    assert_eq!(
        ann.task_result(&done, within)
            .await
            .unwrap()
            .unwrap()
            .text_content(),
        "slept 3000 ms"
    );
    // A person may not even ask: the bus refuses the publish.
    let bob = bus.client_as(Some("bob")).await;
    assert!(
        tokio::time::timeout(
            Duration::from_secs(5),
            bob.nats().request(
                task::WRITE_SUBJECT,
                serde_json::to_vec(&forged).unwrap().into()
            )
        )
        .await
        .map_or(true, |r| r.is_err()),
        "a person's write reached the catalogue"
    );
}

/// A person who learnt another's task id cannot have a call of their own taken as that task
/// (its result would be the other's to read): the runtime's take names its caller and tool,
/// the catalogue refuses, and the call is answered as any call.
#[tokio::test]
async fn a_call_offered_as_anothers_task_is_answered_not_taken() {
    let (bus, _running) = people_and_work().await;
    let ann = bus.client_as(Some("ann")).await;
    let bob = bus.client_as(Some("bob")).await;
    let within = Duration::from_secs(5);
    let TaskCall::Taken(task) = ann
        .call_as_task(&slow_tool(), &json!({"ms": 3000}), within)
        .await
        .unwrap()
    else {
        panic!("not taken")
    };
    let answered = bob
        .offering(&task.id)
        .call(&slow_tool(), &json!({"ms": 100}), within)
        .await
        .unwrap();
    assert_eq!(answered.taken_as_task(), None, "{answered:?}");
    assert_eq!(answered.text_content(), "slept 100 ms");
    let done = until(&ann, &task.id, Status::is_terminal).await;
    assert_eq!(
        ann.task_result(&done, within)
            .await
            .unwrap()
            .unwrap()
            .text_content(),
        "slept 3000 ms"
    );
}

/// A flood of creations fills only its maker's part of the bucket: past the bound one
/// person's next is refused, saying so, and another person still makes theirs.
#[tokio::test]
async fn a_flood_of_task_creations_is_bounded_per_person() {
    let (bus, _running) = people_and_work().await;
    let ann = bus.client_as(Some("ann")).await;
    let bob = bus.client_as(Some("bob")).await;
    let within = Duration::from_secs(5);
    for _ in 0..task::MAX_PER_OWNER {
        ann.task_create(&slow_tool(), None, within).await.unwrap();
    }
    match ann.task_create(&slow_tool(), None, within).await {
        Err(TaskError::Refused(why)) => assert!(why.contains("tasks already"), "{why}"),
        other => panic!("the flood went on: {other:?}"),
    }
    bob.task_create(&slow_tool(), None, within).await.unwrap();
}

/// A joined server's task-only tool (server-everything's `simulate-research-query`, whose
/// listing says `execution: {"taskSupport": "required"}`) is listed so, and a call of it is a
/// task in the mesh and at the server: taken at once, followed by the bridge to its end.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_joined_servers_task_only_tool_runs_as_a_task() {
    let dir = tempfile::tempdir().unwrap();
    let bus = Bus::accounts(
        &["catalog", "everything"],
        &[("ann", &["mesh.everything.>"])],
    )
    .await;
    let _catalog = bus.serve_catalog().await;
    let log = dir.path().join("ev.log");
    let ev = crate::bridge::everything();
    let _everything = crate::bridge::bridge(&bus, "everything", &["node", &ev, "stdio"], &log);
    let ann = bus.client_as(Some("ann")).await;
    crate::bridge::served(&ann, "everything", "simulate_research_query", &log).await;
    let listed = ann
        .tools("everything", Duration::from_secs(5))
        .await
        .unwrap();
    let research = listed
        .tools
        .iter()
        .find(|t| t.name == "simulate_research_query")
        .unwrap();
    assert_eq!(
        research.execution,
        Some(json!({"taskSupport": "required"})),
        "{research:?}"
    );
    let tool = FullName::parse("everything_simulate_research_query").unwrap();
    let within = Duration::from_secs(10);
    let TaskCall::Taken(task) = ann
        .call_as_task(&tool, &json!({"topic": "tides"}), within)
        .await
        .unwrap()
    else {
        panic!("not taken as a task")
    };
    let done = until(&ann, &task.id, Status::is_terminal).await;
    assert_eq!(done.status, Status::Completed, "{done:?}");
    let result = ann.task_result(&done, within).await.unwrap().unwrap();
    assert!(
        result.text_content().contains("# Research Report: tides"),
        "{result:?}\n{}",
        std::fs::read_to_string(&log).unwrap_or_default()
    );
    // `mesh call` waits on a tool that runs only as a task, as on any call.
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_mesh"))
        .args(bus.flags("ann"))
        .args([
            "call",
            "everything_simulate_research_query",
            "topic=waves",
            "--timeout",
            "30s",
        ])
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true)
        .output();
    let out = tokio::time::timeout(HANG, out)
        .await
        .expect("mesh ends")
        .unwrap();
    let said = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{said}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(said.contains("# Research Report: waves"), "{said}");
}

const TASK_CLIENT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/py/task_client.py");

/// The official Python SDK's client (tests/py/task_client.py, a tasks extension written on
/// the SDK's extension interface) through `mesh mcp` as `user`: what it printed.
async fn sdk_task(bus: &Bus, user: &str, mode: &str, after: &[&str]) -> Value {
    let out = Command::new(crate::bus::python())
        .arg(TASK_CLIENT)
        .arg(mode)
        .arg(env!("CARGO_BIN_EXE_mesh"))
        .args(bus.flags(user))
        .arg("mcp")
        .arg("--")
        .args(after)
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true)
        .output();
    let out = tokio::time::timeout(HANG, out)
        .await
        .expect("the SDK client ends")
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "the Python SDK client failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_str(stdout.trim()).unwrap_or_else(|e| panic!("{e}: {stdout}"))
}

/// server-everything's `simulate-research-query` (a task-only tool of a server nobody here
/// wrote) through `mesh mcp` with the official Python SDK: a client that declares the tasks
/// extension gets a task and its result; one that does not is told the tool needs it
/// (-32021); a task started by one relay process is read by another after the first exited,
/// and is nobody else's to read or cancel.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_everythings_research_query_runs_as_a_task_through_mesh_mcp() {
    let dir = tempfile::tempdir().unwrap();
    let bus = Bus::accounts(
        &["catalog", "everything"],
        &[
            ("ann", &["mesh.everything.>"]),
            ("bob", &["mesh.everything.>"]),
        ],
    )
    .await;
    let _catalog = bus.serve_catalog().await;
    let log = dir.path().join("ev.log");
    let ev = crate::bridge::everything();
    let _everything = crate::bridge::bridge(&bus, "everything", &["node", &ev, "stdio"], &log);
    let ann = bus.client_as(Some("ann")).await;
    crate::bridge::served(&ann, "everything", "simulate_research_query", &log).await;
    let tool = "everything_simulate_research_query";
    let waited = sdk_task(&bus, "ann", "wait", &[tool, r#"{"topic": "tides"}"#]).await;
    assert_eq!(waited["isError"], false, "{waited}");
    assert!(
        waited["text"]
            .as_str()
            .unwrap()
            .contains("# Research Report: tides"),
        "{waited}"
    );
    assert_eq!(
        waited["statuses"].as_array().unwrap().last(),
        Some(&json!("completed"))
    );
    let plain = sdk_task(&bus, "ann", "plain", &[tool, r#"{"topic": "tides"}"#]).await;
    assert_eq!(plain["error_code"], -32021, "{plain}");
    assert!(
        plain["data"]["requiredCapabilities"]["extensions"]
            .get(rmcp::model::TASKS_EXTENSION_ID)
            .is_some(),
        "{plain}"
    );
    // Started by one relay process, which exits; read by the next.
    let started = sdk_task(&bus, "ann", "start", &[tool, r#"{"topic": "rivers"}"#]).await;
    assert_eq!(started["resultType"], "task", "{started}");
    let id = started["taskId"].as_str().unwrap().to_owned();
    let theirs = sdk_task(&bus, "bob", "get", &[&id]).await;
    assert_eq!(
        theirs["error_code"], -32602,
        "bob reads ann's task: {theirs}"
    );
    let cancelled = sdk_task(&bus, "bob", "cancel", &[&id]).await;
    assert_eq!(
        cancelled["error_code"], -32602,
        "bob cancels ann's task: {cancelled}"
    );
    let read = tokio::time::timeout(HANG, async {
        loop {
            let read = sdk_task(&bus, "ann", "get", &[&id]).await;
            if read["status"] != "working" {
                return read;
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    })
    .await
    .expect("the task ends");
    assert_eq!(read["status"], "completed", "{read}");
    assert!(
        read["text"]
            .as_str()
            .unwrap()
            .contains("# Research Report: rivers"),
        "{read}"
    );
}

/// `mesh` as `user` with `args`: its exit code, stdout and stderr.
async fn mesh(bus: &Bus, user: &str, args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_mesh"))
        .args(bus.flags(user))
        .args(args)
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true)
        .output();
    let out = tokio::time::timeout(HANG, out)
        .await
        .expect("mesh ends")
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// `mesh call --detach` prints a task's id and leaves it running; `mesh task get` reads it
/// from another process (its result once it has one), `mesh task cancel` cancels it, and to
/// another person the id names nothing (exit 2, as a call `mesh` cannot make).
#[tokio::test]
async fn mesh_call_detaches_and_mesh_task_reads_and_cancels() {
    let (bus, _running) = people_and_work().await;
    let (code, out, err) = mesh(&bus, "ann", &["call", "work_slow", "ms=1000", "--detach"]).await;
    assert_eq!(code, 0, "{out}{err}");
    let id = out.trim().to_owned();
    assert!(task::key_of(&id).is_some(), "not a task's id: {out}");
    let (code, _, err) = mesh(&bus, "bob", &["task", "get", &id]).await;
    assert_eq!(code, 2, "bob reads ann's task: {err}");
    assert!(err.contains("no task"), "{err}");
    let done = tokio::time::timeout(HANG, async {
        loop {
            let (code, out, err) = mesh(&bus, "ann", &["task", "get", &id]).await;
            assert_eq!(code, 0, "{err}");
            if err.contains(" completed") {
                return out;
            }
            tokio::time::sleep(Duration::from_millis(task::POLL_MS)).await;
        }
    })
    .await
    .expect("the task completes");
    assert_eq!(done.trim(), "slept 1000 ms");
    // Cancelled while it runs; cancelling a task that ended changes nothing.
    let (_, out, _) = mesh(&bus, "ann", &["call", "work_slow", "ms=600000", "--detach"]).await;
    let id = out.trim().to_owned();
    let (code, _, err) = mesh(&bus, "ann", &["task", "cancel", &id]).await;
    assert_eq!(code, 0, "{err}");
    assert!(err.contains("cancelled"), "{err}");
    let (code, out, _) = mesh(&bus, "ann", &["task", "get", &id, "--json"]).await;
    assert_eq!(code, 0);
    let shown: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(shown["status"], "cancelled", "{shown}");
}

/// What a task's tool reports is the task's to read (its status message and progress) while
/// it works, by its owner from anywhere.
#[tokio::test]
async fn a_tasks_progress_is_read_with_it() {
    let (bus, _running) = people_and_work().await;
    let ann = bus.client_as(Some("ann")).await;
    let within = Duration::from_secs(5);
    let tool = FullName::parse("work_report").unwrap();
    let TaskCall::Taken(task) = ann.call_as_task(&tool, &json!({}), within).await.unwrap() else {
        panic!("not taken")
    };
    let read = tokio::time::timeout(HANG, async {
        loop {
            let t = ann.task_get(&task.id, within).await.unwrap();
            if t.status_message.is_some() {
                return t;
            }
            tokio::time::sleep(Duration::from_millis(task::POLL_MS)).await;
        }
    })
    .await
    .expect("the report reaches the task");
    assert_eq!(read.status, Status::Working);
    assert_eq!(read.status_message.as_deref(), Some("halfway"));
    let progress = read.progress.unwrap();
    assert_eq!((progress.progress, progress.total), (1.0, Some(2.0)));
    assert_eq!(
        ann.task_cancel(&task.id, within).await.unwrap().status,
        Status::Cancelled
    );
}

/// A 2026-07-28 server with the tasks extension, joined: `mesh mcp` itself (ann's relay of
/// the conformance module `test`), bridged as module `inner`. Its task-only
/// `test_tool_with_task` asks first (answered directly, its state sealed by the bridge), then
/// becomes a task at the server, which the bridge follows to its inlined result — all within
/// a task of the outer mesh, whose question ann answers with `task_update`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_joined_2026_server_asks_then_works_as_a_task() {
    let dir = tempfile::tempdir().unwrap();
    let bus = Bus::accounts(
        &["catalog", "test", "inner"],
        &[("ann", &["mesh.test.>", "mesh.inner.>"])],
    )
    .await;
    let _catalog = bus.serve_catalog().await;
    let _test = bus.serve(mesh_conformance::module()).await;
    let log = dir.path().join("inner.log");
    let mut relay = vec![env!("CARGO_BIN_EXE_mesh").to_owned()];
    relay.extend(bus.flags("ann"));
    relay.push("mcp".into());
    let relay: Vec<&str> = relay.iter().map(String::as_str).collect();
    let _inner = crate::bridge::bridge(&bus, "inner", &relay, &log);
    let ann = bus.client_as(Some("ann")).await;
    crate::bridge::served(&ann, "inner", "test_tool_with_task", &log).await;
    let tool = FullName::parse("inner_test_tool_with_task").unwrap();
    let within = Duration::from_secs(10);
    let TaskCall::Taken(task) = ann.call_as_task(&tool, &json!({}), within).await.unwrap() else {
        panic!("not taken")
    };
    let asked = until(&ann, &task.id, |s| s != Status::Working).await;
    assert_eq!(asked.status, Status::InputRequired, "{asked:?}");
    let questions = asked.input_requests.unwrap();
    assert!(questions.contains_key("user_name"), "{questions:?}");
    let answer = json!({"action": "accept", "content": {"name": "Alice"}});
    ann.task_update(
        &task.id,
        serde_json::Map::from_iter([("user_name".to_owned(), answer)]),
        within,
    )
    .await
    .unwrap();
    let done = until(&ann, &task.id, Status::is_terminal).await;
    assert_eq!(done.status, Status::Completed, "{done:?}");
    let result = ann.task_result(&done, within).await.unwrap().unwrap();
    assert_eq!(
        result.text_content(),
        "Hello, Alice!",
        "{result:?}\n{}",
        std::fs::read_to_string(&log).unwrap_or_default()
    );
}

/// Module `agent`: `later` acts for its caller toward `work`, as a task: it works past its
/// caller's deadline, then calls `work_slow` for the person with the ticket their call gave.
fn agent(client: Client, kept: Kept) -> Module {
    let later = Tool::new(
        "later",
        "Calls work_slow for its caller, after a while",
        json!({"type": "object", "properties": {"after_ms": {"type": "integer"}}}),
        move |call: Call| {
            let (client, kept) = (client.clone(), kept.clone());
            async move {
                let after = call
                    .args
                    .get("after_ms")
                    .and_then(Value::as_u64)
                    .unwrap_or(0);
                let Some(ticket) = &call.ticket else {
                    return ToolResult::error("no ticket");
                };
                // Kept before it waits: a test may stop the module meanwhile.
                *kept.lock().unwrap() = Some(ticket.clone());
                tokio::time::sleep(Duration::from_millis(after)).await;
                match client
                    .for_person(ticket)
                    .call(&slow_tool(), &json!({"ms": 1}), Duration::from_secs(5))
                    .await
                {
                    Ok(r) => r,
                    Err(e) => ToolResult::error(e.to_string()),
                }
            }
        },
    )
    .acts_for_people()
    .task_support(TaskSupport::Optional);
    Module::new("agent", "1.0.0", "acts for people later").tool(later)
}

/// The ticket a module kept past its call, as a module that would misuse it.
type Kept = std::sync::Arc<std::sync::Mutex<Option<mesh_core::subjects::ticket::Ticket>>>;

/// A tool that acts for its caller may run as a task (decide's apply is one): the ticket the
/// person's call gave lives as long as the task, past the call's own deadline, and ends with
/// it — the client does not end it at the "taken" answer, the module's runtime does when the
/// task ends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_acting_for_its_caller_keeps_their_ticket_until_it_ends() {
    let bus = Bus::accounts_with(
        &[
            crate::bus::module("catalog"),
            crate::bus::acting_for_people("agent", &["work"]),
            crate::bus::module("work"),
        ],
        &[("ann", &["mesh.agent.>", "mesh.work.>"])],
    )
    .await;
    let _catalog = bus.serve_catalog().await;
    let _work = bus.serve_asking(work()).await;
    let kept = Kept::default();
    let agent_client = bus.client_as(Some("agent")).await;
    let _agent = bus
        .serve_asking(agent(agent_client.clone(), kept.clone()))
        .await;
    let ann = bus.client_as(Some("ann")).await;
    let tool = FullName::parse("agent_later").unwrap();
    ann.expect_ticket(&tool);
    // Its call gives up after a second; the task works for seven (past a ticket of the
    // call's own lifetime and the 5 s of clock skew a ticket is allowed).
    let TaskCall::Taken(task) = ann
        .call_as_task(&tool, &json!({"after_ms": 7000}), Duration::from_secs(1))
        .await
        .unwrap()
    else {
        panic!("not taken")
    };
    let done = until(&ann, &task.id, Status::is_terminal).await;
    let result = ann
        .task_result(&done, Duration::from_secs(5))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(result.text_content(), "slept 1 ms", "{result:?}");
    // Once the task ended, the ticket acts for nobody: the module that kept it is refused.
    let ticket = kept.lock().unwrap().clone().unwrap();
    let refused = tokio::time::timeout(HANG, async {
        loop {
            let r = agent_client
                .for_person(&ticket)
                .call(&slow_tool(), &json!({"ms": 1}), Duration::from_secs(5))
                .await
                .unwrap();
            if r.is_error {
                return r;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
    .await
    .expect("the ticket ends with the task");
    assert!(refused.text_content().contains("ended"), "{refused:?}");
}

/// The ticket a person's call gave a task ends when the module running it stops mid-task:
/// the task is dropped, and nobody may act for the person with the ticket after.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_dropped_as_its_module_stops_ends_its_ticket() {
    let bus = Bus::accounts_with(
        &[
            crate::bus::module("catalog"),
            crate::bus::acting_for_people("agent", &["work"]),
            crate::bus::module("work"),
        ],
        &[("ann", &["mesh.agent.>", "mesh.work.>"])],
    )
    .await;
    let _catalog = bus.serve_catalog().await;
    let _work = bus.serve_asking(work()).await;
    let kept = Kept::default();
    let agent_client = bus.client_as(Some("agent")).await;
    // Its drain gives up at once on what still runs.
    let options = mesh_core::runtime::ServeOptions {
        layout: mesh_core::actor::Layout::Accounts,
        drain_timeout: Duration::from_millis(200),
        ..Default::default()
    };
    let agent = crate::bus::serve_on(
        bus.client_as(Some("agent")).await.nats().clone(),
        agent(agent_client.clone(), kept.clone()),
        options,
    )
    .await;
    let ann = bus.client_as(Some("ann")).await;
    let tool = FullName::parse("agent_later").unwrap();
    ann.expect_ticket(&tool);
    let TaskCall::Taken(task) = ann
        .call_as_task(&tool, &json!({"after_ms": 600_000}), Duration::from_secs(5))
        .await
        .unwrap()
    else {
        panic!("not taken")
    };
    let ticket = kept
        .lock()
        .unwrap()
        .clone()
        .expect("the task kept its ticket");
    // Acting for ann while the task runs.
    let acted = agent_client
        .for_person(&ticket)
        .call(&slow_tool(), &json!({"ms": 1}), Duration::from_secs(5))
        .await
        .unwrap();
    assert!(!acted.is_error, "{acted:?}");
    agent.stop().await;
    let ended = until(&ann, &task.id, Status::is_terminal).await;
    assert_eq!(ended.status, Status::Failed, "{ended:?}");
    let refused = tokio::time::timeout(Duration::from_secs(20), async {
        loop {
            let r = agent_client
                .for_person(&ticket)
                .call(&slow_tool(), &json!({"ms": 1}), Duration::from_secs(5))
                .await
                .unwrap();
            if r.is_error {
                return r;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
    .await
    .expect("the ticket ends with the dropped task");
    assert!(refused.text_content().contains("ended"), "{refused:?}");
}

/// A module that stops while a task of its runs leaves no task working for ever: it is
/// `failed`, saying so. And nothing in a creation's body names its owner: a body that tries is
/// refused, and the task is always the stamped caller's.
#[tokio::test]
async fn a_task_outlives_no_module_and_names_no_owner_but_its_maker() {
    let bus = Bus::accounts(
        &["catalog", "work"],
        &[("ann", &["mesh.work.>"]), ("bob", &["mesh.work.>"])],
    )
    .await;
    let _catalog = bus.serve_catalog().await;
    // Its drain gives up at once on what still runs.
    let options = mesh_core::runtime::ServeOptions {
        drain_timeout: Duration::from_millis(200),
        ..Default::default()
    };
    let work = bus.serve_with(work(), options).await;
    let ann = bus.client_as(Some("ann")).await;
    let within = Duration::from_secs(5);
    let TaskCall::Taken(task) = ann
        .call_as_task(&slow_tool(), &json!({"ms": 600_000}), within)
        .await
        .unwrap()
    else {
        panic!("not taken")
    };
    work.stop().await;
    let ended = until(&ann, &task.id, Status::is_terminal).await;
    assert_eq!(ended.status, Status::Failed, "{ended:?}");
    assert!(
        ended.error.as_ref().unwrap()["message"]
            .as_str()
            .unwrap()
            .contains("stopped"),
        "{ended:?}"
    );
    // Bob names ann as the owner in the body: refused, nothing made.
    let bob = bus.client_as(Some("bob")).await;
    let said = bob
        .nats()
        .request(
            task::CREATE_SUBJECT,
            br#"{"tool": "work_slow", "owner": "ann@PEOPLE"}"#.to_vec().into(),
        )
        .await
        .unwrap();
    let said: task::Reply = serde_json::from_slice(&said.payload).unwrap();
    assert!(said.task.is_none(), "{said:?}");
    assert!(said.error.unwrap().contains("owner"));
    let made = bob.task_create(&slow_tool(), None, within).await.unwrap();
    assert_eq!(made.owner, "bob@PEOPLE");
}

/// A task's result of any size is its owner's to read: one near a message's size within the
/// task, one larger kept as a claim that its owner reads whole, and again (every read of the
/// task inlines it).
#[tokio::test]
async fn a_tasks_large_result_is_read_whole_and_again() {
    let (bus, _running) = people_and_work().await;
    let ann = bus.client_as(Some("ann")).await;
    let within = Duration::from_secs(10);
    let tool = FullName::parse("work_big").unwrap();
    // Around the bus's 1 MiB: under and over what a task's record holds, and past a message.
    let mut done = None;
    for bytes in [600_000, 1_040_000, 1_046_000, 1_500_000] {
        let TaskCall::Taken(task) = ann
            .call_as_task(&tool, &json!({"bytes": bytes}), within)
            .await
            .unwrap()
        else {
            panic!("not taken")
        };
        let ended = until(&ann, &task.id, Status::is_terminal).await;
        assert_eq!(
            ended.status,
            Status::Completed,
            "{bytes}: {:?}",
            ended.error
        );
        for _ in 0..2 {
            let result = ann.task_result(&ended, within).await.unwrap().unwrap();
            assert_eq!(result.text_content().len(), bytes);
        }
        done = Some(ended);
    }
    let done = done.unwrap();
    // Another person fetching its claim gets nothing.
    let bob = bus.client_as(Some("bob")).await;
    assert!(bob.task_result(&done, within).await.is_err());
}

/// A catalogue that restarts while a task runs is ridden out: the module's writes fail for a
/// while (longer than a few polls), and the task still ends, completed, in the bucket the
/// catalogue reads again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_rides_out_a_catalogue_that_restarts() {
    let bus = Bus::accounts(&["catalog", "work"], &[("ann", &["mesh.work.>"])]).await;
    let catalog = bus.serve_catalog().await;
    let _work = bus.serve(work()).await;
    let ann = bus.client_as(Some("ann")).await;
    let within = Duration::from_secs(5);
    let TaskCall::Taken(task) = ann
        .call_as_task(&slow_tool(), &json!({"ms": 9000}), within)
        .await
        .unwrap()
    else {
        panic!("not taken")
    };
    catalog.stop().await;
    // Away for six seconds: two dozen of the module's looks fail meanwhile.
    tokio::time::sleep(Duration::from_secs(6)).await;
    let _catalog = bus.serve_catalog().await;
    let done = until(&ann, &task.id, Status::is_terminal).await;
    assert_eq!(done.status, Status::Completed, "{done:?}");
    let result = ann.task_result(&done, within).await.unwrap().unwrap();
    assert_eq!(result.text_content(), "slept 9000 ms");
}

/// `mesh call` waits on a tool that runs only as a task; Ctrl-C gives the task up as it gives
/// a call up: cancelled, said so, exit 130.
#[tokio::test]
async fn ctrl_c_at_mesh_call_cancels_the_task_it_waits_on() {
    use tokio::io::AsyncBufReadExt;
    let (bus, _running) = people_and_work().await;
    let mut child = Command::new(env!("CARGO_BIN_EXE_mesh"))
        .arg("-v")
        .args(bus.flags("ann"))
        .args(["call", "work_only"])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = tokio::io::BufReader::new(child.stderr.take().unwrap()).lines();
    let mut said = String::new();
    let id = tokio::time::timeout(HANG, async {
        while let Some(line) = lines.next_line().await.unwrap() {
            said.push_str(&line);
            said.push('\n');
            if line.contains("waiting on it")
                && let Some(id) = line.split("task=").nth(1)
            {
                return id.split_whitespace().next().unwrap().to_owned();
            }
        }
        panic!("mesh call never waited on a task:\n{said}")
    })
    .await
    .expect("mesh call waits on the task");
    // SAFETY: a signal to the child this test started.
    unsafe { libc::kill(child.id().unwrap() as i32, libc::SIGINT) };
    let status = tokio::time::timeout(HANG, child.wait())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(status.code(), Some(130));
    let ann = bus.client_as(Some("ann")).await;
    let read = ann.task_get(&id, Duration::from_secs(5)).await.unwrap();
    assert_eq!(read.status, Status::Cancelled, "{read:?}");
}

/// Through a console `mesh call` does not follow a task: a tool that runs only as one is
/// refused before the call, saying to call it on the bus.
#[tokio::test]
async fn mesh_call_through_a_console_says_a_task_only_tool_needs_the_bus() {
    let (bus, _running) = people_and_work().await;
    let (_console, url) = crate::mcp::console_as(&bus.flags("ann")).await;
    let out = Command::new(env!("CARGO_BIN_EXE_mesh"))
        .env("MESH_CONSOLE_TOKEN", TOKEN)
        .args(["call", "--console", &url, "work_only"])
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true)
        .output();
    let out = tokio::time::timeout(HANG, out).await.unwrap().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("runs only as a task"), "{err}");
}

/// A task's result larger than a task's record keeps inline, though it would fit a message,
/// is kept as a claim (a bucket of records that small cannot be filled by a few people), and
/// its owner reads it whole through the claim.
#[tokio::test]
async fn a_tasks_result_past_what_a_record_keeps_is_read_through_its_claim() {
    let (bus, _running) = people_and_work().await;
    let ann = bus.client_as(Some("ann")).await;
    let within = Duration::from_secs(10);
    let tool = FullName::parse("work_big").unwrap();
    let bytes = task::MAX_INLINE_RESULT + 100_000;
    assert!(bytes < ann.nats().server_info().max_payload);
    let TaskCall::Taken(task) = ann
        .call_as_task(&tool, &json!({"bytes": bytes}), within)
        .await
        .unwrap()
    else {
        panic!("not taken")
    };
    let done = until(&ann, &task.id, Status::is_terminal).await;
    assert_eq!(done.status, Status::Completed, "{:?}", done.error);
    let kept = done.result.as_ref().unwrap();
    assert!(
        kept["_meta"][mesh_core::subjects::claim::CLAIM_META].is_object(),
        "kept inline, {} bytes",
        kept.to_string().len()
    );
    let result = ann.task_result(&done, within).await.unwrap().unwrap();
    assert_eq!(result.text_content().len(), bytes);
}

/// Calls answered at once hold none of their caller's tasks: the task made for each is gone
/// when it is cancelled unused, so after more quick calls than one person may keep tasks,
/// their next call of a task-only tool is still taken.
#[tokio::test]
async fn quick_calls_keep_no_tasks() {
    let (bus, _running) = people_and_work().await;
    let ann = bus.client_as(Some("ann")).await;
    let within = Duration::from_secs(5);
    let quick = FullName::parse("work_quick").unwrap();
    for _ in 0..300 {
        match ann.call_as_task(&quick, &json!({}), within).await.unwrap() {
            TaskCall::Answered(r) => assert_eq!(r.text_content(), "at once"),
            taken => panic!("a quick call was taken: {taken:?}"),
        }
    }
    let only = FullName::parse("work_only").unwrap();
    let taken = ann.call_as_task(&only, &json!({}), within).await;
    let Ok(TaskCall::Taken(task)) = taken else {
        panic!("the task-only call was not taken: {taken:?}")
    };
    ann.task_cancel(&task.id, within).await.unwrap();
}

/// A module with its own credentials writes nothing of a task no call of it was offered as:
/// the catalogue takes a status only for a task the module took for its owner's call.
#[tokio::test]
async fn a_module_cannot_end_a_task_it_never_took() {
    let (bus, _running) = people_and_work().await;
    let ann = bus.client_as(Some("ann")).await;
    let work = bus.client_as(Some("work")).await;
    let within = Duration::from_secs(5);
    let made = ann.task_create(&slow_tool(), None, within).await.unwrap();
    let forged = Write {
        id: made.id.clone(),
        status: Some(Status::Completed),
        result: Some(json!({"content": [{"type": "text", "text": "forged"}]})),
        ..Write::default()
    };
    let said = work
        .nats()
        .request(
            task::WRITE_SUBJECT,
            serde_json::to_vec(&forged).unwrap().into(),
        )
        .await
        .unwrap();
    let said: WriteReply = serde_json::from_slice(&said.payload).unwrap();
    assert!(
        said.error
            .as_deref()
            .is_some_and(|e| e.contains("not taken")),
        "{said:?}"
    );
    let read = ann.task_get(&made.id, within).await.unwrap();
    assert_eq!(read.status, Status::Working, "{read:?}");
    assert!(read.result.is_none(), "{read:?}");
}

/// The answers to a task's questions are handed to its module until it says it has them (its
/// next status): a reply lost on the way loses no answer.
#[tokio::test]
async fn a_tasks_answers_outlive_a_lost_reply() {
    let (bus, _running) = people_and_work().await;
    let ann = bus.client_as(Some("ann")).await;
    let work = bus.client_as(Some("work")).await;
    let within = Duration::from_secs(5);
    let made = ann.task_create(&slow_tool(), None, within).await.unwrap();
    let write = |w: Write| {
        let nats = work.nats().clone();
        async move {
            let said = nats
                .request(task::WRITE_SUBJECT, serde_json::to_vec(&w).unwrap().into())
                .await
                .unwrap();
            let said: WriteReply = serde_json::from_slice(&said.payload).unwrap();
            assert!(said.error.is_none(), "{said:?}");
            said
        }
    };
    let id = made.id.clone();
    // Taken as the runtime takes it, then a question.
    write(Write {
        id: id.clone(),
        status: Some(Status::Working),
        owner: Some("ann@PEOPLE".into()),
        tool: Some("work_slow".into()),
        ..Write::default()
    })
    .await;
    write(Write {
        id: id.clone(),
        status: Some(Status::InputRequired),
        input_requests: Some(serde_json::Map::from_iter([(
            "q".to_owned(),
            json!({"method": "elicitation/create"}),
        )])),
        ..Write::default()
    })
    .await;
    ann.task_update(
        &id,
        serde_json::Map::from_iter([("q".to_owned(), json!({"action": "accept"}))]),
        within,
    )
    .await
    .unwrap();
    let look = || Write {
        id: id.clone(),
        ..Write::default()
    };
    let first = write(look()).await;
    assert!(first.input_responses.is_some(), "{first:?}");
    // Its reply lost: the next look hands the answers again.
    let again = write(look()).await;
    assert_eq!(again.input_responses, first.input_responses);
    // Said to work on with them: handed no more.
    write(Write {
        id: id.clone(),
        status: Some(Status::Working),
        ..Write::default()
    })
    .await;
    assert_eq!(write(look()).await.input_responses, None);
}

/// A task that ends in a tool error counts as one in the module's statistics, as the same
/// call answered at once does.
#[tokio::test]
async fn a_failed_task_counts_as_an_error() {
    let (bus, _running) = people_and_work().await;
    let ann = bus.client_as(Some("ann")).await;
    let within = Duration::from_secs(5);
    let TaskCall::Taken(task) = ann
        .call_as_task(&FullName::parse("work_fails").unwrap(), &json!({}), within)
        .await
        .unwrap()
    else {
        panic!("not taken")
    };
    let done = until(&ann, &task.id, Status::is_terminal).await;
    assert_eq!(done.status, Status::Completed, "{done:?}");
    // Counted just after the task's end is written: waited for.
    let fails = tokio::time::timeout(HANG, async {
        loop {
            let reply = ann
                .nats()
                .request("$SRV.STATS.work", "".into())
                .await
                .unwrap();
            let stats: Value = serde_json::from_slice(&reply.payload).unwrap();
            let fails = stats["endpoints"]
                .as_array()
                .unwrap()
                .iter()
                .find(|e| e["name"] == "fails")
                .unwrap_or_else(|| panic!("no endpoint fails: {stats}"))
                .clone();
            if fails["num_requests"] == 1 {
                return fails;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await
    .expect("the task's call is counted");
    assert_eq!(fails["num_errors"], 1, "{fails}");
    assert_eq!(fails["last_error"], "500:tool error", "{fails}");
}

/// A task the catalogue no longer keeps (it expired, or the bucket lost it) is given up by
/// the module at its next look: a failure counted as one, not a cancel by its owner, and not
/// ridden out as a catalogue away for a moment would be.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_the_catalogue_lost_is_given_up_not_cancelled() {
    let bus = Bus::accounts(&["catalog", "work"], &[("ann", &["mesh.work.>"])]).await;
    let _catalog = bus.serve_catalog().await;
    let _work = bus.serve(work()).await;
    let ann = bus.client_as(Some("ann")).await;
    let TaskCall::Taken(taken) = ann
        .call_as_task(
            &slow_tool(),
            &json!({"ms": 600_000}),
            Duration::from_secs(5),
        )
        .await
        .unwrap()
    else {
        panic!("not taken")
    };
    // Lost as expiry loses it: purged from the catalogue's bucket, by the catalogue's account.
    let catalog = bus.client_as(Some("catalog")).await;
    let store = async_nats::jetstream::new(catalog.nats().clone())
        .get_key_value(task::BUCKET)
        .await
        .unwrap();
    store.purge(task::key_of(&taken.id).unwrap()).await.unwrap();
    let slow = tokio::time::timeout(HANG, async {
        loop {
            tokio::time::sleep(Duration::from_millis(250)).await;
            let reply = ann
                .nats()
                .request("$SRV.STATS.work", "".into())
                .await
                .unwrap();
            let stats: Value = serde_json::from_slice(&reply.payload).unwrap();
            let slow = stats["endpoints"]
                .as_array()
                .unwrap()
                .iter()
                .find(|e| e["name"] == "slow")
                .unwrap_or_else(|| panic!("no endpoint slow: {stats}"))
                .clone();
            if slow["num_requests"] != 0 {
                return slow;
            }
        }
    })
    .await
    .expect("the task is given up");
    assert_eq!(slow["num_requests"], 1, "{slow}");
    assert_eq!(slow["num_errors"], 1, "{slow}");
    assert_eq!(slow["last_error"], "503:unavailable", "{slow}");
}

/// A module killed while a task of its runs (SIGKILL: it writes nothing as it goes) leaves no
/// task working for the hour: once the catalogue takes its instance for gone (three of its
/// refreshes missed), the owner's next look finds the task failed, saying why. One that
/// still runs is not taken for gone meanwhile.
#[tokio::test]
async fn a_task_of_a_killed_module_fails_once_its_instance_is_gone() {
    let bus = Bus::single().await;
    let _catalog = bus.serve_catalog().await;
    let binary =
        std::path::Path::new(env!("CARGO_BIN_EXE_mesh")).with_file_name("mesh-conformance");
    let serve = |refresh: &str| {
        Command::new(&binary)
            .args(["--server", &bus.url(), "--modules", "slow"])
            .args(["--refresh-secs", refresh])
            .stdin(std::process::Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .unwrap()
    };
    let mut slow = serve("1");
    let client = bus.client().await;
    let tool = FullName::parse("slow_compute").unwrap();
    let within = Duration::from_secs(5);
    let taken = |seconds: u64| {
        let (client, tool) = (&client, &tool);
        async move {
            tokio::time::timeout(HANG, async {
                loop {
                    if let Ok(TaskCall::Taken(t)) = client
                        .call_as_task(tool, &json!({"seconds": seconds}), within)
                        .await
                    {
                        return t;
                    }
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            })
            .await
            .expect("slow_compute takes a task")
        }
    };
    let task = taken(600).await;
    // Alive past three refreshes: still working.
    tokio::time::sleep(Duration::from_secs(5)).await;
    let now = client.task_get(&task.id, within).await.unwrap();
    assert_eq!(now.status, Status::Working, "{now:?}");
    slow.start_kill().unwrap();
    slow.wait().await.unwrap();
    let ended = until(&client, &task.id, Status::is_terminal).await;
    assert_eq!(ended.status, Status::Failed, "{ended:?}");
    assert!(
        ended.error.as_ref().unwrap()["message"]
            .as_str()
            .unwrap()
            .contains("stopped answering"),
        "{ended:?}"
    );
    // Another instance's task is its own: it works on, and ends as it should.
    let mut _again = serve("1");
    let short = taken(2).await;
    let done = until(&client, &short.id, Status::is_terminal).await;
    assert_eq!(done.status, Status::Completed, "{done:?}");
}

/// Forgetting a module that still runs (it is listed again at its next refresh) fails none of
/// its tasks: the instance that took one was removed while it still refreshed, so it is
/// taken for gone only once it has missed as many refreshes as a registered one may.
#[tokio::test]
async fn forgetting_a_running_module_fails_none_of_its_tasks() {
    let bus = Bus::single().await;
    let _catalog = bus.serve_catalog().await;
    let _work = bus.serve(work()).await;
    let client = bus.client().await;
    let within = Duration::from_secs(5);
    let task = match client
        .call_as_task(&slow_tool(), &json!({"ms": 20_000}), within)
        .await
        .unwrap()
    {
        TaskCall::Taken(t) => t,
        other => panic!("{other:?}"),
    };
    let forgot = client
        .call(
            &FullName::parse("catalog_forget").unwrap(),
            &json!({"module": "work"}),
            within,
        )
        .await
        .unwrap();
    assert!(!forgot.is_error, "{}", forgot.text_content());
    // Past the grace an instance missing from the view is given, well within its refresh.
    tokio::time::sleep(Duration::from_secs(7)).await;
    let now = client.task_get(&task.id, within).await.unwrap();
    assert_eq!(now.status, Status::Working, "{now:?}");
}
