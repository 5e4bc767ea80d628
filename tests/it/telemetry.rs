//! Traces across the bus, received by a real OTLP endpoint (opentelemetry-proto's messages):
//! one trace from an MCP client through the console, the bus, a module (the bridge) and the
//! nested call it makes (through `mesh mcp` to echo), each span parented as it ran, named
//! and attributed as the semantic conventions say; and the calls' durations as metrics.

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

use crate::bus::{Bus, json_of, python};
use mesh_core::subjects::FullName;

const MESH: &str = env!("CARGO_BIN_EXE_mesh");
const PY: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/py");
/// A bound that only catches a hang.
const HANG: Duration = Duration::from_secs(60);
/// OpenTelemetry's span kinds, as OTLP numbers them.
const SERVER: u64 = 2;
const CLIENT: u64 = 3;

/// The test's OTLP receiver: its URL and the file it writes what it received to.
struct Receiver {
    _child: Child,
    url: String,
    out: std::path::PathBuf,
    _dir: tempfile::TempDir,
}

impl Receiver {
    async fn start() -> Receiver {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("received.jsonl");
        let mut child = Command::new(python())
            .arg(format!("{PY}/otlp_receiver.py"))
            .arg(&out)
            .stdout(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let port = tokio::time::timeout(HANG, lines.next_line())
            .await
            .expect("the receiver says its port")
            .unwrap()
            .expect("the receiver started (opentelemetry-proto installed by bin/deps.sh)");
        Receiver {
            _child: child,
            url: format!("http://127.0.0.1:{}", port.trim()),
            out,
            _dir: dir,
        }
    }

    fn received(&self) -> Vec<Value> {
        std::fs::read_to_string(&self.out)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect()
    }

    /// What was received once `done` says all that is awaited came.
    async fn until(&self, done: impl Fn(&[Value]) -> bool) -> Vec<Value> {
        let waited = tokio::time::timeout(HANG, async {
            loop {
                let got = self.received();
                if done(&got) {
                    return got;
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        })
        .await;
        waited.unwrap_or_else(|_| {
            panic!(
                "the receiver never got what was awaited: {:#?}",
                self.received()
            )
        })
    }

    /// The OTLP variables that send a process's telemetry here, soon.
    fn env(&self, service: &str) -> Vec<(String, String)> {
        let mut env = self.unnamed();
        env.push(("OTEL_SERVICE_NAME".into(), service.into()));
        env
    }

    /// [`Receiver::env`] leaving the service's name to the process.
    fn unnamed(&self) -> Vec<(String, String)> {
        [
            ("OTEL_EXPORTER_OTLP_ENDPOINT", self.url.as_str()),
            ("OTEL_BSP_SCHEDULE_DELAY", "100"),
            ("OTEL_METRIC_EXPORT_INTERVAL", "300"),
        ]
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .to_vec()
    }
}

fn spawn(cmd: &mut Command, log: &Path) -> Child {
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(log).unwrap())
        .kill_on_drop(true)
        .spawn()
        .unwrap()
}

fn span<'a>(spans: &'a [Value], service: &str, name: &str) -> Option<&'a Value> {
    spans
        .iter()
        .find(|s| s["signal"] == "span" && s["service"] == service && s["name"] == name)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_trace_runs_from_an_mcp_client_through_the_console_the_bus_a_module_and_a_nested_call()
{
    let receiver = Receiver::start().await;
    // Two meshes: on the first the console and relay, a module that bridges `mesh mcp` on
    // the second, where echo runs — relay's calls are nested ones, across both buses.
    let bus = Bus::accounts(&["catalog", "relay"], &[("ann", &["mesh.>"])]).await;
    let far = Bus::accounts(&["catalog", "echo"], &[("bob", &["mesh.echo.>"])]).await;
    let _catalog = bus.serve_catalog().await;
    let _far_catalog = far.serve_catalog().await;
    let dir = tempfile::tempdir().unwrap();
    let log = |name: &str| dir.path().join(format!("{name}.log"));

    // echo, in a process of its own.
    let _echo = spawn(
        Command::new(MESH)
            .args(["-v", "run", "echo", "--layout", "accounts"])
            .args(far.flags("echo"))
            .env_remove("OTEL_SERVICE_NAME")
            // Named by the module it hosts, not `mesh`.
            .envs(receiver.unnamed()),
        &log("echo"),
    );
    // relay: the bridge, whose MCP server is `mesh mcp` as bob on the far mesh.
    let mut inner = vec![
        "env".to_owned(),
        "OTEL_SERVICE_NAME=inner".into(),
        MESH.into(),
    ];
    inner.extend(far.flags("bob"));
    inner.push("mcp".into());
    let _relay = spawn(
        Command::new(MESH)
            .args(["-v", "run", "--mcp", "relay", "--layout", "accounts"])
            .args(bus.flags("relay"))
            .arg("--")
            .args(&inner)
            .env_remove("OTEL_SERVICE_NAME")
            .envs(receiver.unnamed()),
        &log("relay"),
    );
    // The console, as ann.
    let mut console = spawn(
        Command::new(MESH)
            .args(bus.flags("ann"))
            .args(["serve", "--port", "0"])
            .env("MESH_CONSOLE_TOKEN", crate::mcp::TOKEN)
            .envs(receiver.env("console")),
        &log("console"),
    );
    let mut lines = BufReader::new(console.stdout.take().unwrap()).lines();
    let first = tokio::time::timeout(HANG, lines.next_line())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    let url = first.strip_prefix("console: ").unwrap().to_owned();
    let ann = bus.client_as(Some("ann")).await;
    let listed = tokio::time::timeout(HANG, async {
        loop {
            if let Ok(r) = ann.tools("relay", Duration::from_secs(1)).await
                && r.tools.iter().any(|t| t.name == "echo")
            {
                return;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
    .await;
    assert!(
        listed.is_ok(),
        "relay never served echo: {}",
        std::fs::read_to_string(log("relay")).unwrap_or_default()
    );

    // The MCP client's own span: the root of the trace, as the client says it.
    let trace_id = "4bf92f3577b34da6a3ce929d0e0e4736";
    let client_span = "00f067aa0ba902b7";
    let traceparent = format!("00-{trace_id}-{client_span}-01");
    let answered = json_of(
        Command::new(python())
            .arg(format!("{PY}/traced_call.py"))
            .args([
                &url,
                "relay_echo",
                &json!({"text": "hi"}).to_string(),
                &traceparent,
            ])
            .env("MESH_CONSOLE_TOKEN", crate::mcp::TOKEN)
            .env("PYTHONPATH", PY),
    )
    .await;
    assert_eq!(answered["isError"], false, "{answered}");
    assert!(
        answered["text"].as_str().unwrap().contains("hi"),
        "{answered}"
    );

    let got = receiver
        .until(|r| {
            // Every hop's span, whose processes export each in its own time.
            [
                ("console", "tools/call relay_echo"),
                ("console", "send mesh.relay.echo"),
                ("relay", "tools/call relay_echo"),
                ("relay", "tools/call echo"),
                ("inner", "tools/call echo"),
                ("inner", "send mesh.echo.echo"),
                ("echo", "tools/call echo"),
            ]
            .iter()
            .all(|(service, name)| span(r, service, name).is_some())
        })
        .await;
    let spans: Vec<Value> = got
        .iter()
        .filter(|s| s["signal"] == "span" && s["trace_id"] == trace_id)
        .cloned()
        .collect();
    let find = |service: &str, name: &str, kind: u64| {
        let s = span(&spans, service, name)
            .unwrap_or_else(|| panic!("no span {name} from {service} in the trace: {spans:#?}"));
        assert_eq!(s["kind"], kind, "{s}");
        s.clone()
    };
    // Each hop, a child of the one before it.
    let chain = [
        find("console", "tools/call relay_echo", SERVER),
        find("console", "send mesh.relay.echo", CLIENT),
        find("relay", "tools/call relay_echo", SERVER),
        find("relay", "tools/call echo", CLIENT),
        find("inner", "tools/call echo", SERVER),
        find("inner", "send mesh.echo.echo", CLIENT),
        find("echo", "tools/call echo", SERVER),
    ];
    assert_eq!(chain[0]["parent_span_id"], client_span, "{:#}", chain[0]);
    for pair in chain.windows(2) {
        assert_eq!(
            pair[1]["parent_span_id"], pair[0]["span_id"],
            "{:#} is not the child of {:#}",
            pair[1], pair[0]
        );
    }
    // Named and attributed as the conventions say.
    let a = &chain[0]["attributes"];
    assert_eq!(a["mcp.method.name"], "tools/call");
    assert_eq!(a["gen_ai.tool.name"], "relay_echo");
    assert!(
        a["mcp.session.id"].as_str().is_some_and(|s| !s.is_empty()),
        "{a}"
    );
    assert!(a["jsonrpc.request.id"].as_str().is_some(), "{a}");
    let a = &chain[1]["attributes"];
    assert_eq!(a["messaging.system"], "nats");
    assert_eq!(a["messaging.destination.name"], "mesh.relay.echo");
    let a = &chain[6]["attributes"];
    assert_eq!(a["gen_ai.tool.name"], "echo");
    assert_eq!(a["mesh.module"], "echo");
    assert_eq!(a["messaging.destination.name"], "mesh.echo.echo");

    // A tool error is one on its span: error.type, and the span's status an error.
    let failed = json_of(
        Command::new(python())
            .arg(format!("{PY}/traced_call.py"))
            .args([
                &url,
                "relay_echo_fail",
                &json!({"text": "no"}).to_string(),
                &format!("00-{}-{client_span}-01", "5".repeat(32)),
            ])
            .env("MESH_CONSOLE_TOKEN", crate::mcp::TOKEN)
            .env("PYTHONPATH", PY),
    )
    .await;
    assert_eq!(failed["isError"], true, "{failed}");
    let got = receiver
        .until(|r| {
            r.iter().any(|s| {
                s["service"] == "echo"
                    && s["name"] == "tools/call echo_fail"
                    && s["trace_id"] == "5".repeat(32)
            })
        })
        .await;
    let fail = got
        .iter()
        .find(|s| s["service"] == "echo" && s["name"] == "tools/call echo_fail")
        .unwrap();
    assert_eq!(fail["attributes"]["error.type"], "tool_error", "{fail}");
    assert_eq!(fail["status"], 2, "the span's status is an error: {fail}");

    // And the calls' durations, from the module and from the relay's client.
    let got = receiver
        .until(|r| {
            r.iter().any(|m| {
                m["signal"] == "metric"
                    && m["service"] == "echo"
                    && m["name"] == "mcp.server.operation.duration"
                    && m["attributes"]["gen_ai.tool.name"] == "echo_fail"
            }) && r.iter().any(|m| {
                m["signal"] == "metric"
                    && m["service"] == "console"
                    && m["name"] == "messaging.client.operation.duration"
            })
        })
        .await;
    let served: Vec<&Value> = got
        .iter()
        .filter(|m| m["service"] == "echo" && m["name"] == "mcp.server.operation.duration")
        .collect();
    assert!(
        served
            .iter()
            .any(|m| m["attributes"]["gen_ai.tool.name"] == "echo_fail"
                && m["attributes"]["error.type"] == "tool_error"
                && m["unit"] == "s"),
        "{served:#?}"
    );
}

/// A module that makes no spans (no OpenTelemetry in its process, as in this test's) still
/// passes its caller's trace on to the calls its handler makes: the trace stays whole. Its
/// word in the call log names the trace too.
#[tokio::test]
async fn a_module_that_makes_no_spans_passes_its_callers_trace_on() {
    use mesh_core::runtime::{Call, Module, Tool};
    use mesh_core::subjects::{FullName, ToolResult};

    let mut ann: Vec<&str> = vec!["mesh.front.>"];
    ann.extend(mesh_bus::layout::AUDIT_SUBJECTS);
    let bus = Bus::accounts_with(
        &[
            crate::bus::calling("front", &["echo"]),
            crate::bus::module("echo"),
        ],
        &[("ann", &ann)],
    )
    .await;
    bus.keep_log().await;
    let _echo = bus.serve(mesh_echo::module()).await;
    let as_front = bus.client_as(Some("front")).await;
    let front = Module::new("front", "1.0.0", "calls echo").tool(Tool::new(
        "relay",
        "calls echo",
        json!({"type": "object"}),
        move |_c: Call| {
            let client = as_front.clone();
            async move {
                let echo = FullName::parse("echo").unwrap();
                client
                    .call(&echo, &json!({"text": "x"}), HANG)
                    .await
                    .unwrap_or_else(|e| ToolResult::error(e.to_string()))
            }
        },
    ));
    let _front = bus.serve(front).await;

    let traceparent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
    let mut raw = crate::raw::Raw::connect(&bus.url(), "ann", "pw-ann").await;
    let reply = raw
        .request(
            "mesh.front.relay",
            format!("NATS/1.0\r\ntraceparent: {traceparent}\r\ntracestate: a=1\r\n\r\n").as_bytes(),
            b"{}",
        )
        .await;
    assert_eq!(reply.json()["content"][0]["text"], "x", "{reply:?}");
    let calls = crate::calllog::logged(&bus, "ann", &[], |r| {
        r.iter().filter(|c| c["trace"].is_string()).count() >= 2
    })
    .await;
    for tool in ["relay", "echo"] {
        let c = calls.iter().find(|c| c["tool"] == tool).unwrap();
        assert_eq!(c["trace"], traceparent, "{c}");
    }
}

/// `mesh call --trace`: the result on stdout as ever, and on stderr the call's way as
/// nats-server traced it — into the caller's account, through the mesh's, out to the
/// module — with the module's own time; across a cluster, each server it crossed.
#[tokio::test]
async fn mesh_call_trace_shows_the_way_through_every_server() {
    let trace = |flags: Vec<String>| async move {
        let out = Command::new(MESH)
            .args(flags)
            .args(["call", "--trace", "echo", "text=traced"])
            .env("NO_COLOR", "1")
            .output()
            .await
            .unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let bus = Bus::accounts(&["echo"], &[("ann", &["mesh.echo.>"])]).await;
    let _echo = bus.serve(mesh_echo::module()).await;
    let (code, out, err) = trace(bus.flags("ann")).await;
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(out.trim(), "traced");
    for step in [
        "(1 server)",
        "in      from client",
        "(PEOPLE) on mesh.echo.echo",
        "import  into MODULE_echo: mesh.echo.echo",
        "(MODULE_echo), queue echo",
        "the module ran it in",
        "the answer came",
    ] {
        assert!(err.contains(step), "no {step:?} in:\n{err}");
    }

    // A cluster: the caller on the first server, echo on the third.
    let cluster =
        crate::bus::ClusterBus::accounts(3, &["echo"], &[("ann", &["mesh.echo.>"])]).await;
    let _echo = cluster.serve_on(2, mesh_echo::module()).await;
    let ann = cluster.client_on(0, "ann").await;
    let echo = FullName::parse("echo").unwrap();
    // The interest crosses the routes in its own time.
    tokio::time::timeout(HANG, async {
        while ann.call(&echo, &json!({"text": "x"}), HANG).await.is_err() {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
    .await
    .expect("echo on another server answers");
    let (code, out, err) = trace(cluster.flags(0, "ann")).await;
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(out.trim(), "traced");
    assert!(!err.contains("(1 server)"), "{err}");
    for step in [
        "out     to route",
        "in      from route",
        "reached by hop 1",
        "queue echo",
    ] {
        assert!(err.contains(step), "no {step:?} in:\n{err}");
    }
}
