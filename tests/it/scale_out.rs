//! Stateful modules as more than one instance: two instances of avu, on two servers of a
//! cluster, sharing one real PostgreSQL. Whichever instance a call reaches, it sees what the
//! other wrote, an AVU added by both at once is written once, and a question sealed by one
//! is answered by the other.

use std::time::Duration;

use serde_json::{Value, json};

use mesh_avu::store::Store;
use mesh_core::client::Client;
use mesh_core::subjects::FullName;

use crate::bus::{ClusterBus, GENEROUS};
use crate::pg::Postgres;

fn name(s: &str) -> FullName {
    FullName::parse(s).unwrap()
}

/// avu with its state in `dir` and its AVUs in the shared store at `url` (and PATO in its
/// own ontology index, for the term picker).
fn avu(dir: &std::path::Path, url: &str) -> mesh_core::runtime::Module {
    std::fs::create_dir_all(dir).unwrap();
    let mut index = mesh_ontology::index::Index::open(&dir.join("ontology.sqlite")).unwrap();
    let pato = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/ontologies/pato.obo");
    index.import(std::path::Path::new(pato), |_| {}).unwrap();
    std::fs::write(
        dir.join("config.json"),
        json!({"database": url}).to_string(),
    )
    .unwrap();
    let config = mesh_avu::Config::in_dir(dir, &dir.join("ontology.sqlite")).unwrap();
    mesh_avu::module(config).unwrap()
}

async fn call(client: &Client, tool: &str, args: Value) -> Value {
    let r = client.call(&name(tool), &args, GENEROUS).await.unwrap();
    assert!(!r.is_error, "{tool}: {}", r.text_content());
    r.structured_content.unwrap()
}

#[tokio::test]
async fn two_avu_instances_share_one_store() {
    let mut pg = Postgres::start().await;
    let bus = ClusterBus::accounts(3, &["catalog", "avu"], &[("ann", &["mesh.avu.>"])]).await;
    let _catalog = bus.serve_catalog_on(0).await;
    let dirs = tempfile::tempdir().unwrap();
    let one = avu(&dirs.path().join("one"), &pg.url);
    let two = avu(&dirs.path().join("two"), &pg.url);
    let (id_one, id_two) = {
        let a = bus.serve_on(0, one).await;
        let b = bus.serve_on(1, two).await;
        ((a.id.clone(), a), (b.id.clone(), b))
    };
    let ann = bus.client_on(2, "ann").await;
    let path = "/mesh/home/ann/traps.csv";
    // Each add is read back at once, by whichever instance the list reaches.
    for i in 0..20 {
        let added = call(
            &ann,
            "avu_add",
            json!({"path": path, "attribute": "n", "value": i.to_string()}),
        )
        .await;
        assert_eq!(added["added"].as_array().unwrap().len(), 1, "{added}");
        let listed = call(&ann, "avu_list", json!({"path": path})).await;
        assert_eq!(listed["avus"].as_array().unwrap().len(), i + 1, "{listed}");
    }
    // The calls were spread over both instances (each answered some).
    let stats = |id: &str| {
        let ann = ann.clone();
        let id = id.to_owned();
        async move {
            let r = ann
                .nats()
                .request(format!("$SRV.STATS.avu.{id}"), "".into())
                .await
                .unwrap();
            let v: Value = serde_json::from_slice(&r.payload).unwrap();
            v["endpoints"]
                .as_array()
                .unwrap()
                .iter()
                .map(|e| e["num_requests"].as_u64().unwrap_or(0))
                .sum::<u64>()
        }
    };
    let (n1, n2) = (stats(&id_one.0).await, stats(&id_two.0).await);
    assert!(
        n1 > 0 && n2 > 0,
        "one instance answered every call: {n1} / {n2}"
    );
    // Paged on PostgreSQL as on SQLite, the cursor good on either instance: 20 as 7 + 7 + 6.
    let (mut values, mut cursor) = (Vec::new(), None::<String>);
    loop {
        let mut args = json!({"path": path, "limit": 7});
        if let Some(c) = &cursor {
            args["cursor"] = json!(c);
        }
        let page = call(&ann, "avu_list", args).await;
        values.extend(
            page["avus"]
                .as_array()
                .unwrap()
                .iter()
                .map(|a| a["value"].clone()),
        );
        match page.get("next").and_then(Value::as_str) {
            Some(n) => cursor = Some(n.to_owned()),
            None => break,
        }
    }
    let mut expected: Vec<String> = (0..20).map(|i: i32| i.to_string()).collect();
    expected.sort();
    assert_eq!(
        values,
        expected.iter().map(|v| json!(v)).collect::<Vec<_>>()
    );

    // The same AVU added by many callers at once: written once, one history entry.
    let mut racing = Vec::new();
    for _ in 0..8 {
        let ann = ann.clone();
        racing.push(tokio::spawn(async move {
            call(
                &ann,
                "avu_add",
                json!({"path": path, "attribute": "site", "value": "HARV"}),
            )
            .await["added"]
                .as_array()
                .unwrap()
                .len()
        }));
    }
    let mut written = 0;
    for r in racing {
        written += r.await.unwrap();
    }
    assert_eq!(written, 1, "the same AVU was written {written} times");
    let url = pg.url.clone();
    let history = tokio::task::spawn_blocking(move || {
        Store::connect(&url, None).unwrap().history(path).unwrap()
    })
    .await
    .unwrap();
    assert_eq!(
        history.iter().filter(|c| c.avu.attribute == "site").count(),
        1
    );
    assert_eq!(history.len(), 21);

    // A question asked by one instance is answered by whichever the answer reaches: both
    // seal with the shared store's key. Each answer is taken once, by any instance.
    let args = json!({"path": path, "value": "length", "ontology": "PATO"});
    for round in 0..6 {
        let asked = ann
            .call(&name("avu_apply_term"), &args, GENEROUS)
            .await
            .unwrap();
        let state = asked.request_state.clone().expect("the picker asks");
        let mut answer = args.clone();
        answer["requestState"] = json!(state);
        answer["inputResponses"] = json!({mesh_avu::TERM_CHOICE:
            {"action": "accept", "content": {"term": "PATO:0000122"}}});
        let taken = ann
            .call(&name("avu_apply_term"), &answer, GENEROUS)
            .await
            .unwrap();
        assert!(!taken.is_error, "round {round}: {}", taken.text_content());
        for _ in 0..2 {
            let again = ann
                .call(&name("avu_apply_term"), &answer, GENEROUS)
                .await
                .unwrap();
            assert!(
                again.is_error && again.text_content().contains("used"),
                "round {round}: a state answered twice: {}",
                again.text_content()
            );
        }
    }

    // The database goes: calls say so, as a tool error naming it, and nothing hangs; it
    // comes back: the same instances answer again, nothing lost.
    pg.kill();
    let down = ann
        .call(&name("avu_list"), &json!({"path": path}), GENEROUS)
        .await
        .unwrap();
    assert!(
        down.is_error && down.text_content().contains("PostgreSQL"),
        "{}",
        down.text_content()
    );
    pg.start_again().await;
    for _ in 0..4 {
        let listed = call(&ann, "avu_list", json!({"path": path})).await;
        assert_eq!(listed["avus"].as_array().unwrap().len(), 22, "{listed}");
    }
    let _ = (id_one.1, id_two.1);
    tokio::time::sleep(Duration::from_millis(1)).await;
}

/// avu's store is one schema in both dialects: every table and column of the SQLite file is
/// in PostgreSQL and the reverse, but for what only a shared store needs (its version, the
/// sealing key every instance shares); a store an older avu made there (no version) is
/// taken as it is and its version recorded.
#[tokio::test]
async fn the_avu_store_is_one_schema_in_sqlite_and_postgresql() {
    let pg = Postgres::start().await;
    let url = pg.url.clone();
    tokio::task::spawn_blocking(move || {
        let dir = tempfile::tempdir().unwrap();
        let lite = Store::open(&dir.path().join("avu.sqlite")).unwrap();
        let shared = Store::connect(&url, None).unwrap();
        crate::pg::one_schema(
            &lite.columns().unwrap(),
            &shared.columns().unwrap(),
            |t, _| matches!(t, "avu_version" | "state_key"),
        );
        // As an older avu left it: no version table. Connecting again takes its tables and
        // key as they are.
        let mut raw = postgres::Client::connect(&url, postgres::NoTls).unwrap();
        let key: Vec<u8> = raw
            .query_one("SELECT key FROM state_key", &[])
            .unwrap()
            .get(0);
        raw.batch_execute("DROP TABLE avu_version").unwrap();
        let again = Store::connect(&url, None).unwrap();
        assert_eq!(again.shared_key().map(|k| k.to_vec()), Some(key));
        let version: i64 = raw
            .query_one("SELECT version FROM avu_version", &[])
            .unwrap()
            .get(0);
        assert_eq!(version, 1);
    })
    .await
    .unwrap();
}
