//! `mesh up` keeps its layout: a grants file written once, credentials reused on every
//! start, a reload that changes who may do what without dropping a connection — and a module
//! nobody here wrote (Python, nats-py) joining it the way README's "Add your own module" says.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use futures_util::StreamExt;
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt as _, BufReader};
use tokio::process::Child;

use crate::bus::{alive, json_of, python};
use crate::cli::{command, mesh};

const MESH: &str = env!("CARGO_BIN_EXE_mesh");

/// A running `mesh up` in a home of its own.
pub(crate) struct Up {
    child: Child,
    state: PathBuf,
    /// Where its stderr goes.
    said: PathBuf,
    /// The first nats-server's pid (of a cluster, the first named).
    server_pid: i32,
    server_pids: Vec<i32>,
    /// What it printed up to "Ctrl-C stops everything".
    pub(crate) banner: String,
}

pub(crate) async fn up(home: &Path) -> Up {
    up_with(home, &[]).await
}

async fn up_with(home: &Path, more: &[&str]) -> Up {
    up_as(home, Some("tester"), more).await
}

/// `mesh up` as `person` (`--as`), or, without one, as `mesh up` chooses with no `$USER`.
async fn up_as(home: &Path, person: Option<&str>, more: &[&str]) -> Up {
    let state = home.join("up");
    let mut cmd = command(home);
    cmd.args(["up", "--dir", state.to_str().unwrap()]);
    match person {
        Some(p) => {
            cmd.args(["--as", p]);
        }
        None => {
            cmd.env_remove("USER");
        }
    }
    // A process group of its own, as a shell gives a foreground job: Ctrl-C reaches it whole.
    let said = home.join("mesh-up.stderr");
    let mut child = cmd
        .args(more)
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(&said).unwrap())
        .process_group(0)
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut server_pids = Vec::new();
    let mut banner = String::new();
    let ready = async {
        while let Some(line) = lines.next_line().await.unwrap() {
            banner.push_str(&line);
            banner.push('\n');
            if let Some(rest) = line.split("(pid ").nth(1)
                && let Some(pid) = rest.split(')').next().and_then(|p| p.parse::<i32>().ok())
            {
                server_pids.push(pid);
            }
            if line.starts_with("Ctrl-C stops everything") {
                return;
            }
        }
        panic!("mesh up ended before it was up");
    };
    tokio::time::timeout(Duration::from_secs(60), ready)
        .await
        .expect("mesh up came up");
    // What it prints ends up in logs and scrollback: never the console's token.
    let token = std::fs::read_to_string(home.join("state/mesh/console.token"))
        .expect("mesh up made the console's token");
    assert!(
        !token.trim().is_empty() && !banner.contains(token.trim()),
        "the banner shows the console's token:\n{banner}"
    );
    // Keep reading so that mesh up never blocks on a full pipe.
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
    Up {
        child,
        state,
        said,
        banner,
        server_pid: *server_pids
            .first()
            .expect("mesh up names nats-server's pid"),
        server_pids,
    }
}

impl Up {
    /// Ctrl-C as a terminal sends it: SIGINT to the whole process group.
    pub(crate) async fn stop(mut self) {
        let group = self.child.id().unwrap() as i32;
        // SAFETY: signalling our own child's process group.
        unsafe { libc::kill(-group, libc::SIGINT) };
        let status = tokio::time::timeout(Duration::from_secs(60), self.child.wait())
            .await
            .expect("mesh up stops after Ctrl-C to its process group")
            .unwrap();
        assert_eq!(status.code(), Some(0));
        // Every server it ran (a test that had one started again adds its new pid).
        for pid in &self.server_pids {
            assert!(!alive(*pid), "nats-server {pid} outlived mesh up");
        }
    }

    fn grants(&self) -> PathBuf {
        self.state.join("grants.conf")
    }

    /// Rewrites its grants file (`edit` of what is there, which must change it) and has it
    /// reloaded: what `mesh up --reload` printed.
    async fn regrant(&self, home: &Path, edit: impl FnOnce(&str) -> String) -> String {
        let grants = std::fs::read_to_string(self.grants()).unwrap();
        let edited = edit(&grants);
        assert_ne!(edited, grants, "the edit changes the grants file");
        std::fs::write(self.grants(), edited).unwrap();
        let state = self.state.to_str().unwrap();
        let (code, out, err) = mesh(home, &["up", "--reload", "--dir", state]).await;
        assert_eq!(code, 0, "{out}{err}");
        out
    }

    /// Waits until its stderr says `what` (a minute at most: only a hang fails here).
    async fn says(&self, what: &str) -> String {
        for _ in 0..600 {
            let said = std::fs::read_to_string(&self.said).unwrap_or_default();
            if said.contains(what) {
                return said;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        panic!(
            "mesh up never said {what:?}:\n{}",
            std::fs::read_to_string(&self.said).unwrap_or_default()
        );
    }
}

fn context(home: &Path, name: &str) -> Value {
    let path = home.join(format!("config/nats/context/{name}.json"));
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("context {name} ({}): {e}", path.display()));
    serde_json::from_str(&text).unwrap()
}

/// `mesh audit calls --json` with `more`, read again until a row is `wanted` (or ten
/// seconds pass: the rows as they are then).
async fn audited(home: &Path, more: &[&str], wanted: impl Fn(&Value) -> bool) -> Vec<Value> {
    let mut args = vec!["audit", "calls", "--json"];
    args.extend_from_slice(more);
    let mut rows = Vec::new();
    for _ in 0..100 {
        let (code, out, err) = mesh(home, &args).await;
        assert_eq!(code, 0, "{err}");
        rows = out
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        if rows.iter().any(&wanted) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    rows
}

/// A connection as the `nats` context `name` says.
async fn connect_as(home: &Path, name: &str) -> async_nats::Client {
    let ctx = context(home, name);
    let s = |k: &str| ctx[k].as_str().unwrap().to_owned();
    async_nats::ConnectOptions::with_user_and_password(s("user"), s("password"))
        .custom_inbox_prefix(s("inbox_prefix"))
        .connect(s("url"))
        .await
        .unwrap()
}

fn mode(path: &Path) -> u32 {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).unwrap().permissions().mode() & 0o777
}

/// Polls `mesh tools --json` until `tool` is listed (a bound that only catches a hang).
async fn wait_listed(home: &Path, tool: &str) {
    for _ in 0..200 {
        let (code, out, _) = mesh(home, &["tools", "--json"]).await;
        if code == 0 && out.contains(&format!("\"{tool}\"")) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("{tool} never listed");
}

/// An async-nats connection that counts its disconnections.
async fn watched(
    home: &Path,
    context_name: &str,
) -> (async_nats::Client, tokio::sync::watch::Receiver<u32>) {
    let ctx = context(home, context_name);
    let (tx, rx) = tokio::sync::watch::channel(0u32);
    let client = async_nats::ConnectOptions::with_user_and_password(
        ctx["user"].as_str().unwrap().into(),
        ctx["password"].as_str().unwrap().into(),
    )
    .custom_inbox_prefix(ctx["inbox_prefix"].as_str().unwrap())
    .event_callback(move |event| {
        if matches!(event, async_nats::Event::Disconnected) {
            tx.send_modify(|n| *n += 1);
        }
        async {}
    })
    .connect(ctx["url"].as_str().unwrap())
    .await
    .unwrap();
    (client, rx)
}

/// An agent in the official MCP Python SDK, on `mesh mcp` with the person's context in
/// `home`, lists the tools and calls one: what it saw, as JSON.
async fn agent_calls(home: &Path, tool: &str, arguments: &str) -> serde_json::Value {
    json_of(
        tokio::process::Command::new(python())
            .args([
                &format!("{}/tests/py/call_tool.py", env!("CARGO_MANIFEST_DIR")),
                MESH,
                tool,
                arguments,
            ])
            .env("XDG_CONFIG_HOME", home.join("config"))
            .env("HOME", home),
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_python_module_joins_a_running_mesh_by_its_grants_file() {
    let home = tempfile::tempdir().unwrap();
    let home = home.path();
    let first = up(home).await;

    // The layout is a file of its own, written once; every credential is kept, privately.
    let grants = std::fs::read_to_string(first.grants()).unwrap();
    assert!(
        grants.contains("decide { calls_for_people: [avu] }"),
        "{grants}"
    );
    assert!(
        grants.contains("tester { roles: [everything] }"),
        "{grants}"
    );
    let credentials = first.state.join("credentials.json");
    assert_eq!(mode(&credentials), 0o600);
    assert_eq!(mode(&first.state.join("nats-server.conf")), 0o600);
    for name in ["catalog", "echo", "avu", "decide", "tester", "guest"] {
        let ctx = context(home, &format!("mesh-{name}"));
        assert_eq!(ctx["user"], name);
        assert_eq!(
            mode(&home.join(format!("config/nats/context/mesh-{name}.json"))),
            0o600
        );
    }
    assert_eq!(context(home, "mesh")["user"], "tester");

    // Someone is connected, and a call is in flight (the server has it, echo sleeps on it),
    // while the layout changes.
    let (tester, disconnects) = watched(home, "mesh-tester").await;
    let inbox = format!(
        "{}.in-flight",
        context(home, "mesh-tester")["inbox_prefix"]
            .as_str()
            .unwrap()
    );
    let mut replies = tester.subscribe(inbox.clone()).await.unwrap();
    tester
        .publish_with_reply("mesh.echo.sleep", inbox, r#"{"ms": 1500}"#.into())
        .await
        .unwrap();
    crate::bus::round_trip(&tester).await;

    // README, "Add your own module": 1. declare it in the grants file ...
    let edited = grants.replace("  # units {}", "  units {}");
    assert_ne!(edited, grants, "the grants file has the commented example");
    std::fs::write(first.grants(), &edited).unwrap();
    // ... 2. reload ...
    let state = first.state.to_str().unwrap();
    let (code, out, err) = mesh(home, &["up", "--reload", "--dir", state]).await;
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("reloaded"), "{out}");
    let units = context(home, "mesh-units");
    assert_eq!(units["user"], "units");

    // Nobody was dropped, and the call in flight ended as it would have.
    let reply = tokio::time::timeout(Duration::from_secs(10), replies.next())
        .await
        .expect("the call in flight got its answer")
        .unwrap();
    assert!(
        String::from_utf8_lossy(&reply.payload).contains("slept 1500 ms"),
        "{reply:?}"
    );
    assert_eq!(*disconnects.borrow(), 0, "a reload dropped a connection");

    // ... 3. start the module with its own context ...
    let script = format!("{}/examples/python/units.py", env!("CARGO_MANIFEST_DIR"));
    let mut module = tokio::process::Command::new(python());
    module
        .args([script.as_str(), "--context", "mesh-units"])
        .env("XDG_CONFIG_HOME", home.join("config"))
        .stderr(Stdio::null())
        .kill_on_drop(true);
    let mut module = module.spawn().unwrap();

    // ... 4. it is listed, and called from the command line and over MCP ...
    wait_listed(home, "units_convert").await;
    let (code, out, err) = mesh(
        home,
        &["call", "units_convert", "value=100", "from=cm", "to=m"],
    )
    .await;
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("100 cm = 1 m"), "{out}");
    let (code, out, _) = mesh(
        home,
        &["call", "units_convert", "value=1", "from=kg", "to=C"],
    )
    .await;
    assert_eq!(code, 1, "a tool error: {out}");
    let (code, _, _) = mesh(
        home,
        &[
            "--context",
            "mesh-guest",
            "call",
            "units_convert",
            "value=1",
            "from=m",
            "to=cm",
        ],
    )
    .await;
    assert_eq!(code, 4, "the guest's role does not reach units");
    let seen = agent_calls(
        home,
        "units_convert",
        r#"{"value": 32, "from": "F", "to": "C"}"#,
    )
    .await;
    assert!(
        seen["tools"]
            .as_array()
            .unwrap()
            .contains(&json!("units_convert")),
        "{seen}"
    );
    assert_eq!(seen["isError"], false, "{seen}");
    assert_eq!(
        seen["structured"],
        json!({"value": 0.0, "unit": "C"}),
        "{seen}"
    );

    // ... 5. and where its grant does not reach, it is refused: with its own credentials
    // it may call no tool, act for nobody, and register as nobody but itself.
    for args in [
        vec!["call", "echo", "text=x"],
        vec![
            "call",
            "avu_add",
            "path=/mesh/home/tester/x",
            "attribute=a",
            "value=1",
        ],
    ] {
        let mut all = vec!["--context", "mesh-units"];
        all.extend(args.iter());
        let (code, _, err) = mesh(home, &all).await;
        assert_eq!(code, 4, "{args:?}: {err}");
    }
    let (code, out, err) = mesh(
        home,
        &[
            "--context", "mesh-units", "call", "catalog_register",
            r#"{"module": "echo", "version": "9.9.9", "tools": [], "instance": "x", "started_ms": 0}"#,
        ],
    )
    .await;
    assert_eq!(code, 1, "the catalogue refuses it: {out}{err}");
    assert!(
        format!("{out}{err}").contains("cannot register"),
        "{out}{err}"
    );

    // A grants file that does not parse changes nothing, and says why.
    std::fs::write(first.grants(), "modules { units {").unwrap();
    let (code, _, err) = mesh(home, &["up", "--reload", "--dir", state]).await;
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("nothing changed"), "{err}");
    let (code, _, err) = mesh(
        home,
        &["call", "units_convert", "value=1", "from=m", "to=cm"],
    )
    .await;
    assert_eq!(code, 0, "{err}");
    std::fs::write(first.grants(), &edited).unwrap();

    // SIGTERM to the module: it says it stopped.
    // SAFETY: signalling our own child.
    unsafe { libc::kill(module.id().unwrap() as i32, libc::SIGTERM) };
    let status = tokio::time::timeout(Duration::from_secs(30), module.wait())
        .await
        .expect("the module stops on SIGTERM")
        .unwrap();
    assert!(status.success());
    let (code, out, _) = mesh(home, &["call", "catalog_modules", "module=units"]).await;
    assert_eq!(code, 0);
    assert!(out.contains("0 running"), "{out}");

    // Stopped and started again: the same grants, the same passwords, the same contexts.
    let passwords = std::fs::read_to_string(&credentials).unwrap();
    drop(tester);
    first.stop().await;
    let second = up(home).await;
    assert_eq!(std::fs::read_to_string(second.grants()).unwrap(), edited);
    assert_eq!(std::fs::read_to_string(&credentials).unwrap(), passwords);
    assert_eq!(context(home, "mesh-units")["password"], units["password"]);
    let (code, out, err) = mesh(home, &["call", "echo_whoami"]).await;
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("tester@PEOPLE"), "{out}");
    // The first mesh's modules unregistered while stopping, the catalogue last of them.
    let (code, out, err) = mesh(home, &["call", "catalog_modules", "--json"]).await;
    assert_eq!(code, 0, "{err}");
    let listed: Value = serde_json::from_str(&out).unwrap();
    for m in listed["structuredContent"]["modules"].as_array().unwrap() {
        let expected = if m["module"] == "units" { 0 } else { 1 };
        assert_eq!(m["instances"], expected, "{m}");
    }
    second.stop().await;
}

/// `mesh up` learns each module's tools from the catalogue and routes them apart, kept for
/// its next start: nats-server's record of a call names the tool (the module's word cannot
/// recast it), and the verbs its clients use all the time are no calls, so none is logged.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mesh_up_routes_each_tool_it_learned_and_the_log_names_it() {
    let home = tempfile::tempdir().unwrap();
    let home = home.path();
    let running = up(home).await;
    let learned: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(running.state.join("tools.json")).unwrap())
            .unwrap();
    for (module, tool) in [("echo", "echo"), ("avu", "add"), ("catalog", "modules")] {
        assert!(learned[module].get(tool).is_some(), "{learned}");
        let conf = std::fs::read_to_string(running.state.join("nats-server.conf")).unwrap();
        let witnessed = format!("subject: \"_R_.mesh-log.calls.{module}.{tool}\" }}");
        assert!(conf.contains(&witnessed), "no {witnessed} in the layout");
    }
    let (code, out, err) = mesh(home, &["call", "echo", "text=hi"]).await;
    assert_eq!(code, 0, "{out}{err}");
    let rows = audited(home, &["--all"], |r| {
        r["tool"] == "echo" && r["seen"] == "bus_and_module"
    })
    .await;
    let echo: Vec<_> = rows.iter().filter(|r| r["tool"] == "echo").collect();
    assert_eq!(echo.len(), 1, "{rows:#?}");
    assert_eq!(echo[0]["caller"], "tester@PEOPLE");
    // `mesh call` read echo's tools and the catalogue's listing: neither is a call.
    assert!(
        rows.iter()
            .all(|r| r["tool"] != "tools" && r["tool"] != "listing"),
        "{rows:#?}"
    );
    running.stop().await;
}

/// How many times the (first) nats-server reloaded its configuration, by its own log.
fn reloads(state: &Path) -> usize {
    std::fs::read_to_string(state.join("nats-server.log"))
        .unwrap_or_default()
        .matches("Reloaded server configuration")
        .count()
}

/// Waits until nats-server has reloaded `more` times since it had reloaded `since` times
/// (`mesh up` reloads twice for each change it applies).
async fn reloaded(state: &Path, since: usize, more: usize) {
    for _ in 0..400 {
        if reloads(state) >= since + more {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("nats-server did not reload {more} times");
}

/// A module `evil` declared in a running `mesh up` (its tools not yet known), connected
/// under its own credentials and registering as it likes.
struct Evil {
    running: Up,
    client: async_nats::Client,
}

impl Evil {
    async fn declared(home: &Path) -> Evil {
        let running = up(home).await;
        running
            .regrant(home, |g| g.replace("  # units {}", "  units {}\n  evil {}"))
            .await;
        let client = connect_as(home, "mesh-evil").await;
        Evil { running, client }
    }

    async fn register(&self, tools: &[&str]) {
        let body = json!({"module": "evil", "version": "1.0.0", "description": "",
            "tools": tools, "instance": "evil1", "started_ms": 1});
        self.client
            .request("mesh.catalog.register", body.to_string().into())
            .await
            .unwrap();
    }

    /// Registers `tools` and waits until `mesh up` learned them and nats-server runs the
    /// layout that routes them: what was learned.
    async fn routed(&self, tools: &[&str]) -> Value {
        let state = &self.running.state;
        let before = reloads(state);
        self.register(tools).await;
        let file = state.join("tools.json");
        for _ in 0..200 {
            let text = std::fs::read_to_string(&file).unwrap_or_default();
            let learned: Value = serde_json::from_str(&text).unwrap_or_default();
            if tools.iter().all(|t| learned["evil"].get(t).is_some()) {
                reloaded(state, before, 2).await;
                return learned;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!("mesh up never learned evil's {tools:?}");
    }

    /// evil's subscription to its tool `tool`, in place on the server.
    async fn calls(&self, tool: &str) -> async_nats::Subscriber {
        let calls = self
            .client
            .subscribe(format!("mesh.evil.{tool}"))
            .await
            .unwrap();
        crate::bus::module_round_trip(&self.client).await;
        calls
    }

    /// Answers the held call `msg`, and waits until its caller has the answer.
    async fn answer(
        &self,
        msg: async_nats::Message,
        answer: tokio::task::JoinHandle<Result<async_nats::Message, async_nats::RequestError>>,
    ) {
        self.client
            .publish(msg.reply.unwrap(), r#"{"content":[]}"#.into())
            .await
            .unwrap();
        self.client.flush().await.unwrap();
        answer.await.unwrap().expect("the held call was answered");
    }

    /// A call by tester held at evil: the request evil got, and the caller's wait for the
    /// answer. Called again while the layout still finds nobody serving.
    async fn held(
        &self,
        home: &Path,
        calls: &mut async_nats::Subscriber,
    ) -> (
        async_nats::Message,
        tokio::task::JoinHandle<Result<async_nats::Message, async_nats::RequestError>>,
    ) {
        let tester = connect_as(home, "mesh-tester").await;
        loop {
            let caller = tester.clone();
            let mut call =
                tokio::spawn(async move { caller.request("mesh.evil.t2", "{}".into()).await });
            tokio::select! {
                Some(msg) = calls.next() => return (msg, call),
                r = &mut call => {
                    assert!(r.unwrap().is_err(), "answered by nobody");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
        }
    }
}

/// A module cannot take its tool's witness away under a call in flight: it holds a call,
/// registers without that tool (mesh up learns it and reloads), answers, and registers it
/// again. The tool stays routed — and witnessed — for as long as a call may run, so the
/// call is in the log all the same.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_module_dropping_its_tool_under_a_call_does_not_take_the_calls_record() {
    let home = tempfile::tempdir().unwrap();
    let home = home.path();
    let evil = Evil::declared(home).await;
    let mut calls = evil.calls("t2").await;
    evil.routed(&["t2"]).await;
    let (msg, answer) = evil.held(home, &mut calls).await;
    // Listed no more: learned, reloaded under the call, and still routed.
    let learned = evil.routed(&["t9"]).await;
    assert!(learned["evil"].get("t2").is_some(), "{learned}");
    evil.answer(msg, answer).await;
    let held =
        |r: &Value| r["tool"] == "t2" && r["caller"] == "tester@PEOPLE" && r["status"] == 200;
    let rows = audited(home, &["--module", "evil"], held).await;
    assert!(
        rows.iter().any(held),
        "the held call left no record: {rows:#?}"
    );
    evil.running.stop().await;
}

/// A call that crossed a module's one export (its tools not yet known) and ends after a
/// reload exported each tool apart is still witnessed: as the module's, the bus not having
/// known the tool when the call began.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_begun_before_its_tool_was_known_is_kept_when_it_ends() {
    let home = tempfile::tempdir().unwrap();
    let home = home.path();
    let evil = Evil::declared(home).await;
    let mut calls = evil.calls("t2").await;
    let (msg, answer) = evil.held(home, &mut calls).await;
    evil.routed(&["t2"]).await;
    let conf = std::fs::read_to_string(evil.running.state.join("nats-server.conf")).unwrap();
    assert!(
        conf.contains(r#"{ service: "mesh.evil.t2", response"#)
            && !conf.contains(r#"{ service: "mesh.evil.>", response"#),
        "the reload under the call routes t2 apart: {conf}"
    );
    evil.answer(msg, answer).await;
    let held = |r: &Value| {
        r["tool"].is_null()
            && r["caller"] == "tester@PEOPLE"
            && r["status"] == 200
            && r["seen"] == "bus"
    };
    let rows = audited(home, &["--module", "evil"], held).await;
    assert!(
        rows.iter().any(held),
        "the held call left no record: {rows:#?}"
    );
    evil.running.stop().await;
}

#[tokio::test]
async fn mesh_up_gives_back_the_selected_context_and_says_when_its_own_points_nowhere() {
    let home = tempfile::tempdir().unwrap();
    let home = home.path();
    // Someone's own context, selected; and a `mesh` context left world-readable.
    let contexts = home.join("config/nats/context");
    std::fs::create_dir_all(&contexts).unwrap();
    std::fs::write(
        contexts.join("work.json"),
        r#"{"url": "nats://127.0.0.1:1"}"#,
    )
    .unwrap();
    std::fs::write(home.join("config/nats/context.txt"), "work").unwrap();
    std::fs::write(contexts.join("mesh.json"), "{}").unwrap();
    {
        use std::os::unix::fs::PermissionsExt;
        let open = std::fs::Permissions::from_mode(0o644);
        std::fs::set_permissions(contexts.join("mesh.json"), open).unwrap();
    }
    let running = up(home).await;
    assert_eq!(
        std::fs::read_to_string(home.join("config/nats/context.txt")).unwrap(),
        "mesh"
    );
    // A password went into it: it is the owner's alone now.
    assert_eq!(mode(&contexts.join("mesh.json")), 0o600);
    running.stop().await;
    assert_eq!(
        std::fs::read_to_string(home.join("config/nats/context.txt")).unwrap(),
        "work"
    );
    let (code, _, err) = mesh(home, &["--context", "mesh", "call", "echo", "text=x"]).await;
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("that mesh is not up"), "{err}");
}

/// The Rust example module, built by `cargo test` beside this test binary.
/// An example's binary, beside `mesh` (bin/test builds every binary of the workspace).
fn rust_example(name: &str) -> PathBuf {
    let path = Path::new(MESH).with_file_name(name);
    assert!(
        path.is_file(),
        "{} was not built: cargo build --workspace --bins",
        path.display()
    );
    path
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rust_module_joins_the_same_way() {
    let home = tempfile::tempdir().unwrap();
    let home = home.path();
    let running = up(home).await;
    running
        .regrant(home, |g| {
            g.replace("  # weather { calls: [echo_echo] }", "  wordcount {}")
        })
        .await;
    let mut module = tokio::process::Command::new(rust_example("wordcount"))
        .args(["--context", "mesh-wordcount"])
        .env("XDG_CONFIG_HOME", home.join("config"))
        .env("HOME", home)
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    wait_listed(home, "wordcount_count").await;
    let (code, out, err) = mesh(home, &["call", "wordcount_count", "text=one two three"]).await;
    assert_eq!(code, 0, "{err}");
    let counted: Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"));
    assert_eq!(counted, json!({"words": 3, "lines": 1, "chars": 13}));
    // Its typed error is a tool error with the error's own words.
    let (code, out, err) = mesh(home, &["call", "wordcount_count", "text="]).await;
    assert_eq!(code, 1, "{out}{err}");
    assert!(err.contains("there is nothing to count"), "{out}{err}");
    // Arguments its type does not take are refused before it runs (the derived schema):
    // `mesh call` reads the schema first and names the argument, exit 2.
    let (code, out, err) = mesh(
        home,
        &["call", "wordcount_count", r#"{"text": "a", "lang": "en"}"#],
    )
    .await;
    assert_eq!(code, 2, "{out}{err}");
    assert!(
        err.contains("wordcount_count takes no argument lang; it takes text"),
        "{out}{err}"
    );
    let seen = agent_calls(home, "wordcount_count", r#"{"text": "a b\nc"}"#).await;
    assert_eq!(
        seen["structured"],
        json!({"words": 3, "lines": 2, "chars": 5}),
        "{seen}"
    );
    // Its own credentials reach no tool of another module.
    let (code, _, err) = mesh(
        home,
        &["--context", "mesh-wordcount", "call", "echo", "text=x"],
    )
    .await;
    assert_eq!(code, 4, "{err}");
    // SAFETY: signalling our own child.
    unsafe { libc::kill(module.id().unwrap() as i32, libc::SIGTERM) };
    let status = tokio::time::timeout(Duration::from_secs(30), module.wait())
        .await
        .expect("the module stops on SIGTERM")
        .unwrap();
    assert!(status.success());
    running.stop().await;
}

/// The pid of `parent`'s child running `name`, if there is one.
fn child_named(parent: u32, name: &str) -> Option<i32> {
    std::fs::read_dir("/proc").ok()?.flatten().find_map(|e| {
        let pid: i32 = e.file_name().to_str()?.parse().ok()?;
        let stat = std::fs::read_to_string(e.path().join("stat")).ok()?;
        // pid (comm) state ppid …; comm is at most 15 bytes.
        let (comm, rest) = stat.split_once(" (")?.1.rsplit_once(") ")?;
        let ppid: u32 = rest.split_whitespace().nth(1)?.parse().ok()?;
        (ppid == parent && name.starts_with(comm)).then_some(pid)
    })
}

/// decide runs as a process of its own (`mesh-decide run`), started by `mesh up` with the
/// module's credential where other users cannot read it, answering before `mesh up` says it
/// is up; and nothing `mesh up` started outlives it, even when it is killed outright.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn decide_runs_as_its_own_process_and_dies_with_mesh_up() {
    let home = tempfile::tempdir().unwrap();
    let home = home.path();
    let mut running = up(home).await;
    let up_pid = running.child.id().unwrap();
    let decide = child_named(up_pid, "mesh-decide").expect("mesh up started mesh-decide");
    // Long-running both: a peer that hangs up makes a write fail, not end the process.
    assert!(
        crate::bus::ignores_sigpipe(up_pid),
        "mesh up dies of SIGPIPE"
    );
    assert!(
        crate::bus::ignores_sigpipe(decide as u32),
        "mesh-decide run dies of SIGPIPE"
    );
    // Answering already: "mesh is up" waited for it.
    let (code, out, err) = mesh(home, &["call", "decide_health"]).await;
    assert_eq!(code, 0, "{out}{err}");
    // Its password is in its environment (readable by its owner only), not its command line
    // (readable by every user of the machine).
    let password = context(home, "mesh-decide")["password"]
        .as_str()
        .unwrap()
        .to_owned();
    let cmdline = std::fs::read(format!("/proc/{decide}/cmdline")).unwrap();
    assert!(
        !String::from_utf8_lossy(&cmdline).contains(&password),
        "decide's password is on its command line"
    );
    // Its files are where mesh up keeps the mesh's state.
    assert!(running.state.join("decide/sidecar.sqlite").is_file());

    // Killed outright: no chance to stop anything.
    running.child.start_kill().unwrap();
    running.child.wait().await.unwrap();
    for _ in 0..300 {
        if !alive(decide) && !alive(running.server_pid) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!(
        "outlived a killed mesh up: decide {}, nats-server {}",
        alive(decide),
        alive(running.server_pid)
    );
}

/// `mesh up --cluster 3`: three nats-servers as one cluster, the built-in modules spread over
/// them, every context naming all three; a server killed is started again, calls going on
/// meanwhile through the other two; Ctrl-C stops all of it.
#[tokio::test]
async fn mesh_up_runs_a_cluster_of_three() {
    let home = tempfile::tempdir().unwrap();
    let mut up = up_with(home.path(), &["--cluster", "3"]).await;
    assert_eq!(up.server_pids.len(), 3, "{:?}", up.server_pids);
    let url = context(home.path(), "mesh")["url"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(url.split(',').count(), 3, "{url}");
    let (code, out, err) = mesh(home.path(), &["call", "echo", "text=hi"]).await;
    assert_eq!((code, out.trim()), (0, "hi"), "{err}");
    // Each server with its name and routes, the catalogue's bucket kept on all three.
    let conf = std::fs::read_to_string(up.state.join("nats-server-1.conf")).unwrap();
    assert!(
        conf.contains("cluster {") && conf.contains("server_name: \"mesh-1\""),
        "{conf}"
    );
    // The audit reads any server's configuration, as on one server.
    let conf_path = up.state.join("nats-server-2.conf");
    let (code, audit, err) = mesh(
        home.path(),
        &["audit", "--config", conf_path.to_str().unwrap()],
    )
    .await;
    assert_eq!(code, 0, "{err}");
    assert!(
        audit.contains("echo") && audit.contains("tester"),
        "{audit}"
    );
    let ctx = context(home.path(), "mesh-catalog");
    let catalog = async_nats::ConnectOptions::new()
        .custom_inbox_prefix("_INBOX.catalog")
        .user_and_password(
            "catalog".into(),
            ctx["password"].as_str().unwrap().to_owned(),
        )
        .connect(url.split(',').next().unwrap())
        .await
        .unwrap();
    let js = async_nats::jetstream::new(catalog);
    let mut bucket = js.get_stream("KV_mesh_catalog").await.unwrap();
    assert_eq!(bucket.info().await.unwrap().config.num_replicas, 3);

    // A reload reaches every server: a new person can call at once, through any of them.
    let grants = std::fs::read_to_string(up.grants()).unwrap();
    let grants = grants.replacen("people {", "people {\n  zed { roles: [everything] }", 1);
    std::fs::write(up.grants(), grants).unwrap();
    let state = up.state.to_str().unwrap().to_owned();
    let (code, out, err) = mesh(home.path(), &["up", "--reload", "--dir", &state]).await;
    assert_eq!(code, 0, "{out}{err}");
    let (code, out, err) = mesh(
        home.path(),
        &["--context", "mesh-zed", "call", "echo", "text=zed"],
    )
    .await;
    assert_eq!((code, out.trim()), (0, "zed"), "{err}");
    // And a reload that takes the grant away takes it on every server: through each of the
    // three, zed's call is denied.
    let grants = std::fs::read_to_string(up.grants()).unwrap();
    let grants = grants.replacen("zed { roles: [everything] }", "zed { roles: [] }", 1);
    std::fs::write(up.grants(), grants).unwrap();
    let (code, out, err) = mesh(home.path(), &["up", "--reload", "--dir", &state]).await;
    assert_eq!(code, 0, "{out}{err}");
    let zed = context(home.path(), "mesh-zed");
    let password = zed["password"].as_str().unwrap().to_owned();
    for server in url.split(',') {
        // (A context's credentials go only to its own servers: given here for one of them.)
        let (code, out, err) = mesh(
            home.path(),
            &[
                "--server",
                server,
                "--user",
                "zed",
                "--password",
                &password,
                "--inbox-prefix",
                "_INBOX.zed",
                "call",
                "echo",
                "text=zed",
            ],
        )
        .await;
        assert_eq!(code, 4, "{server}: {out}{err}");
    }

    let killed = up.server_pids[0];
    // SAFETY: killing a nats-server this test's mesh up started.
    unsafe { libc::kill(killed, libc::SIGKILL) };
    let started = std::time::Instant::now();
    loop {
        let (code, out, err) = mesh(home.path(), &["call", "echo", "text=again"]).await;
        if code == 0 && out.trim() == "again" {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "{code} {out} {err}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // mesh up starts the killed server again, and says so in up.json.
    let again = loop {
        let info: Value =
            serde_json::from_str(&std::fs::read_to_string(up.state.join("up.json")).unwrap())
                .unwrap();
        let pids: Vec<i32> = serde_json::from_value(info["nats_server_pids"].clone()).unwrap();
        if let Some(new) = pids.iter().find(|p| !up.server_pids.contains(p)) {
            break *new;
        }
        assert!(started.elapsed() < Duration::from_secs(60), "{info}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert!(alive(again));
    up.server_pids.push(again);
    up.stop().await;
}

/// docs/deploy.md, "A module as an OS user of its own": the module's one credential file,
/// handed over as systemd's `LoadCredential=` does (copied into a folder only the module's
/// user reads), the module run as that user. It serves, and it can read no other credential
/// — not the mesh's credentials file, not another module's file, not anyone's `nats` context —
/// even with the folders above them open to everyone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_module_run_as_its_own_user_has_its_credential_and_no_other() {
    use std::os::unix::fs::PermissionsExt;
    // SAFETY: geteuid(2) reads the process's id and cannot fail.
    assert_eq!(
        unsafe { libc::geteuid() },
        0,
        "this test runs a module as another OS user, as systemd would: run it as root (CI does)"
    );
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path();
    let first = up(home).await;
    first
        .regrant(home, |g| g.replace("  # units {}", "  units {}"))
        .await;

    // One file per module, private, in a private folder.
    let credentials = first.state.join("credentials");
    assert_eq!(mode(&credentials), 0o700);
    for m in ["catalog", "echo", "avu", "decide", "units"] {
        let file = credentials.join(format!("{m}.json"));
        assert_eq!(mode(&file), 0o600, "{}", file.display());
        let ctx: Value = serde_json::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
        assert_eq!(ctx["user"], m);
    }
    // Open every folder above the secrets to all, as a home often is: the files themselves
    // must keep them.
    for open in [
        home.to_path_buf(),
        home.join("config"),
        home.join("config/nats"),
        home.join("config/nats/context"),
        first.state.clone(),
    ] {
        std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o755)).unwrap();
    }

    // What systemd does for LoadCredential=nats:<state>/credentials/units.json with
    // DynamicUser=yes: a copy readable by the service's user alone.
    const NOBODY: u32 = 65534;
    let handed = home.join("run-credentials-units");
    std::fs::create_dir(&handed).unwrap();
    std::fs::copy(credentials.join("units.json"), handed.join("nats")).unwrap();
    for (path, m) in [(handed.join("nats"), 0o400), (handed.clone(), 0o500)] {
        std::os::unix::fs::chown(&path, Some(NOBODY), Some(NOBODY)).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(m)).unwrap();
    }
    // The system's Python with the test venv's nats-py (pure Python): the venv's own
    // interpreter lives under root's home, which another user cannot enter.
    let site = std::process::Command::new(python())
        .args([
            "-c",
            "import nats, os; print(os.path.dirname(os.path.dirname(nats.__file__)))",
        ])
        .output()
        .unwrap();
    let site = String::from_utf8(site.stdout).unwrap().trim().to_owned();
    let as_nobody = |program: &str| {
        let mut c = tokio::process::Command::new("setpriv");
        c.args([
            "--reuid",
            "65534",
            "--regid",
            "65534",
            "--clear-groups",
            "--",
        ])
        .arg(program)
        .env_clear()
        .env("PATH", "/usr/bin:/bin")
        .env("HOME", "/nonexistent")
        .env("PYTHONPATH", &site);
        c
    };
    let script = format!("{}/examples/python/units.py", env!("CARGO_MANIFEST_DIR"));
    let mut module = as_nobody("/usr/bin/python3");
    module
        .arg(&script)
        .env("NATS_CONTEXT", handed.join("nats"))
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    let mut module = module.spawn().unwrap();
    let mut listed = false;
    for _ in 0..200 {
        let (code, out, _) = mesh(home, &["tools", "--json"]).await;
        if code == 0 && out.contains("\"units_convert\"") {
            listed = true;
            break;
        }
        if module.try_wait().unwrap().is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    if !listed {
        let _ = module.start_kill();
        let out = module.wait_with_output().await.unwrap();
        panic!(
            "units as its own user did not serve (PYTHONPATH {site:?}): {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let (code, out, err) = mesh(
        home,
        &["call", "units_convert", "value=100", "from=cm", "to=m"],
    )
    .await;
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("1 m"), "{out}");

    // As the module's user: its own credential reads, no other does.
    let probe = r#"
import json, sys
out = {}
for path in sys.argv[1:]:
    try:
        open(path).read()
        out[path] = "read"
    except PermissionError:
        out[path] = "denied"
    except OSError as e:
        out[path] = type(e).__name__
print(json.dumps(out))
"#;
    let own = handed.join("nats").display().to_string();
    let others = [
        first.state.join("credentials.json"),
        credentials.join("avu.json"),
        credentials.join("decide.json"),
        home.join("config/nats/context/mesh-avu.json"),
        home.join("config/nats/context/mesh.json"),
    ];
    let mut probing = as_nobody("/usr/bin/python3");
    probing.args(["-c", probe]).arg(&own).args(&others);
    let seen = json_of(&mut probing).await;
    assert_eq!(seen[&own], "read", "{seen}");
    for other in &others {
        assert_eq!(seen[other.to_str().unwrap()], "denied", "{seen}");
    }
}

/// Without `$USER` (containers, CI, `env -i`), you are your OS account, not "me".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_user_you_are_your_os_account() {
    let home = tempfile::tempdir().unwrap();
    let account = std::process::Command::new("id")
        .arg("-un")
        .output()
        .unwrap();
    let account = String::from_utf8(account.stdout).unwrap().trim().to_owned();
    let first = up_as(home.path(), None, &[]).await;
    assert_eq!(context(home.path(), "mesh")["user"], account.as_str());
    let grants = std::fs::read_to_string(first.grants()).unwrap();
    assert!(
        grants.contains(&format!("{account} {{ roles: [everything] }}")),
        "{grants}"
    );
    first.stop().await;
}

/// A nats-server older than the mesh runs on (Debian 12's is 2.9.10) is named in one line,
/// with the version needed, before anything starts.
#[tokio::test]
async fn an_old_nats_server_is_named_with_the_version_needed() {
    use std::os::unix::fs::PermissionsExt;
    let home = tempfile::tempdir().unwrap();
    let fake = home.path().join("nats-server");
    std::fs::write(&fake, "#!/bin/sh\necho 'nats-server: v2.9.10'\n").unwrap();
    std::fs::set_permissions(&fake, std::fs::Permissions::from_mode(0o755)).unwrap();
    let state = home.path().join("up");
    let out = command(home.path())
        .args([
            "up",
            "--dir",
            state.to_str().unwrap(),
            "--as",
            "tester",
            "--nats-server",
        ])
        .arg(&fake)
        .output()
        .await
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_ne!(out.status.code(), Some(0), "{err}");
    let said: Vec<&str> = err.lines().filter(|l| l.contains("2.9.10")).collect();
    assert_eq!(said.len(), 1, "{err}");
    assert!(said[0].contains("needs 2.10.0 or newer"), "{err}");
}

/// An MCP server the grants file gives a `command` is started by `mesh up` as that module,
/// through the bridge, with the module's own credential, and stops with it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mesh_up_runs_an_mcp_server_the_grants_name() {
    let home = tempfile::tempdir().unwrap();
    let state = home.path().join("up");
    std::fs::create_dir_all(&state).unwrap();
    std::fs::write(
        state.join("grants.conf"),
        format!(
            "modules {{ catalog {{}} echo {{}} time {{ command: [{:?}, \"-m\", \"mcp_server_time\", \"--local-timezone\", \"UTC\"] }} }}\n\
             roles {{ everything {{ all: true }} echoer {{ tools: [echo] }} }}\n\
             people {{ tester {{ roles: [everything] }} guest {{ roles: [echoer] }} }}\n",
            python()
        ),
    )
    .unwrap();
    let up = up(home.path()).await;
    let (code, out, err) = mesh(
        home.path(),
        &["call", "time_get_current_time", "timezone=Asia/Tokyo"],
    )
    .await;
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("Asia/Tokyo"), "{out}");
    let (code, _, err) = mesh(
        home.path(),
        &[
            "--context",
            "mesh-guest",
            "call",
            "time_get_current_time",
            "timezone=UTC",
        ],
    )
    .await;
    assert_eq!(code, 4, "guest may not: {err}");
    // The bridge and its server are mesh up's, and go with it.
    let bridge = child_named(up.child.id().unwrap(), "mesh").expect("the bridge runs");
    up.stop().await;
    assert!(!alive(bridge), "the bridge outlived mesh up");
}

/// A `command:` module declared after `mesh up` started runs at the next reload, with the
/// credential the reload made for it (issue 47: `--reload` said only "reloaded" and ran
/// nothing until a restart); killed outright, it is started again (it went unnoticed).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_command_module_declared_since_runs_at_the_reload() {
    let home = tempfile::tempdir().unwrap();
    let state = home.path().join("up");
    std::fs::create_dir_all(&state).unwrap();
    let grants = |time: &str| {
        format!(
            "modules {{ catalog {{}} echo {{}} {time} }}\n\
             roles {{ everything {{ all: true }} }}\n\
             people {{ tester {{ roles: [everything] }} }}\n"
        )
    };
    std::fs::write(state.join("grants.conf"), grants("")).unwrap();
    let up = up(home.path()).await;
    std::fs::write(
        state.join("grants.conf"),
        grants(&format!(
            "time {{ command: [{:?}, \"-m\", \"mcp_server_time\", \"--local-timezone\", \"UTC\"] }}",
            python()
        )),
    )
    .unwrap();
    let (code, out, err) = mesh(
        home.path(),
        &["up", "--reload", "--dir", state.to_str().unwrap()],
    )
    .await;
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        out.contains("started time (declared since the last start)"),
        "{out}"
    );
    let answered = tokio::time::timeout(Duration::from_secs(60), async {
        loop {
            let (code, out, _) = mesh(
                home.path(),
                &["call", "time_get_current_time", "timezone=Asia/Tokyo"],
            )
            .await;
            if code == 0 {
                return out;
            }
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
    })
    .await
    .expect("the module declared since answers");
    assert!(answered.contains("Asia/Tokyo"), "{answered}");
    let bridge = child_named(up.child.id().unwrap(), "mesh").expect("the bridge runs");

    // Killed outright, the bridge is started again by mesh up, and the tool answers again.
    // SAFETY: a signal to a process this test's mesh up started.
    unsafe { libc::kill(bridge, libc::SIGKILL) };
    let again = tokio::time::timeout(Duration::from_secs(60), async {
        loop {
            if let Some(new) = child_named(up.child.id().unwrap(), "mesh")
                && new != bridge
            {
                let (code, out, _) = mesh(
                    home.path(),
                    &["call", "time_get_current_time", "timezone=UTC"],
                )
                .await;
                if code == 0 {
                    return (new, out);
                }
            }
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
    })
    .await
    .expect("mesh up starts a killed bridge again");
    assert!(again.1.contains("UTC"), "{}", again.1);

    // Its command changed: a reload starts it again, the new way (its local time zone).
    let reload = |grants_now: String| {
        std::fs::write(state.join("grants.conf"), grants_now).unwrap();
        let home = home.path().to_owned();
        let dir = state.to_str().unwrap().to_owned();
        async move {
            let (code, out, err) = mesh(&home, &["up", "--reload", "--dir", &dir]).await;
            assert_eq!(code, 0, "{out}{err}");
            out
        }
    };
    let out = reload(grants(&format!(
        "time {{ command: [{:?}, \"-m\", \"mcp_server_time\", \"--local-timezone\", \"Asia/Tokyo\"] }}",
        python()
    )))
    .await;
    assert!(
        out.contains("started time again (how it starts changed)"),
        "{out}"
    );
    assert!(!alive(again.0), "the bridge started the old way still runs");
    up.says("module time answers now").await;
    // Declared no more: stopped, and said.
    let bridge = child_named(up.child.id().unwrap(), "mesh").expect("the bridge runs");
    let out = reload(grants("")).await;
    assert!(out.contains("stopped time (no longer declared)"), "{out}");
    assert!(
        !alive(bridge),
        "the bridge of a module declared no more still runs"
    );
    let (code, _, err) = mesh(
        home.path(),
        &["call", "time_get_current_time", "timezone=UTC"],
    )
    .await;
    assert_ne!(code, 0, "{err}");
    up.stop().await;
}

/// `mesh up` does not hold its banner (and console) for a module process that does not
/// answer: it says the module is starting, and says so again once it answers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_module_slow_to_answer_does_not_hold_the_banner() {
    let home = tempfile::tempdir().unwrap();
    let state = home.path().join("up");
    std::fs::create_dir_all(&state).unwrap();
    // A server that takes its time to start (8 s: past the 5 s mesh up waits).
    let slow = format!("sleep 8; exec {} -m mcp_server_time", python());
    std::fs::write(
        state.join("grants.conf"),
        format!(
            "modules {{ catalog {{}} echo {{}} time {{ command: [\"sh\", \"-c\", {slow:?}] }} }}\n\
             roles {{ everything {{ all: true }} }}\n\
             people {{ tester {{ roles: [everything] }} }}\n"
        ),
    )
    .unwrap();
    let up = up(home.path()).await;
    assert!(
        up.banner
            .contains("starting:    time (not answering yet; mesh up says when it does)"),
        "{}",
        up.banner
    );
    assert!(!up.banner.contains("not answering: time"), "{}", up.banner);
    up.says("mesh: module time answers now").await;
    let (code, out, err) = mesh(
        home.path(),
        &["call", "time_get_current_time", "timezone=UTC"],
    )
    .await;
    assert_eq!(code, 0, "{out}{err}");
    up.stop().await;
}

/// `mesh up --auth operator` as a person meets it: the same mesh — calls answered and named,
/// the guest denied, the call log joined by name — with a credential file per user and no
/// password anywhere in the state directory; a reload that adds a person and a module
/// reaches the running server (pushed to its resolver), and a module with its own
/// credential file calls what its grant says.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mesh_up_in_operator_mode_is_the_same_mesh_without_a_password() {
    let home = tempfile::tempdir().unwrap();
    let home = home.path();
    let running = up_with(home, &["--auth", "operator"]).await;
    let context = context(home, "mesh");
    assert!(
        context["creds"]
            .as_str()
            .is_some_and(|c| c.ends_with("PEOPLE.tester.creds")),
        "{context}"
    );
    assert!(context.get("password").is_none(), "{context}");
    let (code, out, err) = mesh(home, &["call", "echo_whoami"]).await;
    assert_eq!(code, 0, "{err}");
    let me: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(me["actor"], "tester@PEOPLE", "{me}");
    let (code, _, err) = mesh(home, &["--context", "mesh-guest", "call", "echo_whoami"]).await;
    assert_eq!(code, 4, "the guest is denied: {err}");
    let (code, out, err) = mesh(home, &["audit", "calls"]).await;
    assert_eq!(code, 0, "{err}");
    assert!(
        out.lines().any(|l| l.contains("tester@PEOPLE")
            && l.contains("echo_whoami")
            && l.contains("bus+module")),
        "the log does not name the call as the file layout does:\n{out}"
    );
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
            let path = entry.path();
            if path.is_dir() {
                walk(&path, out);
            } else {
                out.push(path);
            }
        }
    }
    let mut files = Vec::new();
    walk(&running.state, &mut files);
    for f in files
        .iter()
        .filter(|f| !f.to_string_lossy().contains("jetstream"))
    {
        let text = std::fs::read(f).unwrap_or_default();
        let text = String::from_utf8_lossy(&text);
        assert!(
            !text.to_lowercase().contains("password"),
            "{} holds a password",
            f.display()
        );
    }
    // A person and a module that calls echo as itself, added and reloaded.
    running
        .regrant(home, |g| {
            g.replace(
                "  # weather { calls: [echo_echo] }",
                "  weather { calls: [echo_echo] }",
            )
            .replace(
                "  guest { roles: [guest] }",
                "  guest { roles: [guest] }\n  zed { roles: [guest] }",
            )
        })
        .await;
    let (code, out, err) = mesh(home, &["--context", "mesh-zed", "call", "echo", "text=zed"]).await;
    assert_eq!((code, out.trim()), (0, "zed"), "{err}");
    let (code, out, err) = mesh(
        home,
        &["--context", "mesh-weather", "call", "echo", "text=w"],
    )
    .await;
    assert_eq!((code, out.trim()), (0, "w"), "{err}");
    running.stop().await;
}

/// People from an identity provider on `mesh up --auth operator --idp …`, as a person meets
/// it: `mesh login --id-token FILE` says who they are and selects a context that signs in;
/// their calls go as the grants say (the guest: echo yes, echo_whoami denied); an
/// expired token is said as such, not as the server's bare "authorization violation".
/// `mesh up --auth operator` in `home` with an identity provider the test plays (its JWKS a
/// file): the running mesh and the provider, to sign tokens with.
async fn up_with_provider(home: &Path) -> (Up, crate::operator::Idp) {
    let provider = crate::operator::idp(home, "provider");
    let jwks = home.join("jwks.json");
    std::fs::write(&jwks, &provider.jwks).unwrap();
    let running = up_with(
        home,
        &[
            "--auth",
            "operator",
            "--idp",
            crate::operator::ISSUER,
            "--jwks",
            jwks.to_str().unwrap(),
            "--audience",
            crate::operator::AUDIENCE,
        ],
    )
    .await;
    (running, provider)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn people_sign_in_to_mesh_up_with_their_identity_provider() {
    let home = tempfile::tempdir().unwrap();
    let home = home.path();
    let (running, provider) = up_with_provider(home).await;
    let state = running.state.to_str().unwrap().to_owned();
    let token = home.join("guest.jwt");
    std::fs::write(&token, provider.token("guest", serde_json::json!({}))).unwrap();
    let login = [
        "login",
        "--id-token",
        token.to_str().unwrap(),
        "--dir",
        &state,
    ];
    let (code, out, err) = mesh(home, &login).await;
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("signed in as guest"), "{out}");
    let (code, out, err) = mesh(home, &["call", "echo", "text=hi"]).await;
    assert_eq!((code, out.trim()), (0, "hi"), "{err}");
    let (code, _, err) = mesh(home, &["call", "echo_whoami"]).await;
    assert_eq!(code, 4, "the guest may not: {err}");
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    std::fs::write(
        &token,
        provider.token(
            "guest",
            serde_json::json!({"exp": now - 600, "iat": now - 1200}),
        ),
    )
    .unwrap();
    let (code, _, err) = mesh(home, &login).await;
    assert_eq!(code, 4, "{err}");
    assert!(
        err.contains("it expired") && err.contains("sign in"),
        "{err}"
    );
    running.stop().await;
}

/// A person the callout let in keeps no grant the grants file no longer gives them: a reload
/// that takes the guest out closes the guest's open connection (it had signed in with the old
/// grants, which the server holds for as long as the connection lasts), and signing in again is
/// refused; the person at the terminal, whose grants did not change, keeps theirs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_signs_out_whom_the_grants_no_longer_name() {
    let home = tempfile::tempdir().unwrap();
    let home = home.path();
    let (running, provider) = up_with_provider(home).await;
    let context: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(home.join("config/nats/context/mesh.json")).unwrap(),
    )
    .unwrap();
    let url = context["url"].as_str().unwrap().to_owned();
    let sentinel = running.state.join("operator/creds/AUTH.sentinel.creds");
    let sign_in = |person: &str| {
        let (sentinel, url, token) = (
            sentinel.clone(),
            url.clone(),
            provider.token(person, serde_json::json!({})),
        );
        let person = person.to_owned();
        async move {
            let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
            let client = async_nats::ConnectOptions::with_credentials_file(sentinel)
                .await
                .unwrap()
                .token(token)
                .custom_inbox_prefix(format!("_INBOX.{person}"))
                .event_callback(move |event| {
                    let _ = tx.send(event.to_string());
                    async {}
                })
                .connect(url)
                .await;
            (client, rx)
        }
    };
    let (guest, mut guest_events) = sign_in("guest").await;
    let guest = guest.expect("the guest signs in");
    let (tester, mut tester_events) = sign_in("tester").await;
    let tester = tester.expect("tester signs in");
    let echo = |client: async_nats::Client| async move {
        tokio::time::timeout(
            crate::bus::GENEROUS,
            client.request("mesh.echo.echo", r#"{"text":"hi"}"#.into()),
        )
        .await
        .expect("an answer or an error")
    };
    echo(guest.clone()).await.expect("the guest may call echo");

    running
        .regrant(home, |g| g.replace("  guest { roles: [guest] }\n", ""))
        .await;
    tokio::time::timeout(crate::bus::GENEROUS, async {
        while let Some(event) = guest_events.recv().await {
            if event.contains("disconnected") {
                return;
            }
        }
    })
    .await
    .unwrap_or_else(|_| {
        panic!(
            "the guest's connection is not closed by the reload: {}",
            std::fs::read_to_string(home.join("mesh-up.stderr")).unwrap_or_default()
        )
    });
    let (again, _) = sign_in("guest").await;
    let e = again.expect_err("the guest is no longer in the grants");
    assert_eq!(
        e.kind(),
        async_nats::ConnectErrorKind::AuthorizationViolation
    );
    echo(tester.clone()).await.expect("tester still calls");
    while let Ok(event) = tester_events.try_recv() {
        assert!(
            !event.contains("disconnected"),
            "tester, whose grants did not change, was signed out"
        );
    }
    running.stop().await;
}

/// A provider's jwks_uri on a port of its own: each GET answered with `published`, counted in
/// `fetches`; past the first `answered` requests, a request is read and never answered (a
/// provider that hangs).
async fn jwks_server(
    published: std::sync::Arc<std::sync::Mutex<String>>,
    fetches: std::sync::Arc<AtomicUsize>,
    answered: usize,
) -> u16 {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        while let Ok((mut conn, _)) = listener.accept().await {
            let (serving, counted) = (published.clone(), fetches.clone());
            tokio::spawn(async move {
                // The request's head, to its blank line; its body is none.
                let mut head = Vec::new();
                let mut byte = [0u8; 1];
                while !head.ends_with(b"\r\n\r\n") {
                    match tokio::io::AsyncReadExt::read(&mut conn, &mut byte).await {
                        Ok(1) => head.push(byte[0]),
                        _ => return,
                    }
                }
                if counted.fetch_add(1, Ordering::SeqCst) >= answered {
                    std::future::pending::<()>().await;
                }
                let body = serving.lock().unwrap().clone();
                let answer = format!(
                    "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = conn.write_all(answer.as_bytes()).await;
            });
        }
    });
    port
}

/// A provider that hangs when the keys are fetched again holds up nobody's sign-in but the
/// token that asked for the fetch: while a token naming a made-up key waits on it, a person
/// whose token names a key held signs in.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hanging_provider_holds_up_no_other_sign_in() {
    let home = tempfile::tempdir().unwrap();
    let home = home.path();
    let idp = crate::operator::idp(home, "old");
    let published = std::sync::Arc::new(std::sync::Mutex::new(idp.jwks.clone()));
    let fetches = std::sync::Arc::new(AtomicUsize::new(0));
    // The fetch at start answered, every one after it hangs.
    let port = jwks_server(published, fetches.clone(), 1).await;
    let running = up_with(
        home,
        &[
            "--auth",
            "operator",
            "--idp",
            crate::operator::ISSUER,
            "--jwks",
            &format!("http://127.0.0.1:{port}/jwks"),
            "--audience",
            crate::operator::AUDIENCE,
        ],
    )
    .await;
    let state = running.state.to_str().unwrap().to_owned();
    let login = |file: &std::path::Path| {
        vec![
            "login".to_owned(),
            "--id-token".to_owned(),
            file.to_str().unwrap().to_owned(),
            "--dir".to_owned(),
            state.clone(),
        ]
    };
    let made_up = home.join("made-up.jwt");
    std::fs::write(
        &made_up,
        idp.token_naming("guest", serde_json::json!({}), "made-up"),
    )
    .unwrap();
    let stalled = {
        let (home, args) = (home.to_owned(), login(&made_up));
        tokio::spawn(async move {
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            mesh(&home, &args).await
        })
    };
    // The made-up key's fetch is under way (and hangs) before the person signs in.
    tokio::time::timeout(crate::bus::GENEROUS, async {
        while fetches.load(Ordering::SeqCst) < 2 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("the made-up key has the keys fetched again");
    let token = home.join("guest.jwt");
    std::fs::write(&token, idp.token("guest", serde_json::json!({}))).unwrap();
    let args = login(&token);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let (code, out, err) = mesh(home, &args).await;
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("signed in as guest"), "{out}");
    assert!(
        !stalled.is_finished(),
        "the made-up key's sign-in still waits on the hanging provider"
    );
    let (code, _, err) = stalled.await.unwrap();
    assert_eq!(
        code, 4,
        "the made-up key is refused once the fetch gives up: {err}"
    );
    running.stop().await;
}

/// `--jwks URL`: the identity provider's keys fetched from its jwks_uri (a small HTTP server
/// the test runs): once at start; again when a token names a key the provider rotated in
/// (that token then signs in); and a flood of tokens naming made-up keys has them fetched no
/// more within the minute.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_identity_providers_keys_are_fetched_and_follow_a_rotation() {
    let home = tempfile::tempdir().unwrap();
    let home = home.path();
    let old = crate::operator::idp(home, "old");
    let new = crate::operator::idp(home, "new").with_kid("k2");
    let published = std::sync::Arc::new(std::sync::Mutex::new(old.jwks.clone()));
    let fetches = std::sync::Arc::new(AtomicUsize::new(0));
    let port = jwks_server(published.clone(), fetches.clone(), usize::MAX).await;
    let running = up_with(
        home,
        &[
            "--auth",
            "operator",
            "--idp",
            crate::operator::ISSUER,
            "--jwks",
            &format!("http://127.0.0.1:{port}/jwks"),
            "--audience",
            crate::operator::AUDIENCE,
        ],
    )
    .await;
    assert_eq!(fetches.load(Ordering::SeqCst), 1, "fetched once at start");
    let state = running.state.to_str().unwrap().to_owned();
    let token = home.join("guest.jwt");
    let login = [
        "login",
        "--id-token",
        token.to_str().unwrap(),
        "--dir",
        &state,
    ];
    std::fs::write(&token, old.token("guest", serde_json::json!({}))).unwrap();
    let (code, out, err) = mesh(home, &login).await;
    assert_eq!(code, 0, "{out}{err}");

    // The provider rotates a key in: a token signed by it has the keys fetched again.
    let both: Vec<serde_json::Value> = [&old.jwks, &new.jwks]
        .iter()
        .flat_map(|j| {
            serde_json::from_str::<serde_json::Value>(j).unwrap()["keys"]
                .as_array()
                .unwrap()
                .clone()
        })
        .collect();
    *published.lock().unwrap() = serde_json::json!({ "keys": both }).to_string();
    std::fs::write(&token, new.token("guest", serde_json::json!({}))).unwrap();
    let (code, out, err) = mesh(home, &login).await;
    assert_eq!(code, 0, "the rotated key's token: {out}{err}");
    assert!(out.contains("signed in as guest"), "{out}");
    assert_eq!(
        fetches.load(Ordering::SeqCst),
        2,
        "fetched again for the new key"
    );

    // Made-up key ids: refused, and the provider is not asked again within the minute.
    for i in 0..8 {
        let kid = format!("made-up-{i}");
        std::fs::write(
            &token,
            new.token_naming("guest", serde_json::json!({}), &kid),
        )
        .unwrap();
        let (code, _, err) = mesh(home, &login).await;
        assert_eq!(code, 4, "{kid}: {err}");
    }
    assert_eq!(
        fetches.load(Ordering::SeqCst),
        2,
        "made-up keys fetched the keys again"
    );
    running.stop().await;
}
