//! The newest conformance suite against a real mesh: `mesh up`'s console, its accounts
//! layout and call log, with the suite's fixtures served by `mesh-conformance` processes
//! joined the way README says any module joins (declared in the grants file, run with the
//! context `mesh up` wrote for it). Its baseline is the same as `mesh serve`'s on a test bus
//! (next.rs): the fixture's tool change works in the accounts layout too.

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use super::next::run_as;
use crate::cli::{mesh, std_command_of};
use crate::up::up;

/// What the suite finds missing on `mesh up` (next.rs's list).
const BASELINE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/conformance-up-baseline.yml"
);

/// The suite's modules: its test tools, resources and prompts (`test`), the tools whose
/// results are JSON (`json`), and the tasks scenarios' tools, each a module of its own.
const MODULES: [&str; 8] = [
    "test", "json", "greet", "slow", "failing", "protocol", "confirm", "multi",
];

/// `mesh-conformance`, built beside `mesh` by `cargo build --workspace --bins`.
fn conformance_binary() -> std::path::PathBuf {
    let path = Path::new(env!("CARGO_BIN_EXE_mesh")).with_file_name("mesh-conformance");
    assert!(
        path.exists(),
        "{} is missing: run `cargo build --workspace --bins` (bin/test does)",
        path.display()
    );
    path
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mesh_up_passes_the_newest_conformance_suite_with_its_fixtures_as_modules() {
    let home = tempfile::tempdir().unwrap();
    let home = home.path();
    let state = home.join("up");
    std::fs::create_dir_all(&state).unwrap();
    std::fs::write(
        state.join("grants.conf"),
        format!(
            "modules {{ catalog {{}} echo {{}} {} }}\n\
             roles {{ everything {{ all: true }} }}\n\
             people {{ tester {{ roles: [everything] }} }}\n",
            MODULES.map(|m| format!("{m} {{}}")).join(" ")
        ),
    )
    .unwrap();
    let running = up(home).await;
    let console = running
        .banner
        .lines()
        .find_map(|l| l.trim().strip_prefix("console:"))
        .and_then(|rest| rest.split_whitespace().next())
        .expect("mesh up names its console")
        .to_owned();
    let token = std::fs::read_to_string(home.join("state/mesh/console.token")).unwrap();
    // Each module a process of its own, with its own credential, as an operator runs one.
    let binary = conformance_binary();
    let mut serving = Vec::new();
    for m in MODULES {
        serving.push(
            tokio::process::Command::from(std_command_of(&binary, home))
                .args(["--context", &format!("mesh-{m}"), "--layout", "accounts"])
                .args(["--modules", m])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .kill_on_drop(true)
                .spawn()
                .unwrap(),
        );
    }
    // Listed once each answers (a minute at most: only a hang fails here).
    let listed = tokio::time::timeout(Duration::from_secs(60), async {
        loop {
            let (_, out, _) = mesh(home, &["tools"]).await;
            let lists = |m: &str| {
                let prefix = format!("{m}_");
                out.split_whitespace()
                    .any(|w| w == m || w.starts_with(&prefix))
            };
            if MODULES.iter().all(|m| lists(m)) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
    });
    listed.await.expect("every fixture module is listed");
    let url = format!("{console}?token={}", token.trim());
    let all = run_as(&url, token.trim(), BASELINE, &["--suite", "all"]).await;
    assert!(all.contains("=== SUMMARY ==="), "{all}");
    for mut s in serving {
        let _ = s.kill().await;
    }
    running.stop().await;
}
