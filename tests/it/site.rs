//! A site's own operator (issue 49): the operator, its signing key and its system account as
//! nsc keeps them, a server the site configured and runs, and `mesh accounts --nsc` pushing the
//! mesh's accounts into it — signed by the operator's signing key, the site's JWTs never signed
//! again, none of the site's seeds copied. And what must be refused: a key the operator never
//! listed, a store whose operator JWT was changed.

use std::path::{Path, PathBuf};
use std::time::Duration;

use mesh_bus::jwt::{self, Account, Claims, Operator, User};
use mesh_bus::natsd::NatsServer;
use mesh_core::subjects::inbox_prefix;
use nkeys::KeyPair;

/// What waits for a message gives up after this: a hang guard, not a measure.
const HANG: Duration = Duration::from_secs(20);

/// A site's nsc: its store of operator ACME and its folder of seeds, laid out as nsc writes
/// them (nats-io/nsc `cmd/store`), and the keys for the test to look at.
pub(crate) struct Nsc {
    pub(crate) store: PathBuf,
    pub(crate) keys: PathBuf,
    operator: KeyPair,
    signing: KeyPair,
    system: KeyPair,
    system_user: KeyPair,
}

fn keep_seed(keys: &Path, key: &KeyPair) {
    let public = key.public_key();
    let dir = keys.join("keys").join(&public[0..1]).join(&public[1..3]);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join(format!("{public}.nk")),
        key.seed().unwrap().as_bytes(),
    )
    .unwrap();
}

/// nsc after `nsc add operator --generate-signing-key --sys --name ACME`: the operator
/// self-signed, listing its signing key and system account SYS; SYS signed by the operator;
/// SYS's user `sys` and its credential file; every seed in the keys folder — the operator's
/// own only if `with_operator_seed` (a site that keeps it offline has none there).
pub(crate) fn nsc(root: &Path, with_operator_seed: bool) -> Nsc {
    let store = root.join("stores").join("ACME");
    let keys = root.join("keys");
    let (operator, signing) = (KeyPair::new_operator(), KeyPair::new_operator());
    let (system, system_user) = (KeyPair::new_account(), KeyPair::new_user());
    std::fs::create_dir_all(store.join("accounts/SYS/users")).unwrap();
    std::fs::write(
        store.join(".nsc"),
        r#"{"managed":false,"name":"ACME","kind":"operator","version":"2.11.0"}"#,
    )
    .unwrap();
    let operator_jwt = Claims::new(
        operator.public_key(),
        "ACME",
        Operator {
            signing_keys: vec![signing.public_key()],
            system_account: system.public_key(),
            ..Operator::default()
        },
    )
    .sign(&operator)
    .unwrap();
    std::fs::write(store.join("ACME.jwt"), &operator_jwt).unwrap();
    let system_jwt = Claims::new(system.public_key(), "SYS", Account::default())
        .sign(&operator)
        .unwrap();
    std::fs::write(store.join("accounts/SYS/SYS.jwt"), &system_jwt).unwrap();
    let user_jwt = Claims::new(system_user.public_key(), "sys", User::default())
        .sign(&system)
        .unwrap();
    std::fs::write(store.join("accounts/SYS/users/sys.jwt"), &user_jwt).unwrap();
    let creds = keys.join("creds/ACME/SYS");
    std::fs::create_dir_all(&creds).unwrap();
    std::fs::write(
        creds.join("sys.creds"),
        jwt::creds(&user_jwt, &system_user.seed().unwrap()),
    )
    .unwrap();
    for key in [&signing, &system, &system_user] {
        keep_seed(&keys, key);
    }
    if with_operator_seed {
        keep_seed(&keys, &operator);
    }
    Nsc {
        store,
        keys,
        operator,
        signing,
        system,
        system_user,
    }
}

/// The server as the site configured it (`nsc generate config --nats-resolver`): its
/// operator, its system account preloaded, a full resolver — nothing of the mesh's.
async fn site_server(dir: &Path, nsc: &Nsc) -> NatsServer {
    let operator_jwt = std::fs::read_to_string(nsc.store.join("ACME.jwt")).unwrap();
    let system_jwt = std::fs::read_to_string(nsc.store.join("accounts/SYS/SYS.jwt")).unwrap();
    let config = dir.join("site.conf");
    std::fs::write(
        &config,
        format!(
            "operator: {operator_jwt}\nsystem_account: {system}\nresolver {{\n  type: full\n  dir: {resolver:?}\n  allow_delete: false\n}}\nresolver_preload {{\n  {system}: {system_jwt}\n}}\n",
            system = nsc.system.public_key(),
            resolver = dir.join("jwt").display().to_string(),
        ),
    )
    .unwrap();
    NatsServer::start(&config, None, &dir.join("site.log"))
        .await
        .unwrap_or_else(|e| panic!("{e}"))
}

/// `mesh accounts --auth operator --nsc` for the grants in `dir`, with `extra` arguments.
fn accounts(dir: &Path, nsc: &Nsc, extra: &[&str]) -> std::process::Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_mesh"))
        .args(["accounts", "--auth", "operator", "--grants"])
        .arg(dir.join("grants.conf"))
        .arg("--store-dir")
        .arg(dir.join("js"))
        .arg("--out")
        .arg(dir.join("out"))
        .arg("--nsc")
        .arg(&nsc.store)
        .arg("--nsc-keys")
        .arg(&nsc.keys)
        .args(extra)
        .env_remove("NKEYS_PATH")
        .output()
        .unwrap()
}

#[tokio::test]
async fn the_mesh_joins_a_site_s_own_operator_from_nsc_and_signs_with_its_signing_key() {
    let dir = tempfile::tempdir().unwrap();
    // The operator's own key kept offline: only its signing key is at hand.
    let nsc = nsc(dir.path(), false);
    let server = site_server(dir.path(), &nsc).await;
    std::fs::write(
        dir.path().join("grants.conf"),
        "modules { echo {} }\nroles { r { tools: [echo] } }\npeople { ann { roles: [r] } }\n",
    )
    .unwrap();
    let pushed = accounts(dir.path(), &nsc, &["--push", &server.url()]);
    let said = String::from_utf8_lossy(&pushed.stderr);
    assert_eq!(pushed.status.code(), Some(0), "{said}");
    assert!(said.contains("joining operator ACME"), "{said}");
    assert!(
        said.contains("MODULE_echo") && said.contains("is in the resolver"),
        "{said}"
    );
    let out = dir.path().join("out");

    // The site's JWTs as the site wrote them; the mesh's accounts signed by the signing key.
    let operator_jwt = std::fs::read_to_string(out.join("operator.jwt")).unwrap();
    assert_eq!(
        operator_jwt.trim(),
        std::fs::read_to_string(nsc.store.join("ACME.jwt"))
            .unwrap()
            .trim()
    );
    let config = std::fs::read_to_string(out.join("nats-server.conf")).unwrap();
    assert!(config.contains(operator_jwt.trim()), "{config}");
    for name in ["MODULE_echo", "PEOPLE", "MESH"] {
        let text = std::fs::read_to_string(out.join("accounts").join(format!("{name}.jwt")))
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        let claims: Claims<Account> = Claims::verify(&text).unwrap();
        assert_eq!(claims.iss, nsc.signing.public_key(), "{name}'s issuer");
    }
    // None of the site's seeds is copied into what the mesh writes.
    let secrets =
        [&nsc.operator, &nsc.signing, &nsc.system, &nsc.system_user].map(|k| k.seed().unwrap());
    for file in crate::operator::walk(&out) {
        let text = std::fs::read_to_string(&file).unwrap_or_default();
        for seed in &secrets {
            assert!(
                !text.contains(seed.as_str()),
                "{} holds a seed of the site's",
                file.display()
            );
        }
    }

    // The site's running server takes the pushed accounts: the module serves, ann calls.
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
                .unwrap_or_else(|e| panic!("{user} connects: {e}"))
        }
    };
    let echo = connect("MODULE_echo", "echo").await;
    crate::operator::answering(&echo, "mesh.echo.echo", "heard").await;
    let ann = connect("PEOPLE", "ann").await;
    let reply = tokio::time::timeout(HANG, ann.request("mesh.echo.echo", "{}".into()))
        .await
        .expect("echo answers")
        .unwrap();
    assert_eq!(reply.payload.as_ref(), b"heard");
}

#[tokio::test]
async fn a_key_the_site_s_operator_never_listed_signs_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let nsc = nsc(dir.path(), true);
    std::fs::write(
        dir.path().join("grants.conf"),
        "modules { echo {} }\npeople { ann {} }\n",
    )
    .unwrap();
    // An operator key of someone else's, given as the signing key.
    let stranger = dir.path().join("stranger.nk");
    std::fs::write(&stranger, KeyPair::new_operator().seed().unwrap()).unwrap();
    let refused = accounts(
        dir.path(),
        &nsc,
        &["--signing-key", stranger.to_str().unwrap()],
    );
    let said = String::from_utf8_lossy(&refused.stderr);
    assert_eq!(refused.status.code(), Some(2), "{said}");
    assert!(
        said.contains("is not one of operator ACME's signing keys"),
        "{said}"
    );
    assert!(
        !dir.path().join("out/accounts").exists(),
        "accounts were written"
    );

    // A seed that is no operator's (an account's) is refused as such.
    let account_seed = dir.path().join("account.nk");
    std::fs::write(&account_seed, KeyPair::new_account().seed().unwrap()).unwrap();
    let refused = accounts(
        dir.path(),
        &nsc,
        &["--signing-key", account_seed.to_str().unwrap()],
    );
    let said = String::from_utf8_lossy(&refused.stderr);
    assert_eq!(refused.status.code(), Some(2), "{said}");
    assert!(
        said.contains("holds no operator signing key seed"),
        "{said}"
    );

    // The operator's JWT changed after signing (its signing keys widened by hand).
    let path = nsc.store.join("ACME.jwt");
    let text = std::fs::read_to_string(&path).unwrap();
    let mut parts: Vec<String> = text.trim().split('.').map(str::to_owned).collect();
    use base64::Engine as _;
    let engine = base64::engine::general_purpose::URL_SAFE_NO_PAD;
    let mut claims: serde_json::Value =
        serde_json::from_slice(&engine.decode(&parts[1]).unwrap()).unwrap();
    claims["nats"]["signing_keys"] = serde_json::json!([KeyPair::new_operator().public_key()]);
    parts[1] = engine.encode(serde_json::to_vec(&claims).unwrap());
    std::fs::write(&path, parts.join(".")).unwrap();
    let refused = accounts(dir.path(), &nsc, &[]);
    let said = String::from_utf8_lossy(&refused.stderr);
    assert_eq!(refused.status.code(), Some(2), "{said}");
    assert!(said.contains("is not a JWT its issuer signed"), "{said}");
}

/// Without a site's operator, `mesh accounts` makes a signing key too: the operator's own
/// key signs the operator alone, every account is the signing key's.
#[test]
fn the_mesh_s_own_operator_signs_accounts_with_a_signing_key() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("grants.conf"),
        "modules { echo {} }\npeople { ann {} }\n",
    )
    .unwrap();
    let written = std::process::Command::new(env!("CARGO_BIN_EXE_mesh"))
        .args(["accounts", "--auth", "operator", "--grants"])
        .arg(dir.path().join("grants.conf"))
        .arg("--out")
        .arg(dir.path().join("out"))
        .output()
        .unwrap();
    assert_eq!(
        written.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&written.stderr)
    );
    let out = dir.path().join("out");
    let operator: Claims<Operator> =
        Claims::verify(&std::fs::read_to_string(out.join("operator.jwt")).unwrap()).unwrap();
    assert_eq!(operator.iss, operator.sub);
    assert_eq!(operator.nats.signing_keys.len(), 1, "{:?}", operator.nats);
    for entry in std::fs::read_dir(out.join("accounts")).unwrap().flatten() {
        let claims: Claims<Account> =
            Claims::verify(&std::fs::read_to_string(entry.path()).unwrap()).unwrap();
        assert_eq!(
            claims.iss,
            operator.nats.signing_keys[0],
            "{} is signed by the operator's own key",
            entry.path().display()
        );
    }
}

/// A site's people from its identity provider, with the callout as a service of its own:
/// `mesh accounts --idp` writes the callout's account, keys and sentinel; `mesh callout`
/// answers the site's server; ann signs in with her ID token and calls; the grants changed
/// and read again (SIGHUP), she is refused, as is anyone the grants never named.
#[tokio::test]
async fn a_site_s_people_sign_in_through_mesh_callout() {
    use tokio::io::AsyncBufReadExt;
    let dir = tempfile::tempdir().unwrap();
    let provider = crate::operator::idp(dir.path(), "provider");
    let jwks = dir.path().join("jwks.json");
    std::fs::write(&jwks, &provider.jwks).unwrap();
    let grants = dir.path().join("grants.conf");
    let granted = "modules { echo {} }\nroles { r { tools: [echo] } }\npeople { ann { roles: [r] }\n bob { roles: [r] } }\n";
    std::fs::write(&grants, granted).unwrap();
    let out = dir.path().join("out");
    let idp = [
        "--idp",
        crate::operator::ISSUER,
        "--jwks",
        jwks.to_str().unwrap(),
        "--audience",
        crate::operator::AUDIENCE,
    ];
    let written = std::process::Command::new(env!("CARGO_BIN_EXE_mesh"))
        .args(["accounts", "--auth", "operator", "--grants"])
        .arg(&grants)
        .arg("--store-dir")
        .arg(dir.path().join("js"))
        .arg("--out")
        .arg(&out)
        .args(idp)
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&written.stderr);
    assert_eq!(written.status.code(), Some(0), "{said}");
    // The callout runs from a folder of its own: only the keys it signs and seals with,
    // never a key of another account (PEOPLE's own, a module's, the operator's).
    let callout_dir = PathBuf::from(
        said.split("mesh callout --dir ")
            .nth(1)
            .and_then(|rest| rest.split(' ').next())
            .unwrap_or_else(|| panic!("{said}")),
    );
    let its_own: Vec<String> = ["account.AUTH", "signing.PEOPLE.callout", "xkey.callout"]
        .iter()
        .map(|name| {
            std::fs::read_to_string(out.join("keys").join(format!("{name}.nk")))
                .unwrap()
                .trim()
                .to_owned()
        })
        .collect();
    let service = std::fs::read_to_string(out.join("creds").join("AUTH.callout.creds")).unwrap();
    let service_seed = jwt::read_creds(&service).unwrap().1;
    for file in crate::operator::walk(&callout_dir) {
        let text = std::fs::read_to_string(&file).unwrap_or_default();
        for seed in text
            .lines()
            .map(str::trim)
            .filter(|l| l.len() > 50 && l.starts_with('S'))
        {
            assert!(
                its_own.iter().any(|k| k == seed) || seed == service_seed.trim(),
                "{} holds a seed that is not the callout's own",
                file.display()
            );
        }
    }
    let whole = std::process::Command::new(env!("CARGO_BIN_EXE_mesh"))
        .args(["callout", "--dir"])
        .arg(&out)
        .arg("--grants")
        .arg(&grants)
        .args(idp)
        .args(["--server", "nats://127.0.0.1:1"])
        .output()
        .unwrap();
    let refused = String::from_utf8_lossy(&whole.stderr);
    assert_eq!(whole.status.code(), Some(2), "{refused}");
    assert!(refused.contains("every account"), "{refused}");
    let server = NatsServer::start(
        &out.join("nats-server.conf"),
        None,
        &dir.path().join("nats-server.log"),
    )
    .await
    .unwrap_or_else(|e| panic!("{e}"));

    let mut callout = tokio::process::Command::new(env!("CARGO_BIN_EXE_mesh"))
        .args(["callout", "--dir"])
        .arg(&callout_dir)
        .arg("--grants")
        .arg(&grants)
        .args(idp)
        .args(["--server", &server.url()])
        // The site's system user: a reread of the grants signs out whom it changes.
        .arg("--system-creds")
        .arg(out.join("creds").join("SYS.sys.creds"))
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = tokio::io::BufReader::new(callout.stderr.take().unwrap()).lines();
    let mut next_line = async move |what: &str| {
        tokio::time::timeout(HANG, async {
            while let Some(line) = lines.next_line().await.unwrap() {
                if line.contains(what) {
                    return line;
                }
            }
            panic!("mesh callout ended before saying {what:?}");
        })
        .await
        .unwrap_or_else(|_| panic!("mesh callout did not say {what:?}"))
    };
    let line = next_line("answering sign-ins").await;
    assert!(line.contains("2 people"), "{line}");

    let echo = async_nats::ConnectOptions::with_credentials_file(
        out.join("creds").join("MODULE_echo.echo.creds"),
    )
    .await
    .unwrap()
    .custom_inbox_prefix(inbox_prefix("echo"))
    .connect(server.url())
    .await
    .unwrap();
    crate::operator::answering(&echo, "mesh.echo.echo", "heard").await;
    let sentinel = out.join("creds").join("AUTH.sentinel.creds");
    let sign_in = |person: &str| {
        let token = provider.token(person, serde_json::json!({}));
        let sentinel = sentinel.clone();
        let url = server.url();
        let person = person.to_owned();
        async move {
            let options = async_nats::ConnectOptions::with_credentials_file(sentinel)
                .await
                .unwrap()
                .custom_inbox_prefix(inbox_prefix(&person))
                .token(token);
            tokio::time::timeout(HANG, options.connect(url))
                .await
                .expect("the server answers a sign-in")
        }
    };
    let ann = sign_in("ann").await.expect("ann signs in");
    let mut ann_state = ann.connection_states();
    let reply = tokio::time::timeout(HANG, ann.request("mesh.echo.echo", "{}".into()))
        .await
        .expect("echo answers ann")
        .unwrap();
    assert_eq!(reply.payload.as_ref(), b"heard");
    let e = sign_in("carl").await.expect_err("carl is in no grants");
    assert_eq!(
        e.kind(),
        async_nats::ConnectErrorKind::AuthorizationViolation
    );

    // ann leaves the grants; the callout reads them again on SIGHUP.
    std::fs::write(
        &grants,
        "modules { echo {} }\nroles { r { tools: [echo] } }\npeople { bob { roles: [r] } }\n",
    )
    .unwrap();
    let pid = callout.id().unwrap() as i32;
    // SAFETY: a signal to the child this test started.
    unsafe { libc::kill(pid, libc::SIGHUP) };
    let line = next_line("read again").await;
    assert!(line.contains("1 people"), "{line}");
    let line = next_line("signed out").await;
    assert!(line.contains("1 session(s) of ann"), "{line}");
    // ann's open session, signed in under the old grants, is closed.
    tokio::time::timeout(
        HANG,
        ann_state.wait_for(|s| *s != async_nats::connection::State::Connected),
    )
    .await
    .expect("ann's session is closed")
    .unwrap();
    let e = sign_in("ann").await.expect_err("ann left the grants");
    assert_eq!(
        e.kind(),
        async_nats::ConnectErrorKind::AuthorizationViolation
    );
    sign_in("bob").await.expect("bob still signs in");
    callout.start_kill().unwrap();
}
