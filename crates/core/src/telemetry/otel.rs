//! OpenTelemetry for a binary on the mesh (feature `otel`): the `tracing` layer that makes
//! its spans OpenTelemetry's and exports them over OTLP/HTTP, the meter for calls'
//! durations, and the W3C propagation between a span and a call's headers.

use std::collections::HashMap;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use opentelemetry::KeyValue;
use opentelemetry::metrics::{Histogram, MeterProvider as _};
use opentelemetry::propagation::TextMapPropagator;
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_sdk::metrics::SdkMeterProvider;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::SdkTracerProvider;
use tracing::Span;
use tracing_opentelemetry::OpenTelemetrySpanExt;
use tracing_subscriber::Layer;
use tracing_subscriber::registry::LookupSpan;

use super::TraceContext;

static EXPORTING: AtomicBool = AtomicBool::new(false);

/// The instruments calls are measured with, once exporting starts.
struct Instruments {
    served: Histogram<f64>,
    sent: Histogram<f64>,
}

static INSTRUMENTS: OnceLock<Instruments> = OnceLock::new();

pub(crate) fn exporting() -> bool {
    EXPORTING.load(Ordering::Relaxed)
}

/// What a binary holds while it exports: dropped, it sends what is left and stops.
pub struct Exporting {
    tracer: SdkTracerProvider,
    meter: SdkMeterProvider,
}

impl Drop for Exporting {
    fn drop(&mut self) {
        EXPORTING.store(false, Ordering::Relaxed);
        if let Err(e) = self.tracer.shutdown() {
            eprintln!("mesh: the last spans were not exported: {e}");
        }
        if let Err(e) = self.meter.shutdown() {
            eprintln!("mesh: the last metrics were not exported: {e}");
        }
    }
}

/// Whether the environment asks for OTLP: an endpoint for everything or for traces, and
/// the SDK not disabled (the OpenTelemetry specification's variables).
fn wanted(env: &dyn Fn(&str) -> Option<String>) -> bool {
    let set = |k: &str| env(k).is_some_and(|v| !v.trim().is_empty());
    let disabled = env("OTEL_SDK_DISABLED").is_some_and(|v| v.trim().eq_ignore_ascii_case("true"));
    !disabled && (set("OTEL_EXPORTER_OTLP_ENDPOINT") || set("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"))
}

/// The tracing layer exporting this binary's spans (`service`, unless `OTEL_SERVICE_NAME`
/// says otherwise), when the environment asks for OTLP; `None` otherwise.
pub fn layer<S>(service: &str) -> Option<(Box<dyn Layer<S> + Send + Sync>, Exporting)>
where
    S: tracing::Subscriber + for<'a> LookupSpan<'a> + Send + Sync,
{
    let env = |k: &str| std::env::var(k).ok();
    if !wanted(&env) {
        return None;
    }
    if env("OTEL_EXPORTER_OTLP_PROTOCOL")
        .or_else(|| env("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"))
        .is_some_and(|p| p.trim() != "http/protobuf")
    {
        eprintln!(
            "mesh: OTLP is exported as http/protobuf only (OTEL_EXPORTER_OTLP_PROTOCOL asks otherwise); a collector takes it on port 4318"
        );
    }
    let mut resource = opentelemetry_sdk::Resource::builder();
    if env("OTEL_SERVICE_NAME").is_none_or(|s| s.trim().is_empty()) {
        resource = resource.with_service_name(service.to_owned());
    }
    let resource = resource.build();
    let spans = match opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .build()
    {
        Ok(e) => e,
        Err(e) => {
            eprintln!("mesh: cannot export traces over OTLP ({e}); going on without");
            return None;
        }
    };
    let tracer = SdkTracerProvider::builder()
        .with_batch_exporter(spans)
        .with_resource(resource.clone())
        .build();
    let mut meter = SdkMeterProvider::builder().with_resource(resource);
    match opentelemetry_otlp::MetricExporter::builder()
        .with_http()
        .build()
    {
        Ok(m) => meter = meter.with_periodic_exporter(m),
        Err(e) => eprintln!("mesh: cannot export metrics over OTLP ({e}); traces only"),
    }
    let meter = meter.build();
    let m = meter.meter("mesh");
    // Seconds, with the boundaries the semantic conventions advise for these histograms.
    let buckets = vec![
        0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 30.0,
        60.0, 120.0, 300.0,
    ];
    let _ = INSTRUMENTS.set(Instruments {
        served: m
            .f64_histogram("mcp.server.operation.duration")
            .with_unit("s")
            .with_description("Tool calls a module served, by tool and error kind")
            .with_boundaries(buckets.clone())
            .build(),
        sent: m
            .f64_histogram("messaging.client.operation.duration")
            .with_unit("s")
            .with_description("Calls made over the bus, by subject and error kind")
            .with_boundaries(buckets)
            .build(),
    });
    let layer = tracing_opentelemetry::layer()
        .with_tracer(tracer.tracer("mesh"))
        .with_filter(tracing_subscriber::filter::filter_fn(|meta| {
            // The mesh's own spans (and its crates' events within them), not its
            // dependencies' debugging.
            meta.target().starts_with("mesh")
        }));
    EXPORTING.store(true, Ordering::Relaxed);
    Some((Box::new(layer), Exporting { tracer, meter }))
}

/// The W3C context of `span`, when it has a valid one.
pub(crate) fn context_of(span: &Span) -> Option<TraceContext> {
    let cx = span.context();
    let mut fields: HashMap<String, String> = HashMap::with_capacity(2);
    TraceContextPropagator::new().inject_context(&cx, &mut fields);
    let parent = fields.get(super::TRACEPARENT)?;
    TraceContext::parse(parent, fields.get(super::TRACESTATE).map(String::as_str))
}

/// Makes `span` a child of `remote`.
pub(crate) fn adopt(span: &Span, remote: &TraceContext) {
    let mut fields: HashMap<String, String> = HashMap::with_capacity(2);
    fields.insert(super::TRACEPARENT.into(), remote.traceparent.clone());
    if let Some(s) = &remote.tracestate {
        fields.insert(super::TRACESTATE.into(), s.clone());
    }
    let cx = TraceContextPropagator::new().extract(&fields);
    let _ = span.set_parent(cx);
}

fn attributes(first: KeyValue, error: Option<&str>) -> Vec<KeyValue> {
    let mut a = vec![first];
    if let Some(e) = error {
        a.push(KeyValue::new("error.type", e.to_owned()));
    }
    a
}

pub(crate) fn served(tool: &str, took: Duration, error: Option<&str>) {
    if let Some(i) = INSTRUMENTS.get().filter(|_| exporting()) {
        let mut a = attributes(KeyValue::new("gen_ai.tool.name", tool.to_owned()), error);
        a.push(KeyValue::new("mcp.method.name", "tools/call"));
        i.served.record(took.as_secs_f64(), &a);
    }
}

pub(crate) fn sent(subject: &str, took: Duration, error: Option<&str>) {
    if let Some(i) = INSTRUMENTS.get().filter(|_| exporting()) {
        let mut a = attributes(
            KeyValue::new("messaging.destination.name", subject.to_owned()),
            error,
        );
        a.push(KeyValue::new("messaging.system", "nats"));
        a.push(KeyValue::new("messaging.operation.name", "send"));
        i.sent.record(took.as_secs_f64(), &a);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn otlp_is_wanted_only_where_an_endpoint_is_said_and_the_sdk_is_on() {
        let env = |pairs: &'static [(&'static str, &'static str)]| {
            move |k: &str| {
                pairs
                    .iter()
                    .find(|(key, _)| *key == k)
                    .map(|(_, v)| v.to_string())
            }
        };
        assert!(!wanted(&env(&[])));
        assert!(wanted(&env(&[(
            "OTEL_EXPORTER_OTLP_ENDPOINT",
            "http://x:4318"
        )])));
        assert!(wanted(&env(&[(
            "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
            "http://x/v1/traces"
        )])));
        assert!(!wanted(&env(&[("OTEL_EXPORTER_OTLP_ENDPOINT", " ")])));
        assert!(!wanted(&env(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://x:4318"),
            ("OTEL_SDK_DISABLED", "TRUE")
        ])));
    }
}
