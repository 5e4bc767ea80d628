//! The `runs` table: one row per annotate of a card, whose actor owns it.

use super::{Db, DbResult, Sink};
use crate::params;
use mesh_core::subjects::catalog::now_ms;

/// A run as annotate begins it.
pub struct NewRun<'a> {
    pub id: &'a str,
    pub card_id: &'a str,
    pub card_name: &'a str,
    pub actor: Option<&'a str>,
    pub backend: &'a str,
    pub bundle: Option<&'a str>,
    pub questions_lock: &'a str,
}

pub fn begin(sink: &dyn Sink, run: &NewRun) -> DbResult<()> {
    sink.run(
        "INSERT INTO runs (id, card_id, card_name, actor, backend, bundle, questions_lock, started_ms)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
        params![
            run.id,
            run.card_id,
            run.card_name,
            run.actor,
            run.backend,
            run.bundle,
            run.questions_lock,
            now_ms() as i64
        ],
    )
}

pub fn finish(sink: &dyn Sink, run_id: &str) -> DbResult<()> {
    sink.run(
        "UPDATE runs SET finished_ms = ?2 WHERE id = ?1",
        params![run_id, now_ms() as i64],
    )
}

/// Whoever annotated the run (`Some(None)`: a run made without an identity); `None` when
/// there is no such run.
pub fn owner(db: &Db, run_id: &str) -> DbResult<Option<Option<String>>> {
    db.query_opt(
        "SELECT actor FROM runs WHERE id = ?1",
        params![run_id],
        |r| r.get(0),
    )
}

/// The run's card: (id, name).
pub fn card(db: &Db, run_id: &str) -> DbResult<(String, String)> {
    db.query_row(
        "SELECT card_id, card_name FROM runs WHERE id = ?1",
        params![run_id],
        |r| Ok((r.get(0)?, r.get(1)?)),
    )
}

/// How many runs the sidecar holds.
pub fn count(db: &Db) -> DbResult<i64> {
    db.query_row("SELECT count(*) FROM runs", params![], |r| r.get(0))
}
