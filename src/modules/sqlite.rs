//! The SQLite files modules keep: opened in WAL mode and migrated in code, each step in a
//! transaction of its own, `PRAGMA user_version` counting the steps applied.

use std::path::Path;

use rusqlite::Connection;

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
pub fn open_migrated(
    path: &Path,
    steps: &[&str],
    pragmas: &str,
) -> Result<Connection, MigrateError> {
    if let Some(dir) = path.parent() {
        let _ = std::fs::create_dir_all(dir);
    }
    let mut db = Connection::open(path)?;
    db.execute_batch(&format!(
        "PRAGMA journal_mode = WAL; PRAGMA synchronous = NORMAL; PRAGMA busy_timeout = 5000; {pragmas}"
    ))?;
    let applied: i64 = db.query_row("PRAGMA user_version", [], |r| r.get(0))?;
    if applied as usize > steps.len() {
        return Err(MigrateError::TooNew {
            found: applied,
            known: steps.len(),
        });
    }
    for (i, step) in steps.iter().enumerate().skip(applied as usize) {
        let tx = db.transaction()?;
        tx.execute_batch(step)?;
        tx.pragma_update(None, "user_version", (i + 1) as i64)?;
        tx.commit()?;
    }
    Ok(db)
}
