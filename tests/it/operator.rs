//! The accounts layout in operator mode (issue 49): the layout `mesh up` writes, signed as
//! JWTs, run by a real nats-server trusting only its operator — and attacked as the file
//! layout is: a person calling what they were not granted, a module writing into the call
//! log, a user signed by a key the operator never trusted.

use std::path::Path;
use std::time::Duration;

use futures_util::StreamExt;
use mesh_bus::layout::{self, ModuleUser, Person, Target};
use mesh_bus::natsd::NatsServer;
use mesh_bus::operator::{self, KeyRing, Signed};
use mesh_bus::{jwt, natsconf};
use mesh_core::subjects::{HEADER_REQUEST_INFO, calllog, inbox_prefix};

/// What waits for a message gives up after this: a hang guard, not a measure.
const HANG: Duration = Duration::from_secs(20);

/// A server in operator mode running the layout of `modules` and `people`.
struct Operated {
    _dir: tempfile::TempDir,
    server: NatsServer,
    signed: Signed,
    creds: std::path::PathBuf,
}

async fn operated(modules: &[ModuleUser], people: &[Person]) -> Operated {
    let dir = tempfile::tempdir().unwrap();
    let rendered = layout::accounts_owned(-1, &dir.path().join("js"), modules, people, "unused");
    let root = natsconf::parse_str(&rendered, Path::new("layout.conf")).unwrap();
    let mut ring = KeyRing::open(&dir.path().join("keys")).unwrap();
    let signed = operator::sign(&root, &mut ring).unwrap();
    let conf = format!(
        "{}\n{}",
        operator::without_accounts(&rendered),
        signed.server_block(&dir.path().join("jwt"))
    );
    assert!(
        !conf.contains("password"),
        "a password in operator mode's configuration:\n{conf}"
    );
    let path = dir.path().join("nats-server.conf");
    std::fs::write(&path, conf).unwrap();
    let creds = dir.path().join("creds");
    std::fs::create_dir(&creds).unwrap();
    for u in &signed.users {
        operator::write_private(
            &creds.join(format!("{}.{}.creds", u.account, u.name)),
            u.creds.as_bytes(),
        )
        .unwrap();
    }
    let server = NatsServer::start(&path, None, &dir.path().join("nats-server.log"))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    Operated {
        _dir: dir,
        server,
        signed,
        creds,
    }
}

impl Operated {
    /// The server's log, to say why it refused.
    fn log(&self) -> String {
        std::fs::read_to_string(self._dir.path().join("nats-server.log")).unwrap_or_default()
    }

    /// `user` of `account`, with the inbox its permissions allow, and the server's errors.
    async fn connect(
        &self,
        account: &str,
        user: &str,
    ) -> (
        async_nats::Client,
        tokio::sync::mpsc::UnboundedReceiver<String>,
    ) {
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        let client = async_nats::ConnectOptions::with_credentials_file(
            self.creds.join(format!("{account}.{user}.creds")),
        )
        .await
        .unwrap()
        .custom_inbox_prefix(inbox_prefix(user))
        .event_callback(move |event| {
            if let async_nats::Event::ServerError(e) = event {
                let _ = tx.send(e.to_string());
            }
            async {}
        })
        .connect(self.server.url())
        .await
        .unwrap_or_else(|e| panic!("{user} of {account} cannot connect: {e}\n{}", self.log()));
        (client, rx)
    }
}

fn people() -> Vec<Person> {
    let person = |user: &str, may_call: &[&str]| Person {
        user: user.into(),
        password: "unused".into(),
        may_call: may_call.iter().map(|s| s.to_string()).collect(),
    };
    vec![person("ann", &["mesh.echo.>"]), person("bob", &[])]
}

fn modules() -> Vec<ModuleUser> {
    let mut weather = ModuleUser::new("weather", "unused");
    weather.calls = vec![Target::parse("echo_echo").unwrap()];
    vec![ModuleUser::new("echo", "unused"), weather]
}

/// The echo module's user answers every call with the stamp nats-server put on it.
async fn answer_with_stamps(bus: &Operated) -> async_nats::Client {
    let (echo, _) = bus.connect("MODULE_echo", "echo").await;
    let mut calls = echo
        .queue_subscribe("mesh.echo.>", "echo".into())
        .await
        .unwrap();
    let answering = echo.clone();
    tokio::spawn(async move {
        while let Some(call) = calls.next().await {
            let stamp = call
                .headers
                .as_ref()
                .and_then(|h| h.get(HEADER_REQUEST_INFO))
                .map(|v| v.as_str().to_owned())
                .unwrap_or_default();
            if let Some(reply) = call.reply {
                let _ = answering.publish(reply, stamp.into()).await;
            }
        }
    });
    echo.flush().await.unwrap();
    echo
}

/// A person granted a module's tools calls one across one import, stamped with their
/// account's key and their name; the call log's account hears nats-server's event of it.
#[tokio::test]
async fn a_granted_person_calls_and_the_bus_witnesses_it_in_operator_mode() {
    let bus = operated(&modules(), &people()).await;
    let _echo = answer_with_stamps(&bus).await;
    let (owner, _) = bus.connect(calllog::ACCOUNT, calllog::OWNER).await;
    let mut witnessed = owner.subscribe("mesh-log.>").await.unwrap();
    owner.flush().await.unwrap();

    let (ann, _) = bus.connect("PEOPLE", "ann").await;
    let reply = tokio::time::timeout(HANG, ann.request("mesh.echo.echo", "{}".into()))
        .await
        .expect("the call is answered")
        .unwrap();
    let stamp: serde_json::Value = serde_json::from_slice(&reply.payload).unwrap();
    assert_eq!(
        stamp["acc"],
        bus.signed.account("PEOPLE").unwrap().key,
        "{stamp}"
    );
    assert_eq!(stamp["name_tag"], "ann", "{stamp}");
    assert_eq!(
        stamp["user"],
        bus.signed.user("PEOPLE", "ann").unwrap().key,
        "{stamp}"
    );
    let event = tokio::time::timeout(HANG, witnessed.next())
        .await
        .expect("the call is witnessed")
        .unwrap();
    assert!(
        event.subject.as_str().starts_with("mesh-log.calls.echo"),
        "{}",
        event.subject
    );
    let event: serde_json::Value = serde_json::from_slice(&event.payload).unwrap();
    assert_eq!(
        event["type"], "io.nats.server.metric.v1.service_latency",
        "{event}"
    );
}

/// Nobody reaches more than the file layout lets them: a person not granted, a module
/// calling past its grant, a module writing where nats-server witnesses calls.
#[tokio::test]
async fn what_the_file_layout_denies_operator_mode_denies() {
    let bus = operated(&modules(), &people()).await;
    let _echo = answer_with_stamps(&bus).await;
    let denied = |mut errors: tokio::sync::mpsc::UnboundedReceiver<String>,
                  subject: &'static str| async move {
        let e = tokio::time::timeout(HANG, errors.recv())
            .await
            .expect("the server refuses")
            .unwrap();
        assert!(
            e.contains("Permissions Violation") && e.contains(subject),
            "{e}"
        );
    };
    let (bob, errors) = bus.connect("PEOPLE", "bob").await;
    bob.publish("mesh.echo.echo", "{}".into()).await.unwrap();
    bob.flush().await.unwrap();
    denied(errors, "mesh.echo.echo").await;

    // weather may call echo_echo only.
    let (weather, errors) = bus.connect("MODULE_weather", "weather").await;
    let reply = tokio::time::timeout(HANG, weather.request("mesh.echo.echo", "{}".into()))
        .await
        .expect("the call is answered")
        .unwrap();
    let stamp: serde_json::Value = serde_json::from_slice(&reply.payload).unwrap();
    assert_eq!(
        stamp["acc"],
        bus.signed.account("MODULE_weather").unwrap().key,
        "{stamp}"
    );
    weather
        .publish("mesh.echo.other", "{}".into())
        .await
        .unwrap();
    weather.flush().await.unwrap();
    denied(errors, "mesh.echo.other").await;

    let (echo, errors) = bus.connect("MODULE_echo", "echo").await;
    echo.publish("_R_.mesh-log.calls.echo.echo", "{}".into())
        .await
        .unwrap();
    echo.flush().await.unwrap();
    denied(errors, "_R_.mesh-log.calls.echo.echo").await;
}

/// A user JWT signed by a key the operator never trusted, naming a layout account, is
/// refused at connect: an account's users are its own key's to sign.
#[tokio::test]
async fn a_user_signed_by_an_untrusted_key_cannot_connect() {
    let bus = operated(&modules(), &people()).await;
    let stranger = nkeys::KeyPair::new_account();
    let user = nkeys::KeyPair::new_user();
    let claims = jwt::User {
        issuer_account: bus.signed.account("PEOPLE").unwrap().key.clone(),
        ..Default::default()
    };
    let token = jwt::Claims::new(user.public_key(), "ann", claims)
        .sign(&stranger)
        .unwrap();
    let path = bus.creds.join("forged.creds");
    std::fs::write(&path, jwt::creds(&token, &user.seed().unwrap())).unwrap();
    let connected = async_nats::ConnectOptions::with_credentials_file(path)
        .await
        .unwrap()
        .connect(bus.server.url());
    let refused = tokio::time::timeout(HANG, connected)
        .await
        .expect("the server answers")
        .expect_err("a forged user connected");
    assert_eq!(
        refused.kind(),
        async_nats::ConnectErrorKind::AuthorizationViolation,
        "{refused}"
    );
    // The same person's own credential file connects.
    let (ann, _) = bus.connect("PEOPLE", "ann").await;
    ann.flush().await.unwrap();
}

/// The keys are kept: signing the layout again (a reload) keeps every account's key and
/// every user's, so credential files handed out stay good.
#[test]
fn signing_again_keeps_every_key() {
    let dir = tempfile::tempdir().unwrap();
    let rendered = layout::accounts_owned(-1, &dir.path().join("js"), &modules(), &people(), "x");
    let root = natsconf::parse_str(&rendered, Path::new("layout.conf")).unwrap();
    let keys = dir.path().join("keys");
    let first = operator::sign(&root, &mut KeyRing::open(&keys).unwrap()).unwrap();
    let again = operator::sign(&root, &mut KeyRing::open(&keys).unwrap()).unwrap();
    assert_eq!(first.names(), again.names());
    for (a, b) in first.users.iter().zip(&again.users) {
        assert_eq!((&a.account, &a.name, &a.key), (&b.account, &b.name, &b.key));
    }
    use std::os::unix::fs::PermissionsExt;
    for entry in std::fs::read_dir(&keys).unwrap() {
        let mode = entry.unwrap().metadata().unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
    }
}

/// `mesh accounts --auth operator`, as a site's operator runs it: the files a server needs
/// and no password among them; then grants that add a module, pushed to the running server
/// (`--push`), reach it without a reload: the new module serves and a person calls it.
#[tokio::test]
async fn mesh_accounts_writes_operator_mode_and_pushes_a_change_without_a_reload() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("site");
    let grants = dir.path().join("grants.conf");
    let accounts = |extra: &str| {
        let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_mesh"));
        command
            .args(["accounts", "--auth", "operator", "--grants"])
            .arg(&grants)
            .arg("--store-dir")
            .arg(dir.path().join("js"))
            .arg("--out")
            .arg(&out);
        if !extra.is_empty() {
            command.args(["--push", extra]);
        }
        command
    };
    std::fs::write(
        &grants,
        "modules { echo {} }\nroles { r { tools: [echo_echo] } }\npeople { ann { roles: [r] } }\n",
    )
    .unwrap();
    let written = accounts("").output().await.unwrap();
    assert_eq!(
        written.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&written.stderr)
    );
    for entry in walk(&out) {
        let text = std::fs::read_to_string(&entry).unwrap_or_default();
        assert!(
            !text.contains("password"),
            "{} holds a password",
            entry.display()
        );
    }
    let config = out.join("nats-server.conf");
    let port = free_port();
    let server = NatsServer::start(&config, Some(port), &dir.path().join("nats-server.log"))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let connect = |account: &str, user: &str| {
        let creds = out.join("creds").join(format!("{account}.{user}.creds"));
        let url = server.url();
        let user = user.to_owned();
        async move {
            async_nats::ConnectOptions::with_credentials_file(creds)
                .await
                .unwrap()
                .custom_inbox_prefix(inbox_prefix(&user))
                .connect(url)
                .await
                .unwrap()
        }
    };
    // A module added, and ann granted its tool: only the accounts change on the server.
    std::fs::write(
        &grants,
        "modules { echo {}\n weather {} }\nroles { r { tools: [echo_echo, weather_now] } }\npeople { ann { roles: [r] } }\n",
    )
    .unwrap();
    let pushed = accounts(&server.url()).output().await.unwrap();
    let said = String::from_utf8_lossy(&pushed.stderr);
    assert_eq!(pushed.status.code(), Some(0), "{said}");
    assert!(
        said.contains("MODULE_weather") && said.contains("is in the resolver"),
        "{said}"
    );
    let weather = connect("MODULE_weather", "weather").await;
    let mut calls = weather
        .queue_subscribe("mesh.weather.now", "weather".into())
        .await
        .unwrap();
    weather.flush().await.unwrap();
    let answering = weather.clone();
    tokio::spawn(async move {
        while let Some(call) = calls.next().await {
            if let Some(reply) = call.reply {
                let _ = answering.publish(reply, "sunny".into()).await;
            }
        }
    });
    let ann = connect("PEOPLE", "ann").await;
    let reply = tokio::time::timeout(HANG, ann.request("mesh.weather.now", "{}".into()))
        .await
        .expect("the new module's tool answers")
        .unwrap();
    assert_eq!(reply.payload.as_ref(), b"sunny");
}

fn walk(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let path = entry.path();
        if path.is_dir() {
            out.extend(walk(&path));
        } else {
            out.push(path);
        }
    }
    out
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// The mesh's own runtime in operator mode: told which account each key is, a module names
/// its callers as in the file layout — a person by their JWT's name in `PEOPLE`, a module by
/// its account — and refuses a caller whose account it was not told of.
#[tokio::test]
async fn a_module_names_its_callers_in_operator_mode() {
    use mesh_core::client::{Client, ConnectConfig};
    use mesh_core::runtime::ServeOptions;
    use mesh_core::subjects::FullName;
    let bus = operated(&modules(), &people()).await;
    mesh_core::actor::learn_accounts(bus.signed.names());
    let as_user = |account: &str, user: &str| ConnectConfig {
        server: Some(bus.server.url()),
        creds: Some(bus.creds.join(format!("{account}.{user}.creds"))),
        inbox_prefix: Some(inbox_prefix(user)),
        isolated: true,
        ..Default::default()
    };
    let echo = Client::connect(&as_user("MODULE_echo", "echo"))
        .await
        .unwrap();
    let _serving = crate::bus::serve_on(
        echo.nats().clone(),
        mesh_echo::module(),
        ServeOptions {
            layout: mesh_core::actor::Layout::Accounts,
            register_every: None,
            ..Default::default()
        },
    )
    .await;
    let whoami = FullName::parse("echo_whoami").unwrap();
    let ann = Client::connect(&as_user("PEOPLE", "ann")).await.unwrap();
    let me = ann
        .call(&whoami, &serde_json::json!({}), HANG)
        .await
        .unwrap();
    assert_eq!(
        me.structured_content.as_ref().unwrap()["actor"],
        "ann@PEOPLE",
        "{me:?}"
    );
    // An account the module was not told of names nobody: refused, saying what to give it.
    let mut partial = bus.signed.names();
    partial.retain(|_, name| name != "PEOPLE");
    mesh_core::actor::learn_accounts(partial);
    let refused = ann.call(&whoami, &serde_json::json!({}), HANG).await;
    mesh_core::actor::learn_accounts(bus.signed.names());
    let said = format!("{refused:?}");
    assert!(said.contains("not in the mesh's accounts"), "{said}");
}
