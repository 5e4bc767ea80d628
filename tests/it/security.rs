//! Security checks over a real bus that gather what a hostile caller would try: every path
//! spelling built from the dangerous segments, and a requestState altered at every byte.
//! (Forged identity headers: identity.rs; the console's loopback and Origin rules: mcp.rs;
//! replayed and expired states: apply.rs.)

use mesh::client::Client;
use mesh::modules::avu::{self, Config};
use mesh::subjects::{FullName, ToolResult};
use serde_json::{Value, json};

use crate::avu::import_fixtures;
use crate::bus::{Bus, GENEROUS};

async fn call(client: &Client, tool: &str, args: Value) -> ToolResult {
    client
        .call(&FullName::parse(tool).unwrap(), &args, GENEROUS)
        .await
        .unwrap()
}

/// Every path of up to five segments from the ones that matter, each joined by `/` or `//`.
fn spellings() -> Vec<String> {
    let segments = ["..", ".", "", "ann", "bob", "home", "mesh", "annx"];
    let mut out = vec![String::new()];
    let mut all = Vec::new();
    for _ in 0..5 {
        let mut next = Vec::new();
        for p in &out {
            for s in segments {
                next.push(format!("{p}/{s}"));
            }
        }
        all.extend(next.iter().cloned());
        out = next;
    }
    // From /mesh/home/ann and from the root, so both escapes and entries are tried.
    let mut paths: Vec<String> = all
        .iter()
        .flat_map(|p| [format!("/mesh/home/ann{p}"), p.clone()])
        .collect();
    paths.sort();
    paths.dedup();
    paths
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn no_path_spelling_writes_outside_the_home() {
    let dir = tempfile::tempdir().unwrap();
    let index = dir.path().join("ontology.sqlite");
    let bus = Bus::accounts(&["avu"], &[("ann", &["mesh.>"])]).await;
    let config = Config::in_dir(&dir.path().join("avu"), &index).unwrap();
    let _avu = bus.serve(avu::module(config).unwrap()).await;
    let ann = bus.client_as(Some("ann")).await;
    let paths = spellings();
    assert!(paths.len() > 50_000, "{}", paths.len());
    // A deterministic sample of a few thousand, every one over the bus.
    let sample: Vec<&String> = paths.iter().step_by(paths.len() / 3000).collect();
    use futures_util::StreamExt;
    let answers: Vec<(String, ToolResult)> = futures_util::stream::iter(sample)
        .map(|path| {
            let ann = ann.clone();
            async move {
                let args = json!({"path": path, "attribute": "a", "value": path});
                (path.clone(), call(&ann, "avu_add", args).await)
            }
        })
        .buffer_unordered(64)
        .collect()
        .await;
    let (mut accepted, mut refused) = (0, 0);
    for (path, r) in answers {
        if r.is_error {
            refused += 1;
            assert!(
                r.text_content().contains("ann@PEOPLE may not write on /"),
                "{path}: {}",
                r.text_content()
            );
        } else {
            accepted += 1;
        }
    }
    assert!(
        accepted > 100 && refused > 100,
        "{accepted} accepted, {refused} refused"
    );
    // The store is the ground truth: nothing anywhere but under ann's home.
    let db = rusqlite::Connection::open(dir.path().join("avu/avu.sqlite")).unwrap();
    let outside: Vec<String> = db
        .prepare("SELECT DISTINCT path FROM avus WHERE path != '/mesh/home/ann' AND path NOT LIKE '/mesh/home/ann/%'")
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    assert!(outside.is_empty(), "{outside:?}");
    let rows: i64 = db
        .query_row("SELECT count(*) FROM avus", [], |r| r.get(0))
        .unwrap();
    assert_eq!(rows, accepted as i64);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_request_state_altered_at_any_byte_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let index = dir.path().join("decide/ontology.sqlite");
    import_fixtures(&index);
    let bus = Bus::accounts(&["avu"], &[("ann", &["mesh.>"])]).await;
    let config = Config::in_dir(&dir.path().join("avu"), &index).unwrap();
    let _avu = bus.serve(avu::module(config).unwrap()).await;
    let ann = bus.client_as(Some("ann")).await;
    let args = json!({"path": "/mesh/home/ann/x", "value": "length", "ontology": "pato"});
    let asked = call(&ann, "avu_apply_term", args.clone()).await;
    let state = asked.request_state.clone().unwrap();
    let answer =
        json!({avu::TERM_CHOICE: {"action": "accept", "content": {"term": "PATO:0000122"}}});
    for i in 0..state.len() {
        let mut bytes = state.clone().into_bytes();
        bytes[i] = if bytes[i] == b'A' { b'B' } else { b'A' };
        let altered = String::from_utf8(bytes).unwrap();
        let mut a = args.clone();
        a["requestState"] = json!(altered);
        a["inputResponses"] = answer.clone();
        let r = call(&ann, "avu_apply_term", a).await;
        assert!(
            r.is_error && r.text_content().contains("requestState"),
            "byte {i}: {}",
            r.text_content()
        );
    }
    let listed = call(&ann, "avu_list", json!({"path": "/mesh/home/ann/x"})).await;
    assert_eq!(listed.structured_content.unwrap()["avus"], json!([]));
    // The unaltered state still works: the refusals were about the bytes, not the call.
    let mut a = args.clone();
    a["requestState"] = json!(state);
    a["inputResponses"] = answer;
    assert!(!call(&ann, "avu_apply_term", a).await.is_error);
}
