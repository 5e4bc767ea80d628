//! The NATS services protocol (`$SRV.PING|INFO|STATS`) for a module, with per-tool statistics.
//!
//! async-nats's own `service` cannot send an error reply that carries a body, and the
//! mesh's tool errors must carry the full `CallToolResult`; so the runtime answers the
//! protocol itself, reusing async-nats's wire types so standard tooling reads it as usual.

use std::sync::Mutex;
use std::time::Duration;

use async_nats::service::{Info, PingResponse, Stats as ServiceStats, endpoint, error};
use async_nats::{Client, Subscriber};
use futures_util::StreamExt;
use futures_util::stream::{SelectAll, select_all};

const VERBS: [&str; 3] = ["PING", "INFO", "STATS"];

/// Who this instance is, as the protocol reports it.
pub(crate) struct Identity {
    pub name: String,
    pub id: String,
    pub version: String,
    pub description: String,
    pub started: async_nats::datetime::DateTime,
}

/// Per-endpoint counters, in endpoint order, with what the protocol's own do not say: the
/// errors by kind, calls cancelled, and latency percentiles (in the endpoint's `data`).
pub(crate) struct Stats {
    endpoints: Mutex<Vec<endpoint::Stats>>,
    more: Mutex<Vec<More>>,
}

/// The upper bounds of the latency histogram's buckets, in microseconds; one more bucket
/// holds the rest.
const BUCKETS_US: [u64; 20] = [
    50, 100, 200, 300, 500, 750, 1_000, 2_000, 3_000, 5_000, 10_000, 20_000, 50_000, 100_000,
    200_000, 500_000, 1_000_000, 2_000_000, 5_000_000, 10_000_000,
];

/// One endpoint's errors by kind, cancels and latency histogram.
#[derive(Default, Clone)]
struct More {
    errors: std::collections::BTreeMap<&'static str, u64>,
    cancelled: u64,
    latency: [u64; BUCKETS_US.len() + 1],
}

impl More {
    /// The upper bound of the bucket the `q` quantile falls in, in microseconds (the last
    /// bucket's: the largest bound, "or more").
    fn quantile_us(&self, q: f64) -> Option<u64> {
        let total: u64 = self.latency.iter().sum();
        if total == 0 {
            return None;
        }
        let rank = ((total as f64) * q).ceil().max(1.0) as u64;
        let mut seen = 0;
        for (i, n) in self.latency.iter().enumerate() {
            seen += n;
            if seen >= rank {
                return Some(
                    BUCKETS_US
                        .get(i)
                        .copied()
                        .unwrap_or(BUCKETS_US[BUCKETS_US.len() - 1]),
                );
            }
        }
        None
    }

    fn data(&self) -> serde_json::Value {
        serde_json::json!({
            "errors": self.errors,
            "cancelled": self.cancelled,
            "latency_us": {
                "p50": self.quantile_us(0.5),
                "p90": self.quantile_us(0.9),
                "p99": self.quantile_us(0.99),
            },
        })
    }
}

impl Stats {
    pub fn new(endpoints: &[(String, String)], queue_group: &str) -> Self {
        let endpoints: Vec<endpoint::Stats> = endpoints
            .iter()
            .map(|(name, subject)| endpoint::Stats {
                name: name.clone(),
                subject: subject.clone(),
                queue_group: queue_group.to_owned(),
                ..Default::default()
            })
            .collect();
        let more = vec![More::default(); endpoints.len()];
        Stats {
            endpoints: Mutex::new(endpoints),
            more: Mutex::new(more),
        }
    }

    /// Counts one call its caller cancelled before it was answered.
    pub fn cancelled(&self, endpoint: usize) {
        let mut more = self.more.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(m) = more.get_mut(endpoint) {
            m.cancelled += 1;
        }
    }

    /// Counts one answered request; `error` is the code of an error reply. Only the kind of
    /// error is kept, never its text: anyone who may call `$SRV.STATS` reads `last_error`,
    /// and the text of one caller's failed call is no other caller's business.
    pub fn record(&self, endpoint: usize, elapsed: Duration, error: Option<usize>) {
        let mut all = self.endpoints.lock().unwrap_or_else(|p| p.into_inner());
        let s = &mut all[endpoint];
        s.requests += 1;
        s.processing_time += elapsed;
        // In u128 nanoseconds: a u32 count wraps to zero after 2^32 requests.
        let average = s.processing_time.as_nanos() / u128::from(s.requests.max(1) as u64);
        s.average_processing_time =
            Duration::from_nanos(u64::try_from(average).unwrap_or(u64::MAX));
        if let Some(code) = error {
            s.errors += 1;
            s.last_error = Some(error::Error {
                code,
                status: error_kind(code).to_owned(),
            });
        }
        drop(all);
        let mut more = self.more.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(m) = more.get_mut(endpoint) {
            if let Some(code) = error {
                *m.errors.entry(error_kind(code)).or_default() += 1;
            }
            let us = u64::try_from(elapsed.as_micros()).unwrap_or(u64::MAX);
            let bucket = BUCKETS_US
                .iter()
                .position(|b| us <= *b)
                .unwrap_or(BUCKETS_US.len());
            m.latency[bucket] += 1;
        }
    }

    fn snapshot(&self) -> Vec<endpoint::Stats> {
        let mut all = self
            .endpoints
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        let more = self.more.lock().unwrap_or_else(|p| p.into_inner());
        for (s, m) in all.iter_mut().zip(more.iter()) {
            s.data = Some(m.data());
        }
        all
    }
}

/// What an error reply's code says, as `$SRV.STATS` shows it in place of the reply's text.
pub(crate) fn error_kind(code: usize) -> &'static str {
    match code {
        400 => "bad arguments",
        401 => "ticket required",
        403 => "denied",
        412 => "tools changed",
        429 => "busy",
        503 => "unavailable",
        _ => "tool error",
    }
}

/// Subscribes to every verb at all three levels: all services, this name, this instance.
pub(crate) async fn subscribe(
    client: &Client,
    identity: &Identity,
) -> Result<SelectAll<Subscriber>, async_nats::SubscribeError> {
    let mut subs = Vec::with_capacity(9);
    for verb in VERBS {
        for subject in [
            format!("$SRV.{verb}"),
            format!("$SRV.{verb}.{}", identity.name),
            format!("$SRV.{verb}.{}.{}", identity.name, identity.id),
        ] {
            subs.push(client.subscribe(subject).await?);
        }
    }
    Ok(select_all(subs))
}

/// Answers protocol requests until the subscriptions end or `stop` fires: in turn by the
/// caller nats-server stamped, so one caller's flood of pings delays nobody else's.
pub(crate) async fn answer(
    client: Client,
    identity: &Identity,
    stats: &Stats,
    subs: SelectAll<Subscriber>,
    stop: impl std::future::Future<Output = ()>,
    layout: crate::actor::Layout,
) {
    let what = format!("module {}'s services protocol", identity.name);
    let publisher = client.clone();
    super::turns::answer_in_turn(
        client,
        &what,
        super::turns::PER_CALLER,
        subs.take_until(stop),
        |msg| super::turns::caller_key(msg, layout),
        |msg| {
            let body = msg
                .reply
                .clone()
                .and_then(|reply| Some((reply, reply_of(&msg.subject, identity, stats)?)));
            let client = publisher.clone();
            let name = identity.name.clone();
            async move {
                match body {
                    Some((reply, Ok(body))) => {
                        if let Err(e) = client.publish(reply, body.into()).await {
                            tracing::warn!(module = %name, "services protocol reply failed: {e}");
                        }
                    }
                    Some((_, Err(e))) => {
                        tracing::warn!(module = %name, "services protocol reply: {e}")
                    }
                    None => {}
                }
            }
        },
    )
    .await
}

/// The answer to one protocol request on `subject`; none for a verb it does not know.
fn reply_of(
    subject: &str,
    identity: &Identity,
    stats: &Stats,
) -> Option<Result<Vec<u8>, serde_json::Error>> {
    let verb = subject.split('.').nth(1).unwrap_or_default();
    Some(match verb {
        "PING" => serde_json::to_vec(&PingResponse {
            kind: "io.nats.micro.v1.ping_response".into(),
            name: identity.name.clone(),
            id: identity.id.clone(),
            version: identity.version.clone(),
            metadata: Default::default(),
        }),
        "INFO" => serde_json::to_vec(&Info {
            kind: "io.nats.micro.v1.info_response".into(),
            name: identity.name.clone(),
            id: identity.id.clone(),
            description: identity.description.clone(),
            version: identity.version.clone(),
            metadata: Default::default(),
            endpoints: stats
                .snapshot()
                .into_iter()
                .map(|s| endpoint::Info {
                    name: s.name,
                    subject: s.subject,
                    queue_group: s.queue_group,
                    metadata: Default::default(),
                })
                .collect(),
        }),
        "STATS" => serde_json::to_vec(&ServiceStats {
            kind: "io.nats.micro.v1.stats_response".into(),
            name: identity.name.clone(),
            id: identity.id.clone(),
            version: identity.version.clone(),
            started: identity.started,
            endpoints: stats.snapshot(),
        }),
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stats_keep_errors_by_kind_cancels_and_percentiles() {
        let stats = Stats::new(&[("echo".into(), "mesh.e.echo".into())], "e");
        for ms in 1..=100u64 {
            stats.record(0, Duration::from_millis(ms), (ms % 10 == 0).then_some(500));
        }
        stats.record(0, Duration::from_micros(10), Some(429));
        stats.cancelled(0);
        let s = &stats.snapshot()[0];
        assert_eq!(s.requests, 101);
        assert_eq!(s.errors, 11);
        let data = s.data.as_ref().unwrap();
        assert_eq!(data["errors"]["tool error"], 10);
        assert_eq!(data["errors"]["busy"], 1);
        assert_eq!(data["cancelled"], 1);
        assert_eq!(data["latency_us"]["p50"], 50_000);
        assert_eq!(data["latency_us"]["p99"], 100_000);
    }
}
