//! Load: N concurrent callers through each path to the echo tool for a bounded time, the
//! mesh as deployed beside plain NATS, side by side in one run.
//!
//! The mesh is the one a user runs: `mesh up` (its accounts layout, the call log on, echo
//! served by `mesh up`'s own process) in a home of its own, every path connecting as the
//! person through the `nats` context it wrote and selected. The baseline is what a user would
//! compare with: plain async-nats request/reply on a plain nats-server (a configuration of
//! only its port), answered by a plain async-nats responder in a process of its own.
//!
//! For each path it prints calls/s, p50 and p99 latency, errors by kind, and for every process
//! involved its resident memory (start, warmed up, end) and CPU per call after warm-up:
//! nats-server, the responder (the plain one, or `mesh up`'s process), the driver (this
//! process) and the path's own relays; then each mesh path's calls/s, p50 and CPU per call as
//! ratios of the baseline's.
//!
//! Paths: `raw` (the baseline), `lib` (the mesh client library, one shared connection),
//! `cli` (a `mesh call` process per call), `stdio` (one `mesh mcp` process per caller, raw
//! JSON-RPC lines), `http` (one `mesh serve`, an MCP session per caller through rmcp's
//! client); also `http-json` (the same over plain HTTP), `http-ts` (the TypeScript SDK's own
//! server, for comparison) and `churn` (abandoned console sessions).
//!
//! `--cluster N` then runs the same paths on the single-account layout (one account, no call
//! log, catalogue and echo as `mesh run` processes, the raw responder inside this process), on
//! one server and on a cluster of N, and kills a server under load.
//!
//! `cargo bench --bench load [-- --callers 64 --seconds 60 --paths raw,lib,cli,stdio,http --cluster 3]`

#[path = "common/cpu.rs"]
mod cpu;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
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

/// The subject the raw path's responder answers on.
const RAW_SUBJECT: &str = "load.raw";

/// Set in a child of this benchmark: it is the plain responder (an async-nats subscriber
/// answering every request with its body) on the bus at this URL, until killed.
const PLAIN_RESPONDER: &str = "MESH_BENCH_PLAIN_RESPONDER";

/// Calls ended so far, on every path: CPU after warm-up is divided by the calls ended in the
/// same time.
static CALLS: AtomicU64 = AtomicU64::new(0);

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
        CALLS.fetch_add(1, Ordering::Relaxed);
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
                "params": {"name": "echo", "arguments": {"text": TEXT}}})
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

    /// One `tools/call` of `echo`; the answer read from JSON or from its SSE event.
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

/// How the mesh's own processes (`mesh call`, `mesh mcp`, `mesh serve`) reach the bus.
#[derive(Clone)]
enum Via {
    /// A server's URL: the single-account layout, where anyone may connect.
    Url(String),
    /// The home `mesh up` ran in: the `nats` context it selected there, the person's.
    Home(PathBuf),
}

impl Via {
    /// A `mesh` command that connects this way.
    fn mesh(&self) -> Command {
        let mut command = Command::new(MESH);
        match self {
            Via::Url(url) => {
                command.arg("--server").arg(url);
            }
            Via::Home(home) => in_home(&mut command, home),
        }
        command
    }
}

/// Runs `command` as a shell in `home` would: its configuration, cache and state under it,
/// and no `NATS_*` from this benchmark's environment.
fn in_home(command: &mut Command, home: &Path) {
    command
        .env("HOME", home)
        .env("XDG_CONFIG_HOME", home.join("config"))
        .env("XDG_CACHE_HOME", home.join("cache"))
        .env("XDG_STATE_HOME", home.join("state-home"));
    for k in [
        "NATS_URL",
        "NATS_CONTEXT",
        "NATS_USER",
        "NATS_PASSWORD",
        "NATS_TOKEN",
        "NATS_CREDS",
        "NATS_NKEY",
    ] {
        command.env_remove(k);
    }
}

fn spawn_mesh(via: &Via, args: &[&str]) -> Child {
    via.mesh()
        .env("MESH_CONSOLE_TOKEN", TOKEN)
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

/// Whose memory and CPU a path's report lists.
#[derive(Clone)]
struct Watched {
    /// What it is, for the summary and the ratios: nats-server, responder, driver, relays...
    key: &'static str,
    name: String,
    of: Source,
}

#[derive(Clone)]
enum Source {
    /// Processes, their memory and CPU summed (one, or every relay of a path).
    Pids(Vec<u32>),
    /// The children this process reaped (the `mesh call` processes): their CPU only.
    Reaped,
}

impl Watched {
    fn one(key: &'static str, name: impl Into<String>, pid: Option<u32>) -> Watched {
        Watched {
            key,
            name: name.into(),
            of: Source::Pids(pid.into_iter().collect()),
        }
    }

    fn driver() -> Watched {
        Watched::one("driver", "driver (this process)", Some(std::process::id()))
    }

    fn rss(&self) -> u64 {
        match &self.of {
            Source::Pids(pids) => pids.iter().map(|p| rss_kib(*p)).sum(),
            Source::Reaped => 0,
        }
    }

    fn cpu(&self) -> Duration {
        match &self.of {
            Source::Pids(pids) => pids.iter().map(|p| cpu::of_process(*p)).sum(),
            Source::Reaped => cpu::children(),
        }
    }
}

/// The watched processes' memory at the start and a quarter into the run (warmed up), the
/// CPU they had used then, and the calls ended by then.
struct Warm {
    watched: Vec<Watched>,
    start: Vec<u64>,
    warm: Vec<(u64, Duration)>,
    calls: u64,
}

/// Samples `watched` now, and again a quarter of `seconds` on.
fn watch(watched: Vec<Watched>, seconds: u64) -> tokio::task::JoinHandle<Warm> {
    let start = watched.iter().map(Watched::rss).collect();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_secs(seconds) / 4).await;
        let calls = CALLS.load(Ordering::Relaxed);
        let warm = watched.iter().map(|w| (w.rss(), w.cpu())).collect();
        Warm {
            watched,
            start,
            warm,
            calls,
        }
    })
}

/// One watched process over a path's run: memory at the start, warmed up and at the end; CPU
/// from the warm sample to the end.
struct Usage {
    key: &'static str,
    name: String,
    reaped: bool,
    start: u64,
    warm: u64,
    end: u64,
    cpu: Duration,
}

/// What a path's run took of each watched process, over how many calls after warm-up.
struct Took {
    usage: Vec<Usage>,
    calls: u64,
    /// The peak memory of one short process (a `mesh call`), in KiB.
    peak: Option<(String, u64)>,
}

impl Warm {
    /// The end sample.
    fn end(self) -> Took {
        let calls = CALLS.load(Ordering::Relaxed) - self.calls;
        let usage = self
            .watched
            .into_iter()
            .zip(self.start)
            .zip(self.warm)
            .map(|((w, start), (warm, cpu))| Usage {
                key: w.key,
                reaped: matches!(w.of, Source::Reaped),
                start,
                warm,
                end: w.rss(),
                cpu: w.cpu().saturating_sub(cpu),
                name: w.name,
            })
            .collect();
        Took {
            usage,
            calls,
            peak: None,
        }
    }
}

/// A path's figures, for the ratios.
struct Summary {
    rate: f64,
    p50_ms: f64,
    /// Microseconds of CPU per call after warm-up, by key (nats-server, responder, driver...),
    /// and in all.
    cpu_us: BTreeMap<&'static str, f64>,
    total_cpu_us: f64,
}

fn report(path: &str, callers: usize, seconds: u64, mut seen: Seen, took: &Took) -> Summary {
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
    // CPU per call is steadier than calls/s on a machine others share: it is taken from the
    // warm sample (a quarter in) to the end, over the calls ended in that time.
    let per_call = |cpu: Duration| cpu.as_secs_f64() * 1e6 / took.calls.max(1) as f64;
    let mut cpu_us = BTreeMap::new();
    for u in &took.usage {
        let us = per_call(u.cpu);
        *cpu_us.entry(u.key).or_default() += us;
        if u.reaped {
            println!("  cpu {}: {us:.1} us/call after warm-up", u.name);
            continue;
        }
        // Flat memory is judged from the warmed-up sample on.
        let growth = u.end as f64 - u.warm as f64;
        println!(
            "  rss {}: {} KiB, warm {} KiB, end {} KiB ({growth:+.0} KiB, {:+.1}% after warm-up); cpu after warm-up {us:.1} us/call",
            u.name,
            u.start,
            u.warm,
            u.end,
            100.0 * growth / u.warm.max(1) as f64,
        );
    }
    if let Some((name, kib)) = &took.peak {
        println!("  rss {name}: at most {kib} KiB");
    }
    let total_cpu_us = cpu_us.values().sum();
    let each: Vec<String> = cpu_us.iter().map(|(k, v)| format!("{k}={v:.1}")).collect();
    println!(
        "  cpu_per_call_us total={total_cpu_us:.1} {}",
        each.join(" ")
    );
    Summary {
        rate,
        p50_ms: pct(0.50),
        cpu_us,
        total_cpu_us,
    }
}

#[tokio::main]
async fn main() {
    if let Ok(url) = std::env::var(PLAIN_RESPONDER) {
        plain_responder(&url).await;
        return;
    }
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

    deployed(callers, seconds, &paths).await;
    if cluster < 2 {
        return;
    }
    println!(
        "== the single-account layout (one account, no call log; catalogue and echo as `mesh run` \
         processes, the raw responder inside this process), one server"
    );
    let alone = run(1, callers, seconds, &paths).await;
    println!(
        "== the same load and layout through a cluster of {cluster} on loopback: the catalogue on \
         server 0, echo on server 1, the callers on server {} ({})",
        cluster - 1,
        if cluster > 2 {
            "every call crosses a route twice"
        } else {
            "with echo: only the catalogue is across a route"
        }
    );
    let clustered = run(cluster, callers, seconds, &paths).await;
    let ratios: Vec<String> = clustered
        .iter()
        .filter_map(|(k, r)| {
            alone
                .get(k)
                .map(|one| format!("{k}={:.3}", r.rate / one.rate))
        })
        .collect();
    println!(
        "load cluster_vs_one_server calls_per_s {}",
        ratios.join(" ")
    );
    if paths.split(',').any(|p| p == "lib") {
        kill_under_load(cluster, callers).await;
    }
}

/// The plain responder's loop: what a NATS user writes first.
async fn plain_responder(url: &str) {
    let nats = async_nats::connect(url).await.expect("connect");
    let mut sub = nats.subscribe(RAW_SUBJECT).await.expect("subscribe");
    nats.flush().await.expect("flush");
    println!("ready");
    while let Some(msg) = sub.next().await {
        if let Some(reply) = msg.reply {
            let _ = nats.publish(reply, msg.payload).await;
        }
    }
}

/// A bus the paths run on, and whom each path's report watches.
struct Bus {
    /// How the mesh's own processes connect.
    via: Via,
    /// The mesh client library's connection (the `lib` path).
    client: Client,
    /// The raw path's callers' connection.
    raw: async_nats::Client,
    /// Where the raw path starts its responder inside this process; none when a responder of
    /// its own answers already.
    raw_in_process: Option<String>,
    raw_watched: Vec<Watched>,
    mesh_watched: Vec<Watched>,
}

/// The mesh as `mesh up` deploys it beside plain request/reply on a plain nats-server.
async fn deployed(callers: usize, seconds: u64, paths: &str) {
    let dir = tempfile::tempdir().unwrap();
    let binary = NatsServer::binary().expect("nats-server (bin/test installs it)");

    // The plain side: a server with no configuration but its port, a responder of its own.
    let plain_conf = dir.path().join("plain.conf");
    std::fs::write(&plain_conf, "listen: \"127.0.0.1:-1\"\n").expect("config");
    let plain_server = NatsServer::start_using(
        binary.clone(),
        &plain_conf,
        None,
        &dir.path().join("plain.log"),
    )
    .await
    .unwrap_or_else(|e| panic!("{e}"));
    let mut responder = Command::new(std::env::current_exe().expect("this binary"));
    responder
        .env(PLAIN_RESPONDER, plain_server.url())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .kill_on_drop(true);
    mesh_bus::process::dies_with_parent(&mut responder);
    let mut responder = responder.spawn().expect("the plain responder starts");
    let ready = BufReader::new(responder.stdout.take().expect("stdout"))
        .lines()
        .next_line()
        .await;
    assert!(
        matches!(&ready, Ok(Some(l)) if l == "ready"),
        "the plain responder did not start: {ready:?}"
    );

    // The deployed side: `mesh up` in a home of its own, as README's first command runs it.
    let home = dir.path().join("home");
    std::fs::create_dir_all(&home).expect("home");
    let up_log = dir.path().join("mesh-up.log");
    let mut up = Command::new(MESH);
    up.args(["up", "--as", "bench", "--nats-server"])
        .arg(&binary)
        .arg("--dir")
        .arg(home.join("state"))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(&up_log).expect("mesh up's log"))
        .kill_on_drop(true);
    in_home(&mut up, &home);
    mesh_bus::process::dies_with_parent(&mut up);
    let mut up = up.spawn().expect("mesh up starts");
    let mut lines = BufReader::new(up.stdout.take().expect("stdout")).lines();
    let mut server_pid = None;
    loop {
        let Ok(Some(line)) = lines.next_line().await else {
            panic!(
                "mesh up ended before its banner: {}",
                std::fs::read_to_string(&up_log).unwrap_or_default()
            );
        };
        if server_pid.is_none()
            && let Some(rest) = line.split("(pid ").nth(1)
        {
            server_pid = rest.split(')').next().and_then(|p| p.parse::<u32>().ok());
        }
        if line.starts_with("Ctrl-C stops everything") {
            break;
        }
    }
    // Kept reading, so that mesh up never blocks on a full pipe.
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
    let context = home.join("config/nats/context/mesh.json");
    let client = Client::connect(&ConnectConfig {
        context: Some(context.display().to_string()),
        ..Default::default()
    })
    .await
    .expect("the person connects with mesh up's context");

    println!(
        "== deployed: `mesh up` (an account per module, PEOPLE for people, the call log on; echo \
         served by mesh up's own process), every mesh path as its person through the nats context \
         mesh up selected; beside raw: plain request/reply on a plain nats-server (`listen` only), \
         a plain async-nats responder in a process of its own"
    );
    let bus = Bus {
        via: Via::Home(home.clone()),
        client,
        raw: async_nats::connect(plain_server.url())
            .await
            .expect("connect"),
        raw_in_process: None,
        raw_watched: vec![
            Watched::one("nats-server", "nats-server (plain)", plain_server.pid()),
            Watched::one(
                "responder",
                "responder (plain async-nats, a process of its own)",
                responder.id(),
            ),
            Watched::driver(),
        ],
        mesh_watched: vec![
            Watched::one("nats-server", "nats-server (mesh up's)", server_pid),
            Watched::one(
                "responder",
                "responder (mesh up's process: echo, with the catalogue, avu and the console idle)",
                up.id(),
            ),
            Watched::driver(),
        ],
    };
    let summaries = paths_on(&bus, callers, seconds, paths).await;
    if let Some(raw) = summaries.get("raw") {
        // In the order the paths ran.
        let mesh_paths = paths.split(',').filter(|p| *p != "raw");
        for (path, s) in mesh_paths.filter_map(|p| Some((p, summaries.get(p)?))) {
            let cpu: Vec<String> = s
                .cpu_us
                .iter()
                .filter_map(|(k, v)| {
                    let base = raw.cpu_us.get(k)?;
                    Some(format!("{k}={:.2}", v / base))
                })
                .collect();
            println!(
                "load deployed {path} calls_per_s_ratio {:.3} p50_ratio {:.2} cpu_per_call_ratio total={:.2} {}",
                s.rate / raw.rate,
                s.p50_ms / raw.p50_ms,
                s.total_cpu_us / raw.total_cpu_us,
                cpu.join(" ")
            );
        }
    }
    // Stopped as Ctrl-C stops it (its modules unregister, its server last).
    if let Some(pid) = up.id() {
        // SAFETY: kill(2) on our own child's pid has no memory effects.
        unsafe { libc::kill(pid as libc::pid_t, libc::SIGTERM) };
        if tokio::time::timeout(Duration::from_secs(15), up.wait())
            .await
            .is_err()
        {
            eprintln!("load: mesh up did not stop within 15 s; killed");
        }
    }
    drop((responder, plain_server));
}

/// The paths on `servers` nats-servers (one, or a cluster) of the single-account layout.
async fn run(
    servers: usize,
    callers: usize,
    seconds: u64,
    paths: &str,
) -> BTreeMap<&'static str, Summary> {
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
    let catalog = spawn_mesh(&Via::Url(at(0)), &["run", "catalog"]);
    let echo = spawn_mesh(&Via::Url(at(1)), &["run", "echo"]);
    let client = Client::connect(&ConnectConfig {
        server: Some(url.clone()),
        isolated: true,
        ..Default::default()
    })
    .await
    .unwrap();
    let watched: Vec<Watched> = bus
        .pids()
        .into_iter()
        .enumerate()
        .map(|(i, p)| Watched::one("nats-server", format!("nats-server {i}"), Some(p)))
        .chain([
            Watched::one("responder", "echo", echo.id()),
            Watched::one("catalog", "catalog", catalog.id()),
            Watched::driver(),
        ])
        .collect();
    let on = Bus {
        via: Via::Url(url),
        raw: client.nats().clone(),
        client,
        // On echo's server, so that on a cluster its calls cross the routes as echo's do.
        raw_in_process: Some(at(1)),
        raw_watched: watched.clone(),
        mesh_watched: watched,
    };
    let summaries = paths_on(&on, callers, seconds, paths).await;
    if let Some(raw) = summaries.get("raw") {
        let ratios: Vec<String> = summaries
            .iter()
            .filter(|(k, _)| **k != "raw")
            .map(|(k, s)| format!("{k}={:.3}", s.rate / raw.rate))
            .collect();
        println!("load calls_per_s_vs_raw {}", ratios.join(" "));
    }
    drop((catalog, echo));
    summaries
}

/// The paths on `bus`, each reported; their figures by path.
async fn paths_on(
    bus: &Bus,
    callers: usize,
    seconds: u64,
    paths: &str,
) -> BTreeMap<&'static str, Summary> {
    let client = &bus.client;
    let tool = FullName::parse("echo").unwrap();
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
    let watch_with = |extra: &[Watched]| {
        let all = bus.mesh_watched.iter().chain(extra).cloned().collect();
        watch(all, seconds)
    };
    let mut summaries = BTreeMap::new();

    for path in paths.split(',') {
        match path {
            "raw" => {
                // The baseline: plain request/reply, no mesh in between, the same body as the
                // mesh's calls carry.
                let responder = match &bus.raw_in_process {
                    Some(url) => {
                        let nats = async_nats::connect(url.as_str()).await.unwrap();
                        let mut sub = nats.subscribe(RAW_SUBJECT).await.unwrap();
                        nats.flush().await.unwrap();
                        Some(tokio::spawn(async move {
                            while let Some(m) = sub.next().await {
                                if let Some(reply) = m.reply {
                                    let _ = nats.publish(reply, m.payload).await;
                                }
                            }
                        }))
                    }
                    None => None,
                };
                let body = bytes::Bytes::from(args_json.to_string());
                let warm = watch(bus.raw_watched.clone(), seconds);
                let nats = bus.raw.clone();
                let seen = drive(callers, seconds, |_, until| {
                    let (nats, body) = (nats.clone(), body.clone());
                    async move {
                        let mut seen = Seen::default();
                        while Instant::now() < until {
                            let t = Instant::now();
                            let r = nats.request(RAW_SUBJECT, body.clone()).await;
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
                let took = warm.await.unwrap().end();
                summaries.insert("raw", report("raw", callers, seconds, seen, &took));
                if let Some(r) = responder {
                    r.abort();
                }
            }
            "lib" => {
                let warm = watch_with(&[]);
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
                let took = warm.await.unwrap().end();
                summaries.insert("lib", report("lib", callers, seconds, seen, &took));
            }
            "cli" => {
                let warm = watch_with(&[Watched {
                    key: "mesh-call",
                    name: "mesh call processes (all, as reaped)".into(),
                    of: Source::Reaped,
                }]);
                let seen = drive(callers, seconds, |_, until| {
                    let via = bus.via.clone();
                    async move {
                        let mut seen = Seen::default();
                        while Instant::now() < until {
                            let t = Instant::now();
                            let out = via
                                .mesh()
                                .args(["call", "echo", &format!("text={TEXT}")])
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
                let mut took = warm.await.unwrap().end();
                // Each call is its own short process: one that lives a little longer (a
                // 400 ms sleep) is sampled for its peak, read from /proc while it waits.
                let mut one = bus
                    .via
                    .mesh()
                    .args(["call", "echo_sleep", "ms=400"])
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
                took.peak = Some(("one mesh call process (peak)".into(), peak));
                summaries.insert("cli", report("cli", callers, seconds, seen, &took));
            }
            "stdio" => {
                let mut relays = Vec::new();
                let mut pids = Vec::new();
                for _ in 0..callers {
                    let mut child = spawn_mesh(&bus.via, &["mcp"]);
                    pids.push(child.id().unwrap_or(0));
                    let mut stdin = child.stdin.take().unwrap();
                    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
                    stdin
                        .write_all(b"{\"jsonrpc\":\"2.0\",\"id\":0,\"method\":\"initialize\",\"params\":{\"protocolVersion\":\"2025-11-25\",\"capabilities\":{},\"clientInfo\":{\"name\":\"load\",\"version\":\"0\"}}}\n{\"jsonrpc\":\"2.0\",\"method\":\"notifications/initialized\"}\n")
                        .await
                        .unwrap();
                    lines.next_line().await.unwrap();
                    relays.push((child, stdin, lines));
                }
                // The relays summed: each carries one caller's calls.
                let warm = watch_with(&[Watched {
                    key: "relays",
                    name: format!("mesh mcp relays ({callers}, summed)"),
                    of: Source::Pids(pids),
                }]);
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
                                "{{\"jsonrpc\":\"2.0\",\"id\":{id},\"method\":\"tools/call\",\"params\":{{\"name\":\"echo\",\"arguments\":{{\"text\":\"{TEXT}\"}}}}}}\n"
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
                let took = warm.await.unwrap().end();
                summaries.insert("stdio", report("stdio", callers, seconds, seen, &took));
            }
            "http" => {
                let mut serve = spawn_mesh(&bus.via, &["serve", "--port", "0"]);
                let pid = serve.id();
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
                let warm = watch_with(&[Watched::one("relays", "mesh serve", pid)]);
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
                let took = warm.await.unwrap().end();
                summaries.insert("http", report("http", callers, seconds, seen, &took));
                drop(serve);
            }
            // The same plain HTTP driver (a JSON-RPC session per caller, protocol 2025-11-25,
            // one kept-alive connection each) against `mesh serve` relaying over the bus and
            // against the TypeScript SDK's own streamable HTTP server answering locally.
            "http-json" | "http-ts" => {
                let (mut server, pid, endpoint, name) = if path == "http-json" {
                    let mut serve = spawn_mesh(&bus.via, &["serve", "--port", "0"]);
                    let pid = serve.id();
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
                    let pid = node.id();
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
                let warm = watch_with(&[Watched::one("relays", name, pid)]);
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
                let took = warm.await.unwrap().end();
                summaries.insert(leaked, report(path, callers, seconds, seen, &took));
                let _ = server.kill().await;
            }
            "churn" => {
                // Abandoned sessions: each client initializes and goes away without ending its
                // session. The console's memory must stay bounded (it caps sessions, 503 past
                // the cap, and closes the unused ones).
                let mut serve = spawn_mesh(&bus.via, &["serve", "--port", "0"]);
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
            other => eprintln!(
                "load: unknown path {other:?} (raw, lib, cli, stdio, http, http-json, http-ts, churn)"
            ),
        }
    }
    summaries
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
    let _catalog = spawn_mesh(&Via::Url(bus.servers[1].url()), &["run", "catalog"]);
    let _echo1 = spawn_mesh(&Via::Url(bus.servers[1].url()), &["run", "echo"]);
    let _echo2 = spawn_mesh(&Via::Url(bus.servers[2].url()), &["run", "echo"]);
    let client = Client::connect(&ConnectConfig {
        server: Some(bus.servers[0].url()),
        isolated: true,
        ..Default::default()
    })
    .await
    .unwrap();
    let tool = FullName::parse("echo").unwrap();
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
