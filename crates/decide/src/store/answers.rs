//! A person's answers: the `overrides` table (who picked, rejected or declined what) and the
//! `labels` each pick or reject leaves for the next fit.

use super::{Db, DbResult};
use crate::params;
use mesh_core::subjects::catalog::now_ms;

/// An override: `action` on a group by `actor`, with the decisions offered (as JSON).
pub fn record(
    tx: &Db,
    id: &str,
    group_id: &str,
    actor: Option<&str>,
    action: &str,
    chosen: Option<&str>,
    offered_json: &str,
) -> DbResult<()> {
    tx.execute(
        "INSERT INTO overrides (id, group_id, actor, action, chosen_decision_id, offered, created_ms)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
        params![
            id,
            group_id,
            actor,
            action,
            chosen,
            offered_json,
            now_ms() as i64
        ],
    )
    .map(|_| ())
}

/// The answer that closed a group, if one did: (action, actor). Declines leave it open.
pub fn closed_by(db: &Db, group_id: &str) -> DbResult<Option<(String, String)>> {
    db.query_opt(
        "SELECT action, coalesce(actor, 'nobody') FROM overrides
         WHERE group_id = ?1 AND action IN ('pick', 'reject') ORDER BY created_ms LIMIT 1",
        params![group_id],
        |r| Ok((r.get(0)?, r.get(1)?)),
    )
}

/// How a label came about.
pub struct Labelled<'a> {
    pub positive: bool,
    pub weight: f64,
    /// `curator` or `implicit`.
    pub source: &'a str,
    pub override_id: &'a str,
}

/// A label on the question and state a decision was asked on.
pub fn label_decision(tx: &Db, id: &str, decision_id: &str, l: &Labelled) -> DbResult<()> {
    tx.execute(
        "INSERT INTO labels (id, question_key, state_json, state_hash, option, positive, weight,
           source, override_id, created_ms, card)
         SELECT ?1, question_key, state_json, state_hash, 'yes', ?2, ?3, ?4, ?5, ?6,
                (SELECT r.card_name FROM runs r WHERE r.id = decisions.run_id)
         FROM decisions WHERE id = ?7",
        params![
            id,
            l.positive,
            l.weight,
            l.source,
            l.override_id,
            now_ms() as i64,
            decision_id
        ],
    )
    .map(|_| ())
}

/// A label on a question and state of the caller's making, from run `run_id`'s card.
pub fn label_state(
    tx: &Db,
    id: &str,
    question_key: &str,
    state: &crate::questions::State,
    run_id: &str,
    l: &Labelled,
) -> DbResult<()> {
    tx.execute(
        "INSERT INTO labels (id, question_key, state_json, state_hash, option, positive, weight,
           source, override_id, created_ms, card)
         VALUES (?1, ?2, ?3, ?4, 'yes', ?5, ?6, ?7, ?8, ?9,
                 (SELECT card_name FROM runs WHERE id = ?10))",
        params![
            id,
            question_key,
            state.json,
            state.hash,
            l.positive,
            l.weight,
            l.source,
            l.override_id,
            now_ms() as i64,
            run_id
        ],
    )
    .map(|_| ())
}

/// One label as the fit reads it.
pub struct Label {
    pub question_key: String,
    pub state_json: String,
    pub positive: bool,
    pub weight: f64,
    /// The card it came from ('' when unknown).
    pub card: String,
}

/// Every label, in the order recorded.
pub fn labels(db: &Db) -> DbResult<Vec<Label>> {
    db.query_map(
        "SELECT question_key, state_json, positive, weight, coalesce(card, '') FROM labels
         ORDER BY created_ms, rowid",
        params![],
        |r| {
            Ok(Label {
                question_key: r.get(0)?,
                state_json: r.get(1)?,
                positive: r.get(2)?,
                weight: r.get(3)?,
                card: r.get(4)?,
            })
        },
    )
}
