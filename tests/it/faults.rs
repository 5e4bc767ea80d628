//! Faults on a real bus: nats-server restarted under load, a module process killed with
//! SIGKILL mid-call, decide killed with SIGKILL during decide_apply (after the AVU write, and
//! during the lake mirror), the console killed under a connected MCP client, and `mesh mcp`
//! left by its client while its bus is gone.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use mesh_avu::store::{Avu, Store, Writer};
use mesh_core::client::{Client, Outcome, outcome};
use mesh_core::runtime::{Call, Module, ServeOptions, Tool};
use mesh_core::subjects::{FullName, ToolResult, tool_subject};
use mesh_decide::lake::Lake;
use serde_json::{Value, json};
use tokio::process::{Child, Command};

use crate::avu::import_fixtures;
use crate::bus::{self, Bus, GENEROUS, python};

fn name(s: &str) -> FullName {
    FullName::parse(s).unwrap()
}

/// A `mesh` process (its stderr kept in `log`).
fn mesh(args: &[&str], env: &[(&str, &Path)], log: &Path) -> Child {
    let mut c = Command::new(env!("CARGO_BIN_EXE_mesh"));
    c.args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(log).unwrap())
        .kill_on_drop(true);
    for (k, v) in env {
        c.env(k, v);
    }
    c.spawn().unwrap()
}

/// A 20-second `echo_sleep` in the background, waited for at most `deadline`.
fn long_call(
    client: &Client,
    deadline: Duration,
) -> tokio::task::JoinHandle<Result<ToolResult, mesh_core::client::CallError>> {
    let client = client.clone();
    tokio::spawn(async move {
        client
            .call(&name("echo_sleep"), &json!({"ms": 20000}), deadline)
            .await
    })
}

/// How many instances of `module` answer `$SRV.PING.<module>` within 300 ms.
async fn instances(client: &Client, module: &str) -> usize {
    use futures_util::StreamExt;
    let nats = client.nats();
    let inbox = nats.new_inbox();
    let mut replies = nats.subscribe(inbox.clone()).await.unwrap();
    nats.publish_with_reply(format!("$SRV.PING.{module}"), inbox, "".into())
        .await
        .unwrap();
    let mut ids = std::collections::HashSet::new();
    let until = tokio::time::sleep(Duration::from_millis(300));
    tokio::pin!(until);
    loop {
        tokio::select! {
            m = replies.next() => match m {
                Some(m) => {
                    let v: Value = serde_json::from_slice(&m.payload).unwrap_or_default();
                    ids.insert(v["id"].as_str().unwrap_or_default().to_owned());
                }
                None => break,
            },
            _ = &mut until => break,
        }
    }
    ids.len()
}

/// Waits (polling, bounded so a broken set-up fails instead of hanging) until `n` instances
/// of `module` answer; the panic shows the processes' logs in `logs`.
async fn wait_for_instances(client: &Client, module: &str, n: usize, logs: &Path) {
    for _ in 0..200 {
        if instances(client, module).await >= n {
            return;
        }
    }
    let mut text = String::new();
    for e in std::fs::read_dir(logs).unwrap().flatten() {
        if e.path().extension().is_some_and(|x| x == "log") {
            text.push_str(&format!(
                "--- {}\n{}",
                e.path().display(),
                std::fs::read_to_string(e.path()).unwrap_or_default()
            ));
        }
    }
    panic!("{module} never had {n} instances\n{text}");
}

/// A bound that only catches a hang: nothing waits this long when it works.
const HANG: Duration = Duration::from_secs(60);

/// Waits until `ready` holds, looking every 10 ms; `what` is the panic should it never hold.
async fn until(what: &str, mut ready: impl FnMut() -> bool) {
    tokio::time::timeout(HANG, async {
        while !ready() {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
    .unwrap_or_else(|_| panic!("{what}"));
}

/// Every request for `module`'s `tool` from now on: a plain subscription beside the module's
/// queue group gets a copy of each request in the same delivery that hands it to an
/// instance.
async fn tap(client: &Client, module: &str, tool: &str) -> async_nats::Subscriber {
    let nats = client.nats();
    let tap = nats.subscribe(tool_subject(module, tool)).await.unwrap();
    // The server knows the subscription before any call is made.
    crate::bus::round_trip(nats).await;
    tap
}

/// Waits until the next request `tap` sees has been made (sent and routed by the bus).
async fn until_sent(tap: &mut async_nats::Subscriber) {
    use futures_util::StreamExt;
    tokio::time::timeout(HANG, tap.next())
        .await
        .expect("the call never reached the bus")
        .expect("the tap is open");
}

/// Waits until the instance of `module` serving now (the only one) holds the next request
/// `tap` sees: the bus has handed it over, and the instance has read it, since it answers a
/// `$SRV.PING` the bus sent it afterwards on the same connection.
async fn until_held(tap: &mut async_nats::Subscriber, client: &Client, module: &str, logs: &Path) {
    until_sent(tap).await;
    wait_for_instances(client, module, 1, logs).await;
}

/// What the callers of a test have seen so far: results, and every other outcome.
#[derive(Default)]
struct Tally {
    results: AtomicUsize,
    others: AtomicUsize,
}

impl Tally {
    fn count(&self, outcome: Outcome) {
        let n = if outcome == Outcome::Result {
            &self.results
        } else {
            &self.others
        };
        n.fetch_add(1, Ordering::Relaxed);
    }

    fn results(&self) -> usize {
        self.results.load(Ordering::Relaxed)
    }

    fn others(&self) -> usize {
        self.others.load(Ordering::Relaxed)
    }
}

async fn echo_once(client: Client) -> Outcome {
    outcome(
        &client
            .call(
                &name("echo"),
                &json!({"text": "x"}),
                Duration::from_millis(500),
            )
            .await,
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn callers_ride_through_a_server_restart() {
    let mut bus = Bus::single().await;
    let _echo = bus.serve(mesh_echo::module()).await;
    let client = bus.client().await;
    let call = echo_once;
    for _ in 0..20 {
        assert_eq!(call(client.clone()).await, Outcome::Result);
    }
    // Eight callers keep calling while the server goes away and comes back.
    let stop = Arc::new(AtomicBool::new(false));
    let tally = Arc::new(Tally::default());
    let mut callers = Vec::new();
    for _ in 0..8 {
        let (client, stop, tally, call) = (client.clone(), stop.clone(), tally.clone(), call);
        callers.push(tokio::spawn(async move {
            let mut seen: BTreeMap<&'static str, usize> = BTreeMap::new();
            while !stop.load(Ordering::Relaxed) {
                let outcome = call(client.clone()).await;
                tally.count(outcome);
                *seen.entry(outcome.name()).or_default() += 1;
                // Not a step: a pause between calls, so that callers whose calls fail at once
                // (the bus down: not sent) do not spin.
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            seen
        }));
    }
    until("the callers never got a result", || tally.results() >= 8).await;
    let before = tally.others();
    bus.server.stop().await;
    // Down until the callers have seen it gone.
    until("the callers never saw the server gone", || {
        tally.others() > before
    })
    .await;
    bus.server.restart().await.unwrap();
    // Recovery without restarting anything: the same client and module work again.
    let mut recovered = false;
    for _ in 0..100 {
        if call(client.clone()).await == Outcome::Result {
            recovered = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(recovered, "calls never succeeded again after the restart");
    // The callers get results again too.
    let recovered_at = tally.results();
    until("the callers never recovered", || {
        tally.results() >= recovered_at + 8
    })
    .await;
    stop.store(true, Ordering::Relaxed);
    let mut total: BTreeMap<&'static str, usize> = BTreeMap::new();
    for c in callers {
        for (k, n) in c.await.unwrap() {
            *total.entry(k).or_default() += n;
        }
    }
    // The gap shows as slow, nobody serves or connection trouble; never as denied or a tool
    // error, and never as a hang (every caller finished).
    for kind in total.keys() {
        assert!(
            ["result", "slow", "nobody_serves", "connection"].contains(kind),
            "{total:?}"
        );
    }
    assert!(total.get("result").copied().unwrap_or(0) > 0, "{total:?}");
    assert!(total.len() > 1, "the gap was seen: {total:?}");
    for _ in 0..20 {
        assert_eq!(call(client.clone()).await, Outcome::Result);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_module_killed_mid_call_is_slow_and_another_instance_takes_over() {
    let bus = Bus::single().await;
    let dir = tempfile::tempdir().unwrap();
    let url = bus.url();
    let client = bus.client().await;
    let run_echo = |n: &str| {
        mesh(
            &["--server", &url, "run", "echo"],
            &[("XDG_STATE_HOME", dir.path())],
            &dir.path().join(format!("echo-{n}.log")),
        )
    };
    let mut a = run_echo("a");
    wait_for_instances(&client, "echo", 1, dir.path()).await;
    // A long call goes to the only instance, a.
    let mut sleeps = tap(&client, "echo", "sleep").await;
    let pending = long_call(&client, Duration::from_secs(3));
    until_held(&mut sleeps, &client, "echo", dir.path()).await;
    let _b = run_echo("b");
    wait_for_instances(&client, "echo", 2, dir.path()).await;
    a.start_kill().unwrap();
    a.wait().await.unwrap();
    // The call a held is reported slow: served, no answer in time (NATS cannot tell a
    // requester that its responder died).
    let r = pending.await.unwrap();
    assert_eq!(outcome(&r), Outcome::Slow, "{r:?}");
    assert!(
        r.unwrap_err()
            .to_string()
            .contains("echo_sleep is served but did not answer")
    );
    // b answers everything from now on.
    for _ in 0..20 {
        let r = client
            .call(&name("echo"), &json!({"text": "b"}), GENEROUS)
            .await;
        assert_eq!(outcome(&r), Outcome::Result, "{r:?}");
    }
}

/// decide in a process of its own (state in `state/mesh/decide`), avu served by the test.
struct DecideProcess {
    bus: Bus,
    state: tempfile::TempDir,
    child: Option<Child>,
    /// The catalogue: the ticket issuer decide_apply's writes need.
    _catalog: crate::bus::Running,
}

impl DecideProcess {
    fn decide_dir(&self) -> PathBuf {
        self.state.path().join("mesh/decide")
    }

    fn avu_dir(&self) -> PathBuf {
        self.state.path().join("mesh/avu")
    }

    async fn start(&mut self, ann: &Client) {
        let login = self.bus.flags("decide");
        let login: Vec<&str> = login.iter().map(String::as_str).collect();
        self.child = Some(mesh(
            &[&login[..], &["run", "decide", "--layout", "accounts"]].concat(),
            &[("XDG_STATE_HOME", self.state.path())],
            &self.state.path().join("decide.log"),
        ));
        // Ready when a call is answered (a registered catalogue entry is not proof).
        for _ in 0..300 {
            let r = ann
                .call(&name("decide_health"), &json!({}), Duration::from_secs(1))
                .await;
            if outcome(&r) == Outcome::Result {
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!(
            "decide never answered: {}",
            std::fs::read_to_string(self.state.path().join("decide.log")).unwrap_or_default()
        );
    }

    async fn kill(&mut self) {
        let mut child = self.child.take().unwrap();
        child.start_kill().unwrap();
        child.wait().await.unwrap();
    }

    fn counts(&self) -> BTreeMap<&'static str, i64> {
        let db = rusqlite::Connection::open(self.decide_dir().join("sidecar.sqlite")).unwrap();
        ["runs", "decisions", "overrides", "labels", "avu_links"]
            .into_iter()
            .map(|t| {
                let n = db
                    .query_row(&format!("SELECT count(*) FROM {t}"), [], |r| r.get(0))
                    .unwrap();
                (t, n)
            })
            .collect()
    }

    fn links(&self, run: &str) -> Vec<(String, Option<i64>)> {
        let db = rusqlite::Connection::open(self.decide_dir().join("sidecar.sqlite")).unwrap();
        let mut q = db
            .prepare(
                "SELECT status, snapshot_id FROM avu_links WHERE run_id = ?1 AND path IS NOT NULL",
            )
            .unwrap();
        q.query_map([run], |r| Ok((r.get(0)?, r.get(1)?)))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap()
    }
}

async fn decide_process() -> (DecideProcess, Client) {
    let bus = Bus::accounts_with(
        &[
            bus::module("catalog"),
            bus::module("avu"),
            bus::acting_for_people("decide", &["avu"]),
        ],
        &[("ann", &["mesh.>"])],
    )
    .await;
    let catalog = bus.serve_catalog().await;
    let state = tempfile::tempdir().unwrap();
    import_fixtures(&state.path().join("mesh/decide/ontology.sqlite"));
    let ann = bus.client_as(Some("ann")).await;
    let mut p = DecideProcess {
        bus,
        state,
        child: None,
        _catalog: catalog,
    };
    p.start(&ann).await;
    (p, ann)
}

fn avu_module(p: &DecideProcess) -> Module {
    let config =
        mesh_avu::Config::in_dir(&p.avu_dir(), &p.decide_dir().join("ontology.sqlite")).unwrap();
    mesh_avu::module(config).unwrap()
}

/// Annotates the example card and answers every group of an `accept=proposed` apply with
/// its best candidate, except the last answer: returns (run id, the final call's arguments).
async fn picks_but_the_last(ann: &Client, path: &str) -> (String, Value) {
    let card = include_str!("../cards/example.md");
    let r = ann
        .call(
            &name("decide_annotate"),
            &json!({"card_text": card}),
            GENEROUS,
        )
        .await
        .unwrap();
    let run = r.structured_content.unwrap()["run_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let args = json!({"run_id": run, "path": path, "accept": "proposed", "dry_run": false});
    let mut r = ann
        .call(&name("decide_apply"), &args, GENEROUS)
        .await
        .unwrap();
    loop {
        assert!(r.needs_input(), "{}", r.text_content());
        let (key, form) = r.input_requests.as_ref().unwrap().iter().next().unwrap();
        let best =
            form["params"]["requestedSchema"]["properties"]["candidate"]["oneOf"][0]["const"]
                .clone();
        let mut next = args.clone();
        next["requestState"] = json!(r.request_state.clone().unwrap());
        next["inputResponses"] = json!({key: {"action": "accept", "content": {"candidate": best}}});
        if form["params"]["message"]
            .as_str()
            .unwrap()
            .contains("(1 open group left")
        {
            return (run, next);
        }
        r = ann
            .call(&name("decide_apply"), &next, GENEROUS)
            .await
            .unwrap();
    }
}

/// A real apply of what the run has accepted, as a person re-running it would.
async fn reapply(ann: &Client, run: &str, path: &str) -> Value {
    let r = ann
        .call(
            &name("decide_apply"),
            &json!({"run_id": run, "path": path, "dry_run": false}),
            GENEROUS,
        )
        .await
        .unwrap();
    assert!(!r.is_error, "{}", r.text_content());
    r.structured_content.unwrap()
}

fn history_adds(avu_dir: &Path, path: &str) -> Vec<Avu> {
    let mut store = Store::open(&avu_dir.join("avu.sqlite")).unwrap();
    store
        .history(path)
        .unwrap()
        .into_iter()
        .filter(|c| c.op == "add")
        .map(|c| c.avu)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn decide_killed_after_the_avu_write_completes_on_the_next_apply() {
    let (mut p, ann) = decide_process().await;
    // An avu that writes for real, says so, and then never answers: decide is killed while
    // it waits, after the AVUs are in the store and before its sidecar says so.
    let store = Arc::new(std::sync::Mutex::new(
        Store::open(&p.avu_dir().join("avu.sqlite")).unwrap(),
    ));
    let (wrote_tx, mut wrote) = tokio::sync::mpsc::channel::<()>(1);
    let stuck = Module::new("avu", "1.0.0", "writes, then hangs").tool(Tool::new(
        "add",
        "writes, then hangs",
        json!({"type": "object"}),
        move |call: Call| {
            let (store, wrote_tx) = (store.clone(), wrote_tx.clone());
            async move {
                let avus: Vec<Avu> = serde_json::from_value(call.args["avus"].clone()).unwrap();
                let actor = call.actor().unwrap().to_string();
                let by = Writer {
                    actor: &actor,
                    via: call.module(),
                    answers: None,
                    source: None,
                };
                let path = call.args["path"].as_str().unwrap().to_owned();
                store.lock().unwrap().add(&path, &avus, &by).unwrap();
                let _ = wrote_tx.send(()).await;
                std::future::pending::<ToolResult>().await
            }
        },
    ));
    let stuck_running = p
        .bus
        .serve_with(
            stuck,
            ServeOptions {
                drain_timeout: Duration::from_millis(100),
                register_every: None,
                ..ServeOptions::default()
            },
        )
        .await;
    let path = "/mesh/home/ann/traps";
    let (run, last) = picks_but_the_last(&ann, path).await;
    let last_call = {
        let ann = ann.clone();
        tokio::spawn(async move {
            ann.call(&name("decide_apply"), &last, Duration::from_secs(60))
                .await
        })
    };
    wrote.recv().await.unwrap();
    let written_once = history_adds(&p.avu_dir(), path);
    assert!(!written_once.is_empty());
    let before = p.counts();
    p.kill().await;
    last_call.abort();
    stuck_running.stop().await;

    // The real avu comes back over the same store, decide restarts over the same sidecar.
    let _avu = p.bus.serve(avu_module(&p)).await;
    p.start(&ann).await;
    assert_eq!(
        p.counts(),
        before,
        "no sidecar row lost: the last pick was committed"
    );
    assert!(
        p.links(&run).is_empty(),
        "the sidecar never heard the write back"
    );
    let out = reapply(&ann, &run, path).await;
    let snapshot = out["snapshot"].as_i64().expect("mirrored");
    // avu had them all: none added twice.
    assert_eq!(history_adds(&p.avu_dir(), path), written_once);
    let links = p.links(&run);
    assert_eq!(links.len(), written_once.len());
    assert!(
        links
            .iter()
            .all(|(s, snap)| s == "written" && *snap == Some(snapshot))
    );
    let lake = Lake::open(&p.decide_dir().join("lake")).unwrap();
    assert_eq!(lake.insert_snapshots().unwrap(), vec![snapshot]);
    assert_eq!(lake.events().unwrap().len(), written_once.len());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn decide_killed_during_the_mirror_mirrors_once_on_the_next_apply() {
    let (mut p, ann) = decide_process().await;
    let _avu = p.bus.serve(avu_module(&p)).await;
    let path = "/mesh/home/ann/traps";
    let (run, last) = picks_but_the_last(&ann, path).await;
    // The test holds the lake: decide's mirror waits for it, and is killed while it waits.
    let held = Lake::open(&p.decide_dir().join("lake")).unwrap();
    let last_call = {
        let ann = ann.clone();
        tokio::spawn(async move {
            ann.call(&name("decide_apply"), &last, Duration::from_secs(60))
                .await
        })
    };
    // Written to avu and not yet mirrored: decide waits for the lake.
    until("decide never wrote", || {
        let links = p.links(&run);
        !links.is_empty()
            && links
                .iter()
                .all(|(s, snap)| s == "written" && snap.is_none())
    })
    .await;
    p.kill().await;
    last_call.abort();
    drop(held);
    let written = history_adds(&p.avu_dir(), path);
    assert_eq!(p.links(&run).len(), written.len());

    p.start(&ann).await;
    let out = reapply(&ann, &run, path).await;
    assert_eq!(out["written"], json!([]), "nothing written to avu twice");
    let snapshot = out["snapshot"].as_i64().expect("mirrored now");
    assert_eq!(history_adds(&p.avu_dir(), path), written);
    let lake = Lake::open(&p.decide_dir().join("lake")).unwrap();
    assert_eq!(
        lake.insert_snapshots().unwrap(),
        vec![snapshot],
        "one snapshot, none empty"
    );
    let events = lake.events().unwrap();
    assert_eq!(events.len(), written.len());
    let ids: std::collections::HashSet<_> = events.iter().map(|(_, e)| e.link_id.clone()).collect();
    assert_eq!(ids.len(), events.len(), "no event twice");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_killed_console_gives_its_client_a_transport_error() {
    use tokio::io::AsyncBufReadExt;
    let bus = Bus::single().await;
    let _catalog = bus.serve_catalog().await;
    let _echo = bus.serve(mesh_echo::module()).await;
    let watcher = bus.client().await;
    let mut sleeps = tap(&watcher, "echo", "sleep").await;
    let dir = tempfile::tempdir().unwrap();
    for mode in ["legacy", "2026-07-28"] {
        let port_file = dir.path().join(format!("serve-{mode}.log"));
        let mut serve = Command::new(env!("CARGO_BIN_EXE_mesh"))
            .env("MESH_CONSOLE_TOKEN", "a-token")
            .args(["--server", &bus.url(), "serve", "--port", "0"])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&port_file).unwrap())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        let mut lines = tokio::io::BufReader::new(serve.stdout.take().unwrap()).lines();
        let url = loop {
            let line = lines
                .next_line()
                .await
                .unwrap()
                .expect("mesh serve prints its URL");
            if let Some(at) = line.find("http://") {
                break line[at..].split_whitespace().next().unwrap().to_owned();
            }
        };
        let script = format!("{}/tests/py/killed_console.py", env!("CARGO_MANIFEST_DIR"));
        let mut client = Command::new(python())
            .env("MESH_CONSOLE_TOKEN", "a-token")
            .args([&script, mode, &url])
            .stdout(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        let mut out = tokio::io::BufReader::new(client.stdout.take().unwrap()).lines();
        let ready = out.next_line().await.unwrap().expect("the client connects");
        assert!(ready.contains("\"ready\""), "{ready}");
        // Its call is in flight: the console has put it on the bus and waits for the answer.
        until_sent(&mut sleeps).await;
        serve.start_kill().unwrap();
        serve.wait().await.unwrap();
        // Not a hang: the client's call ends soon after (the bound only catches a hang).
        let ended = tokio::time::timeout(Duration::from_secs(60), out.next_line())
            .await
            .unwrap_or_else(|_| panic!("{mode}: the MCP client hung after the console died"))
            .unwrap()
            .expect("the client reports");
        let ended: Value = serde_json::from_str(&ended).unwrap();
        assert_eq!(ended["outcome"], "error", "{mode}: {ended}");
        let _ = client.wait().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn mesh_run_stops_on_sigterm_after_its_bus_is_gone() {
    let mut bus = Bus::single().await;
    let dir = tempfile::tempdir().unwrap();
    let client = bus.client().await;
    let mut echo = mesh(
        &["-v", "--server", &bus.url(), "run", "echo"],
        &[("XDG_STATE_HOME", dir.path())],
        &dir.path().join("echo.log"),
    );
    wait_for_instances(&client, "echo", 1, dir.path()).await;
    // A call in flight, then the bus goes away under it.
    let mut sleeps = tap(&client, "echo", "sleep").await;
    let pending = long_call(&client, Duration::from_secs(30));
    until_held(&mut sleeps, &client, "echo", dir.path()).await;
    bus.server.stop().await;
    // SAFETY: signalling our own child.
    unsafe { libc::kill(echo.id().unwrap() as i32, libc::SIGTERM) };
    // A bound that only catches a hang (systemd would SIGKILL after 90 s).
    let status = tokio::time::timeout(Duration::from_secs(30), echo.wait())
        .await
        .unwrap_or_else(|_| {
            panic!(
                "mesh run ignored SIGTERM with its bus gone: {}",
                std::fs::read_to_string(dir.path().join("echo.log")).unwrap_or_default()
            )
        })
        .unwrap();
    assert_eq!(status.code(), Some(0));
    pending.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn long_running_commands_stop_on_sigterm_before_their_bus_ever_came() {
    // A port nobody listens on: the first connection is retried for ever.
    let nobody = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("nats://{}", nobody.local_addr().unwrap());
    drop(nobody);
    let dir = tempfile::tempdir().unwrap();
    for (command, args) in [
        ("run", &["run", "echo"][..]),
        ("serve", &["serve", "--port", "0"][..]),
    ] {
        let log = dir.path().join(format!("{command}.log"));
        let mut all = vec!["-v", "--server", &url];
        all.extend_from_slice(args);
        let mut child = mesh(&all, &[("XDG_STATE_HOME", dir.path())], &log);
        // Once it says it cannot reach the bus, it is past start-up and retrying.
        tokio::time::timeout(Duration::from_secs(30), async {
            while !std::fs::read_to_string(&log)
                .unwrap_or_default()
                .contains("IO error")
            {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        })
        .await
        .unwrap_or_else(|_| panic!("mesh {command} never tried the bus"));
        // SAFETY: signalling our own child.
        unsafe { libc::kill(child.id().unwrap() as i32, libc::SIGTERM) };
        let status = tokio::time::timeout(Duration::from_secs(30), child.wait())
            .await
            .unwrap_or_else(|_| panic!("mesh {command} ignored SIGTERM while connecting"))
            .unwrap();
        // Stopped by itself, not by the signal's default action.
        assert_eq!(
            status.code(),
            Some(0),
            "mesh {command}: {status:?} {}",
            std::fs::read_to_string(&log).unwrap_or_default()
        );
    }
}

/// A module draining (a call in flight, a long drain allowed) whose bus goes away meanwhile
/// stops when the connection does, not when the drain's time is up or the call ends: no
/// reply could leave.
#[tokio::test]
async fn a_drain_ends_when_the_bus_goes_away_mid_drain() {
    let mut bus = Bus::single().await;
    let client = bus.client().await;
    let options = ServeOptions {
        drain_timeout: Duration::from_secs(600),
        ..Default::default()
    };
    let mut echo = bus.serve_with(mesh_echo::module(), options).await;
    let dir = tempfile::tempdir().unwrap();
    let mut sleeps = tap(&client, "echo", "sleep").await;
    // Longer than the bound below: a drain that waited for it would fail the test.
    let _pending = {
        let client = client.clone();
        tokio::spawn(async move {
            let args = json!({"ms": 2 * HANG.as_millis() as u64});
            client.call(&name("echo_sleep"), &args, 3 * HANG).await
        })
    };
    until_held(&mut sleeps, &client, "echo", dir.path()).await;
    echo.begin_stop();
    // Draining: the call in flight holds the stop up.
    tokio::time::sleep(Duration::from_millis(300)).await;
    bus.server.stop().await;
    tokio::time::timeout(HANG, echo.join())
        .await
        .expect("the drain waited out its time although the bus was gone");
}

/// `mesh mcp` whose client closes stdin while a call waits on a bus that has gone away ends
/// at once, with the serve loop: the calls it runs beside the loop do not hold it.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn mesh_mcp_ends_with_its_stdin_while_a_call_waits_on_a_gone_bus() {
    use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
    let mut bus = Bus::single().await;
    let _catalog = bus.serve_catalog().await;
    let _echo = bus.serve(mesh_echo::module()).await;
    let watcher = bus.client().await;
    let mut sleeps = tap(&watcher, "echo", "sleep").await;
    let dir = tempfile::tempdir().unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_mesh"))
        .args(["--server", &bus.url(), "mcp", "--timeout", "600s"])
        .env("HOME", dir.path())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(dir.path().join("mcp.log")).unwrap())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut say = async |line: String| {
        let line = format!("{line}\n");
        stdin.write_all(line.as_bytes()).await
    };
    say(r#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"raw","version":"0"}}}"#.into()).await.unwrap();
    let init = tokio::time::timeout(HANG, stdout.next_line())
        .await
        .unwrap()
        .unwrap();
    assert!(init.is_some_and(|l| l.contains("\"result\"")));
    say(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#.into())
        .await
        .unwrap();
    // Catalogued first (the module registered just now).
    let mut listed = false;
    for n in 1..100 {
        say(format!(r#"{{"jsonrpc":"2.0","id":{n},"method":"tools/call","params":{{"name":"echo","arguments":{{"text":"hi"}}}}}}"#)).await.unwrap();
        let line = tokio::time::timeout(HANG, stdout.next_line())
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        if line.contains("\"hi\"") {
            listed = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(listed, "echo never listed");
    say(r#"{"jsonrpc":"2.0","id":"slow","method":"tools/call","params":{"name":"echo_sleep","arguments":{"ms":300000}}}"#.into()).await.unwrap();
    until_sent(&mut sleeps).await;
    bus.server.stop().await;
    drop(stdin);
    let status = tokio::time::timeout(HANG, child.wait())
        .await
        .unwrap_or_else(|_| {
            panic!(
                "mesh mcp did not end with its stdin: {}",
                std::fs::read_to_string(dir.path().join("mcp.log")).unwrap_or_default()
            )
        })
        .unwrap();
    assert_eq!(status.code(), Some(0), "{status:?}");
}
