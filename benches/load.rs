//! Load: N concurrent callers through each path to the echo tool for a bounded time, on a
//! real bus, with raw NATS request/reply beside them as the baseline. For each path it
//! prints calls/s, p50 and p99 latency, errors by kind, and the resident memory of every
//! process involved (nats-server, the echo and catalog modules, the relays) at the start and
//! end of the run.
//!
//! Paths: `raw` (the baseline: async-nats request/reply to a plain responder), `lib` (the
//! mesh client library, one shared connection), `cli` (a `mesh call` process per call),
//! `stdio` (one `mesh mcp` process per caller, raw JSON-RPC lines), `http` (one `mesh serve`,
//! an MCP session per caller through rmcp's client).
//!
//! `cargo bench --bench load [-- --callers 64 --seconds 60 --paths raw,lib,cli,stdio,http]`

#[path = "common/cpu.rs"]
mod cpu;

use std::collections::BTreeMap;
use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use mesh::console::Console;
use mesh_bus::cluster::Cluster;
use mesh_bus::layout;
use mesh_bus::natsd::NatsServer;
use mesh_core::client::{Access, Client, ConnectConfig, Outcome, outcome};
use mesh_core::subjects::FullName;
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, Command};

#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

const MESH: &str = env!("CARGO_BIN_EXE_mesh");
const TEXT: &str = "the quick brown fox jumps over the lazy dog";
const DEADLINE: Duration = Duration::from_secs(10);

/// What the callers of one path saw.
#[derive(Default)]
struct Seen {
    /// Microseconds, four bytes each: millions of calls fit.
    latencies: Vec<u32>,
    outcomes: BTreeMap<&'static str, usize>,
}

impl Seen {
    fn add(&mut self, took: Duration, outcome: Outcome) {
        self.latencies
            .push(took.as_micros().min(u32::MAX as u128) as u32);
        *self.outcomes.entry(outcome.name()).or_default() += 1;
    }

    fn merge(&mut self, other: Seen) {
        self.latencies.extend(other.latencies);
        for (k, n) in other.outcomes {
            *self.outcomes.entry(k).or_default() += n;
        }
    }
}

/// Resident memory of a process, in KiB.
fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        })
        .unwrap_or(0)
}

fn arg(args: &[String], name: &str) -> Option<String> {
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1).cloned())
}

/// The bearer token the bench's console is started with (and `Console::connect` reads).
const TOKEN: &str = "the-load-bench-console";

/// Where `bin/deps.sh` installs the TypeScript SDK (run it once: `bin/test` does).
fn node_modules() -> String {
    let status = std::process::Command::new("bash")
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .args(["-c", ". bin/deps.sh && ensure_node_packages"])
        .status()
        .expect("bash runs");
    assert!(
        status.success(),
        "bin/deps.sh could not install the MCP TypeScript SDK"
    );
    concat!(env!("CARGO_MANIFEST_DIR"), "/target/js/node_modules").to_owned()
}

/// One MCP session over plain HTTP (protocol 2025-11-25): what any client sends, no SDK.
struct HttpSession {
    http: reqwest::Client,
    endpoint: String,
    session: Option<String>,
    body: String,
}

impl HttpSession {
    async fn open(endpoint: &str) -> HttpSession {
        let http = reqwest::Client::new();
        let init = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize",
            "params": {"protocolVersion": "2025-11-25", "capabilities": {},
                       "clientInfo": {"name": "load", "version": "0"}}});
        let mut s = HttpSession {
            http,
            endpoint: endpoint.to_owned(),
            session: None,
            body: json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                "params": {"name": "echo_echo", "arguments": {"text": TEXT}}})
            .to_string(),
        };
        let answer = s.post(init.to_string()).await;
        s.session = answer
            .headers()
            .get("mcp-session-id")
            .and_then(|v| v.to_str().ok())
            .map(String::from);
        let _ = answer.bytes().await;
        let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
        let _ = s.post(initialized.to_string()).await.bytes().await;
        s
    }

    async fn post(&self, body: String) -> reqwest::Response {
        let mut request = self
            .http
            .post(&self.endpoint)
            .bearer_auth(TOKEN)
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .header("mcp-protocol-version", "2025-11-25")
            .body(body);
        if let Some(id) = &self.session {
            request = request.header("mcp-session-id", id);
        }
        request.send().await.expect("the server answers")
    }

    /// One `tools/call` of `echo_echo`; the answer read from JSON or from its SSE event.
    async fn call(&self) -> Outcome {
        let Ok(text) = self.post(self.body.clone()).await.text().await else {
            return Outcome::Connection;
        };
        let json = text
            .lines()
            .filter_map(|l| l.strip_prefix("data:"))
            .map(str::trim)
            .find(|d| d.contains("\"id\""))
            .unwrap_or(text.trim());
        let answer: Value = serde_json::from_str(json).unwrap_or(Value::Null);
        let result = &answer["result"];
        if !result.is_object() {
            Outcome::Connection
        } else if result["isError"] == true {
            Outcome::ToolError
        } else {
            Outcome::Result
        }
    }
}

fn spawn_mesh(url: &str, args: &[&str]) -> Child {
    Command::new(MESH)
        .env("MESH_CONSOLE_TOKEN", TOKEN)
        .arg("--server")
        .arg(url)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("mesh runs")
}

/// Runs `callers` loops of `one` until `seconds` pass; each loop gets its index.
async fn drive<F, Fut>(callers: usize, seconds: u64, one: F) -> Seen
where
    F: Fn(usize, Instant) -> Fut,
    Fut: std::future::Future<Output = Seen> + Send + 'static,
{
    let until = Instant::now() + Duration::from_secs(seconds);
    let tasks: Vec<_> = (0..callers).map(|i| tokio::spawn(one(i, until))).collect();
    let mut seen = Seen::default();
    for t in tasks {
        seen.merge(t.await.expect("a caller ends"));
    }
    seen
}

/// Memory of each process: at the start, a quarter into the run (warmed up), at the end;
/// and the CPU time it used from the warm sample to the end.
struct Rss {
    name: String,
    start: u64,
    warm: u64,
    end: u64,
    cpu: Duration,
}

fn report(path: &str, callers: usize, seconds: u64, mut seen: Seen, rss: &[Rss]) -> f64 {
    seen.latencies.sort();
    let n = seen.latencies.len();
    let pct = |p: f64| {
        seen.latencies
            .get(((n as f64 * p) as usize).min(n.saturating_sub(1)))
            .map(|us| *us as f64 / 1e3)
            .unwrap_or(0.0)
    };
    let rate = n as f64 / seconds as f64;
    let errors: BTreeMap<_, _> = seen
        .outcomes
        .iter()
        .filter(|(k, _)| **k != "result")
        .collect();
    println!(
        "load path={path} callers={callers} seconds={seconds} calls={n} calls_per_s={rate:.0} p50_ms={:.2} p99_ms={:.2} errors={errors:?}",
        pct(0.50),
        pct(0.99)
    );
    for r in rss {
        if r.start == 0 {
            println!("  rss {}: at most {} KiB", r.name, r.end);
            continue;
        }
        // Flat memory is judged from the warmed-up sample on.
        let growth = r.end as f64 - r.warm as f64;
        // Calls after the warm sample, taken as the run's rate over its last three quarters:
        // CPU per call is steadier than calls/s on a machine others share.
        let warm_calls = rate * seconds as f64 * 0.75;
        println!(
            "  rss {}: {} KiB, warm {} KiB, end {} KiB ({growth:+.0} KiB, {:+.1}% after warm-up); cpu after warm-up {:.1} us/call",
            r.name,
            r.start,
            r.warm,
            r.end,
            100.0 * growth / r.warm.max(1) as f64,
            r.cpu.as_secs_f64() * 1e6 / warm_calls.max(1.0)
        );
    }
    rate
}

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    let callers: usize = arg(&args, "--callers")
        .and_then(|s| s.parse().ok())
        .unwrap_or(64);
    let seconds: u64 = arg(&args, "--seconds")
        .and_then(|s| s.parse().ok())
        .unwrap_or(60);
    let paths = arg(&args, "--paths").unwrap_or_else(|| "raw,lib,cli,stdio,http".into());
    let cluster: usize = arg(&args, "--cluster")
        .and_then(|s| s.parse().ok())
        .unwrap_or(1);

    let alone = run(1, callers, seconds, &paths).await;
    if cluster < 2 {
        return;
    }
    println!(
        "== the same load through a cluster of {cluster} on loopback: the catalogue on server 0, \
         echo on server 1, the callers on server {} (every call crosses a route twice)",
        cluster - 1
    );
    let clustered = run(cluster, callers, seconds, &paths).await;
    let ratios: Vec<String> = clustered
        .iter()
        .filter_map(|(k, r)| alone.get(k).map(|one| format!("{k}={:.3}", r / one)))
        .collect();
    println!(
        "load cluster_vs_one_server calls_per_s {}",
        ratios.join(" ")
    );
    if paths.split(',').any(|p| p == "lib") {
        kill_under_load(cluster, callers).await;
    }
}

/// The paths on `servers` nats-servers (one, or a cluster); calls/s by path.
async fn run(
    servers: usize,
    callers: usize,
    seconds: u64,
    paths: &str,
) -> BTreeMap<&'static str, f64> {
    let dir = tempfile::tempdir().unwrap();
    let bus = Cluster::start(
        servers,
        dir.path(),
        NatsServer::binary().expect("nats-server (bin/test installs it)"),
        None,
        |slot| layout::single_account(-1, slot.store_dir),
    )
    .await
    .expect("nats-server starts (bin/test installs it)");
    let at = |i: usize| bus.servers[i % servers].url();
    // The callers on the last server, echo on the second, the catalogue on the first.
    let url = at(servers - 1);
    let catalog = spawn_mesh(&at(0), &["run", "catalog"]);
    let echo = spawn_mesh(&at(1), &["run", "echo"]);
    let client = Client::connect(&ConnectConfig {
        server: Some(url.clone()),
        isolated: true,
        ..Default::default()
    })
    .await
    .unwrap();
    let tool = FullName::parse("echo_echo").unwrap();
    let args_json = json!({"text": TEXT});
    // Wait until echo answers.
    for _ in 0..200 {
        if client
            .call(&tool, &args_json, Duration::from_secs(1))
            .await
            .is_ok()
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let fixed: Vec<(String, u32)> = bus
        .pids()
        .into_iter()
        .enumerate()
        .map(|(i, p)| (format!("nats-server {i}"), p))
        .chain([
            ("echo".to_owned(), echo.id().unwrap_or(0)),
            ("catalog".to_owned(), catalog.id().unwrap_or(0)),
            ("driver".to_owned(), std::process::id()),
        ])
        .collect();
    let measure = |extra: &[(String, u32)]| -> Vec<(String, u32, u64)> {
        fixed
            .iter()
            .chain(extra)
            .map(|(n, p)| (n.clone(), *p, rss_kib(*p)))
            .collect()
    };
    // Takes the warm sample a quarter of the way in; `pair` adds the end.
    let warm_up = |before: Vec<(String, u32, u64)>| {
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_secs(seconds) / 4).await;
            before
                .into_iter()
                .map(|(n, p, start)| (n, p, start, rss_kib(p), cpu::of_process(p)))
                .collect::<Vec<_>>()
        })
    };
    let pair = |warm: Vec<(String, u32, u64, u64, Duration)>| -> Vec<Rss> {
        warm.into_iter()
            .map(|(name, p, start, warm, cpu)| Rss {
                name,
                start,
                warm,
                end: rss_kib(p),
                cpu: cpu::of_process(p).saturating_sub(cpu),
            })
            .collect()
    };
    let mut rates = BTreeMap::new();

    for path in paths.split(',') {
        match path {
            "raw" => {
                // The baseline: a plain responder in this process, no mesh in between, on
                // echo's server (so on a cluster its calls cross the routes as echo's do).
                let responder_conn = async_nats::connect(at(1)).await.unwrap();
                let mut sub = responder_conn.subscribe("load.raw").await.unwrap();
                responder_conn.flush().await.unwrap();
                let nats = responder_conn.clone();
                let responder = tokio::spawn(async move {
                    while let Some(m) = sub.next().await {
                        if let Some(reply) = m.reply {
                            let _ = nats.publish(reply, m.payload).await;
                        }
                    }
                });
                let warm = warm_up(measure(&[]));
                let nats = client.nats().clone();
                let seen = drive(callers, seconds, |_, until| {
                    let nats = nats.clone();
                    async move {
                        let mut seen = Seen::default();
                        while Instant::now() < until {
                            let t = Instant::now();
                            let r = nats.request("load.raw", TEXT.into()).await;
                            seen.add(
                                t.elapsed(),
                                if r.is_ok() {
                                    Outcome::Result
                                } else {
                                    Outcome::Connection
                                },
                            );
                        }
                        seen
                    }
                })
                .await;
                rates.insert(
                    "raw",
                    report("raw", callers, seconds, seen, &pair(warm.await.unwrap())),
                );
                responder.abort();
            }
            "lib" => {
                let warm = warm_up(measure(&[]));
                let seen = drive(callers, seconds, |_, until| {
                    let (client, tool, args) = (client.clone(), tool.clone(), args_json.clone());
                    async move {
                        let mut seen = Seen::default();
                        while Instant::now() < until {
                            let t = Instant::now();
                            let r = client.call(&tool, &args, DEADLINE).await;
                            seen.add(t.elapsed(), outcome(&r));
                        }
                        seen
                    }
                })
                .await;
                rates.insert(
                    "lib",
                    report("lib", callers, seconds, seen, &pair(warm.await.unwrap())),
                );
            }
            "cli" => {
                let warm = warm_up(measure(&[]));
                let seen = drive(callers, seconds, |_, until| {
                    let url = url.clone();
                    async move {
                        let mut seen = Seen::default();
                        while Instant::now() < until {
                            let t = Instant::now();
                            let out = Command::new(MESH)
                                .args([
                                    "--server",
                                    &url,
                                    "call",
                                    "echo_echo",
                                    &format!("text={TEXT}"),
                                ])
                                .stdin(Stdio::null())
                                .stdout(Stdio::null())
                                .stderr(Stdio::null())
                                .status()
                                .await
                                .expect("mesh call runs");
                            let o = match out.code() {
                                Some(0) => Outcome::Result,
                                Some(1) => Outcome::ToolError,
                                Some(3) => Outcome::NobodyServes,
                                Some(4) => Outcome::Denied,
                                Some(5) => Outcome::Slow,
                                _ => Outcome::Connection,
                            };
                            seen.add(t.elapsed(), o);
                        }
                        seen
                    }
                })
                .await;
                let mut rss = pair(warm.await.unwrap());
                // Each call is its own short process: one that lives a little longer (a
                // 400 ms sleep) is sampled for its peak, read from /proc while it waits.
                let mut one = Command::new(MESH)
                    .args(["--server", &url, "call", "echo_sleep", "ms=400"])
                    .stdin(Stdio::null())
                    .stdout(Stdio::null())
                    .stderr(Stdio::null())
                    .spawn()
                    .expect("mesh call runs");
                tokio::time::sleep(Duration::from_millis(300)).await;
                let peak =
                    std::fs::read_to_string(format!("/proc/{}/status", one.id().unwrap_or(0)))
                        .ok()
                        .and_then(|s| {
                            s.lines()
                                .find(|l| l.starts_with("VmHWM:"))
                                .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
                        })
                        .unwrap_or(0);
                let _ = one.wait().await;
                rss.push(Rss {
                    name: "one mesh call process (peak)".into(),
                    start: 0,
                    warm: 0,
                    end: peak,
                    cpu: Duration::ZERO,
                });
                rates.insert("cli", report("cli", callers, seconds, seen, &rss));
            }
            "stdio" => {
                let mut relays = Vec::new();
                let mut pids = Vec::new();
                for i in 0..callers {
                    let mut child = spawn_mesh(&url, &["mcp"]);
                    pids.push((format!("mesh mcp #{i}"), child.id().unwrap_or(0)));
                    let mut stdin = child.stdin.take().unwrap();
                    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
                    stdin
                        .write_all(b"{\"jsonrpc\":\"2.0\",\"id\":0,\"method\":\"initialize\",\"params\":{\"protocolVersion\":\"2025-11-25\",\"capabilities\":{},\"clientInfo\":{\"name\":\"load\",\"version\":\"0\"}}}\n{\"jsonrpc\":\"2.0\",\"method\":\"notifications/initialized\"}\n")
                        .await
                        .unwrap();
                    lines.next_line().await.unwrap();
                    relays.push((child, stdin, lines));
                }
                // Only the first and last relay's memory is listed: they are alike.
                let watched = [pids[0].clone(), pids[pids.len() - 1].clone()];
                let warm = warm_up(measure(&watched));
                let relays: Vec<_> = relays
                    .into_iter()
                    .map(|r| Arc::new(tokio::sync::Mutex::new(r)))
                    .collect();
                let seen = drive(callers, seconds, |i, until| {
                    let relay = relays[i].clone();
                    async move {
                        let mut relay = relay.lock().await;
                        let (_, stdin, lines) = &mut *relay;
                        let mut seen = Seen::default();
                        let mut id = 1u64;
                        while Instant::now() < until {
                            let line = format!(
                                "{{\"jsonrpc\":\"2.0\",\"id\":{id},\"method\":\"tools/call\",\"params\":{{\"name\":\"echo_echo\",\"arguments\":{{\"text\":\"{TEXT}\"}}}}}}\n"
                            );
                            id += 1;
                            let t = Instant::now();
                            stdin.write_all(line.as_bytes()).await.unwrap();
                            let answer: Value = match lines.next_line().await {
                                Ok(Some(l)) => serde_json::from_str(&l).unwrap_or_default(),
                                _ => Value::Null,
                            };
                            let result = &answer["result"];
                            let o = if !result.is_object() {
                                Outcome::Connection
                            } else if result["isError"] != true {
                                Outcome::Result
                            } else {
                                result["_meta"]["mesh/outcome"]
                                    .as_str()
                                    .and_then(Outcome::from_name)
                                    .unwrap_or(Outcome::ToolError)
                            };
                            seen.add(t.elapsed(), o);
                        }
                        seen
                    }
                })
                .await;
                rates.insert(
                    "stdio",
                    report("stdio", callers, seconds, seen, &pair(warm.await.unwrap())),
                );
            }
            "http" => {
                let mut serve = spawn_mesh(&url, &["serve", "--port", "0"]);
                let pid = serve.id().unwrap_or(0);
                let mut lines = BufReader::new(serve.stdout.take().unwrap()).lines();
                let first = lines.next_line().await.unwrap().unwrap();
                let console = first.strip_prefix("console: ").unwrap().to_owned();
                let mut sessions = Vec::new();
                for _ in 0..callers {
                    sessions.push(
                        Console::connect_with(&console, Some(TOKEN.to_owned()))
                            .await
                            .expect("an MCP session"),
                    );
                }
                let warm = warm_up(measure(&[("mesh serve".into(), pid)]));
                let sessions: Vec<_> = sessions.into_iter().map(Arc::new).collect();
                let seen = drive(callers, seconds, |i, until| {
                    let (session, tool, args) =
                        (sessions[i].clone(), tool.clone(), args_json.clone());
                    async move {
                        let mut seen = Seen::default();
                        while Instant::now() < until {
                            let t = Instant::now();
                            let r = session.call(&tool, &args, DEADLINE).await;
                            seen.add(t.elapsed(), outcome(&r));
                        }
                        seen
                    }
                })
                .await;
                rates.insert(
                    "http",
                    report("http", callers, seconds, seen, &pair(warm.await.unwrap())),
                );
                drop(serve);
            }
            // The same plain HTTP driver (a JSON-RPC session per caller, protocol 2025-11-25,
            // one kept-alive connection each) against `mesh serve` relaying over the bus and
            // against the TypeScript SDK's own streamable HTTP server answering locally.
            "http-json" | "http-ts" => {
                let (mut server, pid, endpoint, name) = if path == "http-json" {
                    let mut serve = spawn_mesh(&url, &["serve", "--port", "0"]);
                    let pid = serve.id().unwrap_or(0);
                    let mut lines = BufReader::new(serve.stdout.take().unwrap()).lines();
                    let first = lines.next_line().await.unwrap().unwrap();
                    let console = first.strip_prefix("console: ").unwrap().to_owned();
                    (serve, pid, console, "mesh serve")
                } else {
                    let mut node = Command::new("node")
                        .arg(concat!(
                            env!("CARGO_MANIFEST_DIR"),
                            "/benches/js/http_echo.cjs"
                        ))
                        .env("NODE_PATH", node_modules())
                        .stdout(Stdio::piped())
                        .kill_on_drop(true)
                        .spawn()
                        .expect("node runs");
                    let pid = node.id().unwrap_or(0);
                    let mut lines = BufReader::new(node.stdout.take().unwrap()).lines();
                    let first = lines.next_line().await.unwrap().unwrap();
                    let endpoint = first.strip_prefix("listening: ").unwrap().to_owned();
                    (node, pid, endpoint, "TypeScript SDK server")
                };
                let mut sessions = Vec::new();
                for _ in 0..callers {
                    sessions.push(Arc::new(HttpSession::open(&endpoint).await));
                }
                // Measured once the tool is listed (a module registered just now may not be
                // yet: an unknown tool's quick error is no call).
                for _ in 0..200 {
                    if matches!(sessions[0].call().await, Outcome::Result) {
                        break;
                    }
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                let warm = warm_up(measure(&[(name.into(), pid)]));
                let seen = drive(callers, seconds, |i, until| {
                    let session = sessions[i].clone();
                    async move {
                        let mut seen = Seen::default();
                        while Instant::now() < until {
                            let t = Instant::now();
                            let o = session.call().await;
                            seen.add(t.elapsed(), o);
                        }
                        seen
                    }
                })
                .await;
                let leaked: &'static str = Box::leak(path.to_owned().into_boxed_str());
                rates.insert(
                    leaked,
                    report(path, callers, seconds, seen, &pair(warm.await.unwrap())),
                );
                let _ = server.kill().await;
            }
            "churn" => {
                // Abandoned sessions: each client initializes and goes away without ending its
                // session. The console's memory must stay bounded (it caps sessions, 503 past
                // the cap, and closes the unused ones).
                let mut serve = spawn_mesh(&url, &["serve", "--port", "0"]);
                let pid = serve.id().unwrap_or(0);
                let mut lines = BufReader::new(serve.stdout.take().unwrap()).lines();
                let first = lines.next_line().await.unwrap().unwrap();
                let console = first.strip_prefix("console: ").unwrap().to_owned();
                let before = rss_kib(pid);
                let http = reqwest::Client::new();
                let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize",
                    "params": {"protocolVersion": "2025-11-25", "capabilities": {},
                               "clientInfo": {"name": "churn", "version": "0"}}});
                let (mut accepted, mut refused, mut other) = (0u64, 0u64, 0u64);
                let abandoned = callers * 50;
                for _ in 0..abandoned {
                    let status = http
                        .post(&console)
                        .bearer_auth(TOKEN)
                        .header("accept", "application/json, text/event-stream")
                        .json(&init)
                        .send()
                        .await
                        .map(|r| r.status().as_u16());
                    match status {
                        Ok(200) => accepted += 1,
                        Ok(503) => refused += 1,
                        _ => other += 1,
                    }
                }
                let after = rss_kib(pid);
                println!(
                    "churn: {abandoned} abandoned sessions: {accepted} opened, {refused} refused (503), {other} other; mesh serve rss {before} KiB -> {after} KiB ({:+.1}%)",
                    (after as f64 - before as f64) * 100.0 / before.max(1) as f64
                );
                drop(serve);
            }
            other => eprintln!("load: unknown path {other:?} (raw, lib, cli, stdio, http, churn)"),
        }
    }
    if let Some(raw) = rates.get("raw") {
        let ratios: Vec<String> = rates
            .iter()
            .filter(|(k, _)| **k != "raw")
            .map(|(k, r)| format!("{k}={:.3}", r / raw))
            .collect();
        println!("load calls_per_s_vs_raw {}", ratios.join(" "));
    }
    drop((catalog, echo));
    rates
}

/// One server of a cluster killed under load: `callers` library callers on server 0, echo on
/// servers 1 and 2; server 0 killed a few seconds in. How many calls failed, for how long,
/// and when the callers answered again.
async fn kill_under_load(servers: usize, callers: usize) {
    let dir = tempfile::tempdir().unwrap();
    let mut bus = Cluster::start(
        servers.max(3),
        dir.path(),
        NatsServer::binary().expect("nats-server (bin/test installs it)"),
        None,
        |slot| layout::single_account(-1, slot.store_dir),
    )
    .await
    .expect("nats-servers start");
    let _catalog = spawn_mesh(&bus.servers[1].url(), &["run", "catalog"]);
    let _echo1 = spawn_mesh(&bus.servers[1].url(), &["run", "echo"]);
    let _echo2 = spawn_mesh(&bus.servers[2].url(), &["run", "echo"]);
    let client = Client::connect(&ConnectConfig {
        server: Some(bus.servers[0].url()),
        isolated: true,
        ..Default::default()
    })
    .await
    .unwrap();
    let tool = FullName::parse("echo_echo").unwrap();
    let args = json!({"text": TEXT});
    // Answering before the kill (a bound, so that a cluster that never forms ends the run).
    let ready = Instant::now();
    while let Err(e) = client.call(&tool, &args, Duration::from_secs(1)).await {
        assert!(
            ready.elapsed() < Duration::from_secs(60),
            "echo never answered through the cluster: {e}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let started = Instant::now();
    let until = started + Duration::from_secs(8);
    let mut tasks = Vec::new();
    for _ in 0..callers {
        let (client, tool, args) = (client.clone(), tool.clone(), args.clone());
        tasks.push(tokio::spawn(async move {
            // (when it started, when it ended, whether it answered)
            let mut ended = Vec::new();
            while Instant::now() < until {
                let t = Instant::now();
                let r = client.call(&tool, &args, Duration::from_secs(2)).await;
                ended.push((t, Instant::now(), matches!(&r, Ok(r) if !r.is_error)));
            }
            ended
        }));
    }
    tokio::time::sleep(Duration::from_secs(3)).await;
    let killed = Instant::now();
    bus.servers[0].stop().await;
    let mut all = Vec::new();
    for t in tasks {
        all.extend(t.await.unwrap());
    }
    let failed: Vec<&(Instant, Instant, bool)> = all.iter().filter(|c| !c.2).collect();
    let window = match (failed.first(), failed.last()) {
        (Some(_), Some(_)) => {
            let first = failed.iter().map(|c| c.1).min().unwrap();
            let last = failed.iter().map(|c| c.1).max().unwrap();
            format!(
                "calls failed from {:?} to {:?} after the kill",
                first.saturating_duration_since(killed),
                last.saturating_duration_since(killed)
            )
        }
        _ => "no call failed".to_owned(),
    };
    // The first call made after the kill that answered.
    let back = all
        .iter()
        .filter(|c| c.2 && c.0 >= killed)
        .map(|c| c.1)
        .min()
        .map(|t| format!("{:?}", t.saturating_duration_since(killed)))
        .unwrap_or_else(|| "never".into());
    let slowest = all.iter().map(|c| c.1 - c.0).max().unwrap_or_default();
    println!(
        "kill: {callers} callers on server 0 of {}, server 0 killed 3 s in: {} calls, {} failed; {window}; the first call made after the kill answered {back} after it; slowest call {slowest:?}",
        servers.max(3),
        all.len(),
        failed.len(),
    );
}
