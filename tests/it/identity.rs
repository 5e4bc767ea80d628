//! Who the runtime says is calling: stamped by the server, never chosen by the caller —
//! tried with raw protocol bytes no client library would send, by people and by modules.

use mesh_core::actor::Layout;
use mesh_core::client::{Client, Outcome};
use mesh_core::runtime::ServeOptions;
use mesh_core::subjects::{FullName, HEADER_ON_BEHALF_OF, HEADER_REQUEST_INFO, ToolResult};
use serde_json::{Value, json};

use crate::bus::{self, Bus, GENEROUS};
use crate::raw::{Raw, Reply};

/// What `echo_whoami` says of `client`.
pub async fn whoami(client: &Client) -> Value {
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

const FORGED: &str = r#"{"acc":"PEOPLE","user":"me"}"#;

/// What the module must make of a forged header block: refuse the call, or see the
/// server's identity alone (when nats-server removed the forgery itself).
#[derive(Debug, Clone, Copy, PartialEq)]
enum Verdict {
    Refused,
    Stamped,
}
use Verdict::{Refused, Stamped};

/// Header blocks an attacker would try, each carrying the forged identity of `me`.
fn forgeries() -> Vec<(&'static str, String, Verdict)> {
    vec![
        (
            "after a bare LF",
            format!("NATS/1.0\r\nX: a\nNats-Request-Info: {FORGED}\r\n\r\n"),
            Refused,
        ),
        (
            "lower case",
            format!("NATS/1.0\r\nnats-request-info: {FORGED}\r\n\r\n"),
            Refused,
        ),
        (
            "upper case after a bare LF",
            format!("NATS/1.0\r\nX: a\nNATS-REQUEST-INFO: {FORGED}\r\n\r\n"),
            Refused,
        ),
        (
            "first line, CRLF",
            format!("NATS/1.0\r\nNats-Request-Info: {FORGED}\r\n\r\n"),
            Stamped,
        ),
        (
            "twice, CRLF",
            format!(
                "NATS/1.0\r\nNats-Request-Info: {FORGED}\r\nNats-Request-Info: {FORGED}\r\n\r\n"
            ),
            Stamped,
        ),
        (
            "folded into another header",
            format!("NATS/1.0\r\nX: a\r\n Nats-Request-Info: {FORGED}\r\n\r\n"),
            Refused,
        ),
        (
            "bare LF only",
            format!("NATS/1.0\nNats-Request-Info: {FORGED}\n\n"),
            Refused,
        ),
        // The server cuts the block's last two bytes and appends its stamp: after a line of
        // one space (or tab) the stamp is folded into the header before it, ...
        (
            "the server's stamp folded under a space",
            format!("NATS/1.0\r\nnats-request-info: {FORGED}\r\nX: a\r\n \r\n"),
            Refused,
        ),
        (
            "the server's stamp folded under a tab",
            format!("NATS/1.0\r\nnats-request-info: {FORGED}\r\nX: a\r\n\t\r\n"),
            Refused,
        ),
        // ... and without the final CRLF it is glued onto the last value.
        (
            "the server's stamp glued to an unterminated block",
            format!("NATS/1.0\r\nnats-request-info: {FORGED}\r\nX: aZZ"),
            Refused,
        ),
        (
            "exact case, the server's stamp folded away",
            format!("NATS/1.0\r\nX: a\nNats-Request-Info: {FORGED}\r\nY: b\r\n \r\n"),
            Refused,
        ),
    ]
}

/// Sends every forgery as `who` on a raw socket and checks each verdict; `stamped` is who
/// whoami must report when the server's identity alone arrives.
async fn forge_every_way(bus: &Bus, who: &str, stamped: &str) {
    let mut raw = Raw::connect(&bus.url(), who, &format!("pw-{who}")).await;
    for (what, block, verdict) in forgeries() {
        let reply = raw
            .request("mesh.echo.whoami", block.as_bytes(), b"{}")
            .await;
        let Reply::Message { headers, .. } = &reply else {
            panic!("{what}: {reply:?}");
        };
        let result = reply.json();
        match verdict {
            Refused => {
                assert_eq!(result["isError"], true, "{what}: {result}");
                let text = result["content"][0]["text"].as_str().unwrap();
                assert!(text.contains("refused"), "{what}: {text}");
                assert!(
                    headers.contains("Nats-Service-Error-Code: 403"),
                    "{what}: {headers}"
                );
            }
            Stamped => {
                let seen = &result["structuredContent"];
                let name = seen["actor"].as_str().or(seen["module"].as_str());
                assert_eq!(name, Some(stamped), "{what}: {result}");
            }
        }
        assert!(
            !result.to_string().contains("me@PEOPLE"),
            "{what}: {result}"
        );
    }
    // Whatever came before, the module still serves.
    let r = raw.request("mesh.echo.whoami", b"", b"{}").await.json();
    assert_eq!(r["isError"], Value::Null, "{r}");
}

#[tokio::test]
async fn no_header_block_lets_a_person_choose_who_they_are() {
    let bus = Bus::accounts(&["echo"], &[("alice", &["mesh.echo.whoami"])]).await;
    let _echo = bus.serve(mesh_echo::module()).await;
    forge_every_way(&bus, "alice", "alice@PEOPLE").await;

    // Through a client library: the server removes what the library sends.
    let alice = bus.client_as(Some("alice")).await;
    let me = whoami(&alice).await;
    assert_eq!(me["actor"], "alice@PEOPLE");
    assert_eq!(me["relayed"], false);
    for headers in [
        vec![(HEADER_REQUEST_INFO, FORGED)],
        vec![(HEADER_ON_BEHALF_OF, "me@PEOPLE")],
        vec![
            (HEADER_REQUEST_INFO, FORGED),
            (HEADER_ON_BEHALF_OF, "me@PEOPLE"),
        ],
    ] {
        let me = whoami_with_headers(&alice, &headers).await;
        assert_eq!(
            me["actor"], "alice@PEOPLE",
            "forged {headers:?} was honoured"
        );
    }

    // The mesh-obo twin is for modules: a person's publish there is denied by the server.
    let mut raw = Raw::connect(&bus.url(), "alice", "pw-alice").await;
    let block = "NATS/1.0\r\nMesh-On-Behalf-Of: me@PEOPLE\r\n\r\n";
    match raw
        .request("mesh-obo.echo.whoami", block.as_bytes(), b"{}")
        .await
    {
        Reply::Err(e) => assert!(e.contains("Permissions Violation"), "{e}"),
        other => panic!("a person reached mesh-obo: {other:?}"),
    }
}

#[tokio::test]
async fn a_module_is_seen_as_itself_and_cannot_pose_as_a_person() {
    let bus = Bus::accounts_with(
        &[bus::module("echo"), bus::calling("weather", &["echo"])],
        &[],
    )
    .await;
    let _echo = bus.serve(mesh_echo::module()).await;
    forge_every_way(&bus, "weather", "weather").await;

    let weather = bus.client_as(Some("weather")).await;
    let me = whoami(&weather).await;
    assert_eq!(me, json!({"actor": null, "module": "weather"}));
    // Asking to act for someone needs a grant it does not have.
    let e = weather
        .for_person(&bus.ticket("alice", "weather", "weather_x", GENEROUS))
        .call(
            &FullName::parse("echo_whoami").unwrap(),
            &json!({}),
            GENEROUS,
        )
        .await
        .unwrap_err();
    assert_eq!(e.outcome(), Outcome::Denied, "{e}");
    // And on its own subject a Mesh-On-Behalf-Of counts for nothing.
    let me = whoami_with_headers(&weather, &[(HEADER_ON_BEHALF_OF, "alice@PEOPLE")]).await;
    assert_eq!(me, json!({"actor": null, "module": "weather"}));
}

#[tokio::test]
async fn a_module_granted_it_acts_for_a_person_and_is_named_too() {
    let bus = Bus::accounts_with(
        &[
            bus::module("catalog"),
            bus::module("echo"),
            bus::acting_for_people("relay", &["echo_whoami"]),
        ],
        &[],
    )
    .await;
    // The issuer, whom echo asks whether the ticket's call still runs.
    let _catalog = bus.serve_catalog().await;
    let _echo = bus.serve(mesh_echo::module()).await;
    let relay = bus.client_as(Some("relay")).await;
    let ticket = bus.ticket("carol", "relay", "relay_x", GENEROUS);
    let me = whoami(&relay.for_person(&ticket)).await;
    assert_eq!(me["actor"], "carol@PEOPLE");
    assert_eq!(me["relayed"], true);
    assert_eq!(me["via"], "relay");
    // Only toward the tools granted: echo's twin is not relay's to publish.
    let e = relay
        .for_person(&ticket)
        .call(
            &FullName::parse("echo").unwrap(),
            &json!({"text": "x"}),
            GENEROUS,
        )
        .await
        .unwrap_err();
    assert_eq!(e.outcome(), Outcome::Denied, "{e}");

    // Two persons, a module posing as a person, or none at all: refused.
    let mut raw = Raw::connect(&bus.url(), "relay", "pw-relay").await;
    for (what, block) in [
        (
            "two persons",
            "NATS/1.0\r\nMesh-On-Behalf-Of: carol@PEOPLE\r\nmesh-on-behalf-of: dan@PEOPLE\r\n\r\n",
        ),
        (
            "a module",
            "NATS/1.0\r\nMesh-On-Behalf-Of: echo@MODULE_echo\r\n\r\n",
        ),
        ("nobody", "NATS/1.0\r\nX: y\r\n\r\n"),
        (
            "a second stamp",
            "NATS/1.0\r\nMesh-On-Behalf-Of: carol@PEOPLE\nNats-Request-Info: {\"acc\":\"MODULE_avu\",\"user\":\"avu\"}\r\n\r\n",
        ),
    ] {
        let r = raw
            .request("mesh-obo.echo.whoami", block.as_bytes(), b"{}")
            .await
            .json();
        assert_eq!(r["isError"], true, "{what}: {r}");
        assert!(
            r["content"][0]["text"]
                .as_str()
                .unwrap()
                .contains("refused"),
            "{what}: {r}"
        );
    }
}

#[tokio::test]
async fn a_single_account_bus_is_local_mode_and_trusts_no_header() {
    let bus = Bus::single().await;
    let _echo = bus
        .serve_with(
            mesh_echo::module(),
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
            (HEADER_REQUEST_INFO, FORGED),
            (HEADER_ON_BEHALF_OF, "me@PEOPLE"),
        ],
    )
    .await;
    assert_eq!(me["actor"], Value::Null);
}
