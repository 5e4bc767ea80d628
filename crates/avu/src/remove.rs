//! `avu_remove`: its declaration and answer; the change itself, one transaction, is `change`
//! in lib.rs.

use std::sync::Arc;

use schemars::JsonSchema;
use serde::Serialize;
use serde_json::json;

use super::{AvuOut, Avus, Change, Op, change};
use mesh_core::runtime::{Call, Tool, WithText};

/// What `avu_remove` did.
#[derive(Serialize, JsonSchema)]
pub struct Removed {
    path: String,
    /// the AVUs taken off
    removed: Vec<AvuOut>,
    /// the AVUs that were not there (reported, not an error)
    absent: Vec<AvuOut>,
}

pub(super) fn tool(avus: Arc<Avus>) -> Tool {
    Tool::typed_blocking(
        "remove",
        "Removes AVUs from a path under your home or a shared root; one that is not there is reported, not an error",
        avus,
        run,
    )
    .annotations(json!({"readOnlyHint": false, "destructiveHint": true, "idempotentHint": true, "openWorldHint": false}))
}

fn run(avus: &Avus, args: Change, call: Call) -> Result<WithText<Removed>, String> {
    let done = change(avus, args, &call, Op::Remove)?;
    Ok(WithText {
        text: done.text,
        output: Removed {
            path: done.path,
            removed: done.changed,
            absent: done.unchanged,
        },
    })
}
