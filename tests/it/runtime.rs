//! The module runtime on a real bus: the tools verb, refusals, arguments, panics, bounds, drain,
//! sharing calls, `$SRV`, and coming back after the server restarts.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use mesh_core::client::{CallError, Outcome, outcome};
use mesh_core::runtime::{Call, Module, ServeError, ServeOptions, Serving, Tool};
use mesh_core::subjects::{self, FullName, ToolResult};
use serde_json::{Value, json};
use tokio::sync::mpsc;

use crate::bus::{Bus, GENEROUS};

fn name(s: &str) -> FullName {
    FullName::parse(s).unwrap()
}

#[tokio::test]
async fn tools_verb_lists_names_descriptions_and_schemas() {
    let bus = Bus::single().await;
    let _echo = bus.serve(mesh_echo::module()).await;
    let client = bus.client().await;

    let reply = client.tools("echo", GENEROUS).await.unwrap();
    assert_eq!(reply.module, "echo");
    assert_eq!(reply.version, env!("CARGO_PKG_VERSION"));
    let names: Vec<&str> = reply.tools.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(names, ["echo", "fail", "sleep", "choose", "whoami"]);
    let echo_tool = &reply.tools[0];
    assert_eq!(echo_tool.description, "Returns the text it is given");
    assert_eq!(echo_tool.input_schema["required"], json!(["text"]));
    assert_eq!(
        echo_tool.annotations.as_ref().unwrap()["readOnlyHint"],
        true
    );

    // The raw reply matches the contract in subjects/.
    let raw = client
        .nats()
        .request("mesh.echo.tools", "".into())
        .await
        .unwrap();
    let value: Value = serde_json::from_slice(&raw.payload).unwrap();
    let schema: Value = serde_json::from_str(subjects::TOOLS_REPLY_SCHEMA).unwrap();
    let validator = jsonschema::validator_for(&schema).unwrap();
    assert!(validator.is_valid(&value), "{value}");
}

#[tokio::test]
async fn a_tool_named_tools_is_refused_at_start() {
    let bus = Bus::single().await;
    let client = bus.client().await;
    let module = Module::new("bad", "1.0.0", "").tool(Tool::new(
        "tools",
        "clashes with the verb",
        json!({"type": "object"}),
        |_c: Call| async { ToolResult::text("") },
    ));
    let err = Serving::start(module, client.nats().clone(), ServeOptions::default())
        .await
        .err()
        .expect("refused");
    assert!(matches!(err, ServeError::Module(_)));
    let msg = err.to_string();
    assert!(
        msg.contains("\"tools\" is reserved") && msg.contains("mesh.<module>.tools"),
        "{msg}"
    );
    // And nothing was subscribed.
    let r = client.tools("bad", GENEROUS).await;
    assert!(matches!(r, Err(CallError::NobodyServes { .. })), "{r:?}");
}

#[tokio::test]
async fn round_trip_and_call_result_contract() {
    let bus = Bus::single().await;
    let _echo = bus.serve(mesh_echo::module()).await;
    let client = bus.client().await;
    let r = client
        .call(&name("echo"), &json!({"text": "héllo"}), GENEROUS)
        .await
        .unwrap();
    assert!(!r.is_error);
    assert_eq!(r.text_content(), "héllo");

    let schema: Value = serde_json::from_str(subjects::CALL_RESULT_SCHEMA).unwrap();
    let validator = jsonschema::validator_for(&schema).unwrap();
    assert!(validator.is_valid(&serde_json::to_value(&r).unwrap()));
}

#[tokio::test]
async fn bad_arguments_are_tool_errors_that_name_the_problem() {
    let bus = Bus::single().await;
    let _echo = bus.serve(mesh_echo::module()).await;
    let client = bus.client().await;
    let nats = client.nats();

    let cases: [(&[u8], &str); 4] = [
        (b"{\"text\":", "arguments of echo are not valid JSON"),
        (
            b"[\"hi\"]",
            "arguments of echo must be a JSON object, got an array",
        ),
        (b"{\"text\": 5}", "at /text: 5 is not of type \"string\""),
        (b"{}", "\"text\" is a required property"),
    ];
    for (body, expected) in cases {
        let msg = nats
            .request("mesh.echo.echo", body.to_vec().into())
            .await
            .unwrap();
        let r: ToolResult = serde_json::from_slice(&msg.payload).unwrap();
        assert!(r.is_error, "{body:?} accepted");
        assert!(
            r.text_content().contains(expected),
            "{:?}: {}",
            body,
            r.text_content()
        );
        let headers = msg.headers.expect("error headers");
        assert_eq!(
            headers
                .get(subjects::HEADER_SERVICE_ERROR_CODE)
                .unwrap()
                .as_str(),
            "400"
        );
    }
    // The module still answers well-formed calls.
    let r = client
        .call(&name("echo"), &json!({"text": "ok"}), GENEROUS)
        .await
        .unwrap();
    assert_eq!(r.text_content(), "ok");
}

fn panicky() -> Module {
    Module::new("panicky", "1.0.0", "panics on request").tool(Tool::new(
        "maybe",
        "panics when asked to",
        json!({"type": "object", "properties": {"panic": {"type": "boolean"}}}),
        |c: Call| async move {
            if c.args.get("panic") == Some(&json!(true)) {
                panic!("asked to panic");
            }
            ToolResult::text("fine")
        },
    ))
}

#[tokio::test]
async fn a_panicking_handler_is_a_tool_error_and_the_module_keeps_serving() {
    let bus = Bus::single().await;
    let _m = bus.serve(panicky()).await;
    let client = bus.client().await;
    let tool = name("panicky_maybe");
    for _ in 0..3 {
        let r = client
            .call(&tool, &json!({"panic": true}), GENEROUS)
            .await
            .unwrap();
        assert!(r.is_error);
        assert!(
            r.text_content().contains("asked to panic"),
            "{}",
            r.text_content()
        );
        let r = client.call(&tool, &json!({}), GENEROUS).await.unwrap();
        assert_eq!(r.text_content(), "fine");
    }
}

/// A tool that records how many of its calls run at once.
fn gauge(current: Arc<AtomicUsize>, peak: Arc<AtomicUsize>) -> Module {
    Module::new("gauge", "1.0.0", "").tool(Tool::new(
        "hold",
        "holds a slot for a while",
        json!({"type": "object"}),
        move |_c: Call| {
            let (current, peak) = (current.clone(), peak.clone());
            async move {
                let now = current.fetch_add(1, Ordering::SeqCst) + 1;
                peak.fetch_max(now, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(50)).await;
                current.fetch_sub(1, Ordering::SeqCst);
                ToolResult::text("held")
            }
        },
    ))
}

#[tokio::test]
async fn in_flight_calls_are_bounded() {
    let bus = Bus::single().await;
    let (current, peak) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let options = ServeOptions {
        max_in_flight: 2,
        ..Default::default()
    };
    let _m = bus.serve_with(gauge(current, peak.clone()), options).await;
    let client = bus.client().await;
    let calls = (0..8).map(|_| {
        let client = client.clone();
        async move { client.call(&name("gauge_hold"), &json!({}), GENEROUS).await }
    });
    for r in futures_util::future::join_all(calls).await {
        assert_eq!(r.unwrap().text_content(), "held");
    }
    assert_eq!(
        peak.load(Ordering::SeqCst),
        2,
        "more calls ran at once than allowed"
    );
}

#[tokio::test]
async fn shutdown_drains_calls_in_flight() {
    let bus = Bus::single().await;
    let (started_tx, mut started) = mpsc::channel::<()>(1);
    let (release_tx, release) = tokio::sync::watch::channel(false);
    let module = Module::new("slowpoke", "1.0.0", "")
        .tool(Tool::new(
            "wait",
            "answers when released",
            json!({"type": "object"}),
            move |_c: Call| {
                let started_tx = started_tx.clone();
                let mut release = release.clone();
                async move {
                    let _ = started_tx.send(()).await;
                    let _ = release.wait_for(|r| *r).await;
                    ToolResult::text("finished")
                }
            },
        ))
        .tool(Tool::new(
            "ping",
            "answers at once",
            json!({"type": "object"}),
            |_c: Call| async { ToolResult::text("pong") },
        ));
    let mut running = bus.serve(module).await;
    let client = bus.client().await;
    let pending = {
        let client = client.clone();
        tokio::spawn(async move {
            client
                .call(&name("slowpoke_wait"), &json!({}), GENEROUS)
                .await
        })
    };
    started.recv().await.unwrap();
    running.begin_stop();
    // Once the subscriptions are gone, new calls find nobody, while the old one is still held.
    let mut nobody = false;
    for _ in 0..20_000 {
        let r = client
            .call(&name("slowpoke_ping"), &json!({}), GENEROUS)
            .await;
        if outcome(&r) == Outcome::NobodyServes {
            nobody = true;
            break;
        }
        assert_eq!(r.unwrap().text_content(), "pong");
        tokio::task::yield_now().await;
    }
    assert!(nobody, "the draining module kept taking calls");
    release_tx.send(true).unwrap();
    let r = pending.await.unwrap().unwrap();
    assert_eq!(r.text_content(), "finished");
    running.join().await;
}

#[tokio::test]
async fn two_instances_share_the_calls() {
    let bus = Bus::single().await;
    let a = bus.serve(mesh_echo::module()).await;
    let b = bus.serve(mesh_echo::module()).await;
    let client = bus.client().await;
    for i in 0..200 {
        let r = client
            .call(&name("echo"), &json!({"text": i.to_string()}), GENEROUS)
            .await
            .unwrap();
        assert_eq!(r.text_content(), i.to_string());
    }
    let mut per_instance = std::collections::HashMap::new();
    for id in [&a.id, &b.id] {
        let msg = client
            .nats()
            .request(format!("$SRV.STATS.echo.{id}"), "".into())
            .await
            .unwrap();
        let stats: Value = serde_json::from_slice(&msg.payload).unwrap();
        let echo = stats["endpoints"]
            .as_array()
            .unwrap()
            .iter()
            .find(|e| e["name"] == "echo")
            .unwrap();
        assert_eq!(echo["queue_group"], "echo");
        per_instance.insert(id.clone(), echo["num_requests"].as_u64().unwrap());
    }
    let total: u64 = per_instance.values().sum();
    assert_eq!(total, 200);
    assert!(
        per_instance.values().all(|n| *n > 0),
        "one instance took every call: {per_instance:?}"
    );

    // With one instance stopped, the other takes every call.
    a.stop().await;
    for _ in 0..20 {
        let r = client
            .call(&name("echo"), &json!({"text": "b"}), GENEROUS)
            .await;
        assert_eq!(r.unwrap().text_content(), "b");
    }
    drop(b);
}

#[tokio::test]
async fn srv_info_lists_the_tools_and_stats_count_errors() {
    let bus = Bus::single().await;
    let m = bus.serve(mesh_echo::module()).await;
    let client = bus.client().await;
    let msg = client
        .nats()
        .request("$SRV.INFO.echo", "".into())
        .await
        .unwrap();
    let info: Value = serde_json::from_slice(&msg.payload).unwrap();
    assert_eq!(info["type"], "io.nats.micro.v1.info_response");
    assert_eq!(info["name"], "echo");
    assert_eq!(info["id"], m.id.as_str());
    let endpoints: Vec<(String, String)> = info["endpoints"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            (
                e["name"].as_str().unwrap().into(),
                e["subject"].as_str().unwrap().into(),
            )
        })
        .collect();
    for tool in ["echo", "fail", "sleep", "whoami", "tools"] {
        assert!(
            endpoints.contains(&(tool.to_string(), format!("mesh.echo.{tool}"))),
            "{tool} missing from {endpoints:?}"
        );
    }

    let r = client
        .call(&name("echo_fail"), &json!({"text": "no"}), GENEROUS)
        .await
        .unwrap();
    assert!(r.is_error);
    let msg = client.nats().request("$SRV.PING", "".into()).await.unwrap();
    let ping: Value = serde_json::from_slice(&msg.payload).unwrap();
    assert_eq!(ping["name"], "echo");
    let msg = client
        .nats()
        .request("$SRV.STATS.echo", "".into())
        .await
        .unwrap();
    let stats: Value = serde_json::from_slice(&msg.payload).unwrap();
    let fail = stats["endpoints"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["name"] == "fail")
        .unwrap();
    assert_eq!(fail["num_requests"], 1);
    assert_eq!(fail["num_errors"], 1);
    // The kind of error, never the text of somebody's call.
    assert_eq!(fail["last_error"], "500:tool error");
}

#[tokio::test]
async fn the_module_serves_again_after_the_server_restarts() {
    let mut bus = Bus::single().await;
    let _echo = bus.serve(mesh_echo::module()).await;
    let client = bus.client().await;
    let tool = name("echo");
    let args = json!({"text": "before"});
    assert_eq!(
        client
            .call(&tool, &args, GENEROUS)
            .await
            .unwrap()
            .text_content(),
        "before"
    );

    let port = bus.server.port();
    bus.server.restart().await.expect("restart");
    assert_eq!(bus.server.port(), port);

    // Neither the module nor the client is touched: both reconnect by themselves.
    let args = json!({"text": "after"});
    let mut last = None;
    for _ in 0..60 {
        match client.call(&tool, &args, Duration::from_millis(500)).await {
            Ok(r) => {
                assert_eq!(r.text_content(), "after");
                return;
            }
            Err(e) => {
                assert!(
                    matches!(
                        e,
                        CallError::NobodyServes { .. }
                            | CallError::Slow { .. }
                            | CallError::Disconnected { .. }
                            | CallError::NotConnected { .. }
                            | CallError::ConnectionLost { .. }
                    ),
                    "unexpected outcome during the gap: {e}"
                );
                last = Some(e);
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
        }
    }
    panic!("the module did not come back: {last:?}");
}

#[tokio::test]
async fn a_caller_sends_its_deadline_by_default_and_the_handler_sees_it() {
    let bus = Bus::single().await;
    let module = Module::new("clock", "1.0.0", "").tool(Tool::new(
        "deadline",
        "tells how long the caller still waits, in ms",
        json!({"type": "object"}),
        |c: Call| async move {
            match c.deadline {
                None => ToolResult::json(json!({"left_ms": null})),
                Some(d) => {
                    let left = d
                        .duration_since(std::time::SystemTime::now())
                        .unwrap_or_default();
                    ToolResult::json(json!({"left_ms": left.as_millis() as u64}))
                }
            }
        },
    ));
    let _m = bus.serve(module).await;
    let client = bus.client().await;
    let tool = name("clock_deadline");
    let r = client
        .call(&tool, &json!({}), Duration::from_secs(60))
        .await
        .unwrap();
    let left = r.structured_content.unwrap()["left_ms"].as_u64().unwrap();
    assert!(left > 0 && left <= 60_000, "{left}");
    // A caller may leave it out (one header less on the wire).
    let r = client
        .without_deadline()
        .call(&tool, &json!({}), GENEROUS)
        .await
        .unwrap();
    assert_eq!(r.structured_content.unwrap()["left_ms"], Value::Null);
}

/// An instance replaced while a crowd calls (a module upgraded in place, a bridge serving a
/// server's new tool list: the new instance starts, then the old one drains, on the same
/// connection) loses no call: each of the crowd's calls and tools requests is answered,
/// none waits out its deadline. A drain that let its subscription go once its UNSUB was written, not once the
/// server had taken it, dropped a call the server had sent just before (1 in about 20 runs
/// of 16 replacements and one caller; here most runs).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_instance_replaced_under_a_crowd_of_callers_loses_no_call() {
    use crate::bus::serve_on;
    use std::sync::atomic::AtomicBool;
    let bus = Bus::single().await;
    let nats = bus.client().await.nats().clone();
    let options = || ServeOptions {
        ticket_keys: Some(vec![bus.issuer.public_key()]),
        ..Default::default()
    };
    let mut serving = serve_on(nats.clone(), mesh_echo::module(), options()).await;
    let stop = Arc::new(AtomicBool::new(false));
    let answered = Arc::new(AtomicUsize::new(0));
    let mut crowd = Vec::new();
    // Six call a tool, two ask the tools verb.
    for caller in 0..8 {
        let (client, stop, answered) = (bus.client().await, stop.clone(), answered.clone());
        crowd.push(tokio::spawn(async move {
            let mut others = Vec::new();
            while !stop.load(Ordering::Relaxed) {
                let r = if caller < 6 {
                    client
                        .call(&name("echo"), &json!({"text": "x"}), GENEROUS)
                        .await
                        .map(|_| ())
                } else {
                    client.tools("echo", GENEROUS).await.map(|_| ())
                };
                match r {
                    Ok(()) => {
                        answered.fetch_add(1, Ordering::Relaxed);
                    }
                    Err(e) => others.push(format!("{e:?}")),
                }
            }
            others
        }));
    }
    for _ in 0..40 {
        // A replacement while calls are on the wire.
        let at = answered.load(Ordering::Relaxed);
        // Bounded: callers that stopped being answered fail the test, not hang it.
        tokio::time::timeout(GENEROUS, async {
            while answered.load(Ordering::Relaxed) < at + 20 {
                tokio::task::yield_now().await;
            }
        })
        .await
        .expect("the crowd is answered between replacements");
        let next = serve_on(nats.clone(), mesh_echo::module(), options()).await;
        std::mem::replace(&mut serving, next).stop().await;
    }
    stop.store(true, Ordering::Relaxed);
    let mut lost = Vec::new();
    for caller in crowd {
        lost.extend(caller.await.unwrap());
    }
    assert!(
        lost.is_empty(),
        "{} calls not answered: {lost:?}",
        lost.len()
    );
    serving.stop().await;
}

/// A drain ends at the PONG to its own PING, whatever the server says first. nats-server
/// answers a connection's PING before anything else, so this one server is a stand-in that
/// speaks the protocol: at the handshake it sends a PING of its own before the PONG (which the
/// client once took for the handshake's answer, leaving the real PONG to be counted against
/// a drain), and then a last message for the drained subscription after the PING that
/// follows its UNSUB but before that PING's PONG. The subscription gets it either way.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_drain_waits_for_its_own_pong_whatever_the_server_says_first() {
    use futures_util::StreamExt;
    use tokio::io::{AsyncBufReadExt, AsyncWriteExt};
    for ping_first in [false, true] {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let server = tokio::spawn(async move {
            let Some((mut r, mut w)) = stand_in_handshake(listener).await else {
                return;
            };
            let mut line = String::new();
            let answer: &[u8] = if ping_first {
                b"PING\r\nPONG\r\n"
            } else {
                b"PONG\r\n"
            };
            w.write_all(answer).await.unwrap();
            let mut unsubscribed = false;
            loop {
                line.clear();
                if r.read_line(&mut line).await.unwrap() == 0 {
                    return;
                }
                if line.starts_with("UNSUB 1") {
                    unsubscribed = true;
                } else if line.starts_with("PING") {
                    if unsubscribed {
                        // Wakes the client, then sends what it had before the UNSUB.
                        w.write_all(b"PING\r\n").await.unwrap();
                        tokio::time::sleep(Duration::from_millis(100)).await;
                        w.write_all(b"MSG x 1 4\r\nlast\r\n").await.unwrap();
                        tokio::time::sleep(Duration::from_millis(100)).await;
                    }
                    w.write_all(b"PONG\r\n").await.unwrap();
                }
            }
        });
        let client = async_nats::ConnectOptions::new()
            .connect(format!("nats://127.0.0.1:{port}"))
            .await
            .unwrap();
        let mut sub = client.subscribe("x").await.unwrap();
        client.flush().await.unwrap();
        sub.drain().await.unwrap();
        let mut got = Vec::new();
        tokio::time::timeout(GENEROUS, async {
            while let Some(m) = sub.next().await {
                got.push(m.payload);
            }
        })
        .await
        .expect("the drain ends");
        assert_eq!(
            got,
            [bytes::Bytes::from_static(b"last")],
            "ping first: {ping_first}"
        );
        server.abort();
    }
}

/// The handshake reads past a server's PINGs to its PONG (above); a server that only ever
/// PINGs cannot hold a connection attempt past its timeout with them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_pings_instead_of_answering_the_handshake_is_given_up_on() {
    use tokio::io::AsyncWriteExt;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let server = tokio::spawn(async move {
        let Some((_r, mut w)) = stand_in_handshake(listener).await else {
            return;
        };
        // PINGs (and INFOs) for ever, never the PONG the handshake waits for.
        while w.write_all(b"PING\r\nINFO {\"server_id\":\"x\",\"version\":\"2.10.0\",\"proto\":1,\"max_payload\":1048576}\r\n").await.is_ok() {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    });
    let connecting = async_nats::ConnectOptions::new()
        .connection_timeout(Duration::from_secs(1))
        .connect(format!("nats://127.0.0.1:{port}"));
    let connected = tokio::time::timeout(GENEROUS, connecting)
        .await
        .expect("the attempt ends at its own timeout");
    assert!(connected.is_err(), "no PONG, no connection");
    server.abort();
}

/// A stand-in server's side of a handshake on `listener`'s first connection: its INFO sent,
/// the client's lines read up to its PING (CONNECT first), nothing answered yet. `None` when
/// the client went away first.
async fn stand_in_handshake(
    listener: tokio::net::TcpListener,
) -> Option<(
    tokio::io::BufReader<tokio::net::tcp::OwnedReadHalf>,
    tokio::net::tcp::OwnedWriteHalf,
)> {
    use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
    let (sock, _) = listener.accept().await.ok()?;
    let (r, mut w) = sock.into_split();
    let mut r = BufReader::new(r);
    w.write_all(b"INFO {\"server_id\":\"x\",\"version\":\"2.10.0\",\"proto\":1,\"max_payload\":1048576,\"headers\":true}\r\n").await.ok()?;
    let mut line = String::new();
    loop {
        line.clear();
        if r.read_line(&mut line).await.ok()? == 0 {
            return None;
        }
        if line.starts_with("PING") {
            return Some((r, w));
        }
    }
}
