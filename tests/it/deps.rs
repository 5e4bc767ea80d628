//! The crates are the architecture: what each may not pull in, read from cargo's own
//! resolution of the workspace (`cargo tree`), so a new dependency that breaks a layer fails
//! here rather than in a module author's build.

use std::collections::BTreeSet;
use std::process::Command;

/// Every package in `package`'s normal (non-dev, non-build) dependency tree.
fn tree(package: &str) -> BTreeSet<String> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = Command::new(cargo)
        .args([
            "tree",
            "--offline",
            "--locked",
            "-e",
            "normal",
            "--prefix",
            "none",
            "--format",
            "{p}",
            "-p",
            package,
        ])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("cargo runs");
    assert!(
        out.status.success(),
        "cargo tree -p {package}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .map(str::to_owned)
        .collect()
}

fn assert_absent(package: &str, forbidden: &[&str]) {
    let tree = tree(package);
    assert!(
        tree.contains(package),
        "{package} is not in its own tree: {tree:?}"
    );
    let found: Vec<_> = forbidden.iter().filter(|f| tree.contains(**f)).collect();
    assert!(found.is_empty(), "{package} depends on {found:?}");
}

/// A module author's dependency: no database, no MCP, no HTTP server or client.
#[test]
fn the_core_has_no_database_mcp_or_http() {
    assert_absent(
        "mesh-core",
        &[
            "rusqlite",
            "libsqlite3-sys",
            "duckdb",
            "libduckdb-sys",
            "arrow",
            "rmcp",
            "hyper",
            "hyper-util",
            "reqwest",
            "http",
            "axum",
            "clap",
        ],
    );
}

/// The `mesh` command links no DuckDB and no embedding model: it starts as a small Rust
/// binary does, and `cargo install` needs nothing before it.
#[test]
fn the_command_links_no_duckdb() {
    assert_absent(
        "mesh",
        &[
            "duckdb",
            "libduckdb-sys",
            "arrow",
            "mesh-decide",
            "candle-core",
            "tokenizers",
        ],
    );
}

/// Modules that need nothing heavy stay so; decide is the one crate with DuckDB.
#[test]
fn modules_pull_in_only_what_they_use() {
    assert_absent(
        "mesh-catalog",
        &["rusqlite", "duckdb", "rmcp", "hyper", "reqwest"],
    );
    assert_absent(
        "mesh-echo",
        &["rusqlite", "duckdb", "rmcp", "hyper", "reqwest"],
    );
    assert_absent(
        "mesh-avu",
        &["duckdb", "rmcp", "hyper", "reqwest", "mesh-decide"],
    );
    assert_absent(
        "mesh-ontology",
        &[
            "duckdb",
            "mesh-core",
            "mesh-avu",
            "mesh-decide",
            "candle-core",
            "tokenizers",
        ],
    );
    let decide = tree("mesh-decide");
    assert!(decide.contains("duckdb"));
    assert!(decide.contains("candle-core"), "decide embeds with candle");
}

/// A module author's crate (examples/rust) has what mesh-core has and its own few: no
/// database, no MCP, no HTTP, none of the mesh's surfaces or modules.
#[test]
fn a_rust_module_needs_only_the_core() {
    let example = tree("mesh-example-wordcount");
    let core = tree("mesh-core");
    let clap = tree("clap");
    let anyhow = tree("anyhow");
    let extra: Vec<_> = example
        .iter()
        .filter(|p| !core.contains(*p) && !clap.contains(*p) && !anyhow.contains(*p))
        .filter(|p| *p != "mesh-example-wordcount")
        .collect();
    assert!(
        extra.is_empty(),
        "wordcount pulls in more than the core and clap: {extra:?}"
    );
}

/// The bus's administration stands on the core alone: no module, no surface, no MCP or HTTP.
#[test]
fn the_bus_stands_on_the_core_alone() {
    assert_absent(
        "mesh-bus",
        &[
            "mesh",
            "mesh-catalog",
            "mesh-echo",
            "mesh-avu",
            "mesh-decide",
            "mesh-bridge",
            "mesh-store",
            "rmcp",
            "hyper",
            "reqwest",
            "rusqlite",
            "duckdb",
            "clap",
        ],
    );
    let ours: Vec<_> = tree("mesh-bus")
        .into_iter()
        .filter(|p| p.starts_with("mesh-") && p != "mesh-bus" && p != "mesh-core")
        .collect();
    assert!(ours.is_empty(), "mesh-bus depends on {ours:?}");
}

/// The relays only relay: neither `mesh mcp`'s nor the console's code names the bus's
/// administration (grants, layout, call log), so what they may do is the bus's to decide.
#[test]
fn the_relays_never_use_the_bus_crate() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = vec![root.join("console.rs")];
    let mut dirs = vec![root.join("mcp")];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                files.push(path);
            }
        }
    }
    assert!(files.len() > 2, "the relays' files: {files:?}");
    let naming: Vec<_> = files
        .iter()
        .filter(|f| std::fs::read_to_string(f).unwrap().contains("mesh_bus"))
        .collect();
    assert!(naming.is_empty(), "relay code using mesh-bus: {naming:?}");
}
