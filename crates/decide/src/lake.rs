//! The lake: a DuckLake (a catalog plus Parquet data files) of append-only AVU events, one
//! snapshot per mirrored (run, path), never an empty one; current AVUs are derived from it.
//! The catalog is a DuckDB file beside the data, or, for decide run as more than one
//! instance, the PostgreSQL database every instance shares.

use std::collections::HashMap;
use std::fs::{File, TryLockError};
use std::path::{Path, PathBuf};
use std::time::Duration;

use duckdb::{Connection, params, params_from_iter};

/// The DuckLake extension, where bin/deps.sh put it when this binary was built.
const BUILT_WITH_EXTENSION: Option<&str> = option_env!("MESH_DUCKLAKE_EXTENSION");

/// The postgres_scanner extension (a catalog on PostgreSQL), likewise.
const BUILT_WITH_POSTGRES: Option<&str> = option_env!("MESH_POSTGRES_EXTENSION");

/// Where a lake is.
#[derive(Debug, Clone, PartialEq)]
pub enum LakeAt {
    /// `lake.ducklake` (the catalog) and `data/` in this directory; one process at a time.
    Local(PathBuf),
    /// The catalog in a PostgreSQL database, the Parquet files in `data` (a directory every
    /// instance reaches); any number of processes.
    Shared {
        database: String,
        data: PathBuf,
        /// The authority the database's TLS certificate is checked against (libpq's
        /// `sslmode=verify-full`); without it, libpq checks none.
        authority: Option<PathBuf>,
    },
}

impl LakeAt {
    /// The lake decide in `dir` uses: as its `config.json` says, else `dir/lake`.
    pub fn in_dir(dir: &Path) -> Result<LakeAt, crate::store::sidecar::SidecarError> {
        let shared = crate::store::sidecar::Shared::read(dir)?;
        Ok(match shared.database {
            Some(database) => LakeAt::Shared {
                database,
                data: shared
                    .lake_data
                    .unwrap_or_else(|| dir.join("lake").join("data")),
                authority: shared.database_ca,
            },
            None => LakeAt::Local(dir.join("lake")),
        })
    }

    /// How it is named in messages (no password).
    pub fn name(&self) -> String {
        match self {
            LakeAt::Local(dir) => dir.display().to_string(),
            LakeAt::Shared { database, data, .. } => format!(
                "{} (catalog), {} (data)",
                crate::store::sidecar::without_password(database),
                data.display()
            ),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum LakeError {
    #[error(
        "cannot load a DuckDB extension ({0}): set MESH_DUCKLAKE_EXTENSION (MESH_POSTGRES_EXTENSION) to a ducklake (postgres_scanner) .duckdb_extension for DuckDB 1.5.5 (bin/deps.sh fetches both)"
    )]
    Extension(String),
    #[error("lake {path}: {source}")]
    Io {
        path: String,
        source: std::io::Error,
    },
    #[error("lake {path}: {source}")]
    DuckDb { path: String, source: duckdb::Error },
    #[error("lake {path} is held by another process ({source}): try again when it is done")]
    Busy { path: String, source: duckdb::Error },
    #[error(
        "lake {path} is held by another process of decide (`mesh decide lake …`, or another decide on this directory): try again when it is done"
    )]
    Held { path: String },
}

/// Whether DuckDB refused to attach because another process holds the lake's file lock.
/// DuckDB tells this only in its message (the code is the generic one).
fn held_elsewhere(e: &duckdb::Error) -> bool {
    let m = e.to_string();
    m.contains("Could not set lock") || m.contains("Conflicting lock")
}

/// One AVU event: what was written where, by whom, from which run and link.
#[derive(Debug, Clone, PartialEq)]
pub struct Event {
    pub link_id: String,
    pub path: String,
    pub attribute: String,
    pub value: String,
    pub unit: String,
    /// `add` (decide only ever adds).
    pub op: String,
    pub actor: String,
    pub source: String,
    pub run_id: String,
    pub at_ms: i64,
}

/// What an append did: the snapshot it made, if anything was new, and for every link given
/// the snapshot that holds it (made now, or by an earlier append).
#[derive(Debug, Clone, PartialEq)]
pub struct Appended {
    pub made: Option<i64>,
    pub snapshots: HashMap<String, i64>,
}

/// An open lake.
pub struct Lake {
    db: Connection,
    /// Where it is, for messages.
    dir: String,
    /// A local lake's `lake.lock`, locked while it is open (released with it): every
    /// process of decide takes it before DuckDB's own lock, so that one can wait for
    /// another in the kernel instead of asking DuckDB again and again.
    _held: Option<File>,
}

/// The lock file of a local lake.
fn lock_file(dir: &Path) -> Result<File, LakeError> {
    let io = |source| LakeError::Io {
        path: dir.display().to_string(),
        source,
    };
    std::fs::create_dir_all(dir).map_err(io)?;
    File::options()
        .create(true)
        .truncate(false)
        .write(true)
        .open(dir.join("lake.lock"))
        .map_err(io)
}

impl Lake {
    /// Opens (creating) the lake in `dir`: `lake.ducklake` is the catalog, `data/` the
    /// Parquet files.
    pub fn open(dir: &Path) -> Result<Lake, LakeError> {
        Lake::open_at(&LakeAt::Local(dir.to_owned()))
    }

    /// Opens (creating) the lake at `at`, now or not at all: a local lake another process
    /// holds is [`LakeError::Held`].
    pub fn open_at(at: &LakeAt) -> Result<Lake, LakeError> {
        let held = match at {
            LakeAt::Local(dir) => {
                let file = lock_file(dir)?;
                match file.try_lock() {
                    Ok(()) => Some(file),
                    Err(TryLockError::WouldBlock) => {
                        return Err(LakeError::Held { path: at.name() });
                    }
                    Err(TryLockError::Error(source)) => {
                        return Err(LakeError::Io {
                            path: at.name(),
                            source,
                        });
                    }
                }
            }
            LakeAt::Shared { .. } => None,
        };
        Lake::attach(at, held)
    }

    /// Opens the lake at `at`, waiting at most `wait` for another process of decide that
    /// holds a local lake: in the kernel (`flock` on a thread of its own), not by asking
    /// again. A shared lake is not held by a process (instances take turns in PostgreSQL).
    pub fn open_waiting(at: &LakeAt, wait: Duration) -> Result<Lake, LakeError> {
        let LakeAt::Local(dir) = at else {
            return Lake::attach(at, None);
        };
        let file = lock_file(dir)?;
        // Free (the usual case): taken at once, no thread.
        match file.try_lock() {
            Ok(()) => return Lake::attach(at, Some(file)),
            Err(TryLockError::Error(source)) => {
                return Err(LakeError::Io {
                    path: at.name(),
                    source,
                });
            }
            Err(TryLockError::WouldBlock) => {}
        }
        let (locked, taken) = std::sync::mpsc::sync_channel(1);
        std::thread::spawn(move || {
            let outcome = file.lock().map(|()| file);
            // Nobody waits any more: the file (and a lock taken too late) goes with it.
            let _ = locked.send(outcome);
        });
        match taken.recv_timeout(wait) {
            Ok(Ok(file)) => Lake::attach(at, Some(file)),
            Ok(Err(source)) => Err(LakeError::Io {
                path: at.name(),
                source,
            }),
            Err(_) => Err(LakeError::Held { path: at.name() }),
        }
    }

    /// Attaches the catalog and its data, `held` the local lake's lock if it has one.
    fn attach(at: &LakeAt, held: Option<File>) -> Result<Lake, LakeError> {
        let name = at.name();
        let (catalog, data) = match at {
            LakeAt::Local(dir) => (
                dir.join("lake.ducklake").display().to_string(),
                dir.join("data"),
            ),
            LakeAt::Shared {
                database,
                data,
                authority,
            } => (
                format!("postgres:{}", libpq(database, authority.as_deref())),
                data.clone(),
            ),
        };
        std::fs::create_dir_all(&data).map_err(|source| LakeError::Io {
            path: data.display().to_string(),
            source,
        })?;
        let wrap = |source| LakeError::DuckDb {
            path: name.clone(),
            source,
        };
        let db = Connection::open_in_memory().map_err(wrap)?;
        load_extension(
            &db,
            "MESH_DUCKLAKE_EXTENSION",
            BUILT_WITH_EXTENSION,
            "ducklake",
        )?;
        if matches!(at, LakeAt::Shared { .. }) {
            load_extension(
                &db,
                "MESH_POSTGRES_EXTENSION",
                BUILT_WITH_POSTGRES,
                "postgres_scanner",
            )?;
        }
        let sql_str = |p: &str| p.replace('\'', "''");
        // Inlining would keep small inserts in the catalog; every event goes to Parquet.
        let attached = db.execute_batch(&format!(
            "ATTACH 'ducklake:{}' AS lake (DATA_PATH '{}/', DATA_INLINING_ROW_LIMIT 0);
             CREATE TABLE IF NOT EXISTS lake.avu_events (
                 link_id VARCHAR NOT NULL,
                 path VARCHAR NOT NULL,
                 attribute VARCHAR NOT NULL,
                 value VARCHAR NOT NULL,
                 unit VARCHAR NOT NULL,
                 op VARCHAR NOT NULL,
                 actor VARCHAR NOT NULL,
                 source VARCHAR NOT NULL,
                 run_id VARCHAR NOT NULL,
                 written_at TIMESTAMP NOT NULL
             );",
            sql_str(&catalog),
            sql_str(&data.display().to_string()),
        ));
        match attached {
            Err(source) if held_elsewhere(&source) => {
                return Err(LakeError::Busy { path: name, source });
            }
            Err(source) => {
                return Err(LakeError::DuckDb {
                    path: name,
                    source: scrubbed(source, at),
                });
            }
            Ok(()) => {}
        }
        Ok(Lake {
            db,
            dir: name,
            _held: held,
        })
    }

    fn wrap(&self, source: duckdb::Error) -> LakeError {
        LakeError::DuckDb {
            path: self.dir.clone(),
            source,
        }
    }

    /// Which of `link_ids` are in the lake already, with the snapshot that brought them.
    pub fn mirrored(&self, link_ids: &[String]) -> Result<HashMap<String, i64>, LakeError> {
        if link_ids.is_empty() {
            return Ok(HashMap::new());
        }
        let marks = vec!["?"; link_ids.len()].join(", ");
        let mut q = self
            .db
            .prepare(&format!(
                "SELECT link_id, snapshot_id FROM lake.avu_events WHERE link_id IN ({marks})"
            ))
            .map_err(|e| self.wrap(e))?;
        let rows = q
            .query_map(params_from_iter(link_ids), |r| Ok((r.get(0)?, r.get(1)?)))
            .map_err(|e| self.wrap(e))?;
        rows.collect::<Result<_, _>>().map_err(|e| self.wrap(e))
    }

    /// Appends the events whose link is not in the lake yet, all in one transaction: one
    /// snapshot, or none when nothing was new (never an empty one).
    pub fn append(&mut self, events: &[Event]) -> Result<Appended, LakeError> {
        let ids: Vec<String> = events.iter().map(|e| e.link_id.clone()).collect();
        let mut snapshots = self.mirrored(&ids)?;
        let new: Vec<&Event> = events
            .iter()
            .filter(|e| !snapshots.contains_key(&e.link_id))
            .collect();
        if new.is_empty() {
            return Ok(Appended {
                made: None,
                snapshots,
            });
        }
        let row = "(?, ?, ?, ?, ?, ?, ?, ?, ?, make_timestamp(?::BIGINT * 1000))";
        let sql = format!(
            "INSERT INTO lake.avu_events VALUES {}",
            vec![row; new.len()].join(", ")
        );
        let mut values: Vec<duckdb::types::Value> = Vec::with_capacity(new.len() * 10);
        for e in &new {
            for s in [
                &e.link_id,
                &e.path,
                &e.attribute,
                &e.value,
                &e.unit,
                &e.op,
                &e.actor,
                &e.source,
                &e.run_id,
            ] {
                values.push(duckdb::types::Value::Text(s.clone()));
            }
            values.push(duckdb::types::Value::BigInt(e.at_ms));
        }
        // One statement in one transaction: one snapshot, one Parquet file.
        let path = self.dir.clone();
        let wrap = |source| LakeError::DuckDb {
            path: path.clone(),
            source,
        };
        let tx = self.db.transaction().map_err(wrap)?;
        tx.execute(&sql, params_from_iter(values)).map_err(wrap)?;
        tx.commit().map_err(wrap)?;
        let snapshot: i64 = self
            .db
            .query_row("SELECT id FROM lake.current_snapshot()", [], |r| r.get(0))
            .map_err(|e| self.wrap(e))?;
        for e in new {
            snapshots.insert(e.link_id.clone(), snapshot);
        }
        Ok(Appended {
            made: Some(snapshot),
            snapshots,
        })
    }

    /// The AVUs on `path` now: every (attribute, value, unit) whose latest event is an add.
    pub fn current(&self, path: &str) -> Result<Vec<(String, String, String)>, LakeError> {
        let mut q = self
            .db
            .prepare(
                "SELECT attribute, value, unit FROM (
                     SELECT attribute, value, unit, op, row_number() OVER (
                         PARTITION BY attribute, value, unit
                         ORDER BY snapshot_id DESC, written_at DESC) AS latest
                     FROM lake.avu_events WHERE path = ?)
                 WHERE latest = 1 AND op = 'add' ORDER BY attribute, value, unit",
            )
            .map_err(|e| self.wrap(e))?;
        let rows = q
            .query_map(params![path], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
            .map_err(|e| self.wrap(e))?;
        rows.collect::<Result<_, _>>().map_err(|e| self.wrap(e))
    }

    /// Every event, oldest first, with its snapshot.
    pub fn events(&self) -> Result<Vec<(i64, Event)>, LakeError> {
        let mut q = self
            .db
            .prepare(
                "SELECT snapshot_id, link_id, path, attribute, value, unit, op, actor, source,
                        run_id, epoch_ms(written_at)
                 FROM lake.avu_events ORDER BY snapshot_id, link_id",
            )
            .map_err(|e| self.wrap(e))?;
        let rows = q
            .query_map([], |r| {
                Ok((
                    r.get(0)?,
                    Event {
                        link_id: r.get(1)?,
                        path: r.get(2)?,
                        attribute: r.get(3)?,
                        value: r.get(4)?,
                        unit: r.get(5)?,
                        op: r.get(6)?,
                        actor: r.get(7)?,
                        source: r.get(8)?,
                        run_id: r.get(9)?,
                        at_ms: r.get(10)?,
                    },
                ))
            })
            .map_err(|e| self.wrap(e))?;
        rows.collect::<Result<_, _>>().map_err(|e| self.wrap(e))
    }

    /// The snapshots that inserted events, oldest first.
    pub fn insert_snapshots(&self) -> Result<Vec<i64>, LakeError> {
        let mut q = self
            .db
            .prepare(
                "SELECT snapshot_id FROM ducklake_snapshots('lake')
                 WHERE map_contains(changes, 'tables_inserted_into') ORDER BY snapshot_id",
            )
            .map_err(|e| self.wrap(e))?;
        let rows = q.query_map([], |r| r.get(0)).map_err(|e| self.wrap(e))?;
        rows.collect::<Result<_, _>>().map_err(|e| self.wrap(e))
    }
}

/// A PostgreSQL URL as libpq's keywords, which DuckDB's postgres extension takes (a URL's
/// percent-encoded parts decoded; every host with its port; TLS as the URL says, checked
/// against `authority` when one is given); anything else is passed as it is.
fn libpq(database: &str, authority: Option<&Path>) -> String {
    let Ok(config) = database.parse::<postgres::Config>() else {
        return database.to_owned();
    };
    let quote = |v: &str| format!("'{}'", v.replace('\\', "\\\\").replace('\'', "\\'"));
    let mut parts = Vec::new();
    // libpq takes several hosts as one comma-separated list, and their ports likewise.
    let hosts: Vec<String> = config
        .get_hosts()
        .iter()
        .map(|h| match h {
            postgres::config::Host::Tcp(h) => h.clone(),
            #[cfg(unix)]
            postgres::config::Host::Unix(p) => p.display().to_string(),
        })
        .collect();
    if !hosts.is_empty() {
        parts.push(format!("host={}", quote(&hosts.join(","))));
    }
    let ports: Vec<String> = config.get_ports().iter().map(u16::to_string).collect();
    if !ports.is_empty() {
        parts.push(format!("port={}", quote(&ports.join(","))));
    }
    let mode = match config.get_ssl_mode() {
        postgres::config::SslMode::Disable => "disable",
        postgres::config::SslMode::Require => "require",
        _ => "prefer",
    };
    match authority {
        Some(ca) if mode != "disable" => {
            parts.push("sslmode=verify-full".into());
            parts.push(format!("sslrootcert={}", quote(&ca.display().to_string())));
        }
        _ => parts.push(format!("sslmode={mode}")),
    }
    if let Some(user) = config.get_user() {
        parts.push(format!("user={}", quote(user)));
    }
    if let Some(password) = config.get_password() {
        parts.push(format!(
            "password={}",
            quote(&String::from_utf8_lossy(password))
        ));
    }
    if let Some(db) = config.get_dbname() {
        parts.push(format!("dbname={}", quote(db)));
    }
    parts.join(" ")
}

/// DuckDB's error with the database password cut out, should it be repeated there.
fn scrubbed(e: duckdb::Error, at: &LakeAt) -> duckdb::Error {
    let LakeAt::Shared { database, .. } = at else {
        return e;
    };
    let Some(password) = database
        .parse::<postgres::Config>()
        .ok()
        .and_then(|c| {
            c.get_password()
                .map(|p| String::from_utf8_lossy(p).into_owned())
        })
        .filter(|p| !p.is_empty())
    else {
        return e;
    };
    let text = e.to_string();
    if text.contains(&password) {
        duckdb::Error::InvalidParameterName(text.replace(&password, "…"))
    } else {
        e
    }
}

/// LOAD an extension: the file named at run time (`var`), else the one the build found.
/// Nothing is ever downloaded: DuckDB's own INSTALL and autoloading would fetch native code
/// at run time.
fn load_extension(
    db: &Connection,
    var: &str,
    built_with: Option<&str>,
    what: &str,
) -> Result<(), LakeError> {
    db.execute_batch(
        "SET autoinstall_known_extensions = false; SET autoload_known_extensions = false;",
    )
    .map_err(|e| LakeError::Extension(format!("cannot turn DuckDB's downloads off: {e}")))?;
    let runtime = std::env::var(var).ok();
    let mut tried = Vec::new();
    for file in runtime.iter().map(String::as_str).chain(built_with) {
        if !Path::new(file).exists() {
            tried.push(format!("{file}: no such file"));
            continue;
        }
        match db.execute_batch(&format!("LOAD '{}'", file.replace('\'', "''"))) {
            Ok(()) => return Ok(()),
            Err(e) => tried.push(format!("{file}: {e}")),
        }
    }
    if tried.is_empty() {
        tried.push("no extension file was named at build or run time".into());
    }
    Err(LakeError::Extension(format!(
        "{what}: {}",
        tried.join("; ")
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(link: &str, path: &str, attribute: &str) -> Event {
        Event {
            link_id: link.into(),
            path: path.into(),
            attribute: attribute.into(),
            value: "v".into(),
            unit: "PATO:1".into(),
            op: "add".into(),
            actor: "ann@PEOPLE".into(),
            source: "decide".into(),
            run_id: "r1".into(),
            at_ms: 1_764_460_000_000,
        }
    }

    fn parquet_files(dir: &Path) -> usize {
        fn walk(d: &Path, n: &mut usize) {
            for e in std::fs::read_dir(d).unwrap().flatten() {
                let p = e.path();
                if p.is_dir() {
                    walk(&p, n)
                } else if p.extension().is_some_and(|x| x == "parquet") {
                    *n += 1
                }
            }
        }
        let mut n = 0;
        walk(dir, &mut n);
        n
    }

    #[test]
    fn one_snapshot_per_append_never_empty_never_twice() {
        let dir = tempfile::tempdir().unwrap();
        let mut lake = Lake::open(dir.path()).unwrap();
        let both = [event("l1", "/p", "a"), event("l2", "/p", "b")];
        let first = lake.append(&both).unwrap().made.expect("a snapshot");
        assert_eq!(lake.insert_snapshots().unwrap(), vec![first]);
        assert_eq!(parquet_files(&dir.path().join("data")), 1);
        // The same links again: nothing new, no snapshot.
        let again = lake.append(&both).unwrap();
        assert_eq!(again.made, None);
        assert_eq!(
            again.snapshots,
            HashMap::from([("l1".to_owned(), first), ("l2".to_owned(), first)])
        );
        assert_eq!(lake.append(&[]).unwrap().made, None);
        let second = lake
            .append(&[event("l2", "/p", "b"), event("l3", "/q", "c")])
            .unwrap();
        assert_eq!(
            second.snapshots,
            HashMap::from([
                ("l2".to_owned(), first),
                ("l3".to_owned(), second.made.unwrap())
            ])
        );
        let second = second.made.unwrap();
        assert!(second > first);
        assert_eq!(lake.insert_snapshots().unwrap(), vec![first, second]);
        let events = lake.events().unwrap();
        assert_eq!(events.len(), 3);
        assert_eq!(events[0], (first, both[0].clone()));
        assert_eq!(
            lake.current("/p").unwrap(),
            vec![
                ("a".into(), "v".into(), "PATO:1".into()),
                ("b".into(), "v".into(), "PATO:1".into())
            ]
        );
        drop(lake);
        // Reopened: everything is still there.
        let lake = Lake::open(dir.path()).unwrap();
        assert_eq!(lake.events().unwrap().len(), 3);
        assert_eq!(
            lake.mirrored(&["l3".into(), "l9".into()]).unwrap(),
            HashMap::from([("l3".to_owned(), second)])
        );
    }

    /// With MESH_TEST_HOLD_LAKE set: opens the lake there, says so, and holds it until its
    /// stdin closes (the other process of the two tests below).
    #[test]
    #[ignore = "run by the tests below as the process that holds a lake"]
    fn hold_the_lake() {
        let Some(dir) = std::env::var_os("MESH_TEST_HOLD_LAKE") else {
            return;
        };
        let at = LakeAt::Local(PathBuf::from(dir));
        // As decide holds it, or (`raw`) as a DuckDB process that knows nothing of
        // `lake.lock` would.
        let _lake = if std::env::var_os("MESH_TEST_HOLD_RAW").is_some() {
            Lake::attach(&at, None).unwrap()
        } else {
            Lake::open_at(&at).unwrap()
        };
        println!("held");
        let _ = std::io::Read::read_to_end(&mut std::io::stdin(), &mut Vec::new());
    }

    /// Another process holding the lake at `at` (as decide, or `raw`) until its stdin closes.
    struct Holder {
        child: std::process::Child,
        lines: std::io::Lines<std::io::BufReader<std::process::ChildStdout>>,
    }

    impl Holder {
        fn start(at: &Path, raw: bool) -> Holder {
            use std::io::BufRead;
            use std::process::{Command, Stdio};
            // Locks are per process: the holder is this test binary again.
            let mut command = Command::new(std::env::current_exe().unwrap());
            command
                .args([
                    "--exact",
                    "lake::tests::hold_the_lake",
                    "--ignored",
                    "--nocapture",
                ])
                .env("MESH_TEST_HOLD_LAKE", at)
                .stdin(Stdio::piped())
                .stdout(Stdio::piped());
            if raw {
                command.env("MESH_TEST_HOLD_RAW", "1");
            }
            let mut child = command.spawn().unwrap();
            let mut lines = std::io::BufReader::new(child.stdout.take().unwrap()).lines();
            assert!(lines.by_ref().map_while(Result::ok).any(|l| l == "held"));
            Holder { child, lines }
        }

        fn let_go(mut self) {
            drop(self.child.stdin.take());
            self.lines.by_ref().for_each(drop);
            self.child.wait().unwrap();
        }
    }

    #[test]
    fn a_lake_held_by_another_process_of_decide_is_held_and_waited_for() {
        let dir = tempfile::tempdir().unwrap();
        let at = dir.path().join("lake");
        let holder = Holder::start(&at, false);
        let held = Lake::open(&at);
        assert!(
            matches!(held, Err(LakeError::Held { .. })),
            "{:?}",
            held.as_ref().err()
        );
        // A wait that runs out says so, and takes nothing.
        let late = Lake::open_waiting(&LakeAt::Local(at.clone()), Duration::from_millis(200));
        assert!(
            matches!(late, Err(LakeError::Held { .. })),
            "{:?}",
            late.as_ref().err()
        );
        // A waiting open goes on as soon as the other lets go.
        let waiting = {
            let at = LakeAt::Local(at.clone());
            std::thread::spawn(move || Lake::open_waiting(&at, Duration::from_secs(60)))
        };
        std::thread::sleep(Duration::from_millis(100));
        assert!(!waiting.is_finished(), "it waits while the other holds it");
        holder.let_go();
        let lake = waiting.join().unwrap().expect("opened once let go");
        drop(lake);
        // The run-out wait's thread takes the lock late and lets it go with nobody to hand it
        // to (when, is the scheduler's): the lake opens once it has.
        Lake::open_waiting(&LakeAt::Local(at.clone()), Duration::from_secs(60)).unwrap();
    }

    #[test]
    fn a_lake_held_by_a_process_that_is_not_decide_is_busy() {
        let dir = tempfile::tempdir().unwrap();
        let at = dir.path().join("lake");
        let holder = Holder::start(&at, true);
        let busy = Lake::open(&at);
        holder.let_go();
        assert!(
            matches!(busy, Err(LakeError::Busy { .. })),
            "{:?}",
            busy.as_ref().err()
        );
        Lake::open(&at).unwrap();
    }
}
