//! What the MCP relays offer an agent: only the tools its person may call, only those a
//! selection names (`--tools`, a grants file's `--profile`), and past a number of them (or
//! when asked) a search in their place, with the official Python SDK and raw JSON-RPC.

use std::process::Stdio;
use std::time::Duration;

use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};

use crate::bus::python;
use crate::mcp::{Setup, TOKEN};

const MESH: &str = env!("CARGO_BIN_EXE_mesh");
const SEARCH: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/py/mcp_search.py");
const LINE_WITHIN: Duration = Duration::from_secs(30);

/// `mesh mcp` as `user`, with `flags` after the command, driven by raw JSON-RPC lines.
struct Relay {
    _child: Child,
    stdin: ChildStdin,
    lines: Lines<BufReader<ChildStdout>>,
    id: u64,
}

impl Relay {
    async fn start(s: &Setup, user: &str, flags: &[&str]) -> Relay {
        Relay::start_in(s, user, flags, None).await
    }

    /// As `start`, with `state` as the state directory (where `mesh up` keeps the grants).
    async fn start_in(
        s: &Setup,
        user: &str,
        flags: &[&str],
        state: Option<&std::path::Path>,
    ) -> Relay {
        let mut command = Command::new(MESH);
        if let Some(state) = state {
            command.env("MESH_STATE_DIR", state);
        }
        let mut child = command
            .args(s.bus.flags(user))
            .arg("mcp")
            .args(flags)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        let mut relay = Relay {
            stdin: child.stdin.take().unwrap(),
            lines: BufReader::new(child.stdout.take().unwrap()).lines(),
            _child: child,
            id: 0,
        };
        let init = relay
            .request(
                "initialize",
                json!({"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "raw", "version": "0"}}),
            )
            .await;
        assert!(init.get("result").is_some(), "{init}");
        relay
            .send(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))
            .await;
        relay
    }

    async fn send(&mut self, message: &Value) {
        let line = format!("{message}\n");
        self.stdin.write_all(line.as_bytes()).await.unwrap();
        self.stdin.flush().await.unwrap();
    }

    /// One request and its answer (the whole JSON-RPC message).
    async fn request(&mut self, method: &str, params: Value) -> Value {
        self.id += 1;
        let id = self.id;
        self.send(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}))
            .await;
        loop {
            let line = tokio::time::timeout(LINE_WITHIN, self.lines.next_line())
                .await
                .expect("an answer")
                .unwrap()
                .expect("stdout open");
            let message: Value = serde_json::from_str(&line).unwrap();
            // Notifications (a list that changed) pass by.
            if message["id"] == id {
                return message;
            }
        }
    }

    /// The names `tools/list` gives, sorted.
    async fn listed(&mut self, params: Value) -> Vec<String> {
        let answer = self.request("tools/list", params).await;
        let mut names: Vec<String> = answer["result"]["tools"]
            .as_array()
            .unwrap_or_else(|| panic!("{answer}"))
            .iter()
            .map(|t| t["name"].as_str().unwrap().to_owned())
            .collect();
        names.sort();
        names
    }

    async fn call(&mut self, tool: &str, arguments: Value) -> Value {
        self.request("tools/call", json!({"name": tool, "arguments": arguments}))
            .await
    }
}

/// ann's tools, as the bus lets her call them (echo_whoami and the catalogue's writes are not).
const ANNS: [&str; 5] = [
    "catalog_modules",
    "echo",
    "echo_choose",
    "echo_fail",
    "echo_sleep",
];

/// The relay lists only what the bus would let its person call: ann never sees
/// `echo_whoami`, which root (who may call everything) does; called anyway, it is the bus
/// that says no.
#[tokio::test]
async fn a_person_never_sees_a_tool_that_is_not_theirs() {
    let s = Setup::new().await;
    let mut ann = Relay::start(&s, "ann", &[]).await;
    assert_eq!(ann.listed(json!({})).await, ANNS);
    let denied = ann.call("echo_whoami", json!({})).await;
    assert_eq!(
        denied["result"]["_meta"]["mesh/outcome"], "denied",
        "{denied}"
    );
    let mut root = Relay::start(&s, "root", &[]).await;
    let roots = root.listed(json!({})).await;
    assert!(roots.contains(&"echo_whoami".to_owned()), "{roots:?}");
    assert!(roots.contains(&"catalog_forget".to_owned()), "{roots:?}");
}

/// `--tools` lists only the tools its patterns match (of the person's), and a call of any
/// other is refused by the relay, not sent: a tool the bus would run says so all the same.
#[tokio::test]
async fn a_selection_lists_only_its_tools_and_refuses_the_others() {
    let s = Setup::new().await;
    let mut mcp = Relay::start(
        &s,
        "ann",
        &["--tools", "echo_e*,catalog_modules,echo_whoami"],
    )
    .await;
    // echo_whoami is selected, but not ann's: still not listed.
    assert_eq!(mcp.listed(json!({})).await, ["catalog_modules", "echo"]);
    let echoed = mcp.call("echo", json!({"text": "hi"})).await;
    assert_eq!(echoed["result"]["content"][0]["text"], "hi", "{echoed}");
    let refused = mcp.call("echo_fail", json!({"text": "no"})).await;
    assert_eq!(refused["error"]["code"], -32602, "{refused}");
    let message = refused["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("echo_fail is not offered here")
            && message.contains("--tools echo_e*, catalog_modules, echo_whoami"),
        "{message}"
    );
    // Not sent: echo_fail would have answered with a tool error (a result).
    assert!(refused.get("result").is_none(), "{refused}");

    // The console's selection holds for `mesh --console` too: its tools, and a call outside
    // it not the caller's (exit 4) in the console's words.
    let (_console, url) =
        crate::mcp::console_with(&s.ann(), &["--tools", "echo_e*,catalog_modules"]).await;
    let (code, out, _) = through_console(&url, &["tools", "--mine"]).await;
    assert_eq!(code, 0);
    assert!(out.contains("echo") && !out.contains("echo_fail"), "{out}");
    let (code, _, err) = through_console(&url, &["call", "echo_fail", "text=no"]).await;
    assert_eq!(code, 4, "{err}");
    assert!(
        err.contains(
            "echo_fail is not offered here: this relay offers only --tools echo_e*, catalog_modules"
        ),
        "{err}"
    );

    // A pattern that cannot name a tool stops the relay before it starts.
    let state = tempfile::tempdir().unwrap();
    let err = refused_at_start(&s, &["--tools", "echo.echo"], state.path()).await;
    assert!(
        err.contains("tool pattern \"echo.echo\" is not a full tool name"),
        "{err}"
    );
}

/// `mesh` with no bus credential, through the console at `url`: exit code, stdout, stderr.
async fn through_console(url: &str, args: &[&str]) -> (i32, String, String) {
    let out = Command::new(MESH)
        .env("XDG_CONFIG_HOME", "/nonexistent")
        .env("MESH_CONSOLE_TOKEN", TOKEN)
        .env_remove("NATS_URL")
        .args(args)
        .args(["--console", url])
        .stdin(Stdio::null())
        .output()
        .await
        .unwrap();
    (
        out.status.code().unwrap(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// A grants file with a profile, as `mesh up` keeps it beside the configuration.
fn grants_with_profile(dir: &std::path::Path) -> std::path::PathBuf {
    let path = dir.join("grants.conf");
    std::fs::write(
        &path,
        r#"
        modules: [catalog, echo, gone]
        roles { echoes { modules: [echo] } }
        people { ann { roles: [echoes] } }
        profiles {
          talking { tools: [echo, echo_choose, "*_modules"] }
          nothing { tools: [gone_*] }
        }
        "#,
    )
    .unwrap();
    path
}

/// `--profile` reads the selection from the grants file (given, or `mesh up`'s in the state
/// directory); a profile the file does not have, or no file, is said and nothing starts;
/// `mesh audit` shows each profile and the tools it selects.
#[tokio::test]
async fn a_profile_from_the_grants_file_selects_and_the_audit_shows_it() {
    let s = Setup::new().await;
    let dir = tempfile::tempdir().unwrap();
    let grants = grants_with_profile(dir.path());
    let grants_flag = grants.display().to_string();
    let mut mcp = Relay::start(
        &s,
        "ann",
        &["--profile", "talking", "--grants", &grants_flag],
    )
    .await;
    assert_eq!(
        mcp.listed(json!({})).await,
        ["catalog_modules", "echo", "echo_choose"]
    );
    let refused = mcp.call("echo_sleep", json!({"ms": 1})).await;
    let message = refused["error"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("offers only profile talking (echo, echo_choose, *_modules)"),
        "{refused}"
    );

    // The state directory's grants file when none is given.
    let state = tempfile::tempdir().unwrap();
    std::fs::copy(&grants, state.path().join("grants.conf")).unwrap();
    let mut from_state =
        Relay::start_in(&s, "ann", &["--profile", "talking"], Some(state.path())).await;
    assert_eq!(
        from_state.listed(json!({})).await,
        ["catalog_modules", "echo", "echo_choose"]
    );

    let unknown = refused_at_start(
        &s,
        &["--profile", "curation", "--grants", &grants_flag],
        state.path(),
    )
    .await;
    assert!(
        unknown.contains("no profile curation: the grants file has nothing, talking"),
        "{unknown}"
    );
    let nowhere = refused_at_start(&s, &["--profile", "talking"], &dir.path().join("none")).await;
    assert!(
        nowhere
            .contains("profile talking is defined in the mesh's grants file, and there is none at")
            && nowhere.contains("--grants FILE"),
        "{nowhere}"
    );

    // The audit, offline (the tools the configuration names, the public catalogue's among
    // them), shows the profiles.
    let out = Command::new(MESH)
        .args(["audit", "--offline", "--config"])
        .arg(s.bus.config_path())
        .arg("--grants")
        .arg(&grants)
        .output()
        .await
        .unwrap();
    let printed = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{printed}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        printed.contains(
            "  talking: echo, echo_choose, *_modules -> catalog_modules, echo, echo_choose"
        ) && printed.contains("  nothing: gone_* -> none of these tools"),
        "{printed}"
    );
    let out = Command::new(MESH)
        .args(["audit", "--offline", "--json", "--config"])
        .arg(s.bus.config_path())
        .arg("--grants")
        .arg(&grants)
        .output()
        .await
        .unwrap();
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        report["profiles"][1],
        json!({"name": "talking", "patterns": ["echo", "echo_choose", "*_modules"], "tools": ["catalog_modules", "echo", "echo_choose"]})
    );
}

/// `mesh mcp` as ann with `flags`, `state` its state directory, which must stop at once
/// (exit 2): what it says on stderr.
async fn refused_at_start(s: &Setup, flags: &[&str], state: &std::path::Path) -> String {
    let out = Command::new(MESH)
        .env("MESH_STATE_DIR", state)
        .args(s.ann())
        .arg("mcp")
        .args(flags)
        .stdin(Stdio::null())
        .output()
        .await
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// Past `--search-over` tools, the list is the search's three tools; a client that asks
/// for the whole list (`mesh/wholeList`, as `mesh --console` does) still gets it; and
/// `mesh mcp` names the search's tools like any other when it offers no search.
#[tokio::test]
async fn many_tools_are_offered_as_a_search() {
    let s = Setup::new().await;
    let search = ["mesh_call", "mesh_describe", "mesh_find"];
    let mut over = Relay::start(&s, "ann", &["--search-over", "4"]).await;
    assert_eq!(over.listed(json!({})).await, search);
    assert_eq!(
        over.listed(json!({"_meta": {"mesh/wholeList": true}}))
            .await,
        ANNS
    );
    let found = over.call("mesh_find", json!({"words": "sleep"})).await;
    assert_eq!(
        found["result"]["structuredContent"]["tools"][0]["name"], "echo_sleep",
        "{found}"
    );
    let mut under = Relay::start(&s, "ann", &["--search-over", "5"]).await;
    assert_eq!(under.listed(json!({})).await, ANNS);
    let none = under.call("mesh_find", json!({"words": "sleep"})).await;
    assert_eq!(none["error"]["code"], -32602, "{none}");

    // The console offering its search: `mesh --console` still reads its tools.
    let (_console, url) = crate::mcp::console_with(&s.ann(), &["--search"]).await;
    let (_, out, err) = through_console(&url, &["tools", "--json"]).await;
    let printed: Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {err}"));
    let mut names: Vec<&str> = printed["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    names.sort();
    assert_eq!(names, ANNS);
}

/// The search with the official Python SDK, under both protocol generations: find and
/// describe reach only the selection's tools that are the person's, and `mesh_call` ends as
/// the tool's own call would, each failure kind kept (and a question asked).
#[tokio::test]
async fn python_sdk_finds_describes_and_calls_through_the_search() {
    let s = Setup::new().await;
    let mut target = vec![MESH.to_owned()];
    target.extend(s.ann());
    target.extend(
        [
            "mcp",
            "--timeout",
            "500ms",
            "--search",
            "--tools",
            "echo_*,gone_*",
        ]
        .map(String::from),
    );
    for (mode, protocol) in [("legacy", "2025-11-25"), ("2026-07-28", "2026-07-28")] {
        let mut command = Command::new(python());
        command
            .arg(SEARCH)
            .arg(mode)
            .args(&target)
            .stdin(Stdio::null());
        let seen = crate::bus::json_of(&mut command).await;
        assert_eq!(seen["protocol"], protocol);
        assert_eq!(
            seen["tools"],
            json!(["mesh_call", "mesh_describe", "mesh_find"])
        );
        let found: Vec<&str> = seen["find"]["structured"]["tools"]
            .as_array()
            .unwrap_or_else(|| panic!("{seen}"))
            .iter()
            .map(|t| t["name"].as_str().unwrap())
            .collect();
        assert_eq!(found[0], "echo", "{seen}");
        assert!(!found.contains(&"echo_whoami"), "{seen}");
        assert_eq!(
            seen["find_all"]["structured"]["found"], 4,
            "ann's echo tools, of the selection: {seen}"
        );
        let described = &seen["describe"]["structured"];
        assert_eq!(described["name"], "echo", "{seen}");
        assert_eq!(described["inputSchema"]["required"], json!(["text"]));
        assert_eq!(seen["describe_not_yours"]["isError"], true, "{seen}");
        assert_eq!(seen["result"]["text"], "hello", "{seen}");
        assert_eq!(seen["result"]["isError"], false, "{seen}");
        assert_eq!(seen["tool_error"]["isError"], true, "{seen}");
        assert_eq!(seen["tool_error"]["text"], "said no", "{seen}");
        assert!(seen["tool_error"].get("outcome").is_none(), "{seen}");
        for (key, outcome, says) in [
            ("nobody_serves", "nobody_serves", "nobody serves gone_ping"),
            ("denied", "denied", "not yours"),
            ("slow", "slow", "did not answer within 0.5 s"),
        ] {
            assert_eq!(seen[key]["isError"], true, "{key}: {seen}");
            assert_eq!(seen[key]["outcome"], outcome, "{key}: {seen}");
            let text = seen[key]["text"].as_str().unwrap();
            assert!(text.contains(says), "{key}: {text}");
        }
        assert_eq!(seen["asks"]["text"], "you chose b", "{seen}");
        assert_eq!(seen["unknown"]["error_code"], -32602, "{seen}");
        assert_eq!(seen["outside"]["error_code"], -32602, "{seen}");
        let outside = seen["outside"]["message"].as_str().unwrap();
        assert!(
            outside.contains(
                "catalog_modules is not offered here: this relay offers only --tools echo_*, gone_*"
            ),
            "{outside}"
        );
        assert_eq!(seen["no_tool"]["isError"], true, "{seen}");
    }
}
