//! Who the runtime says is calling: stamped by the server, relayed by modules, never forged.

use mesh::actor::Layout;
use mesh::client::Client;
use mesh::modules::echo;
use mesh::runtime::ServeOptions;
use mesh::subjects::{FullName, HEADER_ON_BEHALF_OF, HEADER_REQUEST_INFO, ToolResult};
use serde_json::{Value, json};

use crate::bus::{Bus, GENEROUS};

async fn whoami(client: &Client) -> Value {
    let r = client
        .call(
            &FullName::parse("echo_whoami").unwrap(),
            &json!({}),
            GENEROUS,
        )
        .await
        .unwrap();
    r.structured_content.unwrap()
}

async fn whoami_with_headers(client: &Client, headers: &[(&str, &str)]) -> Value {
    let mut h = async_nats::HeaderMap::new();
    for (k, v) in headers {
        h.insert(*k, *v);
    }
    let msg = client
        .nats()
        .request_with_headers("mesh.echo.whoami", h, "{}".into())
        .await
        .unwrap();
    let r: ToolResult = serde_json::from_slice(&msg.payload).unwrap();
    r.structured_content.unwrap()
}

#[tokio::test]
async fn a_person_is_seen_as_themselves_even_when_forging_headers() {
    let bus = Bus::two_account(&["echo"], &[("alice", &["mesh.echo.whoami"])]).await;
    let _echo = bus.serve(echo::module()).await;
    let alice = bus.client_as(Some("alice")).await;

    let me = whoami(&alice).await;
    assert_eq!(me["actor"], "alice@PEOPLE");
    assert_eq!(me["relayed"], false);

    let forged_info = r#"{"acc":"PEOPLE","user":"mallory"}"#;
    for headers in [
        vec![(HEADER_REQUEST_INFO, forged_info)],
        vec![(HEADER_ON_BEHALF_OF, "mallory@PEOPLE")],
        vec![
            (HEADER_REQUEST_INFO, forged_info),
            (HEADER_ON_BEHALF_OF, "mallory@PEOPLE"),
        ],
    ] {
        let me = whoami_with_headers(&alice, &headers).await;
        assert_eq!(
            me["actor"], "alice@PEOPLE",
            "forged {headers:?} was honoured"
        );
    }
}

#[tokio::test]
async fn a_module_may_act_for_a_person_inside_the_module_account() {
    let bus = Bus::two_account(&["echo", "relay"], &[]).await;
    let _echo = bus.serve(echo::module()).await;
    let relay = bus.client_as(Some("relay")).await;

    // A module calling on its own has no actor; acting for someone, it says so.
    assert_eq!(whoami(&relay).await["actor"], Value::Null);
    let actor = "carol@PEOPLE".parse().unwrap();
    let me = whoami(&relay.on_behalf_of(&actor)).await;
    assert_eq!(me["actor"], "carol@PEOPLE");
    assert_eq!(me["relayed"], true);
}

#[tokio::test]
async fn a_single_account_bus_is_local_mode_and_trusts_no_header() {
    let bus = Bus::single().await;
    let _echo = bus
        .serve_with(
            echo::module(),
            ServeOptions {
                layout: Layout::Local,
                ..Default::default()
            },
        )
        .await;
    let client = bus.client().await;
    assert_eq!(whoami(&client).await["actor"], Value::Null);
    let me = whoami_with_headers(
        &client,
        &[
            (HEADER_REQUEST_INFO, r#"{"acc":"PEOPLE","user":"mallory"}"#),
            (HEADER_ON_BEHALF_OF, "mallory@PEOPLE"),
        ],
    )
    .await;
    assert_eq!(me["actor"], Value::Null);
}
