//! The official MCP conformance suite (`@modelcontextprotocol/conformance`, installed by
//! bin/test) against `mesh serve`, run the way README says for a client that sends no
//! headers (the console's token in the URL, `?token=`): initialization, ping, tools/list, streams and DNS-rebinding
//! protection must pass; what it expects of the SDKs' test server alone is listed, with why,
//! in tests/conformance-baseline.yml, and the suite fails on a new failure or a stale entry.

pub(crate) mod next;
mod up;

use tokio::process::Command;

use crate::bus::node_path;
use crate::mcp::{Setup, TOKEN, console_as};

const BASELINE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/conformance-baseline.yml"
);

#[tokio::test]
async fn mesh_serve_passes_the_mcp_conformance_suite() {
    let s = Setup::new().await;
    let (_console, url) = console_as(&s.ann()).await;
    let suite = std::path::Path::new(&node_path()).join(".bin/conformance");
    assert!(
        suite.exists(),
        "the MCP conformance suite is not installed at {}: run bin/test, which installs it",
        suite.display()
    );
    // As README says of a client that cannot send headers: the token in the URL.
    let with_token = format!("{url}?token={TOKEN}");
    let results = tempfile::tempdir().unwrap();
    let run = Command::new(&suite)
        .args(["server", "--url", &with_token])
        .args(["--expected-failures", BASELINE])
        .args(["--output-dir", results.path().to_str().unwrap()])
        .output();
    let out = tokio::time::timeout(std::time::Duration::from_secs(600), run)
        .await
        .expect("the suite ends")
        .unwrap();
    let said = String::from_utf8_lossy(&out.stdout);
    let summary = said
        .split("=== SUMMARY ===")
        .nth(1)
        .unwrap_or(&said)
        .to_owned();
    assert!(
        out.status.success(),
        "the conformance suite failed (exit {:?}):\n{summary}\n{}",
        out.status.code(),
        String::from_utf8_lossy(&out.stderr)
    );
    for must in [
        "server-initialize",
        "ping",
        "tools-list",
        "dns-rebinding-protection",
    ] {
        assert!(
            summary.lines().any(|l| l.contains(&format!("✓ {must}:"))),
            "{must} did not pass:\n{summary}"
        );
    }
}

/// The suite's tools run beside any mesh as the binary `mesh-conformance`, connecting as every
/// module binary does: its `test` module answers on the bus, and Ctrl-C stops it cleanly.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_suites_tools_run_as_a_module_binary() {
    use crate::bus::{Bus, GENEROUS};
    use mesh_core::subjects::FullName;
    let bus = Bus::single().await;
    let binary =
        std::path::Path::new(env!("CARGO_BIN_EXE_mesh")).with_file_name("mesh-conformance");
    let mut child = Command::new(&binary)
        .args(["--server", &bus.url()])
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap_or_else(|e| panic!("{} does not start: {e}", binary.display()));
    let client = bus.client().await;
    let tool = FullName::parse("test_simple_text").unwrap();
    let answered = tokio::time::timeout(GENEROUS, async {
        loop {
            match client.call(&tool, &serde_json::json!({}), GENEROUS).await {
                Ok(r) => return r,
                Err(_) => tokio::time::sleep(std::time::Duration::from_millis(100)).await,
            }
        }
    })
    .await
    .expect("mesh-conformance's test module answers");
    assert_eq!(
        answered.text_content(),
        "This is a simple text response for testing."
    );
    let json = FullName::parse("json_schema_2020_12_tool").unwrap();
    let r = client
        .call(&json, &serde_json::json!({"email": "a@b"}), GENEROUS)
        .await
        .unwrap();
    assert_eq!(r.text_content(), "ok");
    // SAFETY: signals a child process this test started.
    unsafe {
        libc::kill(child.id().unwrap() as i32, libc::SIGINT);
    }
    let status = tokio::time::timeout(GENEROUS, child.wait())
        .await
        .expect("mesh-conformance stops at Ctrl-C")
        .unwrap();
    assert!(status.success(), "{status:?}");
}

/// A flood of `test_trigger_tool_change` changes module test's tools a bounded number of
/// times and never stops it: past the bound each is a tool error saying so, and the module
/// answers on with at most that many tools added.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_of_tool_changes_is_bounded_and_module_test_answers_on() {
    use crate::bus::{Bus, GENEROUS};
    use mesh_core::subjects::FullName;
    let bus = Bus::single().await;
    let _catalog = bus.serve_catalog().await;
    let (_test, stopped) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(mesh_conformance::serve_test(
        bus.client().await.nats().clone(),
        mesh_core::runtime::ServeOptions::default(),
        async move {
            let _ = stopped.await;
        },
    ));
    let client = bus.client().await;
    let trigger = FullName::parse("test_trigger_tool_change").unwrap();
    let refused = tokio::time::timeout(GENEROUS, async {
        loop {
            if let Ok(r) = client
                .call(&trigger, &serde_json::json!({}), GENEROUS)
                .await
                && r.is_error
            {
                return r.text_content();
            }
        }
    })
    .await
    .expect("the changes stop at their bound");
    assert!(refused.contains("the most it does"), "{refused}");
    let simple = FullName::parse("test_simple_text").unwrap();
    let r = client
        .call(&simple, &serde_json::json!({}), GENEROUS)
        .await
        .unwrap();
    assert!(!r.is_error, "{r:?}");
    let tools = client.tools("test", GENEROUS).await.unwrap().tools;
    let added = tools.iter().filter(|t| t.name.starts_with("late")).count();
    assert_eq!(
        added,
        16,
        "{:?}",
        tools.iter().map(|t| &t.name).collect::<Vec<_>>()
    );
}
