//! `avu_add`: its declaration and answer; the change itself, one transaction, is `change` in
//! lib.rs.

use std::sync::Arc;

use schemars::JsonSchema;
use serde::Serialize;
use serde_json::json;

use super::{AvuOut, Avus, Change, Op, change};
use mesh_core::runtime::{Call, Tool, WithText};

/// What `avu_add` did.
#[derive(Serialize, JsonSchema)]
pub struct Added {
    path: String,
    /// the AVUs written
    added: Vec<AvuOut>,
    /// the AVUs that were there already, left as they were
    present: Vec<AvuOut>,
}

pub(super) fn tool(avus: Arc<Avus>) -> Tool {
    Tool::typed_blocking(
        "add",
        "Adds AVUs to a path under your home or a shared root; one already there is left as it is",
        avus,
        run,
    )
    .annotations(json!({"readOnlyHint": false, "destructiveHint": false, "idempotentHint": true, "openWorldHint": false}))
}

fn run(avus: &Avus, args: Change, call: Call) -> Result<WithText<Added>, String> {
    let done = change(avus, args, &call, Op::Add)?;
    Ok(WithText {
        text: done.text,
        output: Added {
            path: done.path,
            added: done.changed,
            present: done.unchanged,
        },
    })
}
