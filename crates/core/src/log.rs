//! Logging for a binary on the mesh (feature `log`): to stderr through `tracing`, at the level
//! `-v` counts, or as `MESH_LOG` says; stdout stays for data and protocol. Colours only when
//! stderr is a terminal and `NO_COLOR` is not set.

use std::io::IsTerminal;

use tracing::Level;
use tracing::level_filters::LevelFilter;
use tracing_subscriber::EnvFilter;
use tracing_subscriber::filter::filter_fn;
use tracing_subscriber::prelude::*;

/// The environment variable whose filter (`tracing`'s syntax) wins over `-v`.
pub const FILTER_ENV: &str = "MESH_LOG";

/// What a binary holds while it logs: with the `otel` feature and OTLP configured, the
/// exporter, which sends what is left when dropped (keep it until `main` returns).
#[must_use = "dropped, it stops exporting spans"]
pub struct Logging {
    #[cfg(feature = "otel")]
    _exporting: Option<crate::telemetry::otel::Exporting>,
}

/// Starts logging to stderr: warnings by default, `-v` info, `-vv` debug, `-vvv` trace.
/// With the `otel` feature, spans also go over OTLP where `OTEL_EXPORTER_OTLP_*` say
/// (the service named after the binary, unless `OTEL_SERVICE_NAME` says otherwise).
pub fn to_stderr(verbose: u8) -> Logging {
    let binary = std::env::args_os()
        .next()
        .and_then(|a| {
            std::path::Path::new(&a)
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
        })
        .unwrap_or_else(|| "mesh".into());
    to_stderr_as(verbose, &binary)
}

/// [`to_stderr`] for a process that hosts a module: its spans name `service` (the module),
/// not the binary that runs it, unless `OTEL_SERVICE_NAME` says otherwise.
pub fn to_stderr_as(verbose: u8, service: &str) -> Logging {
    let level = match verbose {
        0 => "warn",
        1 => "info",
        2 => "debug",
        _ => "trace",
    };
    let filter = EnvFilter::try_from_env(FILTER_ENV).unwrap_or_else(|_| EnvFilter::new(level));
    let ansi = colours(std::io::stderr().is_terminal());
    let fmt = fmt_layer(filter, verbose, ansi);
    #[cfg(feature = "otel")]
    {
        let (otel, exporting) = match crate::telemetry::otel::layer(service) {
            Some((layer, exporting)) => (Some(layer), Some(exporting)),
            None => (None, None),
        };
        tracing_subscriber::registry().with(fmt).with(otel).init();
        Logging {
            _exporting: exporting,
        }
    }
    #[cfg(not(feature = "otel"))]
    {
        let _ = service;
        tracing_subscriber::registry().with(fmt).init();
        Logging {}
    }
}

/// The stderr layer, filtered by `filter`.
fn fmt_layer<S>(filter: EnvFilter, verbose: u8, ansi: bool) -> impl tracing_subscriber::Layer<S>
where
    S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
{
    // The most the filter lets through, said again for the filter below, which would
    // otherwise say "anything": every `debug!` of every crate (rmcp's, per request) would be
    // weighed at run time instead of skipped by its level alone.
    let most = filter.max_level_hint().unwrap_or(LevelFilter::TRACE);
    // rmcp logs each JSON-RPC error it answers (an unknown method, bad params) as a warning:
    // routine answers to a client's mistakes, not the relay's trouble. Shown from `-v` on.
    let routine =
        filter_fn(move |meta| most >= *meta.level() && (verbose > 0 || !routine_rmcp_answer(meta)))
            .with_max_level_hint(most);
    tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        .with_ansi(ansi)
        .with_filter(filter)
        .with_filter(routine)
}

/// Whether output to a terminal (`terminal`) may be coloured: never with `NO_COLOR` set to
/// anything but the empty string (no-color.org).
pub fn colours(terminal: bool) -> bool {
    terminal && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty())
}

/// rmcp's warning for an error response it sends ("response error", fields id and error),
/// and its HTTP client worker's report that it quit (a console that is not there: the
/// command itself says so, in words).
fn routine_rmcp_answer(meta: &tracing::Metadata<'_>) -> bool {
    let answer = *meta.level() == Level::WARN
        && meta.target() == "rmcp::service"
        && meta.fields().field("error").is_some()
        && meta.fields().field("id").is_some();
    let worker = meta.target() == "rmcp::transport::worker";
    meta.is_event() && (answer || worker)
}

#[cfg(test)]
mod tests {
    use super::*;
    use tracing::Subscriber;

    /// The subscriber says the most it lets through, so that a crate's `debug!` under the
    /// default level costs one comparison.
    #[test]
    fn the_level_a_filter_lets_through_is_the_most_the_subscriber_takes() {
        for (directives, most) in [
            ("warn", LevelFilter::WARN),
            ("info", LevelFilter::INFO),
            ("warn,rmcp=debug", LevelFilter::DEBUG),
        ] {
            let subscriber = tracing_subscriber::registry().with(fmt_layer(
                EnvFilter::new(directives),
                0,
                false,
            ));
            assert_eq!(subscriber.max_level_hint(), Some(most), "{directives}");
        }
    }
}
