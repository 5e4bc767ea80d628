//! The mesh on a cluster of three nats-servers on loopback: modules and people on different
//! servers, the same identities and permissions across the routes, the catalogue kept on
//! three servers, and one server killed under load.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use serde_json::json;

use mesh_core::client::{CallError, Client};
use mesh_core::runtime::{Module, ServeOptions, Serving};
use mesh_core::subjects::{FullName, catalog};

use crate::bus::{ClusterBus, GENEROUS};

fn name(s: &str) -> FullName {
    FullName::parse(s).unwrap()
}

/// Only catches a hang: a cluster that heals heals in seconds.
const HEALS_WITHIN: Duration = Duration::from_secs(60);

/// Calls `tool` until it answers with a result, or the bound passes.
async fn until_answered(client: &Client, tool: &str) -> Duration {
    let started = Instant::now();
    loop {
        match client
            .call(&name(tool), &json!({"text": "hi"}), GENEROUS)
            .await
        {
            Ok(r) if !r.is_error => return started.elapsed(),
            other => {
                assert!(
                    started.elapsed() < HEALS_WITHIN,
                    "{tool} still fails after {HEALS_WITHIN:?}: {other:?}"
                );
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
}

/// A person on one server calls a module on another: the call crosses the routes, nats-server
/// stamps who called as it does on one server, and what is not theirs is denied, not lost.
#[tokio::test]
async fn a_call_crosses_the_cluster_with_its_identity() {
    let bus = ClusterBus::accounts(
        3,
        &["catalog", "echo"],
        &[
            ("ann", &["mesh.echo.echo", "mesh.echo.whoami"]),
            ("bob", &[]),
        ],
    )
    .await;
    let _catalog = bus.serve_catalog_on(0).await;
    let _echo = bus.serve_on(1, mesh_echo::module()).await;
    let ann = bus.client_on(2, "ann").await;
    until_answered(&ann, "echo").await;
    let who = ann
        .call(&name("echo_whoami"), &json!({}), GENEROUS)
        .await
        .unwrap();
    assert!(who.text_content().contains("ann@PEOPLE"), "{who:?}");
    let bob = bus.client_on(0, "bob").await;
    let denied = bob
        .call(&name("echo"), &json!({"text": "x"}), GENEROUS)
        .await;
    assert!(
        matches!(denied, Err(CallError::Denied { .. })),
        "{denied:?}"
    );
    // Discovery from a third server finds echo through the catalogue on the first.
    let found = ann.discover(None, GENEROUS).await.unwrap();
    let echo = found
        .modules
        .iter()
        .find(|m| m.entry.module == "echo")
        .expect("echo is listed");
    assert!(echo.tools.is_ok(), "{:?}", echo.tools);
}

/// The catalogue's bucket has a copy on each of the three servers: with the server the
/// catalogue ran on killed, a catalogue on another server still answers, and a module that
/// starts afterwards registers and is listed.
#[tokio::test]
async fn the_catalogue_outlives_a_server() {
    let mut bus = ClusterBus::accounts(3, &["catalog", "echo", "weather"], &[("ann", &[])]).await;
    let _first = bus.serve_catalog_on(0).await;
    let _second = bus.serve_catalog_on(1).await;
    let ann = bus.client_on(2, "ann").await;
    let js = async_nats::jetstream::new(bus.client_on(1, "catalog").await.nats().clone());
    let mut stream = js
        .get_stream(format!("KV_{}", catalog::BUCKET))
        .await
        .unwrap();
    assert_eq!(stream.info().await.unwrap().config.num_replicas, 3);

    let _echo = bus.serve_on(1, mesh_echo::module()).await;
    bus.cluster.servers[0].stop().await;
    // Read: the catalogue still lists echo.
    let started = Instant::now();
    let killed = started;
    loop {
        let found = ann.discover(None, GENEROUS).await;
        if let Ok(found) = &found
            && found.modules.iter().any(|m| m.entry.module == "echo")
        {
            break;
        }
        assert!(started.elapsed() < HEALS_WITHIN, "{found:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // Written: a module that starts now registers.
    let weather = Module::new("weather", "1.0.0", "forecasts").tool(mesh_core::runtime::Tool::new(
        "forecast",
        "tomorrow",
        json!({"type": "object"}),
        |_| async { mesh_core::subjects::ToolResult::text("sun") },
    ));
    let _weather = bus.serve_on(2, weather).await;
    // Until JetStream has chosen a new leader for the bucket's stream, a registration is
    // refused and the module tries again (after 1 s, 2 s, 4 s …).
    loop {
        let found = ann.discover(Some("weather"), GENEROUS).await;
        if let Ok(found) = &found
            && found.modules.iter().any(|m| m.tools.is_ok())
        {
            break;
        }
        assert!(started.elapsed() < HEALS_WITHIN, "{found:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    eprintln!(
        "a module started after the kill was listed {:?} after it",
        killed.elapsed()
    );
}

/// A module whose host goes with its server (its connection knows no other server) is named
/// as not answering by discovery from the rest of the cluster.
#[tokio::test]
async fn discovery_names_a_module_that_went_with_its_server() {
    let mut bus = ClusterBus::accounts(3, &["catalog", "echo"], &[("ann", &[])]).await;
    let _catalog = bus.serve_catalog_on(1).await;
    let only_server_0 = bus
        .nats_options("echo")
        .await
        .ignore_discovered_servers()
        .max_reconnects(Some(1))
        .connect(bus.url(0))
        .await
        .unwrap();
    let options = ServeOptions {
        layout: mesh_core::actor::Layout::Accounts,
        ..Default::default()
    };
    let serving = Serving::start(mesh_echo::module(), only_server_0, options)
        .await
        .unwrap();
    let echo = tokio::spawn(serving.run(std::future::pending()));
    let ann = bus.client_on(2, "ann").await;
    let listed = |found: &mesh_core::client::Discovery| {
        found
            .modules
            .iter()
            .find(|m| m.entry.module == "echo")
            .map(|m| m.tools.is_ok())
    };
    let started = Instant::now();
    while listed(&ann.discover(None, GENEROUS).await.unwrap()) != Some(true) {
        assert!(started.elapsed() < HEALS_WITHIN);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    bus.cluster.servers[0].stop().await;
    let found = ann.discover(None, GENEROUS).await.unwrap();
    let echo_found = found
        .modules
        .iter()
        .find(|m| m.entry.module == "echo")
        .expect("the catalogue still lists echo");
    assert!(
        matches!(echo_found.tools, Err(CallError::NobodyServes { .. })),
        "{:?}",
        echo_found.tools
    );
    echo.abort();
}

/// Two instances of echo on two servers, a person calling all the while from the server of
/// one of them; that server is killed: the person's connection moves to another server, the
/// other instance answers, and calls fail for a moment at most (how long, printed).
#[tokio::test]
async fn calls_go_on_when_a_server_is_killed_under_load() {
    let mut bus = ClusterBus::accounts(3, &["catalog", "echo"], &[("ann", &["mesh.echo.>"])]).await;
    let _catalog = bus.serve_catalog_on(2).await;
    let _echo0 = bus.serve_on(0, mesh_echo::module()).await;
    let _echo1 = bus.serve_on(1, mesh_echo::module()).await;
    let ann = bus.client_on(0, "ann").await;
    until_answered(&ann, "echo").await;

    let ok = Arc::new(AtomicU64::new(0));
    let failed = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut callers = Vec::new();
    for _ in 0..4 {
        let (ann, ok, failed, stop) = (ann.clone(), ok.clone(), failed.clone(), stop.clone());
        callers.push(tokio::spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                let r = ann
                    .call(&name("echo"), &json!({"text": "x"}), Duration::from_secs(2))
                    .await;
                match r {
                    Ok(r) if !r.is_error => ok.fetch_add(1, Ordering::Relaxed),
                    _ => failed.fetch_add(1, Ordering::Relaxed),
                };
            }
        }));
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let before = ok.load(Ordering::Relaxed);
    assert!(before > 0, "no call answered before the kill");
    bus.cluster.servers[0].stop().await;
    let healed = until_answered(&ann, "echo").await;
    let after_heal = ok.load(Ordering::Relaxed);
    tokio::time::sleep(Duration::from_millis(500)).await;
    stop.store(true, Ordering::Relaxed);
    for c in callers {
        c.await.unwrap();
    }
    let (ok, failed) = (ok.load(Ordering::Relaxed), failed.load(Ordering::Relaxed));
    eprintln!(
        "calls: {before} before the kill, {ok} answered, {failed} failed; answered again after {healed:?}"
    );
    assert!(ok > after_heal, "no call answered after the cluster healed");
}

/// A person's laptop joins through a leaf node: a nats-server of its own with no users,
/// whose one remote logs in to the mesh's leaf port as that person. Tools are called from the
/// laptop with no credential, and the bus treats every call as that person's — stamped so,
/// allowed and denied by that person's permissions.
#[tokio::test]
async fn a_laptop_joins_through_a_leaf_node_as_its_person() {
    let leaf_port = mesh_bus::cluster::free_ports(1).unwrap()[0];
    let dir = tempfile::tempdir().unwrap();
    let modules = [crate::bus::module("catalog"), crate::bus::module("echo")];
    let people = [mesh_bus::layout::Person {
        user: "ann".into(),
        password: "p@ss:w/rd%".into(),
        may_call: vec!["mesh.echo.echo".into(), "mesh.echo.whoami".into()],
    }];
    let hub = format!(
        "{}\n{}",
        mesh_bus::layout::accounts(-1, &dir.path().join("js"), &modules, &people),
        mesh_bus::layout::leafnode_block(&format!("127.0.0.1:{leaf_port}"), None),
    );
    let hub = crate::bus::Bus::from_config(&hub, mesh_core::actor::Layout::Accounts).await;
    let _catalog = hub.serve_catalog().await;
    let _echo = hub.serve(mesh_echo::module()).await;

    let laptop_conf = dir.path().join("laptop.conf");
    std::fs::write(
        &laptop_conf,
        mesh_bus::layout::leaf_for_person(
            -1,
            &format!("127.0.0.1:{leaf_port}"),
            "ann",
            "p@ss:w/rd%",
            None,
        ),
    )
    .unwrap();
    let laptop =
        mesh_bus::natsd::NatsServer::start(&laptop_conf, None, &dir.path().join("laptop.log"))
            .await
            .unwrap();
    // On the laptop, no credential: the inbox prefix is the person's, as on the hub.
    let local = Client::connect(&mesh_core::client::ConnectConfig {
        server: Some(laptop.url()),
        inbox_prefix: Some("_INBOX.ann".into()),
        isolated: true,
        ..Default::default()
    })
    .await
    .unwrap();
    until_answered(&local, "echo").await;
    let who = local
        .call(&name("echo_whoami"), &json!({}), GENEROUS)
        .await
        .unwrap();
    assert!(who.text_content().contains("ann@PEOPLE"), "{who:?}");
    let denied = local
        .call(&name("echo_fail"), &json!({"text": "x"}), GENEROUS)
        .await;
    // The hub tells a leaf of no subscription its user may not publish to, so on the
    // laptop a tool not the person's has nobody serving it: the call never leaves the
    // laptop (docs/deploy.md says so).
    assert!(
        matches!(denied, Err(CallError::NobodyServes { .. })),
        "{denied:?}"
    );
    // `mesh call` tells it apart: the module answered for its tools, so the silence is the
    // permission's.
    let home = tempfile::tempdir().unwrap();
    let (code, _, err) = crate::cli::mesh(
        home.path(),
        &[
            "--server",
            &laptop.url(),
            "--inbox-prefix",
            "_INBOX.ann",
            "call",
            "echo_fail",
            "text=x",
        ],
    )
    .await;
    assert_eq!(code, 4, "{err}");
    assert!(err.contains("not yours"), "{err}");
    let (code, out, err) = crate::cli::mesh(
        home.path(),
        &[
            "--server",
            &laptop.url(),
            "--inbox-prefix",
            "_INBOX.ann",
            "call",
            "echo",
            "text=hi",
        ],
    )
    .await;
    assert_eq!((code, out.trim()), (0, "hi"), "{err}");

    // So does the MCP relay on the laptop: the agent reads "not yours", marked denied, not
    // "nobody serves" (raw JSON-RPC over `mesh mcp`'s stdio).
    let (code, out, err) = relayed_through(
        &laptop.url(),
        &[
            r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"raw","version":"0"}}}"#,
            r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
            r#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"echo_fail","arguments":{"text":"x"}}}"#,
            r#"{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"echo","arguments":{"text":"hi"}}}"#,
        ],
    )
    .await;
    assert_eq!(code, Some(0), "{err}");
    let answers: Vec<serde_json::Value> = out
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let by_id = |id: i64| {
        answers
            .iter()
            .find(|a| a["id"] == json!(id))
            .unwrap_or_else(|| panic!("no answer {id}: {out}"))
    };
    let fail = &by_id(2)["result"];
    assert_eq!(fail["isError"], json!(true), "{fail}");
    assert!(
        fail["content"][0]["text"]
            .as_str()
            .unwrap()
            .starts_with("not yours"),
        "{fail}"
    );
    assert_eq!(fail["_meta"]["mesh/outcome"], json!("denied"), "{fail}");
    assert_eq!(by_id(3)["result"]["content"][0]["text"], json!("hi"));
}

/// `mesh --server <url> --inbox-prefix _INBOX.ann mcp` given `lines` on stdin, each request
/// answered before the next is sent, then stdin closed: its exit code, stdout and stderr.
async fn relayed_through(url: &str, lines: &[&str]) -> (Option<i32>, String, String) {
    use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
    let home = tempfile::tempdir().unwrap();
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_mesh"))
        .args(["--server", url, "--inbox-prefix", "_INBOX.ann", "mcp"])
        .env("HOME", home.path())
        .env_remove("NATS_URL")
        .env_remove("NATS_CONTEXT")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut out = String::new();
    for line in lines {
        stdin
            .write_all(format!("{line}\n").as_bytes())
            .await
            .unwrap();
        if line.contains(r#""id":"#) {
            let answer = tokio::time::timeout(GENEROUS, stdout.next_line())
                .await
                .expect("an answer")
                .unwrap()
                .expect("stdout open");
            out.push_str(&answer);
            out.push('\n');
        }
    }
    drop(stdin);
    let status = tokio::time::timeout(GENEROUS, child.wait())
        .await
        .expect("mesh mcp ends when its stdin does")
        .unwrap();
    let mut err = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .await
        .unwrap();
    (status.code(), out, err)
}

/// `mesh accounts --cluster` writes a configuration per server of a cluster, the same
/// accounts and passwords in each: three servers started from them (as three hosts would be,
/// each with its own JetStream directory) make one mesh, a call crossing it.
#[tokio::test]
async fn mesh_accounts_writes_a_cluster_that_forms() {
    let dir = tempfile::tempdir().unwrap();
    let grants = dir.path().join("grants.conf");
    std::fs::write(
        &grants,
        "modules { catalog {}, echo {} }\nroles { r { tools: [echo] } }\npeople { ann { roles: [r], password: \"pw-ann\" } }\n",
    )
    .unwrap();
    let routes: Vec<String> = mesh_bus::cluster::free_ports(3)
        .unwrap()
        .iter()
        .map(|p| format!("127.0.0.1:{p}"))
        .collect();
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_mesh"))
        .args(["accounts", "--grants", grants.to_str().unwrap()])
        .args(["--listen", "0.0.0.0:4222", "--cluster", &routes.join(",")])
        .args(["--out", dir.path().join("out").to_str().unwrap()])
        .output()
        .await
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut servers = Vec::new();
    let mut passwords = std::collections::HashMap::new();
    for i in 0..3 {
        let path = dir.path().join(format!("out/nats-server-{i}.conf"));
        let conf = std::fs::read_to_string(&path).unwrap();
        assert!(conf.contains("listen: \"0.0.0.0:4222\""), "{conf}");
        assert!(
            conf.contains(&format!("server_name: \"mesh-{i}\"")),
            "{conf}"
        );
        let parsed = mesh_bus::natsconf::parse_str(&conf, &path).unwrap();
        for (_, account) in parsed.get("accounts").unwrap().entries() {
            if let Some(mesh_bus::natsconf::Value::Array(users)) =
                account.get("users").map(|u| &u.value)
            {
                for u in users {
                    let user = u.get("user").and_then(|v| v.as_str()).unwrap().to_owned();
                    let pw = u
                        .get("password")
                        .and_then(|v| v.as_str())
                        .unwrap()
                        .to_owned();
                    let same = passwords.insert(user.clone(), pw.clone());
                    assert!(same.is_none_or(|p| p == pw), "{user}'s password differs");
                }
            }
        }
        // Hosts of their own: a JetStream directory each (on one machine, made to differ).
        let own = conf.replace(
            "store_dir: \"./jetstream\"",
            &format!("store_dir: {:?}", dir.path().join(format!("js{i}"))),
        );
        std::fs::write(&path, own).unwrap();
        let log = dir.path().join(format!("n{i}.log"));
        let port = mesh_bus::cluster::free_ports(1).unwrap()[0];
        servers.push(
            mesh_bus::natsd::NatsServer::start(&path, Some(port), &log)
                .await
                .unwrap(),
        );
    }
    let connect = |i: usize, user: &str| {
        let config = mesh_core::client::ConnectConfig {
            server: Some(servers[i].url()),
            user: Some(user.to_owned()),
            password: passwords.get(user).cloned(),
            isolated: true,
            ..Default::default()
        };
        async move { Client::connect(&config).await.unwrap() }
    };
    let options = ServeOptions {
        layout: mesh_core::actor::Layout::Accounts,
        ..Default::default()
    };
    let catalog_conn = connect(0, "catalog").await;
    let catalog = mesh_catalog::module(catalog_conn.nats().clone())
        .await
        .unwrap();
    let _catalog =
        crate::bus::serve_on(catalog_conn.nats().clone(), catalog, options.clone()).await;
    let echo_conn = connect(1, "echo").await;
    let _echo = crate::bus::serve_on(echo_conn.nats().clone(), mesh_echo::module(), options).await;
    let ann = connect(2, "ann").await;
    until_answered(&ann, "echo").await;
    // Written without --tls-*, the client port on every interface: the audit says passwords
    // cross the network in the clear there (the routes here are on loopback).
    let audited = audit_kinds(&dir.path().join("out/nats-server-0.conf")).await;
    assert_eq!(audited, ["no_tls"]);
}

/// The kinds of `mesh audit --config <conf> --json`'s findings (no bus asked).
pub(crate) async fn audit_kinds(conf: &std::path::Path) -> Vec<String> {
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_mesh"))
        .args(["audit", "--config", conf.to_str().unwrap(), "--json"])
        .env("XDG_CONFIG_HOME", "/nonexistent")
        .env("NATS_URL", "nats://127.0.0.1:1")
        .output()
        .await
        .unwrap();
    let report: serde_json::Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("mesh audit: {e}: {}", String::from_utf8_lossy(&out.stderr)));
    report["findings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["kind"].as_str().unwrap().to_owned())
        .collect()
}
