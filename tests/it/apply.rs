//! decide_apply on a real two-account bus with the avu module and a real DuckLake: dry runs,
//! one question per round trip, the refusals of point 4, re-apply idempotence, and a failed
//! mirror recovered by the next apply and by `mesh decide lake recover`.

use std::path::{Path, PathBuf};
use std::time::Duration;

use mesh_core::client::Client;
use mesh_core::subjects::{FullName, ToolResult};
use mesh_decide::lake::Lake;
use mesh_decide::tools::{Config, module};
use serde_json::{Value, json};

use crate::avu::import_fixtures;
use crate::bus::{self, Bus, GENEROUS, Running};

const CARD: &str = include_str!("../cards/example.md");

pub struct Setup {
    pub bus: Bus,
    pub dir: tempfile::TempDir,
    _modules: Vec<Running>,
}

impl Setup {
    pub fn decide_dir(&self) -> PathBuf {
        self.dir.path().join("decide")
    }

    fn lake(&self) -> Lake {
        Lake::open(&self.decide_dir().join("lake")).unwrap()
    }
}

/// avu and decide on a bus in the accounts layout (decide may act for people toward avu), ann and bob people; decide's questions live `lifetime`.
pub async fn setup(lifetime: Duration) -> Setup {
    setup_with(lifetime, Vec::new()).await
}

/// As [`setup`], with more modules on the bus.
pub async fn setup_with(lifetime: Duration, more: Vec<mesh_bus::layout::ModuleUser>) -> Setup {
    setup_clocked(
        lifetime,
        more,
        mesh_core::runtime::request_state::system_clock(),
    )
    .await
}

/// As [`setup_with`], decide's questions timed by `clock`.
pub async fn setup_clocked(
    lifetime: Duration,
    more: Vec<mesh_bus::layout::ModuleUser>,
    clock: mesh_core::runtime::request_state::Clock,
) -> Setup {
    let dir = tempfile::tempdir().unwrap();
    let decide_dir = dir.path().join("decide");
    import_fixtures(&decide_dir.join("ontology.sqlite"));
    let mut modules = vec![
        bus::module("catalog"),
        bus::module("avu"),
        bus::acting_for_people("decide", &["avu"]),
    ];
    modules.extend(more);
    let bus = Bus::accounts_with(&modules, &[("ann", &["mesh.>"]), ("bob", &["mesh.>"])]).await;
    // The catalogue first, as `mesh up` starts it: the others register with it as they start.
    let catalog_running = bus.serve_catalog().await;
    let avu_config =
        mesh_avu::Config::in_dir(&dir.path().join("avu"), &decide_dir.join("ontology.sqlite"))
            .unwrap();
    let avu_running = bus.serve(mesh_avu::module(avu_config).unwrap()).await;
    let decide_bus = bus.client_as(Some("decide")).await;
    let mut config = Config::in_dir(&decide_dir).with_bus(decide_bus);
    config.state_lifetime = lifetime;
    config.clock = clock;
    let decide_running = bus.serve(module(config).unwrap()).await;
    Setup {
        bus,
        dir,
        _modules: vec![catalog_running, avu_running, decide_running],
    }
}

pub async fn call(client: &Client, tool: &str, args: &Value) -> ToolResult {
    client
        .call(&FullName::parse(tool).unwrap(), args, GENEROUS)
        .await
        .unwrap()
}

async fn annotate(client: &Client) -> (String, Value) {
    let r = call(client, "decide_annotate", &json!({"card_text": CARD})).await;
    assert!(!r.is_error, "{}", r.text_content());
    let out = r.structured_content.unwrap();
    (out["run_id"].as_str().unwrap().to_owned(), out)
}

async fn avus_on(client: &Client, path: &str) -> Vec<(String, String, String)> {
    let r = call(client, "avu_list", &json!({"path": path})).await;
    let mut v: Vec<_> = r.structured_content.unwrap()["avus"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| {
            (
                a["attribute"].as_str().unwrap().to_owned(),
                a["value"].as_str().unwrap().to_owned(),
                a["unit"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    v.sort();
    v
}

/// The one question of an input_required result: (key, group id, options as (id, title)).
fn question(r: &ToolResult) -> (String, String, Vec<(String, String)>) {
    assert!(r.needs_input(), "{}", r.text_content());
    let requests = r.input_requests.as_ref().unwrap();
    assert_eq!(requests.len(), 1, "one question per round trip");
    let (key, form) = requests.iter().next().unwrap();
    let group = key
        .strip_prefix("term_choice:")
        .expect("key term_choice:<group>");
    let options = form["params"]["requestedSchema"]["properties"]["candidate"]["oneOf"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| {
            (
                o["const"].as_str().unwrap().to_owned(),
                o["title"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    (key.clone(), group.to_owned(), options)
}

fn answer(args: &Value, r: &ToolResult, key: &str, response: Value) -> Value {
    let mut a = args.clone();
    a["requestState"] = json!(r.request_state.clone().unwrap());
    a["inputResponses"] = json!({key: response});
    a
}

/// Answers every question of an apply: picks the first (best) candidate, except in the
/// groups of `decline` columns. Returns the final result and how many questions came.
async fn apply_answering(
    client: &Client,
    args: &Value,
    decline: &[&str],
    columns: &std::collections::HashMap<String, String>,
) -> (ToolResult, usize) {
    let (r, asked) = answering(client, args, decline, columns).await;
    assert!(!r.is_error, "{}", r.text_content());
    (r, asked)
}

/// As [`apply_answering`], whatever the final result.
async fn answering(
    client: &Client,
    args: &Value,
    decline: &[&str],
    columns: &std::collections::HashMap<String, String>,
) -> (ToolResult, usize) {
    let mut r = call(client, "decide_apply", args).await;
    let mut asked = 0;
    while r.needs_input() {
        asked += 1;
        let (key, group, options) = question(&r);
        let response = if decline.contains(&columns[&group].as_str()) {
            json!({"action": "decline"})
        } else {
            json!({"action": "accept", "content": {"candidate": options[0].0}})
        };
        r = call(client, "decide_apply", &answer(args, &r, &key, response)).await;
        assert!(asked < 100, "no end to the questions");
    }
    (r, asked)
}

fn columns_of(annotated: &Value) -> std::collections::HashMap<String, String> {
    annotated["groups"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| {
            (
                g["group_id"].as_str().unwrap().to_owned(),
                g["column"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

#[tokio::test]
async fn annotate_then_apply_proposed_over_round_trips_into_one_lake_snapshot() {
    let s = setup(Duration::from_secs(600)).await;
    let ann = s.bus.client_as(Some("ann")).await;
    let (run_id, annotated) = annotate(&ann).await;
    let columns = columns_of(&annotated);
    let groups = columns.len();
    assert!(groups >= 4, "{annotated:#}");
    let path = "/mesh/home/ann/mam_pertrapnight.csv";

    // Nothing is accepted yet: a dry run with accept=auto would write nothing.
    let dry = call(
        &ann,
        "decide_apply",
        &json!({"run_id": run_id, "path": path}),
    )
    .await;
    let out = dry.structured_content.unwrap();
    assert_eq!(out["dry_run"], true);
    assert_eq!(out["written"], json!([]));
    assert_eq!(out["open_groups"], groups);

    // The real thing: one question per open group, in one round trip each; sex declined.
    let args = json!({"run_id": run_id, "path": "/mesh/home/ann//mam_pertrapnight.csv/", "accept": "proposed", "dry_run": false});
    let first = call(&ann, "decide_apply", &args).await;
    let (_, _, options) = question(&first);
    assert!(options.len() <= 8);
    let title = &options[0].1;
    assert!(
        title.contains(" (") && title.contains(") p(fits)=") && title.ends_with(" L0"),
        "label (CURIE) p(fits)=0.83 L0: {title}"
    );
    let (done, asked) = apply_answering(&ann, &args, &["sex"], &columns).await;
    assert_eq!(asked, groups, "each group asked exactly once");
    let out = done.structured_content.unwrap();
    assert_eq!(out["path"], path, "normalised");
    let written = out["written"].as_array().unwrap().len();
    assert_eq!(
        written,
        groups - 1,
        "every group but the declined one: {out:#}"
    );
    let snapshot = out["snapshot"].as_i64().expect("a lake snapshot");

    let on_path = avus_on(&ann, path).await;
    assert_eq!(on_path.len(), written);
    assert!(
        on_path.contains(&(
            "pato.length".into(),
            "hindfootLength".into(),
            "PATO:0000122".into()
        )),
        "{on_path:?}"
    );
    assert!(
        !on_path.iter().any(|(_, _, unit)| unit == "PATO:0000047"),
        "sex was declined"
    );

    // One snapshot, holding exactly those rows, attributed to ann and the run.
    {
        let lake = s.lake();
        assert_eq!(lake.insert_snapshots().unwrap(), vec![snapshot]);
        let events = lake.events().unwrap();
        assert_eq!(events.len(), written);
        for (snap, e) in &events {
            assert_eq!(*snap, snapshot);
            assert_eq!(
                (
                    e.actor.as_str(),
                    e.run_id.as_str(),
                    e.path.as_str(),
                    e.op.as_str()
                ),
                ("ann@PEOPLE", run_id.as_str(), path, "add")
            );
        }
        let mut current: Vec<_> = lake.current(path).unwrap();
        current.sort();
        assert_eq!(current, on_path);
    }

    // Explain by path: every AVU with its decision, link written, snapshot recorded.
    let r = call(&ann, "decide_explain", &json!({"path": path})).await;
    let text = r.text_content();
    assert!(
        text.starts_with(&format!("{written} AVU links decide recorded on {path}\n"))
            && text.contains("attribute")
            && text.contains("pato.length")
            && text.contains("written"),
        "{text}"
    );
    let links = r.structured_content.unwrap()["links"]
        .as_array()
        .unwrap()
        .clone();
    assert_eq!(links.len(), written);
    for l in &links {
        assert_eq!(
            (l["status"].as_str(), l["snapshot_id"].as_i64()),
            (Some("written"), Some(snapshot)),
            "{l}"
        );
    }
    // The same links a page at a time, with the cursor each page gives: all, in order, once.
    assert!(written >= 3, "{written}");
    let (mut paged, mut cursor) = (Vec::new(), None::<String>);
    loop {
        let mut args = json!({"path": path, "limit": 2});
        if let Some(c) = &cursor {
            args["cursor"] = json!(c);
        }
        let page = call(&ann, "decide_explain", &args)
            .await
            .structured_content
            .unwrap();
        paged.extend(
            page["links"]
                .as_array()
                .unwrap()
                .iter()
                .map(|l| l["id"].clone()),
        );
        match page.get("next").and_then(Value::as_str) {
            Some(n) => cursor = Some(n.to_owned()),
            None => break,
        }
    }
    assert_eq!(
        paged,
        links.iter().map(|l| l["id"].clone()).collect::<Vec<_>>()
    );
    let r = call(
        &ann,
        "decide_explain",
        &json!({"path": path, "cursor": "x"}),
    )
    .await;
    assert!(
        r.is_error && r.text_content().contains("is not one decide_explain gave"),
        "{}",
        r.text_content()
    );

    // Re-applying writes nothing twice: no AVU, no history, no snapshot.
    let again = call(
        &ann,
        "decide_apply",
        &json!({"run_id": run_id, "path": path, "dry_run": false}),
    )
    .await;
    assert!(
        again.text_content().contains(
            "\n1 candidate group declined before stays open and unwritten: sex\n  accept=proposed asks about it again"
        ),
        "{}",
        again.text_content()
    );
    let out = again.structured_content.unwrap();
    assert_eq!(out["written"], json!([]));
    assert_eq!(out["already_written"], written);
    assert_eq!(out["open_groups"], 1, "the declined group stays open");
    assert_eq!(avus_on(&ann, path).await, on_path);
    assert_eq!(s.lake().insert_snapshots().unwrap(), vec![snapshot]);

    // A run goes to one path.
    let r = call(
        &ann,
        "decide_apply",
        &json!({"run_id": run_id, "path": "/mesh/home/ann/other", "dry_run": false}),
    )
    .await;
    assert!(
        r.is_error && r.text_content().contains("applied to one path"),
        "{}",
        r.text_content()
    );

    // Nobody writes outside their home through decide either: avu refuses bob in ann's home.
    let bob = s.bus.client_as(Some("bob")).await;
    let (bob_run, bob_annotated) = annotate(&bob).await;
    let (r, _) = {
        let args = json!({"run_id": bob_run, "path": "/mesh/home/bob/x", "accept": "proposed"});
        apply_answering(&bob, &args, &[], &columns_of(&bob_annotated)).await
    };
    assert!(
        !r.structured_content.unwrap()["written"]
            .as_array()
            .unwrap()
            .is_empty()
    );
    let (r, _) = answering(
        &bob,
        &json!({"run_id": bob_run, "path": "/mesh/home/ann/../ann/x", "accept": "proposed", "dry_run": false}),
        &[],
        &columns_of(&bob_annotated),
    )
    .await;
    assert!(
        r.is_error
            && r.text_content()
                .contains("avu refused the write: bob@PEOPLE may not write on /mesh/home/ann/x"),
        "{}",
        r.text_content()
    );
    assert!(avus_on(&ann, "/mesh/home/ann/x").await.is_empty());
}

/// The sidecar rows an apply or an answer could add or change: overrides, labels, decisions,
/// spent states, and the links by status.
pub(crate) fn stored(decide_dir: &Path) -> Vec<(String, i64)> {
    let db = rusqlite::Connection::open(decide_dir.join("sidecar.sqlite")).unwrap();
    let mut q = db
        .prepare(
            "SELECT 'overrides', count(*) FROM overrides
             UNION ALL SELECT 'labels', count(*) FROM labels
             UNION ALL SELECT 'decisions', count(*) FROM decisions
             UNION ALL SELECT 'spent', count(*) FROM spent_states
             UNION ALL SELECT 'link ' || status, count(*) FROM avu_links GROUP BY status",
        )
        .unwrap();
    q.query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap()
}

#[tokio::test]
async fn a_dry_run_changes_nothing_stored_and_the_real_run_asks_again() {
    let s = setup(Duration::from_secs(600)).await;
    let ann = s.bus.client_as(Some("ann")).await;
    let (run, annotated) = annotate(&ann).await;
    let columns = columns_of(&annotated);
    let groups = columns.len();
    let path = "/mesh/home/ann/one";
    let before = stored(&s.decide_dir());

    // A dry run asks about every group, earLength declined and the rest picked, and
    // reports what those answers would write; it keeps none of them.
    let dry_args = json!({"run_id": run, "path": path, "accept": "proposed"});
    let first = call(&ann, "decide_apply", &dry_args).await;
    let (_, _, _) = question(&first);
    let message = first
        .input_requests
        .as_ref()
        .unwrap()
        .values()
        .next()
        .unwrap()["params"]["message"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(
        message.contains("dry run: this answer is not kept"),
        "{message}"
    );
    let (dry, asked) = apply_answering(&ann, &dry_args, &["earLength"], &columns).await;
    assert_eq!(asked, groups);
    let text = dry.text_content();
    let dry = dry.structured_content.unwrap();
    assert_eq!(dry["dry_run"], true);
    assert_eq!(
        dry["written"].as_array().unwrap().len(),
        groups - 1,
        "what the answers would write: {dry:#}"
    );
    assert_eq!(dry["open_groups"], 1, "{dry:#}");
    assert!(
        text.starts_with(&format!(
            "dry run, nothing changed: dry_run=false would write {} AVUs to {path}",
            groups - 1
        )) && text.contains(
            "\n1 candidate group you declined would stay open and unwritten: earLength"
        ) && text.contains(&format!(
            "your {groups} answers in this dry run were not kept (a dry run changes nothing stored):\n  accept=proposed dry_run=false asks about every open group again"
        )),
        "{text}"
    );
    assert!(!text.contains("1 candidate groups"), "{text}");
    assert_eq!(stored(&s.decide_dir()), before, "nothing stored");
    assert!(avus_on(&ann, path).await.is_empty(), "nothing written");
    assert_eq!(s.lake().insert_snapshots().unwrap(), Vec::<i64>::new());

    // A real apply of what is accepted writes nothing: the dry run accepted nothing.
    let r = call(
        &ann,
        "decide_apply",
        &json!({"run_id": run, "path": path, "dry_run": false}),
    )
    .await;
    assert!(!r.is_error, "{}", r.text_content());
    assert_eq!(r.structured_content.clone().unwrap()["written"], json!([]));
    assert!(
        r.text_content().contains(&format!(
            "\n{groups} candidate groups are open, not answered yet: "
        )),
        "{}",
        r.text_content()
    );

    // The real run asks about every group again, and writes what the dry run said.
    let args = json!({"run_id": run, "path": path, "accept": "proposed", "dry_run": false});
    let (real, asked) = apply_answering(&ann, &args, &["earLength"], &columns).await;
    assert_eq!(asked, groups, "every group asked again");
    let text = real.text_content();
    let real = real.structured_content.unwrap();
    assert_eq!(real["written"], dry["written"], "what the dry run reported");
    assert_eq!(real["open_groups"], 1);
    assert_eq!(real["open"][0]["column"], "earLength");
    assert_eq!(real["open"][0]["declined"], true);
    assert!(
        text.starts_with(&format!("{} AVUs written to {path}", groups - 1))
            && text
                .contains("\n1 candidate group you declined stays open and unwritten: earLength")
            && !text.contains("not answered yet"),
        "{text}"
    );

    // An answer from a dry run is no answer in a real run, nor the other way round.
    let (run2, _) = annotate(&ann).await;
    let before = stored(&s.decide_dir());
    for (asking, answering) in [(true, false), (false, true)] {
        let ask = json!({"run_id": run2, "path": "/mesh/home/ann/two", "accept": "proposed", "dry_run": asking});
        let asked = call(&ann, "decide_apply", &ask).await;
        let (key, _, options) = question(&asked);
        let mut a = answer(
            &ask,
            &asked,
            &key,
            json!({"action": "accept", "content": {"candidate": options[0].0}}),
        );
        a["dry_run"] = json!(answering);
        let r = call(&ann, "decide_apply", &a).await;
        assert!(
            r.is_error
                && r.text_content().contains("requestState is from a")
                && r.text_content()
                    .contains("call decide_apply again without it"),
            "{}",
            r.text_content()
        );
    }
    assert_eq!(stored(&s.decide_dir()), before, "nothing stored");
}

#[tokio::test]
async fn request_state_refusals_write_nothing() {
    let s = setup(Duration::from_secs(600)).await;
    let ann = s.bus.client_as(Some("ann")).await;
    let bob = s.bus.client_as(Some("bob")).await;
    let (run1, _) = annotate(&ann).await;
    let (run2, _) = annotate(&ann).await;
    let args =
        json!({"run_id": run1, "path": "/mesh/home/ann/x", "accept": "proposed", "dry_run": false});
    let asked = call(&ann, "decide_apply", &args).await;
    let (key, _, options) = question(&asked);
    let pick = json!({"action": "accept", "content": {"candidate": options[0].0}});
    let overrides = || {
        let db = rusqlite::Connection::open(s.decide_dir().join("sidecar.sqlite")).unwrap();
        db.query_row("SELECT count(*) FROM overrides", [], |r| r.get::<_, i64>(0))
            .unwrap()
    };

    let state = asked.request_state.clone().unwrap();
    let mut flipped = state.clone().into_bytes();
    let at = flipped.len() / 3;
    flipped[at] = if flipped[at] == b'x' { b'y' } else { b'x' };
    let tampered = {
        let mut a = answer(&args, &asked, &key, pick.clone());
        a["requestState"] = json!(String::from_utf8(flipped).unwrap());
        a
    };
    let other_run = {
        let mut a = answer(&args, &asked, &key, pick.clone());
        a["run_id"] = json!(run2);
        a
    };
    // A candidate of another group, and one that was never a candidate.
    let not_offered = answer(
        &args,
        &asked,
        &key,
        json!({"action": "accept", "content": {"candidate": "d-not-a-candidate"}}),
    );
    let other_group = {
        let mut a = answer(&args, &asked, &key, pick.clone());
        a["inputResponses"] = json!({"term_choice:another": pick});
        a
    };
    for (who, a, why) in [
        (&ann, tampered, "requestState"),
        (&ann, other_run, "from another run"),
        (
            &bob,
            answer(&args, &asked, &key, pick.clone()),
            "belongs to another caller (account PEOPLE)",
        ),
        (&ann, not_offered, "is not one of the candidates offered"),
        (&ann, other_group, "not for the group asked"),
    ] {
        let r = call(who, "decide_apply", &a).await;
        assert!(
            r.is_error && r.text_content().contains(why),
            "{why}: {}",
            r.text_content()
        );
    }
    assert_eq!(overrides(), 0, "no refused answer was recorded");

    // The right answer goes through; the same answer again finds its state spent.
    let r = call(
        &ann,
        "decide_apply",
        &answer(&args, &asked, &key, pick.clone()),
    )
    .await;
    assert!(!r.is_error, "{}", r.text_content());
    let r = call(
        &ann,
        "decide_apply",
        &answer(&args, &asked, &key, pick.clone()),
    )
    .await;
    assert!(
        r.is_error && r.text_content().contains("already used"),
        "{}",
        r.text_content()
    );
    assert_eq!(overrides(), 1);
    assert!(
        avus_on(&ann, "/mesh/home/ann/x").await.is_empty(),
        "nothing written until the last answer"
    );
}

#[tokio::test]
async fn an_expired_state_is_refused() {
    // decide's clock is the test's: ten minutes pass when the test says so.
    let now = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(
        mesh_core::subjects::catalog::now_ms(),
    ));
    let clock: mesh_core::runtime::request_state::Clock = {
        let now = now.clone();
        std::sync::Arc::new(move || now.load(std::sync::atomic::Ordering::SeqCst))
    };
    let s = setup_clocked(Duration::from_secs(600), Vec::new(), clock).await;
    let ann = s.bus.client_as(Some("ann")).await;
    let (run, _) = annotate(&ann).await;
    let args =
        json!({"run_id": run, "path": "/mesh/home/ann/x", "accept": "proposed", "dry_run": false});
    let asked = call(&ann, "decide_apply", &args).await;
    let (key, _, options) = question(&asked);
    now.fetch_add(600_001, std::sync::atomic::Ordering::SeqCst);
    let r = call(
        &ann,
        "decide_apply",
        &answer(
            &args,
            &asked,
            &key,
            json!({"action": "accept", "content": {"candidate": options[0].0}}),
        ),
    )
    .await;
    assert!(
        r.is_error && r.text_content().contains("expired"),
        "{}",
        r.text_content()
    );
}

/// Makes the lake unwritable: its data directory moves away and a file takes its place.
fn break_lake(lake: &Path) {
    let data = lake.join("data");
    std::fs::create_dir_all(&data).unwrap();
    std::fs::rename(&data, lake.join("data.away")).unwrap();
    std::fs::write(&data, b"not a directory").unwrap();
}

fn mend_lake(lake: &Path) {
    std::fs::remove_file(lake.join("data")).unwrap();
    std::fs::rename(lake.join("data.away"), lake.join("data")).unwrap();
}

fn link_states(decide_dir: &Path, run: &str) -> Vec<(String, Option<i64>)> {
    let db = rusqlite::Connection::open(decide_dir.join("sidecar.sqlite")).unwrap();
    let mut q = db
        .prepare("SELECT status, snapshot_id FROM avu_links WHERE run_id = ?1 AND path IS NOT NULL")
        .unwrap();
    q.query_map([run], |r| Ok((r.get(0)?, r.get(1)?)))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap()
}

/// Another process holding the lake (a `mesh decide lake recover`, say) costs an apply no
/// more than its caller waits: the AVUs are written and the apply says so within the
/// caller's deadline, its links left to mirror, which the next apply does.
#[tokio::test]
async fn a_held_lake_is_waited_for_no_longer_than_the_caller_waits() {
    let s = setup(Duration::from_secs(600)).await;
    let ann = s.bus.client_as(Some("ann")).await;
    let (run, a) = annotate(&ann).await;
    let held = s.lake();
    let path = "/mesh/home/ann/held";
    // Each round trip with the tests' deadline (`GENEROUS`, 10 s): a mirror that waited its
    // full 30 s would make the last one `slow`, and this unwrap fail.
    let args = json!({"run_id": run, "path": path, "accept": "proposed", "dry_run": false});
    let (r, _) = apply_answering(&ann, &args, &[], &columns_of(&a)).await;
    let out = r.structured_content.unwrap();
    let mirror = out["mirror"].as_str().unwrap();
    assert!(
        mirror.starts_with("mirror failed") && mirror.contains("held by another process"),
        "{out:#}"
    );
    assert!(out["snapshot"].is_null());
    let written = out["written"].as_array().unwrap().len();
    assert!(written > 0);
    assert_eq!(
        avus_on(&ann, path).await.len(),
        written,
        "the AVUs are written"
    );
    drop(held);
    let r = call(
        &ann,
        "decide_apply",
        &json!({"run_id": run, "path": path, "dry_run": false}),
    )
    .await;
    let out = r.structured_content.unwrap();
    assert_eq!(out["written"], json!([]), "nothing written twice to avu");
    let snapshot = out["snapshot"]
        .as_i64()
        .expect("mirrored once the lake is free");
    assert!(
        link_states(&s.decide_dir(), &run)
            .iter()
            .all(|(st, snap)| st == "written" && *snap == Some(snapshot))
    );
}

#[tokio::test]
async fn a_failed_mirror_is_recovered_without_writing_twice() {
    let s = setup(Duration::from_secs(600)).await;
    let ann = s.bus.client_as(Some("ann")).await;
    let lake_dir = s.decide_dir().join("lake");

    // The next apply recovers it.
    let (run1, a1) = annotate(&ann).await;
    break_lake(&lake_dir);
    let args = json!({"run_id": run1, "path": "/mesh/home/ann/one", "accept": "proposed", "dry_run": false});
    let (r, _) = apply_answering(&ann, &args, &[], &columns_of(&a1)).await;
    let out = r.structured_content.unwrap();
    assert!(
        out["mirror"].as_str().unwrap().starts_with("mirror failed"),
        "{out:#}"
    );
    assert!(out["snapshot"].is_null());
    let written = out["written"].as_array().unwrap().len();
    assert_eq!(
        avus_on(&ann, "/mesh/home/ann/one").await.len(),
        written,
        "the AVUs are written"
    );
    assert!(
        link_states(&s.decide_dir(), &run1)
            .iter()
            .all(|(st, snap)| st == "mirror_failed" && snap.is_none())
    );
    mend_lake(&lake_dir);
    let r = call(
        &ann,
        "decide_apply",
        &json!({"run_id": run1, "path": "/mesh/home/ann/one", "dry_run": false}),
    )
    .await;
    let out = r.structured_content.unwrap();
    assert_eq!(out["written"], json!([]), "nothing written twice to avu");
    let snapshot = out["snapshot"].as_i64().expect("mirrored now");
    assert!(
        link_states(&s.decide_dir(), &run1)
            .iter()
            .all(|(st, snap)| st == "written" && *snap == Some(snapshot))
    );
    assert_eq!(s.lake().events().unwrap().len(), written);

    // `mesh decide lake recover` recovers it too, and a second recover finds nothing.
    let (run2, a2) = annotate(&ann).await;
    break_lake(&lake_dir);
    let args = json!({"run_id": run2, "path": "/mesh/home/ann/two", "accept": "proposed", "dry_run": false});
    let (r, _) = apply_answering(&ann, &args, &[], &columns_of(&a2)).await;
    assert!(
        r.structured_content.unwrap()["mirror"]
            .as_str()
            .unwrap()
            .starts_with("mirror failed")
    );
    mend_lake(&lake_dir);
    let recover = || {
        std::process::Command::new(env!("CARGO_BIN_EXE_mesh"))
            .args(["decide", "lake", "recover", "--dir"])
            .arg(s.decide_dir())
            .output()
            .unwrap()
    };
    // On a terminal, as a person runs it: a bar while it mirrors, then what it did.
    let on_terminal = {
        let home = tempfile::tempdir().unwrap();
        let mut cmd = crate::cli::std_command(home.path());
        cmd.args(["decide", "lake", "recover", "--dir"])
            .arg(s.decide_dir());
        tokio::task::spawn_blocking(move || crate::pty::run(&mut cmd, 100, 30))
            .await
            .unwrap()
    };
    let shown = &on_terminal.output;
    assert_eq!(on_terminal.code, 0, "{shown}");
    assert!(shown.contains("mirroring ["), "no bar: {shown:?}");
    assert!(
        shown.contains(&format!(
            "run {run2} on /mesh/home/ann/two: {written} AVUs in lake snapshot"
        )),
        "{shown}"
    );
    let out = recover();
    assert!(String::from_utf8_lossy(&out.stdout).contains("nothing to mirror"));
    let lake = s.lake();
    assert_eq!(lake.events().unwrap().len(), 2 * written, "no event twice");
    assert_eq!(
        lake.insert_snapshots().unwrap().len(),
        2,
        "one snapshot per (run, path), none empty"
    );
}

/// Twelve columns, each its own candidate group: more questions than a surface used to allow.
const WIDE: &str = "# Dataset: DEMO.0004.001 / wide
Product: Many measurements
Source: Example
Sites: -
Rows: 10
Rodents measured many ways.
- taxon | Species of the animal | string | - | Myodes glareolus 62%, Peromyscus maniculatus 38%
- earLength | Length of the ear | float | millimeter | 8 to 21
- tailLength | Length of the tail | float | millimeter | 35 to 95
- bodyLength | Length of the body | float | millimeter | 60 to 120
- footLength | Length of the foot | float | millimeter | 12 to 31
- shoulderHeight | Height at the shoulder | float | millimeter | 20 to 41
- bodyMass | Mass of the body | float | gram | 12 to 38
- bodyWeight | Weight of the animal | float | gram | 12 to 38
- animalSex | Sex of the animal | string | - | female 51%, male 49%
- estimatedAge | Age of the animal | integer | month | 1 to 30
- carapaceLength | Length of the carapace | float | millimeter | 60 to 240
- skullLength | Length of the skull | float | millimeter | 20 to 30
";

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_older_mcp_client_answers_every_group_by_elicitation() {
    let s = setup(Duration::from_secs(600)).await;
    let ann = s.bus.client_as(Some("ann")).await;
    let r = call(&ann, "decide_annotate", &json!({"card_text": WIDE})).await;
    let annotated = r.structured_content.unwrap();
    let run = annotated["run_id"].as_str().unwrap().to_owned();
    let groups = annotated["groups"].as_array().unwrap().len();
    assert!(groups > 10, "{groups} groups");
    let script = format!(
        "{}/tests/py/apply_elicitation.py",
        env!("CARGO_MANIFEST_DIR")
    );
    let mut command = tokio::process::Command::new(crate::bus::python());
    command.args([
        script.as_str(),
        env!("CARGO_BIN_EXE_mesh"),
        &run,
        "/mesh/home/ann/wide",
    ]);
    command.args(s.bus.flags("ann"));
    let seen = crate::bus::json_of(&mut command).await;
    assert_eq!(seen["questions"], groups, "{seen}");
    assert_eq!(seen["isError"], false, "{seen}");
    assert_eq!(
        seen["structured"]["written"].as_array().unwrap().len(),
        groups
    );
    assert_eq!(avus_on(&ann, "/mesh/home/ann/wide").await.len(), groups);
}

#[tokio::test]
async fn a_run_belongs_to_whoever_annotated_it() {
    let s = setup(Duration::from_secs(600)).await;
    let ann = s.bus.client_as(Some("ann")).await;
    let bob = s.bus.client_as(Some("bob")).await;
    let (run, annotated) = annotate(&ann).await;
    let group = annotated["groups"][0]["group_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let candidate = annotated["groups"][0]["candidates"][0]["decision_id"]
        .as_str()
        .map(String::from);

    // ann answers her run's questions and writes it to her path.
    let args =
        json!({"run_id": run, "path": "/mesh/home/ann/x", "accept": "proposed", "dry_run": false});
    apply_answering(&ann, &args, &[], &columns_of(&annotated)).await;
    let written = avus_on(&ann, "/mesh/home/ann/x").await;
    assert!(!written.is_empty());

    // bob learns the run id and a group id, and tries each tool on them.
    let not_yours = "belongs to another caller (account PEOPLE)";
    let mut tries = vec![
        (
            "decide_feedback",
            json!({"group_id": group, "action": "reject"}),
        ),
        (
            "decide_feedback",
            json!({"group_id": group, "action": "decline"}),
        ),
        (
            "decide_apply",
            json!({"run_id": run, "path": "/mesh/home/bob/y", "dry_run": false}),
        ),
        (
            "decide_apply",
            json!({"run_id": run, "path": "/mesh/home/bob/y", "accept": "proposed"}),
        ),
        ("decide_explain", json!({"run_id": run})),
    ];
    if let Some(c) = candidate {
        tries.push((
            "decide_feedback",
            json!({"group_id": group, "action": "pick", "decision_id": c}),
        ));
    }
    for (tool, args) in tries {
        let r = call(&bob, tool, &args).await;
        assert!(
            r.is_error && r.text_content().contains(not_yours),
            "{tool} {args}: {}",
            r.text_content()
        );
        // The owner's account, never the owner.
        assert!(!r.text_content().contains("ann@"), "{}", r.text_content());
    }
    assert!(avus_on(&bob, "/mesh/home/bob/y").await.is_empty());
    // ann's run is as she left it: her next apply writes nothing new and fails nothing.
    let r = call(&ann, "decide_apply", &args).await;
    assert!(!r.is_error, "{}", r.text_content());
    assert_eq!(avus_on(&ann, "/mesh/home/ann/x").await, written);

    // Explaining the path: ann sees her decisions; bob what avu shows anyone, no more.
    let explain = |who: Client| async move {
        let r = call(&who, "decide_explain", &json!({"path": "/mesh/home/ann/x"})).await;
        assert!(!r.is_error, "{}", r.text_content());
        r.structured_content.unwrap()["links"].clone()
    };
    let hers = explain(ann.clone()).await;
    assert!(
        hers[0]["run_id"].is_string() && hers[0]["p"].is_number(),
        "{hers}"
    );
    let his = explain(bob.clone()).await;
    assert_eq!(his.as_array().unwrap().len(), written.len(), "{his}");
    for l in his.as_array().unwrap() {
        let keys: Vec<&String> = l.as_object().unwrap().keys().collect();
        assert_eq!(
            keys,
            ["attribute", "status", "unit", "value", "yours"],
            "{l}"
        );
    }
}

#[tokio::test]
async fn a_run_a_module_made_is_that_modules_alone() {
    let s = setup_with(
        Duration::from_secs(600),
        vec![
            bus::calling("mone", &["decide"]),
            bus::calling("mtwo", &["decide"]),
        ],
    )
    .await;
    let mone = s.bus.client_as(Some("mone")).await;
    let mtwo = s.bus.client_as(Some("mtwo")).await;
    let (run, annotated) = annotate(&mone).await;
    let group = annotated["groups"][0]["group_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let mine = call(&mone, "decide_explain", &json!({"run_id": run})).await;
    assert!(!mine.is_error, "{}", mine.text_content());
    for (tool, args) in [
        ("decide_explain", json!({"run_id": run})),
        (
            "decide_feedback",
            json!({"group_id": group, "action": "reject"}),
        ),
        (
            "decide_apply",
            json!({"run_id": run, "path": "/mesh/home/ann/m"}),
        ),
    ] {
        let r = call(&mtwo, tool, &args).await;
        assert!(
            r.is_error && r.text_content().contains("account MODULE_mone"),
            "{tool}: {}",
            r.text_content()
        );
    }
    // Nor is it a person's: ann, who may call everything, is refused too.
    let ann = s.bus.client_as(Some("ann")).await;
    let r = call(
        &ann,
        "decide_feedback",
        &json!({"group_id": group, "action": "reject"}),
    )
    .await;
    assert!(
        r.is_error && r.text_content().contains("belongs to another"),
        "{}",
        r.text_content()
    );
}
