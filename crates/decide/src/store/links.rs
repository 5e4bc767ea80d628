//! The `avu_links` table: each AVU decide proposes, through its life — proposed, accepted or
//! rejected by a person, written by apply, mirrored into the lake (or failed to be).

use serde_json::{Value, json};

use super::{Db, DbResult, Sink};
use crate::params;
use mesh_core::subjects::catalog::now_ms;

/// A link as annotate proposes it, or a pick accepts it.
pub struct NewLink<'a> {
    pub id: &'a str,
    pub run_id: &'a str,
    pub group_id: &'a str,
    pub decision_id: &'a str,
    pub attribute: &'a str,
    pub value: &'a str,
    pub unit: &'a str,
    /// `proposed` or `accepted`.
    pub status: &'a str,
}

pub fn insert(sink: &dyn Sink, l: &NewLink) -> DbResult<()> {
    sink.run(
        "INSERT INTO avu_links (id, run_id, group_id, decision_id, attribute, value, unit,
           status, updated_ms)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
        params![
            l.id,
            l.run_id,
            l.group_id,
            l.decision_id,
            l.attribute,
            l.value,
            l.unit,
            l.status,
            now_ms() as i64
        ],
    )
}

/// A pick of `curie`: the group's unwritten links for other terms rejected, its own accepted
/// (returns how many were). Links already written stay as they are: a pick never unwrites.
pub fn pick(tx: &Db, group_id: &str, curie: &str) -> DbResult<u64> {
    let now = now_ms() as i64;
    tx.execute(
        "UPDATE avu_links SET status = 'rejected', updated_ms = ?3
         WHERE group_id = ?1 AND unit != ?2 AND status IN ('proposed', 'accepted')",
        params![group_id, curie, now],
    )?;
    tx.execute(
        "UPDATE avu_links SET status = 'accepted', updated_ms = ?3
         WHERE group_id = ?1 AND unit = ?2 AND status IN ('proposed', 'rejected')",
        params![group_id, curie, now],
    )
}

/// Whether the group has a link (in any status) for `curie`.
pub fn any_for(db: &Db, group_id: &str, curie: &str) -> DbResult<bool> {
    db.query_row(
        "SELECT count(*) > 0 FROM avu_links WHERE group_id = ?1 AND unit = ?2",
        params![group_id, curie],
        |r| r.get(0),
    )
}

/// "None of these": the group's unwritten links rejected.
pub fn reject_unwritten(tx: &Db, group_id: &str) -> DbResult<()> {
    tx.execute(
        "UPDATE avu_links SET status = 'rejected', updated_ms = ?2
         WHERE group_id = ?1 AND status IN ('proposed', 'accepted')",
        params![group_id, now_ms() as i64],
    )
    .map(|_| ())
}

/// A group's links, in the order made.
pub fn of_group(db: &Db, group_id: &str) -> DbResult<Vec<Value>> {
    db.query_map(
        "SELECT id, attribute, value, unit, status FROM avu_links WHERE group_id = ?1 ORDER BY rowid",
        params![group_id],
        |r| {
            Ok(json!({
                "link_id": r.get::<String>(0)?,
                "attribute": r.get::<String>(1)?,
                "value": r.get::<String>(2)?,
                "unit": r.get::<Option<String>>(3)?,
                "status": r.get::<String>(4)?,
            }))
        },
    )
}

/// A run's links (only `column`'s, when given) as `decide_explain` lists them.
pub fn of_run_shown(db: &Db, run_id: &str, column: Option<&str>) -> DbResult<Vec<Value>> {
    super::named(
        db,
        "SELECT l.id, l.group_id, l.attribute, l.value, l.unit, l.status, l.path, l.snapshot_id
         FROM avu_links l JOIN candidate_groups g ON g.id = l.group_id
         WHERE l.run_id = ?1 AND (CAST(?2 AS TEXT) IS NULL OR json_extract(g.subject, '$.column') = ?2)
         ORDER BY l.rowid",
        params![run_id, column],
    )
}

/// The links written on `path` (only `column`'s, when given) after the link of row `after`,
/// at most `limit`, with the decisions behind them and each run's owner (`owner`), in the
/// sidecar's order (`link_row`).
pub fn on_path(
    db: &Db,
    path: &str,
    column: Option<&str>,
    after: i64,
    limit: usize,
) -> DbResult<Vec<Value>> {
    super::named(
        db,
        "SELECT l.rowid AS link_row, l.id, l.run_id, l.attribute, l.value, l.unit, l.status,
           l.snapshot_id, l.written_by, d.question_key, d.answer, d.level, d.calibration, d.p,
           r.actor AS owner
         FROM avu_links l JOIN decisions d ON d.id = l.decision_id JOIN runs r ON r.id = l.run_id
         WHERE l.path = ?1 AND (CAST(?2 AS TEXT) IS NULL OR json_extract(d.subject, '$.column') = ?2)
           AND l.rowid > ?3
         ORDER BY l.rowid LIMIT ?4",
        params![path, column, after, limit as i64],
    )
}

/// Another path a run's links were written to, if any.
pub fn written_elsewhere(db: &Db, run_id: &str, path: &str) -> DbResult<Option<String>> {
    db.query_opt(
        "SELECT path FROM avu_links WHERE run_id = ?1 AND path IS NOT NULL AND path != ?2 LIMIT 1",
        params![run_id, path],
        |r| r.get(0),
    )
}

/// An accepted link not written yet.
#[derive(Debug, Clone)]
pub struct Pending {
    pub link_id: String,
    pub attribute: String,
    pub value: String,
    pub unit: String,
}

/// A run's accepted links, in the order made.
pub fn accepted(db: &Db, run_id: &str) -> DbResult<Vec<Pending>> {
    db.query_map(
        "SELECT id, attribute, value, unit FROM avu_links
             WHERE run_id = ?1 AND status = 'accepted' ORDER BY rowid",
        params![run_id],
        |r| {
            Ok(Pending {
                link_id: r.get(0)?,
                attribute: r.get(1)?,
                value: r.get(2)?,
                unit: r.get::<Option<String>>(3)?.unwrap_or_default(),
            })
        },
    )
}

/// How many of a run's links were written (mirrored or not).
pub fn written(db: &Db, run_id: &str) -> DbResult<i64> {
    db.query_row(
        "SELECT count(*) FROM avu_links WHERE run_id = ?1 AND status IN ('written', 'mirror_failed')",
        params![run_id],
        |r| r.get(0),
    )
}

/// An accepted link written on `path` by `who`.
pub fn mark_written(tx: &Db, id: &str, path: &str, who: &str) -> DbResult<()> {
    tx.execute(
        "UPDATE avu_links SET status = 'written', path = ?2, written_by = ?3, written_ms = ?4,
           updated_ms = ?4
         WHERE id = ?1 AND status = 'accepted'",
        params![id, path, who, now_ms() as i64],
    )
    .map(|_| ())
}

/// Whether any written link is not in the lake yet.
pub fn any_to_mirror(db: &Db) -> DbResult<bool> {
    db.query_row(
        "SELECT EXISTS (SELECT 1 FROM avu_links
           WHERE status IN ('written', 'mirror_failed') AND snapshot_id IS NULL)",
        params![],
        |r| r.get::<bool>(0),
    )
}

/// A written link the lake does not hold yet.
pub struct ToMirror {
    pub link_id: String,
    pub run_id: String,
    pub path: String,
    pub attribute: String,
    pub value: String,
    pub unit: String,
    pub written_by: String,
    pub at_ms: i64,
}

/// Every written link the lake does not hold yet, in the order made.
pub fn to_mirror(db: &Db) -> DbResult<Vec<ToMirror>> {
    db.query_map(
        "SELECT id, run_id, path, attribute, value, coalesce(unit, ''),
                coalesce(written_by, ''), coalesce(written_ms, updated_ms)
         FROM avu_links
         WHERE status IN ('written', 'mirror_failed') AND snapshot_id IS NULL
         ORDER BY rowid",
        params![],
        |r| {
            Ok(ToMirror {
                link_id: r.get(0)?,
                run_id: r.get(1)?,
                path: r.get(2)?,
                attribute: r.get(3)?,
                value: r.get(4)?,
                unit: r.get(5)?,
                written_by: r.get(6)?,
                at_ms: r.get(7)?,
            })
        },
    )
}

/// A link the lake holds in `snapshot`.
pub fn mirrored(tx: &Db, id: &str, snapshot: i64) -> DbResult<()> {
    tx.execute(
        "UPDATE avu_links SET status = 'written', snapshot_id = ?2, updated_ms = ?3 WHERE id = ?1",
        params![id, snapshot, now_ms() as i64],
    )
    .map(|_| ())
}

/// A link whose mirror failed: tried again by the next mirror. Not one another mirror has
/// recorded in a snapshot meanwhile.
pub fn mirror_failed(tx: &Db, id: &str) -> DbResult<()> {
    tx.execute(
        "UPDATE avu_links SET status = 'mirror_failed', updated_ms = ?2
         WHERE id = ?1 AND snapshot_id IS NULL",
        params![id, now_ms() as i64],
    )
    .map(|_| ())
}

/// Run `r1` with one link, `l1`, written to avu and not yet mirrored: the sidecar a mirror
/// test starts from (here and in `tests/it`).
#[doc(hidden)]
pub const ONE_WRITTEN_LINK: &str = "
    INSERT INTO runs (id, card_id, card_name, backend, questions_lock, started_ms)
      VALUES ('r1', 'c1', 'a card', 'embedded', 'lock', 1);
    INSERT INTO decisions (id, run_id, question_key, subject, state_json, state_hash,
      level, answer, outcome, created_ms)
      VALUES ('d1', 'r1', 'avu.keep@x', '{}', '{}', 'h', 'rule', 'yes', 'human', 1);
    INSERT INTO avu_links (id, run_id, decision_id, attribute, value, unit, status,
      path, updated_ms, written_by, written_ms)
      VALUES ('l1', 'r1', 'd1', 'pato.length', 'hindfootLength', 'PATO:0000122',
        'written', '/mesh/home/ann/traps.csv', 1, 'ann@PEOPLE', 1);";

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::sidecar::Sidecar;

    /// A mirror that fails after another recorded the same link in a snapshot leaves that
    /// record alone: the link is in the lake, and a later mirror skips it.
    #[test]
    fn a_failed_mirror_does_not_undo_another_mirrors_record() {
        let sidecar = Sidecar::open(std::path::Path::new(":memory:")).unwrap();
        sidecar.db.execute_batch(ONE_WRITTEN_LINK).unwrap();
        sidecar
            .db
            .execute_batch(
                "INSERT INTO avu_links (id, run_id, decision_id, attribute, value, unit, status,
                   path, updated_ms, written_by, written_ms)
                   VALUES ('l2', 'r1', 'd1', 'pato.mass', 'y', 'PATO:0000125', 'written',
                     '/mesh/home/ann/traps.csv', 1, 'ann@PEOPLE', 1);",
            )
            .unwrap();
        mirrored(&sidecar.db, "l1", 7).unwrap();
        mirror_failed(&sidecar.db, "l1").unwrap();
        mirror_failed(&sidecar.db, "l2").unwrap();
        let status = |id: &str| -> (String, Option<i64>) {
            sidecar
                .db
                .query_row(
                    "SELECT status, snapshot_id FROM avu_links WHERE id = ?1",
                    crate::params![id],
                    |r| Ok((r.get(0)?, r.get(1)?)),
                )
                .unwrap()
        };
        assert_eq!(status("l1"), ("written".to_owned(), Some(7)));
        assert_eq!(status("l2"), ("mirror_failed".to_owned(), None));
        let left: Vec<String> = to_mirror(&sidecar.db)
            .unwrap()
            .into_iter()
            .map(|l| l.link_id)
            .collect();
        assert_eq!(left, ["l2"]);
    }
}
