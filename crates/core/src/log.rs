//! Logging for a binary on the mesh (feature `log`): to stderr through `tracing`, at the level
//! `-v` counts, or as `MESH_LOG` says; stdout stays for data and protocol.

use tracing_subscriber::EnvFilter;

/// The environment variable whose filter (`tracing`'s syntax) wins over `-v`.
pub const FILTER_ENV: &str = "MESH_LOG";

/// Starts logging to stderr: warnings by default, `-v` info, `-vv` debug, `-vvv` trace.
pub fn to_stderr(verbose: u8) {
    let level = match verbose {
        0 => "warn",
        1 => "info",
        2 => "debug",
        _ => "trace",
    };
    let filter = EnvFilter::try_from_env(FILTER_ENV).unwrap_or_else(|_| EnvFilter::new(level));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .init();
}
