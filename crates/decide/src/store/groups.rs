//! The `candidate_groups` table and its candidates: one group per column and ontology, its
//! candidate terms in the order found, its winner and whether a person has answered it.

use serde::Serialize;
use serde_json::Value;

use super::{Db, DbResult, Sink};
use crate::params;
use mesh_core::subjects::catalog::now_ms;

/// When a candidate group `g` is open: no pick or reject closed it (a decline does not).
const IS_OPEN: &str = "NOT EXISTS (SELECT 1 FROM overrides o
    WHERE o.group_id = g.id AND o.action IN ('pick', 'reject'))";

/// A group as the graph records it.
pub struct NewGroup<'a> {
    pub id: &'a str,
    pub run_id: &'a str,
    pub subject: &'a str,
    pub ontology: &'a str,
    pub winner: Option<&'a str>,
    pub top_p: f64,
    pub margin: f64,
    pub outcome: &'a str,
    pub best_p: f64,
    pub best_calibration: &'a str,
}

pub fn insert(sink: &dyn Sink, g: &NewGroup) -> DbResult<()> {
    sink.run(
        "INSERT INTO candidate_groups (id, run_id, scope, subject, ontology, winner_decision_id,
           top_p, margin, outcome, updated_ms, best_p, best_calibration)
         VALUES (?1, ?2, 'column', ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)",
        params![
            g.id,
            g.run_id,
            g.subject,
            g.ontology,
            g.winner,
            g.top_p,
            g.margin,
            g.outcome,
            now_ms() as i64,
            g.best_p,
            g.best_calibration
        ],
    )
}

/// A group's candidate at `rank` in the order found.
pub fn candidate(
    sink: &dyn Sink,
    group_id: &str,
    decision_id: &str,
    curie: &str,
    label: &str,
    rank: usize,
) -> DbResult<()> {
    sink.run(
        "INSERT INTO group_candidates (group_id, decision_id, curie, label, rank)
         VALUES (?1, ?2, ?3, ?4, ?5)",
        params![group_id, decision_id, curie, label, rank as i64],
    )
}

/// A group as stored.
pub struct GroupRow {
    pub run_id: String,
    pub subject: String,
    pub ontology: String,
    pub outcome: String,
    pub winner: Option<String>,
    pub best_p: Option<f64>,
    pub best_calibration: Option<String>,
}

pub fn row(db: &Db, group_id: &str) -> DbResult<Option<GroupRow>> {
    db.query_opt(
        "SELECT run_id, subject, ontology, outcome, winner_decision_id, best_p, best_calibration
         FROM candidate_groups WHERE id = ?1",
        params![group_id],
        |r| {
            Ok(GroupRow {
                run_id: r.get(0)?,
                subject: r.get(1)?,
                ontology: r.get(2)?,
                outcome: r.get(3)?,
                winner: r.get(4)?,
                best_p: r.get(5)?,
                best_calibration: r.get(6)?,
            })
        },
    )
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

/// A group's candidates, best first (by p(fits), then the order found).
pub fn offered(db: &Db, group_id: &str) -> DbResult<Vec<Offered>> {
    db.query_map(
        "SELECT c.decision_id, c.curie, c.label, o.p, d.level
         FROM group_candidates c JOIN decisions d ON d.id = c.decision_id
         LEFT JOIN decision_options o ON o.decision_id = c.decision_id AND o.option = 'yes'
         WHERE c.group_id = ?1 ORDER BY o.p IS NULL, o.p DESC, c.rank",
        params![group_id],
        |r| {
            Ok(Offered {
                decision_id: r.get(0)?,
                curie: r.get(1)?,
                label: r.get(2)?,
                p: r.get(3)?,
                level: r.get(4)?,
            })
        },
    )
}

/// The run a group belongs to.
pub fn run_of(db: &Db, group_id: &str) -> DbResult<Option<String>> {
    db.query_opt(
        "SELECT run_id FROM candidate_groups WHERE id = ?1",
        params![group_id],
        |r| r.get(0),
    )
}

/// A run's groups (only `column`'s, when given), in the order annotate made them.
pub fn of_run(db: &Db, run_id: &str, column: Option<&str>) -> DbResult<Vec<String>> {
    db.query_map(
        "SELECT id FROM candidate_groups WHERE run_id = ?1
           AND (CAST(?2 AS TEXT) IS NULL OR json_extract(subject, '$.column') = ?2) ORDER BY rowid",
        params![run_id, column],
        |r| r.get(0),
    )
}

/// A run's open groups, in the order annotate made them.
pub fn open_of_run(db: &Db, run_id: &str) -> DbResult<Vec<String>> {
    db.query_map(
        &format!(
            "SELECT g.id FROM candidate_groups g WHERE g.run_id = ?1 AND {IS_OPEN} ORDER BY g.rowid"
        ),
        params![run_id],
        |r| r.get(0),
    )
}

/// An open group as apply lists it.
pub struct OpenGroup {
    pub group_id: String,
    pub column: String,
    /// A decline was recorded on it before.
    pub declined: bool,
}

/// A run's open groups with their columns, in the order annotate made them.
pub fn open_with_columns(db: &Db, run_id: &str) -> DbResult<Vec<OpenGroup>> {
    db.query_map(
        &format!(
            "SELECT g.id, coalesce(json_extract(g.subject, '$.column'), g.subject),
               EXISTS (SELECT 1 FROM overrides o WHERE o.group_id = g.id AND o.action = 'decline')
             FROM candidate_groups g WHERE g.run_id = ?1 AND {IS_OPEN} ORDER BY g.rowid"
        ),
        params![run_id],
        |r| {
            Ok(OpenGroup {
                group_id: r.get(0)?,
                column: r.get(1)?,
                declined: r.get(2)?,
            })
        },
    )
}

/// A run's open groups (only `column`'s, when given) as `decide_explain` lists them.
pub fn open_of_run_shown(db: &Db, run_id: &str, column: Option<&str>) -> DbResult<Vec<Value>> {
    super::named(
        db,
        &format!(
            "SELECT g.id AS group_id, g.subject, g.ontology, g.top_p, g.margin, g.outcome
             FROM candidate_groups g WHERE g.run_id = ?1
               AND (CAST(?2 AS TEXT) IS NULL OR json_extract(g.subject, '$.column') = ?2)
               AND {IS_OPEN} ORDER BY g.rowid"
        ),
        params![run_id, column],
    )
}

/// Holds the group's row for this transaction: another instance answering the same group
/// waits here until this one commits. A write of nothing: the row lock every database takes
/// for an update.
pub fn hold(tx: &Db, group_id: &str) -> DbResult<()> {
    tx.execute(
        "UPDATE candidate_groups SET updated_ms = updated_ms WHERE id = ?1",
        params![group_id],
    )
    .map(|_| ())
}

/// A person's answer on the group: its winner (`None`: none of these).
pub fn answered(tx: &Db, group_id: &str, winner: Option<&str>) -> DbResult<()> {
    tx.execute(
        "UPDATE candidate_groups SET winner_decision_id = ?2, outcome = 'human', updated_ms = ?3
         WHERE id = ?1",
        params![group_id, winner, now_ms() as i64],
    )
    .map(|_| ())
}
