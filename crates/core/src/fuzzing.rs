//! Fuzz entry points for what the core reads from strangers — a `requestState` coming back,
//! a request body checked against a tool's schema — for `fuzz/` and the corpus replay.
//! Each takes arbitrary bytes and must return without panicking, hanging or growing without
//! bound.

use std::sync::OnceLock;

use crate::runtime::request_state::StateKey;
use crate::runtime::{Module, arguments};

/// A `requestState` coming back from a caller.
pub fn request_state(data: &[u8]) {
    static KEY: OnceLock<StateKey> = OnceLock::new();
    let key = KEY.get_or_init(|| StateKey::from_bytes([7; 32]));
    if let Ok(text) = std::str::from_utf8(data) {
        let _ = key.open(text, "decide_apply", Some("ann@PEOPLE"));
    }
}

/// Every tool of `modules` with its compiled input schema, for `tool_arguments`.
pub fn validators(modules: Vec<Module>) -> Vec<(String, jsonschema::Validator)> {
    modules
        .into_iter()
        .flat_map(|m| {
            let validators = m.compile().expect("built-in schemas compile");
            m.tools
                .into_iter()
                .map(|t| t.spec.name)
                .zip(validators)
                .collect::<Vec<_>>()
        })
        .collect()
}

/// A request body to each of `tools`: parsed as the runtime parses it, then checked against
/// the tool's input schema.
pub fn tool_arguments(tools: &[(String, jsonschema::Validator)], data: &[u8]) {
    for (name, validator) in tools {
        if let Ok((args, _)) = arguments::parse(name, data) {
            let _ = arguments::check(name, validator, args);
        }
    }
}
