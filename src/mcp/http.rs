//! `mesh serve`: the relay over streamable HTTP, on loopback only; requests whose `Host` or
//! `Origin` is not loopback are refused with 403 (DNS rebinding).

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto::Builder;
use hyper_util::service::TowerToHyperService;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use tokio::net::TcpListener;

use super::Relay;

/// The console's port when none is given.
pub const DEFAULT_PORT: u16 = 7411;

/// The path MCP clients post to.
pub const PATH: &str = "/mcp";

/// A bind address that is not loopback.
#[derive(Debug, thiserror::Error)]
#[error(
    "mesh serve binds loopback only (127.0.0.1, ::1, localhost), not {0}: the console relays with your bus credentials and must not be reachable from the network"
)]
pub struct NotLoopback(pub String);

/// Checks that `host` names a loopback address.
pub fn loopback(host: &str) -> Result<IpAddr, NotLoopback> {
    let ip = match host {
        "localhost" => IpAddr::from([127, 0, 0, 1]),
        other => other
            .trim_start_matches('[')
            .trim_end_matches(']')
            .parse::<IpAddr>()
            .map_err(|_| NotLoopback(host.to_owned()))?,
    };
    if ip.is_loopback() {
        Ok(ip)
    } else {
        Err(NotLoopback(host.to_owned()))
    }
}

/// Binds the console; `port` 0 picks a free one.
pub async fn bind(host: &str, port: u16) -> anyhow::Result<TcpListener> {
    let ip = loopback(host)?;
    let listener = TcpListener::bind(SocketAddr::new(ip, port)).await?;
    Ok(listener)
}

/// Serves `relay` on `listener` until `shutdown` completes.
pub async fn serve(
    relay: Relay,
    listener: TcpListener,
    shutdown: impl std::future::Future<Output = ()>,
) -> anyhow::Result<()> {
    let port = listener.local_addr()?.port();
    let hosts = ["localhost", "127.0.0.1", "::1", "[::1]"];
    let origins: Vec<String> = ["localhost", "127.0.0.1", "[::1]"]
        .iter()
        .flat_map(|h| [format!("http://{h}:{port}"), format!("https://{h}:{port}")])
        .collect();
    let config = StreamableHttpServerConfig::default()
        .with_allowed_hosts(hosts)
        .with_allowed_origins(origins)
        .with_max_request_body_bytes(super::MAX_MESSAGE)
        .enforce_origin_validation();
    let service = StreamableHttpService::new(
        move || Ok(relay.clone()),
        Arc::new(LocalSessionManager::default()),
        config,
    );
    tokio::pin!(shutdown);
    loop {
        let (stream, _) = tokio::select! {
            accepted = listener.accept() => accepted?,
            _ = &mut shutdown => return Ok(()),
        };
        let service = TowerToHyperService::new(service.clone());
        tokio::spawn(async move {
            let io = TokioIo::new(stream);
            if let Err(e) = Builder::new(TokioExecutor::new())
                .serve_connection(io, service)
                .await
            {
                tracing::debug!("console connection ended: {e}");
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_loopback_binds() {
        for ok in ["127.0.0.1", "::1", "[::1]", "localhost", "127.0.0.2"] {
            assert!(loopback(ok).is_ok(), "{ok}");
        }
        for bad in ["0.0.0.0", "::", "192.168.1.10", "10.0.0.1", "example.com"] {
            let e = loopback(bad).unwrap_err().to_string();
            assert!(e.contains("loopback only"), "{e}");
        }
    }
}
