//! A cluster over TLS as `mesh accounts --tls-cert --tls-key --tls-ca` writes it, with
//! certificates made here by openssl: clients and modules connect with `--tlsca` and calls
//! cross the routes; a client that does not check the server's certificate is refused, a
//! plaintext CONNECT over a plain TCP socket is refused before it logs in, and a stranger's
//! server that knows the route secret but has no certificate of the mesh's authority does
//! not join.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::json;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

use mesh_core::client::{Client, ConnectConfig};
use mesh_core::subjects::{FullName, ToolResult};

use crate::bus::GENEROUS;

/// A certificate authority and a certificate it signed for 127.0.0.1, good for a server and
/// for a client (routes present theirs both ways).
pub(crate) struct Certs {
    pub(crate) ca: PathBuf,
    pub(crate) cert: PathBuf,
    pub(crate) key: PathBuf,
}

impl Certs {
    pub(crate) fn make(dir: &Path) -> Certs {
        std::fs::create_dir_all(dir).unwrap();
        let openssl = |args: &[&str]| {
            let out = std::process::Command::new("openssl")
                .args(args)
                .current_dir(dir)
                .output()
                .expect("openssl runs (bin/deps.sh installs it)");
            assert!(
                out.status.success(),
                "openssl {args:?}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        };
        let ec = [
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
        ];
        openssl(
            &[
                &["req", "-x509"][..],
                &ec,
                &["-keyout", "ca.key", "-out", "ca.pem", "-days", "2"],
                &["-subj", "/CN=mesh test authority"],
            ]
            .concat(),
        );
        openssl(
            &[
                &["req"][..],
                &ec,
                &[
                    "-keyout",
                    "server.key",
                    "-out",
                    "server.csr",
                    "-subj",
                    "/CN=localhost",
                ],
            ]
            .concat(),
        );
        std::fs::write(
            dir.join("ext"),
            "subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth,clientAuth\n",
        )
        .unwrap();
        openssl(&[
            "x509",
            "-req",
            "-in",
            "server.csr",
            "-CA",
            "ca.pem",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-out",
            "server.pem",
            "-days",
            "2",
            "-extfile",
            "ext",
        ]);
        Certs {
            ca: dir.join("ca.pem"),
            cert: dir.join("server.pem"),
            key: dir.join("server.key"),
        }
    }
}

struct TlsCluster {
    servers: Vec<mesh_bus::natsd::NatsServer>,
    leaves: Vec<u16>,
    routes: Vec<String>,
    secret: String,
    passwords: std::collections::HashMap<String, String>,
    certs: Certs,
    dir: tempfile::TempDir,
}

impl TlsCluster {
    async fn start() -> TlsCluster {
        let dir = tempfile::tempdir().unwrap();
        let certs = Certs::make(&dir.path().join("certs"));
        let grants = dir.path().join("grants.conf");
        std::fs::write(
            &grants,
            "modules { catalog {}, echo {}, decide {} }\nroles { r { tools: [echo, echo_whoami, decide_health] } }\npeople { ann { roles: [r], password: \"pw-ann\" } }\n",
        )
        .unwrap();
        let routes: Vec<String> = mesh_bus::cluster::free_ports(3)
            .unwrap()
            .iter()
            .map(|p| format!("127.0.0.1:{p}"))
            .collect();
        let leaves = mesh_bus::cluster::free_ports(3).unwrap();
        let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_mesh"))
            .args(["accounts", "--grants", grants.to_str().unwrap()])
            .args(["--cluster", &routes.join(",")])
            .args(["--leafnodes", &format!("127.0.0.1:{}", leaves[0])])
            .args(["--listen", "0.0.0.0:4222"])
            .args(["--out", dir.path().join("out").to_str().unwrap()])
            .args(["--tls-cert", certs.cert.to_str().unwrap()])
            .args(["--tls-key", certs.key.to_str().unwrap()])
            .args(["--tls-ca", certs.ca.to_str().unwrap()])
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
        let mut secret = String::new();
        for i in 0..3 {
            let path = dir.path().join(format!("out/nats-server-{i}.conf"));
            let conf = std::fs::read_to_string(&path).unwrap();
            assert!(
                crate::cluster::audit_kinds(&path)
                    .await
                    .iter()
                    .all(|k| k != "no_tls"),
                "the audit finds a port in the clear: {conf}"
            );
            assert!(
                conf.contains("verify: true"),
                "routes over mutual TLS: {conf}"
            );
            let parsed = mesh_bus::natsconf::parse_str(&conf, &path).unwrap();
            for (_, account) in parsed.get("accounts").unwrap().entries() {
                if let Some(mesh_bus::natsconf::Value::Array(users)) =
                    account.get("users").map(|u| &u.value)
                {
                    for u in users {
                        let user = u.get("user").and_then(|v| v.as_str()).unwrap().to_owned();
                        let pw = u.get("password").and_then(|v| v.as_str()).unwrap();
                        passwords.insert(user, pw.to_owned());
                    }
                }
            }
            secret = conf
                .split("authorization { user: \"route\", password: \"")
                .nth(1)
                .and_then(|rest| rest.split('"').next())
                .unwrap()
                .to_owned();
            // Hosts of their own: a JetStream directory and a leaf port each.
            let own = conf
                .replace(
                    "store_dir: \"./jetstream\"",
                    &format!("store_dir: {:?}", dir.path().join(format!("js{i}"))),
                )
                .replace(
                    &format!("127.0.0.1:{}", leaves[0]),
                    &format!("127.0.0.1:{}", leaves[i]),
                );
            std::fs::write(&path, own).unwrap();
            let port = mesh_bus::cluster::free_ports(1).unwrap()[0];
            let log = dir.path().join(format!("n{i}.log"));
            servers.push(
                mesh_bus::natsd::NatsServer::start(&path, Some(port), &log)
                    .await
                    .unwrap(),
            );
        }
        TlsCluster {
            servers,
            leaves,
            routes,
            secret,
            passwords,
            certs,
            dir,
        }
    }

    fn config(&self, i: usize, user: &str) -> ConnectConfig {
        ConnectConfig {
            server: Some(self.servers[i].url()),
            user: Some(user.to_owned()),
            password: self.passwords.get(user).cloned(),
            tls_ca: Some(self.certs.ca.clone()),
            isolated: true,
            ..Default::default()
        }
    }
}

fn name(s: &str) -> FullName {
    FullName::parse(s).unwrap()
}

/// The first answer of `tool` that is not an error, asked again while the cluster (or a
/// leaf, or a module) is still coming up.
async fn first_answer(client: &Client, tool: &str, what: &str) -> ToolResult {
    let started = Instant::now();
    loop {
        match client.call(&name(tool), &json!({}), GENEROUS).await {
            Ok(r) if !r.is_error => return r,
            other => {
                assert!(started.elapsed() < GENEROUS, "{what}: {other:?}");
                tokio::time::sleep(Duration::from_millis(100)).await
            }
        }
    }
}

#[tokio::test]
async fn a_cluster_over_tls_takes_only_tls() {
    let c = TlsCluster::start().await;
    let echo = Client::connect(&c.config(0, "echo")).await.unwrap();
    let options = mesh_core::runtime::ServeOptions {
        layout: mesh_core::actor::Layout::Accounts,
        ..Default::default()
    };
    let _echo = crate::bus::serve_on(echo.nats().clone(), mesh_echo::module(), options).await;
    // ann on another server: the call crosses a route (over mutual TLS) and is stamped hers.
    let ann = Client::connect(&c.config(2, "ann")).await.unwrap();
    let who = first_answer(&ann, "echo_whoami", "the cluster never carried the call").await;
    assert!(who.text_content().contains("ann@PEOPLE"), "{who:?}");

    // The command line, as a person at a terminal gives it.
    let home = tempfile::tempdir().unwrap();
    let url = c.servers[1].url();
    let ca = c.certs.ca.to_str().unwrap().to_owned();
    let base = ["--server", &url, "--user", "ann", "--password", "pw-ann"];
    let (code, out, err) = crate::cli::mesh(
        home.path(),
        &[&base[..], &["--tlsca", &ca, "call", "echo", "text=hi"]].concat(),
    )
    .await;
    assert_eq!((code, out.trim()), (0, "hi"), "{err}");
    // Without the authority, the server's certificate is not taken: no password is sent.
    let (code, _, err) = crate::cli::mesh(
        home.path(),
        &[&base[..], &["call", "echo", "text=hi"]].concat(),
    )
    .await;
    assert_ne!(code, 0);
    assert!(err.contains("cannot connect"), "{err}");

    // mesh-decide, whose binary links both of rustls's crypto providers (reqwest brings
    // one, async-nats the other), connects over TLS as well.
    let decide_dir = c.dir.path().join("decide");
    let mut decide = tokio::process::Command::new(
        std::path::Path::new(env!("CARGO_BIN_EXE_mesh")).with_file_name("mesh-decide"),
    )
    .args(["run", "--server", &c.servers[0].url(), "--user", "decide"])
    .args(["--tlsca", &ca, "--layout", "accounts"])
    .args(["--dir", decide_dir.to_str().unwrap()])
    .env("NATS_PASSWORD", &c.passwords["decide"])
    .env("HOME", home.path())
    .stdout(std::process::Stdio::null())
    .stderr(std::process::Stdio::piped())
    .kill_on_drop(true)
    .spawn()
    .unwrap();
    first_answer(&ann, "decide_health", "mesh-decide never answered over TLS").await;
    assert!(decide.try_wait().unwrap().is_none(), "mesh-decide ended");
    decide.start_kill().unwrap();

    // A laptop joins through the leaf port over TLS, checking the hub against the authority:
    // its local clients act as ann.
    let laptop_conf = c.dir.path().join("laptop.conf");
    std::fs::write(
        &laptop_conf,
        mesh_bus::layout::leaf_for_person(
            -1,
            &format!("127.0.0.1:{}", c.leaves[1]),
            "ann",
            "pw-ann",
            Some(&c.certs.ca),
        ),
    )
    .unwrap();
    let laptop =
        mesh_bus::natsd::NatsServer::start(&laptop_conf, None, &c.dir.path().join("laptop.log"))
            .await
            .unwrap();
    let local = Client::connect(&ConnectConfig {
        server: Some(laptop.url()),
        inbox_prefix: Some("_INBOX.ann".into()),
        isolated: true,
        ..Default::default()
    })
    .await
    .unwrap();
    let who = first_answer(
        &local,
        "echo_whoami",
        "the laptop's leaf never carried the call",
    )
    .await;
    assert!(who.text_content().contains("ann@PEOPLE"), "{who:?}");
    let leaf_log = std::fs::read_to_string(c.dir.path().join("laptop.log")).unwrap();
    assert!(!leaf_log.contains("handshake error"), "{leaf_log}");

    // A plaintext CONNECT over a plain socket: refused before any login.
    let mut socket = tokio::net::TcpStream::connect(("127.0.0.1", c.servers[1].port()))
        .await
        .unwrap();
    let (read, mut write) = socket.split();
    let mut lines = BufReader::new(read).lines();
    let info = tokio::time::timeout(GENEROUS, lines.next_line())
        .await
        .expect("the server says INFO")
        .unwrap()
        .unwrap();
    assert!(info.contains("\"tls_required\":true"), "{info}");
    write
        .write_all(b"CONNECT {\"user\":\"ann\",\"pass\":\"pw-ann\",\"verbose\":false}\r\nPING\r\n")
        .await
        .unwrap();
    let mut said = String::new();
    while let Ok(Ok(Some(line))) = tokio::time::timeout(GENEROUS, lines.next_line()).await {
        said.push_str(&line);
        said.push('\n');
    }
    assert!(
        !said.contains("PONG"),
        "a plaintext client was taken: {said}"
    );
    // The server read the bytes as a TLS handshake, refused it and hung up.
    let log = std::fs::read_to_string(c.dir.path().join("n1.log")).unwrap();
    assert!(log.contains("TLS handshake error"), "{log}");
}

/// A stranger's nats-server that has the route secret (a leaked configuration) and trusts
/// the mesh's authority, but has no certificate from it: its routes are refused (mutual TLS),
/// so nothing it stamps reaches a module.
#[tokio::test]
async fn a_stranger_with_the_route_secret_but_not_the_authority_does_not_join() {
    let c = TlsCluster::start().await;
    let echo = Client::connect(&c.config(0, "echo")).await.unwrap();
    let options = mesh_core::runtime::ServeOptions {
        layout: mesh_core::actor::Layout::Accounts,
        ..Default::default()
    };
    let _echo = crate::bus::serve_on(echo.nats().clone(), mesh_echo::module(), options).await;
    let theirs = Certs::make(&c.dir.path().join("stranger-certs"));
    let own_route = mesh_bus::cluster::free_ports(1).unwrap()[0];
    let conf = c.dir.path().join("rogue.conf");
    let file = |p: &Path| format!("{:?}", p.display().to_string());
    std::fs::write(
        &conf,
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
  authorization {{ user: "route", password: "{secret}" }}
  routes: ["nats-route://route:{secret}@{route}"]
  tls {{ cert_file: {cert}, key_file: {key}, ca_file: {ca}, verify: true }}
}}
"#,
            secret = c.secret,
            route = c.routes[0],
            cert = file(&theirs.cert),
            key = file(&theirs.key),
            // The mesh's authority is no secret: the rogue trusts it, so only the mesh's
            // check of the rogue's certificate keeps it out.
            ca = file(&c.certs.ca),
        ),
    )
    .unwrap();
    let rogue = mesh_bus::natsd::NatsServer::start(&conf, None, &c.dir.path().join("rogue.log"))
        .await
        .unwrap();
    let stranger = async_nats::ConnectOptions::new()
        .user_and_password("ann".into(), "chosen-by-the-stranger".into())
        .ignore_discovered_servers()
        .connect(rogue.url())
        .await
        .unwrap();
    // The rogue tries its route again and again, and the mesh's server refuses each at the
    // handshake: its certificate is not the mesh authority's.
    let log = c.dir.path().join("n0.log");
    let started = Instant::now();
    while std::fs::read_to_string(&log)
        .unwrap()
        .matches("TLS route handshake error")
        .count()
        < 3
    {
        assert!(
            started.elapsed() < GENEROUS,
            "the rogue never tried its route"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // Nothing it sends reaches a module.
    for _ in 0..3 {
        let sent = stranger.request("mesh.echo.whoami", "{}".into());
        if let Ok(Ok(message)) = tokio::time::timeout(Duration::from_secs(1), sent).await {
            panic!(
                "a server without the mesh's certificate joined: {}",
                String::from_utf8_lossy(&message.payload)
            );
        }
    }
}
