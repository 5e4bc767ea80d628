//! `mesh serve`: the relay over streamable HTTP, on loopback only. In front of rmcp: a bearer
//! token (401 without it), `Host`/`Origin` allow-lists (403, DNS rebinding), bounded
//! connections and sessions (503), idle connections closed, bodies that are not one JSON-RPC
//! message answered 400 with a JSON-RPC error, and accept errors ridden out. Everything else
//! is rmcp's: every request, a session's included, answered as one `application/json` body
//! unless it needs a stream (the vendored rmcp runs a session's request in the HTTP task,
//! `vendor/rmcp/README.mesh.md`).

use std::convert::Infallible;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::header::{AUTHORIZATION, CONTENT_TYPE, HOST, ORIGIN, WWW_AUTHENTICATE};
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto::Builder;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpListener;
use tokio::sync::Semaphore;

use super::Relay;
use mesh_core::telemetry::TraceContext;

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
    let at = SocketAddr::new(ip, port);
    TcpListener::bind(at).await.map_err(|e| {
        if e.kind() == std::io::ErrorKind::AddrInUse {
            anyhow::anyhow!(
                "cannot listen on {at}: something else is using it (another `mesh serve`, or `mesh up`'s console?); pick another port with --port, or --port 0 for any free one"
            )
        } else {
            anyhow::anyhow!("cannot listen on {at}: {e}")
        }
    })
}

/// How long a connection may sit without sending a request's headers before it is closed.
pub const IDLE: Duration = Duration::from_secs(30);
/// Sessions (legacy protocol versions) at once by default; more get 503 until some end.
pub const MAX_SESSIONS: usize = 256;

/// What the console holds at once.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Connections; `None`: 512, or half the open files this process may have.
    pub connections: Option<usize>,
    pub sessions: usize,
    /// How long a connection may be idle (nothing moving, nothing being answered).
    pub idle: Duration,
    /// How long a session may go unused before it is closed.
    pub session_idle: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            connections: None,
            sessions: MAX_SESSIONS,
            idle: IDLE,
            session_idle: SESSION_IDLE,
        }
    }
}
/// How long a session may go unused before it is closed.
pub const SESSION_IDLE: Duration = Duration::from_secs(120);

/// Connections at once: 512, or half the open files this process may have (the rest are the
/// bus's and the sessions'), so that a flood is answered 503 rather than failing `accept`.
fn max_connections() -> usize {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit fills the struct it is given.
    let ok = unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } == 0;
    let files = if ok { limit.rlim_cur as usize } else { 1024 };
    (files / 2).clamp(16, 512)
}

type Body = http_body_util::combinators::BoxBody<Bytes, Infallible>;

/// A response the console makes itself: JSON, with a status.
fn answer(status: StatusCode, body: serde_json::Value) -> Response<Body> {
    Response::builder()
        .status(status)
        .header(CONTENT_TYPE, "application/json")
        .body(Full::new(Bytes::from(body.to_string())).boxed())
        .expect("a valid response")
}

/// A JSON-RPC error in a 4xx/5xx answer, for clients that read bodies.
fn rpc_error(status: StatusCode, code: i64, message: &str) -> Response<Body> {
    answer(
        status,
        serde_json::json!({"jsonrpc": "2.0", "id": null, "error": {"code": code, "message": message}}),
    )
}

/// A POST body of at most [`super::MAX_MESSAGE`] bytes. A larger one is read on and thrown
/// away (up to four times the bound) so that the client, still sending, reads the 413
/// rather than a reset connection.
async fn read_bounded(mut body: Incoming) -> Result<Bytes, String> {
    let mut kept = bytes::BytesMut::new();
    let mut seen = 0usize;
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|e| format!("the request was cut off: {e}"))?;
        let Ok(data) = frame.into_data() else {
            continue;
        };
        seen += data.len();
        if seen <= super::MAX_MESSAGE {
            kept.extend_from_slice(&data);
        } else if seen > 4 * super::MAX_MESSAGE {
            break;
        }
    }
    if seen > super::MAX_MESSAGE {
        return Err(format!(
            "the request is larger than {} bytes",
            super::MAX_MESSAGE
        ));
    }
    Ok(kept.freeze())
}

/// Whether the request carries the token, compared in constant time: as
/// `Authorization: Bearer <token>`, or, from a client that sends no headers of its own (the
/// conformance suite, older Inspectors), as `?token=<token>` in the URL, as Jupyter takes
/// its own. A header, when there is one, is the only word.
fn authorized(headers: &hyper::HeaderMap, query: Option<&str>, token: &str) -> bool {
    let same = |given: &[u8]| {
        let b = token.as_bytes();
        given.len() == b.len() && given.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
    };
    if let Some(header) = headers.get(AUTHORIZATION) {
        return header
            .to_str()
            .ok()
            .and_then(|v| v.strip_prefix("Bearer "))
            .is_some_and(|given| same(given.trim().as_bytes()));
    }
    let mut given = form_urlencoded::parse(query.unwrap_or_default().as_bytes())
        .filter(|(k, _)| k == "token")
        .map(|(_, v)| v);
    // One token, once: a second would leave which one counts to whoever reads it.
    match (given.next(), given.next()) {
        (Some(t), None) => same(t.as_bytes()),
        _ => false,
    }
}

/// The header that names a session.
const SESSION_ID: &str = "mcp-session-id";

/// What the console checks before rmcp sees a request.
struct Front {
    service: StreamableHttpService<Relay, LocalSessionManager>,
    sessions: Arc<LocalSessionManager>,
    /// The `Host` values the console answers to itself (rmcp checks the others).
    hosts: Vec<String>,
    max_sessions: usize,
    /// Requests that may make a session, in rmcp's hands now: counted against the bound with
    /// the sessions made, so that many `initialize`s at once cannot all pass it.
    opening: Arc<AtomicUsize>,
    idle: Duration,
    token: String,
}

/// One request counted in `Front::opening` while it lasts.
struct Opening(Arc<AtomicUsize>);

impl Drop for Opening {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

impl Front {
    async fn handle(&self, request: Request<Incoming>) -> Response<Body> {
        // Headers there may be one of, sent twice: checks that read the first would let the
        // second through (RFC 9112 answers two `Host`s with 400).
        for name in [HOST, ORIGIN, AUTHORIZATION] {
            if request.headers().get_all(&name).iter().nth(1).is_some() {
                return rpc_error(
                    StatusCode::BAD_REQUEST,
                    -32600,
                    &format!("invalid request: more than one {name} header"),
                );
            }
        }
        // A target in absolute form (`POST http://evil.example/mcp`) names its host there,
        // whatever `Host` says: refused as a foreign `Host` is (DNS rebinding, proxies).
        if let Some(authority) = request.uri().authority()
            && !self.hosts.iter().any(|h| h == authority.as_str())
        {
            return rpc_error(
                StatusCode::FORBIDDEN,
                -32600,
                &format!(
                    "forbidden: the request is for {authority}, not this console; send it to the console's own address"
                ),
            );
        }
        if !authorized(request.headers(), request.uri().query(), &self.token) {
            let mut r = rpc_error(
                StatusCode::UNAUTHORIZED,
                -32001,
                "this console needs its bearer token (Authorization: Bearer …, or ?token=… in \
                 the URL from a client that cannot send headers): its owner's \
                 ~/.local/state/mesh/console.token, which `mesh --console` reads by itself",
            );
            r.headers_mut().insert(
                WWW_AUTHENTICATE,
                hyper::header::HeaderValue::from_static("Bearer"),
            );
            return r;
        }
        let (parts, body) = request.into_parts();
        let is_delete = parts.method == Method::DELETE;
        let mut opening = None;
        let request = if parts.method == Method::POST {
            // One JSON-RPC message per POST: read it (bounded) and say what is wrong with it
            // in JSON-RPC's own words, where rmcp would answer 415 in plain text.
            // The whole body within IDLE: a trickle of bytes does not hold a connection.
            let bytes = match tokio::time::timeout(self.idle, read_bounded(body)).await {
                Ok(Ok(b)) => b,
                Ok(Err(why)) => return rpc_error(StatusCode::PAYLOAD_TOO_LARGE, -32600, &why),
                Err(_) => {
                    return rpc_error(
                        StatusCode::REQUEST_TIMEOUT,
                        -32600,
                        &format!("the request's body did not arrive within {:?}", self.idle),
                    );
                }
            };
            // Checked, not built: rmcp reads the message itself.
            if let Err(e) = serde_json::from_slice::<serde::de::IgnoredAny>(&bytes) {
                return rpc_error(
                    StatusCode::BAD_REQUEST,
                    -32700,
                    &format!("parse error: the body is not JSON ({e})"),
                );
            }
            if bytes.trim_ascii_start().first() == Some(&b'[') {
                return rpc_error(
                    StatusCode::BAD_REQUEST,
                    -32600,
                    "invalid request: JSON-RPC batches are not part of MCP since 2025-06-18; send one message per request",
                );
            }
            // As rmcp reads it: a session id that is not text is no session id, and rmcp
            // makes a new session for an `initialize` that carries one (the bound must hold).
            let new_session = parts
                .headers
                .get(SESSION_ID)
                .and_then(|v| v.to_str().ok())
                .is_none();
            let others = if new_session {
                let counted = Opening(self.opening.clone());
                let others = counted.0.fetch_add(1, Ordering::SeqCst);
                opening = Some(counted);
                others
            } else {
                0
            };
            if new_session
                && self.sessions.sessions.read().await.len() + others >= self.max_sessions
            {
                return rpc_error(
                    StatusCode::SERVICE_UNAVAILABLE,
                    -32000,
                    &format!(
                        "the console has {} sessions open: try again when some end",
                        self.max_sessions
                    ),
                );
            }
            let read = Full::new(bytes).map_err(|never: Infallible| match never {});
            Request::from_parts(parts, read.boxed())
        } else {
            Request::from_parts(parts, body.boxed())
        };
        let mut response = self.service.handle(request).await;
        // Made by now, if it was to be: the sessions count it from here.
        drop(opening);
        // rmcp answers a session's end 202; clients (the Python SDK) expect 200.
        if is_delete && response.status() == StatusCode::ACCEPTED {
            *response.status_mut() = StatusCode::OK;
        }
        response
    }
}

/// Serves `relay` on `listener` until `shutdown` completes; requests must carry `token`.
pub async fn serve(
    relay: Relay,
    listener: TcpListener,
    token: String,
    limits: Limits,
    shutdown: impl std::future::Future<Output = ()>,
) -> anyhow::Result<()> {
    let port = listener.local_addr()?.port();
    // With the port: a page served on another local port is no page of the console's.
    let hosts: Vec<String> = ["localhost", "127.0.0.1", "[::1]"]
        .iter()
        .map(|h| format!("{h}:{port}"))
        .collect();
    let origins: Vec<String> = ["localhost", "127.0.0.1", "[::1]"]
        .iter()
        .flat_map(|h| [format!("http://{h}:{port}"), format!("https://{h}:{port}")])
        .collect();
    let config = StreamableHttpServerConfig::default()
        .with_allowed_hosts(hosts)
        .with_allowed_origins(origins)
        .with_max_request_body_bytes(super::MAX_MESSAGE)
        .with_json_response(true)
        .enforce_origin_validation();
    let mut sessions = LocalSessionManager::default();
    sessions.session_config.keep_alive = Some(limits.session_idle);
    let sessions = Arc::new(sessions);
    let service = StreamableHttpService::new(move || Ok(relay.clone()), sessions.clone(), config);
    let front = Arc::new(Front {
        service,
        sessions,
        hosts: ["localhost", "127.0.0.1", "[::1]"]
            .iter()
            .map(|h| format!("{h}:{port}"))
            .collect(),
        max_sessions: limits.sessions,
        opening: Arc::new(AtomicUsize::new(0)),
        idle: limits.idle,
        token,
    });
    let slots = Arc::new(Semaphore::new(
        limits.connections.unwrap_or_else(max_connections),
    ));
    let mut backoff = Duration::from_millis(10);
    tokio::pin!(shutdown);
    loop {
        let stream = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => {
                    backoff = Duration::from_millis(10);
                    stream
                }
                // Out of files, or a connection reset before it was taken: say so, wait a
                // little, and keep serving.
                Err(e) => {
                    tracing::warn!("console: accept failed ({e}); retrying in {backoff:?}");
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(Duration::from_secs(1));
                    continue;
                }
            },
            _ = &mut shutdown => return Ok(()),
        };
        // Each answer goes out as it is written: with Nagle's algorithm, the second of two
        // small writes (an SSE priming event, then the result) waits for the client's delayed
        // ACK, about 40 ms on every call of a kept-alive connection.
        if let Err(e) = stream.set_nodelay(true) {
            tracing::debug!("console: cannot set TCP_NODELAY: {e}");
        }
        let Ok(slot) = slots.clone().try_acquire_owned() else {
            tokio::spawn(refuse_busy(stream));
            continue;
        };
        let front = front.clone();
        tokio::spawn(async move {
            let _slot = slot;
            let (stream, last) = Watched::new(stream);
            let io = TokioIo::new(stream);
            // Requests being answered: a tool call may take longer than IDLE with nothing
            // on the wire, and is not idleness.
            let busy = Arc::new(AtomicUsize::new(0));
            let answering = busy.clone();
            let service = service_fn(move |request| {
                let (front, busy) = (front.clone(), answering.clone());
                async move {
                    busy.fetch_add(1, Ordering::Relaxed);
                    let response = front.handle(request).await;
                    busy.fetch_sub(1, Ordering::Relaxed);
                    Ok::<_, Infallible>(response)
                }
            });
            let mut builder = Builder::new(TokioExecutor::new());
            builder
                .http1()
                .timer(TokioTimer::new())
                .header_read_timeout(limits.idle);
            // A connection on which nothing moves either way for IDLE is closed: silent
            // from the start, idle between requests, or stalled mid-body. (An event stream
            // the console writes to is not idle: it sends keep-alives.)
            tokio::select! {
                served = builder.serve_connection(io, service) => {
                    if let Err(e) = served {
                        tracing::debug!("console connection ended: {e}");
                    }
                }
                () = idle(last, busy, limits.idle) => {
                    tracing::debug!("console connection closed: idle for {:?}", limits.idle)
                }
            }
        });
    }
}

/// Milliseconds since `EPOCH`, for the last-activity stamps.
fn now_ms() -> u64 {
    EPOCH.elapsed().as_millis() as u64
}

static EPOCH: std::sync::LazyLock<std::time::Instant> =
    std::sync::LazyLock::new(std::time::Instant::now);

/// A connection that stamps the time whenever bytes move either way.
struct Watched<S> {
    inner: S,
    last: Arc<AtomicU64>,
}

impl<S> Watched<S> {
    fn new(inner: S) -> (Self, Arc<AtomicU64>) {
        let last = Arc::new(AtomicU64::new(now_ms()));
        (
            Watched {
                inner,
                last: last.clone(),
            },
            last,
        )
    }

    fn moved(&self, n: usize) {
        if n > 0 {
            self.last.store(now_ms(), Ordering::Relaxed);
        }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Watched<S> {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let polled = std::pin::Pin::new(&mut self.inner).poll_read(cx, buf);
        let n = buf.filled().len() - before;
        self.moved(n);
        polled
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Watched<S> {
    fn poll_write(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        data: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        let polled = std::pin::Pin::new(&mut self.inner).poll_write(cx, data);
        if let std::task::Poll::Ready(Ok(n)) = &polled {
            self.moved(*n);
        }
        polled
    }

    fn poll_flush(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// Completes once nothing has moved on the connection for `limit` while no request of it
/// was being answered.
async fn idle(last: Arc<AtomicU64>, busy: Arc<AtomicUsize>, limit: Duration) {
    loop {
        let quiet = now_ms().saturating_sub(last.load(Ordering::Relaxed));
        let quiet = Duration::from_millis(quiet);
        if quiet >= limit && busy.load(Ordering::Relaxed) == 0 {
            return;
        }
        let step = limit.saturating_sub(quiet).max(Duration::from_millis(100));
        tokio::time::sleep(step).await;
    }
}

/// Answers a connection past the limit with 503 and closes it.
async fn refuse_busy(mut stream: tokio::net::TcpStream) {
    use tokio::io::AsyncWriteExt;
    let body = r#"{"jsonrpc":"2.0","id":null,"error":{"code":-32000,"message":"the console has too many connections open: try again shortly"}}"#;
    let response = format!(
        "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\nretry-after: 1\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    );
    let _ = tokio::time::timeout(
        Duration::from_secs(2),
        stream.write_all(response.as_bytes()),
    )
    .await;
}

/// A W3C trace context an HTTP request carries in its headers (one `traceparent`).
pub(crate) fn header_trace(headers: &hyper::HeaderMap) -> Option<TraceContext> {
    let mut parents = headers.get_all("traceparent").iter();
    let parent = parents.next()?.to_str().ok()?;
    if parents.next().is_some() {
        return None;
    }
    let state = headers.get("tracestate").and_then(|v| v.to_str().ok());
    TraceContext::parse(parent, state)
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
