//! An attacker's review of decide on PostgreSQL and of TLS for a cluster: a password in every
//! form a URL may hold it, SQL marks in quotes and comments, TLS files missing or wrong, a
//! client certificate against a plaintext server, the database reached over TLS and checked,
//! two picks on one group raced through two instances, a stranger at another person's run.
//! Where the review found the promise broken, the test says what was wrong ("found in
//! review") and now holds it.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use mesh_core::client::Client;
use mesh_core::subjects::{FullName, ToolResult};
use mesh_decide::lake::LakeAt;
use mesh_decide::store::sidecar::{Sidecar, without_password};

use crate::bus::{self, Bus, GENEROUS, Running};
use crate::cluster_tls::Certs;
use crate::pg::Postgres;

const CARD: &str = include_str!("../cards/example.md");

async fn call(client: &Client, tool: &str, args: &Value) -> ToolResult {
    client
        .call(&FullName::parse(tool).unwrap(), args, GENEROUS)
        .await
        .unwrap()
}

// ---------------------------------------------------------------------------------------
// Secrets in names: decide_health shows `sidecar.path`, errors show the lake's name.

/// A PostgreSQL URL may carry its password in the query (`?password=`, which both libpq and
/// the postgres crate take), and keyword form allows blanks around `=` and quoted values with
/// blanks. Each is a real configuration (the postgres crate reads the same password out of
/// it); the name decide shows of it must not hold the password.
/// Found in review: `without_password` knows only `user:pw@` and `password=x`.
#[test]
fn a_database_password_never_shows_in_its_name() {
    let urls = [
        "postgresql://decide@db.example.org:5432/decide?password=hunter2",
        "postgresql://db.example.org/decide?user=decide&password=hunter2",
        "host=db.example.org password = hunter2 user=decide dbname=decide",
        "host=db.example.org password='hunter2 hunter2' user=decide dbname=decide",
    ];
    let mut leaked = Vec::new();
    for url in urls {
        let config: postgres::Config = url.parse().unwrap();
        assert!(
            config
                .get_password()
                .is_some_and(|p| p.starts_with(b"hunter2")),
            "{url} names its password"
        );
        let shown = without_password(url);
        let lake = LakeAt::Shared {
            database: url.to_owned(),
            data: PathBuf::from("/srv/lake"),
            authority: None,
        }
        .name();
        for s in [shown, lake] {
            if s.contains("hunter2") {
                leaked.push(s);
            }
        }
    }
    assert!(leaked.is_empty(), "the password is shown: {leaked:#?}");
}

/// `dollars` rewrites `?` outside single quotes only. A `?` in a double-quoted identifier
/// becomes a parameter, an apostrophe in a `--` comment or in an `E'\''` string flips its
/// idea of what is quoted (every later mark is left as `?`, a syntax error on PostgreSQL), and
/// a bare `?` after `?2` is `?3` to SQLite but `$1` here. No SQL decide sends today has any of
/// these (every statement is a constant; checked by reading them all), so this is latent: the
/// next statement with a comment like "-- the run's links" breaks on PostgreSQL only.
/// Found in review (latent).
#[test]
fn dollars_leaves_identifiers_comments_and_escapes_alone() {
    use mesh_decide::store::dollars;
    let cases = [
        (
            "SELECT count(*) AS \"how many?\" FROM runs WHERE id = ?1",
            "SELECT count(*) AS \"how many?\" FROM runs WHERE id = $1",
        ),
        (
            "SELECT id FROM runs -- the run's id\n WHERE id = ?1",
            "SELECT id FROM runs -- the run's id\n WHERE id = $1",
        ),
        (
            "SELECT E'it\\'s' WHERE a = ?1",
            "SELECT E'it\\'s' WHERE a = $1",
        ),
        ("SELECT ?2, ?", "SELECT $2, $3"),
    ];
    let wrong: Vec<(String, String)> = cases
        .iter()
        .filter(|(sql, want)| dollars(sql) != *want)
        .map(|(sql, _)| (sql.to_string(), dollars(sql)))
        .collect();
    assert!(wrong.is_empty(), "rewritten wrongly: {wrong:#?}");
}

// ---------------------------------------------------------------------------------------
// TLS for the bus.

/// An authority and a certificate it signed for 127.0.0.1 (server and client use).
fn certs(dir: &Path) -> Certs {
    Certs::make(dir)
}

/// A nats-server with no users on loopback: over TLS with `certs`, or plaintext.
async fn nats(dir: &Path, tls: Option<&Certs>) -> mesh_bus::natsd::NatsServer {
    let tls = tls
        .map(|c| {
            mesh_bus::layout::tls_block(
                &mesh_bus::layout::Tls {
                    cert: c.cert.clone(),
                    key: c.key.clone(),
                    ca: c.ca.clone(),
                },
                false,
            )
        })
        .unwrap_or_default();
    let name = if tls.is_empty() { "plain" } else { "tls" };
    let conf = dir.join(format!("{name}.conf"));
    std::fs::write(&conf, format!("listen: \"127.0.0.1:-1\"\n{tls}")).unwrap();
    mesh_bus::natsd::NatsServer::start(&conf, None, &dir.join(format!("{name}.log")))
        .await
        .unwrap()
}

/// `mesh accounts` given only part of the TLS files refuses, rather than writing a
/// configuration without TLS that the operator believes has it. HELD (clap's requires_all).
#[tokio::test]
async fn half_a_tls_configuration_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let grants = dir.path().join("grants.conf");
    std::fs::write(
        &grants,
        "modules { echo {} }\nroles { r { tools: [echo] } }\npeople { ann { roles: [r], password: \"pw-ann\" } }\n",
    )
    .unwrap();
    for partial in [
        &["--tls-cert", "/etc/mesh/server.pem"][..],
        &[
            "--tls-cert",
            "/etc/mesh/server.pem",
            "--tls-key",
            "/etc/mesh/server.key",
        ][..],
        &["--tls-ca", "/etc/mesh/ca.pem"][..],
    ] {
        let (code, out, err) = crate::cli::mesh(
            dir.path(),
            &[
                &["accounts", "--grants", grants.to_str().unwrap()][..],
                partial,
            ]
            .concat(),
        )
        .await;
        assert_ne!(code, 0, "{partial:?} was taken: {out}");
        assert!(
            !out.contains("listen"),
            "{partial:?} wrote a configuration: {out}"
        );
        assert!(!err.is_empty());
    }
}

/// `--tlsca` naming a file that is not there, or one with no certificate in it, is a mistake
/// in the person's configuration: the error must name the file. Found in review:
/// a missing file says "No such file or directory (os error 2); is a nats-server running
/// there?" without the file, and an empty or non-certificate file says "invalid peer
/// certificate: UnknownIssuer", blaming the server.
#[tokio::test]
async fn a_bad_tlsca_file_is_named_in_the_error() {
    let dir = tempfile::tempdir().unwrap();
    let c = certs(&dir.path().join("certs"));
    let server = nats(dir.path(), Some(&c)).await;
    let url = server.url();
    // Sanity: the right authority connects (nobody serves the catalogue here: exit 3).
    let (code, _, err) = crate::cli::mesh(
        dir.path(),
        &["--server", &url, "--tlsca", c.ca.to_str().unwrap(), "tools"],
    )
    .await;
    assert!(!err.contains("cannot connect"), "{code}: {err}");

    let missing = dir.path().join("no-such-ca.pem");
    let empty = dir.path().join("empty-ca.pem");
    std::fs::write(&empty, "").unwrap();
    let mut unclear = Vec::new();
    for bad in [&missing, &empty, &c.key] {
        let (code, _, err) = crate::cli::mesh(
            dir.path(),
            &["--server", &url, "--tlsca", bad.to_str().unwrap(), "tools"],
        )
        .await;
        assert_ne!(code, 0, "{}: {err}", bad.display());
        if !err.contains(bad.to_str().unwrap()) {
            unclear.push(format!("--tlsca {}: {}", bad.display(), err.trim()));
        }
    }
    assert!(
        unclear.is_empty(),
        "the error does not name the file:\n{}",
        unclear.join("\n")
    );
}

/// A module (which keeps trying to connect while the bus comes up) given a `--tlsca` that is
/// not there must stop and say so. Found in review: `mesh run echo --tlsca
/// /missing.pem` runs on silently for ever (nothing on stderr, even with RUST_LOG=debug).
#[tokio::test]
async fn a_module_with_a_missing_tlsca_says_so_and_stops() {
    let dir = tempfile::tempdir().unwrap();
    let c = certs(&dir.path().join("certs"));
    let server = nats(dir.path(), Some(&c)).await;
    let missing = dir.path().join("no-such-ca.pem");
    let mut module = crate::cli::command(dir.path())
        .args(["run", "echo", "--server", &server.url()])
        .args(["--tlsca", missing.to_str().unwrap()])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let ended = tokio::time::timeout(GENEROUS, module.wait()).await;
    if ended.is_err() {
        module.start_kill().unwrap();
    }
    let out = module.wait_with_output().await.unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        ended.is_ok(),
        "still running with a --tlsca that is not there; it said: {err:?}"
    );
    assert!(!out.status.success());
    assert!(err.contains(missing.to_str().unwrap()), "{err}");
}

/// A person who gives a client certificate (`--tlscert/--tlskey`, or a context's cert/key)
/// but no authority means TLS; a server that answers in plaintext (a stray or a hostile one
/// on the way) must not get the password. Found in review: only `--tlsca` sets
/// require_tls, so this connects in plaintext and logs in; and `--tlscert` without
/// `--tlskey` is dropped without a word.
#[tokio::test]
async fn a_client_certificate_means_tls_or_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let c = certs(&dir.path().join("certs"));
    let plain = nats(dir.path(), None).await;
    let (code, _, err) = crate::cli::mesh(
        dir.path(),
        &[
            "--server",
            &plain.url(),
            "--user",
            "ann",
            "--password",
            "pw-ann",
            "--tlscert",
            c.cert.to_str().unwrap(),
            "--tlskey",
            c.key.to_str().unwrap(),
            "tools",
        ],
    )
    .await;
    assert!(
        err.contains("cannot connect") && code != 0,
        "logged in to a plaintext server with a client certificate given (exit {code}): {err}"
    );
    let (code, _, err) = crate::cli::mesh(
        dir.path(),
        &[
            "--server",
            &plain.url(),
            "--tlscert",
            c.cert.to_str().unwrap(),
            "tools",
        ],
    )
    .await;
    assert!(
        code != 0 && err.contains("--tlskey"),
        "--tlscert without --tlskey was ignored (exit {code}): {err}"
    );
}

// ---------------------------------------------------------------------------------------
// decide on a shared PostgreSQL.

/// A decide instance in `dir` (made with the fixtures and `config`) on `bus`.
async fn decide_on(bus: &Bus, dir: &Path, config: Value) -> Running {
    if !dir.exists() {
        std::fs::create_dir_all(dir).unwrap();
        crate::avu::import_fixtures(&dir.join("ontology.sqlite"));
    }
    std::fs::write(dir.join("config.json"), config.to_string()).unwrap();
    let config = mesh_decide::tools::Config::in_dir(dir);
    let module = tokio::task::spawn_blocking(move || mesh_decide::tools::module(config))
        .await
        .unwrap()
        .unwrap();
    bus.serve(module).await
}

fn decide_bus_modules() -> Vec<mesh_bus::layout::ModuleUser> {
    vec![
        bus::module("catalog"),
        bus::acting_for_people("decide", &["avu"]),
    ]
}

/// decide_health, which any person may call, shows the sidecar's name: with the password in
/// the URL's query (a form libpq documents), every person reads the database password.
/// Found in review.
#[tokio::test]
async fn decide_health_does_not_show_a_password_in_the_url_query() {
    let pg = Postgres::start().await;
    let bus = Bus::accounts_with(&decide_bus_modules(), &[("ann", &["mesh.>"])]).await;
    let dirs = tempfile::tempdir().unwrap();
    // The test server trusts loopback, so the password is taken and not needed: what it
    // would be on a real server.
    let url = format!("{}?password=hunter2-secret", pg.url);
    let _one = decide_on(
        &bus,
        &dirs.path().join("one"),
        json!({"database": url, "lake_data": dirs.path().join("lake")}),
    )
    .await;
    let ann = bus.client_as(Some("ann")).await;
    let r = call(&ann, "decide_health", &json!({})).await;
    assert!(!r.is_error, "{}", r.text_content());
    let shown = format!(
        "{} {}",
        r.text_content(),
        r.structured_content.unwrap_or_default()
    );
    assert!(
        !shown.contains("hunter2-secret"),
        "a person reads the database password: {shown}"
    );
}

/// The postgres uid and gid when we are root (PostgreSQL runs as that user then).
fn postgres_user() -> Option<(u32, u32)> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return None;
    }
    let name = std::ffi::CString::new("postgres").unwrap();
    // SAFETY: getpwnam reads a static record, copied out at once.
    let pw = unsafe { libc::getpwnam(name.as_ptr()) };
    assert!(!pw.is_null());
    // SAFETY: non-null.
    Some(unsafe { ((*pw).pw_uid, (*pw).pw_gid) })
}

/// deploy.md puts the database on another host; the link carries every card, run and, on
/// every start, the sealing key (table state_key: whoever reads it forges requestStates). On
/// a server that takes TLS, with `sslmode=require`: decide's sidecar, its lake's catalog
/// (libpq, through DuckDB) and avu's store all connect over TLS, the server checked against
/// the authority in `database_ca`; without that authority the server's certificate is not
/// taken (no silent trust), and the error says what to give. The password is never shown.
#[tokio::test]
async fn the_shared_stores_reach_postgresql_over_tls_and_check_it() {
    let pg = Postgres::start().await;
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let c = certs(&dir.path().join("certs"));
    std::fs::set_permissions(
        dir.path().join("certs"),
        std::fs::Permissions::from_mode(0o755),
    )
    .unwrap();
    std::fs::set_permissions(&c.key, std::fs::Permissions::from_mode(0o600)).unwrap();
    std::fs::set_permissions(&c.cert, std::fs::Permissions::from_mode(0o644)).unwrap();
    if let Some((uid, gid)) = postgres_user() {
        std::os::unix::fs::chown(&c.key, Some(uid), Some(gid)).unwrap();
        std::os::unix::fs::chown(&c.cert, Some(uid), Some(gid)).unwrap();
    }
    let (url, cert, key) = (pg.url.clone(), c.cert.clone(), c.key.clone());
    let ssl = tokio::task::spawn_blocking(move || {
        let mut admin = postgres::Client::connect(&url, postgres::NoTls).unwrap();
        for sql in [
            format!("ALTER SYSTEM SET ssl_cert_file = '{}'", cert.display()),
            format!("ALTER SYSTEM SET ssl_key_file = '{}'", key.display()),
            "ALTER SYSTEM SET ssl = on".into(),
            "SELECT pg_reload_conf()".into(),
        ] {
            admin.batch_execute(&sql).unwrap();
        }
        let started = Instant::now();
        loop {
            let on: String = postgres::Client::connect(&url, postgres::NoTls)
                .unwrap()
                .query_one("SHOW ssl", &[])
                .unwrap()
                .get(0);
            if on == "on" || started.elapsed() > GENEROUS {
                return on;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    })
    .await
    .unwrap();
    assert_eq!(ssl, "on", "the test server takes TLS");
    let tls_url = format!("{}?sslmode=require", pg.url);
    let ca = c.ca.clone();
    let lake_data = dir.path().join("lake-data");
    let outcome = tokio::task::spawn_blocking(move || {
        // Not told the authority: the system's do not know it, so the server is refused.
        let untrusted = Sidecar::connect(&tls_url).err().map(|e| e.to_string());
        // Told it: connected, and the session is TLS.
        let sidecar = Sidecar::connect_checked(&tls_url, Some(&ca)).map_err(|e| e.to_string())?;
        let on_tls: bool = sidecar
            .db
            .query_row(
                "SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()",
                mesh_decide::params![],
                |r| r.get(0),
            )
            .map_err(|e| e.to_string())?;
        let lake = mesh_decide::lake::Lake::open_at(&LakeAt::Shared {
            database: tls_url.clone(),
            data: lake_data,
            authority: Some(ca.clone()),
        })
        .map(|_| ())
        .map_err(|e| e.to_string());
        let avu = mesh_avu::store::Store::connect(&tls_url, Some(&ca))
            .map(|_| ())
            .map_err(|e| e.to_string());
        let avu_untrusted = mesh_avu::store::Store::connect(&tls_url, None)
            .err()
            .map(|e| e.to_string());
        Ok::<_, String>((untrusted, on_tls, lake, avu, avu_untrusted))
    })
    .await
    .unwrap();
    let (untrusted, on_tls, lake, avu, avu_untrusted) =
        outcome.unwrap_or_else(|e| panic!("decide cannot reach its database over TLS: {e}"));
    assert!(on_tls, "the sidecar's session is not TLS");
    lake.unwrap_or_else(|e| panic!("the lake's catalog over TLS: {e}"));
    avu.unwrap_or_else(|e| panic!("avu's store over TLS: {e}"));
    for refused in [untrusted, avu_untrusted] {
        let refused = refused.expect("a server whose authority nobody named was taken");
        assert!(refused.contains("database_ca"), "{refused}");
    }
}

fn questioned(r: &ToolResult) -> (String, String) {
    assert!(r.needs_input(), "{}", r.text_content());
    let (key, request) = r.input_requests.as_ref().unwrap().iter().next().unwrap();
    let first =
        request["params"]["requestedSchema"]["properties"]["candidate"]["oneOf"][0]["const"]
            .as_str()
            .unwrap()
            .to_owned();
    (key.clone(), first)
}

/// Two instances on one database, ann's run, bob a stranger to it:
/// - HELD: bob can neither read, answer nor apply ann's run through either instance.
/// - HELD: ann's answer (a requestState of a real apply) sent eight times at once, spread over
///   both instances, is taken once.
/// - Found in review: two picks on one candidate group reaching two instances at the same moment are
///   both taken. `ensure_open` reads the group open in each transaction (READ COMMITTED, no
///   lock on the group), so both insert a pick override: the group is closed twice, with
///   contradictory curator labels for the next fit (each candidate both the positive and an
///   offered-not-picked negative), and the first caller told "picked A" while B won. With one
///   instance the sidecar's Mutex made the second see the first and refuse (`Closed`).
#[tokio::test]
async fn two_instances_race_on_one_group_and_hold_against_a_stranger() {
    let pg = Postgres::start().await;
    let bus = Bus::accounts_with(
        &decide_bus_modules(),
        &[("ann", &["mesh.>"]), ("bob", &["mesh.>"])],
    )
    .await;
    // The ticket issuer: decide_apply writes for its caller, with the ticket of their call.
    let _catalog = bus.serve_catalog().await;
    let dirs = tempfile::tempdir().unwrap();
    let shared = json!({"database": pg.url, "lake_data": dirs.path().join("lake")});
    let _one = decide_on(&bus, &dirs.path().join("one"), shared.clone()).await;
    let _two = decide_on(&bus, &dirs.path().join("two"), shared).await;
    let ann = bus.client_as(Some("ann")).await;
    let bob = bus.client_as(Some("bob")).await;

    let r = call(&ann, "decide_annotate", &json!({"card_text": CARD})).await;
    assert!(!r.is_error, "{}", r.text_content());
    let annotated = r.structured_content.unwrap();
    let run_id = annotated["run_id"].as_str().unwrap().to_owned();
    let a_group = annotated["groups"][0]["group_id"]
        .as_str()
        .map(str::to_owned)
        .expect("the run has a group");

    // bob, through whichever instance answers, each time.
    for _ in 0..4 {
        for (tool, args) in [
            ("decide_explain", json!({"run_id": run_id})),
            (
                "decide_apply",
                json!({"run_id": run_id, "path": "/mesh/home/bob/x.csv", "dry_run": false}),
            ),
            (
                "decide_feedback",
                json!({"group_id": a_group, "action": "decline"}),
            ),
        ] {
            let r = call(&bob, tool, &args).await;
            assert!(
                r.is_error,
                "bob's {tool} on ann's run: {}",
                r.text_content()
            );
            assert!(
                !r.text_content().contains("PATO:"),
                "bob's {tool} shows ann's terms: {}",
                r.text_content()
            );
        }
    }

    // One answer, eight times at once.
    let args = json!({"run_id": run_id, "path": "/mesh/home/ann/x.csv",
                      "accept": "proposed", "dry_run": false});
    let r = call(&ann, "decide_apply", &args).await;
    let (key, first) = questioned(&r);
    let mut answered = args.clone();
    answered["requestState"] = json!(r.request_state.clone().unwrap());
    answered["inputResponses"] =
        json!({key: {"action": "accept", "content": {"candidate": first}}});
    let replays = (0..8).map(|_| {
        let (ann, answered) = (ann.clone(), answered.clone());
        tokio::spawn(async move { call(&ann, "decide_apply", &answered).await })
    });
    let mut taken = 0;
    let mut refused = Vec::new();
    for r in futures_util::future::join_all(replays).await {
        let r = r.unwrap();
        if r.is_error {
            refused.push(r.text_content());
        } else {
            taken += 1;
        }
    }
    assert_eq!(
        taken, 1,
        "an answer taken {taken} times; refused: {refused:?}"
    );
    assert!(refused.iter().all(|t| t.contains("used")), "{refused:?}");

    // Two picks on one open group, on two connections (two instances) at the same moment.
    let url = pg.url.clone();
    let run = run_id.clone();
    let (first_pick, second_pick, picks) = tokio::task::spawn_blocking(move || {
        use mesh_decide::feedback;
        let a = Sidecar::connect(&url).unwrap();
        let b = Sidecar::connect(&url).unwrap();
        let group = mesh_decide::store::groups::open_of_run(&a.db, &run)
            .unwrap()
            .into_iter()
            .find(|g| feedback::group(&a.db, g).unwrap().candidates.len() >= 2)
            .expect("an open group with two candidates");
        let view = feedback::group(&a.db, &group).unwrap();
        let (c0, c1) = (
            view.candidates[0].decision_id.clone(),
            view.candidates[1].decision_id.clone(),
        );
        let ann = Some("ann@PEOPLE");
        let tx = a.db.transaction().unwrap();
        let first = feedback::pick(&tx, &group, &c0, ann)
            .map(|_| ())
            .map_err(|e| e.to_string());
        let (group2, c1) = (group.clone(), c1.clone());
        let second = std::thread::scope(|s| {
            let other = s.spawn(move || {
                let tx = b.db.transaction().unwrap();
                let r = feedback::pick(&tx, &group2, &c1, ann)
                    .map(|_| ())
                    .map_err(|e| e.to_string());
                if r.is_ok() {
                    tx.commit().unwrap();
                }
                r
            });
            std::thread::sleep(Duration::from_millis(700));
            tx.commit().unwrap();
            other.join().unwrap()
        });
        let picks: i64 =
            a.db.query_row(
                "SELECT count(*) FROM overrides WHERE group_id = ?1 AND action = 'pick'",
                mesh_decide::params![group],
                |r| r.get(0),
            )
            .unwrap();
        (first, second, picks)
    })
    .await
    .unwrap();
    assert!(first_pick.is_ok(), "{first_pick:?}");
    assert!(
        second_pick
            .as_ref()
            .is_err_and(|e| e.contains("no longer open")),
        "a second pick on a group the first closed was taken too ({picks} pick overrides): {second_pick:?}"
    );
    assert_eq!(picks, 1);
}

/// A "database" that takes the connection and never says a word (hung, or hostile): the
/// client's own connect timeout bounds the TCP connect only, so a module starting against it
/// (decide's sidecar, avu's store) would wait for ever. Each is refused, saying so, at the
/// connection's bound instead.
#[tokio::test]
async fn a_database_that_says_nothing_does_not_hold_a_module_for_ever() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    // Takes every connection, reads what comes, answers nothing.
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            std::thread::spawn(move || {
                let mut stream = stream;
                let mut sink = [0u8; 1024];
                while std::io::Read::read(&mut stream, &mut sink).is_ok_and(|n| n > 0) {}
            });
        }
    });
    let url = format!("postgresql://mesh@127.0.0.1:{port}/postgres?sslmode=disable");
    let refused = tokio::time::timeout(
        Duration::from_secs(120),
        tokio::task::spawn_blocking(move || {
            let decide = Sidecar::connect(&url).err().map(|e| e.to_string());
            let avu = mesh_avu::store::Store::connect(&url, None)
                .err()
                .map(|e| e.to_string());
            (decide, avu)
        }),
    )
    .await
    .expect("a silent database held the start for ever")
    .unwrap();
    for said in [refused.0, refused.1] {
        let said = said.expect("connected to a server that said nothing");
        assert!(said.contains("did not finish connecting"), "{said}");
    }
}

/// An impostor at the bus's address that speaks NATS in the clear (a plaintext INFO, no TLS
/// asked for) and keeps whatever it is sent: a person who gave `--tlsca`, or a client
/// certificate, never sends it their password.
#[tokio::test]
async fn a_plaintext_impostor_never_hears_a_tls_clients_password() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let dir = tempfile::tempdir().unwrap();
    let c = certs(&dir.path().join("certs"));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("nats://{}", listener.local_addr().unwrap());
    let heard = std::sync::Arc::new(std::sync::Mutex::new(Vec::<u8>::new()));
    let keep = heard.clone();
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            let keep = keep.clone();
            tokio::spawn(async move {
                let info = "INFO {\"server_id\":\"impostor\",\"version\":\"2.15.1\",\"proto\":1,\"headers\":true,\"max_payload\":1048576,\"auth_required\":true}\r\n";
                let _ = socket.write_all(info.as_bytes()).await;
                let mut buf = [0u8; 4096];
                while let Ok(n) = socket.read(&mut buf).await {
                    if n == 0 {
                        break;
                    }
                    keep.lock().unwrap().extend_from_slice(&buf[..n]);
                }
            });
        }
    });
    let (ca, cert, key) = (
        c.ca.to_str().unwrap(),
        c.cert.to_str().unwrap(),
        c.key.to_str().unwrap(),
    );
    let login = ["--server", &url, "--user", "ann", "--password", "pw-ann"];
    for tls in [
        &["--tlsca", ca][..],
        &["--tlscert", cert, "--tlskey", key][..],
    ] {
        let (code, _, err) =
            crate::cli::mesh(dir.path(), &[&login[..], tls, &["tools"]].concat()).await;
        assert_ne!(code, 0, "{tls:?}: {err}");
    }
    let heard = String::from_utf8_lossy(&heard.lock().unwrap()).into_owned();
    assert!(
        !heard.contains("pw-ann") && !heard.contains("CONNECT"),
        "the impostor heard: {heard:?}"
    );
}
