//! `mesh serve`: the relay over streamable HTTP, on loopback only. In front of rmcp: a bearer
//! token (401 without it), `Host`/`Origin` allow-lists (403, DNS rebinding), bounded
//! connections and sessions (503), idle connections closed, bodies that are not one JSON-RPC
//! message answered 400 with a JSON-RPC error, and accept errors ridden out.
//!
//! A plain `tools/call` on an initialised session (protocols before 2026-07-28) that passes
//! the same checks rmcp makes is answered here, in one `application/json` response, without
//! rmcp's session worker and event stream; a call that needs the person's input, and every
//! other message, goes to rmcp.

use std::collections::HashMap;
use std::convert::Infallible;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::header::{ACCEPT, AUTHORIZATION, CONTENT_TYPE, HOST, ORIGIN, WWW_AUTHENTICATE};
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto::Builder;
use rmcp::RoleServer;
use rmcp::model::{ClientJsonRpcMessage, ProtocolVersion};
use rmcp::service::Peer;
use rmcp::transport::streamable_http_server::session::SessionManager;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpListener;
use tokio::sync::Semaphore;

use super::Relay;
use super::call::{self, PlainCall};
use mesh_core::subjects::ToolResult;
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
/// The header that names the session's protocol version.
const PROTOCOL_VERSION: &str = "mcp-protocol-version";

/// Initialised sessions by id, with their peer: where a plain `tools/call` is answered
/// without rmcp. Filled by the relay when a session's `notifications/initialized` arrives.
pub(crate) struct Peers {
    known: Mutex<HashMap<String, Known>>,
    /// Calls the console relayed whose tool asked a question, handed to rmcp to ask it: by
    /// session id and request id, so that rmcp's call takes the answer rather than calling
    /// the tool again.
    asked: Mutex<HashMap<(String, String), Asked>>,
    /// How often rmcp hears of a session in use: well within its idle limit.
    touch_every: Duration,
}

/// A call relayed here whose tool asked for input.
struct Asked {
    name: String,
    arguments: serde_json::Map<String, serde_json::Value>,
    result: ToolResult,
    at: Instant,
}

/// How long a question relayed here waits for rmcp to take it (it takes it at once: the same
/// request goes to rmcp next); past that it is dropped, and so are more than this many.
const ASKED_FOR: Duration = Duration::from_secs(60);
const ASKED_AT_MOST: usize = 1024;

/// A request id as JSON, the same however it was spelled.
fn id_key(id: &impl serde::Serialize) -> String {
    serde_json::to_value(id)
        .map(|v| v.to_string())
        .unwrap_or_default()
}

struct Known {
    peer: Peer<RoleServer>,
    /// When rmcp last heard of the session; calls answered here do not reach it.
    touched: Instant,
}

impl Peers {
    fn new(session_idle: Duration) -> Peers {
        Peers {
            known: Mutex::default(),
            asked: Mutex::default(),
            touch_every: session_idle / 4,
        }
    }

    /// Keeps `peer` under the session id of the request it came in (rmcp puts the request's
    /// parts in `extensions`); forgets sessions that have ended meanwhile.
    pub(crate) fn note(&self, extensions: &rmcp::model::Extensions, peer: Peer<RoleServer>) {
        let Some(parts) = extensions.get::<hyper::http::request::Parts>() else {
            return;
        };
        let Some(id) = parts.headers.get(SESSION_ID).and_then(|v| v.to_str().ok()) else {
            return;
        };
        let mut known = self.known.lock().unwrap_or_else(|p| p.into_inner());
        known.retain(|_, k| !k.peer.is_transport_closed());
        let touched = Instant::now();
        known.insert(id.to_owned(), Known { peer, touched });
    }

    /// The peer of session `id` while it is open, and whether rmcp should hear of the session
    /// now (so that its idle timer does not end a session busy with calls answered here).
    fn get(&self, id: &str) -> Option<(Peer<RoleServer>, bool)> {
        let mut known = self.known.lock().unwrap_or_else(|p| p.into_inner());
        let entry = known.get_mut(id)?;
        if entry.peer.is_transport_closed() {
            known.remove(id);
            return None;
        }
        let due = entry.touched.elapsed() >= self.touch_every;
        if due {
            entry.touched = Instant::now();
        }
        Some((entry.peer.clone(), due))
    }

    /// Keeps the question `result` of call `id` (`name`, `arguments`) on `session` for rmcp.
    fn keep_asked(
        &self,
        session: &str,
        id: &serde_json::value::RawValue,
        name: String,
        arguments: serde_json::Map<String, serde_json::Value>,
        result: ToolResult,
    ) {
        let Ok(id) = serde_json::from_str::<serde_json::Value>(id.get()) else {
            return;
        };
        let mut asked = self.asked.lock().unwrap_or_else(|p| p.into_inner());
        asked.retain(|_, a| a.at.elapsed() < ASKED_FOR);
        if asked.len() < ASKED_AT_MOST {
            let at = Instant::now();
            let kept = Asked {
                name,
                arguments,
                result,
                at,
            };
            asked.insert((session.to_owned(), id_key(&id)), kept);
        }
    }

    /// The question kept for the call rmcp is answering, if it is that same call.
    pub(crate) fn take_asked(
        &self,
        extensions: &rmcp::model::Extensions,
        id: &rmcp::model::RequestId,
        name: &str,
        arguments: Option<&serde_json::Map<String, serde_json::Value>>,
    ) -> Option<ToolResult> {
        let parts = extensions.get::<hyper::http::request::Parts>()?;
        let session = parts.headers.get(SESSION_ID)?.to_str().ok()?;
        let mut asked = self.asked.lock().unwrap_or_else(|p| p.into_inner());
        let kept = asked.remove(&(session.to_owned(), id_key(id)))?;
        let same = kept.name == name
            && arguments.map_or(kept.arguments.is_empty(), |a| *a == kept.arguments)
            && kept.at.elapsed() < ASKED_FOR;
        same.then_some(kept.result)
    }

    fn forget(&self, id: &str) {
        self.known
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(id);
    }
}

/// What the console checks before rmcp sees a request.
struct Front {
    service: StreamableHttpService<Relay, LocalSessionManager>,
    sessions: Arc<LocalSessionManager>,
    relay: Relay,
    peers: Arc<Peers>,
    /// The `Host` values the console answers to itself (rmcp checks the others).
    hosts: Vec<String>,
    origins: Vec<String>,
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

/// The only value of header `name`, if it has exactly one.
fn only(headers: &hyper::HeaderMap, name: impl hyper::header::AsHeaderName) -> Option<&str> {
    let mut all = headers.get_all(name).iter();
    let first = all.next()?;
    if all.next().is_some() {
        return None;
    }
    first.to_str().ok()
}

/// Whether one `Accept` value names both JSON and event streams, without parameters.
fn accepts_both(headers: &hyper::HeaderMap) -> bool {
    let Some(accept) = only(headers, ACCEPT) else {
        return false;
    };
    let (mut json, mut sse) = (false, false);
    for entry in accept.split(',').map(str::trim) {
        if entry.contains(';') {
            return false;
        }
        json |= entry.eq_ignore_ascii_case("application/json");
        sse |= entry.eq_ignore_ascii_case("text/event-stream");
    }
    json && sse
}

impl Front {
    /// The session of a request the console may answer itself: its headers are ones rmcp
    /// would pass (host, origin, accept, content type, the session's protocol version, no
    /// other `Mcp-*` header), and its session is initialised, open and older than 2026-07-28.
    /// `None` leaves the request to rmcp, which checks it again and answers.
    async fn fast_session(
        &self,
        parts: &hyper::http::request::Parts,
    ) -> Option<(String, bool, Peer<RoleServer>)> {
        let headers = &parts.headers;
        if parts.uri.authority().is_some()
            || !self
                .hosts
                .iter()
                .any(|h| Some(h.as_str()) == only(headers, HOST))
        {
            return None;
        }
        if headers.contains_key(ORIGIN)
            && !self
                .origins
                .iter()
                .any(|o| Some(o.as_str()) == only(headers, ORIGIN))
        {
            return None;
        }
        if !accepts_both(headers) || only(headers, CONTENT_TYPE) != Some("application/json") {
            return None;
        }
        let others = headers.keys().any(|k| {
            let k = k.as_str();
            k.starts_with("mcp-") && k != SESSION_ID && k != PROTOCOL_VERSION
        });
        if others {
            return None;
        }
        let id = only(headers, SESSION_ID)?;
        let (peer, touch) = self.peers.get(id)?;
        let info = peer.peer_info()?;
        if info.protocol_version >= ProtocolVersion::V_2026_07_28 {
            return None;
        }
        if headers.contains_key(PROTOCOL_VERSION)
            && only(headers, PROTOCOL_VERSION) != Some(info.protocol_version.as_str())
        {
            return None;
        }
        if !self
            .sessions
            .has_session(&id.to_owned().into())
            .await
            .unwrap_or(false)
        {
            self.peers.forget(id);
            return None;
        }
        Some((id.to_owned(), touch, peer))
    }

    /// Answers a plain `tools/call` on session `id` of `peer`; `None` if `body` is no plain
    /// call, or the tool asked a client that can be asked for the person's input (rmcp
    /// asks, on the call's event stream).
    async fn fast_call(
        &self,
        id: &str,
        touch: bool,
        peer: &Peer<RoleServer>,
        body: &[u8],
        header_trace: Option<TraceContext>,
    ) -> Option<Response<Body>> {
        let call = PlainCall::read(std::str::from_utf8(body).ok()?)?;
        if touch {
            // rmcp ends a session it has not heard of for the session idle limit: "the roots
            // changed" is a message it hands the relay, which has no use for roots. (Not a
            // cancellation of a made-up request id: a client may use that id itself.)
            let heard = serde_json::from_str::<ClientJsonRpcMessage>(
                r#"{"jsonrpc":"2.0","method":"notifications/roots/list_changed"}"#,
            )
            .expect("a client notification");
            let _ = self
                .sessions
                .accept_message(&id.to_owned().into(), heard)
                .await;
        }
        // A client that cannot be asked is told so here, as rmcp tells it (the tool is
        // called once, and its question is never read as rmcp's type, which a module's
        // question need not fit: rmcp's path does not read it either).
        let can_elicit = peer.peer_info().is_some_and(|i| {
            let c = &i.capabilities;
            c.elicitation.is_some() || c.sampling.is_some() || c.roots.is_some()
        });
        let asker = (!can_elicit).then_some((peer, false));
        let asked = can_elicit.then(|| (call.name.clone(), call.arguments.clone()));
        let (request_id, answered) = call.relay(&self.relay, asker, header_trace, Some(id)).await;
        if let Ok(result) = answered.as_ref()
            && result.needs_input()
        {
            // rmcp asks the person; it takes the tool's question from here rather than
            // calling the tool again.
            if let Some((name, arguments)) = asked {
                self.peers
                    .keep_asked(id, &request_id, name, arguments, result.clone());
            }
            return None;
        }
        Some(
            Response::builder()
                .status(StatusCode::OK)
                .header(CONTENT_TYPE, "application/json")
                .body(Full::new(Bytes::from(call::written(&request_id, answered))).boxed())
                .expect("a valid response"),
        )
    }

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
        // (An ended session leaves `Peers` when it is next looked up or another starts: not
        // here, where a DELETE rmcp then refuses would cost a live session its fast path.)
        let is_delete = parts.method == Method::DELETE;
        let fast = if parts.method == Method::POST {
            self.fast_session(&parts).await
        } else {
            None
        };
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
            if let Some((id, touch, peer)) = &fast
                && let Some(answered) = self
                    .fast_call(id, *touch, peer, &bytes, header_trace(&parts.headers))
                    .await
            {
                return answered;
            }
            match serde_json::from_slice::<serde_json::Value>(&bytes) {
                Err(e) => {
                    return rpc_error(
                        StatusCode::BAD_REQUEST,
                        -32700,
                        &format!("parse error: the body is not JSON ({e})"),
                    );
                }
                Ok(serde_json::Value::Array(_)) => {
                    return rpc_error(
                        StatusCode::BAD_REQUEST,
                        -32600,
                        "invalid request: JSON-RPC batches are not part of MCP since 2025-06-18; send one message per request",
                    );
                }
                Ok(_) => {}
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
    let hosts = ["localhost", "127.0.0.1", "::1", "[::1]"];
    let origins: Vec<String> = ["localhost", "127.0.0.1", "[::1]"]
        .iter()
        .flat_map(|h| [format!("http://{h}:{port}"), format!("https://{h}:{port}")])
        .collect();
    let config = StreamableHttpServerConfig::default()
        .with_allowed_hosts(hosts)
        .with_allowed_origins(origins.clone())
        .with_max_request_body_bytes(super::MAX_MESSAGE)
        .enforce_origin_validation();
    let mut sessions = LocalSessionManager::default();
    sessions.session_config.keep_alive = Some(limits.session_idle);
    let sessions = Arc::new(sessions);
    let peers = Arc::new(Peers::new(limits.session_idle));
    let relay = relay.with_peers(peers.clone());
    let for_sessions = relay.clone();
    let service =
        StreamableHttpService::new(move || Ok(for_sessions.clone()), sessions.clone(), config);
    let front = Arc::new(Front {
        service,
        sessions,
        relay,
        peers,
        hosts: ["localhost", "127.0.0.1", "[::1]"]
            .iter()
            .map(|h| format!("{h}:{port}"))
            .collect(),
        origins,
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
