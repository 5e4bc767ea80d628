//! The relay's resources, resource templates, prompts and completions: each MCP method
//! passed to `mesh_core::client::Features`, which gathers them across the modules the
//! credential may ask and routes each request back to its module. Results pass through as
//! the modules wrote them; a module's refusal is the JSON-RPC error it said, and the mesh's
//! own failure kinds are internal errors naming the kind in `data` (`mesh/outcome`).
//!
//! Subscriptions (`resources/subscribe` before 2026-07-28, a `subscriptions/listen` stream's
//! `resourceSubscriptions` from then) are `mesh_core::client::Watch`es: one per session (or
//! listen stream), on the relay's own connection, so the bus decides whose they may be.
//!
//! The relay offers all three capabilities always: what a mesh has changes while a session
//! lasts, and an empty listing says "none now" where -32601 would say "never". Its results
//! are the credential's own (what it may read), so they are marked private, fresh for no
//! time (SEP-2549).

use rmcp::ErrorData as McpError;
use rmcp::model::{
    CacheScope, CompleteRequestParams, CompleteResult, ErrorCode, GetPromptRequestParams,
    GetPromptResponse, GetPromptResult, InputRequiredResult, ListPromptsResult,
    ListResourceTemplatesResult, ListResourcesResult, PaginatedRequestParams, PromptsCapability,
    ReadResourceRequestParams, ReadResourceResponse, ReadResourceResult, ResourcesCapability,
    ServerCapabilities,
};
use serde_json::{Map, Value, json};

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use rmcp::RoleServer;
use rmcp::model::{
    ResourceUpdatedNotificationParam, SubscribeRequestParams, UnsubscribeRequestParams,
};
use rmcp::service::{Peer, RequestContext};

use super::{Asking, Relay};
use crate::console::OUTCOME_META;
use mesh_core::client::{Access, FeatureCallError, Features, ListKind, Watch, WatchError};
use mesh_core::client::{Ended, converse_feature};
use mesh_core::subjects::features::{GetRequest, ReadRequest};
use mesh_core::subjects::{FullName, MAX_INPUT_ROUNDS};
use rmcp::model::ProtocolVersion;

/// Adds resources, prompts and completions to what the relay declares.
pub(crate) fn declare(capabilities: &mut ServerCapabilities) {
    let mut resources = ResourcesCapability::default();
    resources.subscribe = Some(true);
    capabilities.resources = Some(resources);
    capabilities.prompts = Some(PromptsCapability::default());
    capabilities.completions = Some(Map::new());
}

/// A failure as the JSON-RPC error the client gets.
fn error(e: FeatureCallError) -> McpError {
    match e {
        FeatureCallError::Refused { error } => {
            McpError::new(ErrorCode(error.code as i32), error.message, error.data)
        }
        FeatureCallError::Call(e) => McpError::internal_error(
            e.to_string(),
            Some(json!({ OUTCOME_META: e.outcome().name() })),
        ),
    }
}

/// A refused subscription as the JSON-RPC error the client gets.
fn watch_error(e: WatchError) -> McpError {
    match e {
        WatchError::Feature(e) => error(e),
        e @ (WatchError::TooMany { .. } | WatchError::TooLong { .. }) => {
            McpError::invalid_params(e.to_string(), None)
        }
        e @ WatchError::Subscribe { .. } => McpError::internal_error(e.to_string(), None),
    }
}

/// The most sessions of one relay that watch resources at once (a console's sessions come
/// and go; a closed one is let go at the next subscription).
const MAX_SESSIONS: usize = 256;

/// The sessions before 2026-07-28 that subscribed to resources, by session (`mcp-session-id`
/// over HTTP; the one session of `mesh mcp`), shared by every session of one relay.
#[derive(Default)]
pub(crate) struct Watching {
    sessions: Mutex<HashMap<String, Session>>,
    /// `subscriptions/listen` streams watching resources now (2026-07-28), at most
    /// [`MAX_SESSIONS`]: past it a stream is acknowledged without resources.
    streams: std::sync::atomic::AtomicUsize,
}

/// A listen stream's hold on its place among [`Watching::streams`], given back when dropped.
pub(crate) struct Streaming(Arc<Watching>);

impl Drop for Streaming {
    fn drop(&mut self) {
        self.0
            .streams
            .fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
    }
}

/// One session's watch and the task telling it of updates; dropped, both stop.
struct Session {
    watch: Arc<Watch>,
    peer: Peer<RoleServer>,
    telling: tokio::task::JoinHandle<()>,
}

impl Drop for Session {
    fn drop(&mut self) {
        self.telling.abort();
    }
}

impl Watching {
    fn sessions(&self) -> std::sync::MutexGuard<'_, HashMap<String, Session>> {
        self.sessions.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The watch of the session `context` came on, made (and told to its client) at its
    /// first subscription.
    fn of(
        this: &Arc<Watching>,
        client: &mesh_core::client::Client,
        context: &RequestContext<RoleServer>,
    ) -> Result<Arc<Watch>, McpError> {
        let key = session_key(context);
        let mut sessions = this.sessions();
        sessions.retain(|_, s| !s.peer.is_transport_closed());
        if let Some(s) = sessions.get(&key) {
            return Ok(s.watch.clone());
        }
        if sessions.len() >= MAX_SESSIONS {
            return Err(McpError::invalid_params(
                format!(
                    "{MAX_SESSIONS} sessions of this relay watch resources already, the most it keeps; try again when one has ended"
                ),
                None,
            ));
        }
        let watch = Arc::new(Watch::new(client));
        let peer = context.peer.clone();
        let telling = tokio::spawn(tell(
            watch.clone(),
            peer.clone(),
            Arc::downgrade(this),
            key.clone(),
        ));
        sessions.insert(
            key,
            Session {
                watch: watch.clone(),
                peer,
                telling,
            },
        );
        Ok(watch)
    }

    /// Whether another listen stream may watch resources now.
    pub(crate) fn stream_room(&self) -> bool {
        self.streams.load(std::sync::atomic::Ordering::Relaxed) < MAX_SESSIONS
    }

    /// A place among the listen streams that watch resources, if one is free.
    pub(crate) fn stream(this: &Arc<Watching>) -> Option<Streaming> {
        let taken = this
            .streams
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let held = Streaming(this.clone());
        (taken < MAX_SESSIONS).then_some(held)
    }

    /// The watch of `context`'s session, if it has one.
    fn existing(&self, context: &RequestContext<RoleServer>) -> Option<Arc<Watch>> {
        self.sessions()
            .get(&session_key(context))
            .map(|s| s.watch.clone())
    }
}

/// Which session a request came on: its `mcp-session-id` over HTTP, else the one session of
/// a stdio relay.
fn session_key(context: &RequestContext<RoleServer>) -> String {
    context
        .extensions
        .get::<hyper::http::request::Parts>()
        .and_then(|p| p.headers.get("mcp-session-id"))
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned()
}

/// How often a session that hears nothing is looked at to see whether it closed.
const CLOSED_CHECK: std::time::Duration = std::time::Duration::from_secs(30);

/// Tells `peer` of each update its watch hears, until the session closes; then lets its
/// watch go (its NATS subscriptions with it), whether or not anything more was heard.
async fn tell(
    watch: Arc<Watch>,
    peer: Peer<RoleServer>,
    watching: std::sync::Weak<Watching>,
    key: String,
) {
    'open: loop {
        tokio::select! {
            uris = watch.updated() => {
                for uri in uris {
                    if peer
                        .notify_resource_updated(ResourceUpdatedNotificationParam::new(uri))
                        .await
                        .is_err()
                    {
                        break 'open;
                    }
                }
            }
            () = tokio::time::sleep(CLOSED_CHECK) => {
                if peer.is_transport_closed() {
                    break 'open;
                }
            }
        }
    }
    drop(watch);
    if let Some(watching) = watching.upgrade() {
        let mut sessions = watching.sessions();
        // Only this session's: a new one under the same key (stdio's) is left alone.
        if sessions
            .get(&key)
            .is_some_and(|s| s.peer.is_transport_closed())
        {
            sessions.remove(&key);
        }
    }
}

/// A client's answers as the mesh's requests carry them (an object of answers by key).
fn answers(responses: Option<rmcp::model::InputResponses>) -> Option<Map<String, Value>> {
    match serde_json::to_value(responses?) {
        Ok(Value::Object(o)) => Some(o),
        _ => None,
    }
}

/// A result the module wrote, read as the rmcp type the handler answers with.
///
/// A module's result says nothing of `resultType` (its reply is complete or a refusal): it is
/// complete, which 2026-07-28 says on the wire (rmcp leaves it out for older versions).
fn typed<T: serde::de::DeserializeOwned>(what: &str, mut value: Value) -> Result<T, McpError> {
    if let Value::Object(o) = &mut value {
        o.insert("resultType".into(), json!("complete"));
    }
    serde_json::from_value(value).map_err(|e| {
        McpError::internal_error(
            format!("a module's {what} does not read as MCP's: {e}"),
            None,
        )
    })
}

impl Relay<mesh_core::client::Client> {
    /// `resources/subscribe` (before 2026-07-28): the session hears when `uri` changes.
    pub(crate) async fn subscribe_to(
        &self,
        request: SubscribeRequestParams,
        context: &RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        let watch = Watching::of(&self.watching, &self.client, context)?;
        watch
            .subscribe(&request.uri, self.options.list_timeout)
            .await
            .map_err(watch_error)
    }

    /// `resources/unsubscribe`: no more of `uri` (one never subscribed to is no error).
    pub(crate) fn unsubscribe_from(
        &self,
        request: &UnsubscribeRequestParams,
        context: &RequestContext<RoleServer>,
    ) {
        if let Some(watch) = self.watching.existing(context) {
            watch.unsubscribe(&request.uri);
        }
    }
}

impl<A: Access + Features + Clone + 'static> Relay<A> {
    /// One page of a gathered listing, as the result object MCP names `key` in.
    async fn page(
        &self,
        kind: ListKind,
        request: Option<PaginatedRequestParams>,
    ) -> Result<Value, McpError> {
        let cursor = request.and_then(|r| r.cursor);
        let page = self
            .client
            .list(kind, cursor.as_deref(), self.options.list_timeout)
            .await
            .map_err(error)?;
        let mut result = Map::new();
        result.insert(kind.key().into(), Value::Array(page.items));
        if let Some(next) = page.next {
            result.insert("nextCursor".into(), Value::String(next));
        }
        Ok(Value::Object(result))
    }

    pub(crate) async fn resources_page(
        &self,
        request: Option<PaginatedRequestParams>,
    ) -> Result<ListResourcesResult, McpError> {
        let page: ListResourcesResult =
            typed("resources", self.page(ListKind::Resources, request).await?)?;
        Ok(page.with_ttl_ms(0).with_cache_scope(CacheScope::Private))
    }

    pub(crate) async fn templates_page(
        &self,
        request: Option<PaginatedRequestParams>,
    ) -> Result<ListResourceTemplatesResult, McpError> {
        let page: ListResourceTemplatesResult = typed(
            "resource templates",
            self.page(ListKind::Templates, request).await?,
        )?;
        Ok(page.with_ttl_ms(0).with_cache_scope(CacheScope::Private))
    }

    pub(crate) async fn prompts_page(
        &self,
        request: Option<PaginatedRequestParams>,
    ) -> Result<ListPromptsResult, McpError> {
        let page: ListPromptsResult =
            typed("prompts", self.page(ListKind::Prompts, request).await?)?;
        Ok(page.with_ttl_ms(0).with_cache_scope(CacheScope::Private))
    }

    /// `resources/read`: the contents, or the question the read asks first, as for a prompt
    /// ([`Self::get`]).
    pub(crate) async fn read(
        &self,
        request: ReadResourceRequestParams,
        context: &RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, McpError> {
        let uri = request.uri;
        let first = (answers(request.input_responses), request.request_state);
        let answered = self
            .rounds(
                &uri,
                None,
                first,
                context,
                |input_responses, request_state| {
                    let asked = ReadRequest {
                        uri: uri.clone(),
                        input_responses,
                        request_state,
                    };
                    Features::read_asked(&self.client, asked, self.options.call_timeout)
                },
            )
            .await?;
        match answered {
            Err(asks) => Ok(ReadResourceResponse::InputRequired(asks)),
            Ok(read) => {
                let mut result: ReadResourceResult = typed("resource", Value::Object(read))?;
                result.ttl_ms = Some(0);
                result.cache_scope = Some(CacheScope::Private);
                Ok(result.into())
            }
        }
    }

    /// `prompts/get`: the prompt's messages. A prompt that asks first (`input_required`, as a
    /// tool asks) has its question passed back to a 2026-07-28 client, which answers with
    /// `inputResponses` and the `requestState`; an older client is asked by the relay
    /// (elicitation, as for a tool) and the prompt got again with the answers.
    pub(crate) async fn get(
        &self,
        request: GetPromptRequestParams,
        context: &RequestContext<RoleServer>,
    ) -> Result<GetPromptResponse, McpError> {
        let name = FullName::parse(&request.name).map_err(|_| {
            McpError::invalid_params(format!("prompt not found: {}", request.name), None)
        })?;
        let arguments = request.arguments;
        let first = (answers(request.input_responses), request.request_state);
        let answered = self
            .rounds(
                &request.name,
                Some(&name),
                first,
                context,
                |input_responses, request_state| {
                    let asked = GetRequest {
                        arguments: arguments.clone(),
                        input_responses,
                        request_state,
                    };
                    Features::prompt(
                        &self.client,
                        &request.name,
                        asked,
                        self.options.call_timeout,
                    )
                },
            )
            .await?;
        match answered {
            Err(asks) => Ok(GetPromptResponse::InputRequired(asks)),
            Ok(got) => {
                let result: GetPromptResult = typed("prompt", Value::Object(got))?;
                Ok(result.into())
            }
        }
    }

    /// Drives a request that may ask first (a read, a prompt's get) through its rounds: each
    /// made by `round` with the answers and state so far, until it answers (`Ok`), or its
    /// question goes back to a 2026-07-28 client (`Err`: the `input_required` result); an older
    /// client is asked by the relay (elicitation), as a tool's question is, up to
    /// [`MAX_INPUT_ROUNDS`].
    async fn rounds<F, Fut>(
        &self,
        what: &str,
        name: Option<&FullName>,
        first: (Option<Map<String, Value>>, Option<String>),
        context: &RequestContext<RoleServer>,
        round: F,
    ) -> Result<Result<Map<String, Value>, InputRequiredResult>, McpError>
    where
        F: FnMut(Option<Map<String, Value>>, Option<String>) -> Fut,
        Fut: std::future::Future<Output = Result<Map<String, Value>, FeatureCallError>>,
    {
        let modern = context
            .protocol_version()
            .is_some_and(|v| v >= ProtocolVersion::V_2026_07_28);
        // A read has no full name: its questions are said to be the uri's.
        let named = match name {
            Some(n) => n.clone(),
            None => FullName::parse("resource_read").expect("a full name"),
        };
        let mut asking = if modern {
            Asking::PassBack
        } else {
            Asking::Client {
                peer: &context.peer,
                name: &named,
            }
        };
        let got = match converse_feature(first, round, &mut asking).await {
            Ok(got) => got,
            Err(Ended::Call(e)) => return Err(error(e)),
            Err(Ended::NotAsked(why)) => return Err(McpError::invalid_request(why, None)),
            Err(Ended::TooManyRounds) => {
                return Err(McpError::internal_error(
                    format!(
                        "{what} still asked for input after {MAX_INPUT_ROUNDS} rounds; stopped"
                    ),
                    None,
                ));
            }
        };
        if got.get("resultType").and_then(Value::as_str) != Some("input_required") {
            return Ok(Ok(got));
        }
        let asks: InputRequiredResult =
            serde_json::from_value(Value::Object(got)).map_err(|e| {
                McpError::internal_error(
                    format!("a module's question on {what} does not read as MCP's: {e}"),
                    None,
                )
            })?;
        Ok(Err(asks))
    }

    pub(crate) async fn completion(
        &self,
        request: CompleteRequestParams,
    ) -> Result<CompleteResult, McpError> {
        let mut params = serde_json::to_value(&request).expect("params serialise");
        if let Value::Object(o) = &mut params {
            o.remove("_meta");
        }
        let completed = Features::complete(&self.client, params, self.options.list_timeout)
            .await
            .map_err(error)?;
        typed("completion", Value::Object(completed))
    }
}
