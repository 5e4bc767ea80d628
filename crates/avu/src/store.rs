//! avu's store: the current AVUs of each path and an append-only history of who changed what
//! when; every change is one transaction. SQLite (WAL) in avu's own directory by default;
//! PostgreSQL (`shared.rs`) when avu runs as more than one instance.

use std::path::Path;

use rusqlite::{Connection, params};

use mesh_core::runtime::request_state::{Opened, StateError, StateKey};
use mesh_sqlite::{MigrateError, open_migrated, spend_state};
use serde::{Deserialize, Serialize};

use mesh_core::subjects::catalog::now_ms;

use crate::shared::{self, Shared};

/// An attribute–value–unit triple. An absent unit is stored as the empty string.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Avu {
    pub attribute: String,
    pub value: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub unit: String,
}

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("avu store {path}: {source}")]
    Sqlite { path: String, source: MigrateError },
    #[error("avu's shared store (PostgreSQL): {source}")]
    Shared {
        #[source]
        source: shared::SharedError,
    },
    /// The `requestState` this change answers was answered before; nothing was written.
    #[error(transparent)]
    State(#[from] StateError),
}

const SCHEMA: &[&str] = &[
    "
    CREATE TABLE avus (
        path TEXT NOT NULL,
        attribute TEXT NOT NULL,
        value TEXT NOT NULL,
        unit TEXT NOT NULL,
        PRIMARY KEY (path, attribute, value, unit)
    ) WITHOUT ROWID;
    CREATE TABLE history (
        id INTEGER PRIMARY KEY,
        at_ms INTEGER NOT NULL,
        actor TEXT NOT NULL,
        -- 1 when a module wrote on the actor's behalf.
        relayed INTEGER NOT NULL,
        op TEXT NOT NULL CHECK (op IN ('add', 'remove')),
        path TEXT NOT NULL,
        attribute TEXT NOT NULL,
        value TEXT NOT NULL,
        unit TEXT NOT NULL,
        -- What the writer said this came from (decide names its run).
        source TEXT
    );
    CREATE INDEX history_by_path ON history (path);
    CREATE TRIGGER history_is_never_updated BEFORE UPDATE ON history
    BEGIN SELECT RAISE(ABORT, 'avu history is append-only'); END;
    CREATE TRIGGER history_is_never_deleted BEFORE DELETE ON history
    BEGIN SELECT RAISE(ABORT, 'avu history is append-only'); END;
",
    "
    -- The module that wrote on the actor's behalf (relayed = 1), by its stamped account.
    ALTER TABLE history ADD COLUMN via TEXT;
",
    mesh_sqlite::SPENT_STATES,
];

/// One entry of the history.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Change {
    pub at_ms: i64,
    pub actor: String,
    pub op: String,
    pub avu: Avu,
    pub source: Option<String>,
}

/// Who is writing, for the history.
pub struct Writer<'a> {
    pub actor: &'a str,
    /// The module acting for the actor, if one is.
    pub via: Option<&'a str>,
    pub source: Option<&'a str>,
    /// The `requestState` this change answers: spent in the change's own transaction.
    pub answers: Option<&'a Opened>,
}

pub struct Store {
    db: Db,
    path: String,
}

/// Where the AVUs are.
enum Db {
    Sqlite(Connection),
    Shared(Box<Shared>),
}

fn shared(source: impl Into<shared::SharedError>) -> StoreError {
    StoreError::Shared {
        source: source.into(),
    }
}

impl Store {
    /// avu's own SQLite file.
    pub fn open(path: &Path) -> Result<Store, StoreError> {
        let db = open_migrated(path, SCHEMA, "").map_err(|source| StoreError::Sqlite {
            path: path.display().to_string(),
            source,
        })?;
        Ok(Store {
            db: Db::Sqlite(db),
            path: path.display().to_string(),
        })
    }

    /// The store every instance of avu shares: PostgreSQL at `url` (the schema made if it is
    /// not there).
    /// A TLS server is checked against `authority` (PEM), else the system's authorities.
    pub fn connect(url: &str, authority: Option<&Path>) -> Result<Store, StoreError> {
        // On a thread of its own: the PostgreSQL client blocks on a runtime of its own, which
        // cannot start on a thread that is driving async tasks (avu starts from async code).
        let connected = std::thread::scope(|s| {
            s.spawn(|| Shared::connect(url, authority, StateKey::random()))
                .join()
                .expect("connecting does not panic")
        });
        Ok(Store {
            db: Db::Shared(Box::new(connected.map_err(shared)?)),
            path: "PostgreSQL".into(),
        })
    }

    /// The key questions are sealed with, when the store keeps one for every instance (the
    /// shared store); `None` for avu's own file (the key is then a file beside it).
    pub fn shared_key(&self) -> Option<[u8; 32]> {
        match &self.db {
            Db::Sqlite(_) => None,
            Db::Shared(s) => Some(s.key),
        }
    }

    /// Spends a `requestState` whose answer writes nothing (a decline).
    pub fn spend(&mut self, state: &Opened) -> Result<(), StoreError> {
        let name = self.path.clone();
        let wrap = |source: rusqlite::Error| StoreError::Sqlite {
            path: name.clone(),
            source: source.into(),
        };
        match &mut self.db {
            Db::Sqlite(db) => {
                let tx = db.transaction().map_err(wrap)?;
                if !spend_state(&tx, &state.id, state.expires_ms).map_err(wrap)? {
                    return Err(StateError::Used.into());
                }
                tx.commit().map_err(wrap)
            }
            Db::Shared(s) => {
                let mut tx = s.begin().map_err(shared)?;
                if !shared::spend_state(&mut tx, &state.id, state.expires_ms).map_err(shared)? {
                    return Err(StateError::Used.into());
                }
                tx.commit().map_err(shared)
            }
        }
    }

    /// The AVUs on one path, in attribute, value, unit order.
    /// At most `limit` AVUs on `path` after `after` in (attribute, value, unit) order: a page
    /// of a listing that can grow past what one answer should carry.
    pub fn list_page(
        &mut self,
        path: &str,
        after: Option<&Avu>,
        limit: usize,
    ) -> Result<Vec<Avu>, StoreError> {
        let (a, v, u) = after
            .map(|x| (x.attribute.as_str(), x.value.as_str(), x.unit.as_str()))
            .unwrap_or(("", "", ""));
        // Without a cursor, from the start: every real AVU sorts after ("", "", "") but one
        // with an empty attribute, which avu never stores.
        let first = after.is_none();
        let limit_i = i64::try_from(limit).unwrap_or(i64::MAX);
        let db = match &mut self.db {
            Db::Sqlite(db) => db,
            Db::Shared(s) => {
                let rows = s
                    .read(|c| {
                        c.query(
                            "SELECT attribute, value, unit FROM avus WHERE path = $1
                             AND ($2 OR (attribute, value, unit) > ($3, $4, $5))
                             ORDER BY attribute, value, unit LIMIT $6",
                            &[&path, &first, &a, &v, &u, &limit_i],
                        )
                    })
                    .map_err(shared)?;
                return Ok(rows
                    .iter()
                    .map(|r| Avu {
                        attribute: r.get(0),
                        value: r.get(1),
                        unit: r.get(2),
                    })
                    .collect());
            }
        };
        let wrap = |e| StoreError::Sqlite {
            path: self.path.clone(),
            source: MigrateError::from(e),
        };
        let mut q = db
            .prepare_cached(
                "SELECT attribute, value, unit FROM avus WHERE path = ?1
                 AND (?2 OR (attribute, value, unit) > (?3, ?4, ?5))
                 ORDER BY attribute, value, unit LIMIT ?6",
            )
            .map_err(wrap)?;
        let rows = q
            .query_map(rusqlite::params![path, first, a, v, u, limit_i], |r| {
                Ok(Avu {
                    attribute: r.get(0)?,
                    value: r.get(1)?,
                    unit: r.get(2)?,
                })
            })
            .map_err(wrap)?;
        rows.collect::<Result<_, _>>().map_err(wrap)
    }

    /// Every AVU on `path`, in (attribute, value, unit) order.
    pub fn list(&mut self, path: &str) -> Result<Vec<Avu>, StoreError> {
        self.list_page(path, None, usize::MAX)
    }

    /// Adds the AVUs not already on `path`, in one transaction; returns which were new.
    /// Adding one that is there changes nothing and writes no history.
    pub fn add(&mut self, path: &str, avus: &[Avu], by: &Writer) -> Result<Vec<bool>, StoreError> {
        self.change(path, avus, by, "add")
    }

    /// Removes the AVUs that are on `path`, in one transaction; returns which were there.
    pub fn remove(
        &mut self,
        path: &str,
        avus: &[Avu],
        by: &Writer,
    ) -> Result<Vec<bool>, StoreError> {
        self.change(path, avus, by, "remove")
    }

    fn change(
        &mut self,
        path: &str,
        avus: &[Avu],
        by: &Writer,
        op: &str,
    ) -> Result<Vec<bool>, StoreError> {
        let name = self.path.clone();
        let wrap = |source: rusqlite::Error| StoreError::Sqlite {
            path: name.clone(),
            source: source.into(),
        };
        let db = match &mut self.db {
            Db::Sqlite(db) => db,
            Db::Shared(s) => return change_shared(s, path, avus, by, op),
        };
        let tx = db.transaction().map_err(wrap)?;
        if let Some(state) = by.answers
            && !spend_state(&tx, &state.id, state.expires_ms).map_err(wrap)?
        {
            return Err(StateError::Used.into());
        }
        let mut changed = Vec::with_capacity(avus.len());
        {
            // The row count says whether anything changed: an AVU already there is not
            // inserted again, one that is not there is not deleted.
            let sql = if op == "add" {
                "INSERT OR IGNORE INTO avus (path, attribute, value, unit) VALUES (?1, ?2, ?3, ?4)"
            } else {
                "DELETE FROM avus WHERE path = ?1 AND attribute = ?2 AND value = ?3 AND unit = ?4"
            };
            let mut apply = tx.prepare_cached(sql).map_err(wrap)?;
            let mut history = tx
                .prepare_cached(
                    "INSERT INTO history (at_ms, actor, relayed, op, path, attribute, value, unit, source, via)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)",
                )
                .map_err(wrap)?;
            let at = now_ms() as i64;
            for avu in avus {
                let does = apply
                    .execute(params![path, avu.attribute, avu.value, avu.unit])
                    .map_err(wrap)?
                    == 1;
                if does {
                    history
                        .execute(params![
                            at,
                            by.actor,
                            by.via.is_some(),
                            op,
                            path,
                            avu.attribute,
                            avu.value,
                            avu.unit,
                            by.source,
                            by.via
                        ])
                        .map_err(wrap)?;
                }
                changed.push(does);
            }
        }
        tx.commit().map_err(wrap)?;
        Ok(changed)
    }

    /// The history of one path, oldest first.
    pub fn history(&mut self, path: &str) -> Result<Vec<Change>, StoreError> {
        let db = match &mut self.db {
            Db::Sqlite(db) => db,
            Db::Shared(s) => {
                let rows = s
                    .read(|c| {
                        c.query(
                            "SELECT at_ms, actor, op, attribute, value, unit, source FROM history
                             WHERE path = $1 ORDER BY id",
                            &[&path],
                        )
                    })
                    .map_err(shared)?;
                return Ok(rows
                    .iter()
                    .map(|r| Change {
                        at_ms: r.get(0),
                        actor: r.get(1),
                        op: r.get(2),
                        avu: Avu {
                            attribute: r.get(3),
                            value: r.get(4),
                            unit: r.get(5),
                        },
                        source: r.get(6),
                    })
                    .collect());
            }
        };
        let wrap = |e| StoreError::Sqlite {
            path: self.path.clone(),
            source: MigrateError::from(e),
        };
        let mut q = db
            .prepare_cached(
                "SELECT at_ms, actor, op, attribute, value, unit, source FROM history
                 WHERE path = ?1 ORDER BY id",
            )
            .map_err(wrap)?;
        let rows = q
            .query_map([path], |r| {
                Ok(Change {
                    at_ms: r.get(0)?,
                    actor: r.get(1)?,
                    op: r.get(2)?,
                    avu: Avu {
                        attribute: r.get(3)?,
                        value: r.get(4)?,
                        unit: r.get(5)?,
                    },
                    source: r.get(6)?,
                })
            })
            .map_err(wrap)?;
        rows.collect::<Result<_, _>>().map_err(wrap)
    }
}

/// A change in the shared store: as in SQLite, one transaction, the spent state with it;
/// `ON CONFLICT DO NOTHING` so that two instances adding the same AVU at once write it and
/// its history once.
fn change_shared(
    s: &mut Shared,
    path: &str,
    avus: &[Avu],
    by: &Writer,
    op: &str,
) -> Result<Vec<bool>, StoreError> {
    let mut tx = s.begin().map_err(shared)?;
    if let Some(state) = by.answers
        && !shared::spend_state(&mut tx, &state.id, state.expires_ms).map_err(shared)?
    {
        return Err(StateError::Used.into());
    }
    let sql = if op == "add" {
        "INSERT INTO avus (path, attribute, value, unit, digest) VALUES ($1, $2, $3, $4, $5)
         ON CONFLICT DO NOTHING"
    } else {
        "DELETE FROM avus WHERE digest = $5 AND path = $1 AND attribute = $2 AND value = $3 AND unit = $4"
    };
    let apply = tx.prepare(sql).map_err(shared)?;
    let history = tx
        .prepare(
            "INSERT INTO history (at_ms, actor, relayed, op, path, attribute, value, unit, source, via)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)",
        )
        .map_err(shared)?;
    let at = now_ms() as i64;
    let mut changed = Vec::with_capacity(avus.len());
    for avu in avus {
        let key = shared::digest(path, &avu.attribute, &avu.value, &avu.unit);
        let does = tx
            .execute(
                &apply,
                &[&path, &avu.attribute, &avu.value, &avu.unit, &key],
            )
            .map_err(shared)?
            == 1;
        if does {
            tx.execute(
                &history,
                &[
                    &at,
                    &by.actor,
                    &by.via.is_some(),
                    &op,
                    &path,
                    &avu.attribute,
                    &avu.value,
                    &avu.unit,
                    &by.source,
                    &by.via,
                ],
            )
            .map_err(shared)?;
        }
        changed.push(does);
    }
    tx.commit().map_err(shared)?;
    Ok(changed)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn avu(a: &str, v: &str, u: &str) -> Avu {
        Avu {
            attribute: a.into(),
            value: v.into(),
            unit: u.into(),
        }
    }

    #[test]
    fn adds_once_removes_once_and_keeps_history() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = Store::open(&dir.path().join("avu.sqlite")).unwrap();
        let by = Writer {
            actor: "ann@PEOPLE",
            via: None,
            answers: None,
            source: None,
        };
        let p = "/mesh/home/ann/x";
        let both = [
            avu("pato.length", "hindfootLength", "PATO:0000122"),
            avu("n", "1", ""),
        ];
        assert_eq!(store.add(p, &both, &by).unwrap(), vec![true, true]);
        assert_eq!(store.add(p, &both[..1], &by).unwrap(), vec![false]);
        assert_eq!(store.list(p).unwrap().len(), 2);
        assert_eq!(store.remove(p, &both[1..], &by).unwrap(), vec![true]);
        assert_eq!(store.remove(p, &both[1..], &by).unwrap(), vec![false]);
        assert_eq!(store.list(p).unwrap(), vec![both[0].clone()]);
        let h = store.history(p).unwrap();
        assert_eq!(
            h.iter().map(|e| e.op.as_str()).collect::<Vec<_>>(),
            ["add", "add", "remove"]
        );
        let Db::Sqlite(db) = &store.db else {
            unreachable!("a file store")
        };
        let e = db
            .execute("DELETE FROM history", [])
            .unwrap_err()
            .to_string();
        assert!(e.contains("append-only"), "{e}");
    }
}
