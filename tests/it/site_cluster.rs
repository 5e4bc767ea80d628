//! docs/deploy.md's site walkthrough, run as written (issue 49): a site's operator kept by
//! nsc (its own key offline, a signing key at hand), three servers in operator mode over TLS
//! from one `mesh accounts --nsc … --cluster … --idp …`, a module run with its credential file
//! on one server, the callout as a service of its own on another, a person signing in with
//! their ID token at the third — then a module added and pushed, reaching every server
//! without a reload.

use std::path::Path;
use std::time::{Duration, Instant};

use tokio::io::AsyncBufReadExt;

use crate::cluster_tls::Certs;
use crate::site::nsc;

/// A hang guard, not a measure.
const HANG: Duration = Duration::from_secs(60);

/// `mesh` with `args`, its exit code, stdout and stderr.
async fn mesh(home: &Path, args: &[&str]) -> (i32, String, String) {
    crate::cli::mesh(home, args).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_site_s_three_servers_in_operator_mode_with_nsc_tls_and_its_people() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let nsc = nsc(root, false);
    let certs = Certs::make(&root.join("certs"));
    let provider = crate::operator::idp(root, "provider");
    let jwks = root.join("jwks.json");
    std::fs::write(&jwks, &provider.jwks).unwrap();
    let grants = root.join("grants.conf");
    std::fs::write(
        &grants,
        "modules { echo {} }\nroles { r { tools: [echo, echo_whoami] } }\npeople { ann { roles: [r] } }\n",
    )
    .unwrap();
    let routes: Vec<String> = mesh_bus::cluster::free_ports(3)
        .unwrap()
        .iter()
        .map(|p| format!("127.0.0.1:{p}"))
        .collect();
    let site = root.join("site");
    let out = root.join("out");
    let idp = [
        "--idp",
        crate::operator::ISSUER,
        "--jwks",
        jwks.to_str().unwrap(),
        "--audience",
        crate::operator::AUDIENCE,
    ];
    let accounts = |extra: Vec<String>| {
        let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_mesh"));
        command
            .args(["accounts", "--auth", "operator", "--grants"])
            .arg(&grants)
            .arg("--nsc")
            .arg(&nsc.store)
            .arg("--nsc-keys")
            .arg(&nsc.keys)
            .args(["--cluster", &routes.join(",")])
            .args(["--listen", "0.0.0.0:4222"])
            .arg("--store-dir")
            .arg(site.join("js"))
            .arg("--tls-cert")
            .arg(&certs.cert)
            .arg("--tls-key")
            .arg(&certs.key)
            .arg("--tls-ca")
            .arg(&certs.ca)
            .args(idp)
            .arg("--out")
            .arg(&out)
            .args(extra)
            .env_remove("NKEYS_PATH");
        command.output().unwrap()
    };
    let written = accounts(Vec::new());
    assert_eq!(
        written.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&written.stderr)
    );

    // Each host: its configuration, its own JetStream store and resolver directory.
    let mut servers = Vec::new();
    for i in 0..3 {
        let path = out.join(format!("nats-server-{i}.conf"));
        let text = std::fs::read_to_string(&path).unwrap();
        // No person's or module's password: the one password is the routes' shared secret.
        for line in text.lines().filter(|l| l.contains("password")) {
            assert!(line.contains("user: \"route\""), "{line}");
        }
        let own = text
            .replace(
                &site.join("js").display().to_string(),
                &root.join(format!("js{i}")).display().to_string(),
            )
            .replace(
                &site.join("jwt").display().to_string(),
                &root.join(format!("jwt{i}")).display().to_string(),
            );
        std::fs::write(&path, own).unwrap();
        let port = mesh_bus::cluster::free_ports(1).unwrap()[0];
        servers.push(
            mesh_bus::natsd::NatsServer::start(&path, Some(port), &root.join(format!("n{i}.log")))
                .await
                .unwrap_or_else(|e| panic!("server {i}: {e}")),
        );
    }
    let url = |i: usize| servers[i].url().replace("nats://", "tls://");
    let ca = certs.ca.to_str().unwrap();
    let home = tempfile::tempdir().unwrap();

    // The module, as its unit runs it: its credential file, the accounts' names, server 0.
    let accounts_json = out.join("accounts.json");
    let module = |name: &str, at: usize| {
        crate::cli::command(home.path())
            .args(["run", name, "--layout", "accounts", "--server", &url(at)])
            .args(["--tlsca", ca])
            .arg("--creds")
            .arg(
                out.join("creds")
                    .join(format!("MODULE_{name}.{name}.creds")),
            )
            .env("MESH_ACCOUNTS", &accounts_json)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap()
    };
    let _echo = module("echo", 0);

    // The callout, as its unit runs it, on server 1.
    let mut callout = crate::cli::command(home.path())
        .args(["callout", "--dir"])
        .arg(out.join("callout"))
        .arg("--grants")
        .arg(&grants)
        .args(idp)
        .args(["--server", &url(1), "--tlsca", ca])
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = tokio::io::BufReader::new(callout.stderr.take().unwrap()).lines();
    tokio::time::timeout(HANG, async {
        while let Some(line) = lines.next_line().await.unwrap() {
            if line.contains("answering sign-ins") {
                return;
            }
        }
        panic!("mesh callout ended before answering");
    })
    .await
    .expect("mesh callout answers");

    // ann at a terminal, at server 2, with her ID token.
    let token = root.join("ann.jwt");
    std::fs::write(&token, provider.token("ann", serde_json::json!({}))).unwrap();
    let sentinel = out.join("creds").join("AUTH.sentinel.creds");
    let as_ann = |tool: &str| {
        vec![
            "--server".to_owned(),
            url(2),
            "--tlsca".to_owned(),
            ca.to_owned(),
            "--creds".to_owned(),
            sentinel.display().to_string(),
            "--id-token".to_owned(),
            token.display().to_string(),
            "call".to_owned(),
            tool.to_owned(),
        ]
    };
    let started = Instant::now();
    let said = loop {
        let args = as_ann("echo_whoami");
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let (code, said, err) = mesh(home.path(), &args).await;
        if code == 0 {
            break said;
        }
        // The module may still be coming up on server 0: nobody serves, for a moment.
        assert!(
            code == 3 && started.elapsed() < HANG,
            "ann's call: {code} {err}\nthe servers' last words:\n{}",
            (0..3)
                .map(|i| {
                    let log =
                        std::fs::read_to_string(root.join(format!("n{i}.log"))).unwrap_or_default();
                    let tail: Vec<&str> = log.lines().rev().take(15).collect();
                    let tail: Vec<&str> = tail.into_iter().rev().collect();
                    format!("server {i}:\n{}", tail.join("\n"))
                })
                .collect::<Vec<_>>()
                .join("\n")
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert!(said.contains("ann@PEOPLE"), "{said}");

    // A module added (avu): pushed to server 0, its credential file connects at server 2.
    std::fs::write(
        &grants,
        "modules { echo {}\n avu {} }\nroles { r { tools: [echo, echo_whoami, avu_list] } }\npeople { ann { roles: [r] } }\n",
    )
    .unwrap();
    let pushed = accounts(vec![
        "--push".to_owned(),
        servers[0].url().replace("nats://", "tls://"),
    ]);
    let said = String::from_utf8_lossy(&pushed.stderr);
    assert_eq!(pushed.status.code(), Some(0), "{said}");
    assert!(said.contains("MODULE_avu"), "{said}");
    let _avu = module("avu", 2);
    // ann's grant widened: the callout reads the grants again (its unit's reload, SIGHUP).
    // SAFETY: a signal to the child this test started.
    unsafe { libc::kill(callout.id().unwrap() as i32, libc::SIGHUP) };
    tokio::time::timeout(HANG, async {
        while let Some(line) = lines.next_line().await.unwrap() {
            if line.contains("read again") {
                return;
            }
        }
        panic!("mesh callout ended before reading the grants again");
    })
    .await
    .expect("mesh callout reads the grants again");
    let started = Instant::now();
    loop {
        let args = as_ann("avu_list");
        let mut args: Vec<&str> = args.iter().map(String::as_str).collect();
        args.push("path=/site/a");
        let (code, said, err) = mesh(home.path(), &args).await;
        if code == 0 {
            assert!(said.contains("/site/a"), "{said}");
            break;
        }
        assert!(
            code == 3 && started.elapsed() < HANG,
            "ann's call of avu: {code} {err}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    // The auditor reads what server 0 keeps (its resolver directory, the pushed accounts): every account trusted (the mesh's
    // signed by the site's signing key, the site's own as nsc wrote them), none drifted from
    // the grants, the callout shown with whom it signs in.
    let (code, said, err) = mesh(
        home.path(),
        &[
            "audit",
            "--resolver",
            root.join("jwt0").to_str().unwrap(),
            "--operator",
            out.join("operator.jwt").to_str().unwrap(),
            "--users",
            out.join("creds").to_str().unwrap(),
            "--grants",
            grants.to_str().unwrap(),
            "--offline",
            "--json",
        ],
    )
    .await;
    let report: serde_json::Value = serde_json::from_str(&said)
        .unwrap_or_else(|e| panic!("the audit's json ({code}): {e}: {said}{err}"));
    assert_eq!(report["findings"], serde_json::json!([]), "{report}");
    let drift = &report["jwts"]["drift"];
    let verdict = |account: &str| {
        drift
            .as_array()
            .unwrap_or_else(|| panic!("no drift in {report}"))
            .iter()
            .find(|d| d["account"] == account)
            .map(|d| d["verdict"].as_str().unwrap_or_default().to_owned())
            .unwrap_or_else(|| panic!("{account} not in {drift}"))
    };
    for account in ["MESH", "MODULE_echo", "MODULE_avu", "PEOPLE"] {
        assert_eq!(verdict(account), "equal", "{account}: {drift}");
    }
    for account in ["SYS", "AUTH"] {
        assert_eq!(verdict(account), "not_from_grants", "{account}: {drift}");
    }
    assert_eq!(report["jwts"]["operator"]["name"], "ACME", "{report}");
    assert!(
        report.to_string().contains(crate::operator::ISSUER),
        "{report}"
    );
    callout.start_kill().unwrap();
}
