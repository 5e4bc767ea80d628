//! `mesh tools --stats [module]`: what the modules themselves count, from the NATS services
//! protocol (`$SRV.STATS`): calls, errors by kind, cancels and latency per tool, summed over
//! every instance that answers.

use std::collections::BTreeMap;
use std::time::Duration;

use futures_util::StreamExt;
use serde::Deserialize;
use serde_json::{Value, json};

use mesh_core::client::{Client, Exit};
use mesh_core::table;

/// How long replies are gathered: every instance answers the one request.
const GATHER: Duration = Duration::from_millis(500);

/// One instance's `$SRV.STATS` reply, the fields read.
#[derive(Deserialize)]
struct Reply {
    name: String,
    endpoints: Vec<Endpoint>,
}

#[derive(Deserialize)]
struct Endpoint {
    name: String,
    num_requests: u64,
    num_errors: u64,
    /// Nanoseconds.
    processing_time: u64,
    #[serde(default)]
    data: Option<Value>,
}

/// One tool over every instance.
#[derive(Default)]
struct Tool {
    calls: u64,
    errors: u64,
    nanos: u128,
    kinds: BTreeMap<String, u64>,
    cancelled: u64,
    /// The slowest instance's percentiles (a sum of histograms is not sent).
    p50_us: Option<u64>,
    p99_us: Option<u64>,
    instances: u64,
}

pub async fn run(
    client: &Client,
    module: Option<&str>,
    json_out: bool,
    wide: bool,
) -> anyhow::Result<Exit> {
    let subject = match module {
        Some(m) => format!("$SRV.STATS.{m}"),
        None => "$SRV.STATS".to_owned(),
    };
    let nats = client.nats();
    let inbox = nats.new_inbox();
    let mut replies = nats.subscribe(inbox.clone()).await?;
    nats.publish_with_reply(subject, inbox, Default::default())
        .await?;
    let mut tools: BTreeMap<String, Tool> = BTreeMap::new();
    let gathering = tokio::time::sleep(GATHER);
    tokio::pin!(gathering);
    loop {
        let msg = tokio::select! {
            m = replies.next() => m,
            () = &mut gathering => None,
        };
        let Some(msg) = msg else { break };
        let Ok(reply) = serde_json::from_slice::<Reply>(&msg.payload) else {
            continue;
        };
        for e in reply.endpoints {
            // The tools verb and the result verb are the mesh's, not the module's tools.
            if e.name == "tools" || e.name == "result" {
                continue;
            }
            let t = tools
                .entry(mesh_core::subjects::full_name(&reply.name, &e.name))
                .or_default();
            t.instances += 1;
            t.calls += e.num_requests;
            t.errors += e.num_errors;
            t.nanos += u128::from(e.processing_time);
            if let Some(data) = &e.data {
                if let Some(kinds) = data["errors"].as_object() {
                    for (k, n) in kinds {
                        *t.kinds.entry(k.clone()).or_default() += n.as_u64().unwrap_or(0);
                    }
                }
                t.cancelled += data["cancelled"].as_u64().unwrap_or(0);
                let us = |q: &str| data["latency_us"][q].as_u64();
                t.p50_us = t.p50_us.max(us("p50"));
                t.p99_us = t.p99_us.max(us("p99"));
            }
        }
    }
    if tools.is_empty() {
        eprintln!(
            "mesh: no module answered $SRV.STATS{} within {GATHER:?}",
            module.map(|m| format!(".{m}")).unwrap_or_default()
        );
        return Ok(Exit::NobodyServes);
    }
    let average = |t: &Tool| (t.calls > 0).then(|| t.nanos / u128::from(t.calls) / 1000);
    if json_out {
        let out: Vec<Value> = tools
            .iter()
            .map(|(name, t)| {
                json!({"tool": name, "calls": t.calls, "errors": t.errors, "errors_by_kind": t.kinds,
                       "cancelled": t.cancelled, "average_us": average(t).map(|a| a as u64),
                       "p50_us": t.p50_us, "p99_us": t.p99_us, "instances": t.instances})
            })
            .collect();
        println!("{}", serde_json::to_string_pretty(&out)?);
        return Ok(Exit::Ok);
    }
    let time = |us: Option<u64>| match us {
        None => "-".to_owned(),
        Some(us) if us >= 1_000_000 => format!("{:.1} s", us as f64 / 1e6),
        Some(us) if us >= 1_000 => format!("{:.1} ms", us as f64 / 1e3),
        Some(us) => format!("{us} µs"),
    };
    let rows: Vec<Vec<String>> = tools
        .iter()
        .map(|(name, t)| {
            let kinds = t
                .kinds
                .iter()
                .map(|(k, n)| format!("{k} {n}"))
                .collect::<Vec<_>>()
                .join(", ");
            vec![
                name.clone(),
                t.calls.to_string(),
                t.errors.to_string(),
                if kinds.is_empty() { "-".into() } else { kinds },
                t.cancelled.to_string(),
                time(average(t).map(|a| a as u64)),
                time(t.p50_us),
                time(t.p99_us),
                t.instances.to_string(),
            ]
        })
        .collect();
    let header = [
        "TOOL",
        "CALLS",
        "ERRORS",
        "BY KIND",
        "CANCELLED",
        "AVERAGE",
        "P50 ≤",
        "P99 ≤",
        "INSTANCES",
    ]
    .map(String::from);
    println!(
        "{}",
        table::render(&header, &rows, &[3], table::width(wide))
    );
    Ok(Exit::Ok)
}
