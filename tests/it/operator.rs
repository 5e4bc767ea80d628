//! The accounts layout in operator mode (issue 49): the layout `mesh up` writes, signed as
//! JWTs, run by a real nats-server trusting only its operator — and attacked as the file
//! layout is: a person calling what they were not granted, a module writing into the call
//! log, a user signed by a key the operator never trusted.

use std::path::Path;
use std::time::Duration;

use futures_util::StreamExt;
use mesh_bus::audit::jwts;
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

/// Person `user`, who may call `may_call`.
fn person(user: &str, may_call: &[&str]) -> Person {
    Person {
        user: user.into(),
        password: "unused".into(),
        may_call: may_call.iter().map(|s| s.to_string()).collect(),
    }
}

/// Person `user` connected with their credential file, and word of each disconnection.
async fn watched(
    bus: &Operated,
    user: &'static str,
) -> (
    async_nats::Client,
    tokio::sync::mpsc::UnboundedReceiver<&'static str>,
) {
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    let client = async_nats::ConnectOptions::with_credentials_file(
        bus.creds.join(format!("PEOPLE.{user}.creds")),
    )
    .await
    .unwrap()
    .custom_inbox_prefix(inbox_prefix(user))
    .event_callback(move |event| {
        if matches!(event, async_nats::Event::Disconnected) {
            let _ = tx.send(user);
        }
        async {}
    })
    .connect(bus.server.url())
    .await
    .unwrap();
    client.flush().await.unwrap();
    (client, rx)
}

fn people() -> Vec<Person> {
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
    stamping(&echo).await;
    echo
}

/// `echo` (the echo module's user) answers every call with the stamp nats-server put on it.
async fn stamping(echo: &async_nats::Client) {
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
    crate::bus::module_round_trip(echo).await;
}

/// A person granted a module's tools calls one across one import, stamped with their
/// account's key and their name; the call log's account hears nats-server's event of it.
#[tokio::test]
async fn a_granted_person_calls_and_the_bus_witnesses_it_in_operator_mode() {
    let bus = operated(&modules(), &people()).await;
    let _echo = answer_with_stamps(&bus).await;
    let (owner, _) = bus.connect(calllog::ACCOUNT, calllog::OWNER).await;
    let mut witnessed = owner.subscribe("mesh-log.>").await.unwrap();
    crate::bus::round_trip(&owner).await;

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

    // weather may call echo only.
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
/// A person removed and granted again at once gets a file that works: it is issued after the
/// revocation that voided the old one, whatever second the clock is in.
#[test]
fn a_person_removed_and_granted_again_at_once_is_not_revoked() {
    let dir = tempfile::tempdir().unwrap();
    let keys = dir.path().join("keys");
    let sign = |people: &[Person]| {
        let rendered = layout::accounts_owned(-1, &dir.path().join("js"), &modules(), people, "x");
        let root = natsconf::parse_str(&rendered, Path::new("layout.conf")).unwrap();
        // All three in one second, as a quick remove and grant again may well be.
        operator::sign_at(&root, &mut KeyRing::open(&keys).unwrap(), 1_800_000_000).unwrap()
    };
    let all = people();
    assert_eq!(all[0].user, "ann");
    sign(&all);
    sign(&all[1..]);
    let again = sign(&all);
    let ann = again.user("PEOPLE", "ann").unwrap();
    let (token, _) = jwt::read_creds(&ann.creds).unwrap();
    let claims: jwt::Claims<jwt::User> = jwt::Claims::verify(&token).unwrap();
    let people_jwt = &again.account("PEOPLE").unwrap().jwt;
    let account: jwt::Claims<jwt::Account> = jwt::Claims::verify(people_jwt).unwrap();
    let until = account.nats.revocations.get(&ann.key).copied();
    assert!(until.is_some(), "ann's first file is revoked");
    assert!(
        until.is_some_and(|until| claims.iat > until),
        "ann's new file (issued {}) falls under her revocation ({until:?})",
        claims.iat
    );
}

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

/// What nats-server says `client` may publish and subscribe to, each list sorted.
async fn granted(client: &async_nats::Client) -> [Vec<String>; 4] {
    let info = tokio::time::timeout(HANG, client.request(layout::USER_INFO, "".into()))
        .await
        .expect("the server answers USER.INFO")
        .unwrap();
    let info: serde_json::Value = serde_json::from_slice(&info.payload).unwrap();
    let p = &info["data"]["permissions"];
    let list = |v: &serde_json::Value| {
        let mut l: Vec<String> = v
            .as_array()
            .map(|a| a.iter().map(|s| s.as_str().unwrap().to_owned()).collect())
            .unwrap_or_default();
        l.sort();
        l
    };
    [
        list(&p["publish"]["allow"]),
        list(&p["publish"]["deny"]),
        list(&p["subscribe"]["allow"]),
        list(&p["subscribe"]["deny"]),
    ]
}

fn sorted(l: &[String]) -> Vec<String> {
    let mut l = l.to_vec();
    l.sort();
    l
}

/// Every person's and module's user JWT names only a scope of its account (a signing key
/// whose template the account's JWT holds), so the stamp nats-server puts on each of their
/// calls carries no subject list: people granted alike share one scope, and the server gives
/// each exactly what their grants say, their own name filled in.
#[tokio::test]
async fn each_user_s_jwt_names_only_its_scope_and_the_server_fills_in_its_grants() {
    let mut people = people();
    people.push(Person {
        user: "cat".into(),
        password: "unused".into(),
        may_call: vec!["mesh.echo.>".into()],
    });
    let bus = operated(&modules(), &people).await;
    let mut scope_of = std::collections::BTreeMap::new();
    for u in bus.signed.users.iter().filter(|u| u.account != "SYS") {
        let who = format!("{} of {}", u.name, u.account);
        let (token, _) = jwt::read_creds(&u.creds).unwrap();
        let claims: jwt::Claims<jwt::User> = jwt::Claims::verify(&token).unwrap();
        let account = bus.signed.account(&u.account).unwrap();
        let account_claims: jwt::Claims<jwt::Account> = jwt::Claims::verify(&account.jwt).unwrap();
        assert_eq!(
            claims.nats.limits,
            jwt::PermissionLimits::none(),
            "{who}'s JWT says nothing of its own"
        );
        assert_eq!(claims.nats.issuer_account, account.key, "{who}");
        let scope = account_claims
            .nats
            .signing_key(&claims.iss)
            .and_then(|k| k.scope())
            .unwrap_or_else(|| panic!("{who} is signed by no scope of {}", u.account));
        // Whom a scope was made for is the account's description's to say, not the scope's.
        let described = account_claims.nats.description.clone().unwrap_or_default();
        let whose = described
            .trim_start_matches("users by grants: ")
            .split("; ")
            .find_map(|s| s.strip_prefix(&format!("{}: ", scope.role)))
            .unwrap_or_default();
        assert!(whose.split(", ").any(|n| n == u.name), "{who}: {described}");
        scope_of.insert(who.clone(), scope.key.clone());
        assert!(
            token.len() < 700,
            "{who}'s JWT is {} bytes: {token}",
            token.len()
        );
        let (client, _) = bus.connect(&u.account, &u.name).await;
        if u.account != "PEOPLE" {
            // A module may not ask USER.INFO: what it may do is tested by what it does
            // (what_the_file_layout_denies_operator_mode_denies and the calls above).
            continue;
        }
        let [pub_allow, pub_deny, sub_allow, sub_deny] = granted(&client).await;
        let p = &u.claims.limits.permissions;
        assert_eq!(pub_allow, sorted(&p.r#pub.allow), "{who} publishes");
        assert_eq!(pub_deny, sorted(&p.r#pub.deny), "{who} publishes");
        assert_eq!(sub_allow, sorted(&p.sub.allow), "{who} subscribes");
        assert_eq!(sub_deny, sorted(&p.sub.deny), "{who} subscribes");
        assert!(
            sub_allow.contains(&format!("{}.>", inbox_prefix(&u.name))),
            "{who}'s own inbox, filled in: {sub_allow:?}"
        );
    }
    assert_eq!(scope_of["ann of PEOPLE"], scope_of["cat of PEOPLE"]);
    assert_ne!(scope_of["ann of PEOPLE"], scope_of["bob of PEOPLE"]);
}

/// A thief of a scope's key signs no more than the scope gives: a user it signs that says
/// what it may do itself is refused at connect, and one that says nothing gets the scope's
/// grants under its own name — ann's inbox stays ann's.
#[tokio::test]
async fn a_scope_s_key_signs_no_more_than_its_template() {
    let bus = operated(&modules(), &people()).await;
    let people_jwt = &bus.signed.account("PEOPLE").unwrap().jwt;
    let people_claims: jwt::Claims<jwt::Account> = jwt::Claims::verify(people_jwt).unwrap();
    let ann = bus.signed.user("PEOPLE", "ann").unwrap();
    let (token, _) = jwt::read_creds(&ann.creds).unwrap();
    let ann_claims: jwt::Claims<jwt::User> = jwt::Claims::verify(&token).unwrap();
    let scope = people_claims
        .nats
        .signing_key(&ann_claims.iss)
        .and_then(|k| k.scope())
        .unwrap();
    let digest = scope.role.strip_prefix("grants-").unwrap();
    let mut ring = KeyRing::open(&bus._dir.path().join("keys")).unwrap();
    let stolen = ring
        .key_owned(
            &format!("scope.PEOPLE.{digest}"),
            nkeys::KeyPair::new_account,
        )
        .unwrap();
    assert_eq!(stolen.public_key(), scope.key, "the scope's key as kept");
    let mint = |name: &str, nats: jwt::User| {
        let user = nkeys::KeyPair::new_user();
        let token = jwt::Claims::new(user.public_key(), name, nats)
            .sign(&stolen)
            .unwrap();
        let path = bus.creds.join(format!("minted-{name}.creds"));
        std::fs::write(&path, jwt::creds(&token, &user.seed().unwrap())).unwrap();
        path
    };
    let mut wider = jwt::User::scoped(bus.signed.account("PEOPLE").unwrap().key.clone());
    wider.limits.permissions.sub.allow = vec![">".into()];
    refused(
        &mint("mallory", wider),
        "mallory",
        &bus.server.url(),
        "a scope's user with permissions of its own",
    )
    .await;
    let plain = jwt::User::scoped(bus.signed.account("PEOPLE").unwrap().key.clone());
    let (tx, mut errors) = tokio::sync::mpsc::unbounded_channel();
    let mallory = async_nats::ConnectOptions::with_credentials_file(mint("mallory", plain))
        .await
        .unwrap()
        .custom_inbox_prefix(inbox_prefix("mallory"))
        .event_callback(move |event| {
            if let async_nats::Event::ServerError(e) = event {
                let _ = tx.send(e.to_string());
            }
            async {}
        })
        .connect(bus.server.url())
        .await
        .unwrap();
    let [_, _, sub_allow, _] = granted(&mallory).await;
    assert!(sub_allow.contains(&format!("{}.>", inbox_prefix("mallory"))));
    assert!(
        !sub_allow.iter().any(|s| s.contains("ann")),
        "ann's subjects are not mallory's: {sub_allow:?}"
    );
    let _tap = mallory
        .subscribe(format!("{}.x", inbox_prefix("ann")))
        .await
        .unwrap();
    mallory.flush().await.unwrap();
    let error = tokio::time::timeout(HANG, errors.recv())
        .await
        .expect("the server refuses mallory ann's inbox")
        .unwrap();
    assert!(
        error.contains("Permissions Violation for Subscription"),
        "{error}"
    );
}

/// People granted alike share a scope, and nats-server closes every connection a scope
/// signed when the account's JWT changes that scope at all: someone granted as they are,
/// added and pushed, must not cut them off (nor anyone else).
#[tokio::test]
async fn someone_granted_alike_joining_cuts_off_nobody_already_connected() {
    let mut people = people();
    people.push(person("cat", &["mesh.echo.>"]));
    let bus = operated(&modules(), &people).await;
    let (_ann, mut ann_cut) = watched(&bus, "ann").await;
    let (_bob, mut bob_cut) = watched(&bus, "bob").await;

    people.push(person("dan", &["mesh.echo.>"]));
    let rendered = layout::accounts_owned(
        -1,
        &bus._dir.path().join("js"),
        &modules(),
        &people,
        "unused",
    );
    let root = natsconf::parse_str(&rendered, Path::new("layout.conf")).unwrap();
    let mut ring = KeyRing::open(&bus._dir.path().join("keys")).unwrap();
    let again = operator::sign(&root, &mut ring).unwrap();
    let ann_scope = |signed: &Signed| {
        let (token, _) = jwt::read_creds(&signed.user("PEOPLE", "ann").unwrap().creds).unwrap();
        jwt::Claims::<jwt::User>::verify(&token).unwrap().iss
    };
    assert_eq!(
        ann_scope(&bus.signed),
        ann_scope(&again),
        "ann's grants are as they were"
    );
    let dan = again.user("PEOPLE", "dan").unwrap();
    std::fs::write(bus.creds.join("PEOPLE.dan.creds"), &dan.creds).unwrap();
    let (sys, _) = bus
        .connect(operator::SYSTEM_ACCOUNT, operator::SYSTEM_USER)
        .await;
    for p in operator::push(&sys, &again).await {
        assert!(p.outcome.is_ok(), "{}: {:?}", p.name, p.outcome);
    }
    let (dan, _) = bus.connect("PEOPLE", "dan").await;
    dan.flush().await.unwrap();
    for cut in [&mut ann_cut, &mut bob_cut] {
        if let Ok(Some(who)) = tokio::time::timeout(Duration::from_secs(2), cut.recv()).await {
            panic!("{who} was cut off by dan's joining\n{}", bus.log());
        }
    }
}

/// A grant cut and a person removed, pushed: their open connections close and the credential
/// files they had connect no more — though the scope that signed them stays listed for dan,
/// who still has its grants — and dan is not cut off.
#[tokio::test]
async fn a_grant_cut_or_a_person_removed_closes_their_connections_and_voids_their_files() {
    let echoers = ["ann", "cat", "dan"].map(|p| person(p, &["mesh.echo.>"]));
    let bus = operated(&modules(), &echoers).await;
    let (_ann, mut ann_cut) = watched(&bus, "ann").await;
    let (_cat, mut cat_cut) = watched(&bus, "cat").await;
    let (_dan, mut dan_cut) = watched(&bus, "dan").await;

    // ann may call nothing now, cat is gone, dan is as he was.
    let now = [person("ann", &[]), person("dan", &["mesh.echo.>"])];
    let rendered =
        layout::accounts_owned(-1, &bus._dir.path().join("js"), &modules(), &now, "unused");
    let root = natsconf::parse_str(&rendered, Path::new("layout.conf")).unwrap();
    let mut ring = KeyRing::open(&bus._dir.path().join("keys")).unwrap();
    let again = operator::sign(&root, &mut ring).unwrap();
    let (sys, _) = bus
        .connect(operator::SYSTEM_ACCOUNT, operator::SYSTEM_USER)
        .await;
    for p in operator::push(&sys, &again).await {
        assert!(p.outcome.is_ok(), "{}: {:?}", p.name, p.outcome);
    }
    for (who, cut) in [("ann", &mut ann_cut), ("cat", &mut cat_cut)] {
        tokio::time::timeout(HANG, cut.recv())
            .await
            .unwrap_or_else(|_| panic!("{who}'s connection outlived the push\n{}", bus.log()));
        refused(
            &bus.creds.join(format!("PEOPLE.{who}.creds")),
            who,
            &bus.server.url(),
            "a credential file issued before the grants changed still connects",
        )
        .await;
    }
    let scope_of = |signed: &Signed, who: &str| {
        let (token, _) = jwt::read_creds(&signed.user("PEOPLE", who).unwrap().creds).unwrap();
        jwt::Claims::<jwt::User>::verify(&token).unwrap().iss
    };
    assert_eq!(
        scope_of(&bus.signed, "ann"),
        scope_of(&again, "dan"),
        "the scope ann's old file names is still listed, for dan"
    );
    if let Ok(Some(who)) = tokio::time::timeout(Duration::from_secs(2), dan_cut.recv()).await {
        panic!("{who} was cut off\n{}", bus.log());
    }
}

/// A scope of a site's own, as nsc writes one (its template naming the user's and the
/// account's tags), pushed to PEOPLE, and a user it signs: what the audit says that user may
/// do is what nats-server tells them they may.
async fn site_scope_audited(template: jwt::PermissionLimits) -> SiteScope {
    let bus = operated(&modules(), &people()).await;
    let people_account = bus.signed.account("PEOPLE").unwrap();
    let claims: jwt::Claims<jwt::Account> = jwt::Claims::verify(&people_account.jwt).unwrap();
    let mut nats = claims.nats;
    let scope_key = nkeys::KeyPair::new_account();
    nats.signing_keys
        .push(jwt::SigningKey::Scoped(Box::new(jwt::UserScope::new(
            scope_key.public_key(),
            "site",
            template,
        ))));
    nats.generic.tags = vec!["zone:eu".into(), "zone:us".into()];
    let mut ring = KeyRing::open(&bus._dir.path().join("keys")).unwrap();
    let account_jwt = jwt::Claims::new(claims.sub.clone(), claims.name.clone(), nats)
        .sign_at(ring.signer().unwrap(), claims.iat + 1)
        .unwrap();
    let (sys, _) = bus
        .connect(operator::SYSTEM_ACCOUNT, operator::SYSTEM_USER)
        .await;
    let pushed = operator::push(
        &sys,
        &Signed {
            operator: String::new(),
            system_account: String::new(),
            accounts: vec![operator::SignedAccount {
                name: "PEOPLE".into(),
                key: people_account.key.clone(),
                jwt: account_jwt.clone(),
            }],
            users: Vec::new(),
            removed: Vec::new(),
        },
    )
    .await;
    assert!(pushed[0].outcome.is_ok(), "{:?}", pushed[0].outcome);

    let user = nkeys::KeyPair::new_user();
    let mut claims = jwt::User::scoped(people_account.key.clone());
    claims.generic.tags = vec!["team:red".into(), "team:blue".into()];
    let user_jwt = jwt::Claims::new(user.public_key(), "mal", claims)
        .sign(&scope_key)
        .unwrap();
    let path = bus.creds.join("PEOPLE.mal.creds");
    std::fs::write(&path, jwt::creds(&user_jwt, &user.seed().unwrap())).unwrap();
    let (mal, _) = bus.connect("PEOPLE", "mal").await;
    let server_says = granted(&mal).await;
    let info = tokio::time::timeout(HANG, mal.request(layout::USER_INFO, "".into()))
        .await
        .expect("the server answers USER.INFO")
        .unwrap();
    let info: serde_json::Value = serde_json::from_slice(&info.payload).unwrap();

    // A user of the scope that says something of its own (here, that it may answer) is
    // refused by the server and by the audit alike.
    let eve_key = nkeys::KeyPair::new_user();
    let eve = serde_json::json!({
        "issuer_account": people_account.key,
        "resp": {"max": 1, "ttl": 0},
        "tags": ["team:red"],
        "type": "user",
        "version": 2,
    });
    let eve_jwt = jwt::Claims::new(eve_key.public_key(), "eve", eve)
        .sign(&scope_key)
        .unwrap();
    let eve_creds = bus.creds.join("PEOPLE.eve.creds");
    std::fs::write(&eve_creds, jwt::creds(&eve_jwt, &eve_key.seed().unwrap())).unwrap();
    refused(
        &eve_creds,
        "eve",
        &bus.server.url(),
        "a scope's user that says it may answer",
    )
    .await;

    let trust = jwts::Trust::read(&bus.signed.operator).unwrap();
    let accounts = jwts::verify(
        &trust,
        vec![jwts::Found {
            key: people_account.key.clone(),
            jwt: account_jwt,
            from: "pushed".into(),
        }],
    );
    assert!(accounts.refused.is_empty(), "{:?}", accounts.refused);
    let (mut trusted, refused) = jwts::verify_users(
        &accounts,
        vec![
            jwts::FoundUser {
                jwt: user_jwt,
                from: "mal".into(),
            },
            jwts::FoundUser {
                jwt: eve_jwt,
                from: "eve".into(),
            },
        ],
    );
    let refused: Vec<(&str, jwts::Why, bool)> = refused
        .iter()
        .map(|r| {
            let own = r.detail.contains("says what it may do itself");
            (r.from.as_str(), r.why, own)
        })
        .collect();
    assert_eq!(
        refused,
        [("eve", jwts::Why::Scope, true)],
        "the audit refuses whom the server refuses, and only them"
    );
    let p = &trusted[0].claims.nats.limits.permissions;
    let audit_says = [
        sorted(&p.r#pub.allow),
        sorted(&p.r#pub.deny),
        sorted(&p.sub.allow),
        sorted(&p.sub.deny),
    ];
    SiteScope {
        said: vec![server_says, audit_says],
        permissions: info["data"]["permissions"].clone(),
        user: trusted.remove(0),
        accounts,
    }
}

/// What [`site_scope_audited`] found: what the server says its user may do and what the
/// audit says (publish allow, deny, subscribe allow, deny), the server's whole answer, and
/// what the audit read.
struct SiteScope {
    said: Vec<[Vec<String>; 4]>,
    permissions: serde_json::Value,
    user: jwts::TrustedUser,
    accounts: jwts::Accounts,
}

/// The audit fills a site's scope in as nats-server does, tags too: one subject per tag
/// value (and per combination of values), a tag the user lacks makes no subject.
#[tokio::test]
async fn the_audit_fills_a_site_s_tagged_scope_in_as_nats_server_does() {
    let mut template = jwt::PermissionLimits::default();
    template.permissions.r#pub.allow = vec![
        "a.{{tag(team)}}.>".into(),
        "b.{{account-tag(zone)}}.{{name()}}".into(),
        "c.{{tag(none)}}".into(),
        layout::USER_INFO.into(),
    ];
    template.permissions.r#pub.deny = vec!["a.{{tag(team)}}.secret".into()];
    template.permissions.sub.allow = vec![
        "_INBOX.{{name()}}.>".into(),
        "d.{{tag(team)}}.{{account-tag(zone)}}".into(),
    ];
    let found = site_scope_audited(template).await;
    let [server, audit] = &found.said[..] else {
        unreachable!()
    };
    assert!(
        server[0].contains(&"a.blue.>".to_owned()) && server[2].contains(&"d.red.us".to_owned()),
        "the server filled the tags in: {server:?}"
    );
    assert_eq!(
        audit, server,
        "what the audit says mal may do, and what the server does"
    );
}

/// A site's scope that lets its users answer whoever asks them (`resp`, as
/// `nsc edit signing-key --allow-pub-response` writes it): nats-server lets them publish to
/// the reply subject of each request they get, and the audit says so.
#[tokio::test]
async fn the_audit_reads_a_site_s_scope_letting_its_users_answer() {
    let mut template = jwt::PermissionLimits::default();
    template.permissions.r#pub.allow = vec![layout::USER_INFO.into()];
    template.permissions.sub.allow = vec!["_INBOX.{{name()}}.>".into(), "q.>".into()];
    template.permissions.resp = Some(jwt::ResponsePermission { max: 1, ttl: 0 });
    let found = site_scope_audited(template).await;
    assert!(
        found.permissions["responses"].is_object(),
        "the server lets mal answer: {}",
        found.permissions
    );
    let (model, _) = jwts::model(&found.accounts, &[found.user], None);
    let mal = model
        .accounts
        .iter()
        .flat_map(|a| &a.users)
        .find(|u| u.name == "mal")
        .unwrap();
    assert!(
        mal.permissions.allow_responses,
        "the audit says mal may answer, as the server does"
    );
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
        "modules { echo {} }\nroles { r { tools: [echo] } }\npeople { ann { roles: [r] } }\n",
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
        "modules { echo {}\n weather {} }\nroles { r { tools: [echo, weather_now] } }\npeople { ann { roles: [r] } }\n",
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
    answering(&weather, "mesh.weather.now", "sunny").await;
    let ann = connect("PEOPLE", "ann").await;
    let reply = tokio::time::timeout(HANG, ann.request("mesh.weather.now", "{}".into()))
        .await
        .expect("the new module's tool answers")
        .unwrap();
    assert_eq!(reply.payload.as_ref(), b"sunny");

    // ann's grant cut back to echo and weather removed, pushed: the credential file she
    // had before is void (revoked in PEOPLE), her new one may not call weather_now, and
    // weather's own file connects no more (its account sent again empty).
    let weather_creds = out.join("creds").join("MODULE_weather.weather.creds");
    let before = std::fs::read(out.join("creds").join("PEOPLE.ann.creds")).unwrap();
    std::fs::write(
        &grants,
        "modules { echo {} }\nroles { r { tools: [echo] } }\npeople { ann { roles: [r] } }\n",
    )
    .unwrap();
    let pushed = accounts(&server.url()).output().await.unwrap();
    assert_eq!(
        pushed.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&pushed.stderr)
    );
    refused(
        &weather_creds,
        "weather",
        &server.url(),
        "a removed module still connects",
    )
    .await;
    let kept = dir.path().join("kept.creds");
    std::fs::write(&kept, before).unwrap();
    refused(
        &kept,
        "ann",
        &server.url(),
        "a credential file issued before the grant was cut still connects",
    )
    .await;
    let (tx, mut errors) = tokio::sync::mpsc::unbounded_channel();
    let ann = async_nats::ConnectOptions::with_credentials_file(
        out.join("creds").join("PEOPLE.ann.creds"),
    )
    .await
    .unwrap()
    .custom_inbox_prefix(inbox_prefix("ann"))
    .event_callback(move |event| {
        if let async_nats::Event::ServerError(e) = event {
            let _ = tx.send(e.to_string());
        }
        async {}
    })
    .connect(server.url())
    .await
    .unwrap();
    ann.publish("mesh.weather.now", "{}".into()).await.unwrap();
    ann.flush().await.unwrap();
    let e = tokio::time::timeout(HANG, errors.recv())
        .await
        .expect("the server refuses")
        .unwrap();
    assert!(e.contains("Permissions Violation"), "{e}");
}

/// Connecting with credential file `creds` is refused as an authorization violation.
async fn refused(creds: &Path, user: &str, url: &str, what: &str) {
    let e = async_nats::ConnectOptions::with_credentials_file(creds)
        .await
        .unwrap()
        .custom_inbox_prefix(inbox_prefix(user))
        .connect(url)
        .await
        .expect_err(what);
    assert_eq!(
        e.kind(),
        async_nats::ConnectErrorKind::AuthorizationViolation,
        "{what}: {e}"
    );
}

/// `client` answers every request on `subject` with `answer`, from now on.
pub(crate) async fn answering(client: &async_nats::Client, subject: &str, answer: &'static str) {
    let mut calls = client
        .queue_subscribe(subject.to_owned(), "answering".into())
        .await
        .unwrap();
    crate::bus::module_round_trip(client).await;
    let client = client.clone();
    tokio::spawn(async move {
        while let Some(call) = calls.next().await {
            if let Some(reply) = call.reply {
                let _ = client.publish(reply, answer.into()).await;
            }
        }
    });
}

/// Every file below `dir`.
pub(crate) fn walk(dir: &Path) -> Vec<std::path::PathBuf> {
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
    // A CONNECT that says another user beside ann's credential file names nobody else.
    let posing =
        async_nats::ConnectOptions::with_credentials_file(bus.creds.join("PEOPLE.ann.creds"))
            .await
            .unwrap()
            .user_and_password("bob".into(), "x".into())
            .custom_inbox_prefix(inbox_prefix("ann"))
            .connect(bus.server.url())
            .await;
    // nats-server takes the CONNECT; the user it says is never the name the mesh reads.
    let posing = posing.expect("the server takes a credential file with a user beside it");
    let said = tokio::time::timeout(HANG, posing.request("mesh.echo.whoami", "{}".into()))
        .await
        .expect("answered")
        .unwrap();
    let said: serde_json::Value = serde_json::from_slice(&said.payload).unwrap();
    assert_eq!(said["structuredContent"]["actor"], "ann@PEOPLE", "{said}");
    let people = bus.signed.account("PEOPLE").unwrap().key.clone();
    mesh_core::actor::forget_accounts([&people]);
    let refused = ann.call(&whoami, &serde_json::json!({}), HANG).await;
    mesh_core::actor::learn_accounts(bus.signed.names());
    let said = format!("{refused:?}");
    assert!(said.contains("not in the mesh's accounts"), "{said}");
}

/// An identity provider the test plays: its own RSA key (made by openssl), its JWKS.
pub(crate) struct Idp {
    der: Vec<u8>,
    pub(crate) jwks: String,
    /// The key's id in the JWKS and in the tokens' header.
    kid: String,
}

pub(crate) const ISSUER: &str = "https://idp.example.org";
pub(crate) const AUDIENCE: &str = "mesh";

pub(crate) fn idp(dir: &Path, name: &str) -> Idp {
    let pem = dir.join(format!("{name}.pem"));
    let der = dir.join(format!("{name}.der"));
    let run = |args: &[&str]| {
        let out = std::process::Command::new("openssl")
            .args(args)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "openssl {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    };
    run(&["genrsa", "-out", pem.to_str().unwrap(), "2048"]);
    run(&[
        "rsa",
        "-in",
        pem.to_str().unwrap(),
        "-outform",
        "DER",
        "-traditional",
        "-out",
        der.to_str().unwrap(),
    ]);
    let modulus = run(&["rsa", "-in", pem.to_str().unwrap(), "-noout", "-modulus"]);
    let hex = modulus.trim().trim_start_matches("Modulus=");
    let bytes: Vec<u8> = (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap())
        .collect();
    use base64::Engine as _;
    let n = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes);
    Idp {
        der: std::fs::read(der).unwrap(),
        jwks: serde_json::json!({"keys": [{"kty": "RSA", "kid": "k1", "alg": "RS256", "use": "sig", "n": n, "e": "AQAB"}]})
            .to_string(),
        kid: "k1".into(),
    }
}

impl Idp {
    /// The same key under id `kid` (a provider's next key).
    pub(crate) fn with_kid(mut self, kid: &str) -> Idp {
        self.jwks = self
            .jwks
            .replace("\"kid\":\"k1\"", &format!("\"kid\":\"{kid}\""));
        self.kid = kid.into();
        self
    }

    /// An ID token for `person`, with `more` claims over the usual ones.
    pub(crate) fn token(&self, person: &str, more: serde_json::Value) -> String {
        self.token_naming(person, more, &self.kid.clone())
    }

    /// As [`Idp::token`], its header naming key `kid` (signed by this key whatever it says).
    pub(crate) fn token_naming(&self, person: &str, more: serde_json::Value, kid: &str) -> String {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs() as i64;
        let mut claims = serde_json::json!({
            "iss": ISSUER, "aud": AUDIENCE, "sub": format!("id-{person}"),
            "preferred_username": person, "iat": now, "exp": now + 600,
        });
        for (k, v) in more.as_object().unwrap() {
            claims[k] = v.clone();
        }
        let mut header = jsonwebtoken::Header::new(jsonwebtoken::Algorithm::RS256);
        header.kid = Some(kid.into());
        jsonwebtoken::encode(
            &header,
            &claims,
            &jsonwebtoken::EncodingKey::from_rsa_der(&self.der),
        )
        .unwrap()
    }
}

/// A site whose people sign in through the callout: the layout signed for operator mode with
/// the callout's account, its server running, and the callout not yet listening; the
/// identity provider's key and a stranger's.
struct SignIns {
    dir: tempfile::TempDir,
    provider_key: Idp,
    stranger_key: Idp,
    signed: Signed,
    callout: Option<mesh_bus::callout::Callout>,
    server: NatsServer,
    log: std::path::PathBuf,
}

impl SignIns {
    async fn start() -> SignIns {
        let dir = tempfile::tempdir().unwrap();
        let provider_key = idp(dir.path(), "provider");
        let stranger_key = idp(dir.path(), "stranger");
        let rendered =
            layout::accounts_owned(-1, &dir.path().join("js"), &modules(), &people(), "x");
        let root = natsconf::parse_str(&rendered, Path::new("layout.conf")).unwrap();
        let mut ring = KeyRing::open(&dir.path().join("keys")).unwrap();
        mesh_bus::callout::delegate(&mut ring);
        let mut signed = operator::sign(&root, &mut ring).unwrap();
        // Each person's permissions as the layout signed them.
        let grants = std::sync::Arc::new(std::sync::RwLock::new(mesh_bus::callout::people_of(
            &signed,
        )));
        let provider =
            mesh_bus::callout::Provider::new(ISSUER, AUDIENCE, None, &provider_key.jwks).unwrap();
        let callout = mesh_bus::callout::add_to(&mut signed, &mut ring, provider, grants).unwrap();
        let conf = format!(
            "{}\n{}",
            operator::without_accounts(&rendered),
            signed.server_block(&dir.path().join("jwt"))
        );
        let path = dir.path().join("nats-server.conf");
        std::fs::write(&path, conf).unwrap();
        let log = dir.path().join("nats-server.log");
        let server = NatsServer::start(&path, None, &log)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        SignIns {
            dir,
            provider_key,
            stranger_key,
            signed,
            callout: Some(callout),
            server,
            log,
        }
    }

    /// A credential file of the callout's account (`callout`, `sentinel`).
    fn creds(&self, user: &str) -> std::path::PathBuf {
        let path = self.dir.path().join(format!("AUTH.{user}.creds"));
        std::fs::write(&path, &self.signed.user("AUTH", user).unwrap().creds).unwrap();
        path
    }

    /// The callout service's own connection.
    async fn service(&self) -> async_nats::Client {
        async_nats::ConnectOptions::with_credentials_file(self.creds("callout"))
            .await
            .unwrap()
            .connect(self.server.url())
            .await
            .unwrap()
    }
}

/// A callout told to listen while its server is away is not held there (so `mesh callout`
/// and `mesh up` reach their Ctrl-C handling), and once the server is back it answers: ann
/// signs in as the provider vouches.
#[tokio::test]
async fn a_callout_listening_while_its_server_is_away_answers_when_it_is_back() {
    let mut site = SignIns::start().await;
    let service = site.service().await;
    let mut states = service.connection_states();
    site.server.stop().await;
    tokio::time::timeout(
        HANG,
        states.wait_for(|s| *s != async_nats::connection::State::Connected),
    )
    .await
    .expect("the service's connection sees its server go")
    .unwrap();
    let listening =
        tokio::time::timeout(HANG, site.callout.take().unwrap().listen(service.clone()))
            .await
            .expect("listening does not wait for a server that is away")
            .unwrap();
    tokio::spawn(listening.serve());
    site.server.restart().await.unwrap();
    tokio::time::timeout(
        HANG,
        states.wait_for(|s| *s == async_nats::connection::State::Connected),
    )
    .await
    .expect("the service's connection comes back")
    .unwrap();
    crate::bus::round_trip(&service).await;
    let ann = async_nats::ConnectOptions::with_credentials_file(site.creds("sentinel"))
        .await
        .unwrap()
        .custom_inbox_prefix(inbox_prefix("ann"))
        .token(site.provider_key.token("ann", serde_json::json!({})))
        .connect(site.server.url());
    let ann = tokio::time::timeout(HANG, ann)
        .await
        .expect("the server answers a sign-in")
        .expect("ann is let in once the callout's server is back");
    // As herself, in PEOPLE.
    let info = tokio::time::timeout(HANG, ann.request(layout::USER_INFO, "".into()))
        .await
        .expect("the server answers USER.INFO")
        .unwrap();
    let info: serde_json::Value = serde_json::from_slice(&info.payload).unwrap();
    assert_eq!(info["data"]["user"], "ann", "{info}");
    assert_eq!(
        info["data"]["account"],
        site.signed.account("PEOPLE").unwrap().key,
        "{info}"
    );
}

/// People from an identity provider: a person connects with the sentinel credential and
/// their ID token and is let in as themselves in PEOPLE, with the grants' permissions; an
/// expired token, one for another audience, one signed by another key, a person not in the
/// grants and no token at all are each refused, for their own reason.
#[tokio::test]
async fn people_sign_in_with_their_identity_provider_and_nobody_else_does() {
    let mut site = SignIns::start().await;
    let service = site.service().await;
    let listening = site
        .callout
        .take()
        .unwrap()
        .listen(service.clone())
        .await
        .unwrap();
    tokio::spawn(listening.serve());
    // The server has the subscription before anyone signs in.
    crate::bus::round_trip(&service).await;
    let SignIns {
        dir,
        provider_key,
        stranger_key,
        signed,
        server,
        log,
        ..
    } = &site;
    let creds = |user: &str| site.creds(user);
    let sentinel = creds("sentinel");
    let sign_in = |token: Option<String>| {
        let sentinel = sentinel.clone();
        let url = server.url();
        async move {
            let mut options = async_nats::ConnectOptions::with_credentials_file(sentinel)
                .await
                .unwrap()
                .custom_inbox_prefix(inbox_prefix("ann"));
            if let Some(t) = token {
                options = options.token(t);
            }
            tokio::time::timeout(HANG, options.connect(url))
                .await
                .expect("the server answers a sign-in")
        }
    };

    let echo_creds = dir.path().join("MODULE_echo.echo.creds");
    std::fs::write(
        &echo_creds,
        &signed.user("MODULE_echo", "echo").unwrap().creds,
    )
    .unwrap();
    let echo = async_nats::ConnectOptions::with_credentials_file(echo_creds)
        .await
        .unwrap()
        .custom_inbox_prefix(inbox_prefix("echo"))
        .connect(server.url())
        .await
        .unwrap();
    stamping(&echo).await;
    // ann, as the provider vouches: let in as herself, with her grants.
    let ann = sign_in(Some(provider_key.token("ann", serde_json::json!({}))))
        .await
        .expect("ann signs in");
    let reply = tokio::time::timeout(HANG, ann.request("mesh.echo.echo", "{}".into()))
        .await
        .expect("ann's call is answered")
        .unwrap();
    let stamp: serde_json::Value = serde_json::from_slice(&reply.payload).unwrap();
    // Let in by the callout: named by it (`user`), the sentinel's name beside it.
    assert_eq!(stamp["user"], "ann", "{stamp}");
    assert_eq!(
        stamp["name_tag"],
        mesh_core::actor::CALLOUT_SENTINEL,
        "{stamp}"
    );
    assert_eq!(
        stamp["acc"],
        signed.account("PEOPLE").unwrap().key,
        "{stamp}"
    );
    // And the mesh's runtime names her so (a CONNECT's own `user` names nobody).
    let info: mesh_core::subjects::calllog::ClientInfo = serde_json::from_value(stamp).unwrap();
    mesh_core::actor::learn_accounts(signed.names());
    let named = mesh_core::actor::as_named(info);
    assert_eq!((named.user.as_str(), named.acc.as_str()), ("ann", "PEOPLE"));

    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    let refusals = [
        (
            Some(provider_key.token(
                "ann",
                serde_json::json!({"exp": now - 3600, "iat": now - 7200}),
            )),
            "the ID token has expired",
        ),
        (
            Some(provider_key.token("ann", serde_json::json!({"aud": "another"}))),
            "the ID token is for another audience",
        ),
        (
            Some(stranger_key.token("ann", serde_json::json!({}))),
            "not signed by the identity provider's key",
        ),
        (
            Some(provider_key.token("carl", serde_json::json!({}))),
            "carl is not a person in the grants file",
        ),
        (None, "no ID token was given"),
    ];
    for (token, why) in refusals {
        let e = sign_in(token).await.expect_err(why);
        assert_eq!(
            e.kind(),
            async_nats::ConnectErrorKind::AuthorizationViolation,
            "{why}: {e}"
        );
        // The server's log says the callout's reason for each.
        let mut said = false;
        for _ in 0..50 {
            if std::fs::read_to_string(log)
                .unwrap_or_default()
                .contains(why)
            {
                said = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        assert!(said, "the server's log does not say {why:?}");
    }

    // The callout holds a signing key of PEOPLE's, never PEOPLE's own key, and what it
    // signs lands in PEOPLE only: a user minted with it for a module's account (as a thief
    // of the key would) is refused, while one for PEOPLE is taken.
    let people_key = signed.account("PEOPLE").unwrap().key.clone();
    let people: jwt::Claims<jwt::Account> =
        jwt::Claims::verify(&signed.account("PEOPLE").unwrap().jwt).unwrap();
    let mut ring = KeyRing::open(&dir.path().join("keys")).unwrap();
    let callout_key = ring
        .key(
            mesh_bus::callout::PEOPLE_SIGNER,
            nkeys::KeyPair::new_account,
        )
        .unwrap()
        .seed()
        .unwrap();
    let callout_key = nkeys::KeyPair::from_seed(&callout_key).unwrap();
    let bare: Vec<&str> = people
        .nats
        .signing_keys
        .iter()
        .filter(|k| k.scope().is_none())
        .map(|k| k.key())
        .collect();
    assert_eq!(
        bare,
        [callout_key.public_key()],
        "PEOPLE lists the callout's key, and no other key that signs whatever it likes"
    );
    assert_ne!(callout_key.public_key(), people_key);
    let minted = |account: &str| {
        let user = nkeys::KeyPair::new_user();
        let mut claims = jwt::Claims::new(user.public_key(), "mallory", jwt::User::default());
        claims.nats.issuer_account = account.to_owned();
        let token = claims.sign(&callout_key).unwrap();
        let path = dir.path().join(format!("minted-{account}.creds"));
        std::fs::write(&path, jwt::creds(&token, &user.seed().unwrap())).unwrap();
        path
    };
    let echo_account = signed.account("MODULE_echo").unwrap().key.clone();
    refused(
        &minted(&echo_account),
        "mallory",
        &server.url(),
        "a user signed with the callout's key for a module's account connects",
    )
    .await;
    async_nats::ConnectOptions::with_credentials_file(minted(&people_key))
        .await
        .unwrap()
        .custom_inbox_prefix(inbox_prefix("mallory"))
        .connect(server.url())
        .await
        .expect("the callout's key signs PEOPLE's users");
}

/// `--push` to a server beyond this machine in the clear would sign in as the system
/// account's user where anyone on the path can relay the nonce's signature and keep the
/// session (the system account kicks clients, puts servers in lame duck, reads every event):
/// refused without TLS (tls://, or --tls-ca), before anything is sent.
#[tokio::test]
async fn mesh_accounts_pushes_beyond_this_machine_only_over_tls() {
    let dir = tempfile::tempdir().unwrap();
    let grants = dir.path().join("grants.conf");
    std::fs::write(&grants, "modules { echo {} }\n").unwrap();
    let (addr, heard) = crate::id_token::recorder(crate::id_token::beyond_loopback()).await;
    let pushed = tokio::process::Command::new(env!("CARGO_BIN_EXE_mesh"))
        .args(["accounts", "--auth", "operator", "--grants"])
        .arg(&grants)
        .arg("--store-dir")
        .arg(dir.path().join("js"))
        .arg("--out")
        .arg(dir.path().join("site"))
        .args(["--push", &format!("nats://{addr}")])
        .kill_on_drop(true)
        .output();
    let pushed = tokio::time::timeout(Duration::from_secs(60), pushed)
        .await
        .unwrap()
        .unwrap();
    let said = String::from_utf8_lossy(&pushed.stderr);
    let heard = heard.await.unwrap();
    assert!(
        !String::from_utf8_lossy(&heard).contains("CONNECT"),
        "the system user signed in in the clear at {addr}: {}",
        String::from_utf8_lossy(&heard)
    );
    assert_eq!(pushed.status.code(), Some(2), "{said}");
    assert!(said.contains("TLS"), "{said}");
}
