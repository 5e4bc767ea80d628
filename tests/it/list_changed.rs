//! A tool list that stays current: `mesh mcp` and `mesh serve` keep it in memory, declare
//! `listChanged`, and tell a client — the official Python SDK on both protocol generations, the
//! official TypeScript SDK — when a module starts and when it stops.

use std::process::Stdio;
use std::time::Duration;

use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, BufReader, Lines};
use tokio::process::{Child, ChildStdout, Command};

use mesh_core::runtime::{Call, Module, Tool};
use mesh_core::subjects::ToolResult;

use crate::bus::{Bus, node_path, python};
use crate::mcp::{TOKEN, console_as};

const MESH: &str = env!("CARGO_BIN_EXE_mesh");
const FOLLOWER_PY: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/py/list_changed.py");
const FOLLOWER_TS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/js/list_changed.cjs");
/// A bound on waiting for the next list, so a relay that never says it changed fails the
/// test instead of hanging it.
const LIST_WITHIN: Duration = Duration::from_secs(30);

fn weather() -> Module {
    Module::new("weather", "1.0.0", "forecasts").tool(Tool::new(
        "forecast",
        "tomorrow's weather",
        json!({"type": "object"}),
        |_c: Call| async { ToolResult::text("sun") },
    ))
}

/// The SDK client following the list, and the lists it prints.
struct Follower {
    _child: Child,
    lines: Lines<BufReader<ChildStdout>>,
}

impl Follower {
    /// `mode`: `legacy` or `2026-07-28` for the Python SDK, `typescript` for the TypeScript
    /// SDK's client (protocol 2025-11-25).
    async fn start(mode: &str, target: &[String]) -> Follower {
        let mut command = if mode == "typescript" {
            let mut c = Command::new("node");
            c.env("NODE_PATH", node_path()).arg(FOLLOWER_TS).arg("2");
            c
        } else {
            let mut c = Command::new(python());
            c.arg(FOLLOWER_PY).args([mode, "2"]);
            c
        };
        let mut child = command
            .env("MESH_CONSOLE_TOKEN", TOKEN)
            .args(target)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("python runs");
        let lines = BufReader::new(child.stdout.take().unwrap()).lines();
        Follower {
            _child: child,
            lines,
        }
    }

    /// The next list the client printed, as tool names.
    async fn next(&mut self, what: &str) -> Vec<String> {
        let line = tokio::time::timeout(LIST_WITHIN, self.lines.next_line())
            .await
            .unwrap_or_else(|_| panic!("{what}: no tools/list_changed came"))
            .unwrap()
            .unwrap_or_else(|| panic!("{what}: the SDK client ended (its stderr says why)"));
        let seen: Value = serde_json::from_str(&line).unwrap();
        serde_json::from_value(seen["tools"].clone()).unwrap()
    }
}

/// The client sees the list, then — told by the relay — the list with weather's tool after
/// weather starts, and without it after weather stops.
async fn follow(bus: &Bus, mode: &str, target: &[String]) {
    let mut follower = Follower::start(mode, target).await;
    let first = follower.next("the first list").await;
    assert!(first.contains(&"echo".to_owned()), "{first:?}");
    assert!(!first.contains(&"weather_forecast".to_owned()), "{first:?}");

    let running = bus.serve(weather()).await;
    let started = follower.next("after weather started").await;
    assert!(
        started.contains(&"weather_forecast".to_owned()),
        "{mode}: {started:?}"
    );
    running.stop().await;
    let stopped = follower.next("after weather stopped").await;
    assert!(
        !stopped.contains(&"weather_forecast".to_owned()),
        "{mode}: {stopped:?}"
    );
    assert_eq!(stopped, first, "{mode}");
}

async fn setup() -> (Bus, Vec<crate::bus::Running>, Vec<String>) {
    let bus = Bus::accounts(
        &["catalog", "echo", "weather"],
        &[("ann", &["mesh.echo.>", "mesh.weather.>"])],
    )
    .await;
    let running = vec![
        bus.serve_catalog().await,
        bus.serve(mesh_echo::module()).await,
    ];
    let ann = bus.flags("ann");
    (bus, running, ann)
}

#[tokio::test]
async fn the_sdks_hear_the_list_change_over_stdio_on_every_protocol_generation() {
    let (bus, _running, ann) = setup().await;
    let mut target = vec![MESH.to_owned()];
    target.extend(ann);
    target.push("mcp".into());
    follow(&bus, "legacy", &target).await;
    follow(&bus, "2026-07-28", &target).await;
    follow(&bus, "typescript", &target).await;
}

#[tokio::test]
async fn the_sdks_hear_the_list_change_over_http_on_every_protocol_generation() {
    let (bus, _running, ann) = setup().await;
    let (_console, url) = console_as(&ann).await;
    follow(&bus, "legacy", std::slice::from_ref(&url)).await;
    follow(&bus, "2026-07-28", std::slice::from_ref(&url)).await;
    follow(&bus, "typescript", std::slice::from_ref(&url)).await;
}

/// The official TypeScript SDK lists every built-in tool (the catalogue's, echo's, avu's)
/// without a word on stderr: the schemas use only formats JSON Schema defines (schemars's
/// `uint64` made it warn `unknown format "uint64" ignored` on every listing).
#[tokio::test]
async fn the_typescript_sdk_lists_the_built_in_tools_without_a_warning() {
    let dir = tempfile::tempdir().unwrap();
    let bus = Bus::accounts(&["catalog", "echo", "avu"], &[("ann", &["mesh.>"])]).await;
    let config =
        mesh_avu::Config::in_dir(&dir.path().join("avu"), &dir.path().join("o.sqlite")).unwrap();
    let _running = [
        bus.serve_catalog().await,
        bus.serve(mesh_echo::module()).await,
        bus.serve(mesh_avu::module(config).unwrap()).await,
    ];
    let out = Command::new("node")
        .env("NODE_PATH", node_path())
        .arg(FOLLOWER_TS)
        .arg("0")
        .arg(MESH)
        .args(bus.flags("ann"))
        .arg("mcp")
        .stdin(Stdio::null())
        .output()
        .await
        .unwrap();
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(out.status.success(), "{stdout}{stderr}");
    for tool in ["catalog_modules", "echo", "avu_list"] {
        assert!(stdout.contains(tool), "{tool} not listed: {stdout}");
    }
    // mesh mcp's own log lines would come on this stderr too; the SDK's warnings are what
    // must not.
    assert!(!stderr.contains("unknown format"), "{stderr}");
}
