//! The catalogue on a real bus: registration, running or not, restarts, forgetting, discovery.

use std::time::Duration;

use mesh_core::client::{CallError, Client};
use mesh_core::subjects::FullName;
use mesh_core::subjects::catalog::ModuleEntry;
use serde_json::json;

use crate::bus::{Bus, GENEROUS, Running};

async fn serve_catalog(bus: &Bus) -> Running {
    bus.serve_catalog().await
}

async fn modules(client: &Client) -> Vec<ModuleEntry> {
    let r = client
        .call(
            &FullName::parse("catalog_modules").unwrap(),
            &json!({}),
            GENEROUS,
        )
        .await
        .unwrap();
    assert!(!r.is_error, "{}", r.text_content());
    let content = r.structured_content.unwrap();
    let schema: serde_json::Value =
        serde_json::from_str(mesh_core::subjects::CATALOG_MODULES_SCHEMA).unwrap();
    assert!(
        jsonschema::validator_for(&schema)
            .unwrap()
            .is_valid(&content),
        "{content}"
    );
    serde_json::from_value(content["modules"].clone()).unwrap()
}

#[tokio::test]
async fn a_stopped_module_stays_listed_and_is_named_as_not_answering() {
    let bus = Bus::single().await;
    let _catalog = serve_catalog(&bus).await;
    let echo = bus.serve(mesh_echo::module()).await;
    let client = bus.client().await;

    let listed = modules(&client).await;
    let names: Vec<&str> = listed.iter().map(|m| m.module.as_str()).collect();
    assert_eq!(names, ["catalog", "echo"]);
    let e = &listed[1];
    assert_eq!(e.instances, 1);
    assert_eq!(e.tools, ["echo", "fail", "sleep", "choose", "whoami"]);

    let before_stop = mesh_core::subjects::catalog::now_ms();
    echo.stop().await;
    let listed = modules(&client).await;
    let e = listed
        .iter()
        .find(|m| m.module == "echo")
        .expect("still listed");
    assert_eq!(e.instances, 0, "a stopped instance is not counted running");
    // Last seen when it stopped, not when it registered.
    assert!(
        e.last_seen_ms >= before_stop,
        "{} < {before_stop}",
        e.last_seen_ms
    );

    let found = client.discover(None, GENEROUS).await.unwrap();
    let echo_found = found
        .modules
        .iter()
        .find(|f| f.entry.module == "echo")
        .unwrap();
    assert!(matches!(
        echo_found.tools,
        Err(CallError::NobodyServes { .. })
    ));
    let catalog_found = found
        .modules
        .iter()
        .find(|f| f.entry.module == "catalog")
        .unwrap();
    let tools = &catalog_found.tools.as_ref().unwrap().tools;
    assert_eq!(tools[0].name, "modules");
}

#[tokio::test]
async fn registrations_survive_a_catalogue_restart_and_forget_removes_them() {
    let bus = Bus::single().await;
    let catalog1 = serve_catalog(&bus).await;
    let _echo = bus.serve(mesh_echo::module()).await;
    let client = bus.client().await;
    assert_eq!(modules(&client).await.len(), 2);

    catalog1.stop().await;
    let _catalog2 = serve_catalog(&bus).await;
    let listed = modules(&client).await;
    let names: Vec<&str> = listed.iter().map(|m| m.module.as_str()).collect();
    assert_eq!(
        names,
        ["catalog", "echo"],
        "lost registrations across a restart"
    );

    let forget = FullName::parse("catalog_forget").unwrap();
    let r = client
        .call(&forget, &json!({"module": "echo"}), GENEROUS)
        .await
        .unwrap();
    assert!(!r.is_error, "{}", r.text_content());
    // The watch applies the purge shortly after; wait for it without a fixed sleep.
    let mut gone = false;
    for _ in 0..200 {
        if modules(&client).await.iter().all(|m| m.module != "echo") {
            gone = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(gone, "echo still listed after forget");
    let r = client
        .call(&forget, &json!({"module": "echo"}), GENEROUS)
        .await
        .unwrap();
    assert!(r.is_error);
    assert_eq!(r.text_content(), "no module named echo is registered");
}

#[tokio::test]
async fn two_catalogue_instances_serve_the_same_view() {
    let bus = Bus::accounts(&["catalog", "echo"], &[("ann", &["mesh.>"])]).await;
    let _c1 = serve_catalog(&bus).await;
    let _c2 = serve_catalog(&bus).await;
    let _echo = bus.serve(mesh_echo::module()).await;
    let ann = bus.client_as(Some("ann")).await;
    for _ in 0..10 {
        let listed = modules(&ann).await;
        let echo = listed
            .iter()
            .find(|m| m.module == "echo")
            .expect("listed by both");
        assert_eq!(echo.instances, 1);
        let catalog = listed.iter().find(|m| m.module == "catalog").unwrap();
        assert_eq!(catalog.instances, 2);
    }
}

#[tokio::test]
async fn a_crashed_instance_is_swept_away() {
    let bus = Bus::single().await;
    // What a crashed instance leaves: its registration, never refreshed again.
    let js = async_nats::jetstream::new(bus.client().await.nats().clone());
    let store = js
        .create_key_value(async_nats::jetstream::kv::Config {
            bucket: mesh_core::subjects::catalog::BUCKET.into(),
            history: 1,
            ..Default::default()
        })
        .await
        .unwrap();
    let dead = json!({"module": "ghost", "id": "dead", "version": "1.0.0", "started_ms": 0, "last_seen_ms": 0});
    store
        .put("instances.ghost.dead", dead.to_string().into())
        .await
        .unwrap();
    let ghost = json!({"module": "ghost", "version": "1.0.0", "description": "", "tools": [], "last_seen_ms": 0});
    store
        .put("modules.ghost", ghost.to_string().into())
        .await
        .unwrap();
    let _catalog = serve_catalog(&bus).await;
    // Swept soon after the catalogue reads the bucket; the module itself stays listed.
    let mut swept = false;
    for _ in 0..200 {
        if store.get("instances.ghost.dead").await.unwrap().is_none() {
            swept = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(swept, "a crashed instance's entry stayed in the bucket");
    let client = bus.client().await;
    let listed = modules(&client).await;
    let ghost = listed
        .iter()
        .find(|m| m.module == "ghost")
        .expect("still listed");
    assert_eq!(ghost.instances, 0);
}

/// `catalog_modules` pages with a cursor (a listing that can grow past one answer), and the
/// client's `catalogue` follows the pages to the end.
#[tokio::test]
async fn the_modules_page_with_a_cursor() {
    let bus = Bus::single().await;
    let _catalog = serve_catalog(&bus).await;
    let client = bus.client().await;
    let register = FullName::parse("catalog_register").unwrap();
    for m in ["m1", "m2", "m3", "m4", "m5", "m6", "m7"] {
        let r = client
            .call(
                &register,
                &json!({"module": m, "version": "1.0.0", "tools": ["t"], "instance": "i", "started_ms": 0}),
                GENEROUS,
            )
            .await
            .unwrap();
        assert!(!r.is_error, "{}", r.text_content());
    }
    let tool = FullName::parse("catalog_modules").unwrap();
    let (mut names, mut cursor, mut pages) = (Vec::new(), None::<String>, 0);
    loop {
        let mut args = json!({"limit": 3});
        if let Some(c) = &cursor {
            args["cursor"] = json!(c);
        }
        let r = client.call(&tool, &args, GENEROUS).await.unwrap();
        let content = r.structured_content.unwrap();
        names.extend(
            content["modules"]
                .as_array()
                .unwrap()
                .iter()
                .map(|m| m["module"].as_str().unwrap().to_owned()),
        );
        pages += 1;
        match content.get("next").and_then(|n| n.as_str()) {
            Some(n) => cursor = Some(n.to_owned()),
            None => break,
        }
    }
    assert_eq!(pages, 3);
    assert_eq!(names, ["catalog", "m1", "m2", "m3", "m4", "m5", "m6", "m7"]);
    let all = client.catalogue(None, GENEROUS).await.unwrap();
    assert_eq!(all.len(), 8);
}
