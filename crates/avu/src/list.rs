//! `avu_list`: the AVUs on one path (anyone may read).

use serde_json::json;

use super::{Avus, avu_text, avus_json, locked, path, str_arg};
use mesh_core::runtime::{Call, Tool};
use mesh_core::subjects::ToolResult;

pub(super) fn tool<F, Fut>(handler: F) -> Tool
where
    F: Fn(Call) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = ToolResult> + Send + 'static,
{
    Tool::new(
        "list",
        "Lists the AVUs on one path (the path is normalised first)",
        json!({
            "type": "object",
            "properties": {"path": {"type": "string", "description": "an absolute object path"}},
            "required": ["path"],
            "additionalProperties": false
        }),
        handler,
    )
    .output_schema(json!({
        "type": "object",
        "required": ["path", "avus"],
        "properties": {"path": {"type": "string"}, "avus": {"type": "array"}}
    }))
    .annotations(json!({"readOnlyHint": true, "idempotentHint": true, "openWorldHint": false}))
}

pub(super) fn run(avus: &Avus, call: Call) -> ToolResult {
    let normal = match path::normalise(str_arg(&call, "path").unwrap_or_default()) {
        Ok(p) => p,
        Err(e) => return ToolResult::error(e.to_string()),
    };
    match locked(&avus.store).list(&normal) {
        Ok(found) => {
            let mut text = format!("{} AVUs on {normal}", found.len());
            for a in &found {
                text.push_str("\n  ");
                text.push_str(&avu_text(a));
            }
            ToolResult {
                structured_content: Some(json!({"path": normal, "avus": avus_json(&found)})),
                ..ToolResult::text(text)
            }
        }
        Err(e) => ToolResult::error(e.to_string()),
    }
}
