//! The right to mirror into a shared lake, one instance at a time: a PostgreSQL advisory
//! lock on a session of its own (let go when the session ends, should this process die).
//! Nothing for a SQLite sidecar, whose lake the DuckDB file lock keeps to one process.

use super::{Db, DbResult, Opener};
use crate::params;

/// Taken while a batch is mirrored into the lake, so that two instances never both find an
/// event missing and both append it.
pub const MIRROR_LOCK: i64 = 0x006d_6573_686c_616b; // "meshlak"

use std::time::Duration;

pub struct MirrorLock {
    /// The session holding PostgreSQL's advisory lock: one of its own, so that waiting for
    /// another instance holds up none of this process's calls on the sidecar; `None` for a
    /// lake only this process writes.
    session: Option<Db>,
    /// That session's server process: a session made again (the server restarted, the
    /// connection was cut) is another process, without the lock.
    pid: i64,
}

impl MirrorLock {
    /// Takes the lock on a new session made by `opener` (a shared sidecar's; `None`: the
    /// lock is not needed), waiting for it in PostgreSQL (no polling) at most `wait` — then
    /// failing with an error `Db::is_lock_timeout` tells apart.
    pub fn take(opener: Option<Opener>, wait: Duration) -> DbResult<MirrorLock> {
        let Some(opener) = opener else {
            return Ok(MirrorLock {
                session: None,
                pid: 0,
            });
        };
        let session = opener.open()?;
        // At least a millisecond: PostgreSQL reads 0 as "wait for ever".
        let ms = wait.as_millis().max(1);
        session.execute_batch(&format!("SET lock_timeout = '{ms}ms'"))?;
        let pid: i64 = session.query_row(
            "SELECT pg_backend_pid()::BIGINT FROM (SELECT pg_advisory_lock(?1)) AS taken",
            params![MIRROR_LOCK],
            |r| r.get(0),
        )?;
        Ok(MirrorLock {
            session: Some(session),
            pid,
        })
    }

    /// Whether the lock is still this process's: the session that took it is still the
    /// server's same process (checked without connecting again: a new session would answer,
    /// and hold nothing).
    pub fn still_held(&self) -> bool {
        let Some(s) = &self.session else {
            return true;
        };
        !s.is_gone()
            && s.query_row("SELECT pg_backend_pid()::BIGINT", params![], |r| {
                r.get::<i64>(0)
            })
            .is_ok_and(|now| now == self.pid)
    }
}

impl Drop for MirrorLock {
    fn drop(&mut self) {
        // Closing the session releases it too; said here so that it is released at once —
        // on the session that holds it, never on one made again for this.
        if let Some(s) = &self.session
            && !s.is_gone()
        {
            let _ = s.execute("SELECT pg_advisory_unlock(?1)", params![MIRROR_LOCK]);
        }
    }
}
