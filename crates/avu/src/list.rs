//! `avu_list`: the AVUs on one path (anyone may read).

use std::sync::Arc;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::json;

use super::{AvuOut, Avus, avu_text, locked, path};
use mesh_core::runtime::{Call, Tool, WithText};

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct List {
    /// an absolute object path
    path: String,
}

/// The AVUs on a path.
#[derive(Serialize, JsonSchema)]
pub struct Listed {
    /// the path, normalised
    path: String,
    avus: Vec<AvuOut>,
}

pub(super) fn tool(avus: Arc<Avus>) -> Tool {
    Tool::typed_blocking(
        "list",
        "Lists the AVUs on one path (the path is normalised first)",
        avus,
        run,
    )
    .annotations(json!({"readOnlyHint": true, "idempotentHint": true, "openWorldHint": false}))
}

fn run(avus: &Avus, args: List, _call: Call) -> Result<WithText<Listed>, String> {
    let normal = path::normalise(&args.path).map_err(|e| e.to_string())?;
    let found = locked(&avus.store)
        .list(&normal)
        .map_err(|e| e.to_string())?;
    let mut text = format!("{} AVUs on {normal}", found.len());
    for a in &found {
        text.push_str("\n  ");
        text.push_str(&avu_text(a));
    }
    Ok(WithText {
        text,
        output: Listed {
            path: normal,
            avus: found.iter().map(AvuOut::from).collect(),
        },
    })
}
