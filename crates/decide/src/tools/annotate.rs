//! `decide_annotate`: a card through the decision graph, recorded, its groups shown.

use std::path::{Component, Path, PathBuf};
use std::sync::Arc;

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;

use crate::calibrated::Calibrated;
use crate::card::{self, CardError};
use crate::feedback::{self, FeedbackError, GroupView};
use crate::graph::{self, GraphError, Run};
use crate::learn::bundle::Bundle;
use crate::semantic::Semantic;
use crate::shown::{avu_text, count, example, write_hint};
use crate::state::{Decide, locked};
use mesh_core::runtime::{Call, Tool};
use mesh_core::subjects::ToolResult;

/// Why a card was not annotated: each says what to do.
#[derive(Debug, thiserror::Error)]
pub enum AnnotateError {
    #[error(
        "card_path {given:?} must name a file inside decide's cards directory ({cards}), without .."
    )]
    OutsideCards { given: String, cards: String },
    #[error("cannot read card {given}: {source}")]
    Unreadable {
        given: String,
        source: std::io::Error,
    },
    #[error("give card_text or card_path")]
    NoCard,
    #[error(transparent)]
    Card(#[from] CardError),
    #[error("annotate failed: {0}")]
    Graph(#[from] GraphError),
    #[error("annotate failed: decide sidecar: {0}")]
    Sidecar(#[from] crate::store::DbError),
    #[error("annotate recorded run {run}, but: {source}")]
    Recorded { run: String, source: FeedbackError },
}

/// `decide_annotate`, declared.
pub(crate) fn tool(decide: Arc<Decide>) -> Tool {
    Tool::typed_blocking(
        "annotate",
        "Decides, column by column, which ontology terms describe a dataset card, records every decision, and proposes AVUs (it writes none)",
        decide,
        annotate,
    )
    .output_schema(json!({
        "type": "object",
        "required": ["run_id", "card"],
        "properties": {
            "run_id": {"type": "string"},
            "card": {"type": "object"},
            "groups": {"type": "array"},
            "proposed": {"type": "array"},
            "truncated": {"type": "boolean", "description": "the run was too large for one reply: read it with decide_explain run_id column"},
            "columns": {"type": "array", "items": {"type": "string"}},
            "groups_count": {"type": "integer"},
            "proposed_count": {"type": "integer"}
        },
        "oneOf": [
            {"required": ["groups", "proposed"]},
            {"required": ["truncated", "columns"]}
        ]
    }))
    .annotations(json!({"readOnlyHint": false, "destructiveHint": false, "idempotentHint": false, "openWorldHint": false}))
}

// The arguments of decide_annotate: the card itself, or a file under the cards directory.
// (Plain comments on the argument types: a doc comment would become the schema's
// description.)
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(extend("oneOf" = [{"required": ["card_text"]}, {"required": ["card_path"]}]))]
pub(super) struct Annotate {
    /// the card itself (see docs/cards.md)
    card_text: Option<String>,
    /// a card file under decide's cards directory
    card_path: Option<String>,
}

/// A card path inside `cards`, refusing any path that leaves it.
fn card_file(cards: &Path, given: &str) -> Result<PathBuf, AnnotateError> {
    let relative = Path::new(given);
    if relative.is_absolute()
        || relative
            .components()
            .any(|c| !matches!(c, Component::Normal(_) | Component::CurDir))
    {
        return Err(AnnotateError::OutsideCards {
            given: given.to_owned(),
            cards: cards.display().to_string(),
        });
    }
    Ok(cards.join(relative))
}

fn annotate(decide: &Decide, args: Annotate, call: Call) -> ToolResult {
    annotated(decide, args, &call).unwrap_or_else(|e| ToolResult::error(e.to_string()))
}

/// The card an annotate call names: given, or read from the cards directory.
fn card_text(decide: &Decide, args: Annotate) -> Result<String, AnnotateError> {
    match (args.card_text, args.card_path) {
        (Some(t), _) => Ok(t),
        (_, Some(p)) => {
            let file = card_file(&decide.cards, &p)?;
            std::fs::read_to_string(&file)
                .map_err(|source| AnnotateError::Unreadable { given: p, source })
        }
        (None, None) => Err(AnnotateError::NoCard),
    }
}

fn annotated(decide: &Decide, args: Annotate, call: &Call) -> Result<ToolResult, AnnotateError> {
    let text = card_text(decide, args)?;
    let card = card::parse(&text)?;
    let actor = call.caller.id();
    let bundle = decide.bundle();
    let backend = Calibrated {
        inner: decide.backend.as_ref(),
        bundle: bundle.as_deref(),
    };
    // The index is locked for each lookup only, the sidecar only to write what was decided:
    // a backend that waits on a server holds up no other call.
    let terms = Semantic::new(&decide.index, decide.embedder.as_ref().ok());
    let (run, journal) = graph::annotate_reporting(
        &card,
        &terms,
        &backend,
        &decide.policy,
        actor.as_deref(),
        bundle.as_deref().map(Bundle::version),
        &mut |done, of, column| {
            call.progress.report(
                done as f64,
                Some(of as f64),
                Some(&format!("column {column}")),
            )
        },
    )?;
    let views = {
        let mut sidecar = locked(&decide.sidecar);
        journal.write(&mut sidecar)?;
        // The groups as a person sees them, read back as stored (with each candidate's level).
        feedback::groups_of_run(&sidecar.db, &run.run_id, None).map_err(|source| {
            AnnotateError::Recorded {
                run: run.run_id.clone(),
                source,
            }
        })?
    };
    let whole = ToolResult {
        structured_content: Some(json!({
            "run_id": run.run_id,
            "card": {"id": run.card_id, "name": run.card_name},
            "groups": run.groups,
            "proposed": run.proposed,
        })),
        ..ToolResult::text(run_text(&run, &views))
    };
    let size = serde_json::to_vec(&whole)
        .map(|v| v.len())
        .unwrap_or(usize::MAX);
    if size <= RESULT_BUDGET {
        return Ok(whole);
    }
    // Recorded, but more than one reply carries: the run id and the way to read it in parts.
    let columns: Vec<&str> = card.columns.iter().map(|c| c.name.as_str()).collect();
    Ok(ToolResult {
        structured_content: Some(json!({
            "run_id": run.run_id,
            "card": {"id": run.card_id, "name": run.card_name},
            "groups_count": run.groups.len(),
            "proposed_count": run.proposed.len(),
            "columns": columns,
            "truncated": true,
        })),
        ..ToolResult::text(format!(
            "run {} on {}: {} groups, {} AVUs proposed. The whole result is {size} bytes, more than one reply carries: read it column by column with decide_explain run_id={} column=<name> (the columns are listed in structuredContent)",
            run.run_id,
            run.card_name,
            run.groups.len(),
            run.proposed.len(),
            run.run_id
        ))
    })
}

/// A run for people: a line for the run, then each group as a table of its candidates
/// with the AVU proposed for it, then how to answer a group and how to write.
fn run_text(run: &Run, views: &[GroupView]) -> String {
    let mut lines = vec![
        format!(
            "run {} on {}",
            run.run_id,
            feedback::one_line(&run.card_name, 60)
        ),
        format!(
            "{}, {} proposed; nothing written",
            count(run.groups.len(), "candidate group", "candidate groups"),
            count(run.proposed.len(), "AVU", "AVUs"),
        ),
    ];
    for view in views {
        lines.push(String::new());
        lines.extend(view.lines());
        for l in run.proposed.iter().filter(|l| l.group_id == view.group_id) {
            lines.push(format!(
                "  AVU {}: {}",
                avu_text(&l.attribute, &l.value, &l.unit),
                l.status
            ));
        }
    }
    lines.push(String::new());
    if views.is_empty() {
        lines.push(
            "no column found candidate terms: decide_explain run_id=… says why, column by column"
                .into(),
        );
        return lines.join("\n");
    }
    lines.push(feedback::how_to_answer(example(views)));
    lines.push(write_hint(&run.run_id));
    lines.join("\n")
}

/// The most an annotate result may take before it is given in parts (the bus carries 1 MiB
/// by default; the rest is for the envelope and the headers).
const RESULT_BUDGET: usize = 512 << 10;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tools::tests::accepts;
    use serde_json::json;

    #[test]
    fn card_paths_stay_inside_the_cards_directory() {
        let cards = Path::new("/srv/decide/cards");
        assert_eq!(card_file(cards, "a/b.md").unwrap(), cards.join("a/b.md"));
        for bad in ["../secret", "/etc/passwd", "a/../../x"] {
            assert!(card_file(cards, bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn annotate_takes_a_card_or_a_card_path() {
        accepts::<Annotate>(
            &[
                json!({"card_text": "# a card"}),
                json!({"card_path": "a/b.md"}),
                json!({"card_text": ""}),
            ],
            &[
                json!({}),
                json!({"card_text": "# a card", "card_path": "a/b.md"}),
                json!({"card_text": null}),
                json!({"card_text": 7}),
                json!({"card_text": "# a card", "colour": "red"}),
            ],
        );
    }
}
