//! `echo`: a module for trying the mesh out and for measuring it — it answers, fails, waits
//! and tells who called, on request.

use std::time::Duration;

use serde_json::{Value, json};

use crate::runtime::{Call, Module, Tool};
use crate::subjects::ToolResult;

/// The longest `echo_sleep` waits, so a stray call cannot hold a slot for long.
const MAX_SLEEP_MS: u64 = 60_000;

pub fn module() -> Module {
    Module::new(
        "echo",
        env!("CARGO_PKG_VERSION"),
        "Echoes, fails, waits and tells who called: for trying the mesh out",
    )
    .tool(
        Tool::new(
            "echo",
            "Returns the text it is given",
            json!({
                "type": "object",
                "properties": {"text": {"type": "string", "description": "what to send back"}},
                "required": ["text"],
                "additionalProperties": false
            }),
            |call: Call| async move { ToolResult::text(str_arg(&call, "text")) },
        )
        .annotations(json!({"readOnlyHint": true, "idempotentHint": true, "openWorldHint": false})),
    )
    .tool(
        Tool::new(
            "fail",
            "Always answers with a tool error carrying the given text",
            json!({
                "type": "object",
                "properties": {"text": {"type": "string"}},
                "additionalProperties": false
            }),
            |call: Call| async move {
                let text = str_arg(&call, "text");
                ToolResult::error(if text.is_empty() {
                    "failed on request"
                } else {
                    text
                })
            },
        )
        .annotations(json!({"readOnlyHint": true})),
    )
    .tool(
        Tool::new(
            "sleep",
            "Waits the given milliseconds (at most 60000), then answers",
            json!({
                "type": "object",
                "properties": {"ms": {"type": "integer", "minimum": 0, "maximum": MAX_SLEEP_MS}},
                "required": ["ms"],
                "additionalProperties": false
            }),
            |call: Call| async move {
                let ms = call.args.get("ms").and_then(Value::as_u64).unwrap_or(0);
                tokio::time::sleep(Duration::from_millis(ms)).await;
                ToolResult::text(format!("slept {ms} ms"))
            },
        )
        .annotations(json!({"readOnlyHint": true})),
    )
    .tool(
        Tool::new(
            "whoami",
            "Tells who the bus says is calling, or that no identity came with the call",
            json!({"type": "object", "additionalProperties": false}),
            |call: Call| async move {
                match call.actor {
                    Some(a) => ToolResult::json(json!({
                        "actor": a.to_string(), "user": a.user, "account": a.account,
                        "relayed": a.relayed
                    })),
                    None => ToolResult::json(json!({"actor": null})),
                }
            },
        )
        .annotations(json!({"readOnlyHint": true})),
    )
}

fn str_arg<'a>(call: &'a Call, key: &str) -> &'a str {
    call.args
        .get(key)
        .and_then(Value::as_str)
        .unwrap_or_default()
}
