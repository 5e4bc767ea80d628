//! `avu_list`: the AVUs on one path (anyone may read).

use std::sync::Arc;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::json;

use super::{AvuOut, Avus, avu_text, locked, path};
use crate::store::Avu;
use mesh_core::runtime::{Call, Tool, WithText};

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct List {
    /// an absolute object path
    path: String,
    /// at most this many AVUs in this answer (1000 unless said)
    #[schemars(range(min = 1, max = 1000))]
    limit: Option<usize>,
    /// where the previous answer stopped: its `next`
    cursor: Option<String>,
}

/// The AVUs on a path.
#[derive(Serialize, JsonSchema)]
pub struct Listed {
    /// the path, normalised
    path: String,
    avus: Vec<AvuOut>,
    /// more follow: call again with this as `cursor`
    #[serde(skip_serializing_if = "Option::is_none")]
    next: Option<String>,
}

/// The most AVUs one answer lists.
const PAGE: usize = 1000;

/// A cursor: the last AVU of a page, base64url of its JSON, opaque to the caller.
fn cursor_of(a: &Avu) -> String {
    use base64::Engine;
    base64::engine::general_purpose::URL_SAFE_NO_PAD
        .encode(serde_json::to_vec(&[&a.attribute, &a.value, &a.unit]).expect("serialises"))
}

fn avu_of(cursor: &str) -> Result<Avu, String> {
    use base64::Engine;
    let bad = || {
        format!(
            "cursor {cursor:?} is not one this tool gave: pass a previous answer's next as it came"
        )
    };
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(cursor)
        .map_err(|_| bad())?;
    let [attribute, value, unit]: [String; 3] =
        serde_json::from_slice(&bytes).map_err(|_| bad())?;
    Ok(Avu {
        attribute,
        value,
        unit,
    })
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
    let after = args.cursor.as_deref().map(avu_of).transpose()?;
    let limit = args.limit.unwrap_or(PAGE).clamp(1, PAGE);
    // One more than asked for, to know whether more follow.
    let mut found = locked(&avus.store)
        .list_page(&normal, after.as_ref(), limit + 1)
        .map_err(|e| e.to_string())?;
    let more = found.len() > limit;
    found.truncate(limit);
    let next = more.then(|| cursor_of(found.last().expect("a page before more")));
    let n = found.len();
    let mut text = format!("{n} AVU{} on {normal}", if n == 1 { "" } else { "s" });
    if after.is_some() {
        text.push_str(" (after the cursor)");
    }
    for a in &found {
        text.push_str("\n  ");
        text.push_str(&avu_text(a));
    }
    if next.is_some() {
        text.push_str("\nmore follow: call again with cursor = next");
    }
    Ok(WithText {
        text,
        output: Listed {
            path: normal,
            avus: found.iter().map(AvuOut::from).collect(),
            next,
        },
    })
}
