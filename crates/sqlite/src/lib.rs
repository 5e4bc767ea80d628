//! The SQLite files modules keep: opened in WAL mode and migrated in code, each step in a
//! transaction of its own, `PRAGMA user_version` counting the steps applied.

use std::path::Path;

use rusqlite::{Connection, TransactionBehavior};

/// A migration step every module that seals `requestState` carries: the ids of states
/// already answered, so that each is used once (`mesh_store::spend_state` spends one).
pub const SPENT_STATES: &str = "
    CREATE TABLE spent_states (
        id TEXT PRIMARY KEY,
        expires_ms INTEGER NOT NULL
    ) WITHOUT ROWID;
";

#[derive(Debug, thiserror::Error)]
pub enum MigrateError {
    #[error(transparent)]
    Sqlite(#[from] rusqlite::Error),
    #[error("schema version {found} is newer than this mesh knows ({known}); use a newer mesh")]
    TooNew { found: i64, known: usize },
}

/// Opens (creating, with its folder) the file at `path`, sets WAL with synchronous=NORMAL
/// (a killed process loses no committed transaction) plus `pragmas`, and applies the steps
/// not applied yet. A file from a newer mesh is refused, not altered.
///
/// Each step runs in a write transaction of its own that first reads how many steps the file
/// has: two processes opening one file at once apply each step once, never one again over
/// the other's.
pub fn open_migrated(
    path: &Path,
    steps: &[&str],
    pragmas: &str,
) -> Result<Connection, MigrateError> {
    if let Some(dir) = path.parent() {
        let _ = std::fs::create_dir_all(dir);
    }
    let mut db = Connection::open(path)?;
    db.execute_batch("PRAGMA busy_timeout = 5000")?;
    // Switching a new file to WAL takes it whole: another opener doing the same at that
    // moment gets SQLITE_BUSY at once, the busy timeout notwithstanding. Asked again, within
    // the same bound.
    let setup = format!("PRAGMA journal_mode = WAL; PRAGMA synchronous = NORMAL; {pragmas}");
    let until = std::time::Instant::now() + std::time::Duration::from_secs(5);
    loop {
        match db.execute_batch(&setup) {
            Err(rusqlite::Error::SqliteFailure(e, _))
                if matches!(
                    e.code,
                    rusqlite::ErrorCode::DatabaseBusy | rusqlite::ErrorCode::DatabaseLocked
                ) && std::time::Instant::now() < until =>
            {
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
            other => break other?,
        }
    }
    loop {
        let tx = db.transaction_with_behavior(TransactionBehavior::Immediate)?;
        let applied: i64 = tx.query_row("PRAGMA user_version", [], |r| r.get(0))?;
        let Ok(next) = usize::try_from(applied) else {
            // Negative: nothing this scheme wrote; refused like a newer file, not altered.
            return Err(MigrateError::TooNew {
                found: applied,
                known: steps.len(),
            });
        };
        if next > steps.len() {
            return Err(MigrateError::TooNew {
                found: applied,
                known: steps.len(),
            });
        }
        let Some(step) = steps.get(next) else {
            // Up to date; the transaction wrote nothing.
            drop(tx);
            return Ok(db);
        };
        tx.execute_batch(step)?;
        tx.pragma_update(None, "user_version", applied + 1)?;
        tx.commit()?;
    }
}

/// Milliseconds since the Unix epoch, as the stores write times.
pub fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    const STEPS: &[&str] = &[
        "CREATE TABLE a (x INTEGER);",
        "INSERT INTO a VALUES (1);",
        "ALTER TABLE a ADD COLUMN y TEXT;",
    ];

    fn version(db: &Connection) -> i64 {
        db.query_row("PRAGMA user_version", [], |r| r.get(0))
            .unwrap()
    }

    #[test]
    fn each_step_once_counted_by_user_version() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("more/a.sqlite");
        let db = open_migrated(&path, &STEPS[..2], "").unwrap();
        assert_eq!(version(&db), 2);
        drop(db);
        // A later mesh with one step more applies only that one.
        let db = open_migrated(&path, STEPS, "PRAGMA foreign_keys = ON;").unwrap();
        assert_eq!(version(&db), 3);
        let rows: i64 = db
            .query_row("SELECT count(*) FROM a WHERE y IS NULL", [], |r| r.get(0))
            .unwrap();
        assert_eq!(rows, 1, "step 2 ran once");
        let mode: String = db
            .query_row("PRAGMA journal_mode", [], |r| r.get(0))
            .unwrap();
        assert_eq!(mode, "wal");
        let fk: i64 = db
            .query_row("PRAGMA foreign_keys", [], |r| r.get(0))
            .unwrap();
        assert_eq!(fk, 1, "the caller's pragmas are set");
        drop(db);
        let db = open_migrated(&path, STEPS, "").unwrap();
        assert_eq!(version(&db), 3);
    }

    #[test]
    fn a_failed_step_keeps_the_steps_before_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.sqlite");
        let broken = [STEPS[0], STEPS[1], "INSERT INTO a VALUES (2); NOT SQL"];
        assert!(matches!(
            open_migrated(&path, &broken, ""),
            Err(MigrateError::Sqlite(_))
        ));
        let db = Connection::open(&path).unwrap();
        assert_eq!(version(&db), 2);
        let rows: i64 = db
            .query_row("SELECT count(*) FROM a", [], |r| r.get(0))
            .unwrap();
        assert_eq!(rows, 1, "the failed step left nothing behind");
    }

    #[test]
    fn a_newer_file_is_refused_and_left_alone() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.sqlite");
        drop(open_migrated(&path, STEPS, "").unwrap());
        let Err(e) = open_migrated(&path, &STEPS[..1], "") else {
            panic!("a newer file opened")
        };
        assert!(
            matches!(e, MigrateError::TooNew { found: 3, known: 1 }),
            "{e:?}"
        );
        assert!(e.to_string().contains("use a newer mesh"), "{e}");
        assert_eq!(version(&Connection::open(&path).unwrap()), 3);
    }

    #[test]
    fn two_openers_at_once_apply_each_step_once() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.sqlite");
        let openers: Vec<_> = (0..4)
            .map(|_| {
                let path = path.clone();
                std::thread::spawn(move || open_migrated(&path, STEPS, "").map(|_| ()))
            })
            .collect();
        for o in openers {
            o.join().unwrap().unwrap();
        }
        let db = Connection::open(&path).unwrap();
        assert_eq!(version(&db), 3);
        let rows: i64 = db
            .query_row("SELECT count(*) FROM a", [], |r| r.get(0))
            .unwrap();
        assert_eq!(rows, 1);
    }
}
