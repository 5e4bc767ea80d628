//! The SQLite files modules keep: opened in WAL mode and migrated in code, each step in a
//! transaction of its own, `PRAGMA user_version` counting the steps applied.

use std::path::Path;

use rusqlite::Connection;

/// A migration step every module that seals `requestState` carries: the ids of states
/// already answered, so that each is used once.
pub const SPENT_STATES: &str = "
    CREATE TABLE spent_states (
        id TEXT PRIMARY KEY,
        expires_ms INTEGER NOT NULL
    ) WITHOUT ROWID;
";

/// Marks a sealed state's id used, inside the caller's transaction so that the state is
/// spent exactly when what it answered is written. `false`: it was used already. States past
/// their expiry are forgotten on the way (the seal refuses them anyway).
pub fn spend_state(
    tx: &rusqlite::Transaction<'_>,
    id: &str,
    expires_ms: u64,
) -> rusqlite::Result<bool> {
    let now = now_ms();
    tx.execute(
        "DELETE FROM spent_states WHERE expires_ms < ?1",
        [now as i64],
    )?;
    let inserted = tx.execute(
        "INSERT OR IGNORE INTO spent_states (id, expires_ms) VALUES (?1, ?2)",
        rusqlite::params![id, expires_ms as i64],
    )?;
    Ok(inserted == 1)
}

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

/// Milliseconds since the Unix epoch, as the stores write times.
pub fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or_default()
}
