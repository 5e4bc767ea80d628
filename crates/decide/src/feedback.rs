//! A person's answer on a candidate group — a pick, a reject ("none of these") or a decline —
//! recorded as an override and as labels for the next fit. `decide_apply`'s picks and
//! `decide_feedback` go through the same functions.

use std::sync::Arc;

use rusqlite::{OptionalExtension, Transaction, params};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::backend::{Backend, BackendError};
use super::graph::{id, record, value_for};
use super::policy::Policy;
use super::questions::{self, State};
use super::tools::{Decide, locked};
use mesh_avu::term_attribute;
use mesh_core::runtime::{Call, Tool, WithText};
use mesh_core::subjects::catalog::now_ms;

/// Weights of the labels a pick or reject writes.
const PICKED: f64 = 1.0;
const OFFERED_NOT_PICKED: f64 = 0.7;
const NONE_OF_THESE: f64 = 1.0;

#[derive(Debug, thiserror::Error)]
pub enum FeedbackError {
    #[error("no candidate group {0} in the sidecar")]
    NoGroup(String),
    #[error("candidate group {group} is no longer open: it was answered ({action} by {actor})")]
    Closed {
        group: String,
        action: String,
        actor: String,
    },
    #[error("{chosen:?} is not one of the candidates offered for group {group}")]
    NotOffered { group: String, chosen: String },
    #[error("no run {0} in the sidecar")]
    NoRun(String),
    #[error(
        "run {run} belongs to another caller (account {account}): only whoever annotated a run may answer its groups or apply it; annotate the card yourself"
    )]
    NotYours { run: String, account: String },
    #[error(transparent)]
    Backend(#[from] BackendError),
    #[error("decide sidecar: {0}")]
    Sidecar(#[from] rusqlite::Error),
}

/// Refuses a run that is not the caller's. A run belongs to whoever annotated it (`who`,
/// `Caller::id`: a person, or a module calling as itself; nobody in local mode, where every
/// run is everybody's).
pub fn check_owner(
    db: &rusqlite::Connection,
    run_id: &str,
    who: Option<&str>,
) -> Result<(), FeedbackError> {
    use rusqlite::OptionalExtension;
    let owner: Option<Option<String>> = db
        .query_row("SELECT actor FROM runs WHERE id = ?1", [run_id], |r| {
            r.get(0)
        })
        .optional()?;
    let Some(owner) = owner else {
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
pub fn run_of_group(db: &rusqlite::Connection, group_id: &str) -> Result<String, FeedbackError> {
    use rusqlite::OptionalExtension;
    db.query_row(
        "SELECT run_id FROM candidate_groups WHERE id = ?1",
        [group_id],
        |r| r.get(0),
    )
    .optional()?
    .ok_or_else(|| FeedbackError::NoGroup(group_id.to_owned()))
}

/// One candidate of a group as it is offered to a person.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Offered {
    pub decision_id: String,
    pub curie: String,
    pub label: String,
    /// p(fits); `None` when the backend gave no probability (unranked).
    pub p: Option<f64>,
    pub level: String,
}

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

/// A group as a person is asked about it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct GroupView {
    pub group_id: String,
    pub run_id: String,
    pub column: String,
    pub ontology: String,
    pub candidates: Vec<Offered>,
}

/// The group and its candidates, best first, as stored now.
pub fn group(db: &rusqlite::Connection, group_id: &str) -> Result<GroupView, FeedbackError> {
    let (run_id, subject, ontology): (String, String, String) = db
        .query_row(
            "SELECT run_id, subject, ontology FROM candidate_groups WHERE id = ?1",
            [group_id],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
        )
        .optional()?
        .ok_or_else(|| FeedbackError::NoGroup(group_id.to_owned()))?;
    let column = serde_json::from_str::<Value>(&subject)
        .ok()
        .and_then(|s| s["column"].as_str().map(str::to_owned))
        .unwrap_or(subject);
    let mut q = db.prepare_cached(
        "SELECT c.decision_id, c.curie, c.label, o.p, d.level
         FROM group_candidates c JOIN decisions d ON d.id = c.decision_id
         LEFT JOIN decision_options o ON o.decision_id = c.decision_id AND o.option = 'yes'
         WHERE c.group_id = ?1 ORDER BY o.p IS NULL, o.p DESC, c.rank",
    )?;
    let candidates = q
        .query_map([group_id], |r| {
            Ok(Offered {
                decision_id: r.get(0)?,
                curie: r.get(1)?,
                label: r.get(2)?,
                p: r.get(3)?,
                level: r.get(4)?,
            })
        })?
        .collect::<Result<_, _>>()?;
    Ok(GroupView {
        group_id: group_id.to_owned(),
        run_id,
        column,
        ontology,
        candidates,
    })
}

/// The answer that closed a group, if one did: (action, actor). Declines leave it open.
pub fn closed_by(
    db: &rusqlite::Connection,
    group_id: &str,
) -> rusqlite::Result<Option<(String, String)>> {
    db.query_row(
        "SELECT action, coalesce(actor, 'nobody') FROM overrides
         WHERE group_id = ?1 AND action IN ('pick', 'reject') ORDER BY created_ms LIMIT 1",
        [group_id],
        |r| Ok((r.get(0)?, r.get(1)?)),
    )
    .optional()
}

/// When a candidate group `g` is open: no pick or reject closed it (a decline does not).
pub const IS_OPEN: &str = "NOT EXISTS (SELECT 1 FROM overrides o
    WHERE o.group_id = g.id AND o.action IN ('pick', 'reject'))";

/// A run's open groups, in the order annotate made them.
pub fn open_groups(db: &rusqlite::Connection, run_id: &str) -> rusqlite::Result<Vec<String>> {
    let mut q = db.prepare_cached(&format!(
        "SELECT g.id FROM candidate_groups g WHERE g.run_id = ?1 AND {IS_OPEN} ORDER BY g.rowid"
    ))?;
    q.query_map([run_id], |r| r.get(0))?.collect()
}

fn ensure_open(tx: &Transaction, group_id: &str) -> Result<GroupView, FeedbackError> {
    let view = group(tx, group_id)?;
    if let Some((action, actor)) = closed_by(tx, group_id)? {
        return Err(FeedbackError::Closed {
            group: group_id.to_owned(),
            action,
            actor,
        });
    }
    Ok(view)
}

fn override_row(
    tx: &Transaction,
    group_id: &str,
    actor: Option<&str>,
    action: &str,
    chosen: Option<&str>,
    offered: &[Offered],
) -> rusqlite::Result<String> {
    let override_id = id();
    let offered: Vec<&str> = offered.iter().map(|o| o.decision_id.as_str()).collect();
    tx.execute(
        "INSERT INTO overrides (id, group_id, actor, action, chosen_decision_id, offered, created_ms)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
        params![
            override_id,
            group_id,
            actor,
            action,
            chosen,
            json!(offered).to_string(),
            now_ms() as i64
        ],
    )?;
    Ok(override_id)
}

/// A label on a candidate's term.fits state.
fn label(
    tx: &Transaction,
    decision_id: &str,
    positive: bool,
    weight: f64,
    source: &str,
    override_id: &str,
) -> rusqlite::Result<()> {
    tx.execute(
        "INSERT INTO labels (id, question_key, state_json, state_hash, option, positive, weight,
           source, override_id, created_ms, card)
         SELECT ?1, question_key, state_json, state_hash, 'yes', ?2, ?3, ?4, ?5, ?6,
                (SELECT r.card_name FROM runs r WHERE r.id = decisions.run_id)
         FROM decisions WHERE id = ?7",
        params![
            id(),
            positive,
            weight,
            source,
            override_id,
            now_ms() as i64,
            decision_id
        ],
    )?;
    Ok(())
}

/// The same answer as a label for the chooser, whose question sees only what
/// `avu_apply_term`'s picker carries: the ontology, the value (the column's name) and the
/// candidate. Its own key: the chooser never learns from `term.fits` artifacts.
fn chooser_label(
    tx: &Transaction,
    view: &GroupView,
    candidate: &Offered,
    positive: bool,
    weight: f64,
    source: &str,
    override_id: &str,
) -> rusqlite::Result<()> {
    let state = json!({
        "ontology": view.ontology,
        "value": view.column,
        "candidate": {"curie": candidate.curie, "label": candidate.label},
    });
    let state = State::of(&state);
    tx.execute(
        "INSERT INTO labels (id, question_key, state_json, state_hash, option, positive, weight,
           source, override_id, created_ms, card)
         VALUES (?1, ?2, ?3, ?4, 'yes', ?5, ?6, ?7, ?8, ?9,
                 (SELECT card_name FROM runs WHERE id = ?10))",
        params![
            id(),
            questions::CHOOSER.key(),
            state.json,
            state.hash,
            positive,
            weight,
            source,
            override_id,
            now_ms() as i64,
            view.run_id
        ],
    )?;
    Ok(())
}

/// A pick: the chosen candidate's link becomes accepted (a fresh one by the value rule when
/// it was not the winner), the group's other unwritten links rejected, the winner updated,
/// an override and labels recorded. Returns the override id.
pub fn pick(
    tx: &Transaction,
    backend: &dyn Backend,
    policy: &Policy,
    group_id: &str,
    chosen: &str,
    actor: Option<&str>,
) -> Result<String, FeedbackError> {
    let view = ensure_open(tx, group_id)?;
    let Some(picked) = view.candidates.iter().find(|c| c.decision_id == chosen) else {
        return Err(FeedbackError::NotOffered {
            group: group_id.to_owned(),
            chosen: chosen.to_owned(),
        });
    };
    let override_id = override_row(tx, group_id, actor, "pick", Some(chosen), &view.candidates)?;
    // The person's answer supersedes the model's: a new decision, the old one untouched.
    let (question_key, parent, state_json, state_hash, subject): (String, Option<String>, String, String, String) =
        tx.query_row(
            "SELECT question_key, parent_id, state_json, state_hash, subject FROM decisions WHERE id = ?1",
            [chosen],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?)),
        )?;
    let human = id();
    tx.execute(
        "INSERT INTO decisions (id, run_id, parent_id, supersedes, question_key, subject,
           state_json, state_hash, level, calibration, answer, p, margin, outcome, created_ms)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, 'rule', 'human', 'yes', NULL, NULL, 'human', ?9)",
        params![
            human,
            view.run_id,
            parent,
            chosen,
            question_key,
            subject,
            state_json,
            state_hash,
            now_ms() as i64
        ],
    )?;
    for c in &view.candidates {
        let (positive, weight, source) = if c.decision_id == chosen {
            (true, PICKED, "curator")
        } else {
            (false, OFFERED_NOT_PICKED, "implicit")
        };
        label(tx, &c.decision_id, positive, weight, source, &override_id)?;
        chooser_label(tx, &view, c, positive, weight, source, &override_id)?;
    }
    let now = now_ms() as i64;
    // Links already written stay as they are: a pick never unwrites.
    tx.execute(
        "UPDATE avu_links SET status = 'rejected', updated_ms = ?3
         WHERE group_id = ?1 AND unit != ?2 AND status IN ('proposed', 'accepted')",
        params![group_id, picked.curie, now],
    )?;
    let existing = tx.execute(
        "UPDATE avu_links SET status = 'accepted', updated_ms = ?3
         WHERE group_id = ?1 AND unit = ?2 AND status IN ('proposed', 'rejected')",
        params![group_id, picked.curie, now],
    )?;
    let already: bool = tx.query_row(
        "SELECT count(*) > 0 FROM avu_links WHERE group_id = ?1 AND unit = ?2",
        params![group_id, picked.curie],
        |r| r.get(0),
    )?;
    if existing == 0 && !already {
        let value = fresh_value(tx, backend, policy, &view, picked, &state_json, &subject)?;
        tx.execute(
            "INSERT INTO avu_links (id, run_id, group_id, decision_id, attribute, value, unit,
               status, updated_ms)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, 'accepted', ?8)",
            params![
                id(),
                view.run_id,
                group_id,
                human,
                term_attribute(&view.ontology, &picked.label),
                value,
                picked.curie,
                now
            ],
        )?;
    }
    tx.execute(
        "UPDATE candidate_groups SET winner_decision_id = ?2, outcome = 'human', updated_ms = ?3
         WHERE id = ?1",
        params![group_id, chosen, now],
    )?;
    Ok(override_id)
}

/// The value of a link for a candidate that was not the winner: the group's value-kind
/// answer where annotate asked it, else the question asked now about this candidate.
fn fresh_value(
    tx: &Transaction,
    backend: &dyn Backend,
    policy: &Policy,
    view: &GroupView,
    picked: &Offered,
    state_json: &str,
    subject: &str,
) -> Result<String, FeedbackError> {
    let mut state: Value = serde_json::from_str(state_json).unwrap_or(Value::Null);
    let column = state["column"].clone();
    let asked: Option<String> = tx
        .query_row(
            "SELECT d.answer FROM decisions d JOIN group_candidates c ON d.parent_id = c.decision_id
             WHERE c.group_id = ?1 AND d.question_key = ?2 ORDER BY d.created_ms DESC LIMIT 1",
            params![view.group_id, questions::VALUE_KIND.key()],
            |r| r.get(0),
        )
        .optional()?;
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
            let options: Vec<String> = questions::VALUE_KIND
                .options
                .iter()
                .map(|s| s.to_string())
                .collect();
            let answer = backend.ask(&questions::VALUE_KIND, &state, &options)?;
            let outcome = policy.outcome(&questions::VALUE_KIND, &answer);
            let subject: Value = serde_json::from_str(subject).unwrap_or(Value::Null);
            record(
                tx,
                &view.run_id,
                Some(&picked.decision_id),
                &questions::VALUE_KIND,
                &subject,
                &state,
                Ok(&answer),
                outcome,
            )?;
            answer.answer
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
pub fn reject(
    tx: &Transaction,
    group_id: &str,
    actor: Option<&str>,
) -> Result<String, FeedbackError> {
    let view = ensure_open(tx, group_id)?;
    let override_id = override_row(tx, group_id, actor, "reject", None, &view.candidates)?;
    for c in &view.candidates {
        label(
            tx,
            &c.decision_id,
            false,
            NONE_OF_THESE,
            "curator",
            &override_id,
        )?;
        chooser_label(tx, &view, c, false, NONE_OF_THESE, "curator", &override_id)?;
    }
    let now = now_ms() as i64;
    tx.execute(
        "UPDATE avu_links SET status = 'rejected', updated_ms = ?2
         WHERE group_id = ?1 AND status IN ('proposed', 'accepted')",
        params![group_id, now],
    )?;
    tx.execute(
        "UPDATE candidate_groups SET winner_decision_id = NULL, outcome = 'human', updated_ms = ?2
         WHERE id = ?1",
        params![group_id, now],
    )?;
    Ok(override_id)
}

/// A decline: recorded (who declined what), no label, the group left open and unwritten.
pub fn decline(
    tx: &Transaction,
    group_id: &str,
    actor: Option<&str>,
) -> Result<String, FeedbackError> {
    let view = ensure_open(tx, group_id)?;
    Ok(override_row(
        tx,
        group_id,
        actor,
        "decline",
        None,
        &view.candidates,
    )?)
}

// The arguments of decide_feedback: a decision id with a pick, and only then. (Plain
// comments on the argument types: a doc comment would become the schema's description.)
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(extend(
    "if" = {"properties": {"action": {"const": "pick"}}},
    "then" = {"required": ["decision_id"]},
    "else" = {"not": {"required": ["decision_id"]}}
))]
pub(super) struct Feedback {
    #[schemars(length(min = 1))]
    group_id: String,
    action: Action,
    /// the candidate picked (its decision id, as decide_explain and decide_apply show)
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

/// The `decide_feedback` tool.
pub(super) fn tool(decide: Arc<Decide>) -> Tool {
    Tool::typed_blocking(
        "feedback",
        "Records your answer on a candidate group: pick one of its candidates (authoritative: its AVU becomes accepted), reject them all (none of these), or decline (leave it open); picks and rejects become labels for the next fit",
        decide,
        run,
    )
    .output_schema(json!({
        "type": "object",
        "required": ["group_id", "action", "override_id", "links"],
        "properties": {
            "group_id": {"type": "string"},
            "action": {"type": "string"},
            "override_id": {"type": "string"},
            "links": {"type": "array"}
        }
    }))
    .annotations(json!({"readOnlyHint": false, "destructiveHint": false, "idempotentHint": false, "openWorldHint": false}))
}

fn run(decide: &Decide, args: Feedback, call: Call) -> Result<WithText<Value>, FeedbackError> {
    let (group_id, action) = (args.group_id.as_str(), args.action);
    let actor = call.caller.id();
    let mut sidecar = locked(&decide.sidecar);
    let tx = sidecar.db.transaction()?;
    check_owner(&tx, &run_of_group(&tx, group_id)?, actor.as_deref())?;
    let override_id = match action {
        Action::Pick => pick(
            &tx,
            decide.backend.as_ref(),
            &decide.policy,
            group_id,
            args.decision_id.as_deref().unwrap_or_default(),
            actor.as_deref(),
        )?,
        Action::Reject => reject(&tx, group_id, actor.as_deref())?,
        Action::Decline => decline(&tx, group_id, actor.as_deref())?,
    };
    let links = group_links(&tx, group_id)?;
    tx.commit()?;
    let action = action.name();
    let mut text = format!("{action} recorded on group {group_id}");
    for l in &links {
        text.push_str(&format!(
            "\n  {} = {} [{}]: {}",
            l["attribute"].as_str().unwrap_or_default(),
            l["value"].as_str().unwrap_or_default(),
            l["unit"].as_str().unwrap_or_default(),
            l["status"].as_str().unwrap_or_default()
        ));
    }
    Ok(WithText {
        text,
        output: json!({
            "group_id": group_id, "action": action,
            "override_id": override_id, "links": links,
        }),
    })
}

/// A group's AVU links as feedback reports them.
fn group_links(tx: &Transaction, group_id: &str) -> rusqlite::Result<Vec<Value>> {
    let mut q = tx.prepare(
        "SELECT id, attribute, value, unit, status FROM avu_links WHERE group_id = ?1 ORDER BY rowid",
    )?;
    q.query_map([group_id], |r| {
        Ok(json!({
            "link_id": r.get::<_, String>(0)?,
            "attribute": r.get::<_, String>(1)?,
            "value": r.get::<_, String>(2)?,
            "unit": r.get::<_, Option<String>>(3)?,
            "status": r.get::<_, String>(4)?,
        }))
    })?
    .collect()
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
                json!({"group_id": "g", "action": "reject"}),
                json!({"group_id": "g", "action": "decline"}),
            ],
            &[
                json!({"group_id": "g", "action": "pick"}),
                json!({"group_id": "g", "action": "reject", "decision_id": "d"}),
                json!({"group_id": "g", "action": "decline", "decision_id": "d"}),
                json!({"group_id": "", "action": "reject"}),
                json!({"group_id": "g", "action": "accept"}),
                json!({"action": "reject"}),
                json!({"group_id": "g"}),
                json!({"group_id": "g", "action": "reject", "colour": "red"}),
            ],
        );
    }
}
