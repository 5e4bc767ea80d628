//! decide's sidecar, where every run, decision and proposed AVU is recorded: SQLite in WAL
//! mode, migrated in code; or, for decide run as more than one instance, PostgreSQL with the
//! same tables. Decisions are never updated, only superseded (a trigger refuses an UPDATE);
//! overrides and labels, filled by picks and feedback, live here too.

use std::path::{Path, PathBuf};

use mesh_sqlite::{MigrateError, open_migrated};

use super::{Db, DbError, KeyError, Pg, Schema, SchemaError};

/// The migrations, in order; `PRAGMA user_version` counts those applied.
const MIGRATIONS: &[&str] = &[
    // 1: the whole first schema.
    "
    CREATE TABLE runs (
        id TEXT PRIMARY KEY,
        card_id TEXT NOT NULL,
        card_name TEXT NOT NULL,
        actor TEXT,
        backend TEXT NOT NULL,
        bundle TEXT,
        questions_lock TEXT NOT NULL,
        started_ms INTEGER NOT NULL,
        finished_ms INTEGER
    );
    CREATE TABLE decisions (
        id TEXT PRIMARY KEY,
        run_id TEXT NOT NULL REFERENCES runs (id),
        -- The decision this one answers within (a column's aspect under its annotate...).
        parent_id TEXT REFERENCES decisions (id),
        -- A later decision on the same question replaces an earlier one by pointing at it.
        supersedes TEXT REFERENCES decisions (id),
        question_key TEXT NOT NULL,
        -- What it is about: {\"column\": ...} or {\"site\": ...} or {\"dataset\": ...}.
        subject TEXT NOT NULL,
        state_json TEXT NOT NULL,
        state_hash TEXT NOT NULL,
        -- L0 uncalibrated, L1 calibrated, L2 fitted head, or rule.
        level TEXT NOT NULL CHECK (level IN ('L0', 'L1', 'L2', 'rule')),
        calibration TEXT,
        answer TEXT NOT NULL,
        -- Absent exactly when a rule decided.
        p REAL CHECK ((level = 'rule') = (p IS NULL)),
        margin REAL,
        outcome TEXT NOT NULL CHECK (outcome IN ('proposed', 'abstain', 'rule', 'rejected', 'accepted', 'human')),
        created_ms INTEGER NOT NULL
    );
    CREATE INDEX decisions_by_run ON decisions (run_id);
    CREATE TRIGGER decisions_are_never_updated BEFORE UPDATE ON decisions
    BEGIN
        SELECT RAISE(ABORT, 'decisions are never updated: record a new one that supersedes it');
    END;
    CREATE TABLE decision_options (
        decision_id TEXT NOT NULL REFERENCES decisions (id),
        option TEXT NOT NULL,
        score REAL,
        p REAL,
        PRIMARY KEY (decision_id, option)
    );
    -- One per column (or site, or dataset) and ontology: its candidate terms and winner.
    CREATE TABLE candidate_groups (
        id TEXT PRIMARY KEY,
        run_id TEXT NOT NULL REFERENCES runs (id),
        scope TEXT NOT NULL CHECK (scope IN ('column', 'site', 'dataset')),
        subject TEXT NOT NULL,
        ontology TEXT NOT NULL,
        winner_decision_id TEXT REFERENCES decisions (id),
        top_p REAL,
        margin REAL,
        outcome TEXT NOT NULL,
        updated_ms INTEGER NOT NULL
    );
    CREATE INDEX groups_by_run ON candidate_groups (run_id);
    CREATE TABLE group_candidates (
        group_id TEXT NOT NULL REFERENCES candidate_groups (id),
        decision_id TEXT NOT NULL REFERENCES decisions (id),
        curie TEXT NOT NULL,
        label TEXT NOT NULL,
        rank INTEGER NOT NULL,
        PRIMARY KEY (group_id, decision_id)
    );
    CREATE TABLE avu_links (
        id TEXT PRIMARY KEY,
        run_id TEXT NOT NULL REFERENCES runs (id),
        group_id TEXT REFERENCES candidate_groups (id),
        decision_id TEXT NOT NULL REFERENCES decisions (id),
        attribute TEXT NOT NULL,
        value TEXT NOT NULL,
        unit TEXT,
        status TEXT NOT NULL CHECK (status IN ('proposed', 'rejected', 'accepted', 'written', 'dry_run', 'mirror_failed')),
        path TEXT,
        updated_ms INTEGER NOT NULL
    );
    CREATE INDEX links_by_run ON avu_links (run_id);
    CREATE INDEX links_by_path ON avu_links (path);
    -- Who chose what from which offered list (picks, rejects, declines).
    CREATE TABLE overrides (
        id TEXT PRIMARY KEY,
        group_id TEXT NOT NULL REFERENCES candidate_groups (id),
        actor TEXT,
        action TEXT NOT NULL CHECK (action IN ('pick', 'reject', 'decline')),
        chosen_decision_id TEXT REFERENCES decisions (id),
        offered TEXT NOT NULL,
        created_ms INTEGER NOT NULL
    );
    -- What the next fit learns from.
    CREATE TABLE labels (
        id TEXT PRIMARY KEY,
        question_key TEXT NOT NULL,
        state_json TEXT NOT NULL,
        state_hash TEXT NOT NULL,
        option TEXT NOT NULL,
        positive INTEGER NOT NULL CHECK (positive IN (0, 1)),
        weight REAL NOT NULL,
        source TEXT NOT NULL CHECK (source IN ('curator', 'implicit')),
        override_id TEXT REFERENCES overrides (id),
        created_ms INTEGER NOT NULL
    );
    CREATE INDEX labels_by_question ON labels (question_key);
    ",
    // 2: a written link remembers who wrote it, when, and the lake snapshot that mirrored it.
    "
    ALTER TABLE avu_links ADD COLUMN written_by TEXT;
    ALTER TABLE avu_links ADD COLUMN written_ms INTEGER;
    ALTER TABLE avu_links ADD COLUMN snapshot_id INTEGER;
    ",
    // 3: the card a label came from, so a fit can hold one card out at a time.
    "
    ALTER TABLE labels ADD COLUMN card TEXT;
    ",
    // 4: the ids of requestStates already answered (each is answered once).
    mesh_sqlite::SPENT_STATES,
    // 5: how likely a group's best candidate is right, and how that p was made.
    "
    ALTER TABLE candidate_groups ADD COLUMN best_p REAL;
    ALTER TABLE candidate_groups ADD COLUMN best_calibration TEXT;
    ",
    // 6: a column's allowed values checked as comparisons (`x = 'a' OR x = 'b' OR …`), not
    // `x IN ('a', 'b', …)`: for a list of more than two SQLite builds a temporary b-tree each
    // time it checks a row, a quarter of a run's write (two per decision). The values allowed
    // are the same; only the tables' text changes, as SQLite's documentation allows for a
    // check every row still meets (lang_altertable.html, "Making Other Kinds Of Table Schema
    // Changes"). The table made and dropped moves the schema's cookie, so that other
    // connections read the new text; RESET reads it on this one.
    "
    PRAGMA writable_schema = ON;
    UPDATE sqlite_schema SET sql =
        replace(replace(replace(replace(replace(sql,
            'level IN (''L0'', ''L1'', ''L2'', ''rule'')',
            'level = ''L0'' OR level = ''L1'' OR level = ''L2'' OR level = ''rule'''),
            'outcome IN (''proposed'', ''abstain'', ''rule'', ''rejected'', ''accepted'', ''human'')',
            'outcome = ''proposed'' OR outcome = ''abstain'' OR outcome = ''rule''
                OR outcome = ''rejected'' OR outcome = ''accepted'' OR outcome = ''human'''),
            'scope IN (''column'', ''site'', ''dataset'')',
            'scope = ''column'' OR scope = ''site'' OR scope = ''dataset'''),
            'status IN (''proposed'', ''rejected'', ''accepted'', ''written'', ''dry_run'', ''mirror_failed'')',
            'status = ''proposed'' OR status = ''rejected'' OR status = ''accepted''
                OR status = ''written'' OR status = ''dry_run'' OR status = ''mirror_failed'''),
            'action IN (''pick'', ''reject'', ''decline'')',
            'action = ''pick'' OR action = ''reject'' OR action = ''decline''')
        WHERE type = 'table' AND name IN ('decisions', 'candidate_groups', 'avu_links', 'overrides');
    CREATE TABLE schema_cookie_moved (x);
    DROP TABLE schema_cookie_moved;
    PRAGMA writable_schema = RESET;
    ",
];

/// The schema version of the PostgreSQL sidecar: 1, SQLite's tables after migration 4; 2,
/// after migration 5 (6 changes no table's content or rules: PostgreSQL checks an `IN` list
/// without a table of its own).
const PG_VERSION: i64 = 2;

/// Taken while the schema is made: instances starting together make it once.
const SCHEMA_LOCK: i64 = 0x006d_6573_6864_6563; // "meshdec"

/// The PostgreSQL sidecar: made once by the first instance (`mesh_store::Schema`), its
/// version in `sidecar_version`.
const SCHEMA: Schema = Schema {
    lock: SCHEMA_LOCK,
    sql: PG_SCHEMA,
    version_table: "sidecar_version",
    version: PG_VERSION,
};

/// The PostgreSQL sidecar: SQLite's tables, with `rowid` made explicit (queries order by it)
/// and `json_extract` as a function; references checked at commit, so that a run's journal
/// can be written a table at a time (`store::Journal::write`).
const PG_SCHEMA: &str = "
CREATE OR REPLACE FUNCTION json_extract(doc TEXT, path TEXT) RETURNS TEXT
    LANGUAGE plpgsql IMMUTABLE AS $$ BEGIN
        RETURN (doc::json) #>> string_to_array(substr(path, 3), '.');
    EXCEPTION WHEN others THEN RETURN NULL;
    END $$;
CREATE TABLE IF NOT EXISTS runs (
    id TEXT PRIMARY KEY,
    card_id TEXT NOT NULL,
    card_name TEXT NOT NULL,
    actor TEXT,
    backend TEXT NOT NULL,
    bundle TEXT,
    questions_lock TEXT NOT NULL,
    started_ms BIGINT NOT NULL,
    finished_ms BIGINT
);
CREATE TABLE IF NOT EXISTS decisions (
    rowid BIGSERIAL UNIQUE,
    id TEXT PRIMARY KEY,
    run_id TEXT NOT NULL REFERENCES runs (id) DEFERRABLE INITIALLY DEFERRED,
    parent_id TEXT REFERENCES decisions (id) DEFERRABLE INITIALLY DEFERRED,
    supersedes TEXT REFERENCES decisions (id) DEFERRABLE INITIALLY DEFERRED,
    question_key TEXT NOT NULL,
    subject TEXT NOT NULL,
    state_json TEXT NOT NULL,
    state_hash TEXT NOT NULL,
    level TEXT NOT NULL CHECK (level IN ('L0', 'L1', 'L2', 'rule')),
    calibration TEXT,
    answer TEXT NOT NULL,
    p DOUBLE PRECISION CHECK ((level = 'rule') = (p IS NULL)),
    margin DOUBLE PRECISION,
    outcome TEXT NOT NULL CHECK (outcome IN ('proposed', 'abstain', 'rule', 'rejected', 'accepted', 'human')),
    created_ms BIGINT NOT NULL
);
CREATE INDEX IF NOT EXISTS decisions_by_run ON decisions (run_id);
CREATE OR REPLACE FUNCTION decisions_are_never_updated() RETURNS trigger
    LANGUAGE plpgsql AS $$ BEGIN
        RAISE EXCEPTION 'decisions are never updated: record a new one that supersedes it';
    END $$;
CREATE OR REPLACE TRIGGER decisions_are_never_updated BEFORE UPDATE ON decisions
    FOR EACH ROW EXECUTE FUNCTION decisions_are_never_updated();
CREATE TABLE IF NOT EXISTS decision_options (
    decision_id TEXT NOT NULL REFERENCES decisions (id) DEFERRABLE INITIALLY DEFERRED,
    option TEXT NOT NULL,
    score DOUBLE PRECISION,
    p DOUBLE PRECISION,
    PRIMARY KEY (decision_id, option)
);
CREATE TABLE IF NOT EXISTS candidate_groups (
    rowid BIGSERIAL UNIQUE,
    id TEXT PRIMARY KEY,
    run_id TEXT NOT NULL REFERENCES runs (id) DEFERRABLE INITIALLY DEFERRED,
    scope TEXT NOT NULL CHECK (scope IN ('column', 'site', 'dataset')),
    subject TEXT NOT NULL,
    ontology TEXT NOT NULL,
    winner_decision_id TEXT REFERENCES decisions (id) DEFERRABLE INITIALLY DEFERRED,
    top_p DOUBLE PRECISION,
    margin DOUBLE PRECISION,
    outcome TEXT NOT NULL,
    updated_ms BIGINT NOT NULL
);
CREATE INDEX IF NOT EXISTS groups_by_run ON candidate_groups (run_id);
ALTER TABLE candidate_groups ADD COLUMN IF NOT EXISTS best_p DOUBLE PRECISION;
ALTER TABLE candidate_groups ADD COLUMN IF NOT EXISTS best_calibration TEXT;
CREATE TABLE IF NOT EXISTS group_candidates (
    group_id TEXT NOT NULL REFERENCES candidate_groups (id) DEFERRABLE INITIALLY DEFERRED,
    decision_id TEXT NOT NULL REFERENCES decisions (id) DEFERRABLE INITIALLY DEFERRED,
    curie TEXT NOT NULL,
    label TEXT NOT NULL,
    rank BIGINT NOT NULL,
    PRIMARY KEY (group_id, decision_id)
);
CREATE TABLE IF NOT EXISTS avu_links (
    rowid BIGSERIAL UNIQUE,
    id TEXT PRIMARY KEY,
    run_id TEXT NOT NULL REFERENCES runs (id) DEFERRABLE INITIALLY DEFERRED,
    group_id TEXT REFERENCES candidate_groups (id) DEFERRABLE INITIALLY DEFERRED,
    decision_id TEXT NOT NULL REFERENCES decisions (id) DEFERRABLE INITIALLY DEFERRED,
    attribute TEXT NOT NULL,
    value TEXT NOT NULL,
    unit TEXT,
    status TEXT NOT NULL CHECK (status IN ('proposed', 'rejected', 'accepted', 'written', 'dry_run', 'mirror_failed')),
    path TEXT,
    updated_ms BIGINT NOT NULL,
    written_by TEXT,
    written_ms BIGINT,
    snapshot_id BIGINT
);
CREATE INDEX IF NOT EXISTS links_by_run ON avu_links (run_id);
CREATE INDEX IF NOT EXISTS links_by_path ON avu_links (path);
CREATE TABLE IF NOT EXISTS overrides (
    id TEXT PRIMARY KEY,
    group_id TEXT NOT NULL REFERENCES candidate_groups (id) DEFERRABLE INITIALLY DEFERRED,
    actor TEXT,
    action TEXT NOT NULL CHECK (action IN ('pick', 'reject', 'decline')),
    chosen_decision_id TEXT REFERENCES decisions (id) DEFERRABLE INITIALLY DEFERRED,
    offered TEXT NOT NULL,
    created_ms BIGINT NOT NULL
);
CREATE TABLE IF NOT EXISTS labels (
    rowid BIGSERIAL UNIQUE,
    id TEXT PRIMARY KEY,
    question_key TEXT NOT NULL,
    state_json TEXT NOT NULL,
    state_hash TEXT NOT NULL,
    option TEXT NOT NULL,
    positive BIGINT NOT NULL CHECK (positive IN (0, 1)),
    weight DOUBLE PRECISION NOT NULL,
    source TEXT NOT NULL CHECK (source IN ('curator', 'implicit')),
    override_id TEXT REFERENCES overrides (id) DEFERRABLE INITIALLY DEFERRED,
    created_ms BIGINT NOT NULL,
    card TEXT
);
CREATE INDEX IF NOT EXISTS labels_by_question ON labels (question_key);
";

/// Where decide keeps what every instance must share: nothing (`config.json` absent: the
/// SQLite sidecar and the local lake in decide's directory), or a PostgreSQL database.
#[derive(Debug, Clone, Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Shared {
    /// `postgresql://user:password@host:port/dbname`: the sidecar, the sealing key and the
    /// lake's catalog. Over TLS as its `sslmode` says (`require`: TLS or nothing).
    pub database: Option<String>,
    /// The authority (PEM) the database's TLS certificate is checked against; without it,
    /// the system's (the sidecar), or none (the lake's catalog, reached by libpq).
    pub database_ca: Option<PathBuf>,
    /// Where the lake's Parquet files go when its catalog is in the database: a directory
    /// every instance reaches (shared storage). Default: `lake/data` in decide's directory.
    pub lake_data: Option<PathBuf>,
}

impl Shared {
    /// `<dir>/config.json`, or nothing shared when there is none.
    pub fn read(dir: &Path) -> Result<Shared, SidecarError> {
        let file = dir.join("config.json");
        let text = match std::fs::read_to_string(&file) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Shared::default()),
            Err(e) => {
                return Err(SidecarError::Config {
                    path: file.display().to_string(),
                    why: e.to_string(),
                });
            }
        };
        serde_json::from_str(&text).map_err(|e| SidecarError::Config {
            path: file.display().to_string(),
            why: e.to_string(),
        })
    }
}

/// The sidecar could not be opened or migrated.
#[derive(Debug, thiserror::Error)]
pub enum SidecarError {
    #[error("decide sidecar {path}: {source}")]
    Sqlite {
        path: String,
        source: rusqlite::Error,
    },
    #[error(
        "decide sidecar {path} has schema version {found}, newer than this mesh knows ({known}); use a newer mesh"
    )]
    TooNew {
        path: String,
        found: i64,
        known: usize,
    },
    #[error("decide sidecar {path}: {source}")]
    Db { path: String, source: DbError },
    #[error(
        "decide's config {path}: {why}; it may hold database (a PostgreSQL URL) and lake_data (a directory)"
    )]
    Config { path: String, why: String },
    #[error(
        "decide sidecar {path}: its sealing key (table state_key) is {found} bytes, not 32: restore it, or delete the row to make a new one (questions asked before are then refused)"
    )]
    BadKey { path: String, found: usize },
}

/// An open sidecar.
pub struct Sidecar {
    pub db: Db,
    /// The file, or the database without its password (for messages).
    pub path: String,
}

impl Sidecar {
    /// Opens (creating) the SQLite sidecar and brings its schema up to date.
    pub fn open(path: &Path) -> Result<Sidecar, SidecarError> {
        let name = path.display().to_string();
        let db =
            open_migrated(path, MIGRATIONS, "PRAGMA foreign_keys = ON;").map_err(|e| match e {
                MigrateError::Sqlite(source) => SidecarError::Sqlite {
                    path: name.clone(),
                    source,
                },
                MigrateError::TooNew { found, known } => SidecarError::TooNew {
                    path: name.clone(),
                    found,
                    known,
                },
            })?;
        Ok(Sidecar {
            db: Db::Sqlite(db),
            path: name,
        })
    }

    /// Connects to the PostgreSQL sidecar at `url`, making its tables if they are not there
    /// (once, however many instances start together).
    pub fn connect(url: &str) -> Result<Sidecar, SidecarError> {
        Sidecar::connect_checked(url, None)
    }

    /// As [`Sidecar::connect`], a TLS server checked against `authority` (PEM).
    pub fn connect_checked(url: &str, authority: Option<&Path>) -> Result<Sidecar, SidecarError> {
        let path = without_password(url);
        let wrap = |source| SidecarError::Db {
            path: path.clone(),
            source,
        };
        let db = Db::Postgres(Box::new(Pg::connect(url, authority).map_err(wrap)?));
        SCHEMA.make(&db).map_err(|e| match e {
            SchemaError::Db(source) => wrap(source),
            SchemaError::TooNew { found, known } => SidecarError::TooNew {
                path: path.clone(),
                found,
                known: known as usize,
            },
        })?;
        Ok(Sidecar { db, path })
    }

    /// The sidecar decide in `dir` uses: the database its `config.json` names, else
    /// `sidecar.sqlite` there.
    pub fn in_dir(dir: &Path) -> Result<Sidecar, SidecarError> {
        let shared = Shared::read(dir)?;
        match &shared.database {
            Some(url) => Sidecar::connect_checked(url, shared.database_ca.as_deref()),
            None => Sidecar::open(&dir.join("sidecar.sqlite")),
        }
    }

    /// The schema version in force.
    pub fn version(&self) -> Result<i64, SidecarError> {
        let sql = match self.db {
            Db::Sqlite(_) => "PRAGMA user_version",
            Db::Postgres(_) => "SELECT version FROM sidecar_version",
        };
        self.db
            .query_row(sql, crate::params![], |r| r.get(0))
            .map_err(|source| SidecarError::Db {
                path: self.path.clone(),
                source,
            })
    }

    /// The key every instance seals questions with, from the database (made by the first
    /// instance: `fresh` when none is there yet). `None` for a SQLite sidecar, whose key is a
    /// file beside it.
    pub fn shared_key(&self, fresh: [u8; 32]) -> Result<Option<[u8; 32]>, SidecarError> {
        if !self.db.is_shared() {
            return Ok(None);
        }
        match mesh_store::shared_key(&self.db, fresh) {
            Ok(key) => Ok(Some(key)),
            Err(KeyError::Db(source)) => Err(SidecarError::Db {
                path: self.path.clone(),
                source,
            }),
            Err(KeyError::BadLength(found)) => Err(SidecarError::BadKey {
                path: self.path.clone(),
                found,
            }),
        }
    }
}

/// A database URL (or libpq keywords) as it may be shown: rebuilt from its hosts, ports, user
/// and database name only, so that a password anywhere in it (`user:pw@`, `?password=`,
/// `password = 'a b'`) is never shown.
pub fn without_password(url: &str) -> String {
    let Ok(config) = url.parse::<postgres::Config>() else {
        return "<a database URL that does not parse>".to_owned();
    };
    let ports = config.get_ports();
    let hosts: Vec<String> = config
        .get_hosts()
        .iter()
        .enumerate()
        .map(|(i, h)| {
            let host = match h {
                postgres::config::Host::Tcp(h) => h.clone(),
                #[cfg(unix)]
                postgres::config::Host::Unix(p) => p.display().to_string(),
            };
            match ports.get(i).or(ports.first()) {
                Some(port) => format!("{host}:{port}"),
                None => host,
            }
        })
        .collect();
    let user = config
        .get_user()
        .map(|u| format!("{u}@"))
        .unwrap_or_default();
    let db = config.get_dbname().unwrap_or("");
    format!("postgresql://{user}{}/{db}", hosts.join(","))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_database_is_named_without_its_password() {
        assert_eq!(
            without_password("postgresql://decide:s3cr%40t@db:5432/decide"),
            "postgresql://decide@db:5432/decide"
        );
        assert_eq!(
            without_password("host=db password = 's3 cret' user=decide dbname=d"),
            "postgresql://decide@db/d"
        );
        assert_eq!(
            without_password("postgresql://db/decide?password=s3cret"),
            "postgresql://db:5432/decide"
        );
        assert!(!without_password("not a url ' password=s3cret").contains("s3cret"));
    }

    fn decision(db: &Db, id: &str, level: &str, p: Option<f64>) -> Result<u64, DbError> {
        db.execute(
            "INSERT INTO decisions (id, run_id, question_key, subject, state_json, state_hash,
               level, answer, p, outcome, created_ms)
             VALUES (?1, 'r1', 'column.annotate@x', '{}', '{}', 'h', ?2, 'yes', ?3, 'proposed', 0)",
            crate::params![id, level, p],
        )
    }

    #[test]
    fn migrates_once_in_wal_and_keeps_decisions_unchanged() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sidecar.sqlite");
        let sidecar = Sidecar::open(&path).unwrap();
        assert_eq!(sidecar.version().unwrap(), MIGRATIONS.len() as i64);
        let mode: String = sidecar
            .db
            .query_row("PRAGMA journal_mode", crate::params![], |r| r.get(0))
            .unwrap();
        assert_eq!(mode, "wal");
        sidecar
            .db
            .execute(
                "INSERT INTO runs (id, card_id, card_name, backend, questions_lock, started_ms)
                 VALUES ('r1', 'c', 'n', 'embedded', 'lock', 0)",
                crate::params![],
            )
            .unwrap();
        decision(&sidecar.db, "d1", "L0", Some(0.8)).unwrap();
        // Probabilities are there exactly when no rule decided.
        assert!(decision(&sidecar.db, "d2", "rule", Some(0.8)).is_err());
        assert!(decision(&sidecar.db, "d3", "L0", None).is_err());
        decision(&sidecar.db, "d4", "rule", None).unwrap();
        let e = sidecar
            .db
            .execute(
                "UPDATE decisions SET answer = 'no' WHERE id = 'd1'",
                crate::params![],
            )
            .unwrap_err()
            .to_string();
        assert!(e.contains("never updated"), "{e}");
        drop(sidecar);
        // Opening again migrates nothing and loses nothing.
        let again = Sidecar::open(&path).unwrap();
        let n: i64 = again
            .db
            .query_row("SELECT count(*) FROM decisions", crate::params![], |r| {
                r.get(0)
            })
            .unwrap();
        assert_eq!(n, 2);
        // A sidecar from a newer mesh is refused, not altered.
        again.db.execute_batch("PRAGMA user_version = 99").unwrap();
        drop(again);
        let e = Sidecar::open(&path).err().unwrap().to_string();
        assert!(e.contains("schema version 99, newer"), "{e}");
    }

    /// The statement's opcodes (`EXPLAIN`).
    fn opcodes(db: &Db, sql: &str) -> Vec<String> {
        let (_, rows) = db
            .query_named(&format!("EXPLAIN {sql}"), crate::params![])
            .unwrap();
        rows.iter()
            .filter_map(|r| match &r.values()[1] {
                crate::store::Value::Text(op) => Some(op.clone()),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn allowed_values_are_checked_without_a_table_per_row() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sidecar.sqlite");
        // A sidecar of the migrations before, with a run in it.
        let older = open_migrated(&path, &MIGRATIONS[..5], "PRAGMA foreign_keys = ON;").unwrap();
        older
            .execute_batch(
                "INSERT INTO runs (id, card_id, card_name, backend, questions_lock, started_ms)
                 VALUES ('r1', 'c', 'n', 'embedded', 'lock', 0);",
            )
            .unwrap();
        drop(older);
        let sidecar = Sidecar::open(&path).unwrap();
        assert_eq!(sidecar.version().unwrap(), MIGRATIONS.len() as i64);
        decision(&sidecar.db, "d1", "L0", Some(0.8)).unwrap();
        let ops = opcodes(
            &sidecar.db,
            "INSERT INTO decisions (id, run_id, question_key, subject, state_json, state_hash,
               level, answer, p, outcome, created_ms)
             VALUES ('d9', 'r1', 'k', '{}', '{}', 'h', 'L0', 'yes', 0.5, 'proposed', 0)",
        );
        assert!(!ops.iter().any(|op| op == "OpenEphemeral"), "{ops:?}");
        // The same values allowed, and only those.
        assert!(decision(&sidecar.db, "d2", "L3", Some(0.8)).is_err());
        for level in ["L1", "L2"] {
            decision(&sidecar.db, &format!("d-{level}"), level, Some(0.5)).unwrap();
        }
        let outcome = |id: &str, outcome: &str| {
            sidecar.db.execute(
                "INSERT INTO decisions (id, run_id, question_key, subject, state_json, state_hash,
                   level, answer, p, outcome, created_ms)
                 VALUES (?1, 'r1', 'k', '{}', '{}', 'h', 'rule', 'yes', NULL, ?2, 0)",
                crate::params![id, outcome],
            )
        };
        for (i, o) in ["abstain", "rule", "rejected", "accepted", "human"]
            .iter()
            .enumerate()
        {
            outcome(&format!("o{i}"), o).unwrap();
        }
        assert!(outcome("o9", "maybe").is_err());
        let scope = |id: &str, scope: &str| {
            sidecar.db.execute(
                "INSERT INTO candidate_groups (id, run_id, scope, subject, ontology, outcome,
                   updated_ms)
                 VALUES (?1, 'r1', ?2, '{}', 'pato', 'proposed', 0)",
                crate::params![id, scope],
            )
        };
        scope("g1", "site").unwrap();
        assert!(scope("g2", "card").is_err());
        let status = |id: &str, status: &str| {
            sidecar.db.execute(
                "INSERT INTO avu_links (id, run_id, decision_id, attribute, value, status,
                   updated_ms)
                 VALUES (?1, 'r1', 'd1', 'a', 'v', ?2, 0)",
                crate::params![id, status],
            )
        };
        status("l1", "mirror_failed").unwrap();
        assert!(status("l2", "lost").is_err());
        let action = |id: &str, action: &str| {
            sidecar.db.execute(
                "INSERT INTO overrides (id, group_id, action, offered, created_ms)
                 VALUES (?1, 'g1', ?2, '[]', 0)",
                crate::params![id, action],
            )
        };
        action("v1", "decline").unwrap();
        assert!(action("v2", "ignore").is_err());
        let check: String = sidecar
            .db
            .query_row("PRAGMA integrity_check", crate::params![], |r| r.get(0))
            .unwrap();
        assert_eq!(check, "ok");
    }
}
