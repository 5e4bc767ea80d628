//! The `mesh` binary against a real bus: every exit code on purpose, the tools table, and
//! `mesh up` from start to Ctrl-C.

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::Command;

use crate::bus::{Bus, Running};

const MESH: &str = env!("CARGO_BIN_EXE_mesh");

/// Runs `mesh` with a clean environment: no NATS_* variables, no context but `config`'s.
pub async fn mesh(config: &Path, args: &[&str]) -> (i32, String, String) {
    let out = command(config)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .await
        .expect("mesh runs");
    (
        out.status.code().expect("exited"),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

pub fn command(config: &Path) -> Command {
    let mut cmd = Command::from(std_command(config));
    cmd.kill_on_drop(true);
    cmd
}

/// `mesh` with a clean environment (no NATS_* variables, no COLUMNS, no context but
/// `config`'s), as std's command: for [`crate::pty::run`], and the base of [`command`].
pub(crate) fn std_command(config: &Path) -> std::process::Command {
    std_command_of(Path::new(MESH), config)
}

/// `program` (a binary of the workspace) with the clean environment [`std_command`] gives
/// `mesh`.
pub(crate) fn std_command_of(program: &Path, config: &Path) -> std::process::Command {
    let mut cmd = std::process::Command::new(program);
    for (k, _) in std::env::vars() {
        if k.starts_with("NATS_") || k == "COLUMNS" {
            cmd.env_remove(k);
        }
    }
    cmd.env("XDG_CONFIG_HOME", config.join("config"))
        .env("XDG_STATE_HOME", config.join("state"))
        .env_remove("XDG_CACHE_HOME")
        .env("HOME", config);
    cmd
}

struct Mesh {
    bus: Bus,
    _modules: Vec<Running>,
    home: tempfile::TempDir,
}

impl Mesh {
    /// catalog + echo in the accounts layout; `ann` may call echo tools but `echo_whoami`
    /// and `echo_fail` only as far as the grants say.
    async fn up() -> Mesh {
        let bus = Bus::accounts(
            &["catalog", "echo"],
            &[(
                "ann",
                &[
                    "mesh.echo.echo",
                    "mesh.echo.sleep",
                    "mesh.echo.choose",
                    "mesh.echo.fail",
                    "mesh.ghost.>",
                ],
            )],
        )
        .await;
        let catalog = bus.serve_catalog().await;
        let echo = bus.serve(mesh_echo::module()).await;
        Mesh {
            bus,
            _modules: vec![catalog, echo],
            home: tempfile::tempdir().unwrap(),
        }
    }

    /// The connection flags that make a command ann's.
    fn ann(&self) -> Vec<String> {
        self.bus.flags("ann")
    }

    async fn as_ann(&self, args: &[&str]) -> (i32, String, String) {
        let flags = self.ann();
        let mut all: Vec<&str> = flags.iter().map(String::as_str).collect();
        all.extend_from_slice(args);
        mesh(self.home.path(), &all).await
    }
}

#[tokio::test]
async fn every_exit_code_on_purpose() {
    let m = Mesh::up().await;

    let (code, out, _) = m.as_ann(&["call", "echo", "text=hello"]).await;
    assert_eq!((code, out.as_str()), (0, "hello\n"));

    let (code, out, _) = m
        .as_ann(&["call", "echo", r#"{"text": "json"}"#, "--json"])
        .await;
    assert_eq!(code, 0);
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["content"][0]["text"], "json");

    let (code, _, err) = m.as_ann(&["call", "echo_fail", "text=said no"]).await;
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("said no"), "{err}");

    let (code, _, err) = m.as_ann(&["call", "echo", "text"]).await;
    assert_eq!(code, 2);
    assert!(err.contains("not key=value"), "{err}");
    let (code, _, err) = m.as_ann(&["call", "echo", "{\"text\":"]).await;
    assert_eq!(code, 2);
    assert!(err.contains("not valid JSON"), "{err}");
    let (code, _, err) = mesh(
        m.home.path(),
        &["call", "echo", "--server", "nats://127.0.0.1:1"],
    )
    .await;
    assert_eq!(code, 2);
    assert!(err.contains("cannot connect"), "{err}");
    // The cause once, and what to check.
    assert_eq!(err.matches("Connection refused").count(), 1, "{err}");
    assert!(err.contains("is a nats-server running there?"), "{err}");

    let (code, _, err) = m.as_ann(&["call", "ghost_boo"]).await;
    assert_eq!(code, 3);
    assert!(err.contains("nobody serves ghost_boo"), "{err}");

    // key=value read by the schema: text stays text, however it looks.
    let (code, out, err) = m.as_ann(&["call", "echo", "text=123"]).await;
    assert_eq!((code, out.as_str()), (0, "123\n"), "{err}");
    let (code, out, err) = m.as_ann(&["call", "echo", "text=true"]).await;
    assert_eq!((code, out.as_str()), (0, "true\n"), "{err}");
    // A tool the running module does not have is a mistake, not a module that is down.
    let (code, _, err) = m.as_ann(&["call", "echo_slep", "text=hi"]).await;
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("module echo is running but has no tool echo_slep; did you mean echo_sleep?"),
        "{err}"
    );
    // Arguments the schema refuses, named in words before the call.
    let (code, _, err) = m.as_ann(&["call", "echo"]).await;
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("echo needs argument text: give text=<text>"),
        "{err}"
    );
    let (code, _, err) = m.as_ann(&["call", "echo_sleep", "ms=soon"]).await;
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("argument ms of echo_sleep is a whole number, got \"soon\""),
        "{err}"
    );
    let (code, _, err) = m.as_ann(&["call", "echo", "txet=hi"]).await;
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("did you mean text?"), "{err}");
    // The whole schema, not only names and types: a bound (and an enum, a pattern…) said
    // before the call by the module's own validator, naming the argument and the rule.
    let (code, _, err) = m.as_ann(&["call", "echo_sleep", "ms=999999"]).await;
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("argument ms of echo_sleep: 999999 is greater than the maximum of 60000"),
        "{err}"
    );

    let (code, _, err) = m.as_ann(&["call", "echo_whoami"]).await;
    assert_eq!(code, 4);
    assert!(err.contains("not yours"), "{err}");

    let (code, _, err) = m
        .as_ann(&["call", "echo_sleep", "ms=5000", "--timeout", "300ms"])
        .await;
    assert_eq!(code, 5);
    assert!(err.contains("did not answer within 0.3 s"), "{err}");

    let (code, _, err) = m
        .as_ann(&["call", "echo_choose", r#"options=["a","b"]"#])
        .await;
    assert_eq!(code, 6);
    assert!(
        err.contains("needs input") && err.contains("--answer choice=1"),
        "{err}"
    );

    let (code, out, _) = m
        .as_ann(&[
            "call",
            "echo_choose",
            r#"options=["a","b"]"#,
            "--answer",
            "choice=2",
        ])
        .await;
    assert_eq!((code, out.as_str()), (0, "you chose b\n"));
    let (code, out, _) = m
        .as_ann(&[
            "call",
            "echo_choose",
            r#"options=["a","b"]"#,
            "--decline",
            "choice",
        ])
        .await;
    assert_eq!((code, out.as_str()), (0, "nothing chosen\n"));
}

#[tokio::test]
async fn arguments_from_stdin() {
    let m = Mesh::up().await;
    let mut child = command(m.home.path())
        .args(m.ann())
        .args(["call", "echo", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    tokio::io::AsyncWriteExt::write_all(&mut stdin, br#"{"text": "from stdin"}"#)
        .await
        .unwrap();
    drop(stdin);
    let out = child.wait_with_output().await.unwrap();
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(String::from_utf8_lossy(&out.stdout), "from stdin\n");
}

#[tokio::test]
async fn tools_lists_the_catalogue_and_names_a_stopped_module() {
    let mut m = Mesh::up().await;
    let (code, out, err) = m.as_ann(&["tools"]).await;
    assert_eq!(code, 0, "{err}");
    for tool in ["catalog_modules", "catalog_forget", "echo", "echo_whoami"] {
        assert!(out.contains(tool), "{tool} missing:\n{out}");
    }
    assert!(out.contains("Returns the text it is given"), "{out}");
    // ann's own tools, as the server reports her permissions.
    let row = |name: &str| {
        out.lines()
            .find(|l| l.starts_with(name))
            .unwrap_or_else(|| panic!("{name} missing"))
            .split_whitespace()
            .last()
            .unwrap()
            .to_owned()
    };
    assert_eq!(row("echo "), "yes");
    assert_eq!(row("echo_whoami "), "-");
    assert_eq!(row("catalog_forget "), "-");
    let (code, mine, _) = m.as_ann(&["tools", "--mine"]).await;
    assert_eq!(code, 0);
    assert!(
        mine.contains("echo") && !mine.contains("echo_whoami"),
        "{mine}"
    );

    // Stop echo: it unregisters, stays in the catalogue (installed) and is named as stopped,
    // not as a module that went silent.
    let echo = m._modules.pop().unwrap();
    echo.stop().await;
    let (code, out, _) = m.as_ann(&["tools"]).await;
    assert_eq!(code, 0);
    assert!(!out.lines().any(|l| l.starts_with("echo")), "{out}");
    assert!(
        out.contains("Stopped (installed, not running;") && out.contains("\n  echo "),
        "{out}"
    );
    assert!(!out.contains("Registered but not answering:"), "{out}");

    let (code, out, _) = m.as_ann(&["tools", "--json"]).await;
    assert_eq!(code, 0);
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["not_answering"][0]["module"], "echo");
    assert_eq!(v["not_answering"][0]["outcome"], "nobody_serves");

    let (code, out, _) = m.as_ann(&["describe", "catalog_modules"]).await;
    assert_eq!(code, 0);
    assert!(
        out.contains("module  string  optional  only this module"),
        "{out}"
    );
}

#[tokio::test]
async fn mesh_up_serves_writes_a_context_refuses_a_second_and_stops_on_ctrl_c() {
    let home = tempfile::tempdir().unwrap();
    // The second round starts where the first left its state and selected context.
    for round in 0..2 {
        up_round(home.path(), round == 0).await;
    }
}

async fn up_round(home: &Path, first: bool) {
    let state = home.join("up");
    let mut up = command(home)
        .args(["up", "--dir", state.to_str().unwrap(), "--as", "tester"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(up.stdout.take().unwrap()).lines();
    // Read as it comes (a full pipe would stop mesh up), and shown if it does not stop well.
    let mut stderr = up.stderr.take().unwrap();
    let said = tokio::spawn(async move {
        let mut all = String::new();
        let _ = tokio::io::AsyncReadExt::read_to_string(&mut stderr, &mut all).await;
        all
    });
    let mut server_pid = None;
    let mut console = None;
    let mut printed = String::new();
    while let Some(line) = lines.next_line().await.unwrap() {
        if let Some(rest) = line.split("(pid ").nth(1) {
            server_pid = rest.split(')').next().and_then(|p| p.parse::<i32>().ok());
        }
        if let Some(rest) = line.trim().strip_prefix("console:") {
            console = rest.split_whitespace().next().map(String::from);
        }
        printed.push_str(&line);
        printed.push('\n');
        if line.starts_with("Ctrl-C stops everything") {
            break;
        }
    }
    let server_pid = server_pid.expect("mesh up names nats-server's pid");
    let console = console.expect("mesh up names its console");
    assert!(
        printed.contains("\"mcpServers\""),
        "no MCP client snippet:\n{printed}"
    );
    assert!(
        printed.contains(&format!("\"url\": \"{console}\"")),
        "{printed}"
    );

    // The console relays as the person, for a client with no credential.
    let (code, out, err) = mesh(home, &["call", "--console", &console, "echo_whoami"]).await;
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("tester@PEOPLE"), "{out}");

    // The selected context lets mesh work without flags.
    let (code, out, err) = mesh(home, &["tools", "--json"]).await;
    assert_eq!(code, 0, "{err}");
    let v: Value = serde_json::from_str(&out).unwrap();
    let names: Vec<&str> = v["tools"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|t| t["name"].as_str())
        .collect();
    assert!(names.contains(&"catalog_modules"), "{names:?}");
    let (code, out, _) = mesh(home, &["call", "echo_whoami"]).await;
    assert_eq!(code, 0);
    assert!(out.contains("tester@PEOPLE"), "{out}");
    let (code, _, _) = mesh(home, &["--context", "mesh-guest", "call", "echo_whoami"]).await;
    assert_eq!(code, 4, "the guest may call echo only");

    if first {
        let (code, _, err) = mesh(home, &["up", "--dir", state.to_str().unwrap()]).await;
        assert_eq!(code, 2);
        assert!(err.contains("already up"), "{err}");
    }

    // SAFETY: signalling our own child.
    unsafe { libc::kill(up.id().unwrap() as i32, libc::SIGINT) };
    let status = tokio::time::timeout(Duration::from_secs(60), up.wait())
        .await
        .expect("mesh up stops after Ctrl-C")
        .unwrap();
    let said = said.await.unwrap();
    assert_eq!(status.code(), Some(0), "mesh up said:\n{said}");
    assert!(
        !crate::bus::alive(server_pid),
        "nats-server {server_pid} outlived mesh up"
    );
}

#[tokio::test]
async fn where_the_server_cannot_say_what_is_yours_mesh_tools_says_so() {
    // zoe may call echo but may not ask the server about herself.
    let conf = r#"
        listen: "127.0.0.1:-1"
        jetstream { store_dir: "@DIR@" }
        accounts {
          MESH { jetstream: enabled, users [ {user: catalog, password: pw-catalog}, {user: echo, password: pw-echo} ], exports [ {service: "mesh.>"} ] }
          PEOPLE {
            users [ {user: zoe, password: pw-zoe, permissions: {publish: ["mesh.echo.echo", "mesh.*.tools", "mesh.catalog.modules"], subscribe: "_INBOX.zoe.>"}} ]
            imports [ {service: {account: MESH, subject: "mesh.>"}, share: true} ]
          }
        }
    "#;
    let bus = Bus::from_config(conf, mesh_core::actor::Layout::Accounts).await;
    let _catalog = bus.serve_catalog().await;
    let _echo = bus.serve(mesh_echo::module()).await;
    let home = tempfile::tempdir().unwrap();
    let url = bus.url();
    let as_zoe = ["--server", &url, "--user", "zoe", "--password", "pw-zoe"];
    let (code, out, _) = mesh(home.path(), &[&as_zoe[..], &["tools"]].concat()).await;
    assert_eq!(code, 0);
    assert!(
        out.contains("YOURS is unknown (?)") && out.contains("$SYS.REQ.USER.INFO"),
        "{out}"
    );
    let (code, _, err) = mesh(home.path(), &[&as_zoe[..], &["tools", "--mine"]].concat()).await;
    assert_eq!(code, 2);
    assert!(err.contains("cannot tell which tools are yours"), "{err}");
}

#[tokio::test]
async fn another_tool_answers_only_if_it_gives_answers() {
    let m = Mesh::up().await;
    // echo does not answer questions (it refuses the answerer's arguments): said so by
    // the tool, exit 1, nothing chosen.
    let (code, out, err) = m
        .as_ann(&[
            "call",
            "echo_choose",
            r#"options=["a","b"]"#,
            "--answer-with",
            "echo",
        ])
        .await;
    assert_eq!(code, 1, "{out}{err}");
    assert!(err.contains("mesh: echo:"), "{err}");
    assert!(!out.contains("you chose"), "{out}");
    // Not a full tool name: a usage error.
    let (code, _, err) = m
        .as_ann(&[
            "call",
            "echo_choose",
            r#"options=["a"]"#,
            "--answer-with",
            "Echo",
        ])
        .await;
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("--answer-with"), "{err}");
}

/// A copy of `mesh` (a hard link) alone in a directory of its own, so that nothing is beside
/// it and PATH is what the test says.
pub fn lone_mesh(dir: &Path) -> std::path::PathBuf {
    let bin = dir.join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    let lone = bin.join("mesh");
    if std::fs::hard_link(MESH, &lone).is_err() {
        std::fs::copy(MESH, &lone).unwrap();
    }
    lone
}

async fn run_lone(lone: &Path, path_var: &str, args: &[&str]) -> (i32, String, String) {
    let args: Vec<&std::ffi::OsStr> = args.iter().map(std::ffi::OsStr::new).collect();
    run_in(lone, &std::env::temp_dir(), path_var, &args).await
}

/// Runs `lone` in `cwd` with `PATH` set to `path_var` and nothing on stdin.
pub async fn run_in(
    lone: &Path,
    cwd: &Path,
    path_var: &str,
    args: &[&std::ffi::OsStr],
) -> (i32, String, String) {
    let out = Command::new(lone)
        .args(args)
        .current_dir(cwd)
        .env("PATH", path_var)
        .stdin(Stdio::null())
        .output()
        .await
        .unwrap();
    (
        out.status.code().expect("exited"),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// `mesh decide …` is decide's own binary: found beside `mesh` (as a build and an install
/// put it), else on PATH, else a clear "not installed" — and its exit code is decide's.
#[tokio::test]
async fn mesh_decide_runs_mesh_decide_beside_or_on_path() {
    let dir = tempfile::tempdir().unwrap();
    let lone = lone_mesh(dir.path());
    let (code, out, err) = run_lone(&lone, "/usr/bin:/bin", &["decide", "ontology", "list"]).await;
    assert_eq!(code, 2, "{out}{err}");
    assert!(err.contains("mesh-decide"), "{err}");
    assert!(err.contains("not installed"), "{err}");

    // On PATH: found there, and what it prints and returns is its own.
    let built = Path::new(MESH).with_file_name("mesh-decide");
    assert!(built.is_file(), "{} was not built", built.display());
    let path_var = format!("{}:/usr/bin:/bin", built.parent().unwrap().display());
    let index = dir.path().join("index.sqlite");
    let index = index.to_str().unwrap();
    let (code, out, err) = run_lone(
        &lone,
        &path_var,
        &["decide", "ontology", "list", "--index", index],
    )
    .await;
    assert_eq!(code, 0, "{out}{err}");
    let (code, out, err) = run_lone(
        &lone,
        &path_var,
        &[
            "decide", "ontology", "search", "nothing", "x", "--index", index,
        ],
    )
    .await;
    assert_ne!(code, 0, "{out}{err}");
    assert!(
        err.contains("nothing in nothing"),
        "decide speaks for itself: {err}"
    );
    // Help names it the way a person typed it.
    let (code, out, _) = run_lone(&lone, &path_var, &["decide", "--help"]).await;
    assert_eq!(code, 0);
    assert!(out.contains("Usage: mesh decide"), "{out}");
}

/// The name after `mesh` is a module's name or nothing: no path can be smuggled into the
/// look-up of `mesh-<name>`, even where such a path leads to an executable.
#[tokio::test]
async fn mesh_refuses_a_command_name_that_is_a_path() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let lone = lone_mesh(dir.path());
    let marker = dir.path().join("ran");
    // bin/mesh-x/ exists, so bin/mesh-x/../../evil is a real path to an executable.
    std::fs::create_dir_all(dir.path().join("bin/mesh-x")).unwrap();
    let evil = dir.path().join("evil");
    std::fs::write(&evil, format!("#!/bin/sh\ntouch {}\n", marker.display())).unwrap();
    std::fs::set_permissions(&evil, std::fs::Permissions::from_mode(0o755)).unwrap();
    for name in ["x/../../evil", "../evil", "X", "a.b", "-x", ""] {
        let (code, out, err) = run_lone(&lone, "/usr/bin:/bin", &[name]).await;
        assert_eq!(code, 2, "{name:?}: {out}{err}");
        assert!(!marker.exists(), "{name:?} ran {}", evil.display());
    }
}

/// A module is who answers `mesh call`'s question for the schema: one that answers with
/// garbage, with a schema built to trip a reader, or not at all leaves `mesh call` calling
/// and saying what happened, never hanging or crashing (raw NATS as the module).
#[tokio::test]
async fn a_hostile_module_cannot_trip_mesh_call_with_its_schema() {
    use futures_util::StreamExt;
    use mesh_core::subjects::ToolResult;
    let bus = Bus::accounts(&["catalog", "evil"], &[("ann", &["mesh.evil.>"])]).await;
    let evil = bus.client_as(Some("evil")).await;
    let nats = evil.nats().clone();
    let home = tempfile::tempdir().unwrap();
    let ann = bus.flags("ann");
    let call = |args: Vec<&'static str>| {
        let ann = ann.clone();
        let home = home.path().to_owned();
        async move {
            let mut all: Vec<&str> = ann.iter().map(String::as_str).collect();
            all.push("call");
            all.extend(args);
            mesh(&home, &all).await
        }
    };
    // The tools verb answers with whatever `reply` holds; calls answer "ok".
    let reply = std::sync::Arc::new(std::sync::Mutex::new(bytes::Bytes::new()));
    let mut tools = nats.subscribe("mesh.evil.tools").await.unwrap();
    let mut calls = nats.subscribe("mesh.evil.x").await.unwrap();
    let answering = {
        let (nats, reply) = (nats.clone(), reply.clone());
        tokio::spawn(async move {
            let ok = serde_json::to_vec(&ToolResult::text("ok")).unwrap();
            loop {
                tokio::select! {
                    Some(m) = tools.next() => {
                        let body = reply.lock().unwrap().clone();
                        if !body.is_empty() {
                            let _ = nats.publish(m.reply.unwrap(), body).await;
                        }
                    }
                    Some(m) = calls.next() => {
                        let _ = nats.publish(m.reply.unwrap(), ok.clone().into()).await;
                    }
                    else => break,
                }
            }
        })
    };
    crate::bus::module_round_trip(&nats).await;
    let set = |body: String| *reply.lock().unwrap() = body.into();

    // Not JSON: the schema is unknown, the call goes ahead.
    set("{{{ not json".into());
    let (code, out, err) = call(vec!["evil_x", "a=5"]).await;
    assert_eq!((code, out.as_str()), (0, "ok\n"), "{err}");
    // A schema whose every part is the wrong shape.
    set(json!({"module": "evil", "version": "1", "description": "",
        "tools": [{"name": "x", "description": "x".repeat(100_000),
                   "inputSchema": {"properties": 5, "required": [1, {}], "type": 9}}]})
    .to_string());
    let (code, out, err) = call(vec!["evil_x", "a=5"]).await;
    assert_eq!((code, out.as_str()), (0, "ok\n"), "{err}");
    // A pattern that would backtrack for ever runs in the validator's bounded engine: the
    // answer comes at once, naming the rule; a type is still read.
    set(json!({"module": "evil", "version": "1", "description": "",
        "tools": [{"name": "x", "description": "",
                   "inputSchema": {"type": "object", "required": ["a"],
                       "properties": {"a": {"type": "integer"},
                                      "s": {"type": "string", "pattern": "^(a+)+$"}}}}]})
    .to_string());
    let (code, _, err) = call(vec![
        "evil_x",
        "a=5",
        "s=aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa!",
    ])
    .await;
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("argument s of evil_x") && err.contains("does not match"),
        "{err}"
    );
    let (code, _, err) = call(vec!["evil_x", "a=five"]).await;
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("argument a of evil_x is a whole number"),
        "{err}"
    );
    // No answer to the question for the schema: the call's own deadline still holds.
    set(String::new());
    let (code, out, err) = call(vec!["evil_x", "a=5", "--timeout", "500ms"]).await;
    assert_eq!((code, out.as_str()), (0, "ok\n"), "{err}");
    answering.abort();
}

/// On a terminal `mesh tools` fits its width, descriptions cut with an ellipsis and names
/// whole; through a pipe, and with `--wide`, every word is there.
#[tokio::test]
async fn tools_fit_the_terminal_and_a_pipe_gets_every_word() {
    let m = Mesh::up().await;
    let (code, piped, err) = m.as_ann(&["tools"]).await;
    assert_eq!(code, 0, "{err}");
    assert!(!piped.contains('…'), "{piped}");
    let widest = piped.lines().map(|l| l.chars().count()).max().unwrap();
    let on_terminal = |cols: u16, extra: &'static [&'static str]| {
        let home = m.home.path().to_owned();
        let ann = m.ann();
        tokio::task::spawn_blocking(move || {
            let mut cmd = std_command(&home);
            cmd.args(ann).arg("tools").args(extra);
            crate::pty::run(&mut cmd, cols, 40)
        })
    };
    for cols in [60u16, 100] {
        let t = on_terminal(cols, &[]).await.unwrap();
        assert_eq!(t.code, 0, "{}", t.output);
        for line in t.output.lines() {
            assert!(line.chars().count() <= cols as usize, "{cols}: {line:?}");
        }
        assert!(t.output.contains("echo "), "{}", t.output);
        assert!(t.output.lines().next().unwrap().starts_with("TOOL"));
        if widest > cols as usize {
            assert!(t.output.contains('…'), "{cols}: {}", t.output);
        }
    }
    assert!(widest > 60, "the pipe's table is wider than 60: {piped}");
    // --wide: whole on a terminal too.
    let t = on_terminal(60, &["--wide"]).await.unwrap();
    assert!(!t.output.contains('…'), "{}", t.output);
    assert!(
        t.output.lines().any(|l| l.chars().count() > 60),
        "{}",
        t.output
    );
}

/// Logs are coloured on a terminal only, and not with `NO_COLOR`; through a pipe, plain.
#[tokio::test]
async fn logs_are_coloured_on_a_terminal_only() {
    let home = tempfile::tempdir().unwrap();
    let args = [
        "-vv",
        "--server",
        "nats://127.0.0.1:1",
        "call",
        "echo",
        "text=hi",
    ];
    let (_, _, piped) = mesh(home.path(), &args).await;
    assert!(piped.contains("DEBUG"), "{piped}");
    assert!(!piped.contains('\u{1b}'), "{piped:?}");
    let on_terminal = |no_color: bool| {
        let home = home.path().to_owned();
        tokio::task::spawn_blocking(move || {
            let mut cmd = std_command(&home);
            cmd.args(args).env_remove("NO_COLOR");
            if no_color {
                cmd.env("NO_COLOR", "1");
            }
            crate::pty::run(&mut cmd, 120, 40)
        })
    };
    let t = on_terminal(false).await.unwrap();
    assert!(t.output.contains('\u{1b}'), "{:?}", t.output);
    let t = on_terminal(true).await.unwrap();
    assert!(t.output.contains("DEBUG"), "{:?}", t.output);
    assert!(!t.output.contains('\u{1b}'), "{:?}", t.output);
}

/// Nothing where a command was pointed: said in words, with what to check, no Rust types
/// and no library's log lines.
#[tokio::test]
async fn nothing_there_is_said_in_words() {
    let home = tempfile::tempdir().unwrap();
    let (code, _, err) = mesh(
        home.path(),
        &["tools", "--console", "http://127.0.0.1:1/mcp"],
    )
    .await;
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("nothing answers there: is `mesh serve`"),
        "{err}"
    );
    assert!(
        !err.contains("Transport") && !err.contains("ERROR"),
        "{err}"
    );
    // A port already taken.
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().port().to_string();
    let (code, _, err) = mesh(home.path(), &["serve", "--port", &port]).await;
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains(&format!(
            "cannot listen on 127.0.0.1:{port}: something else is using it"
        )),
        "{err}"
    );
}

/// Completions and the manual come from the same definitions as the parser: every command
/// is in them, and bash reads its script without a syntax error.
#[tokio::test]
async fn completions_and_the_manual_name_every_command() {
    let home = tempfile::tempdir().unwrap();
    let (code, bash, err) = mesh(home.path(), &["completions", "bash"]).await;
    assert_eq!(code, 0, "{err}");
    let checked = std::process::Command::new("bash")
        .args(["-n", "-c", &bash])
        .output()
        .unwrap();
    assert!(
        checked.status.success(),
        "{}",
        String::from_utf8_lossy(&checked.stderr)
    );
    let (_, zsh, _) = mesh(home.path(), &["completions", "zsh"]).await;
    assert!(zsh.starts_with("#compdef mesh"), "{zsh}");
    let (_, fish, _) = mesh(home.path(), &["completions", "fish"]).await;
    let (code, man, err) = mesh(home.path(), &["man"]).await;
    assert_eq!(code, 0, "{err}");
    assert!(man.contains(".TH mesh 1"), "{man}");
    for command in [
        "tools",
        "describe",
        "call",
        "audit",
        "serve",
        "up",
        "completions",
    ] {
        assert!(bash.contains(command), "bash: {command}");
        assert!(fish.contains(command), "fish: {command}");
        assert!(man.contains(command), "man: {command}");
    }
    // The exit codes, as `mesh --help` gives them.
    assert!(man.contains("nobody serves the tool"), "{man}");
}

/// `mesh run echo` with a person's credential does not start and sit denied: it says which
/// subscriptions the credential lacks and which context a module runs with.
#[tokio::test]
async fn a_person_cannot_run_a_module_and_is_told_why() {
    let m = Mesh::up().await;
    let ran = tokio::time::timeout(Duration::from_secs(60), m.as_ann(&["run", "echo"]))
        .await
        .expect("mesh run ends instead of serving denied");
    let (code, _, err) = ran;
    assert_ne!(code, 0, "{err}");
    assert!(
        err.contains("this credential may not serve echo: it may not subscribe to mesh.echo.tools"),
        "{err}"
    );
    assert!(err.contains("--context mesh-echo"), "{err}");
}

/// Connection flags are where they apply: after a command that reaches the bus as well as
/// before it, and not on one that does not (its help does not list them; given, they are
/// refused, not ignored).
#[tokio::test]
async fn connection_flags_only_where_they_apply() {
    let m = Mesh::up().await;
    let url = m.bus.url();
    let ann = m.ann();
    let ann: Vec<&str> = ann.iter().map(String::as_str).collect();
    // ann's credential, the flags after `--server URL`.
    let login = &ann[2..];
    let (code, out, err) = mesh(
        m.home.path(),
        &[&["call", "echo", "text=after"][..], &ann].concat(),
    )
    .await;
    assert_eq!((code, out.as_str()), (0, "after\n"), "{err}");
    // A command's own flag wins over one given ahead of it.
    let (code, out, err) = mesh(
        m.home.path(),
        &[
            &["--server", "nats://127.0.0.1:1"][..],
            login,
            &["call", "echo", "text=own", "--server", &url],
        ]
        .concat(),
    )
    .await;
    assert_eq!((code, out.as_str()), (0, "own\n"), "{err}");
    for command in ["up", "accounts"] {
        let (code, help, _) = mesh(m.home.path(), &[command, "--help"]).await;
        assert_eq!(code, 0);
        assert!(
            !help.contains("--creds") && !help.contains("--server"),
            "{command}: {help}"
        );
    }
    let (_, help, _) = mesh(m.home.path(), &["tools", "--help"]).await;
    assert!(
        help.contains("--creds") && help.contains("--server"),
        "{help}"
    );
    let (code, _, err) = mesh(m.home.path(), &["up", "--server", &url]).await;
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("unexpected argument '--server'"), "{err}");
    let (code, _, err) = mesh(m.home.path(), &["--server", &url, "up"]).await;
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("do nothing for this command"), "{err}");
}

/// `mesh call` says every item of a result, not only its text: an image is named with its
/// type and size, an embedded resource shows its text under its URI (before, an image alone
/// printed a blank line and exited 0).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mesh_call_says_what_is_not_text() {
    let bus = Bus::single().await;
    let _catalog = bus.serve_catalog().await;
    let _test = bus.serve(mesh_conformance::module()).await;
    let home = tempfile::tempdir().unwrap();
    let call = |tool: &'static str| {
        let (home, url) = (home.path().to_owned(), bus.url());
        async move { mesh(&home, &["--server", &url, "call", tool]).await }
    };
    let (code, out, err) = call("test_image_content").await;
    assert_eq!(code, 0, "{err}");
    assert!(out.starts_with("[image, image/png, "), "{out}");
    let (code, out, err) = call("test_multiple_content_types").await;
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("Multiple content types test:"), "{out}");
    assert!(out.contains("[image, image/png"), "{out}");
    assert!(
        out.contains("[resource test://mixed-content-resource]\n{\"test\":\"data\",\"value\":123}"),
        "{out}"
    );
}
