//! Session management for the Streamable HTTP transport.
//!
//! A *session* groups the logically related interactions between a single MCP
//! client and the server, starting from the `initialize` handshake. The server
//! assigns each session a unique [`SessionId`] (returned to the client via the
//! `Mcp-Session-Id` response header) and the client includes that ID on every
//! subsequent request.
//!
//! Two tool calls carrying the same session ID come from the same logical
//! session; different IDs mean different clients or conversations.
//!
//! # Implementations
//!
//! * [`local::LocalSessionManager`] — in-memory session store (default).
//! * [`never::NeverSessionManager`] — rejects all session operations, used
//!   when legacy session mode is disabled.
//!
//! # Custom session managers
//!
//! Implement the [`SessionManager`] trait to back sessions with a database,
//! Redis, or any other external store.

use std::sync::Arc;

use futures::Stream;

pub use crate::transport::common::server_side_http::{ServerSseMessage, SessionId};
use crate::{
    RoleServer,
    model::{ClientJsonRpcMessage, ProgressToken, RequestId, ServerJsonRpcMessage},
};

pub mod local;
pub mod never;
pub mod store;

pub use store::{
    EventId, EventStore, EventStoreError, EventStream, SessionState, SessionStore,
    SessionStoreError, StreamId,
};

/// Extension marker inserted into the `initialize` request extensions during a
/// session restore replay. Handlers can check for its presence to distinguish a
/// cross-instance restore from a genuine client-initiated `initialize` request.
///
/// ```rust,ignore
/// if req.extensions().get::<SessionRestoreMarker>().is_some() {
///     // this is a restore replay, not a fresh client connection
/// }
/// ```
#[non_exhaustive]
#[derive(Debug, Clone)]
pub struct SessionRestoreMarker {
    pub id: SessionId,
}

/// The outcome of a [`SessionManager::restore_session`] call.
#[non_exhaustive]
#[derive(Debug)]
pub enum RestoreOutcome<T> {
    /// The session was just re-created from external state; the caller must
    /// spawn an MCP handler against the returned transport and replay the
    /// `initialize` handshake.
    Restored(T),
    /// The session was already present in memory (e.g. a concurrent request
    /// already restored it). The caller should proceed as if `has_session`
    /// had returned `true` — no further action is required.
    AlreadyPresent,
    /// This session manager does not support external-store restore.
    /// The caller should fall through to the normal 404 response.
    NotSupported,
}

/// Controls how MCP sessions are created, validated, and closed.
///
/// The `StreamableHttpService` calls into this
/// trait for every HTTP request that carries (or should carry) a session ID.
///
/// See the [module-level docs](self) for background on sessions.
///
/// # SEP-2260 request association
///
/// Server-initiated requests issued while handling a client request carry an
/// [`OriginatingRequestId`](crate::service::OriginatingRequestId) marker in
/// their non-serialized `Extensions`; the bundled local session manager uses
/// it to deliver such requests on the originating request's SSE stream.
/// Implementations that serialize messages between processes lose the marker
/// and fall back to the standalone stream, violating SEP-2260 for 2026-07-28+
/// clients; they need their own association mechanism.
pub trait SessionManager: Send + Sync + 'static {
    type Error: std::error::Error + Send + 'static;
    type Transport: crate::transport::Transport<RoleServer>;

    /// Create a new session and return its ID together with the transport
    /// that will be used to exchange MCP messages within this session.
    fn create_session(
        &self,
    ) -> impl Future<Output = Result<(SessionId, Self::Transport), Self::Error>> + Send;

    /// Forward the first message (the `initialize` request) to the session.
    fn initialize_session(
        &self,
        id: &SessionId,
        message: ClientJsonRpcMessage,
    ) -> impl Future<Output = Result<ServerJsonRpcMessage, Self::Error>> + Send;

    /// Return `true` if a session with the given ID exists and is active.
    fn has_session(&self, id: &SessionId)
    -> impl Future<Output = Result<bool, Self::Error>> + Send;

    /// Close and remove the session. Corresponds to an HTTP DELETE request
    /// with `Mcp-Session-Id`.
    fn close_session(&self, id: &SessionId)
    -> impl Future<Output = Result<(), Self::Error>> + Send;

    /// Route a client request into the session and return an SSE stream
    /// carrying the server's response(s).
    fn create_stream(
        &self,
        id: &SessionId,
        message: ClientJsonRpcMessage,
    ) -> impl Future<
        Output = Result<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static, Self::Error>,
    > + Send;

    /// Accept a notification, response, or error message from the client
    /// without producing a response stream.
    fn accept_message(
        &self,
        id: &SessionId,
        message: ClientJsonRpcMessage,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send;

    /// Create an SSE stream not tied to a specific client request (HTTP GET).
    fn create_standalone_stream(
        &self,
        id: &SessionId,
    ) -> impl Future<
        Output = Result<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static, Self::Error>,
    > + Send;

    /// Resume an SSE stream from the given `Last-Event-ID`, replaying any
    /// events the client missed.
    fn resume(
        &self,
        id: &SessionId,
        last_event_id: String,
    ) -> impl Future<
        Output = Result<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static, Self::Error>,
    > + Send;

    /// Attempt to restore a previously-known session from external state,
    /// creating a fresh in-memory session worker with the given `id`.
    ///
    /// See [`RestoreOutcome`] for the three possible results:
    /// - [`RestoreOutcome::Restored`] — session re-created; caller must spawn
    ///   an MCP handler and replay the `initialize` handshake.
    /// - [`RestoreOutcome::AlreadyPresent`] — session is already in memory
    ///   (e.g. a concurrent request restored it first); caller proceeds
    ///   normally.
    /// - [`RestoreOutcome::NotSupported`] (default) — this session manager
    ///   does not support external-store restore; caller returns 404.
    fn restore_session(
        &self,
        _id: SessionId,
    ) -> impl Future<Output = Result<RestoreOutcome<Self::Transport>, Self::Error>> + Send {
        futures::future::ready(Ok(RestoreOutcome::NotSupported))
    }

    /// Return the shared event store used for resumable SSE streams.
    fn event_store(&self) -> Option<Arc<dyn EventStore>> {
        None
    }

    /// mesh patch: open the stream of request `request_id` in session `id` without
    /// handing the request to the session's handler, which the caller runs itself (a
    /// [`RequestDispatcher`](crate::service::RequestDispatcher)). Whatever the handler
    /// sends the client about this request (progress under `progress_token`, requests
    /// associated with it) arrives on the returned stream, as it would on
    /// [`create_stream`](Self::create_stream)'s; the caller hands the answer to
    /// [`DirectDone::finish`] (or drops it, once the client has the answer). `None`:
    /// this manager cannot, and the caller uses `create_stream`.
    fn open_direct_stream(
        &self,
        _id: &SessionId,
        _request_id: RequestId,
        _progress_token: Option<ProgressToken>,
    ) -> impl Future<Output = Result<Option<DirectStream>, Self::Error>> + Send {
        futures::future::ready(Ok(None))
    }
}

/// mesh patch: a request's stream opened by [`SessionManager::open_direct_stream`].
#[derive(Debug)]
#[non_exhaustive]
pub struct DirectStream {
    /// The request's stream, once the session has something to send the client about the
    /// request before its answer (priming events first, when configured); never, if it has
    /// not. Closed without one: the session has ended.
    pub taken: tokio::sync::oneshot::Receiver<tokio::sync::mpsc::Receiver<ServerSseMessage>>,
    /// Ends the request in the session.
    pub done: DirectDone,
}

impl DirectStream {
    pub fn new(
        taken: tokio::sync::oneshot::Receiver<tokio::sync::mpsc::Receiver<ServerSseMessage>>,
        done: DirectDone,
    ) -> Self {
        Self { taken, done }
    }
}

type Finish = Box<dyn FnOnce(Option<ServerJsonRpcMessage>) + Send>;

/// mesh patch: ends a direct request in its session: with its answer, which the session
/// sends on the request's stream after what it sent before and then closes the stream;
/// or, dropped, with none (the client had the answer another way, or left).
pub struct DirectDone(Option<Finish>);

impl DirectDone {
    pub fn new(finish: impl FnOnce(Option<ServerJsonRpcMessage>) + Send + 'static) -> Self {
        Self(Some(Box::new(finish)))
    }

    /// Sends `answer` on the request's stream and closes it.
    pub fn finish(mut self, answer: Option<ServerJsonRpcMessage>) {
        if let Some(finish) = self.0.take() {
            finish(answer);
        }
    }
}

impl Drop for DirectDone {
    fn drop(&mut self) {
        if let Some(finish) = self.0.take() {
            finish(None);
        }
    }
}

impl std::fmt::Debug for DirectDone {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("DirectDone").finish_non_exhaustive()
    }
}
