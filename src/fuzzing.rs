//! Fuzz entry points for what the `mesh` command reads from strangers — MCP frames, nats-server
//! configurations — and the built-in modules' tool arguments, for `fuzz/` and the corpus
//! replay (the core's and decide's own are `mesh_core::fuzzing` and `mesh_decide::fuzzing`).
//! Each takes arbitrary bytes and must return without panicking, hanging or growing without
//! bound; bad input is an error value, never a crash.

use std::sync::OnceLock;

use mesh_core::runtime::Module;

/// One MCP message as `mesh mcp` reads a stdio line and `mesh serve` an HTTP body: our line
/// check, then rmcp's parse of what passes it.
pub fn mcp_frame(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    for line in text.lines() {
        if crate::mcp::stdio::check(line).is_none() {
            let _ = serde_json::from_str::<rmcp::model::ClientJsonRpcMessage>(line);
        }
    }
    let _ = serde_json::from_slice::<rmcp::model::ClientJsonRpcMessage>(data);
}

/// A nats-server configuration, as `mesh audit` reads it.
pub fn nats_conf(data: &[u8]) {
    if let Ok(text) = std::str::from_utf8(data) {
        let _ = mesh_bus::natsconf::parse_str(text, std::path::Path::new("fuzz.conf"));
    }
}

/// A request body to every tool this binary serves itself (echo, avu).
pub fn tool_arguments(data: &[u8]) {
    static TOOLS: OnceLock<Vec<(String, jsonschema::Validator)>> = OnceLock::new();
    let tools = TOOLS.get_or_init(|| {
        let dir = std::env::temp_dir().join(format!("mesh-fuzz-{}", std::process::id()));
        let index = dir.join("decide/ontology.sqlite");
        let built: Vec<Module> = vec![
            mesh_echo::module(),
            mesh_avu::module(
                mesh_avu::Config::in_dir(&dir.join("avu"), &index).expect("avu config"),
            )
            .expect("avu starts"),
        ];
        let validators = mesh_core::fuzzing::validators(built);
        // Only the schemas were wanted: the modules' files go with the modules.
        let _ = std::fs::remove_dir_all(&dir);
        validators
    });
    mesh_core::fuzzing::tool_arguments(tools, data);
}
