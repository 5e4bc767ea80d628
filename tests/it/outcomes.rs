//! Every way a call can end, produced on purpose on a real bus and told apart.

use std::time::{Duration, Instant};

use mesh_core::client::{CallError, Outcome, outcome};
use mesh_core::subjects::FullName;
use serde_json::json;

use crate::bus::{Bus, GENEROUS};

fn name(s: &str) -> FullName {
    FullName::parse(s).unwrap()
}

#[tokio::test]
async fn result_tool_error_nobody_serves_denied_and_slow_are_told_apart() {
    let bus = Bus::accounts(
        &["echo"],
        &[(
            "alice",
            &[
                "mesh.echo.echo",
                "mesh.echo.fail",
                "mesh.echo.sleep",
                "mesh.ghost.*",
            ],
        )],
    )
    .await;
    let _echo = bus.serve(mesh_echo::module()).await;
    let alice = bus.client_as(Some("alice")).await;

    let r = alice
        .call(&name("echo"), &json!({"text": "hi"}), GENEROUS)
        .await;
    assert_eq!(outcome(&r), Outcome::Result);
    assert_eq!(r.unwrap().text_content(), "hi");

    let r = alice
        .call(&name("echo_fail"), &json!({"text": "said no"}), GENEROUS)
        .await;
    assert_eq!(outcome(&r), Outcome::ToolError);
    assert_eq!(r.unwrap().text_content(), "said no");

    let r = alice.call(&name("ghost_boo"), &json!({}), GENEROUS).await;
    assert_eq!(outcome(&r), Outcome::NobodyServes);
    let msg = r.unwrap_err().to_string();
    assert!(msg.starts_with("nobody serves ghost_boo"), "{msg}");

    let r = alice.call(&name("echo_whoami"), &json!({}), GENEROUS).await;
    assert_eq!(outcome(&r), Outcome::Denied);
    let msg = r.unwrap_err().to_string();
    assert!(
        msg.contains("not yours") && msg.contains("mesh.echo.whoami"),
        "{msg}"
    );

    let deadline = Duration::from_millis(300);
    let started = Instant::now();
    let r = alice
        .call(&name("echo_sleep"), &json!({"ms": 5000}), deadline)
        .await;
    assert!(started.elapsed() >= deadline);
    assert_eq!(outcome(&r), Outcome::Slow);
    assert!(
        r.unwrap_err()
            .to_string()
            .contains("did not answer within 0.3 s")
    );
}

#[tokio::test]
async fn denied_is_reported_at_once_not_at_the_deadline() {
    let bus = Bus::accounts(&["echo"], &[("bob", &["mesh.echo.echo"])]).await;
    let _echo = bus.serve(mesh_echo::module()).await;
    let bob = bus.client_as(Some("bob")).await;
    let deadline = Duration::from_secs(20);
    for _ in 0..5 {
        let started = Instant::now();
        let r = bob.call(&name("echo_fail"), &json!({}), deadline).await;
        let took = started.elapsed();
        assert!(matches!(r, Err(CallError::Denied { .. })), "{r:?}");
        assert!(
            took < deadline / 10,
            "denied took {took:?}, deadline {deadline:?}"
        );
    }
    // Concurrent calls on the same denied subject are all told, and an allowed call in
    // between is not disturbed.
    let calls = (0..10).map(|i| {
        let bob = bob.clone();
        async move {
            let tool = if i % 2 == 0 { "echo_fail" } else { "echo" };
            (
                i,
                bob.call(&name(tool), &json!({"text": "x"}), deadline).await,
            )
        }
    });
    for (i, r) in futures_util::future::join_all(calls).await {
        let expected = if i % 2 == 0 {
            Outcome::Denied
        } else {
            Outcome::Result
        };
        assert_eq!(outcome(&r), expected, "call {i}: {r:?}");
    }
}

#[tokio::test]
async fn a_bus_that_is_gone_is_said_at_once_not_at_the_deadline() {
    let mut bus = Bus::single().await;
    let _echo = bus.serve(mesh_echo::module()).await;
    let client = bus.client().await;
    // A long deadline: an answer well before it was not waiting for it.
    let deadline = Duration::from_secs(60);
    let in_flight = {
        let client = client.clone();
        tokio::spawn(async move {
            let started = Instant::now();
            let r = client
                .call(&name("echo_sleep"), &json!({"ms": 50000}), deadline)
                .await;
            (r, started.elapsed())
        })
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    bus.server.stop().await;
    let (r, took) = in_flight.await.unwrap();
    assert!(matches!(r, Err(CallError::ConnectionLost { .. })), "{r:?}");
    assert_eq!(outcome(&r), Outcome::Connection);
    assert!(took < deadline / 2, "told after {took:?}");
    // A call made while it is down is not sent at all.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let started = Instant::now();
    let r = client
        .call(&name("echo"), &json!({"text": "x"}), deadline)
        .await;
    assert!(matches!(r, Err(CallError::NotConnected { .. })), "{r:?}");
    assert_eq!(outcome(&r), Outcome::Connection);
    assert!(started.elapsed() < deadline / 2);
    assert!(r.unwrap_err().to_string().contains("not reachable"));
}
