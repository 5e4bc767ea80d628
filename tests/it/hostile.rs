//! A person trying to knock the mesh over with what they may publish: header blocks no
//! client library would send, to a subject every person may publish (a module's `tools` verb).

use std::time::Duration;

use mesh_core::client::Client;
use mesh_core::subjects::FullName;
use serde_json::{Value, json};

use crate::bus::{Bus, GENEROUS};
use crate::raw::{Raw, Reply};

/// Header blocks that once ended a module's connection, or its connection task.
const MALFORMED: [&[u8]; 8] = [
    b"NATS/1.0\r\nBad Header: x\r\n\r\n",
    b"NATS/1.0\r\nX: a\rY: b\r\n\r\n",
    // The same lone CR in a value folded over two lines (the parser joins those apart).
    b"NATS/1.0\r\nX: a\r\n b\rc\r\n\r\n",
    b"NATS/1.0\r\nno colon here\r\n\r\n",
    b"HTTP/1.1\r\nX: a\r\n\r\n",
    b"NATS/1.0 abc\r\nX: a\r\n\r\n",
    b"NATS/1.0\r\nX: \xff\xfe\r\n\r\n",
    b"NATS/1.0\r\nX\x00Y: a\r\n\r\n",
];

async fn sleep_call(client: Client) -> Result<Value, String> {
    client
        .call(
            &FullName::parse("echo_sleep").unwrap(),
            &json!({"ms": 1000}),
            GENEROUS,
        )
        .await
        .map(|r| json!(r.text_content()))
        .map_err(|e| e.to_string())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_header_blocks_do_not_cut_a_module_off() {
    let bus = Bus::accounts(
        &["echo"],
        &[
            ("guest", &[]),
            ("bob", &["mesh.echo.sleep", "mesh.echo.whoami"]),
        ],
    )
    .await;
    let _echo = bus.serve(mesh_echo::module()).await;
    let bob = bus.client_as(Some("bob")).await;

    // 20 calls in flight while the guest sends every malformed block, again and again.
    let calls: Vec<_> = (0..20)
        .map(|_| tokio::spawn(sleep_call(bob.clone())))
        .collect();
    let mut guest = Raw::connect(&bus.url(), "guest", "pw-guest").await;
    for _ in 0..10 {
        for block in MALFORMED {
            // The tools verb answers whatever the headers were.
            let reply = guest.request("mesh.echo.tools", block, b"").await;
            let Reply::Message { payload, .. } = &reply else {
                panic!("{:?}: {reply:?}", String::from_utf8_lossy(block));
            };
            let tools: Value = serde_json::from_slice(payload).unwrap();
            assert_eq!(tools["module"], "echo");
        }
    }
    for call in calls {
        let r = call.await.unwrap();
        assert_eq!(r, Ok(json!("slept 1000 ms")), "a call in flight was lost");
    }

    // As a tool call, such a block names nobody: refused, saying why; the module serves on.
    let mut raw = Raw::connect(&bus.url(), "bob", "pw-bob").await;
    for block in MALFORMED {
        let r = raw.request("mesh.echo.whoami", block, b"{}").await.json();
        assert_eq!(r["isError"], true, "{r}");
        let text = r["content"][0]["text"].as_str().unwrap();
        assert!(text.contains("header block does not parse"), "{text}");
    }
    let me = crate::identity::whoami(&bob).await;
    assert_eq!(me["actor"], "bob@PEOPLE");
}

#[tokio::test]
async fn a_reply_with_a_malformed_header_block_does_not_cut_a_caller_off() {
    // A hostile module answering with a block the caller's library cannot parse.
    let bus = Bus::single().await;
    let nats = async_nats::connect(bus.url()).await.unwrap();
    let mut requests = nats.subscribe("mesh.evil.tool").await.unwrap();
    crate::bus::round_trip(&nats).await;
    let server = tokio::spawn({
        let url = bus.url();
        async move {
            use futures_util::StreamExt;
            let addr = url.trim_start_matches("nats://").to_owned();
            while let Some(msg) = requests.next().await {
                let reply = msg.reply.unwrap().to_string();
                // Answer over a raw socket, with a header block no library would send.
                let mut sock = tokio::net::TcpStream::connect(&addr).await.unwrap();
                use tokio::io::{AsyncReadExt, AsyncWriteExt};
                let mut info = [0u8; 4096];
                let _ = sock.read(&mut info).await.unwrap();
                let block = b"NATS/1.0\r\nBad Header: x\r\n\r\n";
                let body = br#"{"content":[{"type":"text","text":"hi"}]}"#;
                let frame = format!(
                    "CONNECT {{\"headers\":true,\"verbose\":false}}\r\nHPUB {reply} {} {}\r\n",
                    block.len(),
                    block.len() + body.len()
                );
                sock.write_all(frame.as_bytes()).await.unwrap();
                sock.write_all(block).await.unwrap();
                sock.write_all(body).await.unwrap();
                sock.write_all(b"\r\nPING\r\n").await.unwrap();
                let _ = sock.read(&mut info).await;
            }
        }
    });
    let client = bus.client().await;
    // Twice: the caller's connection is still there for the next call.
    for _ in 0..2 {
        let r = client
            .call(
                &FullName::parse("evil_tool").unwrap(),
                &json!({}),
                Duration::from_secs(10),
            )
            .await
            .unwrap();
        assert_eq!(r.text_content(), "hi");
    }
    server.abort();
}
