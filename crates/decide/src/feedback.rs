//! A person's answer on a candidate group — a pick, a reject ("none of these") or a decline —
//! recorded as an override and as labels for the next fit. `decide_apply`'s picks and
//! `decide_feedback` go through the same functions.

use std::sync::Arc;

use crate::store::answers::{self, Labelled};
use crate::store::{Db, DbResult, decisions, groups, links, runs};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::graph::{id, value_for};
use super::questions::{self, State};
use super::state::{Decide, locked};
use mesh_avu::term_attribute;
use mesh_core::runtime::{Call, Tool, WithText};

/// Weights of the labels a pick or reject writes.
const PICKED: f64 = 1.0;
const OFFERED_NOT_PICKED: f64 = 0.7;
const NONE_OF_THESE: f64 = 1.0;

#[derive(Debug, thiserror::Error)]
pub enum FeedbackError {
    #[error(
        "no candidate group {0} in the sidecar: give a group_id as decide_annotate or decide_explain shows it"
    )]
    NoGroup(String),
    #[error("candidate group {group} is no longer open: it was answered ({action} by {actor})")]
    Closed {
        group: String,
        action: String,
        actor: String,
    },
    #[error(
        "{chosen} is not one of the candidates offered for group {group}: pick one of {offered} (by its CURIE or decision id)"
    )]
    NotOffered {
        group: String,
        chosen: String,
        offered: String,
    },
    #[error("{0}")]
    Arguments(&'static str),
    #[error("no run {0} in the sidecar")]
    NoRun(String),
    #[error(
        "run {run} belongs to another caller (account {account}): only whoever annotated a run may answer its groups or apply it; annotate the card yourself"
    )]
    NotYours { run: String, account: String },
    #[error("decide sidecar: {0}")]
    Sidecar(#[from] crate::store::DbError),
}

/// Refuses a run that is not the caller's. A run belongs to whoever annotated it (`who`,
/// `Caller::id`: a person, or a module calling as itself; nobody in local mode, where every
/// run is everybody's).
pub fn check_owner(db: &Db, run_id: &str, who: Option<&str>) -> Result<(), FeedbackError> {
    let Some(owner) = runs::owner(db, run_id)? else {
        return Err(FeedbackError::NoRun(run_id.to_owned()));
    };
    if owner.as_deref() == who {
        return Ok(());
    }
    // The owner's account may be named, never the owner.
    let account = owner
        .as_deref()
        .and_then(|o| o.rsplit_once('@'))
        .map(|(_, a)| a.to_owned())
        .unwrap_or_else(|| "none: a run made without an identity".to_owned());
    Err(FeedbackError::NotYours {
        run: run_id.to_owned(),
        account,
    })
}

/// The run a candidate group belongs to.
pub fn run_of_group(db: &Db, group_id: &str) -> Result<String, FeedbackError> {
    groups::run_of(db, group_id)?.ok_or_else(|| FeedbackError::NoGroup(cut(group_id)))
}

pub use crate::store::groups::Offered;

impl Offered {
    /// `label (CURIE) p(fits)=0.83 L1`, or `label (CURIE) unranked`.
    pub fn display(&self) -> String {
        match self.p {
            Some(p) => format!(
                "{} ({}) p(fits)={p:.2} {}",
                self.label, self.curie, self.level
            ),
            None => format!("{} ({}) unranked", self.label, self.curie),
        }
    }
}

/// The pick or reject that closed a group.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Answered {
    pub action: String,
    pub actor: String,
}

/// A group as a person is asked about it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct GroupView {
    pub group_id: String,
    pub run_id: String,
    pub column: String,
    pub ontology: String,
    /// `proposed` (a winner the model is sure enough of), `abstain` (none) or `human`.
    pub outcome: String,
    /// The winning candidate's decision id: the model's, or the one a person picked.
    pub winner: Option<String>,
    /// The pick or reject that closed it; `None` while it is open.
    pub answered: Option<Answered>,
    /// p(the model's best candidate is the right term), and how it was made (`None` in runs
    /// recorded before decide kept them).
    pub best_p: Option<f64>,
    pub best_calibration: Option<String>,
    pub candidates: Vec<Offered>,
}

impl GroupView {
    pub fn is_open(&self) -> bool {
        self.answered.is_none()
    }

    /// The candidate a person names, by its decision id or its CURIE (letter case aside
    /// when only one matches so); anything else is refused with the group's candidates.
    pub fn candidate(&self, given: &str) -> Result<&Offered, FeedbackError> {
        let exact = self
            .candidates
            .iter()
            .find(|c| c.decision_id == given || c.curie == given);
        let loose = || {
            let mut same = self
                .candidates
                .iter()
                .filter(|c| c.curie.eq_ignore_ascii_case(given));
            match (same.next(), same.next()) {
                (Some(one), None) => Some(one),
                _ => None,
            }
        };
        exact
            .or_else(loose)
            .ok_or_else(|| FeedbackError::NotOffered {
                group: self.group_id.clone(),
                chosen: shown(given),
                offered: self.offered(),
            })
    }

    /// The candidates as an error message lists them: `label (CURIE)`, best first.
    fn offered(&self) -> String {
        let all: Vec<String> = self
            .candidates
            .iter()
            .map(|c| format!("{} ({})", one_line(&c.label, LABEL_WIDTH), c.curie))
            .collect();
        if all.is_empty() {
            "nothing: the group has no candidates".to_owned()
        } else {
            all.join(", ")
        }
    }

    /// The group for people: a head line (column, ontology, outcome, whether it is open),
    /// its id as `decide_feedback` takes it, then its candidates best first in a table
    /// (label, CURIE, p(fits), level), the winner marked `*`.
    pub fn text(&self) -> String {
        self.lines().join("\n")
    }

    /// [`GroupView::text`], line by line.
    pub fn lines(&self) -> Vec<String> {
        let state = match &self.answered {
            None if self.outcome == "abstain" => "abstain: no winner, open".to_owned(),
            None => format!("{}, open", self.outcome),
            Some(a) if a.action == "pick" => format!("picked by {}", a.actor),
            Some(a) => format!("none of these (rejected by {})", a.actor),
        };
        let mut lines = vec![
            format!(
                "column {}, ontology {}: {state}",
                one_line(&self.column, COLUMN_WIDTH),
                self.ontology
            ),
            format!("  group_id={}", self.group_id),
        ];
        if let (Some(p), Some(how)) = (self.best_p, &self.best_calibration) {
            lines.push(format!(
                "  p {p:.2} that the best candidate is right ({how})"
            ));
        }
        let label_width = self
            .candidates
            .iter()
            .map(|c| one_line(&c.label, LABEL_WIDTH).chars().count())
            .max()
            .unwrap_or(0)
            .max("label".len());
        let curie_width = self
            .candidates
            .iter()
            .map(|c| c.curie.chars().count())
            .max()
            .unwrap_or(0)
            .max("CURIE".len());
        lines.push(format!(
            "     {:label_width$}  {:curie_width$}  {:>4}  level",
            "label", "CURIE", "p"
        ));
        for c in &self.candidates {
            let mark = if self.winner.as_deref() == Some(c.decision_id.as_str()) {
                '*'
            } else {
                ' '
            };
            let p = c.p.map(|p| format!("{p:.2}")).unwrap_or_else(|| "-".into());
            lines.push(format!(
                "  {mark}  {:label_width$}  {:curie_width$}  {p:>4}  {}",
                one_line(&c.label, LABEL_WIDTH),
                c.curie,
                c.level
            ));
        }
        lines
    }
}

/// The widest a label or a column name is shown in a table; longer ones are cut short.
const LABEL_WIDTH: usize = 40;
const COLUMN_WIDTH: usize = 48;

/// `text` on one line of at most `width` characters: control characters as spaces, a long
/// text cut short with `…`.
pub fn one_line(text: &str, width: usize) -> String {
    let flat: String = text
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    if flat.chars().count() <= width {
        return flat;
    }
    let mut cut: String = flat.chars().take(width.saturating_sub(1)).collect();
    cut.push('…');
    cut
}

/// The most characters of a value a caller gave that an error message repeats.
const SHOWN: usize = 64;

/// A value a caller gave, as an error message shows it: quoted, and cut short when long.
pub fn shown(given: &str) -> String {
    if given.chars().count() <= SHOWN {
        format!("{given:?}")
    } else {
        format!("\"{}\" ({} bytes)", cut(given), given.len())
    }
}

/// An id a caller gave, as an error message shows it: control characters escaped, cut
/// short when long.
pub fn cut(given: &str) -> String {
    let mut cut: String = given
        .chars()
        .take(SHOWN)
        .flat_map(char::escape_debug)
        .collect();
    if given.chars().count() > SHOWN {
        cut.push('…');
    }
    cut
}

/// How a person answers a group, for the end of a text that shows groups: the commands,
/// with `example` (a group id and a CURIE of it) filled in when there is one.
pub fn how_to_answer(example: Option<(&str, &str)>) -> String {
    let (group, curie) = example.unwrap_or(("<group_id>", "<CURIE>"));
    [
        "* marks the winner. To answer a group (nothing is written until decide_apply):".to_owned(),
        format!("  mesh call decide_feedback group_id={group} pick={curie}"),
        "  (pick= any CURIE in its table; action=reject: none of these; action=decline: leave it open)"
            .to_owned(),
    ]
    .join("\n")
}

/// The group and its candidates, best first, as stored now.
pub fn group(db: &Db, group_id: &str) -> Result<GroupView, FeedbackError> {
    let groups::GroupRow {
        run_id,
        subject,
        ontology,
        outcome,
        winner,
        best_p,
        best_calibration,
    } = groups::row(db, group_id)?.ok_or_else(|| FeedbackError::NoGroup(cut(group_id)))?;
    let column = serde_json::from_str::<Value>(&subject)
        .ok()
        .and_then(|s| s["column"].as_str().map(str::to_owned))
        .unwrap_or(subject);
    let candidates = groups::offered(db, group_id)?;
    let answered =
        answers::closed_by(db, group_id)?.map(|(action, actor)| Answered { action, actor });
    Ok(GroupView {
        group_id: group_id.to_owned(),
        run_id,
        column,
        ontology,
        outcome,
        winner,
        answered,
        best_p,
        best_calibration,
        candidates,
    })
}

/// A run's groups (only those of `column`, when given), in the order annotate made them.
pub fn groups_of_run(
    db: &Db,
    run_id: &str,
    column: Option<&str>,
) -> Result<Vec<GroupView>, FeedbackError> {
    let ids = groups::of_run(db, run_id, column)?;
    ids.iter().map(|id| group(db, id)).collect()
}

/// The group, held for this transaction (another instance answering the same group waits
/// here until this one commits, then finds it closed), refused when a pick or reject closed
/// it already.
fn hold_open(tx: &Db, group_id: &str) -> Result<GroupView, FeedbackError> {
    groups::hold(tx, group_id)?;
    ensure_open(tx, group_id)
}

/// The group, refused when a pick or reject closed it already.
pub fn ensure_open(db: &Db, group_id: &str) -> Result<GroupView, FeedbackError> {
    let view = group(db, group_id)?;
    if let Some(Answered { action, actor }) = view.answered.clone() {
        return Err(FeedbackError::Closed {
            group: group_id.to_owned(),
            action,
            actor,
        });
    }
    Ok(view)
}

fn override_row(
    tx: &Db,
    group_id: &str,
    actor: Option<&str>,
    action: &str,
    chosen: Option<&str>,
    offered: &[Offered],
) -> DbResult<String> {
    let override_id = id();
    let offered: Vec<&str> = offered.iter().map(|o| o.decision_id.as_str()).collect();
    answers::record(
        tx,
        &override_id,
        group_id,
        actor,
        action,
        chosen,
        &json!(offered).to_string(),
    )?;
    Ok(override_id)
}

/// The same answer as a label for the chooser, whose question sees only what
/// `avu_apply_term`'s picker carries: the ontology, the value (the column's name) and the
/// candidate. Its own key: the chooser never learns from `term.fits` artifacts.
fn chooser_label(
    tx: &Db,
    view: &GroupView,
    candidate: &Offered,
    labelled: &Labelled,
) -> DbResult<()> {
    let state = json!({
        "ontology": view.ontology,
        "value": view.column,
        "candidate": {"curie": candidate.curie, "label": candidate.label},
    });
    let state = State::of(&state);
    answers::label_state(
        tx,
        &id(),
        &questions::CHOOSER.key(),
        &state,
        &view.run_id,
        labelled,
    )
}

/// A pick of `chosen` (a candidate's decision id or CURIE): its link becomes accepted (a
/// fresh one by the value rule when it was not the winner), the group's other unwritten
/// links rejected, the winner updated, an override and labels recorded. Returns the
/// override id.
pub fn pick(
    tx: &Db,
    group_id: &str,
    chosen: &str,
    actor: Option<&str>,
) -> Result<String, FeedbackError> {
    let view = hold_open(tx, group_id)?;
    let picked = view.candidate(chosen)?;
    let chosen = picked.decision_id.as_str();
    let override_id = override_row(tx, group_id, actor, "pick", Some(chosen), &view.candidates)?;
    // The person's answer supersedes the model's: a new decision, the old one untouched.
    let asked = decisions::asked(tx, chosen)?;
    let human = id();
    decisions::person_said_yes(tx, &human, &view.run_id, chosen, &asked)?;
    for c in &view.candidates {
        let (positive, weight, source) = if c.decision_id == chosen {
            (true, PICKED, "curator")
        } else {
            (false, OFFERED_NOT_PICKED, "implicit")
        };
        let labelled = Labelled {
            positive,
            weight,
            source,
            override_id: &override_id,
        };
        answers::label_decision(tx, &id(), &c.decision_id, &labelled)?;
        chooser_label(tx, &view, c, &labelled)?;
    }
    let existing = links::pick(tx, group_id, &picked.curie)?;
    if existing == 0 && !links::any_for(tx, group_id, &picked.curie)? {
        let value = fresh_value(tx, &view, picked, &asked.state_json, &asked.subject)?;
        links::insert(
            tx,
            &links::NewLink {
                id: &id(),
                run_id: &view.run_id,
                group_id,
                decision_id: &human,
                attribute: &term_attribute(&view.ontology, &picked.label),
                value: &value,
                unit: &picked.curie,
                status: "accepted",
            },
        )?;
    }
    groups::answered(tx, group_id, Some(chosen))?;
    Ok(override_id)
}

/// The value of a link for a candidate that was not the winner: the group's value-kind
/// answer (annotate asks it for every group), else — a run recorded before it did — the
/// convention, recorded as a rule. Never the backend: a pick runs inside a transaction.
fn fresh_value(
    tx: &Db,
    view: &GroupView,
    picked: &Offered,
    state_json: &str,
    subject: &str,
) -> Result<String, FeedbackError> {
    let mut state: Value = serde_json::from_str(state_json).unwrap_or(Value::Null);
    let column = state["column"].clone();
    let asked = decisions::answer_in_group(tx, &view.group_id, &questions::VALUE_KIND.key())?;
    let kind = match asked {
        Some(k) => k,
        None => {
            if let Some(o) = state.as_object_mut() {
                o.remove("candidate");
                o.insert(
                    "winner".into(),
                    json!({"curie": picked.curie, "label": picked.label, "p": picked.p}),
                );
            }
            let subject: Value = serde_json::from_str(subject).unwrap_or(Value::Null);
            crate::graph::value_kind_by_convention(
                tx,
                &view.run_id,
                &picked.decision_id,
                &subject,
                &state,
                "annotate asked no value kind for this group, and a pick asks no backend",
            )?
        }
    };
    let text = |k: &str| column[k].as_str().unwrap_or_default().to_owned();
    Ok(value_for(
        &kind,
        &text("name"),
        &text("profile"),
        &picked.label,
    ))
}

/// "None of these": every offered candidate a curator negative; the group's unwritten links
/// rejected and the group closed without a winner.
pub fn reject(tx: &Db, group_id: &str, actor: Option<&str>) -> Result<String, FeedbackError> {
    let view = hold_open(tx, group_id)?;
    let override_id = override_row(tx, group_id, actor, "reject", None, &view.candidates)?;
    let labelled = Labelled {
        positive: false,
        weight: NONE_OF_THESE,
        source: "curator",
        override_id: &override_id,
    };
    for c in &view.candidates {
        answers::label_decision(tx, &id(), &c.decision_id, &labelled)?;
        chooser_label(tx, &view, c, &labelled)?;
    }
    links::reject_unwritten(tx, group_id)?;
    groups::answered(tx, group_id, None)?;
    Ok(override_id)
}

/// A decline: recorded (who declined what), no label, the group left open and unwritten.
pub fn decline(tx: &Db, group_id: &str, actor: Option<&str>) -> Result<String, FeedbackError> {
    let view = hold_open(tx, group_id)?;
    Ok(override_row(
        tx,
        group_id,
        actor,
        "decline",
        None,
        &view.candidates,
    )?)
}

// The arguments of decide_feedback: a group and an answer on it. A pick names its candidate
// (`pick`, or `decision_id` as before; a CURIE or a decision id either way), and nothing else
// does. (Plain comments on the argument types: a doc comment would become the schema's
// description.)
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(extend(
    "if" = {"required": ["action"], "properties": {"action": {"enum": ["reject", "decline"]}}},
    "then" = {"not": {"anyOf": [{"required": ["pick"]}, {"required": ["decision_id"]}]}},
    "else" = {"oneOf": [{"required": ["pick"]}, {"required": ["decision_id"]}]}
))]
pub(super) struct Feedback {
    /// the group's id, as decide_annotate and decide_explain show it (group_id=…)
    #[schemars(length(min = 1))]
    group_id: String,
    /// pick (what naming a candidate means when left out), reject (none of these) or decline (leave it open)
    action: Option<Action>,
    /// the candidate picked: its CURIE (e.g. PATO:0000122), or its decision id
    pick: Option<String>,
    /// the candidate picked, as pick takes it (a CURIE or a decision id)
    decision_id: Option<String>,
}

// A person's answer on a group.
#[derive(Debug, Clone, Copy, PartialEq, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
#[schemars(inline)]
enum Action {
    Pick,
    Reject,
    Decline,
}

impl Action {
    fn name(self) -> &'static str {
        match self {
            Action::Pick => "pick",
            Action::Reject => "reject",
            Action::Decline => "decline",
        }
    }
}

impl Feedback {
    /// The answer the arguments give, and the candidate a pick names. The schema says the
    /// same; this is for a caller that did not go through it.
    fn answer(&self) -> Result<(Action, Option<&str>), FeedbackError> {
        let candidate = match (&self.pick, &self.decision_id) {
            (Some(_), Some(_)) => {
                return Err(FeedbackError::Arguments(
                    "give the candidate once: pick or decision_id, not both",
                ));
            }
            (Some(c), None) | (None, Some(c)) => Some(c.as_str()),
            (None, None) => None,
        };
        match (self.action, candidate) {
            (None | Some(Action::Pick), Some(c)) => Ok((Action::Pick, Some(c))),
            (None | Some(Action::Pick), None) => Err(FeedbackError::Arguments(
                "a pick names its candidate: pick=<CURIE> (or action=reject, action=decline)",
            )),
            (Some(a), None) => Ok((a, None)),
            (Some(_), Some(_)) => Err(FeedbackError::Arguments(
                "only a pick names a candidate: leave pick and decision_id out of a reject or a decline",
            )),
        }
    }
}

/// The `decide_feedback` tool.
pub(super) fn tool(decide: Arc<Decide>) -> Tool {
    Tool::typed_blocking(
        "feedback",
        "Records your answer on a candidate group (group_id as decide_annotate and decide_explain show it): pick=<CURIE> picks one of its candidates (authoritative: its AVU becomes accepted, for decide_apply to write), action=reject rejects them all (none of these), action=decline leaves it open; picks and rejects become labels for the next fit",
        decide,
        run,
    )
    .output_schema(json!({
        "type": "object",
        "required": ["group_id", "action", "override_id", "links"],
        "properties": {
            "group_id": {"type": "string"},
            "run_id": {"type": "string"},
            "column": {"type": "string"},
            "action": {"type": "string"},
            "picked": {"type": "object", "description": "a pick's candidate: decision_id, curie, label"},
            "override_id": {"type": "string"},
            "links": {"type": "array"}
        }
    }))
    .annotations(json!({"readOnlyHint": false, "destructiveHint": false, "idempotentHint": false, "openWorldHint": false}))
}

fn run(decide: &Decide, args: Feedback, call: Call) -> Result<WithText<Value>, FeedbackError> {
    let (action, candidate) = args.answer()?;
    let group_id = args.group_id.as_str();
    let actor = call.caller.id();
    let sidecar = locked(&decide.sidecar);
    let tx = sidecar.db.transaction()?;
    check_owner(&tx, &run_of_group(&tx, group_id)?, actor.as_deref())?;
    let override_id = match action {
        Action::Pick => pick(
            &tx,
            group_id,
            candidate.unwrap_or_default(),
            actor.as_deref(),
        )?,
        Action::Reject => reject(&tx, group_id, actor.as_deref())?,
        Action::Decline => decline(&tx, group_id, actor.as_deref())?,
    };
    let links = links::of_group(&tx, group_id)?;
    let view = group(&tx, group_id)?;
    tx.commit()?;
    let picked = match action {
        Action::Pick => view
            .winner
            .as_deref()
            .and_then(|w| view.candidates.iter().find(|c| c.decision_id == w)),
        _ => None,
    };
    let action = action.name();
    let mut text = match picked {
        Some(c) => format!(
            "pick recorded on group {group_id} (column {}): {} ({})",
            one_line(&view.column, COLUMN_WIDTH),
            one_line(&c.label, LABEL_WIDTH),
            c.curie
        ),
        None => format!(
            "{action} recorded on group {group_id} (column {})",
            one_line(&view.column, COLUMN_WIDTH)
        ),
    };
    for l in &links {
        text.push_str(&format!(
            "\n  {} = {} [{}]: {}",
            l["attribute"].as_str().unwrap_or_default(),
            l["value"].as_str().unwrap_or_default(),
            l["unit"].as_str().unwrap_or_default(),
            l["status"].as_str().unwrap_or_default()
        ));
    }
    text.push_str(&match action {
        "pick" => format!(
            "\nnothing is written yet: mesh call decide_apply run_id={} path=<path> dry_run=false writes the accepted AVUs",
            view.run_id
        ),
        "reject" => "\nthe group is closed without a winner: nothing of it will be written".into(),
        _ => "\nthe group stays open and unwritten: pick or reject it when you know".into(),
    });
    Ok(WithText {
        text,
        output: json!({
            "group_id": group_id, "run_id": view.run_id, "column": view.column,
            "action": action,
            "picked": picked.map(|c| json!({"decision_id": c.decision_id, "curie": c.curie, "label": c.label})),
            "override_id": override_id, "links": links,
        }),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tools::tests::accepts;

    #[test]
    fn a_pick_names_its_candidate_and_nothing_else_does() {
        accepts::<Feedback>(
            &[
                json!({"group_id": "g", "action": "pick", "decision_id": "d"}),
                json!({"group_id": "g", "action": "pick", "pick": "PATO:0000122"}),
                json!({"group_id": "g", "pick": "PATO:0000122"}),
                json!({"group_id": "g", "decision_id": "d"}),
                json!({"group_id": "g", "action": "reject"}),
                json!({"group_id": "g", "action": "decline"}),
            ],
            &[
                json!({"group_id": "g", "action": "pick"}),
                json!({"group_id": "g", "action": "reject", "decision_id": "d"}),
                json!({"group_id": "g", "action": "decline", "decision_id": "d"}),
                json!({"group_id": "g", "action": "reject", "pick": "PATO:0000122"}),
                json!({"group_id": "g", "pick": "PATO:0000122", "decision_id": "d"}),
                json!({"group_id": "g", "action": "pick", "pick": "P:1", "decision_id": "d"}),
                json!({"group_id": "", "action": "reject"}),
                json!({"group_id": "g", "action": "accept"}),
                json!({"action": "reject"}),
                json!({"group_id": "g"}),
                json!({"group_id": "g", "action": "reject", "colour": "red"}),
            ],
        );
    }

    #[test]
    fn the_arguments_say_one_answer() {
        let answer = |v: Value| {
            let f: Feedback = serde_json::from_value(v).unwrap();
            f.answer()
                .map(|(a, c)| (a, c.map(str::to_owned)))
                .map_err(|e| e.to_string())
        };
        assert_eq!(
            answer(json!({"group_id": "g", "pick": "PATO:1"})).unwrap(),
            (Action::Pick, Some("PATO:1".into()))
        );
        assert_eq!(
            answer(json!({"group_id": "g", "action": "reject"})).unwrap(),
            (Action::Reject, None)
        );
        for bad in [
            json!({"group_id": "g"}),
            json!({"group_id": "g", "action": "pick"}),
            json!({"group_id": "g", "action": "decline", "pick": "PATO:1"}),
            json!({"group_id": "g", "pick": "PATO:1", "decision_id": "d"}),
        ] {
            assert!(answer(bad.clone()).is_err(), "{bad}");
        }
    }

    fn view() -> GroupView {
        let offered = |d: &str, curie: &str, label: &str, p: Option<f64>| Offered {
            decision_id: d.into(),
            curie: curie.into(),
            label: label.into(),
            p,
            level: "L0".into(),
        };
        GroupView {
            group_id: "g1".into(),
            run_id: "r1".into(),
            column: "hindfootLength".into(),
            ontology: "pato".into(),
            outcome: "proposed".into(),
            winner: Some("d1".into()),
            answered: None,
            best_p: Some(0.81),
            best_calibration: Some("winner head".into()),
            candidates: vec![
                offered("d1", "PATO:0000122", "length", Some(0.912)),
                offered(
                    "d2",
                    "PATO:0000921",
                    &"a very long label ".repeat(8),
                    Some(0.1),
                ),
                offered("d3", "pato:0000001", "quality", None),
            ],
        }
    }

    #[test]
    fn a_candidate_is_named_by_its_curie_or_its_decision_id() {
        let v = view();
        assert_eq!(v.candidate("PATO:0000122").unwrap().decision_id, "d1");
        assert_eq!(v.candidate("d2").unwrap().curie, "PATO:0000921");
        assert_eq!(v.candidate("pato:0000122").unwrap().decision_id, "d1");
        assert_eq!(v.candidate("PATO:0000001").unwrap().decision_id, "d3");
        for bad in ["PATO:9999999", "' OR 1=1 --", "", "g1"] {
            let e = v.candidate(bad).unwrap_err().to_string();
            assert!(
                e.contains("not one of the candidates offered for group g1")
                    && e.contains("length (PATO:0000122)"),
                "{e}"
            );
        }
        let huge = "X".repeat(1 << 20);
        let e = v.candidate(&huge).unwrap_err().to_string();
        assert!(e.len() < 1000 && e.contains("1048576 bytes"), "{e}");
    }

    #[test]
    fn a_group_as_a_table() {
        let text = view().text();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(
            lines[0],
            "column hindfootLength, ontology pato: proposed, open"
        );
        assert_eq!(lines[1], "  group_id=g1");
        assert_eq!(
            lines[2],
            "  p 0.81 that the best candidate is right (winner head)"
        );
        let lines = [&lines[..2], &lines[3..]].concat();
        assert!(
            lines[3].starts_with("  *  length ") && lines[3].ends_with("PATO:0000122  0.91  L0"),
            "{text}"
        );
        assert!(
            lines[4].contains("…") && lines[4].contains("0.10"),
            "{text}"
        );
        assert!(lines[5].contains("   -  L0"), "{text}");
        assert!(lines.iter().all(|l| l.chars().count() <= 100), "{text}");
    }
}
