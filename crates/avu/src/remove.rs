//! `avu_remove`: its declaration; the change itself, one transaction, is `change` in mod.rs.

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
