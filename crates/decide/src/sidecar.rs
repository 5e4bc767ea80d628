//! decide's sidecar: SQLite in WAL mode, migrated in code, where every run, decision and
//! proposed AVU is recorded. Decisions are never updated, only superseded (a trigger
//! refuses an UPDATE); overrides and labels, filled by picks and feedback, live here too.

use std::path::Path;

use rusqlite::Connection;

use mesh_sqlite::{MigrateError, open_migrated};

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
];

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
}

/// An open sidecar.
pub struct Sidecar {
    pub db: Connection,
    pub path: String,
}

impl Sidecar {
    /// Opens (creating) the sidecar and brings its schema up to date.
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
        Ok(Sidecar { db, path: name })
    }

    /// The schema version in force.
    pub fn version(&self) -> Result<i64, SidecarError> {
        self.db
            .query_row("PRAGMA user_version", [], |r| r.get(0))
            .map_err(|source| SidecarError::Sqlite {
                path: self.path.clone(),
                source,
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decision(db: &Connection, id: &str, level: &str, p: Option<f64>) -> rusqlite::Result<usize> {
        db.execute(
            "INSERT INTO decisions (id, run_id, question_key, subject, state_json, state_hash,
               level, answer, p, outcome, created_ms)
             VALUES (?1, 'r1', 'column.annotate@x', '{}', '{}', 'h', ?2, 'yes', ?3, 'proposed', 0)",
            rusqlite::params![id, level, p],
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
            .query_row("PRAGMA journal_mode", [], |r| r.get(0))
            .unwrap();
        assert_eq!(mode, "wal");
        sidecar
            .db
            .execute(
                "INSERT INTO runs (id, card_id, card_name, backend, questions_lock, started_ms)
                 VALUES ('r1', 'c', 'n', 'embedded', 'lock', 0)",
                [],
            )
            .unwrap();
        decision(&sidecar.db, "d1", "L0", Some(0.8)).unwrap();
        // Probabilities are there exactly when no rule decided.
        assert!(decision(&sidecar.db, "d2", "rule", Some(0.8)).is_err());
        assert!(decision(&sidecar.db, "d3", "L0", None).is_err());
        decision(&sidecar.db, "d4", "rule", None).unwrap();
        let e = sidecar
            .db
            .execute("UPDATE decisions SET answer = 'no' WHERE id = 'd1'", [])
            .unwrap_err()
            .to_string();
        assert!(e.contains("never updated"), "{e}");
        drop(sidecar);
        // Opening again migrates nothing and loses nothing.
        let again = Sidecar::open(&path).unwrap();
        let n: i64 = again
            .db
            .query_row("SELECT count(*) FROM decisions", [], |r| r.get(0))
            .unwrap();
        assert_eq!(n, 2);
        // A sidecar from a newer mesh is refused, not altered.
        again.db.pragma_update(None, "user_version", 99).unwrap();
        drop(again);
        let e = Sidecar::open(&path).err().unwrap().to_string();
        assert!(e.contains("schema version 99, newer"), "{e}");
    }
}
