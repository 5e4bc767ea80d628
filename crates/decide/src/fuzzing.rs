//! Fuzz entry points for what decide reads from strangers — dataset cards, its tools'
//! arguments — for `fuzz/` and the corpus replay. Each takes arbitrary bytes and must return
//! without panicking, hanging or growing without bound.

use std::sync::OnceLock;

/// A dataset card.
pub fn card(data: &[u8]) {
    if let Ok(text) = std::str::from_utf8(data) {
        let _ = crate::card::parse(text);
    }
}

/// A request body to every decide tool.
pub fn tool_arguments(data: &[u8]) {
    static TOOLS: OnceLock<Vec<(String, jsonschema::Validator)>> = OnceLock::new();
    let tools = TOOLS.get_or_init(|| {
        let dir = std::env::temp_dir().join(format!("mesh-decide-fuzz-{}", std::process::id()));
        let module =
            crate::tools::module(crate::tools::Config::in_dir(&dir)).expect("decide starts");
        let validators = mesh_core::fuzzing::validators(vec![module]);
        // Only the schemas were wanted: decide's files go with it.
        let _ = std::fs::remove_dir_all(&dir);
        validators
    });
    mesh_core::fuzzing::tool_arguments(tools, data);
}
