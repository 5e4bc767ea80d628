//! decide as more than one instance: two instances on two servers of a cluster sharing one
//! real PostgreSQL (sidecar, sealing key, the lake's catalog) and one lake data directory.
//! A run annotated by one is explained and applied by the other, questions asked by one are
//! answered through either, an instance (a `mesh-decide run` process) killed with SIGKILL in
//! the middle of an apply loses nothing and writes nothing twice, and the lake holds each event once — also when two instances mirror
//! the same links at the same moment.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{Value, json};

use mesh_core::client::Client;
use mesh_core::subjects::{FullName, ToolResult};
use mesh_decide::lake::{Lake, LakeAt};
use mesh_decide::store::sidecar::Sidecar;

use crate::bus::{self, ClusterBus, GENEROUS, Running};
use crate::pg::Postgres;

const CARD: &str = include_str!("../cards/example.md");

async fn call(client: &Client, tool: &str, args: &Value) -> ToolResult {
    client
        .call(&FullName::parse(tool).unwrap(), args, GENEROUS)
        .await
        .unwrap()
}

/// Everything two instances share, and the cluster they serve on.
struct Shared {
    bus: ClusterBus,
    pg: Postgres,
    dirs: tempfile::TempDir,
    _catalog: Running,
    _avu: Running,
}

impl Shared {
    async fn start() -> Shared {
        let pg = Postgres::start().await;
        let modules = [
            bus::module("catalog"),
            bus::module("avu"),
            bus::acting_for_people("decide", &["avu"]),
        ];
        let bus = ClusterBus::accounts_with(3, &modules, &[("ann", &["mesh.>"])]).await;
        let catalog = bus.serve_catalog_on(0).await;
        let dirs = tempfile::tempdir().unwrap();
        let avu_dir = dirs.path().join("avu");
        std::fs::create_dir_all(&avu_dir).unwrap();
        crate::avu::import_fixtures(&avu_dir.join("ontology.sqlite"));
        let config = mesh_avu::Config::in_dir(&avu_dir, &avu_dir.join("ontology.sqlite")).unwrap();
        let avu = bus.serve_on(2, mesh_avu::module(config).unwrap()).await;
        Shared {
            bus,
            pg,
            dirs,
            _catalog: catalog,
            _avu: avu,
        }
    }

    fn lake_data(&self) -> PathBuf {
        self.dirs.path().join("shared-lake-data")
    }

    fn lake_at(&self) -> LakeAt {
        LakeAt::Shared {
            database: self.pg.url.clone(),
            data: self.lake_data(),
            authority: None,
        }
    }

    /// An instance of decide with its own directory (its own ontology index) and the shared
    /// database and lake data, connected to server `server`.
    async fn decide(&self, name: &str, server: usize) -> Running {
        let dir = self.decide_dir(name);
        let client = self.bus.client_on(server, "decide").await;
        let config = mesh_decide::tools::Config::in_dir(&dir).with_bus(client);
        let module = tokio::task::spawn_blocking(move || mesh_decide::tools::module(config))
            .await
            .unwrap()
            .unwrap();
        self.bus.serve_on(server, module).await
    }

    /// An instance's directory, made the first time: its own ontology index, and a
    /// config.json naming the shared database and lake data.
    fn decide_dir(&self, name: &str) -> PathBuf {
        let dir = self.dirs.path().join(name);
        if !dir.exists() {
            std::fs::create_dir_all(&dir).unwrap();
            crate::avu::import_fixtures(&dir.join("ontology.sqlite"));
            std::fs::write(
                dir.join("config.json"),
                json!({"database": self.pg.url, "lake_data": self.lake_data()}).to_string(),
            )
            .unwrap();
        }
        dir
    }

    /// An instance as a process of its own (`mesh-decide run`), on server `server`, once it
    /// answers (the only instance running).
    async fn decide_process(
        &self,
        name: &str,
        server: usize,
        ann: &Client,
    ) -> tokio::process::Child {
        let dir = self.decide_dir(name);
        let binary = std::path::Path::new(env!("CARGO_BIN_EXE_mesh")).with_file_name("mesh-decide");
        let child = tokio::process::Command::new(binary)
            .args(["run", "--server", &self.bus.url(server)])
            .args(["--layout", "accounts", "--dir", dir.to_str().unwrap()])
            .envs(self.bus.login_env("decide"))
            .env("HOME", &dir)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        let started = std::time::Instant::now();
        loop {
            let r = ann
                .call(
                    &FullName::parse("decide_health").unwrap(),
                    &json!({}),
                    GENEROUS,
                )
                .await;
            if r.is_ok_and(|r| !r.is_error) {
                return child;
            }
            assert!(
                started.elapsed() < GENEROUS,
                "mesh-decide run never answered"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

fn questioned(r: &ToolResult) -> (String, Vec<String>) {
    assert!(r.needs_input(), "{}", r.text_content());
    let requests = r.input_requests.as_ref().unwrap();
    assert_eq!(requests.len(), 1, "one question per round trip");
    let (key, request) = requests.iter().next().unwrap();
    let options = request["params"]["requestedSchema"]["properties"]["candidate"]["oneOf"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o["const"].as_str().unwrap().to_owned())
        .collect();
    (key.clone(), options)
}

fn answered(args: &Value, r: &ToolResult, key: &str, candidate: &str) -> Value {
    let mut a = args.clone();
    a["requestState"] = json!(r.request_state.clone().unwrap());
    a["inputResponses"] = json!({key: {"action": "accept", "content": {"candidate": candidate}}});
    a
}

/// Answers every question of an apply with the best candidate but the last: the call that
/// would answer it (and write) is returned, not made.
async fn all_but_the_last(ann: &Client, args: &Value) -> Value {
    let mut r = call(ann, "decide_apply", args).await;
    for _ in 0..100 {
        let (key, options) = questioned(&r);
        let next = answered(args, &r, &key, &options[0]);
        let message = r.input_requests.as_ref().unwrap()[&key]["params"]["message"]
            .as_str()
            .unwrap()
            .to_owned();
        if message.contains("(1 open group left") {
            return next;
        }
        r = call(ann, "decide_apply", &next).await;
    }
    panic!("no end to the questions");
}

/// The AVUs on `path`, each with how many times avu holds it.
async fn avus_on(ann: &Client, path: &str) -> BTreeMap<(String, String), usize> {
    let r = call(ann, "avu_list", &json!({"path": path})).await;
    let mut counted = BTreeMap::new();
    for a in r.structured_content.unwrap()["avus"].as_array().unwrap() {
        let key = (
            a["attribute"].as_str().unwrap().to_owned(),
            a["value"].as_str().unwrap().to_owned(),
        );
        *counted.entry(key).or_insert(0) += 1;
    }
    counted
}

/// Every event in the shared lake, counted by link id.
fn lake_events(at: &LakeAt) -> HashMap<String, usize> {
    let lake = Lake::open_at(at).unwrap();
    let mut counted = HashMap::new();
    for (_, e) in lake.events().unwrap() {
        *counted.entry(e.link_id).or_insert(0) += 1;
    }
    counted
}

/// The links of `run` in the shared sidecar: (id, status, snapshot).
/// (Read on a thread of its own: the PostgreSQL client blocks on a runtime of its own.)
fn links(url: &str, run: &str) -> Vec<(String, String, Option<i64>)> {
    std::thread::scope(|scope| {
        scope
            .spawn(|| {
                let sidecar = Sidecar::connect(url).unwrap();
                sidecar
                    .db
                    .query_map(
                        "SELECT id, status, snapshot_id FROM avu_links
                         WHERE run_id = ?1 AND path IS NOT NULL",
                        mesh_decide::params![run],
                        |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
                    )
                    .unwrap()
            })
            .join()
            .unwrap()
    })
}

#[tokio::test]
async fn two_decide_instances_share_runs_questions_and_one_lake() {
    let s = Shared::start().await;
    let ann = s.bus.client_on(1, "ann").await;
    let path = "/mesh/home/ann/traps.csv";

    // Annotated by one instance, which then goes away...
    let one = s.decide("one", 0).await;
    let r = call(&ann, "decide_annotate", &json!({"card_text": CARD})).await;
    assert!(!r.is_error, "{}", r.text_content());
    let annotated = r.structured_content.unwrap();
    let run_id = annotated["run_id"].as_str().unwrap().to_owned();
    let groups = annotated["groups"].as_array().unwrap().len();
    assert!(groups > 1, "{annotated}");
    one.stop().await;

    // ...explained by the other, which knows the run as the first left it.
    let two = s.decide("two", 1).await;
    let r = call(&ann, "decide_explain", &json!({"run_id": run_id})).await;
    assert!(!r.is_error, "{}", r.text_content());
    let explained = r.structured_content.unwrap();
    assert_eq!(explained["groups"].as_array().unwrap().len(), groups);
    assert!(!explained["decisions"].as_array().unwrap().is_empty());

    // Applied with questions answered through both instances (the first back again on
    // another server): a question sealed by either is taken by either, once.
    let one = s.decide("one", 2).await;
    let args = json!({"run_id": run_id, "path": path, "accept": "proposed", "dry_run": false});
    let mut r = call(&ann, "decide_apply", &args).await;
    let mut asked = 0;
    let mut replay = None;
    loop {
        let (key, options) = questioned(&r);
        let next = answered(&args, &r, &key, &options[0]);
        asked += 1;
        assert!(asked < 100, "no end to the questions");
        let after = call(&ann, "decide_apply", &next).await;
        if !after.needs_input() {
            assert!(!after.is_error, "{}", after.text_content());
            break;
        }
        replay.get_or_insert_with(|| next.clone());
        r = after;
    }
    // An answer already taken is refused by either instance.
    let replayed = replay.expect("more than one question was asked");
    let again = call(&ann, "decide_apply", &replayed).await;
    assert!(again.is_error, "{}", again.text_content());
    assert!(
        again.text_content().contains("used"),
        "{}",
        again.text_content()
    );
    let written_once = avus_on(&ann, path).await;
    assert!(!written_once.is_empty(), "the apply wrote");
    assert!(written_once.values().all(|n| *n == 1), "{written_once:?}");
    let events = lake_events(&s.lake_at());
    assert!(events.values().all(|n| *n == 1), "{events:?}");

    // Another round on the same path: annotate again (through either), then an apply whose
    // writing call reaches an instance killed while it works.
    let r = call(&ann, "decide_annotate", &json!({"card_text": CARD})).await;
    let run2 = r.structured_content.unwrap()["run_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let path2 = "/mesh/home/ann/traps2.csv";
    let args2 = json!({"run_id": run2, "path": path2, "accept": "proposed", "dry_run": false});
    let last = all_but_the_last(&ann, &args2).await;
    // A process of its own alone takes the last answer...
    one.stop().await;
    two.stop().await;
    let mut process = s.decide_process("process", 1, &ann).await;
    let ann2 = ann.clone();
    let pending = tokio::spawn(async move {
        ann2.call(
            &FullName::parse("decide_apply").unwrap(),
            &last,
            Duration::from_secs(5),
        )
        .await
    });
    // ...and is killed (SIGKILL) as soon as its first write reaches avu (or at once, if it
    // is done).
    let started = std::time::Instant::now();
    while avus_on(&ann, path2).await.is_empty() && started.elapsed() < GENEROUS {
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    process.start_kill().unwrap();
    process.wait().await.unwrap();
    let _ = pending.await;
    // A new instance finishes what was left: the apply again (idempotent), and every link
    // written and mirrored once.
    let three = s.decide("three", 0).await;
    let r = call(&ann, "decide_apply", &args2).await;
    assert!(!r.is_error, "{}", r.text_content());
    let again = call(&ann, "decide_apply", &args2).await;
    assert!(!again.is_error, "{}", again.text_content());
    let on_path2 = avus_on(&ann, path2).await;
    assert!(!on_path2.is_empty());
    assert!(on_path2.values().all(|n| *n == 1), "{on_path2:?}");
    let links2 = links(&s.pg.url, &run2);
    assert!(!links2.is_empty());
    assert!(
        links2
            .iter()
            .all(|(_, status, snapshot)| status == "written" && snapshot.is_some()),
        "{links2:?}"
    );
    let events = lake_events(&s.lake_at());
    assert!(events.values().all(|n| *n == 1), "{events:?}");
    for (id, _, _) in links2.iter().chain(&links(&s.pg.url, &run_id)) {
        assert_eq!(events.get(id), Some(&1), "link {id} in the lake once");
    }
    three.stop().await;
}

/// Two instances mirroring the same written links at the same moment (a recovery after a
/// failed mirror, run by both): each event reaches the lake once.
#[tokio::test]
async fn two_instances_mirroring_at_once_write_each_event_once() {
    let s = Shared::start().await;
    let ann = s.bus.client_on(1, "ann").await;
    let one = s.decide("one", 0).await;
    // The lake is made, then its data directory becomes a file: applies write to avu, but
    // their mirror fails.
    drop(Lake::open_at(&s.lake_at()).unwrap());
    let away = s.dirs.path().join("lake-data-away");
    std::fs::rename(s.lake_data(), &away).unwrap();
    std::fs::write(s.lake_data(), b"not a directory").unwrap();
    let mut runs = Vec::new();
    for i in 0..3 {
        let r = call(&ann, "decide_annotate", &json!({"card_text": CARD})).await;
        let run = r.structured_content.unwrap()["run_id"]
            .as_str()
            .unwrap()
            .to_owned();
        let args = json!({"run_id": run, "path": format!("/mesh/home/ann/t{i}.csv"),
                          "accept": "proposed", "dry_run": false});
        let last = all_but_the_last(&ann, &args).await;
        let r = call(&ann, "decide_apply", &last).await;
        assert!(r.text_content().contains("mirror"), "{}", r.text_content());
        runs.push(run);
    }
    one.stop().await;
    let failed: usize = runs.iter().map(|r| links(&s.pg.url, r).len()).sum();
    assert!(failed > 0);
    std::fs::remove_file(s.lake_data()).unwrap();
    std::fs::rename(&away, s.lake_data()).unwrap();

    // Two recoveries, each on its own connection to the shared sidecar, started together.
    let barrier = std::sync::Arc::new(std::sync::Barrier::new(2));
    let recover = |barrier: std::sync::Arc<std::sync::Barrier>, url: String, at: LakeAt| {
        std::thread::spawn(move || {
            let sidecar = std::sync::Mutex::new(Sidecar::connect(&url).unwrap());
            barrier.wait();
            mesh_decide::apply::mirror_pending(&sidecar, &at).expect("mirrored")
        })
    };
    let a = recover(barrier.clone(), s.pg.url.clone(), s.lake_at());
    let b = recover(barrier, s.pg.url.clone(), s.lake_at());
    let (a, b) = (a.join().unwrap(), b.join().unwrap());
    for m in a.iter().chain(&b) {
        assert!(m.error.is_none(), "{m:?}");
    }
    let events = lake_events(&s.lake_at());
    assert_eq!(events.len(), failed, "every written link in the lake");
    assert!(events.values().all(|n| *n == 1), "{events:?}");
    for run in &runs {
        for (id, status, snapshot) in links(&s.pg.url, run) {
            assert_eq!(status, "written", "{id}");
            assert!(snapshot.is_some(), "{id}");
        }
    }
}

/// What a hostile person can put in a card reaches the shared database as values only: a
/// column named like SQL, like a parameter mark or like a JSON path is stored and explained
/// by the other instance as it was given; a NUL byte, which PostgreSQL's text refuses, is
/// refused before anything is stored.
#[tokio::test]
async fn a_hostile_card_is_data_on_the_shared_sidecar() {
    let s = Shared::start().await;
    let ann = s.bus.client_on(1, "ann").await;
    let one = s.decide("one", 0).await;
    let names = [
        "x'); DROP TABLE runs; --",
        "?2",
        "$1",
        "a.b",
        "$.column",
        "\\\"q\\\"",
        "ünïcödé",
    ];
    let mut card = String::from(
        "# Dataset: X1 / hostile\nProduct: p\nSource: s\nSites: HARV\nRows: 3\nA table.\n",
    );
    for n in names {
        card.push_str(&format!(
            "- {n} | Body mass of the animal | float | gram | 1 to 2\n"
        ));
    }
    let r = call(&ann, "decide_annotate", &json!({"card_text": card})).await;
    assert!(!r.is_error, "{}", r.text_content());
    let run_id = r.structured_content.unwrap()["run_id"]
        .as_str()
        .unwrap()
        .to_owned();
    one.stop().await;
    let two = s.decide("two", 1).await;
    for n in names {
        let r = call(
            &ann,
            "decide_explain",
            &json!({"run_id": run_id, "column": n}),
        )
        .await;
        assert!(!r.is_error, "{n}: {}", r.text_content());
        let v = r.structured_content.unwrap();
        let groups = v["groups"].as_array().unwrap();
        assert!(!groups.is_empty(), "{n}: {v}");
        assert!(groups.iter().all(|g| g["column"] == json!(n)), "{n}: {v}");
    }
    // Every run is still there: nothing the card said ran as SQL.
    let r = call(&ann, "decide_health", &json!({})).await;
    assert_eq!(r.structured_content.unwrap()["sidecar"]["runs"], json!(1));

    let with_nul = card.replace("Rows: 3", "Rows: 3\u{0}");
    let r = call(&ann, "decide_annotate", &json!({"card_text": with_nul})).await;
    assert!(r.is_error);
    assert!(
        r.text_content().contains("NUL byte"),
        "{}",
        r.text_content()
    );
    let r = call(&ann, "decide_health", &json!({})).await;
    assert_eq!(
        r.structured_content.unwrap()["sidecar"]["runs"],
        json!(1),
        "nothing stored"
    );
    two.stop().await;
}

/// The database restarted under a running instance: while it is down a call says so, as a
/// tool error naming the database, and nothing hangs; once it is back, the first call is
/// answered (a read, and a write: the connection is made again, not reported as lost).
#[tokio::test]
async fn an_instance_outlives_a_restart_of_its_database() {
    let mut s = Shared::start().await;
    let ann = s.bus.client_on(1, "ann").await;
    let one = s.decide("one", 0).await;
    let r = call(&ann, "decide_annotate", &json!({"card_text": CARD})).await;
    let run_id = r.structured_content.unwrap()["run_id"]
        .as_str()
        .unwrap()
        .to_owned();
    s.pg.kill();
    let down = call(&ann, "decide_explain", &json!({"run_id": run_id})).await;
    assert!(down.is_error, "{}", down.text_content());
    assert!(
        down.text_content().contains("database"),
        "{}",
        down.text_content()
    );
    s.pg.start_again().await;
    let read = call(&ann, "decide_explain", &json!({"run_id": run_id})).await;
    assert!(
        !read.is_error,
        "the first read after: {}",
        read.text_content()
    );
    // Restarted between two calls, unnoticed: the next read finds its connection gone and
    // asks again on a new one; so does the next write's BEGIN.
    s.pg.kill();
    s.pg.start_again().await;
    let read = call(&ann, "decide_explain", &json!({"run_id": run_id})).await;
    assert!(
        !read.is_error,
        "a read after an unnoticed restart: {}",
        read.text_content()
    );
    s.pg.kill();
    s.pg.start_again().await;
    let written = call(&ann, "decide_annotate", &json!({"card_text": CARD})).await;
    assert!(
        !written.is_error,
        "a write after an unnoticed restart: {}",
        written.text_content()
    );
    one.stop().await;
}

/// A sidecar an older mesh made (schema version 1, before a group kept how likely its best
/// candidate is right) is brought up to this version on the first connect, once, and keeps
/// what it held; one from a newer mesh is refused untouched.
#[tokio::test]
async fn an_older_postgresql_sidecar_is_brought_up_to_date_and_a_newer_one_refused() {
    let pg = Postgres::start().await;
    let url = pg.url.clone();
    tokio::task::spawn_blocking(move || {
        let made = Sidecar::connect(&url).unwrap();
        made.db
            .execute_batch(
                "INSERT INTO runs (id, card_id, card_name, backend, questions_lock, started_ms)
                   VALUES ('r1', 'c1', 'old card', 'embedded', 'lock', 1);
                 ALTER TABLE candidate_groups DROP COLUMN best_p;
                 ALTER TABLE candidate_groups DROP COLUMN best_calibration;
                 UPDATE sidecar_version SET version = 1;",
            )
            .unwrap();
        drop(made);
        let again = Sidecar::connect(&url).unwrap();
        assert_eq!(again.version().unwrap(), 2);
        let kept: String = again
            .db
            .query_row(
                "SELECT card_name FROM runs WHERE id = 'r1'",
                mesh_decide::params![],
                |r| r.get(0),
            )
            .unwrap();
        assert_eq!(kept, "old card");
        // The new columns are there to write.
        again
            .db
            .execute_batch(
                "INSERT INTO candidate_groups (id, run_id, scope, subject, ontology, outcome,
                   updated_ms, best_p, best_calibration)
                 VALUES ('g1', 'r1', 'column', '{}', 'pato', 'abstain', 1, 0.5, 'none')",
            )
            .unwrap();
        again
            .db
            .execute_batch("UPDATE sidecar_version SET version = 99")
            .unwrap();
        drop(again);
        let e = Sidecar::connect(&url)
            .err()
            .expect("a newer sidecar is refused");
        assert!(e.to_string().contains("schema version 99, newer"), "{e}");
    })
    .await
    .unwrap();
}

/// Run `r1` with one link, `l1`, written to avu and not yet mirrored.
fn one_written_link(sidecar: &Sidecar) {
    sidecar
        .db
        .execute_batch(mesh_decide::store::links::ONE_WRITTEN_LINK)
        .unwrap();
}

/// A lake whose catalog is on `url` and whose data is in `data`.
fn shared_lake(url: &str, data: &Path) -> LakeAt {
    LakeAt::Shared {
        database: url.to_owned(),
        data: data.to_owned(),
        authority: None,
    }
}

/// While another instance mirrors (holds the lake's lock), a mirror waits for it inside
/// PostgreSQL — a session of its own blocked on the lock, seen by the server as waiting on a
/// lock, not a loop that asks again — and holds up no call on the sidecar meanwhile; it goes
/// on as soon as the other lets go.
#[tokio::test]
async fn a_mirror_waits_for_another_in_the_database_and_holds_up_nothing() {
    let pg = Postgres::start().await;
    let url = pg.url.clone();
    let data = tempfile::tempdir().unwrap();
    let lake_at = shared_lake(&url, data.path());
    tokio::task::spawn_blocking(move || {
        let other = Sidecar::connect(&url).unwrap();
        other
            .db
            .execute(
                "SELECT pg_advisory_lock(?1)",
                mesh_decide::params![mesh_decide::store::mirror_lock::MIRROR_LOCK],
            )
            .unwrap();
        let sidecar = std::sync::Mutex::new(Sidecar::connect(&url).unwrap());
        // One written link waits to be mirrored (with nothing pending, a mirror takes no lock).
        one_written_link(&sidecar.lock().unwrap());
        let (done_tx, done_rx) = std::sync::mpsc::channel();
        std::thread::scope(|s| {
            s.spawn(|| {
                let mirrored =
                    mesh_decide::apply::mirror_pending(&sidecar, &lake_at).expect("mirrored");
                let done: Vec<(usize, Option<i64>, Option<String>)> = mirrored
                    .into_iter()
                    .map(|m| (m.links, m.snapshot, m.error))
                    .collect();
                done_tx.send(done).unwrap();
            });
            // The server sees the mirror's session waiting on an advisory lock.
            let waiting = || -> i64 {
                other
                    .db
                    .query_row(
                        "SELECT count(*) FROM pg_stat_activity
                         WHERE wait_event_type = 'Lock' AND wait_event = 'advisory'
                           AND query LIKE '%pg_advisory_lock%' AND pid <> pg_backend_pid()",
                        mesh_decide::params![],
                        |r| r.get(0),
                    )
                    .unwrap()
            };
            let until = std::time::Instant::now() + Duration::from_secs(20);
            while waiting() == 0 {
                assert!(
                    std::time::Instant::now() < until,
                    "no session waits on the lock"
                );
                std::thread::sleep(Duration::from_millis(20));
            }
            assert!(done_rx.try_recv().is_err(), "the mirror went on while held");
            // Meanwhile the sidecar is free for every other call of this process.
            let runs: i64 = sidecar
                .try_lock()
                .expect("the sidecar is not held while the mirror waits")
                .db
                .query_row("SELECT count(*) FROM runs", mesh_decide::params![], |r| {
                    r.get(0)
                })
                .unwrap();
            assert_eq!(runs, 1);
            other
                .db
                .execute(
                    "SELECT pg_advisory_unlock(?1)",
                    mesh_decide::params![mesh_decide::store::mirror_lock::MIRROR_LOCK],
                )
                .unwrap();
            let mirrored = done_rx
                .recv_timeout(Duration::from_secs(30))
                .expect("the mirror goes on once the other lets go");
            assert!(
                matches!(mirrored.as_slice(), [(1, Some(_), None)]),
                "the pending link, mirrored once the lock was had: {mirrored:?}"
            );
        });
    })
    .await
    .unwrap();
}

/// A mirror whose lock went with its session (killed by the server, or by whoever may kill
/// sessions) writes nothing more to the lake: the batch is recorded as failed, not as
/// mirrored, and the next mirror (with the lock) writes each event once.
#[tokio::test]
async fn a_mirror_that_loses_its_lock_writes_nothing_and_the_next_writes_it_once() {
    let pg = Postgres::start().await;
    let url = pg.url.clone();
    let data = tempfile::tempdir().unwrap();
    let lake_at = shared_lake(&url, data.path());
    tokio::task::spawn_blocking(move || {
        let sidecar = std::sync::Mutex::new(Sidecar::connect(&url).unwrap());
        one_written_link(&sidecar.lock().unwrap());
        let killer = Sidecar::connect(&url).unwrap();
        let mut killed = 0;
        let first = mesh_decide::apply::mirror_pending_reporting(
            &sidecar,
            &lake_at,
            mesh_decide::apply::LAKE_WAIT,
            &mut |n, _| {
                if n == 0 {
                    // The session holding the lake's lock, ended from outside.
                    killed = killer
                        .db
                        .query_row(
                            "SELECT count(pg_terminate_backend(pid)) FROM pg_locks
                         WHERE locktype = 'advisory' AND granted AND pid <> pg_backend_pid()",
                            mesh_decide::params![],
                            |r| r.get::<i64>(0),
                        )
                        .unwrap();
                }
            },
        )
        .expect("tried");
        assert_eq!(killed, 1, "one session held the lake's lock");
        assert!(
            matches!(first.as_slice(), [m] if m.snapshot.is_none()
                && m.error.as_deref().is_some_and(|e| e.contains("lock was lost"))),
            "the batch failed with the lock lost: {first:?}"
        );
        assert!(
            lake_events(&lake_at).is_empty(),
            "nothing reached the lake without the lock"
        );
        assert_eq!(
            links(&url, "r1"),
            vec![("l1".to_owned(), "mirror_failed".to_owned(), None)]
        );
        let second = mesh_decide::apply::mirror_pending(&sidecar, &lake_at).expect("mirrored");
        assert!(
            matches!(second.as_slice(), [m] if m.snapshot.is_some() && m.error.is_none()),
            "the next mirror writes it: {second:?}"
        );
        assert_eq!(lake_events(&lake_at).get("l1"), Some(&1));
        assert!(
            matches!(links(&url, "r1").as_slice(), [(_, status, Some(_))] if status == "written")
        );
    })
    .await
    .unwrap();
}

/// decide's sidecar has one schema in both dialects: every table and column of the SQLite
/// file is in PostgreSQL and the reverse, but for what only a shared store needs (its
/// version, the sealing key every instance shares, `rowid` spelled out).
#[tokio::test]
async fn the_sidecar_is_one_schema_in_sqlite_and_postgresql() {
    let pg = Postgres::start().await;
    let url = pg.url.clone();
    tokio::task::spawn_blocking(move || {
        let dir = tempfile::tempdir().unwrap();
        let lite = Sidecar::open(&dir.path().join("sidecar.sqlite")).unwrap();
        let shared = Sidecar::connect(&url).unwrap();
        crate::pg::one_schema(
            &mesh_store::columns(&lite.db).unwrap(),
            &mesh_store::columns(&shared.db).unwrap(),
            |t, c| matches!(t, "sidecar_version" | "state_key") || c == "rowid",
        );
    })
    .await
    .unwrap();
}
