//! `avu_add`: attaches AVUs to a path the actor may write, in one transaction.

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
        "add",
        "Adds AVUs to a path under your home or a shared root; one already there is left as it is",
        change_schema(),
        handler,
    )
    .output_schema(json!({
        "type": "object",
        "required": ["path", "added", "present"],
        "properties": {
            "path": {"type": "string"},
            "added": {"type": "array"},
            "present": {"type": "array"}
        }
    }))
    .annotations(json!({"readOnlyHint": false, "destructiveHint": false, "idempotentHint": true, "openWorldHint": false}))
}

pub(super) fn run(avus: &Avus, call: Call) -> ToolResult {
    let (list, (path, actor)) =
        match avus_of(&call).and_then(|l| Ok((l, writable(avus, &call, "avu_add")?))) {
            Ok(x) => x,
            Err(e) => return ToolResult::error(e),
        };
    let who = actor.to_string();
    let changed = match locked(&avus.store).add(&path, &list, &writer(&who, actor.relayed, &call)) {
        Ok(c) => c,
        Err(e) => return ToolResult::error(e.to_string()),
    };
    let (added, present): (Vec<_>, Vec<_>) =
        list.into_iter().zip(changed).partition(|(_, new)| *new);
    let added: Vec<_> = added.into_iter().map(|(a, _)| a).collect();
    let present: Vec<_> = present.into_iter().map(|(a, _)| a).collect();
    let mut text = format!("{} added to {path}", added.len());
    for a in &added {
        text.push_str("\n  + ");
        text.push_str(&avu_text(a));
    }
    if !present.is_empty() {
        text.push_str(&format!("\n{} already there", present.len()));
    }
    ToolResult {
        structured_content: Some(json!({
            "path": path,
            "added": avus_json(&added),
            "present": avus_json(&present),
        })),
        ..ToolResult::text(text)
    }
}
