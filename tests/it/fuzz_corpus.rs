//! The fuzz corpus (fuzz/corpus/<target>/: seeds, and what bin/fuzz found) replayed through
//! the same entry points the fuzz targets call: none may panic.

use std::path::Path;

/// A target: it takes any bytes and returns.
type Target = fn(&[u8]);

/// The targets, by the name of their folder under `fuzz/corpus/`: each crate's entry points.
const TARGETS: [(&str, Target); 5] = [
    ("mcp_frame", mesh::fuzzing::mcp_frame),
    ("card", mesh_decide::fuzzing::card),
    ("nats_conf", mesh::fuzzing::nats_conf),
    ("request_state", mesh_core::fuzzing::request_state),
    ("tool_arguments", tool_arguments),
];

/// The tool_arguments corpus goes to every tool: the `mesh` binary's modules and decide's.
fn tool_arguments(data: &[u8]) {
    mesh::fuzzing::tool_arguments(data);
    mesh_decide::fuzzing::tool_arguments(data);
}

#[test]
fn every_corpus_input_returns() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/corpus");
    for (target, run) in TARGETS {
        let dir = root.join(target);
        let mut inputs: Vec<_> = std::fs::read_dir(&dir)
            .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
            .flatten()
            .map(|e| e.path())
            .collect();
        inputs.sort();
        assert!(!inputs.is_empty(), "{target} has no corpus");
        for input in inputs {
            let bytes = std::fs::read(&input).unwrap();
            let outcome = std::panic::catch_unwind(|| run(&bytes));
            assert!(outcome.is_ok(), "{target} panicked on {}", input.display());
        }
    }
}
