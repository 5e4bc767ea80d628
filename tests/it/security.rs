//! Security checks over a real bus that gather what a hostile caller would try: every path
//! spelling built from the dangerous segments, a requestState altered at every byte, a person
//! posing as another with raw header blocks, modules reaching for a person's identity or the
//! catalogue's bucket. (Forged identity headers in general: identity.rs; the console's
//! loopback and Origin rules: mcp.rs; replayed and expired states: apply.rs.)

use mesh_avu::Config;
use mesh_core::client::Client;
use mesh_core::subjects::{FullName, ToolResult};
use serde_json::{Value, json};

use crate::avu::import_fixtures;
use crate::bus::{self, Bus, GENEROUS};
use crate::raw::{Raw, Reply};

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
    let _avu = bus.serve(mesh_avu::module(config).unwrap()).await;
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
    let _avu = bus.serve(mesh_avu::module(config).unwrap()).await;
    let ann = bus.client_as(Some("ann")).await;
    let args = json!({"path": "/mesh/home/ann/x", "value": "length", "ontology": "pato"});
    let asked = call(&ann, "avu_apply_term", args.clone()).await;
    let state = asked.request_state.clone().unwrap();
    let answer =
        json!({mesh_avu::TERM_CHOICE: {"action": "accept", "content": {"term": "PATO:0000122"}}});
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

/// avu and a catalogue, two people, and modules that want what is not theirs.
async fn hostile_setup(dir: &std::path::Path) -> (Bus, Vec<crate::bus::Running>) {
    let index = dir.join("decide/ontology.sqlite");
    import_fixtures(&index);
    let mut greedy = bus::calling("greedy", &["avu"]);
    greedy.jetstream = true;
    let bus = Bus::accounts_with(
        &[
            bus::module("catalog"),
            bus::module("echo"),
            bus::module("avu"),
            bus::module("weather"),
            greedy,
        ],
        &[("ann", &["mesh.>"]), ("bob", &["mesh.avu.add"])],
    )
    .await;
    let catalog = bus.serve_catalog().await;
    let echo = bus.serve(mesh_echo::module()).await;
    let config = Config::in_dir(&dir.join("avu"), &index).unwrap();
    let avu = bus.serve(mesh_avu::module(config).unwrap()).await;
    (bus, vec![catalog, echo, avu])
}

async fn avus(client: &Client, path: &str) -> Value {
    call(client, "avu_list", json!({"path": path}))
        .await
        .structured_content
        .unwrap()["avus"]
        .clone()
}

#[tokio::test]
async fn a_person_cannot_write_as_another_with_any_header_block() {
    let dir = tempfile::tempdir().unwrap();
    let (bus, _running) = hostile_setup(dir.path()).await;
    let ann = bus.client_as(Some("ann")).await;
    // bob may publish mesh.avu.add and nothing else: the reproduction from the report.
    let mut bob = Raw::connect(&bus.url(), "bob", "pw-bob").await;
    let body = br#"{"path": "/mesh/home/ann/x", "attribute": "a", "value": "forged"}"#;
    for block in [
        "NATS/1.0\r\nX: a\nNats-Request-Info: {\"acc\":\"PEOPLE\",\"user\":\"ann\"}\r\n\r\n",
        "NATS/1.0\r\nnats-request-info: {\"acc\":\"PEOPLE\",\"user\":\"ann\"}\r\n\r\n",
        "NATS/1.0\r\nNats-Request-Info: {\"acc\":\"PEOPLE\",\"user\":\"ann\"}\r\n\r\n",
        "NATS/1.0\r\nMesh-On-Behalf-Of: ann@PEOPLE\r\n\r\n",
    ] {
        let r = bob
            .request("mesh.avu.add", block.as_bytes(), body)
            .await
            .json();
        assert_eq!(r["isError"], true, "{block:?}: {r}");
    }
    assert_eq!(avus(&ann, "/mesh/home/ann/x").await, json!([]));

    // A question asked of ann cannot be answered by bob posing as ann either.
    let args = json!({"path": "/mesh/home/ann/t", "value": "length", "ontology": "pato"});
    let asked = call(&ann, "avu_apply_term", args.clone()).await;
    let mut answer = args.clone();
    answer["requestState"] = json!(asked.request_state.unwrap());
    answer["inputResponses"] =
        json!({mesh_avu::TERM_CHOICE: {"action": "accept", "content": {"term": "PATO:0000122"}}});
    let mut raw_bob = Raw::connect(&bus.url(), "bob", "pw-bob").await;
    let block =
        "NATS/1.0\r\nX: a\nNats-Request-Info: {\"acc\":\"PEOPLE\",\"user\":\"ann\"}\r\n\r\n";
    // bob may not publish avu_apply_term at all; with it (ann's grant) the identity is refused.
    match raw_bob
        .request(
            "mesh.avu.apply_term",
            block.as_bytes(),
            answer.to_string().as_bytes(),
        )
        .await
    {
        Reply::Err(e) => assert!(e.contains("Permissions Violation"), "{e}"),
        other => panic!("bob reached apply_term: {other:?}"),
    }
    let mut raw_ann = Raw::connect(&bus.url(), "ann", "pw-ann").await;
    let forged_other =
        "NATS/1.0\r\nX: a\nNats-Request-Info: {\"acc\":\"PEOPLE\",\"user\":\"bob\"}\r\n\r\n";
    let r = raw_ann
        .request(
            "mesh.avu.apply_term",
            forged_other.as_bytes(),
            answer.to_string().as_bytes(),
        )
        .await
        .json();
    assert_eq!(r["isError"], true, "{r}");
    assert_eq!(avus(&ann, "/mesh/home/ann/t").await, json!([]));
}

#[tokio::test]
async fn a_module_without_a_grant_cannot_make_a_tool_see_a_person() {
    let dir = tempfile::tempdir().unwrap();
    let (bus, _running) = hostile_setup(dir.path()).await;
    let ann = bus.client_as(Some("ann")).await;
    let body = br#"{"path": "/mesh/home/ann/x", "attribute": "a", "value": "forged"}"#;
    let person = "{\"acc\":\"PEOPLE\",\"user\":\"ann\"}";
    // greedy may call avu as itself: avu sees a module, never ann, whatever it sends.
    let mut greedy = Raw::connect(&bus.url(), "greedy", "pw-greedy").await;
    for block in [
        format!("NATS/1.0\r\nNats-Request-Info: {person}\r\n\r\n"),
        format!("NATS/1.0\r\nX: a\nNats-Request-Info: {person}\r\n\r\n"),
        "NATS/1.0\r\nMesh-On-Behalf-Of: ann@PEOPLE\r\n\r\n".to_owned(),
    ] {
        let r = greedy
            .request("mesh.avu.add", block.as_bytes(), body)
            .await
            .json();
        assert_eq!(r["isError"], true, "{block:?}: {r}");
    }
    // Its mesh-obo twin, and anything of a module with no grant at all, is the server's no.
    let block = "NATS/1.0\r\nMesh-On-Behalf-Of: ann@PEOPLE\r\n\r\n";
    match greedy
        .request("mesh-obo.avu.add", block.as_bytes(), body)
        .await
    {
        Reply::Err(e) => assert!(e.contains("Permissions Violation"), "{e}"),
        other => panic!("greedy reached mesh-obo: {other:?}"),
    }
    let mut weather = Raw::connect(&bus.url(), "weather", "pw-weather").await;
    for subject in ["mesh.avu.add", "mesh-obo.avu.add", "mesh.echo.whoami"] {
        match weather.request(subject, block.as_bytes(), body).await {
            Reply::Err(e) => assert!(e.contains("Permissions Violation"), "{subject}: {e}"),
            other => panic!("weather reached {subject}: {other:?}"),
        }
    }
    assert_eq!(avus(&ann, "/mesh/home/ann/x").await, json!([]));
}

#[tokio::test]
async fn no_module_can_rewrite_or_destroy_the_catalogue() {
    let dir = tempfile::tempdir().unwrap();
    let (bus, _running) = hostile_setup(dir.path()).await;
    let ann = bus.client_as(Some("ann")).await;
    let catalogue = || async {
        let r = call(&ann, "catalog_modules", json!({})).await;
        r.structured_content.unwrap()["modules"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| json!([m["module"], m["version"], m["tools"], m["instances"]]))
            .collect::<Vec<_>>()
    };
    let before = catalogue().await;
    assert_eq!(before.len(), 3, "{before:?}");

    // The bucket and its stream, straight: no module's permissions reach them. Every module
    // has a JetStream of its own account (greedy's unbounded; the others' for their large
    // results), which holds no catalogue; `$KV` is greedy's alone to publish.
    for who in ["weather", "greedy", "echo"] {
        let mut raw = Raw::connect(&bus.url(), who, &format!("pw-{who}")).await;
        for subject in [
            "$KV.mesh_catalog.modules.echo",
            "$JS.API.STREAM.PURGE.KV_mesh_catalog",
            "$JS.API.STREAM.DELETE.KV_mesh_catalog",
        ] {
            let r = raw.request(subject, b"", b"{}").await;
            match (who, subject, &r) {
                ("greedy", "$KV.mesh_catalog.modules.echo", Reply::NoResponders) => {
                    // Its own account has no such stream to store the write.
                }
                (_, s, Reply::Message { payload, .. }) if s.starts_with("$JS.API.") => {
                    // Its own JetStream answers: there is no such stream in its account.
                    let v: serde_json::Value = serde_json::from_slice(payload).unwrap();
                    assert_eq!(v["error"]["code"], 404, "{subject}: {v}");
                    assert_eq!(v["error"]["err_code"], 10059, "{subject}: {v}");
                }
                (_, _, Reply::Err(e)) if who != "greedy" => {
                    assert!(e.contains("Permissions Violation"), "{who} {subject}: {e}")
                }
                _ => panic!("{who} reached {subject}: {r:?}"),
            }
        }
    }

    // Through the catalogue's own tools: only a module's own entries.
    let echo_id = call(&ann, "catalog_modules", json!({"module": "echo"})).await;
    assert!(!echo_id.is_error);
    let weather = bus.client_as(Some("weather")).await;
    let as_echo = json!({"module": "echo", "version": "6.6.6", "description": "pwned",
        "tools": ["pwned"], "instance": "x", "started_ms": 0});
    for (who, client) in [("weather", &weather)] {
        let r = call(client, "catalog_register", as_echo.clone()).await;
        assert!(
            r.is_error && r.text_content().contains("refused"),
            "{who}: {}",
            r.text_content()
        );
        let r = call(
            client,
            "catalog_unregister",
            json!({"module": "echo", "instance": "x"}),
        )
        .await;
        assert!(
            r.is_error && r.text_content().contains("refused"),
            "{who}: {}",
            r.text_content()
        );
    }
    // A person, even one granted everything, may not register at all: the bus says so, to a
    // raw client as much as to ours.
    let mut raw_ann = Raw::connect(&bus.url(), "ann", "pw-ann").await;
    for subject in ["mesh.catalog.register", "mesh.catalog.unregister"] {
        let refused = raw_ann.publish(subject, br#"{"module":"echo"}"#).await;
        assert!(
            refused
                .as_deref()
                .is_some_and(|e| e.contains("Permissions Violation")),
            "{subject}: {refused:?}"
        );
    }
    for (tool, args) in [
        ("catalog_register", as_echo.clone()),
        (
            "catalog_unregister",
            json!({"module": "echo", "instance": "x"}),
        ),
    ] {
        let e = ann
            .call(&FullName::parse(tool).unwrap(), &args, GENEROUS)
            .await
            .unwrap_err();
        assert_eq!(
            e.outcome(),
            mesh_core::client::Outcome::Denied,
            "{tool}: {e}"
        );
    }
    // A module may register itself, but not without bound.
    let mine = |i: usize| {
        json!({"module": "weather", "version": "1.0.0",
        "tools": ["forecast"], "instance": format!("i{i}"), "started_ms": 0})
    };
    // However fast it asks: all at once, exactly the bound is accepted (what is past its
    // share of the catalogue is told busy, and asks again when told to).
    let max = mesh_catalog::MAX_INSTANCES;
    let register = |i: usize| {
        let weather = weather.clone();
        async move {
            let tool = FullName::parse("catalog_register").unwrap();
            loop {
                match weather.call(&tool, &mine(i), GENEROUS).await {
                    Ok(r) => return r,
                    Err(mesh_core::client::CallError::Busy { retry_after, .. }) => {
                        tokio::time::sleep(retry_after.min(std::time::Duration::from_millis(200)))
                            .await
                    }
                    Err(e) => panic!("{e}"),
                }
            }
        }
    };
    let all = futures_util::future::join_all((0..max + 100).map(register)).await;
    assert_eq!(all.iter().filter(|r| !r.is_error).count(), max);
    let r = call(&weather, "catalog_register", mine(100_000)).await;
    assert!(
        r.is_error && r.text_content().contains("instances"),
        "{}",
        r.text_content()
    );

    let after: Vec<Value> = catalogue()
        .await
        .into_iter()
        .filter(|m| m[0] != "weather")
        .collect();
    assert_eq!(after, before);
}
