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

/// Per-endpoint counters, in endpoint order.
pub(crate) struct Stats {
    endpoints: Mutex<Vec<endpoint::Stats>>,
}

impl Stats {
    pub fn new(endpoints: &[(String, String)], queue_group: &str) -> Self {
        let endpoints = endpoints
            .iter()
            .map(|(name, subject)| endpoint::Stats {
                name: name.clone(),
                subject: subject.clone(),
                queue_group: queue_group.to_owned(),
                ..Default::default()
            })
            .collect();
        Stats {
            endpoints: Mutex::new(endpoints),
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
    }

    fn snapshot(&self) -> Vec<endpoint::Stats> {
        self.endpoints
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }
}

/// What an error reply's code says, as `$SRV.STATS` shows it in place of the reply's text.
pub(crate) fn error_kind(code: usize) -> &'static str {
    match code {
        400 => "bad arguments",
        401 => "ticket required",
        403 => "denied",
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

/// Answers protocol requests until the subscriptions end or `stop` fires.
pub(crate) async fn answer(
    client: Client,
    identity: &Identity,
    stats: &Stats,
    mut subs: SelectAll<Subscriber>,
    stop: impl std::future::Future<Output = ()>,
) {
    tokio::pin!(stop);
    loop {
        let msg = tokio::select! {
            m = subs.next() => m,
            _ = &mut stop => None,
        };
        let Some(msg) = msg else { return };
        let Some(reply) = msg.reply else { continue };
        let verb = msg.subject.split('.').nth(1).unwrap_or_default();
        let body = match verb {
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
            _ => continue,
        };
        match body {
            Ok(body) => {
                if let Err(e) = client.publish(reply, body.into()).await {
                    tracing::warn!(module = %identity.name, "services protocol reply failed: {e}");
                }
            }
            Err(e) => tracing::warn!(module = %identity.name, "services protocol reply: {e}"),
        }
    }
}
