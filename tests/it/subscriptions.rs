//! Resource updates through subscriptions (issue 46): a module says a resource changed on
//! `mesh-resources.<module>.updated`, and a relay's session that subscribed to the uri hears
//! it — `resources/subscribe` before 2026-07-28 and a `subscriptions/listen` stream's
//! `resourceSubscriptions` from then, with the official Python SDK over `mesh mcp` — under the
//! bus's permissions in the accounts layout: a person subscribes only to what they may read
//! (refused, hearing nothing, through the relay; denied by nats-server on raw NATS), and a
//! flood of subscriptions from one session stops at its bound.

use std::time::Duration;

use mesh_core::client::{MAX_WATCHED, Watch, WatchError};
use mesh_core::runtime::{Module, Resource, ResourceTemplate, ResourceUpdates, text_contents};
use mesh_core::subjects::features;
use serde_json::Value;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::Command;

use crate::bus::{Bus, GENEROUS, module, python};
use crate::raw::Raw;

const MESH: &str = env!("CARGO_BIN_EXE_mesh");
const CLIENT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/py/mcp_subscribe.py");

/// Module `name` with one resource `<name>://<path>`, a template `<name>://t/{n}`, and the
/// handle it says their changes with.
fn with_resources(name: &str, path: &str) -> (Module, ResourceUpdates) {
    let module = Module::new(name, "1.0.0", "resources that change")
        .resource(Resource::text(
            &format!("{name}://{path}"),
            path,
            "text/plain",
            "the first text",
        ))
        .resource_template(ResourceTemplate::new(
            &format!("{name}://t/{{n}}"),
            "numbered",
            |read| async move { Ok(vec![text_contents(&read.uri, "text/plain", "n")]) },
        ));
    let updates = module.resource_updates();
    (module, updates)
}

/// docs and vault serving resources, ann granted docs' resources only, bob both.
async fn mesh() -> (
    Bus,
    Vec<crate::bus::Running>,
    ResourceUpdates,
    ResourceUpdates,
) {
    let bus = Bus::accounts_with(
        &[module("catalog"), module("docs"), module("vault")],
        &[
            ("ann", &["mesh.docs.resources.>"]),
            ("bob", &["mesh.docs.>", "mesh.vault.>"]),
        ],
    )
    .await;
    let catalog = bus.serve_catalog().await;
    let (docs, docs_updates) = with_resources("docs", "a");
    let (vault, vault_updates) = with_resources("vault", "secret");
    let docs = bus.serve(docs).await;
    let vault = bus.serve(vault).await;
    (bus, vec![catalog, docs, vault], docs_updates, vault_updates)
}

/// What `watch` hears within `within` (nothing, when it hears nothing).
async fn heard(watch: &Watch, within: Duration) -> Vec<String> {
    tokio::time::timeout(within, watch.updated())
        .await
        .unwrap_or_default()
}

/// An update said the moment `subscribe` returns is heard, every time: the module's answer
/// to the subscription comes back only once nats-server has the session's subscription (a
/// flush, which says only that the bytes left, lost about one round in a hundred under load).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_update_said_right_after_subscribing_is_heard() {
    let (bus, _serving, _docs, vault) = mesh().await;
    let bob = bus.client_as(Some("bob")).await;
    for round in 0..300 {
        let watch = Watch::new(&bob);
        watch.subscribe("vault://secret", GENEROUS).await.unwrap();
        vault.updated("vault://secret").await.unwrap();
        assert_eq!(
            heard(&watch, GENEROUS).await,
            ["vault://secret"],
            "round {round}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_hears_the_resources_it_may_read_and_nothing_else() {
    let (bus, _serving, docs, vault) = mesh().await;
    let ann = bus.client_as(Some("ann")).await;
    let bob = bus.client_as(Some("bob")).await;
    let ann_watch = Watch::new(&ann);
    let bob_watch = Watch::new(&bob);
    ann_watch.subscribe("docs://a", GENEROUS).await.unwrap();
    bob_watch
        .subscribe("vault://secret", GENEROUS)
        .await
        .unwrap();
    // A module ann may not read: refused, whether its uri is known to her or not.
    let refused = ann_watch.subscribe("vault://secret", GENEROUS).await;
    assert!(
        matches!(refused, Err(WatchError::Feature(_))),
        "{refused:?}"
    );
    assert_eq!(ann_watch.len(), 1);

    // Said many times, heard at most once per turn (fewer times than said); each by whom
    // it concerns.
    for _ in 0..50 {
        docs.updated("docs://a").await.unwrap();
    }
    vault.updated("vault://secret").await.unwrap();
    docs.updated("docs://unwatched").await.unwrap();
    assert_eq!(heard(&ann_watch, GENEROUS).await, ["docs://a"]);
    assert_eq!(heard(&bob_watch, GENEROUS).await, ["vault://secret"]);
    let mut turns = 1;
    loop {
        let more = heard(&ann_watch, Duration::from_millis(500)).await;
        if more.is_empty() {
            break;
        }
        assert_eq!(
            more,
            ["docs://a"],
            "ann heard of vault, or a uri she did not watch"
        );
        turns += 1;
    }
    assert!(turns < 50, "{turns} notifications of 50 updates");

    // Unsubscribed, nothing more.
    assert!(ann_watch.unsubscribe("docs://a"));
    docs.updated("docs://a").await.unwrap();
    assert!(
        heard(&ann_watch, Duration::from_millis(500))
            .await
            .is_empty()
    );

    // A uri past the bound is refused before anything is asked.
    let long = format!("docs://{}", "x".repeat(features::MAX_URI));
    assert!(matches!(
        ann_watch.subscribe(&long, GENEROUS).await,
        Err(WatchError::TooLong { .. })
    ));
    let too_long = ResourceUpdates::default().updated(&long).await;
    assert!(too_long.is_err());
    assert!(docs.updated(&long).await.is_err());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn raw_nats_may_not_listen_to_another_modules_updates_nor_say_them() {
    let (bus, _serving, docs, vault) = mesh().await;
    let mut raw = Raw::connect(&bus.url(), "ann", "pw-ann").await;
    let denied = raw
        .subscribe(&features::resource_updated_subject("vault"))
        .await;
    assert!(
        denied
            .as_deref()
            .is_some_and(|e| e.contains("Permissions Violation for Subscription")),
        "{denied:?}"
    );
    // Her own module's updates she may hear; nobody but the module may say them.
    assert_eq!(
        raw.subscribe(&features::resource_updated_subject("docs"))
            .await,
        None
    );
    let forged = raw
        .publish(
            &features::resource_updated_subject("docs"),
            br#"{"uri":"docs://a"}"#,
        )
        .await;
    assert!(
        forged
            .as_deref()
            .is_some_and(|e| e.contains("Permissions Violation for Publish")),
        "{forged:?}"
    );
    // And a module says only its own: docs may not say vault's resources changed.
    let mut raw_docs = Raw::connect(&bus.url(), "docs", "pw-docs").await;
    let as_other = raw_docs
        .publish(
            &features::resource_updated_subject("vault"),
            br#"{"uri":"vault://secret"}"#,
        )
        .await;
    assert!(
        as_other
            .as_deref()
            .is_some_and(|e| e.contains("Permissions Violation for Publish")),
        "{as_other:?}"
    );
    // Through a client that does not check first: the server's subscription hears nothing.
    let ann = bus.client_as(Some("ann")).await;
    let mut sub = ann
        .nats()
        .subscribe(features::resource_updated_subject("vault"))
        .await
        .unwrap();
    crate::bus::round_trip(ann.nats()).await;
    vault.updated("vault://secret").await.unwrap();
    docs.updated("docs://a").await.unwrap();
    let got = tokio::time::timeout(
        Duration::from_millis(500),
        futures_util::StreamExt::next(&mut sub),
    )
    .await;
    assert!(
        !matches!(got, Ok(Some(_))),
        "ann heard vault's update: {got:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_of_subscriptions_from_one_session_stops_at_its_bound() {
    let (bus, _serving, docs, _vault) = mesh().await;
    let ann = bus.client_as(Some("ann")).await;
    let watch = Watch::new(&ann);
    let started = std::time::Instant::now();
    let mut refused = 0;
    for n in 0..MAX_WATCHED + 100 {
        match watch.subscribe(&format!("docs://t/{n}"), GENEROUS).await {
            Ok(()) => {}
            Err(WatchError::TooMany { max }) => {
                assert_eq!(max, MAX_WATCHED);
                refused += 1;
            }
            Err(e) => panic!("subscription {n}: {e}"),
        }
    }
    eprintln!(
        "{} subscriptions in {:?}",
        MAX_WATCHED + 100,
        started.elapsed()
    );
    assert_eq!((watch.len(), refused), (MAX_WATCHED, 100));
    // One NATS subscription for the module, however many uris: an update of each is heard.
    docs.updated("docs://t/3").await.unwrap();
    docs.updated(&format!("docs://t/{}", MAX_WATCHED - 1))
        .await
        .unwrap();
    let mut got = Vec::new();
    while got.len() < 2 {
        let more = heard(&watch, GENEROUS).await;
        assert!(!more.is_empty(), "heard only {got:?}");
        got.extend(more);
    }
    got.sort();
    assert_eq!(
        got,
        ["docs://t/3", &format!("docs://t/{}", MAX_WATCHED - 1)]
    );
    // An unsubscription makes room for one more, no more.
    // How long a module's word takes to reach a watching session (the median of 50).
    let mut took = Vec::new();
    for _ in 0..50 {
        let said = std::time::Instant::now();
        docs.updated("docs://t/5").await.unwrap();
        assert_eq!(heard(&watch, GENEROUS).await, ["docs://t/5"]);
        took.push(said.elapsed());
    }
    took.sort();
    eprintln!("an update heard after {:?} (median of 50)", took[25]);
    assert!(watch.unsubscribe("docs://t/0"));
    watch.subscribe("docs://a", GENEROUS).await.unwrap();
    assert!(matches!(
        watch.subscribe("docs://t/999", GENEROUS).await,
        Err(WatchError::TooMany { .. })
    ));
}

/// The Python SDK as ann, in `mode`, over `mesh mcp` or (`console`) ann's console: its
/// subscription, its refusal and the updates it heard.
async fn sdk_client_hears(mode: &str, console: bool) -> (Value, Value) {
    let (bus, _serving, docs, vault) = mesh().await;
    let mut sdk = Command::new(python());
    sdk.arg(CLIENT).arg(mode);
    let _console = if console {
        let (child, url) = crate::mcp::console_with(&bus.flags("ann"), &["--timeout", "10s"]).await;
        sdk.arg(url).env("MESH_CONSOLE_TOKEN", crate::mcp::TOKEN);
        Some(child)
    } else {
        sdk.arg(MESH).arg("mcp").args(bus.flags("ann"));
        None
    };
    let mut child = sdk
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let first = tokio::time::timeout(Duration::from_secs(60), lines.next_line())
        .await
        .expect("the client subscribes")
        .unwrap()
        .expect("the client says what it subscribed to");
    let subscribed: Value = serde_json::from_str(&first).unwrap();
    // What she may not read changes first: she must not hear it.
    vault.updated("vault://secret").await.unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    docs.updated("docs://a").await.unwrap();
    let second = tokio::time::timeout(Duration::from_secs(60), lines.next_line())
        .await
        .expect("the client hears the update")
        .unwrap()
        .expect("the client says what it heard");
    let _ = child.wait().await;
    (subscribed, serde_json::from_str(&second).unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_python_sdk_subscribes_before_2026_07_28_and_hears_only_its_resources() {
    // On stdio, and on a console's session (its updates on the session's own stream).
    for console in [false, true] {
        let (subscribed, updated) = sdk_client_hears("legacy", console).await;
        assert_eq!(subscribed["subscribed"], serde_json::json!(["docs://a"]));
        // vault's resources are none of ann's: refused, as a resource she cannot read.
        assert_eq!(subscribed["refused"]["code"], -32602, "{subscribed}");
        assert_eq!(
            updated["updated"],
            serde_json::json!(["docs://a"]),
            "console: {console}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_python_sdk_listens_at_2026_07_28_and_hears_only_its_resources() {
    for console in [false, true] {
        let (subscribed, updated) = sdk_client_hears("2026-07-28", console).await;
        // The stream honours what she may read only.
        assert_eq!(subscribed["subscribed"], serde_json::json!(["docs://a"]));
        assert_eq!(
            updated["updated"],
            serde_json::json!(["docs://a"]),
            "console: {console}"
        );
    }
}

/// A server nobody here wrote (npm's server-everything, which says its subscribed resources
/// changed every 5 s once its tool `toggle-subscriber-updates` asks it to), joined through the
/// bridge: the bridge subscribes there for the session, and passes its updates on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_joined_servers_resource_updates_reach_the_session_that_subscribed() {
    use mesh_core::client::{Features, ListKind};
    use mesh_core::subjects::FullName;
    let dir = tempfile::tempdir().unwrap();
    let bus = Bus::accounts_with(
        &[module("catalog"), module("everything")],
        &[("ann", &["mesh.everything.>"])],
    )
    .await;
    let _catalog = bus.serve_catalog().await;
    let log = dir.path().join("everything.log");
    let _everything = crate::resources::everything(&bus, &log);
    let ann = bus.client_as(Some("ann")).await;
    crate::resources::serving_prompts(&ann, &log).await;
    let page = Features::list(&ann, ListKind::Resources, None, GENEROUS)
        .await
        .unwrap();
    let uri = page
        .items
        .iter()
        .filter_map(|r| r["uri"].as_str())
        .find(|u| u.starts_with("demo://resource/static/document/"))
        .expect("everything lists its documents")
        .to_owned();
    let watch = Watch::new(&ann);
    watch.subscribe(&uri, GENEROUS).await.unwrap();
    let toggle = FullName::parse("everything_toggle_subscriber_updates").unwrap();
    let started = ann
        .call(&toggle, &serde_json::json!({}), GENEROUS)
        .await
        .unwrap();
    assert!(
        started.text_content().contains("Started"),
        "{}",
        started.text_content()
    );
    let got = heard(&watch, Duration::from_secs(20)).await;
    assert_eq!(
        got,
        std::slice::from_ref(&uri),
        "everything's log:\n{}",
        std::fs::read_to_string(&log).unwrap_or_default()
    );
    // Unsubscribed, the next of its updates (5 s later) reaches nobody here.
    watch.unsubscribe(&uri);
    assert!(heard(&watch, Duration::from_secs(6)).await.is_empty());
}

/// A 2026-07-28 server written with the official Python SDK, joined through the bridge: the
/// bridge asks for the uri on a `subscriptions/listen` stream of its own (`resources/subscribe`
/// is gone at that version) and passes the server's update on; its prompt's question
/// (`input_required`) reaches the SDK client and the answer the server, its state sealed to
/// the caller on the way.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_2026_07_28_server_passes_on_its_resource_updates_and_its_prompts_questions() {
    use mesh_core::subjects::FullName;
    const NOTES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/py/mcp_notes_server.py");
    let dir = tempfile::tempdir().unwrap();
    let bus = Bus::accounts_with(
        &[module("catalog"), module("notes")],
        &[("ann", &["mesh.notes.>"]), ("bob", &["mesh.notes.>"])],
    )
    .await;
    let _catalog = bus.serve_catalog().await;
    let log = dir.path().join("notes.log");
    let _notes = Command::new(MESH)
        .args(["-vv", "run", "--mcp", "notes"])
        .args(bus.flags("notes"))
        .args(["--layout", "accounts", "--"])
        .arg(python())
        .arg(NOTES)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let ann = bus.client_as(Some("ann")).await;
    let touch = FullName::parse("notes_touch").unwrap();
    let watch = Watch::new(&ann);
    let subscribed = tokio::time::timeout(Duration::from_secs(60), async {
        loop {
            match watch.subscribe("notes://today", GENEROUS).await {
                Ok(()) => return,
                Err(e) => {
                    tracing::debug!("not yet: {e}");
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
            }
        }
    })
    .await;
    let said = || std::fs::read_to_string(&log).unwrap_or_default();
    assert!(
        subscribed.is_ok(),
        "never subscribed; the bridge's log:\n{}",
        said()
    );
    let touched = ann
        .call(&touch, &serde_json::json!({}), GENEROUS)
        .await
        .unwrap();
    assert_eq!(touched.text_content(), "touched");
    assert_eq!(
        heard(&watch, Duration::from_secs(20)).await,
        ["notes://today"],
        "the bridge's log:\n{}",
        said()
    );
    assert!(
        said().contains("on a subscriptions/listen stream"),
        "the bridge's log:\n{}",
        said()
    );

    // Its prompt asks first: the question reaches the Python SDK through the bridge and the
    // relay, and the answer the prompt, with the server's own state (sealed to ann by the
    // bridge on the way).
    const ASKS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/py/mcp_prompt_asks.py");
    for (mode, what, which) in [
        ("2026-07-28", "MESH_PROMPT", "notes_recall"),
        ("legacy", "MESH_PROMPT", "notes_recall"),
        ("2026-07-28", "MESH_READ", "notes://about/today"),
        ("legacy", "MESH_READ", "notes://about/today"),
    ] {
        let seen = crate::bus::json_of(
            Command::new(python())
                .env(what, which)
                .arg(ASKS)
                .arg(mode)
                .arg(MESH)
                .arg("mcp")
                .args(bus.flags("ann")),
        )
        .await;
        assert_eq!(
            seen,
            serde_json::json!({"asked": ["What context should the prompt use?"],
                   "texts": ["A prompt for the context: the mesh (state the-server-s-own-state)"]}),
            "{mode} {which}; the bridge's log:\n{}",
            said()
        );
    }
    // The server's state, sealed to ann: bob cannot answer with it, nor anyone alter it.
    use mesh_core::client::{FeatureCallError, Features};
    use mesh_core::subjects::features::GetRequest;
    let asked = Features::prompt(&ann, "notes_recall", GetRequest::default(), GENEROUS)
        .await
        .unwrap();
    assert_eq!(asked["resultType"], "input_required", "{asked:?}");
    let state = asked["requestState"].as_str().unwrap().to_owned();
    let answers: serde_json::Map<String, Value> = serde_json::from_value(
        serde_json::json!({"user_context": {"action": "accept", "content": {"context": "x"}}}),
    )
    .unwrap();
    let bob = bus.client_as(Some("bob")).await;
    for (who, state) in [(&bob, state.clone()), (&ann, format!("{state}x"))] {
        let answered = GetRequest {
            arguments: None,
            input_responses: Some(answers.clone()),
            request_state: Some(state),
        };
        let refused = Features::prompt(who, "notes_recall", answered, GENEROUS).await;
        assert!(
            matches!(&refused, Err(FeatureCallError::Refused { error }) if error.code == -32602 && error.message.contains("refused")),
            "{refused:?}"
        );
    }
}
