//! `decide_explain`: a run's decisions, groups and links, or the decisions behind a path's
//! AVUs, as tables for people and JSON for programs.

use std::sync::Arc;

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};

use crate::feedback::{self, GroupView};
use crate::shown::{avu_text, count, example, write_hint};
use crate::state::{Decide, locked};
use crate::store::{DbResult, decisions, groups, links, runs};
use mesh_core::runtime::{Call, Tool, WithText};

/// Why a run or path could not be explained: each says what to do.
#[derive(Debug, thiserror::Error)]
pub enum ExplainError {
    #[error("{0}; `decide_explain path=…` shows what it wrote")]
    NotYours(#[source] feedback::FeedbackError),
    #[error("no run {0} in the sidecar: give a run_id as decide_annotate showed it")]
    NoRun(String),
    #[error("cannot read the sidecar: {0}")]
    Sidecar(#[from] feedback::FeedbackError),
    #[error("cannot read the sidecar: {0}")]
    Db(#[from] crate::store::DbError),
    #[error("give run_id or path")]
    NothingNamed,
    #[error(transparent)]
    Path(#[from] mesh_avu::path::PathError),
    #[error(
        "cursor {0:?} is not one decide_explain gave: pass a previous answer's next as it came"
    )]
    Cursor(String),
}

/// `decide_explain`, declared.
pub(crate) fn tool(decide: Arc<Decide>) -> Tool {
    Tool::typed_blocking(
        "explain",
        "Lists a run's decisions with level, calibration and probability (each naming its term), its candidate groups with their candidates (label, CURIE, p, level), winner and outcome, its AVU links with their status and its open groups; or, given a path, the decisions behind the AVUs on it",
        decide,
        explain,
    )
    .output_schema(json!({"type": "object"}))
    .annotations(json!({"readOnlyHint": true, "idempotentHint": true, "openWorldHint": false}))
}

// The arguments of decide_explain: a run (optionally one column of it), or a path.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(extend("oneOf" = [{"required": ["run_id"]}, {"required": ["path"]}]))]
pub(super) struct Explain {
    run_id: Option<String>,
    /// with run_id: only this column's decisions, links and groups (a wide run is read column by column)
    column: Option<String>,
    path: Option<String>,
    /// with path: at most this many links in this answer (500 unless said)
    #[schemars(range(min = 1, max = 1000))]
    limit: Option<usize>,
    /// with path: where the previous answer stopped (its `next`)
    cursor: Option<String>,
}

/// The most AVU links one answer of `decide_explain path=…` lists.
const LINKS_PAGE: usize = 500;

fn explain(decide: &Decide, args: Explain, call: Call) -> Result<WithText<Value>, ExplainError> {
    let sidecar = locked(&decide.sidecar);
    let db = &sidecar.db;
    // Only one column's part of a run, when asked: a wide run is read in parts.
    let column = args.column.as_deref();
    let who = call.caller.id();
    if let Some(run_id) = &args.run_id {
        match feedback::check_owner(db, run_id, who.as_deref()) {
            Ok(()) => {}
            Err(e @ feedback::FeedbackError::NotYours { .. }) => {
                return Err(ExplainError::NotYours(e));
            }
            Err(feedback::FeedbackError::NoRun(_)) => {
                return Err(ExplainError::NoRun(feedback::cut(run_id)));
            }
            Err(e) => return Err(ExplainError::Sidecar(e)),
        }
        let read = || -> Result<(Value, Vec<GroupView>), feedback::FeedbackError> {
            let card = runs::card(db, run_id)?;
            let views = feedback::groups_of_run(db, run_id, column)?;
            let mut groups = Vec::with_capacity(views.len());
            for view in &views {
                let mut g = serde_json::to_value(view).unwrap_or(Value::Null);
                g["open"] = json!(view.is_open());
                g["links"] = json!(links::of_group(db, &view.group_id)?);
                // The evidence that carried the winner: each part of its fit, what it adds.
                if let Some(winner) = &view.winner
                    && let Some((key, state)) = decisions::state(db, winner)?
                {
                    let kind = key.split('@').next().unwrap_or_default();
                    let state: Value = serde_json::from_str(&state).unwrap_or(Value::Null);
                    g["carried_by"] = crate::backend::carried_by(kind, &state)
                        .into_iter()
                        .map(|(why, adds)| json!({"why": why, "adds": (adds * 100.0).round() / 100.0}))
                        .collect();
                }
                groups.push(g);
            }
            let v = json!({
                "run_id": run_id,
                "card": {"id": card.0, "name": card.1},
                // Each decision names the term it is about: a candidate's (term.fits), or the
                // winner's (avu.value_kind, avu.keep); a rule names its reason.
                "decisions": decisions::of_run(db, run_id, column)?,
                "links": links::of_run_shown(db, run_id, column)?,
                "open_groups": groups::open_of_run_shown(db, run_id, column)?,
                "groups": groups,
            });
            Ok((v, views))
        };
        let (v, views) = read()?;
        let text = run_explained(&v, &views, column);
        return Ok(WithText { text, output: v });
    }
    let Some(given) = &args.path else {
        return Err(ExplainError::NothingNamed);
    };
    let path = mesh_avu::path::normalise(given)?;
    let path = &path;
    // A path's links grow with every run written there: a page at a time, after the link
    // the cursor names (the sidecar's own order).
    let after: i64 = match &args.cursor {
        None => 0,
        Some(c) => c
            .parse()
            .map_err(|_| ExplainError::Cursor(feedback::cut(c)))?,
    };
    let limit = args.limit.unwrap_or(LINKS_PAGE).clamp(1, LINKS_PAGE);
    let mut next = None;
    let mut read = || -> DbResult<Value> {
        // The caller's own runs in full; another's only as far as avu shows it to anyone
        // (the AVUs written on the path), with nothing that would let them act on it.
        let mut links = links::on_path(db, path, column, after, limit + 1)?;
        if links.len() > limit {
            links.truncate(limit);
            next = links
                .last()
                .and_then(|l| l["link_row"].as_i64())
                .map(|r| r.to_string());
        }
        let links: Vec<Value> = links
            .into_iter()
            .filter_map(|mut l| {
                l.as_object_mut()?.remove("link_row");
                let owner = l.as_object_mut()?.remove("owner").unwrap_or(Value::Null);
                if owner.as_str() == who.as_deref() {
                    return Some(l);
                }
                (l["status"] == "written").then(|| {
                    json!({"attribute": l["attribute"], "value": l["value"], "unit": l["unit"],
                           "status": l["status"], "yours": false})
                })
            })
            .collect();
        Ok(json!({"path": path, "links": links}))
    };
    let mut v = read()?;
    let mut text = path_explained(&v);
    if let Some(n) = next {
        text.push_str("\nmore follow: call again with cursor = next");
        v["next"] = json!(n);
    }
    Ok(WithText { text, output: v })
}

/// The widest a line of text output gets before a list is wrapped.
const WIDTH: usize = 96;

/// `head` then `items` joined with `, `, wrapped before `WIDTH` onto lines indented by
/// `indent` spaces.
fn wrapped(head: String, items: &[String], indent: usize) -> Vec<String> {
    let mut lines = vec![head];
    for (i, item) in items.iter().enumerate() {
        let sep = if i + 1 < items.len() { "," } else { "" };
        let last = lines.last_mut().expect("one line at least");
        if i > 0 && last.chars().count() + 1 + item.chars().count() + sep.len() > WIDTH {
            lines.push(format!("{}{item}{sep}", " ".repeat(indent)));
        } else {
            last.push_str(&format!(" {item}{sep}"));
        }
    }
    lines
}

/// Rows as aligned columns two spaces apart, those numbered in `right` aligned right; each
/// cell on one line and cut at 40 characters.
fn table(head: &[&str], rows: &[Vec<String>], right: &[usize]) -> Vec<String> {
    let cells: Vec<Vec<String>> = std::iter::once(head.iter().map(|h| h.to_string()).collect())
        .chain(rows.iter().map(|r| {
            r.iter()
                .map(|c| feedback::one_line(c, 40))
                .collect::<Vec<_>>()
        }))
        .collect();
    let widths: Vec<usize> = (0..head.len())
        .map(|i| {
            cells
                .iter()
                .map(|r| r.get(i).map_or(0, |c| c.chars().count()))
                .max()
                .unwrap_or(0)
        })
        .collect();
    cells
        .iter()
        .map(|r| {
            let line: Vec<String> = r
                .iter()
                .enumerate()
                .map(|(i, c)| {
                    if right.contains(&i) {
                        format!("{c:>w$}", w = widths[i])
                    } else {
                        format!("{c:w$}", w = widths[i])
                    }
                })
                .collect();
            format!("  {}", line.join("  ").trim_end())
        })
        .collect()
}

/// A decision in a few words: `aspect quality (0.71 L0)`, its outcome when it is not
/// `proposed`.
fn decided(d: &Value) -> String {
    let key = d["question_key"].as_str().unwrap_or_default();
    let kind = key.split('@').next().unwrap_or(key);
    let kind = kind.strip_prefix("column.").unwrap_or(kind);
    let answer = d["answer"].as_str().unwrap_or_default();
    let outcome = d["outcome"].as_str().unwrap_or_default();
    let how = match (d["p"].as_f64(), d["level"].as_str().unwrap_or_default()) {
        // Nothing fitted it on labels: said so, not only its level.
        (Some(p), "L0") => format!("{p:.2} uncalibrated"),
        (Some(p), level) => format!("{p:.2} {level}"),
        (None, _) => "rule".to_owned(),
    };
    if outcome == "proposed" {
        format!("{kind} {answer} ({how})")
    } else {
        format!("{kind} {answer} ({how}, {outcome})")
    }
}

/// A run explained for people: a line for the run, then column by column what was asked
/// about it, its group as a table of candidates and its AVU links with their status; then
/// how to answer an open group.
fn run_explained(v: &Value, views: &[GroupView], only: Option<&str>) -> String {
    let empty = Vec::new();
    let decisions = v["decisions"].as_array().unwrap_or(&empty);
    let links = v["links"].as_array().unwrap_or(&empty);
    let open = views.iter().filter(|g| g.is_open()).count();
    let mut lines = vec![
        format!(
            "run {} on {}",
            v["run_id"].as_str().unwrap_or_default(),
            feedback::one_line(v["card"]["name"].as_str().unwrap_or_default(), 60),
        ),
        format!(
            "{}{}, {} ({open} open), {}",
            only.map(|c| format!("column {}: ", feedback::one_line(c, 40)))
                .unwrap_or_default(),
            count(decisions.len(), "decision", "decisions"),
            count(views.len(), "candidate group", "candidate groups"),
            count(links.len(), "AVU link", "AVU links"),
        ),
    ];
    // The columns in the order they were decided.
    let column_of = |d: &Value| -> String {
        let subject = d["subject"].as_str().unwrap_or_default();
        serde_json::from_str::<Value>(subject)
            .ok()
            .and_then(|s| s["column"].as_str().map(str::to_owned))
            .unwrap_or_else(|| subject.to_owned())
    };
    let mut columns: Vec<String> = Vec::new();
    for d in decisions {
        let c = column_of(d);
        if !columns.contains(&c) {
            columns.push(c);
        }
    }
    let mut single = false;
    for column in &columns {
        let asked: Vec<&Value> = decisions
            .iter()
            .filter(|d| {
                column_of(d) == *column
                    && d["question_key"]
                        .as_str()
                        .is_some_and(|k| k.starts_with("column."))
            })
            .collect();
        let summary: Vec<String> = asked.iter().map(|d| decided(d)).collect();
        let shown = feedback::one_line(column, 48);
        let groups: Vec<&GroupView> = views.iter().filter(|g| g.column == *column).collect();
        if groups.is_empty() {
            let (line, items) = match asked.first() {
                Some(d) if d["level"] == "rule" => (
                    format!(
                        "column {shown}: not annotated, set aside by rule ({})",
                        d["rule"].as_str().unwrap_or("a rule")
                    ),
                    Vec::new(),
                ),
                Some(d) if d["outcome"] != "proposed" => (
                    format!("column {shown}: not annotated: {}", decided(d)),
                    Vec::new(),
                ),
                _ => (
                    format!("column {shown}: no candidate terms found; asked:"),
                    summary,
                ),
            };
            // Columns without a group one line each, together.
            if !single {
                lines.push(String::new());
            }
            single = true;
            lines.extend(wrapped(line, &items, 4));
            continue;
        }
        single = false;
        for g in groups {
            lines.push(String::new());
            let mut block = g.lines();
            let asked = wrapped("  asked:".to_owned(), &summary, 4);
            block.splice(2..2, asked);
            lines.extend(block);
            let carried: Vec<String> = v["groups"]
                .as_array()
                .into_iter()
                .flatten()
                .filter(|j| j["group_id"] == json!(g.group_id))
                .flat_map(|j| j["carried_by"].as_array().cloned().unwrap_or_default())
                .filter_map(|c| {
                    Some(format!(
                        "{} ({:+.1})",
                        c["why"].as_str()?,
                        c["adds"].as_f64()?
                    ))
                })
                .collect();
            if !carried.is_empty() {
                lines.extend(wrapped("  the winner, carried by:".to_owned(), &carried, 4));
            }
            let linked = links.iter().any(|l| l["group_id"] == json!(g.group_id));
            // A winner the keep question turned down is an abstention, a result of its own:
            // its p is below the one its head keeps from, and the column is a curator's.
            if g.winner.is_some() && !linked {
                lines.push(format!(
                    "  abstained: the winner not kept{}, too likely wrong; the column is yours to annotate",
                    g.best_p.map(|p| format!(" at p {p:.2}")).unwrap_or_default()
                ));
            }
            for l in links.iter().filter(|l| l["group_id"] == json!(g.group_id)) {
                lines.push(format!(
                    "  AVU {}: {}",
                    avu_text(
                        l["attribute"].as_str().unwrap_or_default(),
                        l["value"].as_str().unwrap_or_default(),
                        l["unit"].as_str().unwrap_or_default()
                    ),
                    l["status"].as_str().unwrap_or_default()
                ));
            }
        }
    }
    lines.push(String::new());
    if example(views).is_some() {
        lines.push(feedback::how_to_answer(example(views)));
    } else if !views.is_empty() {
        lines.push("every candidate group is answered".to_owned());
    }
    lines.push(write_hint(v["run_id"].as_str().unwrap_or_default()));
    lines.push(format!(
        "every decision, with its calibration and margin:\n  mesh call decide_explain run_id={} --json",
        v["run_id"].as_str().unwrap_or_default()
    ));
    lines.join("\n")
}

/// The links on a path for people: a table of attribute, value, unit, status and the
/// decision behind each (another's run shows only what avu shows anyone).
fn path_explained(v: &Value) -> String {
    let empty = Vec::new();
    let links = v["links"].as_array().unwrap_or(&empty);
    let path = v["path"].as_str().unwrap_or_default();
    let mut lines = vec![format!(
        "{} decide recorded on {path}",
        count(links.len(), "AVU link", "AVU links")
    )];
    if links.is_empty() {
        return lines.join("\n");
    }
    let text = |l: &Value, k: &str| l[k].as_str().unwrap_or("-").to_owned();
    let rows: Vec<Vec<String>> = links
        .iter()
        .map(|l| {
            let (p, level) = if l["yours"] == false {
                ("-".to_owned(), "another's run".to_owned())
            } else if l["calibration"] == "human" {
                ("-".to_owned(), "your pick".to_owned())
            } else {
                (
                    l["p"]
                        .as_f64()
                        .map(|p| format!("{p:.2}"))
                        .unwrap_or_else(|| "-".into()),
                    text(l, "level"),
                )
            };
            vec![
                text(l, "attribute"),
                text(l, "value"),
                text(l, "unit"),
                text(l, "status"),
                p,
                level,
            ]
        })
        .collect();
    lines.extend(table(
        &["attribute", "value", "unit", "status", "p", "level"],
        &rows,
        &[4],
    ));
    lines.join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tools::tests::accepts;

    #[test]
    fn a_decision_nothing_calibrated_says_so() {
        let d = |p: Value, level: &str, outcome: &str| {
            decided(
                &json!({"question_key": "column.aspect@abc", "answer": "quality",
                "p": p, "level": level, "outcome": outcome}),
            )
        };
        assert_eq!(
            d(json!(0.71), "L0", "proposed"),
            "aspect quality (0.71 uncalibrated)"
        );
        assert_eq!(d(json!(0.71), "L1", "proposed"), "aspect quality (0.71 L1)");
        assert_eq!(
            d(Value::Null, "rule", "rule"),
            "aspect quality (rule, rule)"
        );
    }

    #[test]
    fn explain_takes_a_run_or_a_path() {
        accepts::<Explain>(
            &[
                json!({"run_id": "r"}),
                json!({"run_id": "r", "column": "c"}),
                json!({"path": "/mesh/home/ann/x"}),
                json!({"path": "/mesh/home/ann/x", "column": "c"}),
            ],
            &[
                json!({}),
                json!({"column": "c"}),
                json!({"run_id": "r", "path": "/mesh/home/ann/x"}),
                json!({"run_id": null}),
                json!({"run_id": "r", "colour": "red"}),
            ],
        );
    }
}
