//! The mesh measured against its baselines, side by side in one run, on one nats-server:
//!
//! - relay: raw async-nats request/reply against the same load through the mesh client and
//!   runtime to an echo tool, with the CPU time per call of this process and of
//!   nats-server; ends `relay latency_ratio=<x> throughput_ratio=<y> cpu_ratio=<z>`.
//! - discovery: 100 modules × 20 tools discovered, against one round trip; ends
//!   `discovery ratio=<x>`.
//! - cold_call: a whole `mesh call` process, against the same process doing no call and
//!   against `/bin/true`; ends `cold_call ms=<x> true_ms=<y> version_ms=<z>` (p50s).
//! - mcp: `tools/call` through `mesh mcp` (stdio) against the raw bus round trip to the same
//!   tool; ends `mcp overhead_us=<p50 difference>`.
//! - ontology: importing NCBITaxon (1.26 M terms) against only reading it, and searching
//!   it against a lookup by id; ends `ontology import_s=<x> rss_mib=<y> search_p50_us=<z>`.
//!   Needs `../shared/ontologies/`; says so and skips the section without it.
//!
//! - annotate: decide on a 30-column card with PATO, UBERON, EFO, CHEBI and NCBITaxon indexed,
//!   against only the index searches it makes, and with MESH_BENCH_DATABASE (a PostgreSQL
//!   URL) with the sidecar there too; ends `annotate p50_ms=<x>`.
//!
//! - large: a 10 MB result through the claim (a bus of 1 MiB messages: kept in the module's
//!   object store, fetched in chunks, digest checked) against the same result in one message
//!   (a bus whose messages may be 16 MiB); ends `large claim_p50_ms=<x> one_message_p50_ms=<y>
//!   ratio=<x/y>`.
//!
//! - bridge: server-everything's `echo` through the mesh (client → bus → `mesh run --mcp` →
//!   stdio) against the same server driven directly by the TypeScript SDK's client over stdio,
//!   and the raw bus round trip, with 1 and 32 calls in flight; ends `bridge p50_us=<x>
//!   sdk_p50_us=<y> raw_p50_us=<z> added_round_trips=<(x-y)/z>`.
//!
//! - tracing: the relay section again in processes of its own, with tracing off, on but
//!   not sampled (`OTEL_TRACES_SAMPLER=always_off`) and sampled (`always_on`), exporting
//!   to an OTLP endpoint of this run's that takes and drops; ends `tracing off=<x>
//!   unsampled=<y> sampled=<z>` (each the mesh's p50 latency ratio to raw NATS).
//! - witness: nats-server's own cost of the call log, with raw requests at 32 in flight from a
//!   person to a responder: plain request/reply on a plain server, one import (stamped, and
//!   not), one import tracked at 100% (events not kept; kept, per module and per tool), and
//!   the layout `mesh_bus::layout` renders; each with nats-server's CPU per call; ends `witness
//!   one_import=<x> tracked_module=<y> tracked_tool=<z> layout=<w>` (throughput against
//!   plain).
//! - deployed: the mesh as `mesh up` deploys it (its accounts layout, the call log on, echo in
//!   `mesh up`'s process) against plain request/reply on a plain nats-server with a plain
//!   async-nats responder in a process of its own, driven by raw async-nats requests (and by
//!   the mesh's client): calls/s and p50 at 32 in flight, p50 one at a time, CPU per call of
//!   nats-server, the responder and the driver; ends `deployed throughput_ratio=<x>
//!   p50_32_ratio=<y> p50_1_ratio=<z> server_cpu_ratio=<u> responder_cpu_ratio=<v>`.
//!
//! `cargo bench --bench relay [-- relay|discovery|cold_call|mcp|ontology|annotate|large|bridge|tracing|witness|deployed]`. Paths alternate in short
//! blocks so machine noise falls on both alike.

#[path = "common/cpu.rs"]
mod cpu;
#[path = "common/up.rs"]
mod up;

use up::Up;

use std::sync::Arc;

// The allocator the `mesh` binary runs with, so both paths are measured as deployed.
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use mesh_bus::layout;
use mesh_bus::natsd::NatsServer;
use mesh_core::client::{Client, ConnectConfig};
use mesh_core::runtime::{Call, Module, ServeOptions, Serving, Tool};
use mesh_core::subjects::{FullName, ToolResult};
use serde_json::json;

const ROUNDS: usize = 12;
const SEQUENTIAL_PER_ROUND: usize = 500;
const WARMUP: usize = 500;
const IN_FLIGHT: usize = 32;
const CONCURRENT_PER_ROUND: usize = 4_000;
const DEADLINE: Duration = Duration::from_secs(10);
const TEXT: &str = "the quick brown fox jumps over the lazy dog";

/// One path under test: something that makes a call and waits for its answer.
trait Path: Clone + Send + Sync + 'static {
    fn call(&self) -> impl std::future::Future<Output = ()> + Send;
}

#[derive(Clone)]
struct Raw {
    nats: async_nats::Client,
    body: bytes::Bytes,
}

impl Path for Raw {
    async fn call(&self) {
        let msg = self
            .nats
            .request("bench.raw", self.body.clone())
            .await
            .expect("raw request");
        assert!(!msg.payload.is_empty());
    }
}

#[derive(Clone)]
struct Mesh {
    client: Client,
    tool: Arc<FullName>,
    args: Arc<serde_json::Value>,
}

impl Path for Mesh {
    async fn call(&self) {
        let r = self
            .client
            .call(&self.tool, &self.args, DEADLINE)
            .await
            .expect("mesh call");
        assert!(!r.is_error);
    }
}

async fn sequential(path: &impl Path, n: usize, into: &mut Vec<Duration>) {
    for _ in 0..n {
        let t = Instant::now();
        path.call().await;
        into.push(t.elapsed());
    }
}

/// CPU time (user plus system) spent by a run of calls, apart from its wall time.
#[derive(Default, Clone, Copy)]
struct Cpu {
    /// This process: the callers and their responders (the echo module, the raw responder).
    own: Duration,
    /// nats-server.
    server: Duration,
}

impl Cpu {
    fn now(server: Option<u32>) -> Cpu {
        Cpu {
            own: cpu::own(),
            server: server.map(cpu::of_process).unwrap_or_default(),
        }
    }

    fn since(self, start: Cpu) -> Cpu {
        Cpu {
            own: self.own - start.own,
            server: self.server - start.server,
        }
    }

    fn add(&mut self, other: Cpu) {
        self.own += other.own;
        self.server += other.server;
    }
}

/// `n` calls with `IN_FLIGHT` callers; returns the wall time.
async fn concurrent(path: &(impl Path + 'static), n: usize) -> Duration {
    let mut times = Vec::with_capacity(n);
    concurrent_timed(path, n, &mut times).await
}

/// A round of [`concurrent`] calls: its wall time and the CPU time it took.
async fn concurrent_cpu(path: &(impl Path + 'static), server: Option<u32>) -> (Duration, Cpu) {
    let cpu = Cpu::now(server);
    let wall = concurrent(path, CONCURRENT_PER_ROUND).await;
    (wall, Cpu::now(server).since(cpu))
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i]
}

fn us(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

#[tokio::main]
async fn main() {
    if let Ok(url) = std::env::var(PLAIN_RESPONDER) {
        plain_responder(&url).await;
        return;
    }
    // Spans exported where the OTEL_* variables say (the tracing section's children).
    let _logging = mesh_core::log::to_stderr(0);
    // cargo passes --bench; anything else names the sections to run.
    let wanted: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with("--"))
        .collect();
    let run = |name: &str| wanted.is_empty() || wanted.iter().any(|w| w == name);
    let dir = tempfile::tempdir().expect("temp dir");
    let conf = dir.path().join("nats-server.conf");
    std::fs::write(&conf, layout::single_account(-1, &dir.path().join("js"))).expect("config");
    let server = NatsServer::start(&conf, None, &dir.path().join("nats-server.log"))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let url = server.url();
    if run("relay") {
        relay(&url, server.pid()).await;
    }
    if run("discovery") {
        discovery(&url).await;
    }
    if run("cold_call") {
        cold_call(&url).await;
    }
    if run("mcp") {
        mcp(&url).await;
    }
    if run("ontology") {
        ontology().await;
    }
    if run("large") {
        large(dir.path()).await;
    }
    if run("bridge") {
        bridge(&url).await;
    }
    if wanted.iter().any(|w| w == "tracing") {
        tracing_cost().await;
    }
    if run("witness") {
        witness(dir.path()).await;
    }
    if run("deployed") {
        deployed(dir.path()).await;
    }
    if run("pysdk") {
        pysdk(dir.path()).await;
    }
    if run("annotate") {
        // Off the runtime: the sidecar's PostgreSQL client blocks on a runtime of its own.
        std::thread::scope(|s| s.spawn(annotate).join().expect("annotate runs"));
    }
    drop(server);
}

/// Options for modules started by the benchmarks: no catalogue refresh during a run.
fn quiet() -> ServeOptions {
    ServeOptions {
        register_every: None,
        ..ServeOptions::default()
    }
}

async fn relay(url: &str, server: Option<u32>) {
    println!("== relay");
    // Responders, each on a connection of its own, as in a deployment.
    let responder = async_nats::connect(url).await.expect("connect");
    let mut sub = responder
        .queue_subscribe("bench.raw", "raw".into())
        .await
        .expect("subscribe");
    let raw_conn = responder.clone();
    tokio::spawn(async move {
        while let Some(msg) = sub.next().await {
            if let Some(reply) = msg.reply {
                let _ = raw_conn.publish(reply, msg.payload).await;
            }
        }
    });
    responder.flush().await.expect("flush");
    let module_conn = async_nats::connect(url).await.expect("connect");
    let serving = Serving::start(mesh_echo::module(), module_conn, quiet())
        .await
        .expect("echo serves");
    tokio::spawn(serving.run(std::future::pending()));

    let args = json!({ "text": TEXT });
    let raw = Raw {
        nats: async_nats::connect(url).await.expect("connect"),
        body: serde_json::to_vec(&args).expect("json").into(),
    };
    let config = ConnectConfig {
        server: Some(url.to_owned()),
        isolated: true,
        ..Default::default()
    };
    let mesh = Mesh {
        client: Client::connect(&config).await.expect("connect"),
        tool: Arc::new(FullName::parse("echo").expect("name")),
        args: Arc::new(args),
    };

    let mut scratch = Vec::new();
    sequential(&raw, WARMUP, &mut scratch).await;
    sequential(&mesh, WARMUP, &mut scratch).await;

    let (mut raw_lat, mut mesh_lat) = (Vec::new(), Vec::new());
    let (mut raw_time, mut mesh_time) = (Duration::ZERO, Duration::ZERO);
    let (mut raw_cpu, mut mesh_cpu) = (Cpu::default(), Cpu::default());
    let mut round_ratios = Vec::with_capacity(ROUNDS);
    for round in 0..ROUNDS {
        // Alternate which path goes first, so neither always follows the other.
        let ((r, rc), (m, mc)) = if round % 2 == 0 {
            sequential(&raw, SEQUENTIAL_PER_ROUND, &mut raw_lat).await;
            sequential(&mesh, SEQUENTIAL_PER_ROUND, &mut mesh_lat).await;
            let r = concurrent_cpu(&raw, server).await;
            (r, concurrent_cpu(&mesh, server).await)
        } else {
            sequential(&mesh, SEQUENTIAL_PER_ROUND, &mut mesh_lat).await;
            sequential(&raw, SEQUENTIAL_PER_ROUND, &mut raw_lat).await;
            let m = concurrent_cpu(&mesh, server).await;
            (concurrent_cpu(&raw, server).await, m)
        };
        raw_cpu.add(rc);
        mesh_cpu.add(mc);
        raw_time += r;
        mesh_time += m;
        round_ratios.push(r.as_secs_f64() / m.as_secs_f64());
    }
    round_ratios.sort_by(f64::total_cmp);
    let throughput_ratio = round_ratios[ROUNDS / 2];
    raw_lat.sort();
    mesh_lat.sort();
    let calls = (ROUNDS * CONCURRENT_PER_ROUND) as f64;
    let raw_tput = calls / raw_time.as_secs_f64();
    let mesh_tput = calls / mesh_time.as_secs_f64();
    let (raw_p50, mesh_p50) = (percentile(&raw_lat, 0.5), percentile(&mesh_lat, 0.5));
    let (raw_p99, mesh_p99) = (percentile(&raw_lat, 0.99), percentile(&mesh_lat, 0.99));

    println!(
        "sequential calls: {} per path; concurrent: {} per path, {IN_FLIGHT} in flight",
        raw_lat.len(),
        calls
    );
    println!(
        "{:<28} {:>12} {:>12} {:>8}",
        "", "raw nats", "mesh", "ratio"
    );
    println!(
        "{:<28} {:>12.1} {:>12.1} {:>8.3}",
        "latency p50 (us)",
        us(raw_p50),
        us(mesh_p50),
        us(mesh_p50) / us(raw_p50)
    );
    println!(
        "{:<28} {:>12.1} {:>12.1} {:>8.3}",
        "latency p99 (us)",
        us(raw_p99),
        us(mesh_p99),
        us(mesh_p99) / us(raw_p99)
    );
    println!(
        "{:<28} {:>12.0} {:>12.0} {:>8.3}",
        "throughput (calls/s)",
        raw_tput,
        mesh_tput,
        mesh_tput / raw_tput
    );
    // CPU per call: steadier than calls/s on a shared machine (a busy neighbour slows both
    // paths' wall time, not the work each call takes).
    let per_call = |d: Duration| us(d) / calls;
    for (what, r, m) in [
        ("cpu/call, bench process (us)", raw_cpu.own, mesh_cpu.own),
        (
            "cpu/call, nats-server (us)",
            raw_cpu.server,
            mesh_cpu.server,
        ),
        (
            "cpu/call, both (us)",
            raw_cpu.own + raw_cpu.server,
            mesh_cpu.own + mesh_cpu.server,
        ),
    ] {
        println!(
            "{what:<28} {:>12.2} {:>12.2} {:>8.3}",
            per_call(r),
            per_call(m),
            per_call(m) / per_call(r)
        );
    }
    println!(
        "per-round throughput ratios: min {:.3} median {:.3} max {:.3}",
        round_ratios[0],
        throughput_ratio,
        round_ratios[ROUNDS - 1]
    );
    println!(
        "relay latency_ratio={:.3} throughput_ratio={:.3} cpu_ratio={:.3}",
        us(mesh_p50) / us(raw_p50),
        throughput_ratio,
        us(mesh_cpu.own + mesh_cpu.server) / us(raw_cpu.own + raw_cpu.server)
    );
}

const MODULES: usize = 100;
const TOOLS_PER_MODULE: usize = 20;
const DISCOVERY_ROUNDS: usize = 30;

/// A module with `TOOLS_PER_MODULE` tools whose schemas look like real ones.
fn wide_module(i: usize) -> Module {
    let mut m = Module::new(
        format!("m{i:03}"),
        "1.0.0",
        "a module for the discovery benchmark",
    );
    for t in 0..TOOLS_PER_MODULE {
        m = m.tool(Tool::new(
            format!("tool_{t:02}"),
            "Does one thing to a dataset and says what it did, at some length, as tools do",
            json!({
                "type": "object",
                "properties": {
                    "path": {"type": "string", "description": "the object to work on"},
                    "limit": {"type": "integer", "minimum": 1, "maximum": 1000},
                    "mode": {"type": "string", "enum": ["fast", "careful", "dry"]}
                },
                "required": ["path"],
                "additionalProperties": false
            }),
            |_c: Call| async { ToolResult::text("done") },
        ));
    }
    m
}

async fn discovery(url: &str) {
    println!("== discovery: {MODULES} modules x {TOOLS_PER_MODULE} tools");
    let conns: Vec<async_nats::Client> = {
        let mut v = Vec::new();
        for _ in 0..10 {
            v.push(async_nats::connect(url).await.expect("connect"));
        }
        v
    };
    let catalog = mesh_catalog::module(conns[0].clone())
        .await
        .expect("catalog");
    let s = Serving::start(catalog, conns[0].clone(), ServeOptions::default())
        .await
        .expect("catalog serves");
    tokio::spawn(s.run(std::future::pending()));
    for i in 0..MODULES {
        // Registered once at start; no refresh needed during the run.
        let options = ServeOptions {
            register_every: Some(Duration::from_secs(3600)),
            ..ServeOptions::default()
        };
        let s = Serving::start(wide_module(i), conns[i % conns.len()].clone(), options)
            .await
            .expect("module serves");
        tokio::spawn(s.run(std::future::pending()));
    }
    let config = ConnectConfig {
        server: Some(url.to_owned()),
        isolated: true,
        ..Default::default()
    };
    let client = Client::connect(&config).await.expect("connect");
    // Wait until the catalogue lists every module (its view follows the bucket).
    loop {
        let d = client.discover(None, DEADLINE).await.expect("discover");
        if d.modules.len() == MODULES + 1 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let mut one = Vec::new();
    let mut all = Vec::new();
    for _ in 0..DISCOVERY_ROUNDS {
        let t = Instant::now();
        let reply = client.tools("m000", DEADLINE).await.expect("tools verb");
        one.push(t.elapsed());
        assert_eq!(reply.tools.len(), TOOLS_PER_MODULE);
        let t = Instant::now();
        let d = client.discover(None, DEADLINE).await.expect("discover");
        all.push(t.elapsed());
        let tools: usize = d
            .modules
            .iter()
            .map(|f| f.tools.as_ref().map(|r| r.tools.len()).unwrap_or(0))
            .sum();
        // The catalogue's own four tools besides.
        assert_eq!(tools, MODULES * TOOLS_PER_MODULE + 4);
    }
    // Where discovery's time goes: the listing's round trip (bytes only) in full and naming
    // the digests the client keeps, reading the full one, and the liveness fan-out (one
    // `$SRV.PING` to all, every pong in), each alone.
    let (mut fetch, mut brief, mut read, mut pings) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let nats = client.nats().clone();
    let known = serde_json::to_vec(&json!({ "known": client.kept().known() })).unwrap();
    let (mut page_bytes, mut brief_bytes) = (0, 0);
    for _ in 0..DISCOVERY_ROUNDS {
        let t = Instant::now();
        let page = nats
            .request(mesh_core::subjects::catalog::LISTING_SUBJECT, "{}".into())
            .await
            .expect("listing");
        fetch.push(t.elapsed());
        page_bytes = page.payload.len();
        let t = Instant::now();
        let parsed: mesh_core::subjects::catalog::ListingPage =
            serde_json::from_slice(&page.payload).expect("a page");
        read.push(t.elapsed());
        assert_eq!(parsed.modules.len(), MODULES + 1);
        let t = Instant::now();
        let page = nats
            .request(
                mesh_core::subjects::catalog::LISTING_SUBJECT,
                known.clone().into(),
            )
            .await
            .expect("listing");
        brief.push(t.elapsed());
        brief_bytes = page.payload.len();
        let t = Instant::now();
        let inbox = nats.new_inbox();
        let mut pongs = nats.subscribe(inbox.clone()).await.expect("inbox");
        nats.publish_with_reply("$SRV.PING", inbox, bytes::Bytes::new())
            .await
            .expect("ping");
        for _ in 0..MODULES + 1 {
            pongs.next().await.expect("a pong");
        }
        pings.push(t.elapsed());
    }
    for v in [&mut fetch, &mut brief, &mut read, &mut pings] {
        v.sort();
    }
    println!(
        "  of which: listing round trip {:.1} us ({} KB), naming what is kept {:.1} us ({} KB), reading the full one {:.1} us, every pong of one $SRV.PING {:.1} us (p50, each alone)",
        us(percentile(&fetch, 0.5)),
        page_bytes / 1000,
        us(percentile(&brief, 0.5)),
        brief_bytes / 1000,
        us(percentile(&read, 0.5)),
        us(percentile(&pings, 0.5)),
    );
    one.sort();
    all.sort();
    let (one_p50, all_p50) = (percentile(&one, 0.5), percentile(&all, 0.5));
    println!(
        "one round trip (tools verb of one module, p50): {:>10.1} us",
        us(one_p50)
    );
    println!(
        "discovery ({} modules, {} tools, p50):        {:>10.1} us",
        MODULES + 1,
        MODULES * TOOLS_PER_MODULE + 2,
        us(all_p50)
    );
    println!("discovery ratio={:.2}", us(all_p50) / us(one_p50));
}

const COLD_RUNS: usize = 100;
const COLD_WARMUP: usize = 5;

async fn cold_call(url: &str) {
    println!("== cold_call: whole `mesh call` processes on loopback, against /bin/true");
    let conn = async_nats::connect(url).await.expect("connect");
    let s = Serving::start(mesh_echo::module(), conn, quiet())
        .await
        .expect("echo serves");
    tokio::spawn(s.run(std::future::pending()));
    let bin = env!("CARGO_BIN_EXE_mesh");
    // Wall time and the child's CPU time (user + system, from the kernel once it is reaped).
    let time = |program: &'static str, args: Vec<&'static str>| async move {
        let cpu = cpu::children();
        let t = Instant::now();
        let out = tokio::process::Command::new(program)
            .args(&args)
            .env_remove("NATS_CONTEXT")
            .env("XDG_CONFIG_HOME", "/nonexistent")
            .output()
            .await
            .expect("process runs");
        let wall = t.elapsed();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        (wall, cpu::children() - cpu)
    };
    let server: &'static str = Box::leak(url.to_owned().into_boxed_str());
    let paths: [(&str, &'static str, Vec<&'static str>); 3] = [
        ("/bin/true (spawn, exec, exit)", "/bin/true", vec![]),
        ("mesh --version (start, exit)", bin, vec!["--version"]),
        (
            "mesh call echo (connect, call, exit)",
            bin,
            vec!["--server", server, "call", "echo", "text=hi"],
        ),
    ];
    let mut wall: [Vec<Duration>; 3] = Default::default();
    let mut cpu: [Vec<Duration>; 3] = Default::default();
    // The three alternate; which goes first rotates each round.
    for round in 0..COLD_WARMUP + COLD_RUNS {
        for i in 0..paths.len() {
            let k = (round + i) % paths.len();
            let (w, c) = time(paths[k].1, paths[k].2.clone()).await;
            if round >= COLD_WARMUP {
                wall[k].push(w);
                cpu[k].push(c);
            }
        }
    }
    let ms = |d: Duration| us(d) / 1000.0;
    let mut p50 = [0.0; 3];
    for (k, (name, _, _)) in paths.iter().enumerate() {
        wall[k].sort();
        cpu[k].sort();
        p50[k] = ms(percentile(&wall[k], 0.5));
        println!(
            "{name:<42} p50 / p99: {:>6.2} / {:>6.2} ms   cpu p50 {:>6.2} ms",
            p50[k],
            ms(percentile(&wall[k], 0.99)),
            ms(percentile(&cpu[k], 0.5))
        );
    }
    let [true_ms, version_ms, call_ms] = p50;
    println!(
        "mesh --version over /bin/true (p50): {:+.2} ms ({:.2}x)",
        version_ms - true_ms,
        version_ms / true_ms
    );
    println!(
        "mesh call over /bin/true (p50):      {:+.2} ms ({:.2}x)",
        call_ms - true_ms,
        call_ms / true_ms
    );
    println!("cold_call ms={call_ms:.2} true_ms={true_ms:.2} version_ms={version_ms:.2}");
}

const MCP_ROUNDS: usize = 10;
const MCP_PER_ROUND: usize = 300;

/// An MCP server on stdio, initialised at 2025-06-18: one JSON-RPC line out, one back.
struct StdioServer {
    _child: tokio::process::Child,
    stdin: tokio::process::ChildStdin,
    lines: tokio::io::Lines<tokio::io::BufReader<tokio::process::ChildStdout>>,
}

impl StdioServer {
    async fn start(mut command: tokio::process::Command) -> StdioServer {
        use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
        let mut child = command
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .unwrap_or_else(|e| panic!("{command:?} runs: {e}"));
        let mut server = StdioServer {
            stdin: child.stdin.take().expect("stdin"),
            lines: BufReader::new(child.stdout.take().expect("stdout")).lines(),
            _child: child,
        };
        let init = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {},
            "clientInfo": {"name": "bench", "version": "0"}}});
        // The `initialized` notification gets no answer, so it goes without a read.
        let opening = format!(
            "{init}\n{}\n",
            json!({"jsonrpc": "2.0", "method": "notifications/initialized"})
        );
        server
            .stdin
            .write_all(opening.as_bytes())
            .await
            .expect("write");
        server.next().await;
        server
    }

    async fn next(&mut self) -> String {
        self.lines
            .next_line()
            .await
            .expect("read")
            .expect("the server answered")
    }

    /// One line out and the answer back.
    async fn exchange(&mut self, line: &str) -> String {
        use tokio::io::AsyncWriteExt;
        self.stdin.write_all(line.as_bytes()).await.expect("write");
        self.stdin.write_all(b"\n").await.expect("write");
        self.stdin.flush().await.expect("flush");
        self.next().await
    }
}

/// The SDKs the peers need, installed as `bin/test` installs its clients (`bin/deps.sh`).
fn install_sdks() -> (String, String) {
    let root = env!("CARGO_MANIFEST_DIR");
    let status = std::process::Command::new("bash")
        .current_dir(root)
        .args([
            "-c",
            ". bin/deps.sh && ensure_node_packages && ensure_python_packages",
        ])
        .status()
        .expect("bash runs");
    assert!(
        status.success(),
        "bin/deps.sh could not install the MCP SDKs (npm, pip); the comparison needs them"
    );
    (
        format!("{root}/target/js/node_modules"),
        format!("{root}/target/py/bin/python"),
    )
}

async fn mcp(url: &str) {
    use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

    println!(
        "== mcp: tools/call over stdio: `mesh mcp` (relayed over the bus) vs the official SDKs' own stdio servers (answering in their process) and the raw bus"
    );
    let (node_path, python) = install_sdks();
    let conn = async_nats::connect(url).await.expect("connect");
    let catalog = mesh_catalog::module(conn.clone()).await.expect("catalog");
    let s = Serving::start(catalog, conn.clone(), ServeOptions::default())
        .await
        .expect("catalog serves");
    tokio::spawn(s.run(std::future::pending()));
    let s = Serving::start(mesh_echo::module(), conn, ServeOptions::default())
        .await
        .expect("echo serves");
    tokio::spawn(s.run(std::future::pending()));

    let root = env!("CARGO_MANIFEST_DIR");
    let mut mesh = tokio::process::Command::new(env!("CARGO_BIN_EXE_mesh"));
    mesh.args(["--server", url, "mcp"])
        .env("XDG_CONFIG_HOME", "/nonexistent");
    let mut ts = tokio::process::Command::new("node");
    ts.arg(format!("{root}/benches/js/stdio_echo.cjs"))
        .env("NODE_PATH", &node_path);
    let mut py = tokio::process::Command::new(&python);
    py.arg(format!("{root}/benches/py/stdio_echo.py"));
    // mesh mcp, the TypeScript SDK's server, the Python SDK's server.
    let mut servers = [
        StdioServer::start(mesh).await,
        StdioServer::start(ts).await,
        StdioServer::start(py).await,
    ];
    const NAMES: [&str; 3] = ["mesh mcp", "TypeScript SDK", "Python SDK"];

    // The floor any stdio server pays: a line to another process and back (`cat`).
    let mut cat = tokio::process::Command::new("cat")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("cat runs");
    let mut cat_in = cat.stdin.take().expect("stdin");
    let mut cat_out = BufReader::new(cat.stdout.take().expect("stdout")).lines();

    let raw = async_nats::connect(url).await.expect("connect");
    let body = bytes::Bytes::from(serde_json::to_vec(&json!({"text": TEXT})).expect("json"));
    let (mut raw_lat, mut pipe_lat) = (Vec::new(), Vec::new());
    let mut lat: [Vec<Duration>; 3] = Default::default();
    let mut id = 1u64;
    for round in 0..=MCP_ROUNDS {
        for step in 0..MCP_PER_ROUND {
            let t = Instant::now();
            let msg = raw
                .request("mesh.echo.echo", body.clone())
                .await
                .expect("raw");
            let took = t.elapsed();
            assert!(!msg.payload.is_empty());
            // Each server goes first in turn, so none always follows the same one.
            let mut answer = String::new();
            for k in 0..servers.len() {
                let which = (step + k) % servers.len();
                id += 1;
                let call = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
                    "params": {"name": "echo", "arguments": {"text": TEXT}}});
                let line = call.to_string();
                let t = Instant::now();
                answer = servers[which].exchange(&line).await;
                let took_server = t.elapsed();
                assert!(answer.contains(TEXT), "{}: {answer}", NAMES[which]);
                if round > 0 {
                    lat[which].push(took_server);
                }
            }
            let t = Instant::now();
            cat_in.write_all(answer.as_bytes()).await.expect("write");
            cat_in.write_all(b"\n").await.expect("write");
            cat_in.flush().await.expect("flush");
            cat_out.next_line().await.expect("read").expect("a line");
            let took_pipe = t.elapsed();
            // Round 0 warms every path (and the relay's list) up.
            if round > 0 {
                raw_lat.push(took);
                pipe_lat.push(took_pipe);
            }
        }
    }
    raw_lat.sort();
    pipe_lat.sort();
    lat.iter_mut().for_each(|l| l.sort());
    let p = |l: &Vec<Duration>, q: f64| us(percentile(l, q));
    println!(
        "{:<28} {:>12} {:>12} {:>12} {:>12}",
        "", "raw bus", NAMES[0], NAMES[1], NAMES[2]
    );
    for (label, q) in [("latency p50 (us)", 0.5), ("latency p99 (us)", 0.99)] {
        println!(
            "{label:<28} {:>12.1} {:>12.1} {:>12.1} {:>12.1}",
            p(&raw_lat, q),
            p(&lat[0], q),
            p(&lat[1], q),
            p(&lat[2], q)
        );
    }
    println!(
        "{:<28} {:>12.1}   (a line through `cat` and back: the floor of any stdio server)",
        "pipe round trip p50 (us)",
        p(&pipe_lat, 0.5)
    );
    println!("mcp overhead_us={:.1}", p(&lat[0], 0.5) - p(&raw_lat, 0.5));
    for (peer, name) in [(1, "ts"), (2, "python")] {
        println!(
            "mcp vs_{name} p50_ratio={:.3} p99_ratio={:.3}",
            p(&lat[0], 0.5) / p(&lat[peer], 0.5),
            p(&lat[0], 0.99) / p(&lat[peer], 0.99)
        );
    }
}

const SEARCHES: [&str; 8] = [
    "Peromyscus leucopus",
    "white-footed mouse",
    "deer mouse",
    "Myodes gapperi",
    "southern red-backed vole",
    "human",
    "house mouse",
    "eastern chipmunk",
];

async fn ontology() {
    let file = std::path::Path::new(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../shared/ontologies/ncbitaxon.obo.gz"
    ));
    println!("== ontology: NCBITaxon into the decide index");
    if !file.exists() {
        println!("skipped: {} is not here", file.display());
        return;
    }
    // Baseline: only reading the file (decompress and parse every term).
    let t = Instant::now();
    let mut reader = mesh_ontology::obo::Reader::open(file).expect("open");
    let mut n = 0u64;
    while reader.next_term().expect("read").is_some() {
        n += 1;
    }
    let read_s = t.elapsed().as_secs_f64();

    // The import, as a person runs it: a `mesh decide ontology import` process, whose peak
    // resident memory the kernel reports once it is gone.
    let dir = tempfile::tempdir().expect("temp dir");
    let index = dir.path().join("ontology.sqlite");
    let t = Instant::now();
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_mesh"))
        .args(["decide", "ontology", "import"])
        .arg(file)
        .arg("--index")
        .arg(&index)
        .output()
        .await
        .expect("mesh runs");
    let import_s = t.elapsed().as_secs_f64();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // SAFETY: getrusage fills the struct it is given.
    let rss_mib = unsafe {
        let mut usage: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_CHILDREN, &mut usage);
        usage.ru_maxrss as f64 / 1024.0
    };

    let ix = mesh_ontology::index::Index::open(&index).expect("index");
    let db = rusqlite::Connection::open(&index).expect("db");
    let (mut search, mut lookup) = (Vec::new(), Vec::new());
    for round in 0..=20 {
        for q in SEARCHES {
            let t = Instant::now();
            let found = ix.search("ncbitaxon", q, 8).expect("search");
            let took = t.elapsed();
            assert!(!found.is_empty(), "{q}");
            let curie = found[0].curie.clone();
            let t = Instant::now();
            let label: String = db
                .query_row("SELECT label FROM terms WHERE curie = ?1", [&curie], |r| {
                    r.get(0)
                })
                .expect("lookup");
            let took_lookup = t.elapsed();
            assert!(!label.is_empty());
            if round > 0 {
                search.push(took);
                lookup.push(took_lookup);
            }
        }
    }
    search.sort();
    lookup.sort();
    println!("terms: {n}");
    println!("read only (decompress + parse):   {read_s:>8.2} s");
    println!("import (read + index, a process): {import_s:>8.2} s, peak resident {rss_mib:.0} MiB");
    println!(
        "search p50 / p99:  {:>8.1} / {:.1} us   (lookup by id p50 {:.1} us)",
        us(percentile(&search, 0.5)),
        us(percentile(&search, 0.99)),
        us(percentile(&lookup, 0.5))
    );
    println!(
        "ontology import_s={import_s:.2} rss_mib={rss_mib:.0} search_p50_us={:.1}",
        us(percentile(&search, 0.5))
    );
}

/// A 30-column card: the example's ten columns and twenty more of the kinds field data has
/// (kept once, beside decide's own annotate bench).
fn wide_card() -> String {
    include_str!("../crates/decide/benches/wide_card.md").to_owned()
}

fn annotate() {
    use mesh_decide::{backend::Embedded, card, graph, policy::Policy, store::sidecar::Sidecar};
    use mesh_ontology::index::Index;

    println!("== annotate: a 30-column card, PATO, UBERON, EFO, CHEBI and NCBITaxon indexed");
    let shared = std::path::Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../shared/ontologies"));
    if !shared.exists() {
        println!("skipped: {} is not here", shared.display());
        return;
    }
    let dir = tempfile::tempdir().expect("temp dir");
    let mut index = Index::open(&dir.path().join("ontology.sqlite")).expect("index");
    for o in ["pato", "uberon", "efo", "chebi", "ncbitaxon"] {
        index
            .import(&shared.join(format!("{o}.obo.gz")), |_| {})
            .expect("import");
    }
    let mut sidecar = Sidecar::open(&dir.path().join("sidecar.sqlite")).expect("sidecar");
    let text = wide_card();
    let card = card::parse(&text).expect("card");
    assert_eq!(card.columns.len(), 30);
    let policy = Policy::defaults();
    let search = &index;
    // Baseline: the searches a run makes, alone (one per column, in the ontology the
    // column's aspect points at).
    let searches: Vec<(String, String)> = {
        let run = graph::annotate_into(&card, search, &Embedded, &policy, &mut sidecar, None, None)
            .expect("annotate");
        run.groups
            .iter()
            .map(|g| {
                let c = card
                    .columns
                    .iter()
                    .find(|c| c.name == g.column)
                    .expect("column");
                (g.ontology.clone(), format!("{} {}", c.name, c.description))
            })
            .collect()
    };
    // With MESH_BENCH_DATABASE (a PostgreSQL URL), the same runs with the sidecar there too,
    // as decide run as more than one instance keeps it, alternating with SQLite's.
    let mut shared = std::env::var("MESH_BENCH_DATABASE")
        .ok()
        .map(|url| Sidecar::connect(&url).expect("the sidecar on MESH_BENCH_DATABASE"));
    let (mut runs, mut bare, mut on_pg) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..20 {
        let t = Instant::now();
        for (o, words) in &searches {
            let _ = index.search(o, words, 8).expect("search");
        }
        bare.push(t.elapsed());
        let t = Instant::now();
        graph::annotate_into(&card, search, &Embedded, &policy, &mut sidecar, None, None)
            .expect("annotate");
        runs.push(t.elapsed());
        if let Some(pg) = &mut shared {
            let t = Instant::now();
            graph::annotate_into(&card, search, &Embedded, &policy, pg, None, None)
                .expect("annotate on PostgreSQL");
            on_pg.push(t.elapsed());
        }
    }
    runs.sort();
    bare.sort();
    on_pg.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    println!("groups per run: {}", searches.len());
    println!(
        "searches alone p50:            {:>8.2} ms",
        ms(percentile(&bare, 0.5))
    );
    println!(
        "annotate p50 / p99:            {:>8.2} / {:.2} ms (questions, searches, one sidecar transaction)",
        ms(percentile(&runs, 0.5)),
        ms(percentile(&runs, 0.99))
    );
    if !on_pg.is_empty() {
        println!(
            "annotate, sidecar on PostgreSQL p50 / p99: {:>8.2} / {:.2} ms ({:.2}x SQLite's p50)",
            ms(percentile(&on_pg, 0.5)),
            ms(percentile(&on_pg, 0.99)),
            ms(percentile(&on_pg, 0.5)) / ms(percentile(&runs, 0.5))
        );
    }
    println!("annotate p50_ms={:.2}", ms(percentile(&runs, 0.5)));
}

/// A module whose one tool answers `bytes` bytes of text.
fn blob() -> Module {
    Module::new("blob", "1.0.0", "large answers").tool(Tool::new(
        "get",
        "answers as many bytes as asked",
        json!({"type": "object", "properties": {"bytes": {"type": "integer"}}}),
        |call: Call| async move {
            let n = call.args["bytes"].as_u64().unwrap_or(0) as usize;
            ToolResult::text("x".repeat(n))
        },
    ))
}

/// p50 of `calls` calls of blob_get for `bytes` bytes on the bus at `url`.
async fn large_p50(url: &str, bytes: usize, calls: usize) -> Duration {
    let module_conn = async_nats::connect(url).await.expect("connect");
    let serving = Serving::start(blob(), module_conn, quiet())
        .await
        .expect("blob serves");
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(serving.run(async {
        let _ = stopped.await;
    }));
    let client = Client::connect(&ConnectConfig {
        server: Some(url.to_owned()),
        isolated: true,
        ..Default::default()
    })
    .await
    .expect("connect");
    let tool = FullName::parse("blob_get").unwrap();
    let args = json!({ "bytes": bytes });
    let mut times = Vec::with_capacity(calls);
    for i in 0..calls + 2 {
        let started = Instant::now();
        let r = client
            .call(&tool, &args, DEADLINE)
            .await
            .expect("a large call");
        let took = started.elapsed();
        assert!(r.text_content().len() == bytes, "the whole result");
        // The first two warm the bucket and the connections.
        if i >= 2 {
            times.push(took);
        }
    }
    let _ = stop.send(());
    let _ = task.await;
    times.sort();
    percentile(&times, 0.5)
}

async fn large(dir: &std::path::Path) {
    println!("== large");
    const BYTES: usize = 10_000_000;
    const CALLS: usize = 20;
    // One bus with the default 1 MiB messages (the claim), one whose messages may hold the
    // whole result (nats-server allows up to 64 MiB).
    let mut servers = Vec::new();
    for (name, extra) in [("claim", ""), ("one", "max_payload: 16777216\n")] {
        let conf = dir.join(format!("large-{name}.conf"));
        std::fs::write(
            &conf,
            format!(
                "{}{extra}",
                layout::single_account(-1, &dir.join(format!("js-{name}")))
            ),
        )
        .expect("config");
        servers.push(
            NatsServer::start(&conf, None, &dir.join(format!("large-{name}.log")))
                .await
                .unwrap_or_else(|e| panic!("{e}")),
        );
    }
    let claim = large_p50(&servers[0].url(), BYTES, CALLS).await;
    let one = large_p50(&servers[1].url(), BYTES, CALLS).await;
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    println!(
        "large claim_p50_ms={:.1} one_message_p50_ms={:.1} ratio={:.2}",
        ms(claim),
        ms(one),
        ms(claim) / ms(one)
    );
}

const BRIDGE_ROUNDS: usize = 5;
const BRIDGE_SEQUENTIAL: usize = 400;
const BRIDGE_CONCURRENT: usize = 3_200;

/// The TypeScript SDK's client calling server-everything's `echo` directly: each call's
/// latency and the wall time.
async fn sdk_direct(
    node_path: &str,
    server: &str,
    calls: usize,
    in_flight: usize,
) -> (Vec<Duration>, Duration) {
    let root = env!("CARGO_MANIFEST_DIR");
    let out = tokio::process::Command::new("node")
        .arg(format!("{root}/benches/js/sdk_client_echo.cjs"))
        .args([server, &calls.to_string(), &in_flight.to_string()])
        .env("NODE_PATH", node_path)
        .output()
        .await
        .expect("node runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    let lat = v["latencies"]
        .as_array()
        .expect("latencies")
        .iter()
        .map(|l| Duration::from_secs_f64(l.as_f64().expect("µs") / 1e6))
        .collect();
    (
        lat,
        Duration::from_secs_f64(v["wall"].as_f64().expect("wall")),
    )
}

async fn bridge(url: &str) {
    println!(
        "== bridge: server-everything's echo through the mesh (client -> bus -> mesh run --mcp -> stdio) vs the TypeScript SDK's client on the same server over stdio, and the raw bus"
    );
    let (node_path, _) = install_sdks();
    let server = format!("{node_path}/@modelcontextprotocol/server-everything/dist/index.js");
    let mut bridge = tokio::process::Command::new(env!("CARGO_BIN_EXE_mesh"))
        .args([
            "--server",
            url,
            "run",
            "--mcp",
            "everything",
            "--",
            "node",
            &server,
            "stdio",
        ])
        .env("XDG_CONFIG_HOME", "/nonexistent")
        .stdin(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("mesh run --mcp runs");
    let conn = async_nats::connect(url).await.expect("connect");
    // The raw round trip: a bare responder on the same bus.
    let mut sub = conn.subscribe("bench.bridge.raw").await.expect("subscribe");
    let responder = conn.clone();
    tokio::spawn(async move {
        while let Some(m) = sub.next().await {
            if let Some(reply) = m.reply {
                let _ = responder.publish(reply, m.payload).await;
            }
        }
    });
    let config = ConnectConfig {
        server: Some(url.to_owned()),
        isolated: true,
        ..ConnectConfig::default()
    };
    let client = Client::connect(&config).await.expect("client");
    let mesh = Mesh {
        client,
        tool: Arc::new(FullName::parse("everything_echo").expect("name")),
        args: Arc::new(json!({"message": TEXT})),
    };
    // Until the bridge serves.
    let ready = Instant::now();
    loop {
        if let Ok(r) = mesh
            .client
            .call(&mesh.tool, &mesh.args, Duration::from_secs(1))
            .await
            && !r.is_error
        {
            break;
        }
        assert!(
            ready.elapsed() < Duration::from_secs(60),
            "the bridge never served"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let raw = Raw {
        nats: conn,
        body: bytes::Bytes::from_static(b"x"),
    };
    let (mut raw_lat, mut mesh_lat, mut sdk_lat) = (Vec::new(), Vec::new(), Vec::new());
    let (mut mesh_wall, mut sdk_wall) = (Duration::ZERO, Duration::ZERO);
    let mut warm = Vec::new();
    sequential(&mesh, WARMUP, &mut warm).await;
    for _ in 0..BRIDGE_ROUNDS {
        // Sequential: the raw bus, the SDK directly, the mesh, in turn.
        for _ in 0..BRIDGE_SEQUENTIAL {
            let t = Instant::now();
            let m = raw
                .nats
                .request("bench.bridge.raw", raw.body.clone())
                .await
                .expect("raw");
            assert!(!m.payload.is_empty());
            raw_lat.push(t.elapsed());
        }
        let (lat, _) = sdk_direct(&node_path, &server, BRIDGE_SEQUENTIAL, 1).await;
        sdk_lat.extend(lat);
        sequential(&mesh, BRIDGE_SEQUENTIAL, &mut mesh_lat).await;
        // 32 in flight.
        let (_, wall) = sdk_direct(&node_path, &server, BRIDGE_CONCURRENT, IN_FLIGHT).await;
        sdk_wall += wall;
        mesh_wall += concurrent(&mesh, BRIDGE_CONCURRENT).await;
    }
    for l in [&mut raw_lat, &mut mesh_lat, &mut sdk_lat] {
        l.sort();
    }
    let calls = (BRIDGE_ROUNDS * BRIDGE_CONCURRENT) as f64;
    println!(
        "{:<28} {:>12} {:>14} {:>12}",
        "", "raw bus", "SDK direct", "mesh bridge"
    );
    for (label, q) in [("latency p50 (us)", 0.5), ("latency p99 (us)", 0.99)] {
        println!(
            "{label:<28} {:>12.1} {:>14.1} {:>12.1}",
            us(percentile(&raw_lat, q)),
            us(percentile(&sdk_lat, q)),
            us(percentile(&mesh_lat, q))
        );
    }
    println!(
        "{:<28} {:>12} {:>14.0} {:>12.0}",
        "calls/s, 32 in flight",
        "",
        calls / sdk_wall.as_secs_f64(),
        calls / mesh_wall.as_secs_f64()
    );
    let (mesh_p50, sdk_p50, raw_p50) = (
        us(percentile(&mesh_lat, 0.5)),
        us(percentile(&sdk_lat, 0.5)),
        us(percentile(&raw_lat, 0.5)),
    );
    println!(
        "bridge p50_us={mesh_p50:.1} sdk_p50_us={sdk_p50:.1} raw_p50_us={raw_p50:.1} added_round_trips={:.2} throughput_ratio={:.3}",
        (mesh_p50 - sdk_p50) / raw_p50,
        sdk_wall.as_secs_f64() / mesh_wall.as_secs_f64()
    );
    let _ = bridge.kill().await;
}

/// An OTLP/HTTP endpoint that takes every export and drops it, counting the bytes.
async fn otlp_sink() -> (String, Arc<std::sync::atomic::AtomicUsize>) {
    use http_body_util::BodyExt;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("address");
    let received = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counted = received.clone();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let counted = counted.clone();
            tokio::spawn(async move {
                let service = hyper::service::service_fn(
                    move |req: hyper::Request<hyper::body::Incoming>| {
                        let counted = counted.clone();
                        async move {
                            let body = req.into_body().collect().await.map(|b| b.to_bytes());
                            let n = body.map(|b| b.len()).unwrap_or(0);
                            counted.fetch_add(n, std::sync::atomic::Ordering::Relaxed);
                            Ok::<_, std::convert::Infallible>(
                                hyper::Response::builder()
                                    .header("content-type", "application/x-protobuf")
                                    .body(http_body_util::Full::new(bytes::Bytes::new()))
                                    .expect("response"),
                            )
                        }
                    },
                );
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(hyper_util::rt::TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    (format!("http://{addr}"), received)
}

/// The relay section in a process of its own for each way tracing can be: off, on but not
/// sampled, sampled; each prints its own table (the mesh against raw NATS in one process).
async fn tracing_cost() {
    println!("== tracing");
    let (endpoint, received) = otlp_sink().await;
    let exe = std::env::current_exe().expect("this benchmark's path");
    let mut summary = Vec::new();
    for (name, sampler) in [
        ("off", None),
        ("unsampled", Some("always_off")),
        ("sampled", Some("always_on")),
    ] {
        let before = received.load(std::sync::atomic::Ordering::Relaxed);
        let mut cmd = tokio::process::Command::new(&exe);
        cmd.arg("relay");
        for k in [
            "OTEL_EXPORTER_OTLP_ENDPOINT",
            "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
            "OTEL_TRACES_SAMPLER",
        ] {
            cmd.env_remove(k);
        }
        if let Some(sampler) = sampler {
            cmd.env("OTEL_EXPORTER_OTLP_ENDPOINT", &endpoint)
                .env("OTEL_TRACES_SAMPLER", sampler)
                .env("OTEL_SERVICE_NAME", format!("bench-{name}"));
        }
        let out = cmd.output().await.expect("the relay section runs");
        let text = String::from_utf8_lossy(&out.stdout);
        println!("-- tracing {name}");
        for line in text.lines().filter(|l| !l.starts_with("==")) {
            println!("{line}");
        }
        let ratio = text
            .lines()
            .find_map(|l| l.strip_prefix("relay latency_ratio="))
            .and_then(|r| r.split_whitespace().next())
            .unwrap_or("?")
            .to_owned();
        let exported = received.load(std::sync::atomic::Ordering::Relaxed) - before;
        println!("exported over OTLP: {} KiB", exported / 1024);
        summary.push(format!("{name}={ratio}"));
    }
    println!("tracing {}", summary.join(" "));
}

/// Raw requests on one subject, from whichever account the connection is in.
#[derive(Clone)]
struct OnSubject {
    nats: async_nats::Client,
    subject: Arc<str>,
    body: bytes::Bytes,
}

impl Path for OnSubject {
    async fn call(&self) {
        let msg = self
            .nats
            .request(self.subject.to_string(), self.body.clone())
            .await
            .expect("request");
        assert!(!msg.payload.is_empty());
    }
}

/// A configuration for the witness section: `listen` on a free port and JetStream in `dir`.
fn witness_config(dir: &std::path::Path, accounts: &str) -> String {
    format!(
        "listen: \"127.0.0.1:-1\"\njetstream {{ store_dir: {:?} }}\n{accounts}\n",
        dir.display().to_string()
    )
}

/// One import, person to module, with `export` as the module's tool export(s) and `import`
/// as the people's import(s); the log's account keeps whatever the module's account says on
/// `mesh-log.calls.>` (the server's events, where tracked).
fn one_hop(export: &str, import: &str) -> String {
    format!(
        r#"accounts {{
  MODULE_echo {{
    users: [ {{ user: echo, password: pw-echo }} ]
    exports: [
{export}
      {{ stream: "mesh-log.calls.>", accounts: [MESH] }}
    ]
  }}
  MESH {{
    jetstream: enabled
    users: [ {{ user: owner, password: pw-owner }} ]
    imports: [ {{ stream: {{ account: MODULE_echo, subject: "mesh-log.calls.>" }} }} ]
  }}
  PEOPLE {{
    users: [ {{ user: ann, password: pw-ann }} ]
    imports: [
{import}
    ]
  }}
}}"#
    )
}

/// The call log's cost on nats-server, with raw requests (no mesh client, no runtime) from a
/// person to a responder: plain request/reply on a plain server, one import, one import
/// tracked per module and per tool (events kept), and the mesh's account between.
async fn witness(dir: &std::path::Path) {
    println!("== witness");
    let people = [layout::Person {
        user: "ann".into(),
        password: "pw-ann".into(),
        may_call: vec!["mesh.echo.>".into()],
    }];
    let modules = [layout::ModuleUser::new("echo", "pw-echo")];
    let the_layout = layout::accounts_owned(-1, &dir.join("layout"), &modules, &people, "pw-owner");
    let import =
        r#"      { service: { account: MODULE_echo, subject: "mesh.echo.>" }, share: true }"#;
    let variants: Vec<(&str, String, bool)> = vec![
        ("plain", witness_config(&dir.join("plain"), ""), false),
        (
            "one import",
            witness_config(
                &dir.join("one"),
                &one_hop(
                    r#"      { service: "mesh.echo.>", response: singleton, threshold: "1h", accounts: [PEOPLE] }"#,
                    import,
                ),
            ),
            false,
        ),
        (
            "import unshared",
            witness_config(
                &dir.join("unshared"),
                &one_hop(
                    r#"      { service: "mesh.echo.>", response: singleton, threshold: "1h", accounts: [PEOPLE] }"#,
                    r#"      { service: { account: MODULE_echo, subject: "mesh.echo.>" } }"#,
                ),
            ),
            false,
        ),
        (
            "tracked, unkept",
            witness_config(
                &dir.join("unkept"),
                &one_hop(
                    r#"      { service: "mesh.echo.echo", response: singleton, threshold: "1h", accounts: [PEOPLE], latency: { sampling: 100%, subject: "mesh-log.calls.echo.echo" } }"#,
                    r#"      { service: { account: MODULE_echo, subject: "mesh.echo.echo" }, share: true }"#,
                ),
            ),
            false,
        ),
        (
            "tracked/module",
            witness_config(
                &dir.join("module"),
                &one_hop(
                    r#"      { service: "mesh.echo.>", response: singleton, threshold: "1h", accounts: [PEOPLE], latency: { sampling: 100%, subject: "mesh-log.calls.echo" } }"#,
                    import,
                ),
            ),
            true,
        ),
        (
            "tracked/tool",
            witness_config(
                &dir.join("tool"),
                &one_hop(
                    r#"      { service: "mesh.echo.echo", response: singleton, threshold: "1h", accounts: [PEOPLE], latency: { sampling: 100%, subject: "mesh-log.calls.echo.echo" } }
      { service: "mesh.echo.tools", response: singleton, threshold: "1h", accounts: [PEOPLE] }"#,
                    r#"      { service: { account: MODULE_echo, subject: "mesh.echo.echo" }, share: true }
      { service: { account: MODULE_echo, subject: "mesh.echo.tools" }, share: true }"#,
                ),
            ),
            true,
        ),
        ("the layout", the_layout, true),
    ];
    let mut servers = Vec::new();
    let mut paths = Vec::new();
    for (name, text, kept) in variants {
        let file = dir.join(format!("{}.conf", name.replace([' ', '/'], "-")));
        std::fs::write(&file, text).expect("config");
        let server = NatsServer::start(&file, None, &file.with_extension("log"))
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        let url = server.url();
        let plain = name == "plain";
        let login = |user: &str| {
            if plain {
                async_nats::ConnectOptions::new()
            } else {
                async_nats::ConnectOptions::with_user_and_password(
                    user.into(),
                    format!("pw-{user}"),
                )
            }
        };
        if kept {
            let owner = login("owner").connect(&url).await.expect("owner");
            if name == "the layout" {
                mesh_bus::calllog::ensure(
                    &owner,
                    mesh_bus::calllog::Retention::default(),
                    1,
                    Default::default(),
                )
                .await
                .expect("the log's streams");
            } else {
                async_nats::jetstream::new(owner)
                    .create_stream(async_nats::jetstream::stream::Config {
                        name: "MESH_CALLS".into(),
                        subjects: vec!["mesh-log.calls.>".into()],
                        ..Default::default()
                    })
                    .await
                    .expect("the log's stream");
            }
        }
        let echo = login("echo")
            .custom_inbox_prefix("_INBOX.echo")
            .connect(&url)
            .await
            .expect("echo");
        let mut sub = echo
            .queue_subscribe("mesh.echo.echo", "echo".into())
            .await
            .expect("subscribe");
        let answering = echo.clone();
        tokio::spawn(async move {
            while let Some(msg) = sub.next().await {
                if let Some(reply) = msg.reply {
                    let _ = answering.publish(reply, msg.payload).await;
                }
            }
        });
        echo.flush().await.expect("flush");
        let ann = login("ann")
            .custom_inbox_prefix("_INBOX.ann")
            .connect(&url)
            .await
            .expect("ann");
        let path = OnSubject {
            nats: ann,
            subject: Arc::from("mesh.echo.echo"),
            body: bytes::Bytes::from_static(b"{\"text\":\"the quick brown fox\"}"),
        };
        let mut scratch = Vec::new();
        sequential(&path, WARMUP, &mut scratch).await;
        paths.push((name, path, server.pid()));
        servers.push(server);
    }
    let n = paths.len();
    let mut lat: Vec<Vec<Duration>> = vec![Vec::new(); n];
    let mut time = vec![Duration::ZERO; n];
    let mut cpu = vec![Cpu::default(); n];
    for round in 0..ROUNDS {
        for k in 0..n {
            // Each takes its turn first.
            let i = (round + k) % n;
            sequential(&paths[i].1, SEQUENTIAL_PER_ROUND, &mut lat[i]).await;
            let (wall, used) = concurrent_cpu(&paths[i].1, paths[i].2).await;
            time[i] += wall;
            cpu[i].add(used);
        }
    }
    let calls = (ROUNDS * CONCURRENT_PER_ROUND) as f64;
    println!(
        "{:<16} {:>10} {:>10} {:>12} {:>8} {:>16}",
        "", "p50 (us)", "p99 (us)", "calls/s", "ratio", "server cpu/call"
    );
    let base = calls / time[0].as_secs_f64();
    let base_cpu = us(cpu[0].server) / calls;
    let mut ratios = Vec::new();
    for (i, (name, _, _)) in paths.iter().enumerate() {
        lat[i].sort();
        let tput = calls / time[i].as_secs_f64();
        let per_call = us(cpu[i].server) / calls;
        println!(
            "{:<16} {:>10.1} {:>10.1} {:>12.0} {:>8.3} {:>9.2} ({:.2}x)",
            name,
            us(percentile(&lat[i], 0.5)),
            us(percentile(&lat[i], 0.99)),
            tput,
            tput / base,
            per_call,
            per_call / base_cpu,
        );
        ratios.push(tput / base);
    }
    println!(
        "witness one_import={:.3} tracked_module={:.3} tracked_tool={:.3} layout={:.3}",
        ratios[1], ratios[4], ratios[5], ratios[6]
    );
    drop(servers);
}

/// Set in a child of this benchmark: it is the plain responder (an async-nats subscriber
/// answering every request with its body) on the bus at this URL, until killed.
const PLAIN_RESPONDER: &str = "MESH_BENCH_PLAIN_RESPONDER";

/// The plain responder's loop: what a NATS user writes first.
async fn plain_responder(url: &str) {
    let nats = async_nats::connect(url).await.expect("connect");
    let mut sub = nats.subscribe("bench.plain").await.expect("subscribe");
    nats.flush().await.expect("flush");
    println!("ready");
    while let Some(msg) = sub.next().await {
        if let Some(reply) = msg.reply {
            let _ = nats.publish(reply, msg.payload).await;
        }
    }
}

/// A child process that is killed when dropped.
struct Child(std::process::Child);

impl Drop for Child {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `n` calls with `IN_FLIGHT` callers, each call's time kept; returns the wall time.
async fn concurrent_timed(
    path: &(impl Path + 'static),
    n: usize,
    into: &mut Vec<Duration>,
) -> Duration {
    let t = Instant::now();
    let per = n / IN_FLIGHT;
    let mut tasks = Vec::with_capacity(IN_FLIGHT);
    for _ in 0..IN_FLIGHT {
        let p = path.clone();
        tasks.push(tokio::spawn(async move {
            let mut times = Vec::with_capacity(per);
            for _ in 0..per {
                let t = Instant::now();
                p.call().await;
                times.push(t.elapsed());
            }
            times
        }));
    }
    for task in tasks {
        into.extend(task.await.expect("caller task"));
    }
    t.elapsed()
}

/// What one path of the deployed section measured.
#[derive(Default)]
struct Measured {
    one_at_a_time: Vec<Duration>,
    in_flight: Vec<Duration>,
    wall: Duration,
    driver: Duration,
    server: Duration,
    responder: Duration,
}

/// The mesh as `mesh up` deploys it — its accounts layout, the call log on, echo served by
/// `mesh up`'s own process — against plain request/reply on a plain nats-server with a plain
/// async-nats responder in a process of its own. Both are driven by raw async-nats requests
/// from this process (and the mesh also by its own client), alternating in short blocks;
/// each process's CPU per call is printed beside the calls/s and latencies.
async fn deployed(dir: &std::path::Path) {
    println!("== deployed");
    // The plain side: a server with no configuration but its port, a responder of its own.
    let plain_conf = dir.join("plain.conf");
    std::fs::write(&plain_conf, "listen: \"127.0.0.1:-1\"\n").expect("config");
    let plain_server = NatsServer::start(&plain_conf, None, &dir.join("plain.log"))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let mut responder = std::process::Command::new(std::env::current_exe().expect("this binary"))
        .env(PLAIN_RESPONDER, plain_server.url())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("the plain responder starts");
    let mut ready = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(responder.stdout.take().expect("stdout")),
        &mut ready,
    )
    .expect("the plain responder says it is ready");
    let responder = Child(responder);

    // The deployed side: `mesh up` in a home of its own, as README's first command runs it.
    let up = Up::start(dir, None);
    let (home, server_pid, up_pid) = (up.home.clone(), up.server_pid, up.pid);
    let context: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(home.join("config/nats/context/mesh.json")).expect("context"),
    )
    .expect("context JSON");
    let field = |k: &str| context[k].as_str().expect("context field").to_owned();
    let person =
        async_nats::ConnectOptions::with_user_and_password(field("user"), field("password"))
            .custom_inbox_prefix(format!("_INBOX.{}", field("user")))
            .connect(field("url"))
            .await
            .expect("the person connects");
    let body = bytes::Bytes::from(serde_json::to_vec(&json!({ "text": TEXT })).expect("json"));
    let plain = OnSubject {
        nats: async_nats::connect(plain_server.url())
            .await
            .expect("connect"),
        subject: Arc::from("bench.plain"),
        body: body.clone(),
    };
    let mesh_raw = OnSubject {
        nats: person,
        subject: Arc::from("mesh.echo.echo"),
        body,
    };
    let config = ConnectConfig {
        context: Some(
            home.join("config/nats/context/mesh.json")
                .display()
                .to_string(),
        ),
        isolated: false,
        ..Default::default()
    };
    let mesh_client = Mesh {
        client: Client::connect(&config)
            .await
            .expect("the mesh client connects"),
        tool: Arc::new(FullName::parse("echo").expect("name")),
        args: Arc::new(json!({ "text": TEXT })),
    };
    let mut scratch = Vec::new();
    sequential(&plain, WARMUP, &mut scratch).await;
    sequential(&mesh_raw, WARMUP, &mut scratch).await;
    sequential(&mesh_client, WARMUP, &mut scratch).await;

    let pids = [
        (plain_server.pid(), Some(responder.0.id())),
        (server_pid, Some(up_pid)),
        (server_pid, Some(up_pid)),
    ];
    let mut measured: [Measured; 3] = Default::default();
    for round in 0..ROUNDS {
        for k in 0..3 {
            let i = (round + k) % 3;
            let (server, resp) = pids[i];
            let cpu = |pid: Option<u32>| pid.map(cpu::of_process).unwrap_or_default();
            let m = &mut measured[i];
            macro_rules! timed {
                ($path:expr) => {{
                    sequential($path, SEQUENTIAL_PER_ROUND, &mut m.one_at_a_time).await;
                    let (d0, s0, r0) = (cpu::own(), cpu(server), cpu(resp));
                    m.wall += concurrent_timed($path, CONCURRENT_PER_ROUND, &mut m.in_flight).await;
                    m.driver += cpu::own() - d0;
                    m.server += cpu(server) - s0;
                    m.responder += cpu(resp) - r0;
                }};
            }
            match i {
                0 => timed!(&plain),
                1 => timed!(&mesh_raw),
                _ => timed!(&mesh_client),
            }
        }
    }
    let calls = (ROUNDS * CONCURRENT_PER_ROUND) as f64;
    for m in &mut measured {
        m.one_at_a_time.sort();
        m.in_flight.sort();
    }
    println!(
        "{ROUNDS} rounds: {SEQUENTIAL_PER_ROUND} calls one at a time, then {CONCURRENT_PER_ROUND} with {IN_FLIGHT} in flight, per path"
    );
    println!(
        "{:<34} {:>12} {:>14} {:>8} {:>14} {:>8}",
        "", "plain NATS", "mesh (raw)", "ratio", "mesh (client)", "ratio"
    );
    let row = |what: &str, f: &dyn Fn(&Measured) -> f64| {
        let base = f(&measured[0]);
        println!(
            "{what:<34} {base:>12.2} {:>14.2} {:>8.3} {:>14.2} {:>8.3}",
            f(&measured[1]),
            f(&measured[1]) / base,
            f(&measured[2]),
            f(&measured[2]) / base,
        );
        f(&measured[1]) / base
    };
    let tput = row("calls/s, 32 in flight", &|m| calls / m.wall.as_secs_f64());
    let p50_32 = row("p50 (us), 32 in flight", &|m| {
        us(percentile(&m.in_flight, 0.5))
    });
    let p50_1 = row("p50 (us), one at a time", &|m| {
        us(percentile(&m.one_at_a_time, 0.5))
    });
    row("p99 (us), one at a time", &|m| {
        us(percentile(&m.one_at_a_time, 0.99))
    });
    let server = row("cpu/call (us), nats-server", &|m| us(m.server) / calls);
    let responder = row("cpu/call (us), responder process", &|m| {
        us(m.responder) / calls
    });
    row("cpu/call (us), driver (this)", &|m| us(m.driver) / calls);
    println!(
        "the responder process is the plain responder, or `mesh up` (echo's runtime, with the catalogue, avu and the console idle beside it)"
    );
    println!(
        "deployed throughput_ratio={tput:.3} p50_32_ratio={p50_32:.3} p50_1_ratio={p50_1:.3} server_cpu_ratio={server:.3} responder_cpu_ratio={responder:.3}"
    );
    drop(plain_server);
}

/// The official Python SDK's client calling one server's tool as a user would, three ways in
/// one run (`benches/py/sdk_paths.py`): the SDK's own stdio server (`benches/py/stdio_echo.py`)
/// driven directly, and the same server joined to `mesh up` (`command:` in its grants file,
/// so `mesh up` runs its bridge) reached through `mesh mcp` and through the console.
async fn pysdk(dir: &std::path::Path) {
    println!(
        "== pysdk: the Python SDK's tools/call, directly to a stdio server vs through `mesh mcp` and the console of `mesh up` to the same server"
    );
    let (_, python) = install_sdks();
    let root = env!("CARGO_MANIFEST_DIR");
    let server = format!("{root}/benches/py/stdio_echo.py");
    let grants = mesh_bus::statedir::default_grants("bench").replacen(
        "modules {\n",
        &format!("modules {{\n  pyecho {{ command: [{python:?}, {server:?}] }}\n"),
        1,
    );
    let up = Up::start(&dir.join("pysdk"), Some(&grants));
    let context = up.home.join("config/nats/context/mesh.json");
    let client = Client::connect(&ConnectConfig {
        context: Some(context.display().to_string()),
        isolated: false,
        ..Default::default()
    })
    .await
    .expect("the mesh client connects");
    let tool = FullName::parse("pyecho_echo").expect("name");
    let args = json!({ "text": TEXT });
    let answering = tokio::time::timeout(Duration::from_secs(120), async {
        while client.call(&tool, &args, DEADLINE).await.is_err() {
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    });
    answering
        .await
        .expect("the bridged server answers within two minutes");
    let token = std::fs::read_to_string(up.home.join("state-home/mesh/console.token"))
        .expect("the console's token");
    let config = json!({
        "direct": [python, server],
        "direct_tool": "echo",
        "mesh": [env!("CARGO_BIN_EXE_mesh"), "--context", context, "mcp"],
        "mesh_tool": "pyecho_echo",
        "console": up.console,
        "token": token.trim(),
        "arguments": { "text": TEXT },
        "calls": 1000,
        "rounds": 6,
        "warmup": 100,
        "processes": { "nats-server": up.server_pid, "mesh up, bridge, its server": up.pid },
    });
    let out = std::process::Command::new(&python)
        .arg(format!("{root}/benches/py/sdk_paths.py"))
        .arg(config.to_string())
        .env("HOME", &up.home)
        .env("XDG_CONFIG_HOME", up.home.join("config"))
        .env("XDG_CACHE_HOME", up.home.join("cache"))
        .env("XDG_STATE_HOME", up.home.join("state-home"))
        .env_remove("NATS_URL")
        .output()
        .expect("python runs");
    print!("{}", String::from_utf8_lossy(&out.stdout));
    assert!(
        out.status.success(),
        "benches/py/sdk_paths.py failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}
