//! `mesh audit` read from JWTs (issue 49): a site's servers in operator mode audited from
//! the resolver's directory, from a running server (`$SYS.REQ.CLAIMS.PACK`) and from the
//! configuration that names the resolver give the same matrix as the password layout of the
//! same grants; a JWT the operator did not sign grants nothing; an account pushed that the
//! grants would not write is found; the callout's mapping is shown.

use std::path::PathBuf;

use mesh_bus::jwt::{Account, Claims};
use mesh_bus::natsd::NatsServer;
use mesh_bus::operator::{self, Signed, SignedAccount};
use serde_json::Value;

const GRANTS: &str = r#"
    modules {
      catalog {}
      echo  { calls: [files_read] }
      files { calls: [echo], calls_for_people: [echo_whoami] }
      gone  { calls_for_people: [files] }
    }
    roles {
      echoer    { modules: [echo] }
      reader    { tools: [echo, files_read] }
      writer    { modules: [files] }
      admin     { all: true }
    }
    people {
      ann { roles: [echoer] }
      bob { roles: [reader] }
      cat { roles: [admin] }
      dan { }
      eve { roles: [writer] }
    }
"#;

/// The report's parts that say who may call what.
const MATRIX: [&str; 7] = [
    "tools",
    "people",
    "may_call",
    "modules",
    "module_may_call",
    "module_acts_for_people",
    "features",
];

/// The same grants as a password layout (`pw.conf`) and signed for operator mode (`op/`),
/// the latter run by a real nats-server (which fills its resolver directory, `op/jwt`).
struct Site {
    dir: tempfile::TempDir,
    server: NatsServer,
}

impl Site {
    async fn new() -> Site {
        let dir = tempfile::tempdir().unwrap();
        let grants = dir.path().join("grants.conf");
        std::fs::write(&grants, GRANTS).unwrap();
        let out = mesh(&[
            "accounts",
            "--grants",
            grants.to_str().unwrap(),
            "--store-dir",
            dir.path().join("js").to_str().unwrap(),
        ]);
        std::fs::write(dir.path().join("pw.conf"), out).unwrap();
        let op = dir.path().join("op");
        mesh(&[
            "accounts",
            "--auth",
            "operator",
            "--grants",
            grants.to_str().unwrap(),
            "--store-dir",
            op.join("js").to_str().unwrap(),
            "--out",
            op.to_str().unwrap(),
        ]);
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let server = NatsServer::start(
            &op.join("nats-server.conf"),
            Some(port),
            &dir.path().join("nats-server.log"),
        )
        .await
        .unwrap_or_else(|e| panic!("{e}"));
        Site { dir, server }
    }

    fn path(&self, rel: &str) -> PathBuf {
        self.dir.path().join(rel)
    }

    fn arg(&self, rel: &str) -> String {
        self.path(rel).display().to_string()
    }
}

/// Runs `mesh args…`, which must succeed; its stdout.
fn mesh(args: &[&str]) -> String {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_mesh"))
        .args(args)
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "mesh {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// `mesh audit args… --offline --json`, read.
fn audit(args: &[&str]) -> Value {
    let mut all = vec!["audit", "--offline", "--json"];
    all.extend_from_slice(args);
    serde_json::from_str(&mesh(&all)).unwrap()
}

fn kinds(report: &Value) -> Vec<String> {
    report["findings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["kind"].as_str().unwrap().to_owned())
        .collect()
}

/// Each account's verdict against the grants.
fn drift(report: &Value) -> Vec<(String, String, Vec<String>)> {
    report["jwts"]["drift"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| {
            (
                d["account"].as_str().unwrap().to_owned(),
                d["verdict"].as_str().unwrap().to_owned(),
                d["what"]
                    .as_array()
                    .map(|w| w.iter().map(|x| x.as_str().unwrap().to_owned()).collect())
                    .unwrap_or_default(),
            )
        })
        .collect()
}

#[tokio::test]
async fn the_matrix_read_from_jwts_is_the_password_layout_s() {
    let site = Site::new().await;
    let grants = site.arg("grants.conf");
    let password = audit(&["--config", &site.arg("pw.conf")]);
    assert!(password.get("jwts").is_none());
    assert_eq!(password["people"].as_array().unwrap().len(), 5);
    let url = site.server.url();
    let ways: [(&str, Vec<String>); 3] = [
        (
            "the resolver's directory",
            vec![
                "--resolver".into(),
                site.arg("op/jwt"),
                "--operator".into(),
                site.arg("op/operator.jwt"),
                "--users".into(),
                site.arg("op/creds"),
            ],
        ),
        (
            "a running server",
            vec![
                "--resolver-url".into(),
                url.clone(),
                "--config".into(),
                site.arg("op/nats-server.conf"),
            ],
        ),
        (
            "the configuration's resolver",
            vec!["--config".into(), site.arg("op/nats-server.conf")],
        ),
    ];
    for (way, args) in ways {
        let mut args: Vec<&str> = args.iter().map(String::as_str).collect();
        args.extend(["--grants", &grants]);
        let jwt = audit(&args);
        for part in MATRIX {
            assert_eq!(jwt[part], password[part], "{way}: {part} differs");
        }
        assert_eq!(kinds(&jwt), kinds(&password), "{way}: the findings differ");
        // Every account is what the grants write; the system account is the operator's.
        for (account, verdict, _) in drift(&jwt) {
            let want = if account == "SYS" {
                "not_from_grants"
            } else {
                "equal"
            };
            assert_eq!(verdict, want, "{way}: {account}");
        }
        assert!(
            jwt["jwts"]["refused"].as_array().unwrap().is_empty(),
            "{way}: {}",
            jwt["jwts"]["refused"]
        );
    }
}

/// An attacker who can write into the resolver's directory: an account JWT changed after
/// signing, and one re-signed by an operator of their own granting more, are each said and
/// counted as granting nothing.
#[tokio::test]
async fn a_jwt_the_operator_did_not_sign_grants_nothing() {
    let site = Site::new().await;
    let copy = site.path("copy");
    std::fs::create_dir(&copy).unwrap();
    let names: std::collections::BTreeMap<String, String> =
        serde_json::from_str(&std::fs::read_to_string(site.path("op/accounts.json")).unwrap())
            .unwrap();
    let key_of = |name: &str| {
        names
            .iter()
            .find(|(_, n)| n.as_str() == name)
            .map(|(k, _)| k.clone())
            .unwrap()
    };
    for entry in std::fs::read_dir(site.path("op/jwt")).unwrap().flatten() {
        std::fs::copy(entry.path(), copy.join(entry.file_name())).unwrap();
    }
    let file = |name: &str| copy.join(format!("{}.jwt", key_of(name)));
    // echo's account with an export more, its signature kept.
    let token = std::fs::read_to_string(file("MODULE_echo")).unwrap();
    let mut claims: Claims<Account> = Claims::verify(&token).unwrap();
    let mut wider = claims.nats.exports[0].clone();
    wider.subject = "mesh.>".into();
    claims.nats.exports.push(wider);
    let parts: Vec<&str> = token.split('.').collect();
    use base64::Engine as _;
    let body = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .encode(serde_json::to_vec(&claims).unwrap());
    std::fs::write(
        file("MODULE_echo"),
        format!("{}.{body}.{}", parts[0], parts[2]),
    )
    .unwrap();
    // PEOPLE, as it is, signed by another operator.
    let people: Claims<Account> =
        Claims::verify(&std::fs::read_to_string(file("PEOPLE")).unwrap()).unwrap();
    let forged = Claims::new(people.sub.clone(), "PEOPLE", people.nats)
        .sign(&nkeys::KeyPair::new_operator())
        .unwrap();
    std::fs::write(file("PEOPLE"), forged).unwrap();

    let report = audit(&[
        "--resolver",
        copy.to_str().unwrap(),
        "--operator",
        &site.arg("op/operator.jwt"),
        "--users",
        &site.arg("op/creds"),
    ]);
    let findings = report["findings"].as_array().unwrap();
    let untrusted: Vec<&str> = findings
        .iter()
        .filter(|f| f["kind"] == "untrusted_jwt")
        .map(|f| f["message"].as_str().unwrap())
        .collect();
    assert!(
        untrusted
            .iter()
            .any(|m| m.contains("(PEOPLE)") && m.contains("not by operator")),
        "{untrusted:#?}"
    );
    assert!(
        untrusted
            .iter()
            .any(|m| m.contains(&key_of("MODULE_echo"))
                && m.contains("signature is not its issuer's")),
        "{untrusted:#?}"
    );
    // PEOPLE's users were issued by an account that no longer counts: nobody is a person,
    // and nobody may call echo's tools (its account does not count either).
    assert!(
        report["people"].as_array().unwrap().is_empty(),
        "{}",
        report["people"]
    );
    let modules: Vec<&str> = report["modules"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m.as_str().unwrap())
        .collect();
    assert!(!modules.contains(&"echo@MODULE_echo"), "{modules:?}");
    let tools = report["tools"].as_array().unwrap();
    for (m, row) in report["module_may_call"]
        .as_array()
        .unwrap()
        .iter()
        .enumerate()
    {
        for (t, may) in row.as_array().unwrap().iter().enumerate() {
            if tools[t].as_str().unwrap().starts_with("echo") {
                assert_eq!(may, false, "{} calls {}", modules[m], tools[t]);
            }
        }
    }
    let accounts: Vec<&str> = report["jwts"]["accounts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["name"].as_str().unwrap())
        .collect();
    assert!(
        !accounts.contains(&"PEOPLE") && !accounts.contains(&"MODULE_echo"),
        "{accounts:?}"
    );
}

/// An account pushed that the grants would not write (an export dropped, a limit set) is
/// found on the live server, and so is an account the grants write that the server lacks.
#[tokio::test]
async fn the_live_check_finds_a_drifted_account() {
    let site = Site::new().await;
    let names: std::collections::BTreeMap<String, String> =
        serde_json::from_str(&std::fs::read_to_string(site.path("op/accounts.json")).unwrap())
            .unwrap();
    let (key, _) = names.iter().find(|(_, n)| *n == "MODULE_echo").unwrap();
    let token = std::fs::read_to_string(site.path("op/jwt").join(format!("{key}.jwt"))).unwrap();
    let mut claims: Claims<Account> = Claims::verify(&token).unwrap();
    claims.nats.exports.pop();
    claims.nats.limits.conn = 5;
    let seed = std::fs::read_to_string(site.path("op/keys/operator.nk")).unwrap();
    let operator_key = nkeys::KeyPair::from_seed(seed.trim()).unwrap();
    // Issued a second later, so the resolver takes it as newer.
    let changed = Claims::new(claims.sub.clone(), claims.name.clone(), claims.nats)
        .sign_at(&operator_key, claims.iat + 1)
        .unwrap();
    // And files lists a key the grants never made, which signs users whatever it likes.
    let (files_key, _) = names.iter().find(|(_, n)| *n == "MODULE_files").unwrap();
    let token =
        std::fs::read_to_string(site.path("op/jwt").join(format!("{files_key}.jwt"))).unwrap();
    let mut files: Claims<Account> = Claims::verify(&token).unwrap();
    files
        .nats
        .signing_keys
        .push(mesh_bus::jwt::SigningKey::Bare(
            nkeys::KeyPair::new_account().public_key(),
        ));
    let files_changed = Claims::new(files.sub.clone(), files.name.clone(), files.nats)
        .sign_at(&operator_key, files.iat + 1)
        .unwrap();
    let sys =
        async_nats::ConnectOptions::with_credentials_file(site.path("op/creds/SYS.sys.creds"))
            .await
            .unwrap()
            .connect(site.server.url())
            .await
            .unwrap();
    let pushed = operator::push(
        &sys,
        &Signed {
            operator: String::new(),
            system_account: String::new(),
            accounts: vec![
                SignedAccount {
                    name: "MODULE_echo".into(),
                    key: key.clone(),
                    jwt: changed,
                },
                SignedAccount {
                    name: "MODULE_files".into(),
                    key: files_key.clone(),
                    jwt: files_changed,
                },
            ],
            users: Vec::new(),
            removed: Vec::new(),
        },
    )
    .await;
    for p in &pushed {
        assert!(p.outcome.is_ok(), "{}: {:?}", p.name, p.outcome);
    }

    // The grants with a module more, which nobody pushed.
    let more = site.path("more.conf");
    std::fs::write(
        &more,
        GRANTS.replace("gone  {", "weather {}\n      gone  {"),
    )
    .unwrap();
    let url = site.server.url();
    let report = audit(&[
        "--resolver-url",
        &url,
        "--config",
        &site.arg("op/nats-server.conf"),
        "--grants",
        more.to_str().unwrap(),
    ]);
    let verdicts = drift(&report);
    let of = |name: &str| {
        verdicts
            .iter()
            .find(|(a, _, _)| a == name)
            .map(|(_, v, w)| (v.as_str(), w.clone()))
            .unwrap_or_else(|| panic!("no verdict on {name}: {verdicts:?}"))
    };
    assert_eq!(
        of("MODULE_echo"),
        ("differs", vec!["exports".to_owned(), "limits".to_owned()])
    );
    assert_eq!(of("MODULE_weather").0, "missing");
    // The module more is imported by the call log's account and by PEOPLE (cat has all):
    // they too are not what these grants would write — and cat, who may call it, is not
    // either (her scope's template names its tools).
    assert_eq!(of("MESH"), ("differs", vec!["imports".to_owned()]));
    assert_eq!(
        of("PEOPLE"),
        ("differs", vec!["imports".to_owned(), "users".to_owned()])
    );
    assert_eq!(of("MODULE_files"), ("differs", vec!["users".to_owned()]));
    for equal in ["MODULE_catalog", "MODULE_gone"] {
        assert_eq!(of(equal).0, "equal", "{equal}: {verdicts:?}");
    }
    let drifted: Vec<&str> = report["findings"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["kind"] == "account_drift")
        .map(|f| f["subject"].as_str().unwrap())
        .collect();
    assert_eq!(
        drifted,
        [
            "MESH",
            "MODULE_echo",
            "MODULE_files",
            "MODULE_weather",
            "PEOPLE"
        ]
    );
    // The table says it too.
    let text = mesh(&[
        "audit",
        "--offline",
        "--resolver-url",
        &url,
        "--config",
        &site.arg("op/nats-server.conf"),
        "--grants",
        more.to_str().unwrap(),
    ]);
    assert!(
        text.contains("MODULE_echo: differs (exports, limits)"),
        "{text}"
    );
}

/// With people from an identity provider, the audit shows the callout: who answers it, where
/// it places people, which provider, audience and claim name them, and whom it signs in.
#[test]
fn the_callout_s_mapping_is_shown() {
    let dir = tempfile::tempdir().unwrap();
    let grants_path = dir.path().join("grants.conf");
    std::fs::write(&grants_path, GRANTS).unwrap();
    let grants = mesh_bus::grants::Grants::read_file(&grants_path).unwrap();
    let jwks =
        r#"{"keys": [{"kty": "RSA", "kid": "k1", "alg": "RS256", "n": "AQAB", "e": "AQAB"}]}"#;
    let provider = mesh_bus::callout::Provider::new(
        "https://idp.example.org",
        "mesh",
        Some("email".into()),
        jwks,
    )
    .unwrap();
    let logins = mesh_bus::statedir::Logins::new(dir.path(), &grants, true)
        .unwrap()
        .with_idp(provider);
    let signed = logins.sign(&grants).unwrap().unwrap();
    let resolver = dir.path().join("resolver");
    std::fs::create_dir(&resolver).unwrap();
    for a in &signed.accounts {
        std::fs::write(resolver.join(format!("{}.jwt", a.key)), &a.jwt).unwrap();
    }
    let operator_jwt = dir.path().join("operator.jwt");
    std::fs::write(&operator_jwt, &signed.operator).unwrap();
    let users = dir.path().join("operator").join("creds");
    let report = audit(&[
        "--resolver",
        resolver.to_str().unwrap(),
        "--operator",
        operator_jwt.to_str().unwrap(),
        "--users",
        users.to_str().unwrap(),
        "--grants",
        grants_path.to_str().unwrap(),
    ]);
    let callouts = report["jwts"]["callouts"].as_array().unwrap();
    assert_eq!(callouts.len(), 1, "{callouts:?}");
    let c = &callouts[0];
    assert_eq!(c["account"], "AUTH");
    assert_eq!(c["answered_by"], serde_json::json!(["callout"]));
    assert_eq!(c["places_in"], serde_json::json!(["PEOPLE"]));
    assert_eq!(c["sealed"], true);
    assert_eq!(
        c["mapping"],
        serde_json::json!({"issuer": "https://idp.example.org", "audience": "mesh", "claim": "email"})
    );
    assert_eq!(
        c["people"][0],
        serde_json::json!({"person": "ann", "roles": ["echoer"]})
    );
    // The callout's account is the operator's, not the grants': no drift, no person.
    let verdicts = drift(&report);
    assert!(
        verdicts
            .iter()
            .any(|(a, v, _)| a == "AUTH" && v == "not_from_grants"),
        "{verdicts:?}"
    );
    assert!(
        verdicts
            .iter()
            .all(|(_, v, _)| v == "equal" || v == "not_from_grants"),
        "{verdicts:?}"
    );
    let people: Vec<&str> = report["people"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p.as_str().unwrap())
        .collect();
    assert_eq!(
        people,
        [
            "ann@PEOPLE",
            "bob@PEOPLE",
            "cat@PEOPLE",
            "dan@PEOPLE",
            "eve@PEOPLE"
        ]
    );
    let text = mesh(&[
        "audit",
        "--offline",
        "--resolver",
        resolver.to_str().unwrap(),
        "--operator",
        operator_jwt.to_str().unwrap(),
        "--users",
        users.to_str().unwrap(),
        "--grants",
        grants_path.to_str().unwrap(),
    ]);
    assert!(
        text.contains("ID tokens of https://idp.example.org for audience mesh: the claim email names the person"),
        "{text}"
    );
}
