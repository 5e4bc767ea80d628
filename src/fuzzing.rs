//! Entry points for the fuzz targets in `fuzz/` and for the test that replays their corpus:
//! each takes arbitrary bytes and must return without panicking, hanging or growing without
//! bound; bad input is an error value, never a crash.

use std::sync::OnceLock;

use crate::modules;
use crate::runtime::request_state::StateKey;
use crate::runtime::{Module, arguments};

/// A target: it takes any bytes and returns.
pub type Target = fn(&[u8]);

/// The targets, by the name of their folder under `fuzz/corpus/`.
pub const TARGETS: [(&str, Target); 5] = [
    ("mcp_frame", mcp_frame),
    ("card", card),
    ("nats_conf", nats_conf),
    ("request_state", request_state),
    ("tool_arguments", tool_arguments),
];

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

/// A dataset card.
pub fn card(data: &[u8]) {
    if let Ok(text) = std::str::from_utf8(data) {
        let _ = modules::decide::card::parse(text);
    }
}

/// A nats-server configuration, as `mesh audit` reads it.
pub fn nats_conf(data: &[u8]) {
    if let Ok(text) = std::str::from_utf8(data) {
        let _ = crate::audit::conf::parse_str(text, std::path::Path::new("fuzz.conf"));
    }
}

/// A `requestState` coming back from a caller.
pub fn request_state(data: &[u8]) {
    static KEY: OnceLock<StateKey> = OnceLock::new();
    let key = KEY.get_or_init(|| StateKey::from_bytes([7; 32]));
    if let Ok(text) = std::str::from_utf8(data) {
        let _ = key.open(text, "decide_apply", Some("ann@PEOPLE"));
    }
}

/// A request body to every built-in tool: parsed as the runtime parses it, then checked
/// against each tool's input schema.
pub fn tool_arguments(data: &[u8]) {
    static TOOLS: OnceLock<Vec<(String, jsonschema::Validator)>> = OnceLock::new();
    let tools = TOOLS.get_or_init(|| {
        let dir = std::env::temp_dir().join(format!("mesh-fuzz-{}", std::process::id()));
        let index = dir.join("decide/ontology.sqlite");
        let built: Vec<Module> = vec![
            modules::echo::module(),
            modules::avu::module(
                modules::avu::Config::in_dir(&dir.join("avu"), &index).expect("avu config"),
            )
            .expect("avu starts"),
            modules::decide::tools::module(modules::decide::tools::Config::in_dir(
                &dir.join("decide"),
            ))
            .expect("decide starts"),
        ];
        let validators = built
            .into_iter()
            .flat_map(|m| {
                let validators = m.compile().expect("built-in schemas compile");
                m.tools
                    .into_iter()
                    .map(|t| t.spec.name)
                    .zip(validators)
                    .collect::<Vec<_>>()
            })
            .collect();
        // Only the schemas were wanted: the modules' files go with the modules.
        let _ = std::fs::remove_dir_all(&dir);
        validators
    });
    for (name, validator) in tools {
        if let Ok((args, _)) = arguments::parse(name, data) {
            let _ = arguments::check(name, validator, args);
        }
    }
}
