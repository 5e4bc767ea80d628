//! The fuzz corpus (fuzz/corpus/<target>/: seeds, and what bin/fuzz found) replayed through
//! the same entry points the fuzz targets call: none may panic.

use std::path::Path;

#[test]
fn every_corpus_input_returns() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/corpus");
    for (target, run) in mesh::fuzzing::TARGETS {
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
