//! Signing in, and calling once signed in, as each kind of user meets it (issue 49): `mesh up`
//! in its file layout (people with passwords) beside `mesh up --auth operator --idp …`
//! (accounts as JWTs; a person with a credential file, or with an ID token the auth callout
//! in `mesh up`'s process checks), and a plain nats-server with no accounts as the floor —
//! side by side in one run, the paths alternating in short blocks.
//!
//! For each path: a sign-in (connect, one call of echo, close) one after another, its p50 and
//! p99 and the CPU per sign-in of nats-server and of the process behind it (`mesh up`, which
//! answers the callout; the plain side's responder runs in this process); then calls on a
//! connection held open, one at a time and 32 in flight, p50 and CPU per call.
//!
//! `cargo bench --bench signin`

#[path = "common/cpu.rs"]
mod cpu;
#[path = "common/up.rs"]
mod up;

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use mesh_bus::natsd::NatsServer;
use up::Up;

#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

const ROUNDS: usize = 6;
const SIGN_INS_PER_ROUND: usize = 100;
const SEQUENTIAL_PER_ROUND: usize = 500;
const CONCURRENT_PER_ROUND: usize = 4_000;
const IN_FLIGHT: usize = 32;
const WARMUP: usize = 200;
const ISSUER: &str = "https://idp.example.org";
const AUDIENCE: &str = "mesh";
const BODY: &str = r#"{"text":"the quick brown fox jumps over the lazy dog"}"#;

/// How one path signs in, and where its calls go.
struct Way {
    name: &'static str,
    url: String,
    subject: &'static str,
    /// Connect options made afresh for every sign-in.
    options: Arc<
        dyn Fn() -> futures_util::future::BoxFuture<'static, async_nats::ConnectOptions>
            + Send
            + Sync,
    >,
    /// nats-server's pid, and the pid of the process behind it (`mesh up`), if not this one.
    server: u32,
    behind: Option<u32>,
}

#[derive(Default)]
struct Measured {
    sign_ins: Vec<Duration>,
    sign_in_server: Duration,
    sign_in_behind: Duration,
    one_at_a_time: Vec<Duration>,
    in_flight_wall: Duration,
    call_server: Duration,
    call_behind: Duration,
}

#[tokio::main]
async fn main() {
    let dir = tempfile::tempdir().expect("a folder");
    let dir = dir.path();
    let idp = Idp::make(dir);
    let jwks = dir.join("jwks.json");
    std::fs::write(&jwks, &idp.jwks).expect("jwks");

    // The floor: a plain server with nothing configured but its port, answered here.
    let plain_conf = dir.join("plain.conf");
    std::fs::write(&plain_conf, "listen: \"127.0.0.1:-1\"\n").expect("config");
    let plain = NatsServer::start(&plain_conf, None, &dir.join("plain.log"))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let responder = async_nats::connect(plain.url()).await.expect("connect");
    let mut asked = responder.subscribe("bench.plain").await.expect("subscribe");
    responder.flush().await.expect("flush");
    tokio::spawn(async move {
        while let Some(m) = asked.next().await {
            if let Some(reply) = m.reply {
                let _ = responder.publish(reply, m.payload).await;
            }
        }
    });

    let file = Up::start(&dir.join("file"), None);
    let operator = Up::start_with(
        &dir.join("operator"),
        None,
        &[
            "--auth",
            "operator",
            "--idp",
            ISSUER,
            "--jwks",
            jwks.to_str().expect("utf-8"),
            "--audience",
            AUDIENCE,
        ],
    );
    let context = |up: &Up| -> serde_json::Value {
        serde_json::from_str(
            &std::fs::read_to_string(up.home.join("config/nats/context/mesh.json"))
                .expect("context"),
        )
        .expect("context JSON")
    };
    let (file_ctx, operator_ctx) = (context(&file), context(&operator));
    let field = |c: &serde_json::Value, k: &str| c[k].as_str().expect("context field").to_owned();
    let inbox = format!("_INBOX.{}", "bench");

    let plain_url = plain.url();
    let (user, password) = (field(&file_ctx, "user"), field(&file_ctx, "password"));
    let prefix = inbox.clone();
    let creds = std::path::PathBuf::from(field(&operator_ctx, "creds"));
    let sentinel = operator
        .home
        .join("state/operator/creds/AUTH.sentinel.creds");
    assert!(sentinel.exists(), "{} is missing", sentinel.display());
    let token = idp.token("bench");
    let ways = vec![
        Way {
            name: "plain NATS",
            url: plain_url,
            subject: "bench.plain",
            options: Arc::new(|| Box::pin(async { async_nats::ConnectOptions::new() })),
            server: plain.pid().expect("plain server's pid"),
            behind: None,
        },
        Way {
            name: "password",
            url: field(&file_ctx, "url"),
            subject: "mesh.echo.echo",
            options: {
                let prefix = prefix.clone();
                Arc::new(move || {
                    let (u, p, i) = (user.clone(), password.clone(), prefix.clone());
                    Box::pin(async move {
                        async_nats::ConnectOptions::with_user_and_password(u, p)
                            .custom_inbox_prefix(i)
                    })
                })
            },
            server: file.server_pid.expect("file layout's server pid"),
            behind: Some(file.pid),
        },
        Way {
            name: "credential file",
            url: field(&operator_ctx, "url"),
            subject: "mesh.echo.echo",
            options: {
                let prefix = prefix.clone();
                Arc::new(move || {
                    let (c, i) = (creds.clone(), prefix.clone());
                    Box::pin(async move {
                        async_nats::ConnectOptions::with_credentials_file(c)
                            .await
                            .expect("the person's credential file")
                            .custom_inbox_prefix(i)
                    })
                })
            },
            server: operator.server_pid.expect("operator mode's server pid"),
            behind: Some(operator.pid),
        },
        Way {
            name: "ID token (callout)",
            url: field(&operator_ctx, "url"),
            subject: "mesh.echo.echo",
            options: {
                let prefix = prefix.clone();
                Arc::new(move || {
                    let (s, t, i) = (sentinel.clone(), token.clone(), prefix.clone());
                    Box::pin(async move {
                        async_nats::ConnectOptions::with_credentials_file(s)
                            .await
                            .expect("the sentinel")
                            .token(t)
                            .custom_inbox_prefix(i)
                    })
                })
            },
            server: operator.server_pid.expect("operator mode's server pid"),
            behind: Some(operator.pid),
        },
    ];

    // Held connections, one per path, warmed up.
    let mut held = Vec::new();
    for way in &ways {
        let client = (way.options)()
            .await
            .connect(way.url.clone())
            .await
            .unwrap_or_else(|e| panic!("{} connects: {e}", way.name));
        for _ in 0..WARMUP {
            call(&client, way.subject).await;
        }
        held.push(client);
    }
    let mut measured: Vec<Measured> = ways.iter().map(|_| Measured::default()).collect();
    let cpu = |pid: Option<u32>| pid.map(cpu::of_process).unwrap_or_default();
    for round in 0..ROUNDS {
        for k in 0..ways.len() {
            let i = (round + k) % ways.len();
            let (way, m) = (&ways[i], &mut measured[i]);
            let (s0, b0) = (cpu(Some(way.server)), cpu(way.behind));
            for _ in 0..SIGN_INS_PER_ROUND {
                let started = Instant::now();
                let client = (way.options)()
                    .await
                    .connect(way.url.clone())
                    .await
                    .unwrap_or_else(|e| panic!("{} signs in: {e}", way.name));
                call(&client, way.subject).await;
                drop(client);
                m.sign_ins.push(started.elapsed());
            }
            m.sign_in_server += cpu(Some(way.server)) - s0;
            m.sign_in_behind += cpu(way.behind) - b0;
            let client = &held[i];
            for _ in 0..SEQUENTIAL_PER_ROUND {
                let started = Instant::now();
                call(client, way.subject).await;
                m.one_at_a_time.push(started.elapsed());
            }
            let (s0, b0) = (cpu(Some(way.server)), cpu(way.behind));
            let started = Instant::now();
            futures_util::stream::iter(0..CONCURRENT_PER_ROUND)
                .for_each_concurrent(IN_FLIGHT, |_| call(client, way.subject))
                .await;
            m.in_flight_wall += started.elapsed();
            m.call_server += cpu(Some(way.server)) - s0;
            m.call_behind += cpu(way.behind) - b0;
        }
    }
    for m in &mut measured {
        m.sign_ins.sort();
        m.one_at_a_time.sort();
    }
    let sign_ins = (ROUNDS * SIGN_INS_PER_ROUND) as f64;
    let calls = (ROUNDS * CONCURRENT_PER_ROUND) as f64;
    println!(
        "== signin: {ROUNDS} rounds of {SIGN_INS_PER_ROUND} sign-ins (connect, one call, close), {SEQUENTIAL_PER_ROUND} calls one at a time and {CONCURRENT_PER_ROUND} with {IN_FLIGHT} in flight, per path"
    );
    print!("{:<38}", "");
    for way in &ways {
        print!(" {:>20}", way.name);
    }
    println!();
    let row = |what: &str, f: &dyn Fn(&Measured) -> f64| {
        print!("{what:<38}");
        for m in &measured {
            print!(" {:>20.1}", f(m));
        }
        println!();
        print!("{:<38}", "  ratio to password");
        let base = f(&measured[1]);
        for m in &measured {
            print!(" {:>20.2}", f(m) / base);
        }
        println!();
    };
    row("sign-in p50 (us)", &|m| us(pct(&m.sign_ins, 0.5)));
    row("sign-in p99 (us)", &|m| us(pct(&m.sign_ins, 0.99)));
    row("sign-in cpu (us), nats-server", &|m| {
        us(m.sign_in_server) / sign_ins
    });
    row("sign-in cpu (us), mesh up", &|m| {
        us(m.sign_in_behind) / sign_ins
    });
    row("call p50 (us), one at a time", &|m| {
        us(pct(&m.one_at_a_time, 0.5))
    });
    row("calls/s, 32 in flight", &|m| {
        calls / m.in_flight_wall.as_secs_f64()
    });
    row("call cpu (us), nats-server", &|m| us(m.call_server) / calls);
    row("call cpu (us), mesh up", &|m| us(m.call_behind) / calls);
    println!(
        "mesh up is the process behind both meshes (echo's runtime; in operator mode also the auth callout); the plain side's responder runs in this benchmark"
    );
    drop((file, operator, plain));
}

async fn call(client: &async_nats::Client, subject: &'static str) {
    let _ = tokio::time::timeout(
        Duration::from_secs(10),
        client.request(subject, bytes::Bytes::from_static(BODY.as_bytes())),
    )
    .await
    .unwrap_or_else(|_| panic!("a call to {subject} hung"))
    .unwrap_or_else(|e| panic!("a call to {subject}: {e}"));
}

fn pct(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

fn us(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

/// The identity provider the benchmark plays: its RSA key (made by openssl) and JWKS.
struct Idp {
    der: Vec<u8>,
    jwks: String,
}

impl Idp {
    fn make(dir: &Path) -> Idp {
        let pem = dir.join("idp.pem");
        let der = dir.join("idp.der");
        let run = |args: &[&str]| {
            let out = std::process::Command::new("openssl")
                .args(args)
                .output()
                .expect("openssl runs");
            assert!(out.status.success(), "openssl {args:?}");
            String::from_utf8(out.stdout).expect("utf-8")
        };
        let pem_s = pem.to_str().expect("utf-8");
        run(&["genrsa", "-out", pem_s, "2048"]);
        run(&[
            "rsa",
            "-in",
            pem_s,
            "-outform",
            "DER",
            "-traditional",
            "-out",
            der.to_str().expect("utf-8"),
        ]);
        let modulus = run(&["rsa", "-in", pem_s, "-noout", "-modulus"]);
        let hex = modulus.trim().trim_start_matches("Modulus=");
        let bytes: Vec<u8> = (0..hex.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).expect("hex"))
            .collect();
        use base64::Engine as _;
        let n = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes);
        Idp {
            der: std::fs::read(der).expect("der"),
            jwks: serde_json::json!({"keys": [{"kty": "RSA", "kid": "k1", "alg": "RS256", "use": "sig", "n": n, "e": "AQAB"}]})
                .to_string(),
        }
    }

    fn token(&self, person: &str) -> String {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .expect("time")
            .as_secs() as i64;
        let claims = serde_json::json!({
            "iss": ISSUER, "aud": AUDIENCE, "sub": format!("id-{person}"),
            "preferred_username": person, "iat": now, "exp": now + 3600,
        });
        let mut header = jsonwebtoken::Header::new(jsonwebtoken::Algorithm::RS256);
        header.kid = Some("k1".into());
        jsonwebtoken::encode(
            &header,
            &claims,
            &jsonwebtoken::EncodingKey::from_rsa_der(&self.der),
        )
        .expect("a token")
    }
}
