//! The NATS services protocol reaches every module from a person's context, asked by a
//! services client this project did not write (nats.js's `services.client()`).

use serde_json::json;

use crate::bus::{Bus, GENEROUS, json_of, node_path};

#[tokio::test]
async fn nats_js_services_client_sees_every_module_from_a_person() {
    let bus = Bus::accounts(
        &["catalog", "echo"],
        &[
            ("alice", &[]),
            ("bob", &["mesh.echo.echo", "mesh.echo.fail"]),
        ],
    )
    .await;
    let _catalog = bus.serve_catalog().await;
    let _echo = bus.serve(mesh_echo::module()).await;
    // Calls for the stats to count: two results, one tool error.
    let bob = bus.client_as(Some("bob")).await;
    for (tool, args) in [
        ("echo_echo", json!({"text": "a"})),
        ("echo_echo", json!({"text": "b"})),
        ("echo_fail", json!({"text": "no"})),
    ] {
        bob.call(
            &mesh_core::subjects::FullName::parse(tool).unwrap(),
            &args,
            GENEROUS,
        )
        .await
        .unwrap();
    }

    // alice may call no tool, yet may ask the services protocol.
    let seen = json_of(
        tokio::process::Command::new("node")
            .arg(format!(
                "{}/tests/js/services.cjs",
                env!("CARGO_MANIFEST_DIR")
            ))
            .args([bus.url().as_str(), "alice", "pw-alice"])
            .env("NODE_PATH", node_path()),
    )
    .await;
    assert_eq!(seen["names"], json!(["catalog", "echo"]), "{seen}");

    let info = &seen["info"]["echo"][0];
    assert_eq!(info["version"], env!("CARGO_PKG_VERSION"));
    let endpoints: Vec<&str> = info["endpoints"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["name"].as_str().unwrap())
        .collect();
    for tool in ["echo", "fail", "sleep", "choose", "whoami", "tools"] {
        assert!(endpoints.contains(&tool), "{endpoints:?}");
    }
    let stats = &seen["stats"]["echo"][0]["endpoints"];
    let of = |name: &str| {
        stats
            .as_array()
            .unwrap()
            .iter()
            .find(|e| e["name"] == name)
            .cloned()
            .unwrap_or_else(|| panic!("no stats for {name}: {stats}"))
    };
    assert_eq!(of("echo")["num_requests"], 2, "{stats}");
    assert_eq!(of("fail")["num_requests"], 1, "{stats}");
    assert_eq!(of("fail")["num_errors"], 1, "{stats}");
    // Each module answers for itself only, and the catalogue is a module like the others.
    assert_eq!(
        seen["info"]["catalog"].as_array().unwrap().len(),
        1,
        "{seen}"
    );
}
