//! `mesh call --trace`: the call's way through the bus as nats-server itself traced it
//! (`Nats-Trace-Dest`, nats-server 2.11+) — each server it crossed, over a cluster's routes
//! too, every hop with its time — and the module's own time, printed to stderr.

use std::fmt::Write as _;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use mesh_core::client::{Client, Traced};
use serde_json::Value;

/// How long after the last event the trace waits for more (each server sends its own).
const QUIET: Duration = Duration::from_millis(300);
/// The longest it waits for the trace after the call.
const AT_MOST: Duration = Duration::from_secs(2);

pub struct Trace {
    client: Client,
    traced: Arc<Traced>,
    events: async_nats::Subscriber,
    started: Instant,
}

impl Trace {
    /// Listens where the servers send their events, on an inbox of this connection's own.
    pub async fn start(bus: &Client) -> anyhow::Result<Trace> {
        let dest = bus.nats().new_inbox();
        let events = bus.nats().subscribe(dest.clone()).await?;
        let (client, traced) = bus.tracing_to(&dest);
        Ok(Trace {
            client,
            traced,
            events,
            started: Instant::now(),
        })
    }

    /// The client whose tool calls are traced.
    pub fn client(&self) -> Client {
        self.client.clone()
    }

    /// Reads the servers' events as they come, then prints the way the call took.
    pub async fn print(mut self) {
        let took = self.traced.took().unwrap_or_else(|| self.started.elapsed());
        let mut got: Vec<Value> = Vec::new();
        let until = tokio::time::Instant::now() + AT_MOST;
        loop {
            let next = tokio::time::timeout(QUIET, self.events.next());
            let msg = tokio::select! {
                m = next => m,
                () = tokio::time::sleep_until(until) => break,
            };
            match msg {
                Ok(Some(m)) => {
                    if let Ok(v) = serde_json::from_slice::<Value>(&m.payload) {
                        got.push(v);
                    }
                }
                _ => break,
            }
        }
        eprint!("{}", render(&got, self.traced.timing().as_deref(), took));
    }
}

/// The connection kinds nats-server numbers in its trace.
fn kind(k: u64) -> &'static str {
    match k {
        0 => "client",
        1 => "route",
        2 => "gateway",
        3 => "system",
        4 => "leaf",
        5 => "jetstream",
        6 => "account",
        _ => "connection",
    }
}

fn text<'a>(v: &'a Value, key: &str) -> &'a str {
    v.get(key).and_then(Value::as_str).unwrap_or("")
}

/// The trace as lines: server by server (the one the call entered first), each event with
/// its time after the first.
fn render(events: &[Value], timing: Option<&str>, took: Duration) -> String {
    let mut out = String::new();
    if events.is_empty() {
        let _ = writeln!(
            out,
            "mesh: no trace came back: nats-server traces messages from 2.11 on, and only through imports that allow it (a mesh started by `mesh up` does)"
        );
        return out;
    }
    // Server by server, in the order the call reached them.
    let earliest = |e: &Value| {
        e["events"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|ev| mesh_core::subjects::calllog::parse_time(text(ev, "ts")))
            .min()
    };
    let mut servers: Vec<&Value> = events.iter().collect();
    servers.sort_by_key(|e| earliest(e));
    let first = servers.iter().filter_map(|e| earliest(e)).min();
    let _ = writeln!(
        out,
        "mesh: the call's way, as nats-server traced it ({} server{}):",
        servers.len(),
        if servers.len() == 1 { "" } else { "s" }
    );
    for server in servers {
        let s = &server["server"];
        let mut head = format!("  server {}", short(text(s, "name")));
        if !text(s, "cluster").is_empty() {
            let _ = write!(head, " (cluster {})", text(s, "cluster"));
        }
        // The hop that brought it here, as the server that sent it numbered it.
        let came_by = server["request"]["header"]["Nats-Trace-Hop"][0]
            .as_str()
            .unwrap_or("");
        if !came_by.is_empty() {
            let _ = write!(head, ", reached by hop {came_by}");
        }
        let _ = writeln!(out, "{head}");
        for ev in server["events"].as_array().into_iter().flatten() {
            let at = mesh_core::subjects::calllog::parse_time(text(ev, "ts"))
                .zip(first)
                .map(|(t, f)| (t - f).as_seconds_f64() * 1000.0)
                .unwrap_or(0.0);
            // In operator mode the server says account keys: the names the mesh gave them.
            let acc = |ev: &Value| mesh_core::actor::account_named(text(ev, "acc"));
            let who = |ev: &Value| {
                let k = kind(ev.get("kind").and_then(Value::as_u64).unwrap_or(99));
                let name = text(ev, "name");
                let cid = ev.get("cid").and_then(Value::as_u64).unwrap_or(0);
                let mut w = format!("{k} #{cid}");
                if !name.is_empty() {
                    let _ = write!(w, " \"{name}\"");
                }
                if !text(ev, "acc").is_empty() {
                    let _ = write!(w, " ({})", acc(ev));
                }
                w
            };
            let line = match text(ev, "type") {
                "in" => format!("in      from {} on {}", who(ev), text(ev, "subj")),
                "si" => format!(
                    "import  into {}: {} → {}",
                    acc(ev),
                    text(ev, "from"),
                    text(ev, "to")
                ),
                "se" => format!("export  to {} as {}", acc(ev), text(ev, "to")),
                "sm" => format!("mapped  to {}", text(ev, "to")),
                "js" => format!("stream  {}", text(ev, "stream")),
                "eg" => {
                    let mut l = format!("out     to {}", who(ev));
                    if !text(ev, "queue").is_empty() {
                        let _ = write!(l, ", queue {}", text(ev, "queue"));
                    }
                    if !text(ev, "hop").is_empty() {
                        let _ = write!(l, ", hop {}", text(ev, "hop"));
                    }
                    l
                }
                other => other.to_string(),
            };
            let error = text(ev, "error");
            let error = if error.is_empty() {
                String::new()
            } else {
                format!(" — {error}")
            };
            let _ = writeln!(out, "    +{at:.3} ms  {line}{error}");
        }
    }
    if let Some(t) = timing {
        let ran = t
            .split(';')
            .find_map(|p| p.trim().strip_prefix("dur="))
            .unwrap_or(t);
        let _ = writeln!(out, "  the module ran it in {ran} ms");
    }
    let _ = writeln!(
        out,
        "  the answer came {:.3} ms after the call was made",
        took.as_secs_f64() * 1000.0
    );
    out
}

/// A server's name as people read it: a generated id cut short.
fn short(name: &str) -> String {
    if name.len() > 16 && name.chars().all(|c| c.is_ascii_alphanumeric()) {
        format!("{}…", &name[..8])
    } else {
        name.to_owned()
    }
}
