//! Traces and metrics across the bus. A call carries its caller's W3C trace context as NATS
//! headers (`traceparent`, `tracestate`); the client, the runtime and the relays make spans
//! named and attributed as OpenTelemetry's semantic conventions for MCP and messaging say.
//! With the `otel` feature and the standard `OTEL_EXPORTER_OTLP_*` variables set, they (and
//! the calls' durations) are exported over OTLP; otherwise nothing is made, and a module
//! still passes on the context its caller sent, so a trace stays whole across it.

use std::future::Future;
use std::time::Duration;

use async_nats::HeaderMap;
use tracing::Span;

#[cfg(feature = "otel")]
pub(crate) mod otel;

/// The W3C trace context headers, as NATS headers.
pub const TRACEPARENT: &str = "traceparent";
pub const TRACESTATE: &str = "tracestate";
/// The longest `tracestate` passed on (W3C: 512 characters is what everyone must carry).
const MAX_TRACESTATE: usize = 512;

/// A W3C trace context: a checked `traceparent` and the `tracestate` beside it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceContext {
    pub traceparent: String,
    pub tracestate: Option<String>,
}

impl TraceContext {
    /// A context whose `traceparent` reads (`00-<32 hex>-<16 hex>-<2 hex>`, ids not all
    /// zero); a `tracestate` longer than W3C's bound is dropped.
    pub fn parse(traceparent: &str, tracestate: Option<&str>) -> Option<TraceContext> {
        let t = traceparent.trim();
        let parts: Vec<&str> = t.split('-').collect();
        let hex = |s: &str, n: usize| {
            s.len() == n
                && s.bytes()
                    .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
        };
        let ok = parts.len() == 4
            && hex(parts[0], 2)
            && parts[0] != "ff"
            && hex(parts[1], 32)
            && hex(parts[2], 16)
            && hex(parts[3], 2)
            && parts[1].bytes().any(|b| b != b'0')
            && parts[2].bytes().any(|b| b != b'0');
        ok.then(|| TraceContext {
            traceparent: t.to_owned(),
            tracestate: tracestate
                .map(str::trim)
                .filter(|s| !s.is_empty() && s.len() <= MAX_TRACESTATE && s.is_ascii())
                .map(str::to_owned),
        })
    }

    /// The context a message's headers carry, if one reads.
    pub fn from_headers(headers: Option<&HeaderMap>) -> Option<TraceContext> {
        let h = headers?;
        let parent = h.get(TRACEPARENT)?;
        TraceContext::parse(parent.as_str(), h.get(TRACESTATE).map(|v| v.as_str()))
    }

    /// Puts it on a message's headers.
    pub fn insert_into(&self, headers: &mut HeaderMap) {
        headers.insert(TRACEPARENT, self.traceparent.as_str());
        if let Some(state) = &self.tracestate {
            headers.insert(TRACESTATE, state.as_str());
        }
    }

    /// The trace's id (32 hex digits).
    pub fn trace_id(&self) -> &str {
        self.traceparent.split('-').nth(1).unwrap_or_default()
    }
}

tokio::task_local! {
    /// The caller's context a handler runs in, passed on by its calls when nothing here
    /// makes spans of its own.
    static PASSED: TraceContext;
}

/// Whether this process exports spans (the `otel` feature, with OTLP configured).
pub fn exporting() -> bool {
    #[cfg(feature = "otel")]
    {
        otel::exporting()
    }
    #[cfg(not(feature = "otel"))]
    {
        false
    }
}

/// The context a call made now within `span` carries: the span's own where spans are
/// exported, else the one the current handler's caller sent (passed on unchanged).
pub fn outgoing(span: &Span) -> Option<TraceContext> {
    #[cfg(feature = "otel")]
    if otel::exporting() {
        return otel::context_of(span);
    }
    let _ = span;
    PASSED.try_with(Clone::clone).ok()
}

/// Makes `span` a child of the caller's `remote` context (where spans are exported).
pub fn adopt(span: &Span, remote: &TraceContext) {
    #[cfg(feature = "otel")]
    if otel::exporting() {
        otel::adopt(span, remote);
    }
    let _ = (span, remote);
}

/// Runs `fut` passing `remote` on to the calls it makes (when this process makes no spans).
pub async fn passing<F: Future>(remote: Option<TraceContext>, fut: F) -> F::Output {
    match remote {
        Some(r) if !exporting() => PASSED.scope(r, fut).await,
        _ => fut.await,
    }
}

/// A tool call a module served ended: its duration, by tool and error kind
/// (`mcp.server.operation.duration`).
pub fn served(tool: &str, took: Duration, error: Option<&str>) {
    #[cfg(feature = "otel")]
    otel::served(tool, took, error);
    let _ = (tool, took, error);
}

/// A call this client made ended (`messaging.client.operation.duration`).
pub fn sent(subject: &str, took: Duration, error: Option<&str>) {
    #[cfg(feature = "otel")]
    otel::sent(subject, took, error);
    let _ = (subject, took, error);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_well_formed_traceparent_is_taken() {
        let good = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        let t = TraceContext::parse(good, Some("rojo=00f067aa0ba902b7")).unwrap();
        assert_eq!(t.trace_id(), "4bf92f3577b34da6a3ce929d0e0e4736");
        assert_eq!(t.tracestate.as_deref(), Some("rojo=00f067aa0ba902b7"));
        for bad in [
            "",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-xx",
        ] {
            assert!(TraceContext::parse(bad, None).is_none(), "{bad}");
        }
        let long = "a=".to_owned() + &"b".repeat(600);
        assert_eq!(
            TraceContext::parse(good, Some(&long)).unwrap().tracestate,
            None
        );
    }
}
