//! `mesh serve`: the relay over streamable HTTP, on loopback only. In front of rmcp: a bearer
//! token (401 without it), `Host`/`Origin` allow-lists (403, DNS rebinding), bounded
//! connections and sessions, idle connections closed, bodies that are not one JSON-RPC
//! message answered 400 with a JSON-RPC error, and accept errors ridden out. Everything else
//! is rmcp's: every request, a session's included, answered as one `application/json` body
//! unless it needs a stream (the vendored rmcp runs a session's request in the HTTP task,
//! `vendor/rmcp/README.mesh.md`).
//!
//! The console stays its owner's (whoever holds the token); nobody without it can hold it
//! shut, and no one client of the owner can hold the owner's other clients out:
//! - A new connection is *unproven* and holds a place in a pool of its own (half the
//!   connection bound). It is proven by the first request whose headers carry the token
//!   (checked before its body is read), and only then takes a place in the other pool.
//! - An unproven connection has [`PROVE_WITHIN`] (or the idle limit, if shorter) from its
//!   accept to be proven, whatever it sends meanwhile; then it is closed.
//! - A new connection is always taken: when the unproven pool is full, its oldest member
//!   is closed (a client with the token proves its connection with its first request and
//!   leaves the pool, so a flood that keeps the pool full only churns itself). When the
//!   proven pool is full, a newly proven connection closes the least recently active proven
//!   one that is answering nothing (one client's idle connections cannot keep another
//!   out); when every one is answering a request, the newcomer is answered 503 instead:
//!   calls in flight are not cut off.
//! - Sessions (protocol versions before 2026-07-28) are bounded: an `initialize` past the
//!   bound is answered, and the least recently used session (one with no request in
//!   flight, when there is such) is closed to keep the bound; its client gets 404 and
//!   initialises again, as after an idle session's end. Sessions are made one at a time,
//!   so the bound holds however many come at once.

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
use rmcp::model::{ClientJsonRpcMessage, ClientRequest};
use rmcp::transport::streamable_http_server::session::SessionManager;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpListener;
use tokio::sync::Notify;

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
    // Room for connections not yet taken (the kernel caps it at `somaxconn`): under a flood
    // the console takes them as fast as they come, and a client's connection waits its turn
    // rather than losing its SYN and waiting seconds for the retry (the default is 128).
    let listen = || {
        let socket = match ip {
            IpAddr::V4(_) => tokio::net::TcpSocket::new_v4(),
            IpAddr::V6(_) => tokio::net::TcpSocket::new_v6(),
        }?;
        socket.set_reuseaddr(true)?;
        socket.bind(at)?;
        socket.listen(4096)
    };
    listen().map_err(|e| {
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
/// How long a new connection has, from its accept, to send a request's headers with the
/// token (clients send theirs at once); a connection dribbling bytes without it is closed.
pub const PROVE_WITHIN: Duration = Duration::from_secs(5);
/// Sessions (legacy protocol versions) at once by default; past them, the least recently
/// used is closed.
pub const MAX_SESSIONS: usize = 256;

/// What the console holds at once.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Connections, half of them at most unproven (no request with the token yet); `None`:
    /// 512, or half the open files this process may have.
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
/// bus's and the sessions'), so that a flood closes connections rather than failing `accept`.
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
    /// Each session's use, as the console saw its requests: which to close at the bound.
    used: Arc<Used>,
    /// Held while a session is made and the bound kept: one at a time, so that many
    /// `initialize`s at once cannot all pass the bound.
    making: tokio::sync::Mutex<()>,
    pools: Arc<Pools>,
    idle: Duration,
    token: String,
}

/// The sessions the console made, by id, with their use.
#[derive(Debug, Default)]
struct Used {
    sessions: std::sync::Mutex<HashMap<Arc<str>, Use>>,
    /// Orders every use (a count, not a clock: two uses in the same millisecond differ).
    tick: AtomicU64,
}

/// A session's use: when a request of it last began or ended, and how many are in flight.
#[derive(Debug, Default)]
struct Use {
    last: u64,
    busy: usize,
}

impl Used {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<Arc<str>, Use>> {
        self.sessions.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn now(&self) -> u64 {
        self.tick.fetch_add(1, Ordering::Relaxed)
    }

    /// Counts a request of session `id` in its use while it lasts, if the console made it.
    fn using(self: &Arc<Self>, id: Arc<str>) -> Option<Using> {
        let mut sessions = self.lock();
        let u = sessions.get_mut(&id)?;
        u.busy += 1;
        u.last = self.now();
        Some(Using {
            used: self.clone(),
            id,
        })
    }
}

/// A request of a known session, counted in its use while it lasts.
struct Using {
    used: Arc<Used>,
    id: Arc<str>,
}

impl Drop for Using {
    fn drop(&mut self) {
        let last = self.used.now();
        if let Some(u) = self.used.lock().get_mut(&self.id) {
            u.busy = u.busy.saturating_sub(1);
            u.last = last;
        }
    }
}

/// Whether `body` is an `initialize`, as rmcp reads it: without a session id, the only
/// request that makes a session.
fn is_initialize(body: &[u8]) -> bool {
    #[derive(serde::Deserialize)]
    struct Head<'a> {
        #[serde(borrow)]
        method: Option<std::borrow::Cow<'a, str>>,
    }
    // A request that plainly names another method (a `tools/call` without a session, under
    // 2026-07-28) is not built twice; anything less plain is read as rmcp reads it.
    if let Ok(Head { method: Some(m) }) = serde_json::from_slice::<Head>(body)
        && m != "initialize"
    {
        return false;
    }
    matches!(
        ClientJsonRpcMessage::from_slice(body),
        Ok(ClientJsonRpcMessage::Request(r)) if matches!(r.request, ClientRequest::InitializeRequest(_))
    )
}

impl Front {
    async fn handle(&self, request: Request<Incoming>, conn: &Arc<Conn>) -> Response<Body> {
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
        // The token, on the headers: the connection is the owner's, before its body is read.
        if !self.pools.prove(conn) {
            let mut r = rpc_error(
                StatusCode::SERVICE_UNAVAILABLE,
                -32000,
                &format!(
                    "the console's {} connections are all answering requests: try again shortly",
                    self.pools.max_proven
                ),
            );
            let headers = r.headers_mut();
            headers.insert(
                hyper::header::RETRY_AFTER,
                hyper::header::HeaderValue::from_static("1"),
            );
            headers.insert(
                hyper::header::CONNECTION,
                hyper::header::HeaderValue::from_static("close"),
            );
            return r;
        }
        let (parts, body) = request.into_parts();
        let is_delete = parts.method == Method::DELETE;
        // As rmcp reads it: a session id that is not text is no session id, and rmcp makes
        // a new session for an `initialize` that carries one (the bound must hold).
        let session = parts
            .headers
            .get(SESSION_ID)
            .and_then(|v| v.to_str().ok())
            .map(Arc::<str>::from);
        let _using = session.and_then(|id| self.used.using(id));
        let mut makes_session = false;
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
            makes_session = parts
                .headers
                .get(SESSION_ID)
                .is_none_or(|v| v.to_str().is_err())
                && is_initialize(&bytes);
            let read = Full::new(bytes).map_err(|never: Infallible| match never {});
            Request::from_parts(parts, read.boxed())
        } else {
            Request::from_parts(parts, body.boxed())
        };
        let mut response = if makes_session {
            let _making = self.making.lock().await;
            let response = self.service.handle(request).await;
            let made = response
                .headers()
                .get(SESSION_ID)
                .and_then(|v| v.to_str().ok())
                .map(Arc::<str>::from);
            if let Some(made) = made {
                self.keep_bound(made).await;
            }
            response
        } else {
            self.service.handle(request).await
        };
        // rmcp answers a session's end 202; clients (the Python SDK) expect 200.
        if is_delete && response.status() == StatusCode::ACCEPTED {
            *response.status_mut() = StatusCode::OK;
        }
        response
    }

    /// Counts session `made` (just made) and closes the least recently used others past the
    /// bound: the newest `initialize` always gets its session (the owner gets in), and one
    /// client of the owner's cannot fill the sessions for ever.
    async fn keep_bound(&self, made: Arc<str>) {
        let live: HashSet<Arc<str>> = self
            .sessions
            .sessions
            .read()
            .await
            .keys()
            .cloned()
            .collect();
        let excess = live.len().saturating_sub(self.max_sessions.max(1));
        let victims: Vec<Arc<str>> = {
            let last = self.used.now();
            let mut used = self.used.lock();
            used.retain(|id, _| live.contains(id));
            used.insert(made.clone(), Use { last, busy: 0 });
            // Idle ones first, then the least recently used; one unseen (none should be)
            // counts as never used.
            let rank = |id: &Arc<str>| used.get(id).map_or((false, 0), |u| (u.busy > 0, u.last));
            let mut others: Vec<&Arc<str>> = live.iter().filter(|id| **id != made).collect();
            others.sort_by_key(|id| rank(id));
            others.into_iter().take(excess).cloned().collect()
        };
        for id in victims {
            tracing::debug!(
                "console: session {id} closed to keep the bound of {}",
                self.max_sessions
            );
            if let Err(e) = self.sessions.close_session(&id).await {
                tracing::warn!("console: cannot close session {id}: {e}");
            }
            self.used.lock().remove(&id);
        }
    }
}

/// One connection, as the pools see it.
struct Conn {
    /// Its place in the order of accepts: the unproven pool closes the oldest first.
    serial: u64,
    /// When bytes last moved either way (ms since `EPOCH`).
    last: AtomicU64,
    /// Requests of it being answered.
    busy: AtomicUsize,
    /// Whether a request of it carried the token.
    proven: AtomicBool,
    /// Told when the pools close it to make room.
    close: Notify,
}

/// The connections held: those not yet proven by a request with the token, and those that
/// were. Each pool is bounded apart, so nobody without the token takes a place an owner's
/// connection could have.
struct Pools {
    state: std::sync::Mutex<PoolState>,
    max_unproven: usize,
    max_proven: usize,
}

#[derive(Default)]
struct PoolState {
    serial: u64,
    /// By serial: the oldest first.
    unproven: BTreeMap<u64, Arc<Conn>>,
    proven: HashMap<u64, Arc<Conn>>,
}

impl Pools {
    /// Pools for `connections` at once: half unproven at most, the rest proven.
    fn new(connections: usize) -> Self {
        let max_unproven = (connections / 2).max(1);
        Pools {
            state: Default::default(),
            max_unproven,
            max_proven: connections.saturating_sub(max_unproven).max(1),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, PoolState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A new connection, unproven; the oldest unproven is closed when there is no room.
    fn admit(&self) -> Arc<Conn> {
        let mut state = self.lock();
        state.serial += 1;
        let conn = Arc::new(Conn {
            serial: state.serial,
            last: AtomicU64::new(now_ms()),
            busy: AtomicUsize::new(0),
            proven: AtomicBool::new(false),
            close: Notify::new(),
        });
        state.unproven.insert(conn.serial, conn.clone());
        if state.unproven.len() > self.max_unproven
            && let Some((_, oldest)) = state.unproven.pop_first()
        {
            oldest.close.notify_one();
        }
        conn
    }

    /// `conn` carried the token: it moves to the proven pool, closing the least recently
    /// active proven connection that is answering nothing if the pool is full. False when
    /// every proven connection is answering a request: calls in flight are not cut off for a
    /// newcomer, which is refused.
    fn prove(&self, conn: &Arc<Conn>) -> bool {
        if conn.proven.load(Ordering::Acquire) {
            return true;
        }
        let mut state = self.lock();
        // Closed to make room already: it goes, it takes no proven place.
        if !state.unproven.contains_key(&conn.serial) {
            return true;
        }
        if state.proven.len() >= self.max_proven {
            let victim = state
                .proven
                .values()
                .filter(|c| c.busy.load(Ordering::Relaxed) == 0)
                .min_by_key(|c| (c.last.load(Ordering::Relaxed), c.serial))
                .map(|c| c.serial);
            let Some(victim) = victim.and_then(|v| state.proven.remove(&v)) else {
                return false;
            };
            victim.close.notify_one();
        }
        state.unproven.remove(&conn.serial);
        conn.proven.store(true, Ordering::Release);
        state.proven.insert(conn.serial, conn.clone());
        true
    }

    /// `conn` has ended.
    fn release(&self, conn: &Conn) {
        let mut state = self.lock();
        state.unproven.remove(&conn.serial);
        state.proven.remove(&conn.serial);
    }
}

/// A connection's place in the pools, given up when its task ends.
struct Held(Arc<Pools>, Arc<Conn>);

impl Drop for Held {
    fn drop(&mut self) {
        self.0.release(&self.1);
    }
}

/// Completes when `conn` has not been proven `within` of its accept.
async fn unproven_after(conn: &Conn, within: Duration) {
    tokio::time::sleep(within).await;
    if conn.proven.load(Ordering::Acquire) {
        std::future::pending::<()>().await;
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
    let pools = Arc::new(Pools::new(
        limits.connections.unwrap_or_else(max_connections),
    ));
    let front = Arc::new(Front {
        service,
        sessions,
        hosts: ["localhost", "127.0.0.1", "[::1]"]
            .iter()
            .map(|h| format!("{h}:{port}"))
            .collect(),
        max_sessions: limits.sessions,
        used: Default::default(),
        making: Default::default(),
        pools: pools.clone(),
        idle: limits.idle,
        token,
    });
    // On a worker, not in the caller's task (`block_on` under `mesh serve`): there each new
    // connection's task runs before the next accept, so a client that sent its request with
    // its connection is proven before a flood of newer ones can push it out.
    let mut accepting = Accepting(tokio::spawn(accept(listener, front, pools, limits)));
    tokio::select! {
        joined = &mut accepting.0 => match joined {
            Ok(never) => match never {},
            Err(e) => Err(anyhow::anyhow!("the console stopped accepting connections: {e}")),
        },
        () = shutdown => Ok(()),
    }
}

/// The accept loop's task, stopped when the console is (its listener closed with it).
struct Accepting(tokio::task::JoinHandle<Infallible>);

impl Drop for Accepting {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Accepts connections on `listener` for ever, each served in a task of its own.
async fn accept(
    listener: TcpListener,
    front: Arc<Front>,
    pools: Arc<Pools>,
    limits: Limits,
) -> Infallible {
    let prove_within = limits.idle.min(PROVE_WITHIN);
    let mut backoff = Duration::from_millis(10);
    loop {
        let stream = match listener.accept().await {
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
        };
        // Each answer goes out as it is written: with Nagle's algorithm, the second of two
        // small writes (an SSE priming event, then the result) waits for the client's delayed
        // ACK, about 40 ms on every call of a kept-alive connection.
        if let Err(e) = stream.set_nodelay(true) {
            tracing::debug!("console: cannot set TCP_NODELAY: {e}");
        }
        let conn = pools.admit();
        let (front, held) = (front.clone(), Held(pools.clone(), conn.clone()));
        tokio::spawn(async move {
            let _held = held;
            let io = TokioIo::new(Watched {
                inner: stream,
                conn: conn.clone(),
            });
            let answering = conn.clone();
            let service = service_fn(move |request| {
                let (front, conn) = (front.clone(), answering.clone());
                async move {
                    // Requests being answered: a tool call may take longer than IDLE with
                    // nothing on the wire, and is not idleness.
                    conn.busy.fetch_add(1, Ordering::Relaxed);
                    let response = front.handle(request, &conn).await;
                    conn.busy.fetch_sub(1, Ordering::Relaxed);
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
                () = idle(&conn, limits.idle) => {
                    tracing::debug!("console connection closed: idle for {:?}", limits.idle)
                }
                () = unproven_after(&conn, prove_within) => {
                    tracing::debug!("console connection closed: no request with the token within {prove_within:?}")
                }
                () = conn.close.notified() => {
                    tracing::debug!("console connection closed to make room for a newer one")
                }
            }
        });
        // The new connection's task first: a client with the token has sent its request
        // with its connection, and is proven before more accepts can push it out.
        tokio::task::yield_now().await;
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
    conn: Arc<Conn>,
}

impl<S> Watched<S> {
    fn moved(&self, n: usize) {
        if n > 0 {
            self.conn.last.store(now_ms(), Ordering::Relaxed);
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

/// Completes once nothing has moved on `conn` for `limit` while no request of it was being
/// answered.
async fn idle(conn: &Conn, limit: Duration) {
    loop {
        let quiet = now_ms().saturating_sub(conn.last.load(Ordering::Relaxed));
        let quiet = Duration::from_millis(quiet);
        if quiet >= limit && conn.busy.load(Ordering::Relaxed) == 0 {
            return;
        }
        let step = limit.saturating_sub(quiet).max(Duration::from_millis(100));
        tokio::time::sleep(step).await;
    }
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
