//! The `decisions` table and its options: every answer to a question, never updated — a
//! person's answer is a new decision that supersedes the model's.

use serde_json::Value;

use super::{Db, DbResult, Sink};
use crate::params;
use mesh_core::subjects::catalog::now_ms;

/// A decision as the graph records it.
pub struct NewDecision<'a> {
    pub id: &'a str,
    pub run_id: &'a str,
    pub parent: Option<&'a str>,
    pub question_key: &'a str,
    pub subject: &'a str,
    pub state_json: &'a str,
    pub state_hash: &'a str,
    /// L0, L1, L2 or rule.
    pub level: &'a str,
    pub calibration: Option<&'a str>,
    pub answer: &'a str,
    /// Absent exactly when a rule decided.
    pub p: Option<f64>,
    pub margin: Option<f64>,
    pub outcome: &'a str,
}

pub fn insert(sink: &dyn Sink, d: &NewDecision) -> DbResult<()> {
    sink.run(
        "INSERT INTO decisions (id, run_id, parent_id, question_key, subject, state_json,
           state_hash, level, calibration, answer, p, margin, outcome, created_ms)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14)",
        params![
            d.id,
            d.run_id,
            d.parent,
            d.question_key,
            d.subject,
            d.state_json,
            d.state_hash,
            d.level,
            d.calibration,
            d.answer,
            d.p,
            d.margin,
            d.outcome,
            now_ms() as i64
        ],
    )
}

/// One option the backend weighed for a decision.
pub fn option(
    sink: &dyn Sink,
    decision_id: &str,
    option: &str,
    score: f64,
    p: f64,
) -> DbResult<()> {
    sink.run(
        "INSERT INTO decision_options (decision_id, option, score, p) VALUES (?1, ?2, ?3, ?4)",
        params![decision_id, option, score, p],
    )
}

/// What a decision was asked on: its question, parent, state and subject.
pub struct Asked {
    pub question_key: String,
    pub parent: Option<String>,
    pub state_json: String,
    pub state_hash: String,
    pub subject: String,
}

pub fn asked(db: &Db, id: &str) -> DbResult<Asked> {
    db.query_row(
        "SELECT question_key, parent_id, state_json, state_hash, subject FROM decisions WHERE id = ?1",
        params![id],
        |r| {
            Ok(Asked {
                question_key: r.get(0)?,
                parent: r.get(1)?,
                state_json: r.get(2)?,
                state_hash: r.get(3)?,
                subject: r.get(4)?,
            })
        },
    )
}

/// A decision's question key and state, if there is such a decision.
pub fn state(db: &Db, id: &str) -> DbResult<Option<(String, String)>> {
    db.query_opt(
        "SELECT question_key, state_json FROM decisions WHERE id = ?1",
        params![id],
        |r| Ok((r.get(0)?, r.get(1)?)),
    )
}

/// A person's "yes" on the same question as `superseded`, recorded as a new decision.
pub fn person_said_yes(
    tx: &Db,
    id: &str,
    run_id: &str,
    superseded: &str,
    asked: &Asked,
) -> DbResult<()> {
    tx.execute(
        "INSERT INTO decisions (id, run_id, parent_id, supersedes, question_key, subject,
           state_json, state_hash, level, calibration, answer, p, margin, outcome, created_ms)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, 'rule', 'human', 'yes', NULL, NULL, 'human', ?9)",
        params![
            id,
            run_id,
            asked.parent,
            superseded,
            asked.question_key,
            asked.subject,
            asked.state_json,
            asked.state_hash,
            now_ms() as i64
        ],
    )
    .map(|_| ())
}

/// The latest answer to `question_key` asked under one of a group's candidates.
pub fn answer_in_group(db: &Db, group_id: &str, question_key: &str) -> DbResult<Option<String>> {
    db.query_opt(
        "SELECT d.answer FROM decisions d JOIN group_candidates c ON d.parent_id = c.decision_id
             WHERE c.group_id = ?1 AND d.question_key = ?2 ORDER BY d.created_ms DESC LIMIT 1",
        params![group_id, question_key],
        |r| r.get(0),
    )
}

/// A run's decisions (only `column`'s, when given) in the order made, each naming its term
/// (a candidate's, or the winner's) or its rule.
pub fn of_run(db: &Db, run_id: &str, column: Option<&str>) -> DbResult<Vec<Value>> {
    super::named(
        db,
        "SELECT id, parent_id, question_key, subject, answer, level, calibration, p, margin, outcome,
           coalesce(json_extract(state_json, '$.candidate.curie'), json_extract(state_json, '$.winner.curie')) AS curie,
           coalesce(json_extract(state_json, '$.candidate.label'), json_extract(state_json, '$.winner.label')) AS label,
           json_extract(state_json, '$.rule') AS rule
         FROM decisions
         WHERE run_id = ?1 AND (CAST(?2 AS TEXT) IS NULL OR json_extract(subject, '$.column') = ?2)
         ORDER BY created_ms, rowid",
        params![run_id, column],
    )
}
