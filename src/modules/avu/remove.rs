//! `avu_remove`: takes AVUs off a path the actor may write, in one transaction.

use serde_json::json;

use super::{Avus, avu_text, avus_json, avus_of, change_schema, locked, writable, writer};
use crate::runtime::{Call, Tool};
use crate::subjects::ToolResult;

pub(super) fn tool<F, Fut>(handler: F) -> Tool
where
    F: Fn(Call) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = ToolResult> + Send + 'static,
{
    Tool::new(
        "remove",
        "Removes AVUs from a path under your home or a shared root; one that is not there is reported, not an error",
        change_schema(),
        handler,
    )
    .output_schema(json!({
        "type": "object",
        "required": ["path", "removed", "absent"],
        "properties": {
            "path": {"type": "string"},
            "removed": {"type": "array"},
            "absent": {"type": "array"}
        }
    }))
    .annotations(json!({"readOnlyHint": false, "destructiveHint": true, "idempotentHint": true, "openWorldHint": false}))
}

pub(super) fn run(avus: &Avus, call: Call) -> ToolResult {
    let (list, (path, actor)) =
        match avus_of(&call).and_then(|l| Ok((l, writable(avus, &call, "avu_remove")?))) {
            Ok(x) => x,
            Err(e) => return ToolResult::error(e),
        };
    let who = actor.to_string();
    let changed =
        match locked(&avus.store).remove(&path, &list, &writer(&who, actor.relayed, &call)) {
            Ok(c) => c,
            Err(e) => return ToolResult::error(e.to_string()),
        };
    let (removed, absent): (Vec<_>, Vec<_>) =
        list.into_iter().zip(changed).partition(|(_, gone)| *gone);
    let removed: Vec<_> = removed.into_iter().map(|(a, _)| a).collect();
    let absent: Vec<_> = absent.into_iter().map(|(a, _)| a).collect();
    let mut text = format!("{} removed from {path}", removed.len());
    for a in &removed {
        text.push_str("\n  - ");
        text.push_str(&avu_text(a));
    }
    if !absent.is_empty() {
        text.push_str(&format!("\n{} were not there", absent.len()));
    }
    ToolResult {
        structured_content: Some(json!({
            "path": path,
            "removed": avus_json(&removed),
            "absent": avus_json(&absent),
        })),
        ..ToolResult::text(text)
    }
}
