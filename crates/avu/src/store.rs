//! avu's store: the current AVUs of each path and an append-only history of who changed what
//! when; every change is one transaction. SQLite (WAL) in avu's own directory by default;
//! PostgreSQL, shared by every instance, when avu runs as more than one. The SQL is written
//! once, for both, through `mesh-store`; each AVU carries the digest of its four fields
//! (PostgreSQL keys it by that: an index entry of the fields themselves is limited to 2704
//! bytes, which AVUs within avu's bounds can pass).

use std::path::Path;

use mesh_core::runtime::request_state::{Opened, StateError, StateKey};
use mesh_sqlite::{MigrateError, open_migrated};
use mesh_store::{Db, DbError, KeyError, Pg, Schema, SchemaError, params, spend_state};
use serde::{Deserialize, Serialize};

use mesh_core::subjects::catalog::now_ms;

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
    Open { path: String, source: MigrateError },
    #[error("avu store {path}: {source}")]
    Db { path: String, source: DbError },
    #[error("avu's shared store ({path}): {source}")]
    Schema { path: String, source: SchemaError },
    #[error(
        "avu's shared store ({path}): its sealing key (table state_key) is {found} bytes, not 32: restore it, or delete the row to make a new one (questions asked before are then refused)"
    )]
    BadKey { path: String, found: usize },
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
    "
    -- 4: each AVU's digest, as the shared store keys it (filled on open for older rows,
    -- found by the index of those without one, which is empty once they are filled).
    ALTER TABLE avus ADD COLUMN digest BLOB;
    CREATE INDEX avus_without_digest ON avus (path) WHERE digest IS NULL;
",
];

/// Taken while the shared schema is made: instances starting together make it once.
const SCHEMA_LOCK: i64 = 0x006d_6573_6861_7675; // "meshavu"

/// The shared store: SQLite's tables, the AVUs keyed by digest, `relayed` a boolean, the
/// history append-only by trigger (the spent states and the sealing key made by
/// `mesh_store::Schema`).
const SHARED: Schema = Schema {
    lock: SCHEMA_LOCK,
    sql: SHARED_SQL,
    version_table: "avu_version",
    version: 1,
};

const SHARED_SQL: &str = "
CREATE TABLE IF NOT EXISTS avus (
    path TEXT NOT NULL,
    attribute TEXT NOT NULL,
    value TEXT NOT NULL,
    unit TEXT NOT NULL,
    digest BYTEA NOT NULL UNIQUE
);
CREATE INDEX IF NOT EXISTS avus_by_path ON avus (path);
CREATE TABLE IF NOT EXISTS history (
    id BIGSERIAL PRIMARY KEY,
    at_ms BIGINT NOT NULL,
    actor TEXT NOT NULL,
    relayed BOOLEAN NOT NULL,
    op TEXT NOT NULL CHECK (op IN ('add', 'remove')),
    path TEXT NOT NULL,
    attribute TEXT NOT NULL,
    value TEXT NOT NULL,
    unit TEXT NOT NULL,
    source TEXT,
    via TEXT
);
CREATE INDEX IF NOT EXISTS history_by_path ON history (path);
CREATE OR REPLACE FUNCTION avu_history_is_append_only() RETURNS trigger
    LANGUAGE plpgsql AS $$ BEGIN RAISE EXCEPTION 'avu history is append-only'; END $$;
CREATE OR REPLACE TRIGGER history_is_append_only BEFORE UPDATE OR DELETE ON history
    FOR EACH STATEMENT EXECUTE FUNCTION avu_history_is_append_only();
CREATE OR REPLACE TRIGGER history_is_never_truncated BEFORE TRUNCATE ON history
    FOR EACH STATEMENT EXECUTE FUNCTION avu_history_is_append_only();
";

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
    /// The key every instance seals questions with (the shared store's; `None` for avu's own
    /// file, whose key is a file beside it).
    key: Option<[u8; 32]>,
}

/// What identifies an AVU on a path: SHA-256 of the four fields, each preceded by its
/// length, so that no two AVUs share it.
pub(crate) fn digest(path: &str, attribute: &str, value: &str, unit: &str) -> Vec<u8> {
    use sha2::{Digest, Sha256};
    let mut h = Sha256::new();
    for field in [path, attribute, value, unit] {
        h.update((field.len() as u64).to_be_bytes());
        h.update(field.as_bytes());
    }
    h.finalize().to_vec()
}

impl Store {
    /// avu's own SQLite file.
    pub fn open(path: &Path) -> Result<Store, StoreError> {
        let name = path.display().to_string();
        let db = open_migrated(path, SCHEMA, "").map_err(|source| StoreError::Open {
            path: name.clone(),
            source,
        })?;
        let store = Store {
            db: Db::Sqlite(db),
            path: name,
            key: None,
        };
        store.fill_digests()?;
        Ok(store)
    }

    /// The store every instance of avu shares: PostgreSQL at `url` (the schema made if it is
    /// not there). A TLS server is checked against `authority` (PEM), else the system's
    /// authorities.
    pub fn connect(url: &str, authority: Option<&Path>) -> Result<Store, StoreError> {
        // On a thread of its own: the PostgreSQL client blocks on a runtime of its own, which
        // cannot start on a thread that is driving async tasks (avu starts from async code).
        std::thread::scope(|s| {
            s.spawn(|| Store::connect_here(url, authority))
                .join()
                .expect("connecting does not panic")
        })
    }

    fn connect_here(url: &str, authority: Option<&Path>) -> Result<Store, StoreError> {
        let path = "PostgreSQL".to_owned();
        let db = Db::Postgres(Box::new(Pg::connect(url, authority).map_err(|source| {
            StoreError::Db {
                path: path.clone(),
                source,
            }
        })?));
        SHARED.make(&db).map_err(|source| StoreError::Schema {
            path: path.clone(),
            source,
        })?;
        let mut store = Store {
            db,
            path,
            key: None,
        };
        store.key = Some(
            mesh_store::shared_key(&store.db, StateKey::random()).map_err(|e| match e {
                KeyError::Db(source) => StoreError::Db {
                    path: store.path.clone(),
                    source,
                },
                KeyError::BadLength(found) => StoreError::BadKey {
                    path: store.path.clone(),
                    found,
                },
            })?,
        );
        Ok(store)
    }

    fn wrap(&self) -> impl Fn(DbError) -> StoreError + '_ {
        |source| StoreError::Db {
            path: self.path.clone(),
            source,
        }
    }

    /// Rows written before the store kept digests get theirs (once: an older file's first open).
    /// SQLite only, through the partial index of such rows: its planner would otherwise scan
    /// every AVU at every open.
    fn fill_digests(&self) -> Result<(), StoreError> {
        let rows: Vec<(String, String, String, String)> = self
            .db
            .query_map(
                "SELECT path, attribute, value, unit FROM avus INDEXED BY avus_without_digest
                 WHERE digest IS NULL",
                params![],
                |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)),
            )
            .map_err(self.wrap())?;
        if rows.is_empty() {
            return Ok(());
        }
        let tx = self.db.transaction().map_err(self.wrap())?;
        for (p, a, v, u) in rows {
            tx.execute(
                "UPDATE avus SET digest = ?5 WHERE path = ?1 AND attribute = ?2 AND value = ?3 AND unit = ?4",
                params![p, a, v, u, digest(&p, &a, &v, &u)],
            )
            .map_err(self.wrap())?;
        }
        tx.commit().map_err(self.wrap())
    }

    /// The key questions are sealed with, when the store keeps one for every instance (the
    /// shared store); `None` for avu's own file (the key is then a file beside it).
    pub fn shared_key(&self) -> Option<[u8; 32]> {
        self.key
    }

    /// Spends a `requestState` whose answer writes nothing (a decline).
    pub fn spend(&mut self, state: &Opened) -> Result<(), StoreError> {
        let tx = self.db.transaction().map_err(self.wrap())?;
        if !spend_state(&tx, &state.id, state.expires_ms).map_err(self.wrap())? {
            return Err(StateError::Used.into());
        }
        tx.commit().map_err(self.wrap())
    }

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
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        self.db
            .query_map(
                "SELECT attribute, value, unit FROM avus WHERE path = ?1
                 AND (?2 OR (attribute, value, unit) > (?3, ?4, ?5))
                 ORDER BY attribute, value, unit LIMIT ?6",
                params![path, first, a, v, u, limit],
                |r| {
                    Ok(Avu {
                        attribute: r.get(0)?,
                        value: r.get(1)?,
                        unit: r.get(2)?,
                    })
                },
            )
            .map_err(self.wrap())
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

    /// One transaction, the spent state with it; the row count says whether anything
    /// changed (`ON CONFLICT DO NOTHING`: two instances adding the same AVU at once write it
    /// and its history once).
    fn change(
        &mut self,
        path: &str,
        avus: &[Avu],
        by: &Writer,
        op: &str,
    ) -> Result<Vec<bool>, StoreError> {
        let wrap = self.wrap();
        let tx = self.db.transaction().map_err(&wrap)?;
        if let Some(state) = by.answers
            && !spend_state(&tx, &state.id, state.expires_ms).map_err(&wrap)?
        {
            return Err(StateError::Used.into());
        }
        let sql = if op == "add" {
            "INSERT INTO avus (path, attribute, value, unit, digest) VALUES (?1, ?2, ?3, ?4, ?5)
             ON CONFLICT DO NOTHING"
        } else {
            "DELETE FROM avus WHERE path = ?1 AND attribute = ?2 AND value = ?3 AND unit = ?4
             AND digest = ?5"
        };
        let at = now_ms() as i64;
        let mut changed = Vec::with_capacity(avus.len());
        for avu in avus {
            let key = digest(path, &avu.attribute, &avu.value, &avu.unit);
            let does = tx
                .execute(sql, params![path, avu.attribute, avu.value, avu.unit, key])
                .map_err(&wrap)?
                == 1;
            if does {
                tx.execute(
                    "INSERT INTO history (at_ms, actor, relayed, op, path, attribute, value, unit, source, via)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)",
                    params![
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
                    ],
                )
                .map_err(&wrap)?;
            }
            changed.push(does);
        }
        tx.commit().map_err(&wrap)?;
        Ok(changed)
    }

    /// The history of one path, oldest first.
    pub fn history(&mut self, path: &str) -> Result<Vec<Change>, StoreError> {
        self.db
            .query_map(
                "SELECT at_ms, actor, op, attribute, value, unit, source FROM history
                 WHERE path = ?1 ORDER BY id",
                params![path],
                |r| {
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
                },
            )
            .map_err(self.wrap())
    }

    /// The store's tables and columns (`mesh_store::columns`), for tests that hold its two
    /// dialects to one schema.
    pub fn columns(&self) -> Result<Vec<(String, String)>, StoreError> {
        mesh_store::columns(&self.db).map_err(self.wrap())
    }
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
        let e = store
            .db
            .execute("DELETE FROM history", params![])
            .unwrap_err()
            .to_string();
        assert!(e.contains("append-only"), "{e}");
    }

    /// A file an older avu wrote (no digests) opens with every AVU's digest filled, and
    /// its AVUs are removed as any other.
    #[test]
    fn an_older_file_gets_its_digests() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("avu.sqlite");
        {
            let old = open_migrated(&file, &SCHEMA[..3], "").unwrap();
            old.execute(
                "INSERT INTO avus (path, attribute, value, unit) VALUES ('/p', 'a', 'v', '')",
                [],
            )
            .unwrap();
        }
        let mut store = Store::open(&file).unwrap();
        let missing: i64 = store
            .db
            .query_row(
                "SELECT count(*) FROM avus WHERE digest IS NULL",
                params![],
                |r| r.get(0),
            )
            .unwrap();
        assert_eq!(missing, 0);
        let by = Writer {
            actor: "ann@PEOPLE",
            via: None,
            answers: None,
            source: None,
        };
        assert_eq!(
            store.remove("/p", &[avu("a", "v", "")], &by).unwrap(),
            vec![true]
        );
        assert!(store.list("/p").unwrap().is_empty());
    }
}
