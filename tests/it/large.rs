//! Results larger than the bus carries in one message: written, then answered whole (never
//! "failed" after the write committed), fetched by the caller they belong to only, with the
//! digest checked — through the mesh's client, and by hand over a raw socket as a third-party
//! client would.

use mesh_avu::Config;
use mesh_core::client::Client;
use mesh_core::subjects::claim::{CLAIM_META, Claim};
use mesh_core::subjects::{FullName, ToolResult};
use serde_json::{Value, json};

use crate::bus::{Bus, GENEROUS};
use crate::raw::{Raw, Reply};

async fn call(client: &Client, tool: &str, args: Value) -> ToolResult {
    client
        .call(&FullName::parse(tool).unwrap(), &args, GENEROUS)
        .await
        .unwrap()
}

/// A module whose one tool answers as many bytes as asked.
fn blob() -> mesh_core::runtime::Module {
    use mesh_core::runtime::{Call, Module, Tool};
    Module::new("blob", "1.0.0", "large answers").tool(Tool::new(
        "get",
        "answers as many bytes as asked",
        json!({"type": "object", "properties": {"bytes": {"type": "integer"}}}),
        |call: Call| async move {
            let n = call.args["bytes"].as_u64().unwrap_or(0) as usize;
            ToolResult::text("x".repeat(n))
        },
    ))
}

/// A claim's chunks fetched by hand from `from`, in order, as subjects/README.md says.
async fn fetched(raw: &mut Raw, from: &str, claim: &Claim) -> Vec<u8> {
    let mut whole = Vec::new();
    let mut after = 0;
    for chunk in 0..claim.chunks {
        let fetch = json!({"id": claim.id, "chunk": chunk, "after": after}).to_string();
        let r = raw.request(from, b"", fetch.as_bytes()).await;
        let Reply::Message { headers, payload } = r else {
            panic!("chunk {chunk} of {from} was not given: {r:?}")
        };
        after = headers
            .lines()
            .find_map(|l| l.strip_prefix("Mesh-Claim-Seq: "))
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        whole.extend_from_slice(&payload);
    }
    whole
}

/// 330 AVUs of about 2.6 KB each: the request fits in one message, its answer does not.
fn many_avus() -> Value {
    let avus: Vec<Value> = (0..330)
        .map(|i| json!({"attribute": format!("a{i:03}"), "value": format!("{i}-{}", "v".repeat(2600))}))
        .collect();
    json!({"path": "/mesh/home/ann/big.csv", "avus": avus})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_result_too_large_for_the_bus_arrives_whole_and_only_to_its_caller() {
    let dir = tempfile::tempdir().unwrap();
    let bus = Bus::accounts(
        &["avu"],
        &[("ann", &["mesh.avu.>"]), ("bob", &["mesh.avu.>"])],
    )
    .await;
    let config =
        Config::in_dir(&dir.path().join("avu"), &dir.path().join("ontology.sqlite")).unwrap();
    let _avu = bus.serve(mesh_avu::module(config).unwrap()).await;
    let ann = bus.client_as(Some("ann")).await;
    let max = ann.nats().max_payload();
    let args = many_avus();
    assert!(args.to_string().len() < max, "the request itself fits");

    // Written, and answered with what was written: not an error.
    let r = call(&ann, "avu_add", args.clone()).await;
    assert!(!r.is_error, "{}", r.text_content());
    let answer = serde_json::to_vec(&r).unwrap();
    assert!(
        answer.len() > max,
        "the answer is larger than one message: {}",
        answer.len()
    );
    assert_eq!(
        r.structured_content.as_ref().unwrap()["added"]
            .as_array()
            .unwrap()
            .len(),
        330
    );
    // Again: everything is there already.
    let r = call(&ann, "avu_add", args).await;
    assert!(!r.is_error, "{}", r.text_content());
    assert_eq!(
        r.structured_content.as_ref().unwrap()["present"]
            .as_array()
            .unwrap()
            .len(),
        330
    );
    // And it reads back, whole.
    let r = call(&ann, "avu_list", json!({"path": "/mesh/home/ann/big.csv"})).await;
    assert!(!r.is_error, "{}", r.text_content());
    assert_eq!(
        r.structured_content.unwrap()["avus"]
            .as_array()
            .unwrap()
            .len(),
        330
    );

    // A listing that grows pages with a cursor: 330 as 100 + 100 + 100 + 30, in order, each
    // AVU once; a cursor this tool did not give is refused by name.
    let mut seen: Vec<Value> = Vec::new();
    let mut cursor: Option<String> = None;
    let mut pages = 0;
    loop {
        let mut args = json!({"path": "/mesh/home/ann/big.csv", "limit": 100});
        if let Some(c) = &cursor {
            args["cursor"] = json!(c);
        }
        let page = call(&ann, "avu_list", args).await;
        assert!(!page.is_error, "{}", page.text_content());
        let out = page.structured_content.unwrap();
        seen.extend(out["avus"].as_array().unwrap().iter().cloned());
        pages += 1;
        match out.get("next").and_then(Value::as_str) {
            Some(next) => cursor = Some(next.to_owned()),
            None => break,
        }
    }
    assert_eq!(pages, 4);
    assert_eq!(seen.len(), 330);
    let attributes: Vec<&str> = seen
        .iter()
        .map(|a| a["attribute"].as_str().unwrap())
        .collect();
    let mut sorted = attributes.clone();
    sorted.sort();
    sorted.dedup();
    assert_eq!(attributes, sorted, "in order, each once");
    let r = call(
        &ann,
        "avu_list",
        json!({"path": "/mesh/home/ann/big.csv", "cursor": "bm90IGEgY3Vyc29y"}),
    )
    .await;
    assert!(
        r.is_error && r.text_content().contains("is not one this tool gave"),
        "{}",
        r.text_content()
    );

    // By hand, as subjects/README.md says: the answer is a claim; bob cannot fetch it, ann can.
    let mut raw = Raw::connect(&bus.url(), "ann", "pw-ann").await;
    let reply = raw
        .request(
            "mesh.avu.list",
            b"",
            br#"{"path": "/mesh/home/ann/big.csv"}"#,
        )
        .await;
    let Reply::Message { headers, .. } = &reply else {
        panic!("{reply:?}")
    };
    assert!(headers.contains("Mesh-Claim: "), "{headers}");
    let claim: Claim = serde_json::from_value(reply.json()["_meta"][CLAIM_META].clone()).unwrap();
    assert!(claim.chunks > 1, "{claim:?}");
    let fetch = |chunk: usize, after: u64| {
        json!({"id": claim.id, "chunk": chunk, "after": after})
            .to_string()
            .into_bytes()
    };
    // Fetched from the instance that keeps it, which the claim names.
    let from = format!("mesh.avu.result.{}", claim.instance);
    let from = from.as_str();
    let mut bob = Raw::connect(&bus.url(), "bob", "pw-bob").await;
    let refused = bob.request(from, b"", &fetch(0, 0)).await;
    let Reply::Message { headers, .. } = &refused else {
        panic!("{refused:?}")
    };
    assert!(
        headers.contains("Nats-Service-Error-Code: 404"),
        "{headers}"
    );
    // A forged stamp does not make bob ann.
    let forged =
        b"NATS/1.0\r\nX: a\nNats-Request-Info: {\"acc\":\"PEOPLE\",\"user\":\"ann\"}\r\n\r\n";
    let refused = bob.request(from, forged, &fetch(0, 0)).await;
    let Reply::Message { headers, .. } = &refused else {
        panic!("{refused:?}")
    };
    assert!(
        headers.contains("Nats-Service-Error-Code: 403"),
        "{headers}"
    );

    // An id written to break the answer's header block: the refusal stays one header line,
    // and the module answers on.
    let crafted = json!({"id": "x\r\nNats-Service-Error-Code: 200\r\n\r\n", "chunk": 0});
    let r = bob.request(from, b"", crafted.to_string().as_bytes()).await;
    let Reply::Message { headers, .. } = &r else {
        panic!("{r:?}")
    };
    let codes: Vec<&str> = headers
        .lines()
        .filter(|l| l.starts_with("Nats-Service-Error-Code:"))
        .collect();
    assert_eq!(codes, ["Nats-Service-Error-Code: 404"], "{headers}");

    let whole = fetched(&mut raw, from, &claim).await;
    assert_eq!(whole.len(), claim.size);
    assert_eq!(mesh_core::subjects::claim::digest(&whole), claim.digest);
    let listed: Value = serde_json::from_slice(&whole).unwrap();
    assert_eq!(
        listed["structuredContent"]["avus"]
            .as_array()
            .unwrap()
            .len(),
        330
    );
    // Read whole, it is gone: a second fetch finds nothing.
    let again = raw.request(from, b"", &fetch(0, 0)).await;
    let Reply::Message { headers, .. } = &again else {
        panic!("{again:?}")
    };
    assert!(
        headers.contains("Nats-Service-Error-Code: 404"),
        "{headers}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mesh_call_and_the_relay_hand_on_a_large_result_whole() {
    let dir = tempfile::tempdir().unwrap();
    let bus = Bus::accounts(&["catalog", "avu"], &[("ann", &["mesh.avu.>"])]).await;
    let _catalog = bus.serve_catalog().await;
    let config =
        Config::in_dir(&dir.path().join("avu"), &dir.path().join("ontology.sqlite")).unwrap();
    let _avu = bus.serve(mesh_avu::module(config).unwrap()).await;
    let ann = bus.client_as(Some("ann")).await;
    assert!(!call(&ann, "avu_add", many_avus()).await.is_error);

    // mesh call prints the whole result.
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_mesh"))
        .args(bus.flags("ann"))
        .args(["call", "avu_list", "path=/mesh/home/ann/big.csv", "--json"])
        .output()
        .await
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let printed: Value = serde_json::from_slice(&out.stdout).unwrap();
    let avus = &printed["structuredContent"]["avus"];
    assert_eq!(
        avus.as_array().map(Vec::len),
        Some(330),
        "{}",
        &printed.to_string()[..300]
    );

    // mesh mcp answers the MCP client with all of it, in one JSON-RPC line.
    let mut relay = crate::hostile_relay::Stdio::start(&bus).await;
    relay
        .send(r#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"avu_list","arguments":{"path":"/mesh/home/ann/big.csv"}}}"#)
        .await;
    let r = relay.answer(2, &mut 0).await;
    assert_ne!(r["result"]["isError"], true, "{}", &r.to_string()[..300]);
    assert_eq!(
        r["result"]["structuredContent"]["avus"]
            .as_array()
            .map(Vec::len),
        Some(330)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_nats_py_client_follows_a_claim_as_subjects_says() {
    let dir = tempfile::tempdir().unwrap();
    let bus = Bus::accounts(&["avu"], &[("ann", &["mesh.avu.>"])]).await;
    let config =
        Config::in_dir(&dir.path().join("avu"), &dir.path().join("ontology.sqlite")).unwrap();
    let _avu = bus.serve(mesh_avu::module(config).unwrap()).await;
    let ann = bus.client_as(Some("ann")).await;
    assert!(!call(&ann, "avu_add", many_avus()).await.is_error);
    let out = crate::bus::json_of(
        tokio::process::Command::new(crate::bus::python())
            .arg(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/py/claim.py"))
            .args(bus.foreign_login("ann"))
            .args(["avu", "list"])
            .arg(json!({"path": "/mesh/home/ann/big.csv"}).to_string()),
    )
    .await;
    assert_eq!(out["claimed"], true);
    assert_eq!(out["digest_ok"], true);
    assert_eq!(
        out["result"]["structuredContent"]["avus"]
            .as_array()
            .map(Vec::len),
        Some(330)
    );
}

/// The runtime keeps for fetching only what a handler answered: a refusal that would repeat a
/// huge argument back (a schema error names the value) is cut, never stored, so no request
/// can make a module fill its JetStream with its own echo.
#[tokio::test]
async fn a_refusal_is_cut_not_kept() {
    let bus = Bus::accounts(&["echo"], &[("ann", &["mesh.echo.>"])]).await;
    let _echo = bus.serve(mesh_echo::module()).await;
    let mut raw = Raw::connect(&bus.url(), "ann", "pw-ann").await;
    // 600 KB of escaped backslashes: the schema's error names the value, and escaping doubles
    // it again, past one message.
    let body = format!(r#"{{"ms": "{}"}}"#, "\\\\".repeat(300_000));
    let reply = raw.request("mesh.echo.sleep", b"", body.as_bytes()).await;
    let Reply::Message { headers, payload } = &reply else {
        panic!("{reply:?}")
    };
    assert!(!headers.contains("Mesh-Claim"), "{headers}");
    assert!(
        headers.contains("Nats-Service-Error-Code: 400"),
        "{headers}"
    );
    assert!(payload.len() < 64 * 1024, "{}", payload.len());
    assert!(
        reply.json()["content"][0]["text"]
            .as_str()
            .unwrap()
            .contains("(cut: the refusal was")
    );
}

/// A caller's quota counts what waits to be fetched, not what was: 14 results of 10 MB one
/// after another (140 MB, past the 128 MiB quota) each arrive whole.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn results_fetched_whole_count_against_no_quota() {
    let bus = Bus::accounts(&["blob"], &[("ann", &["mesh.blob.>"])]).await;
    let blob = blob();
    let _blob = bus.serve(blob).await;
    let ann = bus.client_as(Some("ann")).await;
    for i in 0..14 {
        let r = call(&ann, "blob_get", json!({"bytes": 10_000_000})).await;
        assert!(
            !r.is_error,
            "call {i}: {}",
            &r.text_content()[..200.min(r.text_content().len())]
        );
        assert_eq!(r.text_content().len(), 10_000_000, "call {i}");
    }
}

/// A result is kept by the instance that made it: an instance told to stop right after it
/// answered (a module upgraded, a bridged server replaced) still gives it to its caller,
/// who fetches at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_instance_stopping_after_its_answer_still_gives_the_result() {
    let bus = Bus::accounts(&["blob"], &[("ann", &["mesh.blob.>"])]).await;
    let blob = blob();
    let running = bus.serve(blob).await;
    let mut raw = Raw::connect(&bus.url(), "ann", "pw-ann").await;
    let reply = raw
        .request("mesh.blob.get", b"", br#"{"bytes": 3000000}"#)
        .await;
    let claim: Claim = serde_json::from_value(reply.json()["_meta"][CLAIM_META].clone()).unwrap();
    // Stopped now, before anything is fetched.
    let stopping = tokio::spawn(running.stop());
    let from = format!("mesh.blob.result.{}", claim.instance);
    let whole = fetched(&mut raw, &from, &claim).await;
    assert_eq!(mesh_core::subjects::claim::digest(&whole), claim.digest);
    stopping.await.unwrap();
}

/// Four people keep as many large results as they can without fetching (each within their
/// quota); a fifth person's large result then still arrives whole. Each keeper, once their
/// results fill their part of the instance's room, hears busy before the tool runs — the
/// tool's runs are counted — never "ran, but could not be kept". (Before: the four kept about
/// 490 MiB and the fifth's writing call was committed, then reported failed.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn four_keepers_cannot_fill_the_room_a_fifth_needs() {
    use mesh_core::runtime::{Call, Module, Tool};
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    let runs = Arc::new(AtomicUsize::new(0));
    let counted = runs.clone();
    let blob = Module::new("blob", "1.0.0", "large answers").tool(Tool::new(
        "get",
        "answers as many bytes as asked, counting its runs",
        json!({"type": "object", "properties": {"bytes": {"type": "integer"}}}),
        move |call: Call| {
            counted.fetch_add(1, Ordering::SeqCst);
            async move {
                let n = call.args["bytes"].as_u64().unwrap_or(0) as usize;
                ToolResult::text("x".repeat(n))
            }
        },
    ));
    let keepers = ["k1", "k2", "k3", "k4"];
    let mut people: Vec<(&str, &[&str])> =
        keepers.iter().map(|k| (*k, &["mesh.blob.>"][..])).collect();
    people.push(("vic", &["mesh.blob.>"]));
    let bus = Bus::accounts(&["blob"], &people).await;
    let _blob = bus.serve(blob).await;
    let mut kept_all = 0;
    for k in keepers {
        // By hand: the claim is the answer, and nothing is fetched.
        let nats = bus.client_as(Some(k)).await.nats().clone();
        let mut kept = 0;
        loop {
            let before = runs.load(Ordering::SeqCst);
            let m = tokio::time::timeout(
                GENEROUS,
                nats.request("mesh.blob.get", r#"{"bytes": 20000000}"#.into()),
            )
            .await
            .expect("an answer")
            .unwrap();
            if let Some(after) = mesh_core::subjects::limits::retry_after(m.headers.as_ref()) {
                assert_eq!(
                    runs.load(Ordering::SeqCst),
                    before,
                    "{k}'s refused call ran"
                );
                assert!(
                    after > std::time::Duration::from_secs(60),
                    "{k}: retry after {after:?}"
                );
                break;
            }
            let r: ToolResult = serde_json::from_slice(&m.payload).unwrap();
            assert!(!r.is_error, "{k} after {kept}: {}", r.text_content());
            assert!(r.extra["_meta"].get(CLAIM_META).is_some(), "not a claim");
            kept += 20_000_000;
        }
        assert!(kept > 0, "{k} kept nothing");
        kept_all += kept;
    }
    eprintln!("four keepers keep {} MiB", kept_all / 1024 / 1024);
    // Room is left for the fifth's result whatever the four did.
    assert!(
        kept_all + 20_000_000 <= mesh_core::subjects::claim::MAX_KEPT_BYTES,
        "the four keep {kept_all} bytes"
    );
    let vic = bus.client_as(Some("vic")).await;
    let r = call(&vic, "blob_get", json!({"bytes": 20_000_000})).await;
    assert!(
        !r.is_error,
        "{}",
        &r.text_content()[..200.min(r.text_content().len())]
    );
    assert_eq!(r.text_content().len(), 20_000_000);
}
