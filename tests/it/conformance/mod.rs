//! The official MCP conformance suite (`@modelcontextprotocol/conformance`, installed by
//! bin/test) against `mesh serve`, run the way README says for a client that sends no
//! headers (the console's token in the URL, `?token=`): initialization, ping, tools/list, streams and DNS-rebinding
//! protection must pass; what it expects of the SDKs' test server alone is listed, with why,
//! in tests/conformance-baseline.yml, and the suite fails on a new failure or a stale entry.

mod next;
mod tools;

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
