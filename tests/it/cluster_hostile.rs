//! The mesh on a cluster and through a leaf node, from an attacker's side: a stranger who can
//! reach a server's route port, a person's laptop (a leaf node) sending what no client
//! library would, and avu's shared PostgreSQL store pushed past what it was made for.

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use mesh_bus::layout::{ModuleUser, Person};
use mesh_bus::natsd::NatsServer;
use mesh_core::client::{Client, ConnectConfig};
use mesh_core::subjects::FullName;

use crate::bus::{Bus, GENEROUS};
use crate::pg::Postgres;
use crate::raw::{Raw, Reply};

fn name(s: &str) -> FullName {
    FullName::parse(s).unwrap()
}

/// Only catches a hang: routes and leaf connections form within seconds.
const FORMS_WITHIN: Duration = Duration::from_secs(20);

/// The route address server `index` of `cluster` listens on, read from its configuration.
fn route_of(cluster: &mesh_bus::cluster::Cluster, index: usize) -> String {
    let conf = std::fs::read_to_string(cluster.config(index)).unwrap();
    let block = conf
        .split_once("cluster {")
        .expect("a server of a cluster has a cluster block")
        .1;
    let listen = block.split_once("listen: \"").unwrap().1;
    listen.split_once('"').unwrap().0.to_owned()
}

/// A cluster of `n` servers as `mesh up --cluster` runs them (`mesh_bus::cluster`, the accounts
/// layout with passwords `pw-<user>`).
async fn cluster_of(
    n: usize,
    dir: &std::path::Path,
    modules: &[&str],
    people: &[(&str, &[&str])],
) -> mesh_bus::cluster::Cluster {
    let modules: Vec<ModuleUser> = modules.iter().map(|m| crate::bus::module(m)).collect();
    let people: Vec<Person> = people
        .iter()
        .map(|(user, may_call)| Person {
            user: user.to_string(),
            password: format!("pw-{user}"),
            may_call: may_call.iter().map(|s| s.to_string()).collect(),
        })
        .collect();
    let binary = NatsServer::binary().unwrap_or_else(|e| panic!("{e}"));
    let cluster = mesh_bus::cluster::Cluster::start(n, dir, binary, None, |slot| {
        mesh_bus::layout::accounts(slot.config_port(), slot.store_dir, &modules, &people)
    })
    .await
    .unwrap_or_else(|e| panic!("{e}"));
    let config = ConnectConfig {
        user: Some("catalog".into()),
        password: Some("pw-catalog".into()),
        isolated: true,
        ..Default::default()
    };
    assert!(cluster.formed(&config, Duration::from_secs(30)).await);
    cluster
}

async fn connect_as(url: &str, user: &str) -> Client {
    Client::connect(&ConnectConfig {
        server: Some(url.to_owned()),
        user: Some(user.to_owned()),
        password: Some(format!("pw-{user}")),
        isolated: true,
        ..Default::default()
    })
    .await
    .unwrap()
}

/// Anyone who could reach a server's route port would join the cluster as a server if the
/// route port asked for no credential (the routes `mesh accounts --cluster` and `mesh up
/// --cluster` write carry the cluster's secret, and their route ports ask for it). The
/// stranger's own nats-server, with accounts named like the mesh's, a user `ann` of its own making (no password of the mesh's) and a `share: true` import of
/// echo, stamps its own `Nats-Request-Info` — one header, as the mesh's servers stamp — and
/// routes the call into echo's account: echo sees ann, though ann may call nothing.
#[tokio::test]
async fn a_stranger_at_the_route_port_cannot_join_and_stamp_a_caller() {
    let dir = tempfile::tempdir().unwrap();
    let cluster = cluster_of(2, dir.path(), &["catalog", "echo"], &[("ann", &[])]).await;
    let echo_conn = connect_as(&cluster.servers[0].url(), "echo").await;
    let options = mesh_core::runtime::ServeOptions {
        layout: mesh_core::actor::Layout::Accounts,
        ..Default::default()
    };
    let _echo = crate::bus::serve_on(echo_conn.nats().clone(), mesh_echo::module(), options).await;
    // ann herself is refused: she is granted no tool.
    let ann = connect_as(&cluster.servers[1].url(), "ann").await;
    let denied = ann.call(&name("echo_whoami"), &json!({}), GENEROUS).await;
    assert!(
        matches!(denied, Err(mesh_core::client::CallError::Denied { .. })),
        "{denied:?}"
    );

    let own_route = mesh_bus::cluster::free_ports(1).unwrap()[0];
    let rogue_conf = dir.path().join("rogue.conf");
    std::fs::write(
        &rogue_conf,
        format!(
            r#"server_name: "rogue"
listen: "127.0.0.1:-1"
accounts {{
  MODULE_echo {{ exports: [ {{ service: "mesh.echo.>" }} ] }}
  PEOPLE {{
    users: [ {{ user: "ann", password: "chosen-by-the-stranger" }} ]
    imports: [ {{ service: {{ account: "MODULE_echo", subject: "mesh.echo.>" }}, share: true }} ]
  }}
}}
cluster {{
  name: "mesh"
  listen: "127.0.0.1:{own_route}"
  routes: ["nats-route://{}"]
}}
"#,
            route_of(&cluster, 0)
        ),
    )
    .unwrap();
    let rogue = NatsServer::start(&rogue_conf, None, &dir.path().join("rogue.log"))
        .await
        .unwrap();
    let stranger = async_nats::ConnectOptions::new()
        .user_and_password("ann".into(), "chosen-by-the-stranger".into())
        .ignore_discovered_servers()
        .connect(rogue.url())
        .await
        .unwrap();
    // The rogue tries its route again and again, and the mesh's server refuses each: the
    // route carries no secret. Seen in its log, then nothing the rogue sends is answered.
    let log = dir.path().join("nats-server-0.log");
    let started = Instant::now();
    while !std::fs::read_to_string(&log)
        .unwrap_or_default()
        .lines()
        .any(|l| {
            l.contains("rid:") && l.contains("Router connection closed: Authentication Failure")
        })
    {
        assert!(
            started.elapsed() < FORMS_WITHIN,
            "the rogue's route was never refused:\n{}",
            std::fs::read_to_string(&log).unwrap_or_default()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    for _ in 0..3 {
        let sent = stranger.request("mesh.echo.whoami", "{}".into());
        if let Ok(Ok(message)) = tokio::time::timeout(GENEROUS, sent).await {
            panic!(
                "a server with no credential joined the cluster and stamped echo_whoami's caller: {}",
                String::from_utf8_lossy(&message.payload)
            );
        }
    }
}

/// A person's laptop as `a_laptop_joins_through_a_leaf_node_as_its_person` makes it: a hub
/// with the accounts layout and a leaf port, echo and the catalogue on it, and the laptop's
/// own nats-server whose remote logs in as ann.
struct Laptop {
    hub: Bus,
    laptop: NatsServer,
    _modules: Vec<crate::bus::Running>,
    _dir: tempfile::TempDir,
}

async fn laptop_of_ann() -> Laptop {
    laptop_of_ann_with("").await
}

/// [`laptop_of_ann`], with `more` in the laptop's own configuration (it is hers to write).
async fn laptop_of_ann_with(more: &str) -> Laptop {
    let leaf_port = mesh_bus::cluster::free_ports(1).unwrap()[0];
    let dir = tempfile::tempdir().unwrap();
    let modules = [crate::bus::module("catalog"), crate::bus::module("echo")];
    let people = [
        Person {
            user: "ann".into(),
            password: "pw-ann".into(),
            may_call: vec!["mesh.echo.echo".into(), "mesh.echo.whoami".into()],
        },
        Person {
            user: "bob".into(),
            password: "pw-bob".into(),
            may_call: vec!["mesh.echo.>".into()],
        },
    ];
    let hub = format!(
        "{}\n{}",
        mesh_bus::layout::accounts(-1, &dir.path().join("js"), &modules, &people),
        mesh_bus::layout::leafnode_block(&format!("127.0.0.1:{leaf_port}"), None),
    );
    let hub = Bus::from_config(&hub, mesh_core::actor::Layout::Accounts).await;
    let catalog = hub.serve_catalog().await;
    let echo = hub.serve(mesh_echo::module()).await;
    let laptop_conf = dir.path().join("laptop.conf");
    std::fs::write(
        &laptop_conf,
        mesh_bus::layout::leaf_for_person(
            -1,
            &format!("127.0.0.1:{leaf_port}"),
            "ann",
            "pw-ann",
            None,
        ) + &more.replace("@DIR@", &dir.path().display().to_string()),
    )
    .unwrap();
    let laptop = NatsServer::start(&laptop_conf, None, &dir.path().join("laptop.log"))
        .await
        .unwrap();
    Laptop {
        hub,
        laptop,
        _modules: vec![catalog, echo],
        _dir: dir,
    }
}

/// Sends `header_block` with a `whoami` request from the laptop until the hub's echo answers.
async fn whoami_from_laptop(raw: &mut Raw, header_block: &[u8]) -> Reply {
    let started = Instant::now();
    loop {
        let reply = raw.request("mesh.echo.whoami", header_block, b"{}").await;
        if !matches!(reply, Reply::NoResponders) || started.elapsed() > FORMS_WITHIN {
            return reply;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A program on the laptop sends a `Nats-Request-Info` of its own naming bob, once after a
/// CRLF, once after a bare LF, once in lower case: the leaf connection carries it to the hub,
/// where the import stamps ann. echo sees ann or refuses; never bob.
#[tokio::test]
async fn a_leaf_cannot_forge_the_caller_it_sends() {
    let laptop = laptop_of_ann().await;
    let mut raw = Raw::connect(&laptop.laptop.url(), "ann", "unused").await;
    let forged = r#"{"acc":"PEOPLE","user":"bob"}"#;
    let blocks = [
        format!("NATS/1.0\r\nNats-Request-Info: {forged}\r\n\r\n"),
        format!("NATS/1.0\nNats-Request-Info: {forged}\r\n\r\n"),
        format!("NATS/1.0\r\nnats-request-info: {forged}\r\n\r\n"),
        format!("NATS/1.0\r\nX: y\nNats-Request-Info: {forged}\r\n\r\n"),
    ];
    for block in &blocks {
        let reply = whoami_from_laptop(&mut raw, block.as_bytes()).await;
        let Reply::Message { payload, .. } = &reply else {
            panic!("the hub's echo did not answer {block:?}: {reply:?}");
        };
        let text = String::from_utf8_lossy(payload);
        assert!(
            !text.contains("bob"),
            "a leaf's own Nats-Request-Info reached the tool: {block:?} → {text}"
        );
        let v: Value = serde_json::from_slice(payload).unwrap();
        let refused = v["isError"] == json!(true);
        assert!(
            refused || text.contains("ann@PEOPLE"),
            "neither ann nor refused: {block:?} → {text}"
        );
    }
}

/// A program on the laptop listens on everything (`>`), which the laptop's own server allows:
/// what bob, another person, asks and is answered on the hub never reaches it. A call of
/// ann's own made afterwards marks when everything before it would have arrived.
#[tokio::test]
async fn a_leaf_hears_nothing_of_another_person() {
    let laptop = laptop_of_ann().await;
    let local = async_nats::connect(laptop.laptop.url()).await.unwrap();
    let mut everything = local.subscribe(">").await.unwrap();
    for subject in [
        "_INBOX.bob.>",
        "_R_.>",
        "mesh-progress.*.bob.>",
        "mesh.echo.>",
        "$JS.>",
        "$KV.>",
    ] {
        // Each, too, in case the hub takes a narrower interest where it refused `>`.
        std::mem::forget(local.subscribe(subject.to_string()).await.unwrap());
    }
    local.flush().await.unwrap();
    let ann = Client::connect(&ConnectConfig {
        server: Some(laptop.laptop.url()),
        inbox_prefix: Some("_INBOX.ann".into()),
        isolated: true,
        ..Default::default()
    })
    .await
    .unwrap();
    // The leaf is up once ann's call is answered.
    let started = Instant::now();
    loop {
        match ann
            .call(&name("echo"), &json!({"text": "ann-up"}), GENEROUS)
            .await
        {
            Ok(r) if !r.is_error => break,
            other => {
                assert!(started.elapsed() < FORMS_WITHIN, "{other:?}");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
    let bob = laptop.hub.client_as(Some("bob")).await;
    let secret = bob
        .call(&name("echo"), &json!({"text": "bob-secret"}), GENEROUS)
        .await
        .unwrap();
    assert!(!secret.is_error, "{secret:?}");
    ann.call(&name("echo"), &json!({"text": "ann-marker"}), GENEROUS)
        .await
        .unwrap();
    use futures_util::StreamExt as _;
    loop {
        let message = tokio::time::timeout(GENEROUS, everything.next())
            .await
            .expect("the laptop hears ann's own reply")
            .expect("subscribed");
        let text = String::from_utf8_lossy(&message.payload).into_owned();
        assert!(
            !text.contains("bob-secret"),
            "the laptop heard bob's call on {}: {text}",
            message.subject
        );
        if text.contains("ann-marker") && message.subject.starts_with("_INBOX.ann") {
            break;
        }
    }
}

/// Text a compressor cannot shrink: PostgreSQL compresses a long index entry before it
/// measures it, so a repeated letter would fit.
fn incompressible(len: usize, seed: u64) -> String {
    let alphabet = b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
    let mut x = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            alphabet[(x % alphabet.len() as u64) as usize] as char
        })
        .collect()
}

/// avu on a bus of its own with its store at `url`.
async fn avu_on_pg(url: &str) -> (Bus, crate::bus::Running, tempfile::TempDir) {
    let bus = Bus::accounts(&["catalog", "avu"], &[("ann", &["mesh.avu.>"])]).await;
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("config.json"),
        json!({"database": url}).to_string(),
    )
    .unwrap();
    let config = mesh_avu::Config::in_dir(dir.path(), &dir.path().join("ontology.sqlite")).unwrap();
    let avu = bus.serve(mesh_avu::module(config).unwrap()).await;
    (bus, avu, dir)
}

/// Every field of this AVU is within avu's own bound (2700 bytes), but the four together are
/// more than a PostgreSQL btree entry holds (2704 bytes), and `avus`' primary key is the
/// four. avu's own file takes it; the shared store fails, and the person is told the
/// database may be down or its URL wrong, with PostgreSQL's words about its index.
#[tokio::test]
async fn an_avu_within_every_bound_is_not_reported_as_the_database_failing() {
    let pg = Postgres::start().await;
    let (bus, _avu, _dir) = avu_on_pg(&pg.url).await;
    let ann = bus.client_as(Some("ann")).await;
    let args = json!({
        "path": "/mesh/home/ann/big.csv",
        "attribute": incompressible(1500, 1),
        "value": incompressible(1500, 2),
    });
    let r = ann.call(&name("avu_add"), &args, GENEROUS).await.unwrap();
    let text = r.text_content();
    assert!(
        !text.contains("check that it runs") && !text.contains("index row size"),
        "an AVU avu's checks let through is reported as the database failing: {text}"
    );
}

/// The history is append-only "by trigger", but the trigger is on UPDATE and DELETE only:
/// TRUNCATE, which fires neither, empties it with the very role avu connects as.
#[tokio::test]
async fn the_shared_history_cannot_be_truncated() {
    let pg = Postgres::start().await;
    let (bus, _avu, _dir) = avu_on_pg(&pg.url).await;
    let ann = bus.client_as(Some("ann")).await;
    let r = ann
        .call(
            &name("avu_add"),
            &json!({"path": "/mesh/home/ann/a.csv", "attribute": "a", "value": "1"}),
            GENEROUS,
        )
        .await
        .unwrap();
    assert!(!r.is_error, "{}", r.text_content());
    let url = pg.url.clone();
    let (truncated, left) = tokio::task::spawn_blocking(move || {
        let mut db = postgres::Client::connect(&url, postgres::NoTls).unwrap();
        let truncated = db.batch_execute("TRUNCATE history");
        let left: i64 = db
            .query_one("SELECT count(*) FROM history", &[])
            .unwrap()
            .get(0);
        (truncated, left)
    })
    .await
    .unwrap();
    assert!(
        truncated.is_err() && left == 1,
        "TRUNCATE emptied the append-only history ({left} rows left)"
    );
}

/// One question answered through two instances at once: each instance its own connection
/// to the shared store, both spending the same state in the transaction that writes its
/// answer (different AVUs, so nothing else conflicts). Exactly one is taken, every time.
#[tokio::test]
async fn one_answer_raced_through_two_instances_is_taken_once() {
    let pg = Postgres::start().await;
    let url = pg.url.clone();
    tokio::task::spawn_blocking(move || {
        use mesh_avu::store::{Avu, Store, StoreError, Writer};
        let stores: Vec<std::sync::Mutex<Store>> = (0..2)
            .map(|_| std::sync::Mutex::new(Store::connect(&url, None).unwrap()))
            .collect();
        for round in 0..30 {
            let opened = mesh_core::runtime::request_state::Opened {
                ids: json!({}),
                id: format!("state-{round}"),
                expires_ms: mesh_core::subjects::catalog::now_ms() + 600_000,
            };
            let barrier = std::sync::Barrier::new(2);
            let taken: Vec<Result<Vec<bool>, StoreError>> = std::thread::scope(|s| {
                let racers: Vec<_> = stores
                    .iter()
                    .enumerate()
                    .map(|(i, store)| {
                        let (opened, barrier) = (&opened, &barrier);
                        s.spawn(move || {
                            let mut store = store.lock().unwrap();
                            let avu = Avu {
                                attribute: "pick".into(),
                                value: format!("{round}-{i}"),
                                unit: String::new(),
                            };
                            let by = Writer {
                                actor: "ann@PEOPLE",
                                via: None,
                                source: None,
                                answers: Some(opened),
                            };
                            barrier.wait();
                            store.add("/mesh/home/ann/race.csv", &[avu], &by)
                        })
                    })
                    .collect();
                racers.into_iter().map(|r| r.join().unwrap()).collect()
            });
            let ok = taken.iter().filter(|t| t.is_ok()).count();
            assert_eq!(ok, 1, "round {round}: {taken:?}");
            assert!(
                taken.iter().any(|t| matches!(t, Err(StoreError::State(_)))),
                "round {round}: the loser is not told the state was used: {taken:?}"
            );
        }
        let mut store = stores[0].lock().unwrap();
        assert_eq!(store.list("/mesh/home/ann/race.csv").unwrap().len(), 30);
        assert_eq!(store.history("/mesh/home/ann/race.csv").unwrap().len(), 30);
    })
    .await
    .unwrap();
}

/// avu's config names the database with its password; whatever goes wrong connecting (a
/// database not there, a URL it cannot read), the error avu starts with never shows it.
#[tokio::test]
async fn the_database_password_never_shows_in_an_error() {
    let port = mesh_bus::cluster::free_ports(1).unwrap()[0];
    let secret = "hunter2-Secret";
    let urls = [
        format!("postgresql://avu:{secret}@127.0.0.1:{port}/mesh"),
        format!("postgresql://avu:{secret}@127.0.0.1:{port}x/mesh"),
        format!("postgresql://avu:{secret}@127.0.0.1:{port}/mesh?sslmode=bogus"),
        format!("postgresql://avu:{secret}@127.0.0.1:{port}/mesh?nonsense={secret}"),
        format!("postgresql://avu:{secret}%zz@127.0.0.1:{port}/mesh"),
        format!("postgresql://avu:{secret}@no-such-host.invalid/mesh"),
        format!("host=127.0.0.1 port={port} user=avu password={secret} dbname=mesh"),
        format!("host=127.0.0.1 port={port} user=avu password='{secret}"),
    ];
    for url in urls {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("config.json"),
            json!({"database": url}).to_string(),
        )
        .unwrap();
        let config =
            mesh_avu::Config::in_dir(dir.path(), &dir.path().join("ontology.sqlite")).unwrap();
        let started = tokio::task::spawn_blocking(move || mesh_avu::module(config).err())
            .await
            .unwrap();
        let error = started.expect("avu does not start without its database");
        let shown = format!("{error} | {error:?} | {error:#}");
        assert!(!shown.contains(secret), "{url} → {shown}");
    }
}

/// ann's laptop runs JetStream of its own and has a pull consumer deliver a message with
/// a tool's subject as the reply: the delivery reaches the hub with a JetStream ack as its
/// reply, for which nats-server tracks no latency — a call the call log would never hear
/// of. The runtime runs only requests whose reply nats-server made crossing the mesh's
/// account (`_R_.`): echo runs nothing of it, and a plain call from the laptop still runs.
#[tokio::test]
async fn a_call_the_log_could_not_witness_is_never_run() {
    let laptop = laptop_of_ann_with("jetstream { store_dir: \"@DIR@/laptop-js\" }\n").await;
    let config = mesh_core::client::ConnectConfig {
        server: Some(laptop.laptop.url()),
        inbox_prefix: Some("_INBOX.ann".into()),
        isolated: true,
        ..Default::default()
    };
    let on_laptop = mesh_core::client::Client::connect(&config).await.unwrap();
    let nats = on_laptop.nats().clone();
    let js = async_nats::jetstream::new(nats.clone());
    js.create_stream(async_nats::jetstream::stream::Config {
        name: "L".into(),
        subjects: vec!["local.x".into()],
        ..Default::default()
    })
    .await
    .unwrap();
    js.publish("local.x", r#"{"text":"unwitnessed"}"#.into())
        .await
        .unwrap()
        .await
        .unwrap();
    let stream = js.get_stream("L").await.unwrap();
    stream
        .create_consumer(async_nats::jetstream::consumer::pull::Config {
            durable_name: Some("p".into()),
            ..Default::default()
        })
        .await
        .unwrap();
    let bob = laptop.hub.client_as(Some("bob")).await;
    let served = || async {
        let reply = bob
            .nats()
            .request("$SRV.STATS.echo", "".into())
            .await
            .unwrap();
        let stats: Value = serde_json::from_slice(&reply.payload).unwrap();
        stats["endpoints"]
            .as_array()
            .unwrap()
            .iter()
            .find(|e| e["name"] == "echo")
            .map(|e| e["num_requests"].as_u64().unwrap())
            .unwrap()
    };
    // The leaf connection forms in its own time: a plain call from the laptop first.
    let mut raw = Raw::connect(&laptop.laptop.url(), "ann", "unused").await;
    let plain = whoami_from_laptop(&mut raw, b"NATS/1.0\r\n\r\n").await;
    assert!(matches!(plain, Reply::Message { .. }), "{plain:?}");
    let before = served().await;
    for _ in 0..3 {
        nats.publish_with_reply(
            "$JS.API.CONSUMER.MSG.NEXT.L.p",
            "mesh.echo.echo",
            r#"{"batch":1}"#.into(),
        )
        .await
        .unwrap();
    }
    nats.flush().await.unwrap();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(
        served().await,
        before,
        "echo ran a call nats-server did not witness"
    );
    // The same tool, called the way calls come, runs.
    let r = raw
        .request("mesh.echo.echo", b"NATS/1.0\r\n\r\n", br#"{"text":"seen"}"#)
        .await;
    assert_eq!(r.json()["content"][0]["text"], "seen", "{r:?}");
    assert_eq!(served().await, before + 1);
}

/// A module's credential logs in as a client only: a leaf server holding it is refused by
/// the hub. (A leaf connection's reply subjects are not checked as a client's are, so a leaf
/// in a module's account could have an answer routed onto the subjects nats-server
/// witnesses that module's calls on, `_R_.mesh-log.…`.)
#[tokio::test]
async fn a_modules_credential_cannot_join_as_a_leaf() {
    let laptop = laptop_of_ann().await;
    let leaf_port = std::fs::read_to_string(laptop.hub.config_path())
        .unwrap()
        .lines()
        .skip_while(|l| !l.starts_with("leafnodes"))
        .find_map(|l| l.trim().strip_prefix("listen: \"127.0.0.1:"))
        .and_then(|p| p.trim_end_matches('"').parse::<u16>().ok())
        .expect("the hub's leaf port");
    let dir = tempfile::tempdir().unwrap();
    let conf = dir.path().join("module-leaf.conf");
    std::fs::write(
        &conf,
        mesh_bus::layout::leaf_for_person(
            -1,
            &format!("127.0.0.1:{leaf_port}"),
            "echo",
            "pw-echo",
            None,
        ),
    )
    .unwrap();
    let log = dir.path().join("module-leaf.log");
    let _leaf = NatsServer::start(&conf, None, &log).await.unwrap();
    let started = Instant::now();
    loop {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        if text.contains("Authorization Violation") {
            break;
        }
        assert!(
            started.elapsed() < FORMS_WITHIN,
            "the hub took a leaf logged in as a module:\n{text}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
