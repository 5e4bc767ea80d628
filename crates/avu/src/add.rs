//! `avu_add`: its declaration; the change itself, one transaction, is `change` in mod.rs.

use serde_json::json;

use super::change_schema;
use mesh_core::runtime::{Call, Tool};
use mesh_core::subjects::ToolResult;

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
