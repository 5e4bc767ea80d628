//! The avu module on a real bus in the accounts layout: normalised paths, who may write where, the
//! store left as it was after every refusal, and `avu_apply_term`'s picker round trips.

use std::path::Path;

use mesh_avu::Config;
use mesh_core::client::{Client, Outcome};
use mesh_core::subjects::{FullName, ToolResult};
use mesh_ontology::index::Index;
use serde_json::{Value, json};

use crate::bus::{self, Bus, GENEROUS, Running};

fn name(s: &str) -> FullName {
    FullName::parse(s).unwrap()
}

pub fn import_fixtures(index: &Path) {
    let mut index = Index::open(index).unwrap();
    for o in ["pato", "uberon", "ncbitaxon"] {
        let f = format!("{}/tests/ontologies/{o}.obo", env!("CARGO_MANIFEST_DIR"));
        index.import(Path::new(&f), |_| {}).unwrap();
    }
}

struct Setup {
    bus: Bus,
    _avu: Running,
    /// The issuer, whom avu asks whether a ticket's call still runs.
    _catalog: Running,
    _dir: tempfile::TempDir,
}

async fn setup() -> Setup {
    let dir = tempfile::tempdir().unwrap();
    let index = dir.path().join("decide/ontology.sqlite");
    import_fixtures(&index);
    std::fs::create_dir_all(dir.path().join("avu")).unwrap();
    std::fs::write(
        dir.path().join("avu/config.json"),
        r#"{"zone": "mesh", "shared_roots": ["/mesh/projects//shared/"]}"#,
    )
    .unwrap();
    let bus = Bus::accounts_with(
        &[
            bus::module("catalog"),
            bus::module("avu"),
            bus::calling("writer", &["avu"]),
            bus::acting_for_people("relay", &["avu"]),
        ],
        &[("ann", &["mesh.>"]), ("bob", &["mesh.>"])],
    )
    .await;
    let config = Config::in_dir(&dir.path().join("avu"), &index).unwrap();
    let catalog = bus.serve_catalog().await;
    let avu = bus.serve(mesh_avu::module(config).unwrap()).await;
    Setup {
        bus,
        _avu: avu,
        _catalog: catalog,
        _dir: dir,
    }
}

async fn call(client: &Client, tool: &str, args: Value) -> ToolResult {
    client.call(&name(tool), &args, GENEROUS).await.unwrap()
}

async fn list(client: &Client, path: &str) -> Value {
    let r = call(client, "avu_list", json!({"path": path})).await;
    assert!(!r.is_error, "{}", r.text_content());
    r.structured_content.unwrap()["avus"].clone()
}

#[tokio::test]
async fn writes_go_to_the_normalised_path_and_only_where_the_actor_may() {
    let s = setup().await;
    let ann = s.bus.client_as(Some("ann")).await;
    let bob = s.bus.client_as(Some("bob")).await;

    let r = call(
        &ann,
        "avu_add",
        json!({"path": "//mesh/home/ann/./data//x.csv/", "attribute": "a", "value": "1", "unit": "u"}),
    )
    .await;
    assert!(!r.is_error, "{}", r.text_content());
    assert_eq!(
        r.structured_content.unwrap()["path"],
        "/mesh/home/ann/data/x.csv"
    );
    assert_eq!(
        list(&bob, "/mesh/home/ann/data/x.csv").await,
        json!([{"attribute": "a", "value": "1", "unit": "u"}])
    );
    // `..` resolved before the check: back into one's own home is fine…
    let r = call(
        &ann,
        "avu_add",
        json!({"path": "/mesh/home/bob/../ann/y", "avus": [{"attribute": "b", "value": "2"}]}),
    )
    .await;
    assert!(!r.is_error, "{}", r.text_content());
    assert_eq!(
        list(&ann, "/mesh/home/ann/y")
            .await
            .as_array()
            .unwrap()
            .len(),
        1
    );

    // …out of it, by any spelling, is not; and nothing is written.
    for path in [
        "/mesh/home/bob/x",
        "/mesh/home/ann/../bob/x",
        "/mesh/home/ann/../../../../mesh/home/bob/x",
        "/mesh/home/annabel/x",
        "/mesh/home",
        "/mesh/home/ann/../../home/bob/./x/",
    ] {
        let r = call(
            &ann,
            "avu_add",
            json!({"path": path, "attribute": "a", "value": "1"}),
        )
        .await;
        assert!(r.is_error, "{path}");
        assert!(
            r.text_content()
                .contains("ann@PEOPLE may not write on /mesh/"),
            "{path}: {}",
            r.text_content()
        );
    }
    assert_eq!(list(&bob, "/mesh/home/bob/x").await, json!([]));
    let r = call(
        &ann,
        "avu_add",
        json!({"path": "mesh/home/ann/x", "attribute": "a", "value": "1"}),
    )
    .await;
    assert!(r.is_error && r.text_content().contains("not absolute"));

    // Shared roots, normalised from the config file, are open to everybody with an identity.
    for who in [&ann, &bob] {
        let r = call(
            who,
            "avu_add",
            json!({"path": "/mesh/projects/shared/p", "attribute": "team", "value": "x"}),
        )
        .await;
        assert!(!r.is_error, "{}", r.text_content());
    }
    assert_eq!(
        list(&ann, "/mesh/projects/shared/p")
            .await
            .as_array()
            .unwrap()
            .len(),
        1
    );

    // A person cannot act for another: the mesh-obo subjects are no person's to publish.
    let add_for = |client: &Client, who: &str, path: &str| {
        let ticket = s.bus.ticket(who, "relay", "relay_x", GENEROUS);
        let (client, path) = (client.for_person(&ticket), path.to_owned());
        async move {
            let args = json!({"path": path, "attribute": "a", "value": "1"});
            client.call(&name("avu_add"), &args, GENEROUS).await
        }
    };
    let e = add_for(&ann, "bob", "/mesh/home/bob/z").await.unwrap_err();
    assert_eq!(e.outcome(), Outcome::Denied, "{e}");

    // A module calling as itself is no person: refused, saying so.
    let writer = s.bus.client_as(Some("writer")).await;
    let r = call(
        &writer,
        "avu_add",
        json!({"path": "/mesh/home/ann/x", "attribute": "a", "value": "1"}),
    )
    .await;
    assert!(
        r.is_error && r.text_content().contains("without an identity"),
        "{}",
        r.text_content()
    );
    // Nor can it say it acts for someone: its grant does not reach mesh-obo.
    let e = add_for(&writer, "ann", "/mesh/home/ann/x")
        .await
        .unwrap_err();
    assert_eq!(e.outcome(), Outcome::Denied, "{e}");
    // A module granted to act for people may write in ann's home, as ann via itself.
    let relay = s.bus.client_as(Some("relay")).await;
    let r = call(
        &relay.for_person(&s.bus.ticket("ann", "relay", "relay_x", GENEROUS)),
        "avu_add",
        json!({"path": "/mesh/home/ann/x", "attribute": "via", "value": "module", "source": "test"}),
    )
    .await;
    assert!(!r.is_error, "{}", r.text_content());

    // Removing: only what is there, and only where one may write.
    let r = call(
        &bob,
        "avu_remove",
        json!({"path": "/mesh/home/ann/y", "attribute": "b", "value": "2"}),
    )
    .await;
    assert!(r.is_error && r.text_content().contains("bob@PEOPLE may not write"));
    let r = call(
        &ann,
        "avu_remove",
        json!({"path": "/mesh/home/ann/y/", "avus": [{"attribute": "b", "value": "2"}, {"attribute": "c", "value": "3"}]}),
    )
    .await;
    let out = r.structured_content.unwrap();
    assert_eq!(out["removed"].as_array().unwrap().len(), 1);
    assert_eq!(out["absent"].as_array().unwrap().len(), 1);
    assert_eq!(list(&ann, "/mesh/home/ann/y").await, json!([]));

    // Bad input: named, nothing written.
    let r = call(
        &ann,
        "avu_add",
        json!({"path": "/mesh/home/ann/q", "attribute": "a\u{7}", "value": "1"}),
    )
    .await;
    assert!(
        r.is_error
            && r.text_content()
                .contains("attribute holds a control character")
    );
    let r = call(
        &ann,
        "avu_add",
        json!({"path": "/mesh/home/ann/q", "avus": [{"attribute": "a", "value": "1"}, {"attribute": " ", "value": "1"}]}),
    )
    .await;
    assert!(
        r.is_error && r.text_content().contains("avus[1].attribute is empty"),
        "{}",
        r.text_content()
    );
    assert_eq!(list(&ann, "/mesh/home/ann/q").await, json!([]));
}

#[test]
fn a_broken_config_file_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let index = dir.path().join("ontology.sqlite");
    std::fs::write(
        dir.path().join("config.json"),
        "{\"zone\": \"mesh\",\n \"shared\": []}",
    )
    .unwrap();
    let e = Config::in_dir(dir.path(), &index).err().unwrap();
    assert!(matches!(e, mesh_avu::ConfigError::Parse { .. }), "{e:?}");
    let e = e.to_string();
    assert!(
        e.contains("config.json") && e.contains("unknown field `shared`") && e.contains("line 2"),
        "{e}"
    );
    std::fs::write(dir.path().join("config.json"), r#"{"shared_roots": ["/"]}"#).unwrap();
    let e = Config::in_dir(dir.path(), &index).err().unwrap();
    assert!(
        matches!(e, mesh_avu::ConfigError::WholeTree { .. }),
        "{e:?}"
    );
    assert!(e.to_string().contains("whole tree"), "{e}");
    std::fs::write(dir.path().join("config.json"), r#"{"zone": "a/b"}"#).unwrap();
    let e = Config::in_dir(dir.path(), &index).err().unwrap();
    assert!(matches!(e, mesh_avu::ConfigError::Zone { .. }), "{e:?}");
}

/// The options of the one `term_choice` form: (value, title).
fn offered(r: &ToolResult) -> Vec<(String, String)> {
    assert!(r.needs_input(), "{}", r.text_content());
    let requests = r.input_requests.as_ref().unwrap();
    assert_eq!(requests.len(), 1);
    let form = &requests[mesh_avu::TERM_CHOICE];
    form["params"]["requestedSchema"]["properties"]["term"]["oneOf"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| {
            (
                o["const"].as_str().unwrap().to_owned(),
                o["title"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

fn answering(args: &Value, state: &str, answer: Value) -> Value {
    let mut args = args.clone();
    args["requestState"] = json!(state);
    args["inputResponses"] = json!({mesh_avu::TERM_CHOICE: answer});
    args
}

/// Answers the picker with `term` under `state`.
async fn accept(client: &Client, args: &Value, state: &str, term: &str) -> ToolResult {
    let answer = json!({"action": "accept", "content": {"term": term}});
    call(client, "avu_apply_term", answering(args, state, answer)).await
}

#[tokio::test]
async fn apply_term_asks_among_eight_and_takes_only_what_it_offered() {
    let s = setup().await;
    let ann = s.bus.client_as(Some("ann")).await;
    let bob = s.bus.client_as(Some("bob")).await;
    let args = json!({"path": "/mesh/home/ann/traps.csv", "value": "length", "ontology": "PATO"});

    let asked = call(&ann, "avu_apply_term", args.clone()).await;
    let options = offered(&asked);
    assert!(!options.is_empty() && options.len() <= 8, "{options:?}");
    let (curie, title) = options
        .iter()
        .find(|(c, _)| c == "PATO:0000122")
        .unwrap()
        .clone();
    assert_eq!(title, "length (PATO:0000122)");
    let state = asked.request_state.clone().unwrap();

    // Every refusal leaves the path as it was.
    let refusals = [
        (
            &ann,
            answering(
                &args,
                &state,
                json!({"action": "accept", "content": {"term": "PATO:9999999"}}),
            ),
            "was not one of the terms offered",
        ),
        (
            &bob,
            answering(
                &args,
                &state,
                json!({"action": "accept", "content": {"term": curie}}),
            ),
            "bob@PEOPLE may not write on /mesh/home/ann/traps.csv",
        ),
        (
            &ann,
            answering(
                &args,
                &format!("{state}x"),
                json!({"action": "accept", "content": {"term": curie}}),
            ),
            "requestState",
        ),
        (
            &ann,
            {
                let mut other = answering(
                    &args,
                    &state,
                    json!({"action": "accept", "content": {"term": curie}}),
                );
                other["value"] = json!("ear length");
                other
            },
            "another path, value or ontology",
        ),
        (
            &ann,
            {
                let mut no_state = answering(
                    &args,
                    &state,
                    json!({"action": "accept", "content": {"term": curie}}),
                );
                no_state.as_object_mut().unwrap().remove("requestState");
                no_state
            },
            "without its requestState",
        ),
    ];
    for (who, a, why) in refusals {
        let r = call(who, "avu_apply_term", a).await;
        assert!(
            r.is_error && r.text_content().contains(why),
            "{why}: {}",
            r.text_content()
        );
    }
    let mut tampered = state.clone().into_bytes();
    tampered[5] = if tampered[5] == b'A' { b'B' } else { b'A' };
    let r = call(
        &ann,
        "avu_apply_term",
        answering(
            &args,
            &String::from_utf8(tampered).unwrap(),
            json!({"action": "accept", "content": {"term": curie}}),
        ),
    )
    .await;
    assert!(
        r.is_error && r.text_content().contains("requestState"),
        "{}",
        r.text_content()
    );
    assert_eq!(list(&ann, "/mesh/home/ann/traps.csv").await, json!([]));

    // Where both may write, a state issued to ann is still ann's alone.
    let shared = json!({"path": "/mesh/projects/shared/t", "value": "length", "ontology": "pato"});
    let asked_shared = call(&ann, "avu_apply_term", shared.clone()).await;
    let r = call(
        &bob,
        "avu_apply_term",
        answering(
            &shared,
            asked_shared.request_state.as_deref().unwrap(),
            json!({"action": "accept", "content": {"term": curie}}),
        ),
    )
    .await;
    assert!(
        r.is_error
            && r.text_content()
                .contains("issued to another caller (ann@PEOPLE), not bob@PEOPLE"),
        "{}",
        r.text_content()
    );
    assert_eq!(list(&ann, "/mesh/projects/shared/t").await, json!([]));

    // A decline writes nothing, and answers the question: its state is spent.
    let r = call(
        &ann,
        "avu_apply_term",
        answering(&args, &state, json!({"action": "decline"})),
    )
    .await;
    assert!(!r.is_error && r.text_content().contains("nothing written"));
    assert_eq!(list(&ann, "/mesh/home/ann/traps.csv").await, json!([]));
    let r = accept(&ann, &args, &state, &curie).await;
    assert!(
        r.is_error && r.text_content().contains("already used"),
        "{}",
        r.text_content()
    );
    assert_eq!(list(&ann, "/mesh/home/ann/traps.csv").await, json!([]));
    let state = call(&ann, "avu_apply_term", args.clone())
        .await
        .request_state
        .unwrap();

    // The pick is written: attribute from the label, unit the CURIE.
    let r = accept(&ann, &args, &state, &curie).await;
    assert!(!r.is_error, "{}", r.text_content());
    assert_eq!(
        list(&ann, "/mesh/home/ann/traps.csv").await,
        json!([{"attribute": "pato.length", "value": "length", "unit": "PATO:0000122"}])
    );
    // The same state cannot write a second offered term.
    let other = options
        .iter()
        .map(|(c, _)| c)
        .find(|c| **c != curie)
        .expect("more than one term offered");
    let r = accept(&ann, &args, &state, other).await;
    assert!(
        r.is_error && r.text_content().contains("already used"),
        "{}",
        r.text_content()
    );
    assert_eq!(
        list(&ann, "/mesh/home/ann/traps.csv")
            .await
            .as_array()
            .unwrap()
            .len(),
        1
    );

    // The same answer sent many times at once: one writes, the others find the state spent.
    let race = json!({"path": "/mesh/home/ann/race.csv", "value": "length", "ontology": "pato"});
    let state = call(&ann, "avu_apply_term", race.clone())
        .await
        .request_state
        .unwrap();
    let replies = futures_util::future::join_all(
        options
            .iter()
            .cycle()
            .take(8)
            .map(|(c, _)| accept(&ann, &race, &state, c)),
    )
    .await;
    let written = replies.iter().filter(|r| !r.is_error).count();
    assert_eq!(written, 1, "{replies:?}");
    for r in replies.iter().filter(|r| r.is_error) {
        assert!(
            r.text_content().contains("already used"),
            "{}",
            r.text_content()
        );
    }
    assert_eq!(
        list(&ann, "/mesh/home/ann/race.csv")
            .await
            .as_array()
            .unwrap()
            .len(),
        1
    );

    // With a CURIE or an IRI nobody is asked.
    let r = call(
        &ann,
        "avu_apply_term",
        json!({"path": "/mesh/home/ann/traps.csv", "value": "Peromyscus leucopus", "ontology": "ncbitaxon", "iri": "http://purl.obolibrary.org/obo/NCBITaxon_10041"}),
    )
    .await;
    assert!(!r.is_error, "{}", r.text_content());
    let r = call(
        &ann,
        "avu_apply_term",
        json!({"path": "/mesh/home/ann/traps.csv", "value": "x", "ontology": "pato", "curie": "PATO:9999998"}),
    )
    .await;
    assert!(r.is_error && r.text_content().contains("no term PATO:9999998 in pato"));
    let r = call(
        &ann,
        "avu_apply_term",
        json!({"path": "/mesh/home/ann/traps.csv", "value": "x", "ontology": "go"}),
    )
    .await;
    assert!(
        r.is_error && r.text_content().contains("not in the index"),
        "{}",
        r.text_content()
    );
    let r = call(
        &bob,
        "avu_apply_term",
        json!({"path": "/mesh/home/ann/traps.csv", "value": "length", "ontology": "pato"}),
    )
    .await;
    assert!(
        r.is_error && r.text_content().contains("bob@PEOPLE may not write"),
        "asked nothing first"
    );
    assert_eq!(
        list(&ann, "/mesh/home/ann/traps.csv")
            .await
            .as_array()
            .unwrap()
            .len(),
        2
    );
}
