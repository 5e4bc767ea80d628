//! The catalogue's listing verb and its change events: discovery in one read of the catalogue,
//! pages that stay under the bus's message limit, hostile listing requests, who may say
//! that something changed, and the tools digest's published vectors against Python.

use std::time::Duration;

use futures_util::StreamExt;
use serde_json::{Value, json};

use mesh_bus::layout::{self, ModuleUser, Person};
use mesh_core::runtime::{Call, Module, Tool};
use mesh_core::subjects::catalog::{CHANGED_SUBJECT, Changed, LISTING_SUBJECT, ListingPage};
use mesh_core::subjects::{Listing, ToolResult, tools_digest};

use crate::bus::{Bus, GENEROUS, module};
use crate::raw::{Raw, Reply};

/// A module of `tools` tools whose descriptions are long enough that a dozen of them fill
/// more than one 64 KiB page.
fn wide(name: &str, tools: usize) -> Module {
    let mut m = Module::new(name, "1.0.0", "a module with many tools");
    for t in 0..tools {
        m = m.tool(Tool::new(
            format!("t{t}"),
            format!("tool {t} of {name}: {}", "words ".repeat(60)),
            json!({"type": "object", "properties": {"x": {"type": "string", "description": "x".repeat(100)}}}),
            |_c: Call| async { ToolResult::text("ok") },
        ));
    }
    m
}

/// The accounts layout with a bus limit of 64 KiB, the modules given, and ann (no tools).
pub async fn small_bus(modules: &[&str]) -> Bus {
    let users: Vec<ModuleUser> = modules.iter().map(|m| module(m)).collect();
    let ann = Person {
        user: "ann".into(),
        password: "pw-ann".into(),
        may_call: vec![],
    };
    let conf = layout::accounts(-1, std::path::Path::new("@DIR@/js"), &users, &[ann]);
    Bus::from_generated_config(&format!("max_payload: 65536\n{conf}")).await
}

/// The listing, page by page, as a person asks it over a plain socket.
async fn pages(raw: &mut Raw) -> Vec<ListingPage> {
    let mut out: Vec<ListingPage> = Vec::new();
    let mut request = json!({});
    loop {
        let reply = raw
            .request(LISTING_SUBJECT, b"", request.to_string().as_bytes())
            .await;
        let Reply::Message { payload, .. } = &reply else {
            panic!("no page: {reply:?}");
        };
        assert!(payload.len() <= 65536, "a page of {} bytes", payload.len());
        let page: ListingPage = serde_json::from_slice(payload).unwrap();
        let next = page.next.clone();
        out.push(page);
        match next {
            Some(after) => request = json!({ "after": after }),
            None => return out,
        }
        assert!(out.len() < 100, "the listing never ends");
    }
}

/// Twelve modules of 20 tools on a bus whose messages are at most 64 KiB: the listing comes
/// in pages that each fit, and discovery follows them and lists every tool exactly as each
/// module's own `tools` verb says it. A module that registered and stopped is named as not
/// answering. A module whose tools fit a registration but not a page of their own is listed
/// by name (discovery asks it); one whose tools do not fit a registration registers by name.
#[tokio::test]
async fn discovery_reads_the_catalogue_in_pages_under_the_bus_limit() {
    let names: Vec<String> = (0..12).map(|i| format!("w{i:02}")).collect();
    let mut all: Vec<&str> = names.iter().map(String::as_str).collect();
    all.extend(["catalog", "gone", "huge", "vast"]);
    let bus = small_bus(&all).await;
    let _catalog = bus.serve_catalog().await;
    let mut running = Vec::new();
    for n in &names {
        running.push(bus.serve(wide(n, 20)).await);
    }
    bus.serve(wide("gone", 2)).await.stop().await;
    // About 62 KB of tools: a registration fits in 64 KiB, a page (less room) does not.
    let huge = bus.client_as(Some("huge")).await;
    let spec =
        json!({"name": "t", "inputSchema": {"type": "object"}, "description": "d".repeat(960)});
    let specs: Vec<Value> = (0..62)
        .map(|i| {
            let mut s = spec.clone();
            s["name"] = json!(format!("t{i}"));
            s
        })
        .collect();
    let registration = json!({"module": "huge", "version": "1.0.0", "description": "",
        "tools": (0..62).map(|i| format!("t{i}")).collect::<Vec<_>>(), "specs": specs,
        "instance": "i1", "started_ms": 1});
    let size = registration.to_string().len();
    assert!((61_500..65_000).contains(&size), "{size}");
    let name = mesh_core::subjects::FullName::parse("catalog_register").unwrap();
    let r = huge.call(&name, &registration, GENEROUS).await.unwrap();
    assert!(!r.is_error, "{}", r.text_content());
    // 150 tools of about 1 KB: more than the bus carries in one message.
    running.push(bus.serve(wide("vast", 150)).await);

    let mut raw = Raw::connect(&bus.url(), "ann", "pw-ann").await;
    let pages = pages(&mut raw).await;
    assert!(pages.len() >= 3, "{} pages", pages.len());
    let listed: Vec<&str> = pages
        .iter()
        .flat_map(|p| p.modules.iter().map(|m| m.module.as_str()))
        .collect();
    let mut want = all.clone();
    want.sort();
    assert_eq!(listed, want, "every module once, in name order");
    let entry = |name: &str| {
        pages
            .iter()
            .flat_map(|p| &p.modules)
            .find(|m| m.module == name)
            .unwrap()
            .clone()
    };
    let (huge, vast) = (entry("huge"), entry("vast"));
    assert!(huge.specs.is_none(), "too large for a page: listed by name");
    assert_eq!(huge.tools.len(), 62);
    assert!(
        vast.specs.is_none(),
        "too large to register: registered by name"
    );
    assert_eq!(vast.tools.len(), 150);
    assert!(entry("w00").specs.is_some());

    // vast's own tools verb cannot answer on this bus either: stopped, it is named as such.
    running.pop().unwrap().stop().await;

    let ann = bus.client_as(Some("ann")).await;
    let found = ann.discover(None, GENEROUS).await.unwrap();
    assert_eq!(found.modules.len(), all.len());
    for f in &found.modules {
        let module = f.entry.module.as_str();
        if ["gone", "huge", "vast"].contains(&module) {
            let e = f.tools.as_ref().unwrap_err();
            assert!(e.to_string().starts_with("nobody serves"), "{module}: {e}");
            continue;
        }
        let listing: &Listing = f.tools.as_ref().unwrap();
        let own = raw
            .request(&format!("mesh.{module}.tools"), b"", b"")
            .await
            .json();
        assert_eq!(
            serde_json::to_value(listing).unwrap(),
            own,
            "{module}: the catalogue's copy is the module's own"
        );
    }
}

/// Listing requests no client would send, over a plain socket: each answered with a page that
/// says what is wrong (or, past the last module, an empty one), and the catalogue keeps
/// answering.
#[tokio::test]
async fn hostile_listing_requests_are_answered_and_change_nothing() {
    let bus = small_bus(&["catalog", "echo"]).await;
    let _catalog = bus.serve_catalog().await;
    let _echo = bus.serve(mesh_echo::module()).await;
    let mut raw = Raw::connect(&bus.url(), "ann", "pw-ann").await;
    let before = pages(&mut raw).await;
    let big = format!("{{\"after\": \"{}\"}}", "a".repeat(4000));
    let cases: Vec<(&str, Vec<u8>)> = vec![
        ("not JSON", b"{not json".to_vec()),
        ("bytes that are not UTF-8", vec![0xff, 0xfe, b'{', 0x80]),
        ("after not a string", br#"{"after": 5}"#.to_vec()),
        ("an unknown key", br#"{"only": "echo"}"#.to_vec()),
        ("an array", b"[]".to_vec()),
        ("after too long for a module's name", big.into_bytes()),
        ("after not a module's name", br#"{"after": "a.b"}"#.to_vec()),
        ("known not digests", br#"{"known": ["../x"]}"#.to_vec()),
        (
            "known upper-case",
            format!("{{\"known\": [\"{}\"]}}", "A".repeat(32)).into_bytes(),
        ),
        ("known not a list", br#"{"known": "abc"}"#.to_vec()),
        ("deep", "[".repeat(60_000).into_bytes()),
        (
            "deep inside an object",
            format!("{{\"after\": {}", "{\"a\": ".repeat(10_000)).into_bytes(),
        ),
    ];
    for (what, body) in &cases {
        let reply = raw.request(LISTING_SUBJECT, b"", body).await.json();
        let error = reply["error"].as_str().unwrap_or_default();
        assert!(
            !error.is_empty() && reply["modules"] == json!([]),
            "{what}: {reply}"
        );
    }
    let past = raw
        .request(LISTING_SUBJECT, b"", br#"{"after": "zzz"}"#)
        .await
        .json();
    assert_eq!(past, json!({"modules": []}));
    assert_eq!(
        pages(&mut raw).await,
        before,
        "the catalogue answers as before"
    );
}

/// The module the next change event names.
async fn next_event(events: &mut async_nats::Subscriber) -> String {
    let msg = tokio::time::timeout(GENEROUS, events.next())
        .await
        .expect("an event came")
        .unwrap();
    serde_json::from_slice::<Changed>(&msg.payload)
        .unwrap()
        .module
}

/// Change events come from the catalogue alone: a person or a module publishing one is
/// refused by the bus. A person hears an event when a module starts, when it registers other
/// tools, and when it stops; a refresh that changes nothing says nothing.
#[tokio::test]
async fn only_the_catalogue_says_what_changed_and_only_when_it_did() {
    let bus = small_bus(&["catalog", "echo", "weather"]).await;
    let _catalog = bus.serve_catalog().await;
    for (user, password) in [("ann", "pw-ann"), ("weather", "pw-weather")] {
        let mut raw = Raw::connect(&bus.url(), user, password).await;
        let event = br#"{"module": "echo"}"#;
        match raw.request(CHANGED_SUBJECT, b"", event).await {
            Reply::Err(e) => assert!(e.contains("Permissions Violation"), "{user}: {e}"),
            other => panic!("{user} published a change event: {other:?}"),
        }
    }

    let ann = bus.client_as(Some("ann")).await;
    let mut events = ann.nats().subscribe(CHANGED_SUBJECT).await.unwrap();
    crate::bus::round_trip(ann.nats()).await;
    let echo = bus.serve(mesh_echo::module()).await;
    assert_eq!(next_event(&mut events).await, "echo", "a module started");

    // weather registers by hand: once, the same again, then with another tool.
    let weather = bus.client_as(Some("weather")).await;
    let registration = |tools: Value| {
        json!({"module": "weather", "version": "1.0.0", "description": "forecasts",
            "tools": tools, "instance": "i1", "started_ms": 1})
    };
    let register = |body: Value| {
        let weather = &weather;
        async move {
            let name = mesh_core::subjects::FullName::parse("catalog_register").unwrap();
            let r = weather.call(&name, &body, GENEROUS).await.unwrap();
            assert!(!r.is_error, "{}", r.text_content());
        }
    };
    register(registration(json!(["forecast"]))).await;
    assert_eq!(next_event(&mut events).await, "weather", "registered");
    register(registration(json!(["forecast"]))).await;
    register(registration(json!(["forecast", "radar"]))).await;
    // The refresh that changed nothing said nothing: the next event is the new tools'.
    assert_eq!(next_event(&mut events).await, "weather", "other tools");
    let quiet = tokio::time::timeout(Duration::from_millis(300), events.next()).await;
    assert!(quiet.is_err(), "one event per change: {quiet:?}");

    echo.stop().await;
    assert_eq!(next_event(&mut events).await, "echo", "a module stopped");
}

/// A module whose tools are `names`, each with its own description.
fn named(module: &str, names: &[&str], description: &str) -> Module {
    let mut m = Module::new(module, "1.0.0", "tools that change");
    for n in names {
        m = m.tool(Tool::new(
            *n,
            format!("{n}: {description}"),
            json!({"type": "object"}),
            |_c: Call| async { ToolResult::text("ok") },
        ));
    }
    m
}

/// Each module is listed with the digest of its tools — the digest of what its own `tools`
/// verb answers, computed by the catalogue, not said by the module. A reader that names the
/// digests it keeps gets those modules without their tools; discovery keeps what it read and
/// lists the same tools from it; a module whose tools change comes in full again, with the
/// new tools, never the kept ones.
#[tokio::test]
async fn a_listing_carries_digests_and_leaves_out_what_the_reader_keeps() {
    let bus = small_bus(&["catalog", "w00", "w01"]).await;
    let _catalog = bus.serve_catalog().await;
    let _w00 = bus.serve(named("w00", &["a", "b"], "first")).await;
    let w01 = bus.serve(named("w01", &["a"], "first")).await;
    let mut raw = Raw::connect(&bus.url(), "ann", "pw-ann").await;
    let full = &pages(&mut raw).await[0];
    let digest_of = |page: &ListingPage, module: &str| {
        let m = page.modules.iter().find(|m| m.module == module).unwrap();
        (m.digest.clone().unwrap(), m.specs.is_some())
    };
    for module in ["w00", "w01"] {
        let reply = raw.request(&format!("mesh.{module}.tools"), b"", b"").await;
        let Reply::Message { payload, .. } = &reply else {
            panic!("{module} did not answer: {reply:?}");
        };
        let own: Listing = serde_json::from_slice(payload).unwrap();
        assert_eq!(
            digest_of(full, module),
            (tools_digest(&own.tools), true),
            "{module}"
        );
    }
    let (w00_digest, _) = digest_of(full, "w00");
    let request = json!({"known": [w00_digest, "0".repeat(32)]}).to_string();
    let reply = raw
        .request(LISTING_SUBJECT, b"", request.as_bytes())
        .await
        .json();
    let brief: ListingPage = serde_json::from_value(reply).unwrap();
    assert_eq!(digest_of(&brief, "w00"), (w00_digest.clone(), false));
    assert!(
        digest_of(&brief, "w01").1,
        "a digest not known comes in full"
    );
    let w00 = brief.modules.iter().find(|m| m.module == "w00").unwrap();
    assert_eq!(w00.tools, ["a", "b"], "names are listed all the same");

    // Discovery keeps what it read and, the second time, lists the same from it.
    let ann = bus.client_as(Some("ann")).await;
    let listed = |found: &mesh_core::client::Discovery| -> Vec<Value> {
        found
            .modules
            .iter()
            .map(|f| serde_json::to_value(f.tools.as_ref().unwrap()).unwrap())
            .collect()
    };
    let first = ann.discover(None, GENEROUS).await.unwrap();
    let mut known = ann.kept().known();
    known.sort();
    let mut want: Vec<String> = ["catalog", "w00", "w01"]
        .iter()
        .map(|m| digest_of(full, m).0)
        .collect();
    want.sort();
    assert_eq!(known, want, "every module's tools kept");
    let second = ann.discover(None, GENEROUS).await.unwrap();
    assert_eq!(listed(&first), listed(&second));

    // w01 comes back with other tools: listed in full, its new tools discovered.
    w01.stop().await;
    let _w01 = bus.serve(named("w01", &["a", "c"], "second")).await;
    let found = ann.discover(None, GENEROUS).await.unwrap();
    let w01 = found
        .modules
        .iter()
        .find(|f| f.entry.module == "w01")
        .unwrap();
    let tools = &w01.tools.as_ref().unwrap().tools;
    let names: Vec<&str> = tools.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(names, ["a", "c"]);
    assert_eq!(tools[0].description, "a: second");
    assert!(
        !ann.kept().known().contains(&digest_of(full, "w01").0),
        "what no module serves any more is not kept"
    );
}

/// The published digest vectors (`subjects/tools-digest-vectors.json`) are what Python gets
/// by the recipe `subjects/README.md` gives (`json.dumps` with sorted keys, no spaces, UTF-8),
/// so a module in Python answers `Mesh-Tools` with the digest the catalogue lists for it; and
/// a module the Rust runtime serves has the digest the vectors give for its tools.
#[tokio::test]
async fn the_digest_vectors_are_what_python_computes_and_a_module_answers() {
    let file = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/subjects/tools-digest-vectors.json"
    );
    let vectors: Value = serde_json::from_str(&std::fs::read_to_string(file).unwrap()).unwrap();
    let vectors = vectors["vectors"].as_array().unwrap().clone();
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/py/tools_digest.py");
    let python = crate::bus::json_of(
        tokio::process::Command::new(crate::bus::python()).args([script, file]),
    )
    .await;
    let published: Vec<&Value> = vectors.iter().map(|v| &v["digest"]).collect();
    let computed: Vec<&Value> = python["digests"].as_array().unwrap().iter().collect();
    assert_eq!(computed, published);

    // A module serving the vector's tool: the catalogue lists it under the same digest.
    let full = vectors
        .iter()
        .find(|v| v["tools"][0]["name"] == "convert")
        .unwrap();
    let bus = Bus::single().await;
    let _catalog = bus.serve_catalog().await;
    let mut module = Module::new("vec", "1.0.0", "the vectors' tools");
    for t in full["tools"].as_array().unwrap() {
        module = module.tool(Tool::new(
            t["name"].as_str().unwrap(),
            t["description"].as_str().unwrap(),
            t["inputSchema"].clone(),
            |_c: Call| async { ToolResult::text("ok") },
        ));
    }
    let _module = bus.serve(module).await;
    let client = bus.client().await;
    let listing = client.listing_of("vec", GENEROUS).await.unwrap();
    assert_eq!(
        tools_digest(&listing.tools),
        full["digest"].as_str().unwrap()
    );
}
