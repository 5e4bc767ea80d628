//! The MCP surface: one rmcp handler that answers `tools/list` from a list kept current
//! (`live.rs`: discovery, then the catalogue's change events, announced to clients as
//! `notifications/tools/list_changed`) and relays `tools/call` to the tool's subject, served
//! over stdio (`mesh mcp`) and loopback HTTP (`mesh serve`).
//!
//! It decides nothing: schemas and results pass through as the modules wrote them. The
//! three mesh failure kinds become `isError` results that say which; only a tool name the
//! catalogue does not know, or one outside the relay's selection, is a protocol error
//! (-32602). A selection (`--tools`, `--profile`) bounds what is listed and called; past a
//! number of tools (or asked to) the list is a search (`search.rs`).

pub mod http;
pub mod live;
mod resources;
pub mod search;
pub mod stdio;
mod tasks;

use std::collections::HashSet;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ClientCapabilities, ContentBlock,
    ElicitRequestParams, Implementation, InputRequiredResult, ListToolsResult, MetaObject,
    PaginatedRequestParams, ProgressNotificationParam, ProgressToken, ProtocolVersion,
    ServerCapabilities, ServerConfig, SubscriptionFilter,
};
use rmcp::service::{NotificationContext, Peer, RequestContext, SubscriptionContext};
use rmcp::{ErrorData as McpError, RoleServer, ServerHandler};
use serde_json::{Map, Value};
use tokio::sync::watch;

use crate::console::{OUTCOME_META, RETRY_AFTER_META, SELECTION_DATA};
use mesh_core::client::{
    Access, Asked, Asker, CallError, Client, Ended, Selection, catalog_args, catalog_entries,
    catalog_name, converse,
};
use mesh_core::runtime::paced;
use mesh_core::subjects::{
    FullName, KEY_INPUT_RESPONSES, KEY_REQUEST_STATE, MAX_INPUT_ROUNDS, Progress, ToolResult,
};
use mesh_core::telemetry::{self, TRACEPARENT, TRACESTATE, TraceContext};
use tracing::Instrument;

/// The largest MCP message either transport reads (a stdio line, an HTTP body): 4 MiB, past
/// any bus's default max payload, so a message between the two gets the bus's clear "too
/// large" and a bigger one is refused before it is held in memory.
pub const MAX_MESSAGE: usize = 4 << 20;

/// Settings of the relay.
#[derive(Debug, Clone)]
pub struct RelayOptions {
    /// How long a tool call may take before it is reported slow.
    pub call_timeout: Duration,
    /// How long discovery waits for the catalogue and the modules.
    pub list_timeout: Duration,
    /// The tools offered, listed and called (`None`: every tool the credential may call).
    pub selection: Option<Selection>,
    /// When `tools/list` offers the search in place of the tools.
    pub search: search::Mode,
}

impl Default for RelayOptions {
    fn default() -> Self {
        RelayOptions {
            // Below the 60 s the MCP SDKs wait for a request, so the client hears the relay's
            // word on a slow tool rather than its own time-out.
            call_timeout: Duration::from_secs(30),
            list_timeout: Duration::from_secs(5),
            selection: None,
            search: search::Mode::default(),
        }
    }
}

/// The `_meta` key of a `tools/list` that asks for the whole list even where the relay
/// offers its search: `mesh --console` reads the tools so (the list is still only the
/// selection's tools the credential may call).
pub const WHOLE_LIST_META: &str = "mesh/wholeList";

/// The MCP handler; cheap to clone, one per connection or HTTP request. It reaches the mesh
/// through [`Access`], like the command line: on the bus in production.
#[derive(Clone)]
pub struct Relay<A = Client> {
    client: A,
    options: RelayOptions,
    /// Full names the catalogue is known to list, filled by listings and lookups.
    known: Arc<RwLock<HashSet<String>>>,
    /// The tool list every session of this relay serves.
    live: Arc<live::Live>,
    /// Which of its tools may run as tasks (tasks.rs), read once per list.
    tasks: Arc<tasks::Supports>,
    /// The sessions that subscribed to resources (resources.rs).
    watching: Arc<resources::Watching>,
}

impl Relay<Client> {
    /// A relay on the bus that keeps its tool list in memory, follows the catalogue's change
    /// events and tells its clients when the list changed (`listChanged`).
    pub fn following(client: Client, options: RelayOptions) -> Relay<Client> {
        // Known before the first call with reports needs it.
        client.learn_user();
        let relay = Relay::new(client, options);
        live::follow(
            &relay.live,
            relay.client.clone(),
            relay.options.list_timeout,
        );
        relay
    }
}

impl<A: Access + Clone + 'static> Relay<A> {
    /// A relay that lists afresh for every `tools/list`.
    pub fn new(client: A, options: RelayOptions) -> Relay<A> {
        let live = Arc::new(live::Live::selecting(options.selection.clone()));
        Relay {
            client,
            options,
            known: Arc::default(),
            live,
            tasks: Arc::default(),
            watching: Arc::default(),
        }
    }

    /// The tools it offers, when not all.
    pub fn selection(&self) -> Option<&Selection> {
        self.options.selection.as_ref()
    }

    /// The relay's list (from memory, or built now), every name in it kept as known.
    async fn listed(&self) -> Result<Arc<live::Tools>, McpError> {
        let listed = self
            .live
            .tools(&self.client, self.options.list_timeout)
            .await
            .map_err(|e| McpError::internal_error(e, None))?;
        self.known
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .extend(listed.tools.iter().map(|t| t.name.to_string()));
        Ok(listed)
    }

    /// A call of one of the search's tools, while the relay offers the search: answered
    /// from the list (find, describe), or the call `mesh_call` names, to relay. `None` when
    /// the relay offers no search now: the name is then a tool's like any other.
    async fn search_route(
        &self,
        name: &str,
        arguments: &Map<String, Value>,
    ) -> Result<Option<search::Route>, McpError> {
        let listed = self.listed().await?;
        if !self.options.search.offers(listed.tools.len()) {
            return Ok(None);
        }
        let selection = self.options.selection.as_ref();
        Ok(Some(search::route(
            name,
            arguments,
            &listed.tools,
            selection,
        )))
    }

    /// Whether the catalogue lists `name`; asks it about that module on a miss. When the
    /// catalogue cannot be asked, the call goes ahead and its outcome tells what is wrong.
    async fn is_known(&self, name: &FullName) -> bool {
        if self.known_names().contains(name.as_str()) {
            return true;
        }
        // Boxed, as every rare step of a call here: the call's future stays the size of its
        // common path, which rmcp's layers move whole as each takes it over.
        Box::pin(self.look_up(name)).await
    }

    /// Asks the catalogue what `name`'s module has now, and keeps that instead of what was
    /// known of it (a forgotten module's tools are forgotten here too). When the catalogue
    /// cannot be asked, the name gets the benefit of the doubt.
    async fn look_up(&self, name: &FullName) -> bool {
        let asked = self
            .client
            .call(
                &catalog_name(),
                &catalog_args(Some(name.module())),
                self.options.list_timeout,
            )
            .await;
        let Ok(entries) = asked.and_then(catalog_entries) else {
            return true;
        };
        let tools = entries.into_iter().flat_map(|e| {
            let module = e.module;
            e.tools
                .into_iter()
                .map(move |t| mesh_core::subjects::full_name(&module, &t))
        });
        let module = name.module();
        let prefix = format!("{module}_");
        let mut known = self.known.write().unwrap_or_else(|p| p.into_inner());
        // Its eponymous tool too, named by the module alone.
        known.retain(|k| !k.starts_with(&prefix) && k != module);
        known.extend(tools);
        known.contains(name.as_str())
    }

    fn known_names(&self) -> std::sync::RwLockReadGuard<'_, HashSet<String>> {
        self.known.read().unwrap_or_else(|p| p.into_inner())
    }

    /// One relay of a call: the tool's result, or the mesh's failure kind as the client gave
    /// it. With `reports`, the tool's progress reports are kept there while it runs.
    async fn relay(
        &self,
        name: &FullName,
        args: &Map<String, Value>,
        reports: Option<&watch::Sender<Option<Progress>>>,
        offered: Option<&A>,
    ) -> Answered {
        let args = Value::Object(args.clone());
        let timeout = self.options.call_timeout;
        let client = offered.unwrap_or(&self.client);
        let called = match reports {
            Some(reports) => Box::pin(client.call_watched(name, &args, timeout, reports)).await,
            None => client.call(name, &args, timeout).await,
        };
        called.map(|mut result| {
            // The failure kinds are the relay's to mark, never a module's: a tool's own
            // `_meta` cannot make its result read as "denied" or "nobody serves".
            if let Some(Value::Object(meta)) = result.extra.get_mut("_meta") {
                meta.remove(OUTCOME_META);
                meta.remove(RETRY_AFTER_META);
            }
            result
        })
    }
}

// Only the bus's client serves resources, prompts and their subscriptions (`Features`,
// `Watch`): a relay stands on it.
impl ServerHandler for Relay<Client> {
    fn get_info(&self) -> ServerConfig {
        let mut info = ServerConfig::new(
            ServerCapabilities::builder()
                .enable_tools()
                .enable_tool_list_changed()
                .build(),
        );
        resources::declare(&mut info.capabilities);
        if self.client.tasks().is_some() {
            tasks::declare(&mut info.capabilities);
        }
        info.server_info = Implementation::new("mesh", env!("CARGO_PKG_VERSION"));
        let mut instructions = String::from(
            "The tools of a mesh of modules on a NATS bus, named <module>_<tool>. A failed call \
             says whether nobody serves the tool, it is not yours to call, or it was slow.",
        );
        if self.options.search.always {
            instructions.push_str(
                " The tools are many: find them by words with mesh_find, read one's schema \
                 with mesh_describe, and call it with mesh_call.",
            );
        }
        info.instructions = Some(instructions);
        info
    }

    fn supported_protocol_versions(&self) -> std::borrow::Cow<'static, [ProtocolVersion]> {
        std::borrow::Cow::Owned(vec![
            ProtocolVersion::V_2026_07_28,
            ProtocolVersion::V_2025_11_25,
            ProtocolVersion::V_2025_06_18,
        ])
    }

    /// The console checks a call's `Mcp-Param-*` headers against the tool's schema from the
    /// list in memory; a tool not yet listed there is called unchecked (the headers only
    /// route, the body is what the module gets).
    fn get_tool(&self, name: &str) -> Option<rmcp::model::Tool> {
        // By the name the call is made as: `echo_echo` is listed (and kept) as `echo`.
        let name = FullName::parse(name).ok()?;
        self.live.kept(name.as_str())
    }

    async fn list_tools(
        &self,
        request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        // Boxed, as `listen`'s: rmcp's dispatch holds one future for every kind of request,
        // as large as the largest, and moves it whole per request: a listing's reading of
        // the catalogue must not make each `tools/call` pay for its size.
        let listed = Box::pin(self.listed()).await?;
        let whole = |meta: Option<&rmcp::model::RequestMetaObject>| {
            meta.and_then(|m| m.get(WHOLE_LIST_META))
                .and_then(Value::as_bool)
                .unwrap_or(false)
        };
        let asked_whole =
            whole(Some(&context.meta)) || whole(request.as_ref().and_then(|r| r.meta.as_ref()));
        if !asked_whole && self.options.search.offers(listed.tools.len()) {
            return Ok(ListToolsResult::with_all_items(search::tools(
                listed.tools.len(),
            )));
        }
        Ok(ListToolsResult::with_all_items(listed.tools.clone()))
    }

    async fn list_resources(
        &self,
        request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<rmcp::model::ListResourcesResult, McpError> {
        Box::pin(self.resources_page(request)).await
    }

    async fn list_resource_templates(
        &self,
        request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<rmcp::model::ListResourceTemplatesResult, McpError> {
        Box::pin(self.templates_page(request)).await
    }

    async fn read_resource(
        &self,
        request: rmcp::model::ReadResourceRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<rmcp::model::ReadResourceResponse, McpError> {
        Box::pin(self.read(request, &context)).await
    }

    async fn list_prompts(
        &self,
        request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<rmcp::model::ListPromptsResult, McpError> {
        Box::pin(self.prompts_page(request)).await
    }

    async fn get_prompt(
        &self,
        request: rmcp::model::GetPromptRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<rmcp::model::GetPromptResponse, McpError> {
        Box::pin(self.get(request, &context)).await
    }

    async fn complete(
        &self,
        request: rmcp::model::CompleteRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<rmcp::model::CompleteResult, McpError> {
        Box::pin(self.completion(request)).await
    }

    async fn get_task(
        &self,
        request: rmcp::model::GetTaskParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<rmcp::model::GetTaskResult, McpError> {
        Box::pin(self.task_get(request)).await
    }

    async fn update_task(
        &self,
        request: rmcp::model::UpdateTaskParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        Box::pin(self.task_update(request)).await
    }

    async fn cancel_task(
        &self,
        request: rmcp::model::CancelTaskParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        Box::pin(self.task_cancel(request)).await
    }

    /// A client on a protocol before 2026-07-28 hears of changes on its session.
    async fn on_initialized(&self, context: NotificationContext<RoleServer>) {
        let peer = context.peer;
        self.live.tell(peer);
    }

    /// 2026-07-28: changes of the tool list, and updates of the resources whose module is
    /// known and may be read (at most `MAX_WATCHED` a stream), for a client that listens.
    fn accepted_subscription_filter(
        &self,
        requested: &SubscriptionFilter,
    ) -> Option<SubscriptionFilter> {
        let mut accepted = SubscriptionFilter::default();
        accepted.tools_list_changed = requested.tools_list_changed.filter(|t| *t);
        accepted.resource_subscriptions = requested
            .resource_subscriptions
            .as_ref()
            .map(|uris| self.watchable(uris))
            .filter(|uris| !uris.is_empty());
        Some(accepted)
    }

    #[allow(deprecated)] // resources/subscribe: what clients before 2026-07-28 send
    async fn subscribe(
        &self,
        request: rmcp::model::SubscribeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        Box::pin(self.subscribe_to(request, &context)).await
    }

    #[allow(deprecated)]
    async fn unsubscribe(
        &self,
        request: rmcp::model::UnsubscribeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        self.unsubscribe_from(&request, &context);
        Ok(())
    }

    fn listen(
        &self,
        context: SubscriptionContext,
    ) -> impl Future<Output = Result<(), McpError>> + Send + '_ {
        Box::pin(self.listening(context))
    }

    async fn call_tool(
        &self,
        mut request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        // One of the search's tools: answered from the list, or the call it names relayed
        // in its place, as that tool's own `tools/call` would be. Boxed: it is rare.
        if search::is_search_tool(&request.name) {
            let arguments = request.arguments.clone().unwrap_or_default();
            match Box::pin(self.search_route(&request.name, &arguments)).await? {
                None => {}
                Some(search::Route::Answer(result)) => return to_response(result),
                Some(search::Route::Call { tool, arguments }) => {
                    request.name = tool.into();
                    request.arguments = Some(arguments);
                }
            }
        }
        let modern = context
            .protocol_version()
            .is_some_and(|v| v >= ProtocolVersion::V_2026_07_28);
        let can_elicit = context
            .client_capabilities()
            .is_some_and(|c| c.elicitation.is_some());
        let responses = request
            .input_responses
            .as_ref()
            .map(|r| serde_json::to_value(r).expect("responses serialise"));
        // The client's trace: in the request's `_meta` (SEP-414), else (the console) in the
        // HTTP request's own headers.
        let meta_text = |key: &str| {
            context
                .meta
                .get(key)
                .and_then(|v| v.as_str())
                .map(str::to_owned)
        };
        let parts = context.extensions.get::<hyper::http::request::Parts>();
        let trace = meta_text(TRACEPARENT)
            .and_then(|p| TraceContext::parse(&p, meta_text(TRACESTATE).as_deref()))
            .or_else(|| parts.and_then(|p| http::header_trace(&p.headers)));
        let session = parts
            .and_then(|p| p.headers.get("mcp-session-id"))
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        // Offered as a task (tasks.rs) where the client and the tool both say so.
        let offered = Box::pin(self.task_offer(&request.name, &context)).await?;
        let call = Call {
            task: offered.as_ref().map(|t| t.id.clone()),
            name: &request.name,
            arguments: request.arguments.take().unwrap_or_default(),
            request_state: request.request_state.take(),
            input_responses: responses,
            trace,
            request_id: Some(context.id.to_string()),
            session,
        };
        let asker = (!modern).then_some((&context.peer, can_elicit));
        let progress = context
            .meta
            .get_progress_token()
            .map(|token| (context.peer.clone(), token));
        // The client's cancellation (`notifications/cancelled`; over HTTP, 2026-07-28's
        // closed stream): the call is dropped, and so its module told (`Mesh-Cancel`).
        // Boxed: rmcp's dispatch holds one future for every kind of request and moves it
        // whole as each of its layers takes it over; the relay's call is the largest.
        let answering = Box::pin(self.answer(call, asker, progress));
        tokio::select! {
            answered = answering => {
                // The mesh's failure kinds become `isError` results only here, as answered.
                let answered = answered?.unwrap_or_else(|e| failed(&e));
                if let Some(offered) = offered
                    && let Some(task) = self.task_settled(offered, Some(&answered))
                {
                    return Ok(CallToolResponse::Task(task));
                }
                // Under 2026-07-28 the client answers the questions itself: one it cannot
                // answer is its request's fault (-32021, HTTP 400), not a result.
                if modern && answered.needs_input()
                    && let Some(needed) = missing_capability(
                        answered.input_requests.as_ref().unwrap_or(&Map::new()),
                        context.client_capabilities().as_ref(),
                    )
                {
                    let required: ClientCapabilities =
                        serde_json::from_value(serde_json::json!({ needed: {} }))
                            .unwrap_or_default();
                    return Err(McpError::missing_required_client_capability(required));
                }
                to_response(answered)
            }
            () = context.ct.cancelled() => Err(McpError::internal_error("the client cancelled the call", None)),
        }
    }
}

/// One `tools/call` as the relay answers it, however it came in.
pub(crate) struct Call<'a> {
    pub name: &'a str,
    /// The task it is offered as (tasks.rs), if any.
    pub task: Option<String>,
    pub arguments: Map<String, Value>,
    pub request_state: Option<String>,
    pub input_responses: Option<Value>,
    /// The client's W3C trace context, if it sent one.
    pub trace: Option<TraceContext>,
    /// The JSON-RPC id and MCP session it came with, for its span.
    pub request_id: Option<String>,
    pub session: Option<String>,
}

impl Relay<Client> {
    /// [`ServerHandler::listen`]: tells the client of changes to the tool list and updates
    /// of the resources it accepted until it stops. A uri the bus then refuses (not this
    /// credential's to read, after all) is not heard.
    async fn listening(&self, context: SubscriptionContext) -> Result<(), McpError> {
        let mut seen = self.live.subscribe();
        let sink = context.sink();
        let watch = mesh_core::client::Watch::new(&self.client);
        let tools = context.accepted().tools_list_changed == Some(true);
        // Its place among the streams that watch resources (lost past the bound in a race
        // with another: then it hears no resources, only what else it asked for).
        let place = context
            .accepted()
            .resource_subscriptions
            .as_ref()
            .and_then(|_| resources::Watching::stream(&self.watching));
        let uris = place
            .as_ref()
            .and(context.accepted().resource_subscriptions.clone());
        for uri in uris.iter().flatten() {
            if let Err(e) = watch.subscribe(uri, self.options.list_timeout).await {
                tracing::info!(%uri, "a listen stream's resource is not watched: {e}");
            }
        }
        loop {
            tokio::select! {
                () = context.cancelled() => return Ok(()),
                more = self.live.changed(&mut seen), if tools => {
                    if !more {
                        return Ok(());
                    }
                    if sink.notify_tool_list_changed().await.is_err() {
                        return Ok(());
                    }
                }
                uris = watch.updated() => {
                    for uri in uris {
                        if sink.notify_resource_updated(uri).await.is_err() {
                            return Ok(());
                        }
                    }
                }
            }
        }
    }

    /// Of `uris`, those a listen stream may watch: a module known to have them (listed or
    /// read before) whose resources this credential may read, as far as the routes learned
    /// say, at most `MAX_WATCHED`, each within the bound of a uri.
    fn watchable(&self, uris: &[String]) -> Vec<String> {
        if !self.watching.stream_room() {
            return Vec::new();
        }
        uris.iter()
            .filter(|u| u.len() <= mesh_core::subjects::features::MAX_URI)
            .filter(|u| self.client.known_module(u).is_some())
            .take(mesh_core::client::MAX_WATCHED)
            .cloned()
            .collect()
    }
}

impl<A: Access + Clone + 'static> Relay<A> {
    /// Relays one call to its tool. `asker` is the session of a client on a protocol before
    /// 2026-07-28 (and whether it declared elicitation): a tool's questions are put to the
    /// person through it, one form at a time, and the call repeated with the answers. Without
    /// it (2026-07-28) `input_required` passes through to the client.
    /// `progress`, if the client sent a `progressToken`: the session its reports go to, as
    /// `notifications/progress`, while the call runs (none after its answer).
    pub(crate) async fn answer(
        &self,
        call: Call<'_>,
        asker: Option<(&Peer<RoleServer>, bool)>,
        progress: Option<(Peer<RoleServer>, ProgressToken)>,
    ) -> Result<Answered, McpError> {
        // The call's span (where spans are exported), a child of the client's trace; the
        // trace passed on unchanged where they are not.
        let remote = call.trace.clone();
        let span = if telemetry::exporting() {
            let span = tracing::info_span!(
                "tools/call",
                otel.name = %format_args!("tools/call {}", call.name),
                otel.kind = "server",
                mcp.method.name = "tools/call",
                gen_ai.operation.name = "execute_tool",
                gen_ai.tool.name = %call.name,
                jsonrpc.request.id = tracing::field::Empty,
                mcp.session.id = tracing::field::Empty,
                error.type = tracing::field::Empty,
                otel.status_code = tracing::field::Empty,
            );
            if let Some(id) = &call.request_id {
                span.record("jsonrpc.request.id", id.as_str());
            }
            if let Some(s) = &call.session {
                span.record("mcp.session.id", s.as_str());
            }
            if let Some(r) = &remote {
                telemetry::adopt(&span, r);
            }
            span
        } else {
            tracing::Span::none()
        };
        let answered = telemetry::passing(remote, self.answer_traced(call, asker, progress))
            .instrument(span.clone())
            .await;
        if telemetry::exporting() {
            let error = match &answered {
                Err(e) => Some(if e.code == rmcp::model::ErrorCode::INVALID_PARAMS {
                    "invalid_params"
                } else {
                    "internal_error"
                }),
                Ok(Err(e)) => Some(e.outcome().name()),
                Ok(Ok(r)) if r.is_error => Some("tool_error"),
                Ok(Ok(_)) => None,
            };
            if let Some(e) = error {
                span.record("error.type", e);
                span.record("otel.status_code", "error");
            }
        }
        answered
    }

    async fn answer_traced(
        &self,
        call: Call<'_>,
        asker: Option<(&Peer<RoleServer>, bool)>,
        progress: Option<(Peer<RoleServer>, ProgressToken)>,
    ) -> Result<Answered, McpError> {
        let Some((peer, token)) = progress else {
            return self.answer_reporting(call, asker, None).await;
        };
        let (reports, watched) = watch::channel(None);
        let (stop, stopped) = tokio::sync::oneshot::channel();
        // In this task, not one of its own: a call dropped (cancelled, its client gone) takes
        // its forwarding with it, so no late report follows it out.
        let answering = async {
            let answered = self.answer_reporting(call, asker, Some(&reports)).await;
            // The last report goes at once, then the answer (not after a pause for the pace).
            drop(stop);
            answered
        };
        // Boxed: the forwarding's future (rmcp's notification to the client) is kilobytes, and
        // without the box every call's future would be as large, progress asked for or not,
        // and moved whole by each of rmcp's layers as it takes it over.
        let forwarding = Box::pin(forward_progress(peer, token, watched, stopped));
        let (answered, ()) = tokio::join!(answering, forwarding);
        answered
    }

    async fn answer_reporting(
        &self,
        call: Call<'_>,
        asker: Option<(&Peer<RoleServer>, bool)>,
        reports: Option<&watch::Sender<Option<Progress>>>,
    ) -> Result<Answered, McpError> {
        let name = FullName::parse(call.name).map_err(|e| {
            McpError::invalid_params(format!("unknown tool {}: {e}", call.name), None)
        })?;
        // Outside the selection: refused here, never sent, whatever the bus would say.
        if let Some(selection) = &self.options.selection
            && !selection.selects(name.as_str())
        {
            let data = serde_json::json!({ SELECTION_DATA: selection.to_string() });
            return Err(McpError::invalid_params(
                search::unoffered(name.as_str(), Some(selection)),
                Some(data),
            ));
        }
        if !self.is_known(&name).await {
            return Err(McpError::invalid_params(
                format!("unknown tool {name}: the catalogue lists no such tool"),
                None,
            ));
        }
        let mut args = call.arguments;
        // The arguments are the agent's (a model writes them); a question's state and its
        // answers come from the client — the request's own fields under 2026-07-28, the
        // elicitation bridge below under the older versions — never from the arguments, or a
        // model could answer a question meant for the person.
        for key in [KEY_REQUEST_STATE, KEY_INPUT_RESPONSES] {
            if args.remove(key).is_some() {
                tracing::debug!(tool = %name, "{key} in the arguments left out: it is the client's to send");
            }
        }
        if let Some(state) = call.request_state {
            args.insert(KEY_REQUEST_STATE.into(), Value::String(state));
        }
        if let Some(responses) = call.input_responses {
            args.insert(KEY_INPUT_RESPONSES.into(), responses);
        }
        let name = &name;
        let offered = call.task.as_deref().and_then(|id| self.client.offering(id));
        let offered = &offered;
        let round = |args: std::sync::Arc<Map<String, Value>>| async move {
            match self.relay(name, &args, reports, offered.as_ref()).await {
                Ok(result) => Ok(result),
                Err(e) => Err(self.told_apart(name, e).await),
            }
        };
        let mut asking = match asker {
            Some((peer, _)) => Asking::Client { peer, name },
            None => Asking::PassBack,
        };
        match converse(args, round, &mut asking).await {
            Ok(result) => as_answer(result).map(Ok),
            Err(Ended::Call(Failure::Call(e))) => Ok(Err(e)),
            Err(Ended::Call(Failure::Request(e))) => Err(e),
            Err(Ended::NotAsked(why)) => Ok(Ok(ToolResult::error(why))),
            Err(Ended::TooManyRounds) => Ok(Ok(ToolResult::error(format!(
                "{name} still asked for input after {MAX_INPUT_ROUNDS} rounds; stopped"
            )))),
        }
    }

    /// A failed call told apart: nobody serving a tool the catalogue no longer lists is an
    /// unknown tool (invalid params), one whose module answers for it yet no call reaches is
    /// not this connection's to call (`Unreached`).
    async fn told_apart(&self, name: &FullName, error: CallError) -> Failure {
        if !matches!(error, CallError::NobodyServes { .. }) {
            return Failure::Call(error);
        }
        Box::pin(self.told_apart_slowly(name, error)).await
    }

    /// [`Relay::told_apart`] for a tool nobody serves: the catalogue and the bus asked.
    async fn told_apart_slowly(&self, name: &FullName, error: CallError) -> Failure {
        // A listed tool nobody serves: the list may be out of date.
        self.live.suspect();
        // Perhaps the catalogue no longer lists it (forgotten since it was listed).
        if !self.look_up(name).await {
            return Failure::Request(McpError::invalid_params(
                format!("unknown tool {name}: the catalogue lists no such tool"),
                None,
            ));
        }
        let within = self.options.list_timeout.min(self.options.call_timeout);
        Failure::Call(self.client.told_apart(name, error, within).await)
    }
}

/// A call relayed: the tool's result, or the mesh's failure kind, kept as the client gave
/// it until the answer is written.
pub(crate) type Answered = Result<ToolResult, CallError>;

/// How a round of a relayed call failed: the mesh's failure kind, or the request itself
/// (a tool the catalogue does not list).
enum Failure {
    Call(CallError),
    Request(McpError),
}

/// Who answers a tool's questions for an MCP client: a 2026-07-28 client itself (the
/// question passes back to it), an older one asked by the relay, request by request.
pub(crate) enum Asking<'a> {
    PassBack,
    Client {
        peer: &'a Peer<RoleServer>,
        name: &'a FullName,
    },
}

impl Asker for Asking<'_> {
    type Error = String;

    fn ask(
        &mut self,
        requests: &Map<String, Value>,
        _arguments: &Map<String, Value>,
    ) -> impl Future<Output = Result<Asked, String>> + Send {
        // Boxed: asking is rare, and its future (rmcp's requests to the client) would
        // otherwise make every call's future as large as its own.
        Box::pin(self.ask_client_for(requests))
    }
}

impl Asking<'_> {
    pub(crate) async fn ask_client_for(
        &mut self,
        requests: &Map<String, Value>,
    ) -> Result<Asked, String> {
        let Asking::Client { peer, name } = self else {
            return Ok(Asked::PassBack);
        };
        let declared = peer.peer_info().map(|i| i.capabilities.clone());
        if let Some(needed) = missing_capability(requests, declared.as_ref()) {
            return Err(format!(
                "{name} needs input this client cannot give: it did not declare the {needed} \
                 capability (or use protocol 2026-07-28)"
            ));
        }
        let mut responses = Map::new();
        for (key, request) in requests {
            match ask_client(peer, request).await {
                Ok(answer) => responses.insert(key.clone(), answer),
                Err(why) => {
                    return Err(format!(
                        "{name} asked for input {key} that could not be asked: {why}"
                    ));
                }
            };
        }
        Ok(Asked::Answers(responses))
    }
}

/// A module's result as the relay answers it: a `requestState` the module refused is the
/// request's fault, a protocol error (invalid params), not a result for the model.
fn as_answer(result: ToolResult) -> Result<ToolResult, McpError> {
    if result.refuses_state() {
        return Err(McpError::invalid_params(result.text_content(), None));
    }
    Ok(result)
}

/// Sends a call's reports to the client as `notifications/progress` under its token, paced
/// as every side paces them (growing across the rounds of a call that asked the person too),
/// until the call is answered.
async fn forward_progress(
    peer: Peer<RoleServer>,
    token: ProgressToken,
    reports: watch::Receiver<Option<Progress>>,
    stopped: tokio::sync::oneshot::Receiver<()>,
) {
    paced(reports, stopped, |report| {
        let (peer, token) = (&peer, &token);
        async move {
            let mut note = ProgressNotificationParam::new(token.clone(), report.progress);
            if let Some(total) = report.total {
                note = note.with_total(total);
            }
            if let Some(message) = report.message {
                note = note.with_message(message);
            }
            peer.notify_progress(note).await.is_ok()
        }
    })
    .await
}

/// A call the mesh failed, as a result: the text is for the agent; the mark in `_meta` lets
/// `mesh --console` give the same exit code.
fn failed(e: &CallError) -> ToolResult {
    let mut result = ToolResult::error(e.to_string());
    let mut meta = Map::new();
    meta.insert(OUTCOME_META.into(), e.outcome().name().into());
    if let CallError::Busy { retry_after, .. } = e {
        meta.insert(
            RETRY_AFTER_META.into(),
            (retry_after.as_millis() as u64).into(),
        );
    }
    result.extra.insert("_meta".into(), Value::Object(meta));
    result
}

/// The client capability an input request needs: the capability's name on the wire.
fn capability_of(request: &Value) -> Option<&'static str> {
    match request.get("method").and_then(Value::as_str)? {
        "elicitation/create" => Some("elicitation"),
        "sampling/createMessage" => Some("sampling"),
        "roots/list" => Some("roots"),
        _ => None,
    }
}

/// The first capability `result`'s input requests need that `declared` lacks (a request of
/// a kind no capability covers counts as lacking): what the client cannot answer.
fn missing_capability(
    requests: &Map<String, Value>,
    declared: Option<&ClientCapabilities>,
) -> Option<&'static str> {
    let has = |name: &str| {
        declared.is_some_and(|c| match name {
            "elicitation" => c.elicitation.is_some(),
            "sampling" => c.sampling.is_some(),
            "roots" => c.roots.is_some(),
            _ => false,
        })
    };
    requests
        .values()
        .map(|r| capability_of(r).unwrap_or("unknown"))
        .find(|name| !has(name))
}

/// Sends one input request to a client before 2026-07-28, as the server-to-client request
/// it names (`elicitation/create`, `sampling/createMessage`, `roots/list`), and returns its
/// answer as JSON.
#[allow(deprecated)] // sampling and roots: deprecated by SEP-2577, still what these clients speak
async fn ask_client(peer: &Peer<RoleServer>, request: &Value) -> Result<Value, String> {
    let params = request.get("params").cloned().unwrap_or_default();
    let answer = match request.get("method").and_then(Value::as_str) {
        Some("elicitation/create") => {
            let params: ElicitRequestParams = serde_json::from_value(params)
                .map_err(|e| format!("the form is not valid: {e}"))?;
            peer.create_elicitation(params)
                .await
                .map(serde_json::to_value)
        }
        Some("sampling/createMessage") => {
            let params: rmcp::model::CreateMessageRequestParams = serde_json::from_value(params)
                .map_err(|e| format!("the sampling request is not valid: {e}"))?;
            peer.create_message(params).await.map(serde_json::to_value)
        }
        Some("roots/list") => peer.list_roots().await.map(serde_json::to_value),
        _ => {
            return Err(format!(
                "{} requests are not relayed to older clients",
                request.get("method").unwrap_or(&Value::Null)
            ));
        }
    };
    answer
        .map_err(|e| format!("the client did not answer: {e}"))?
        .map_err(|e| e.to_string())
}

/// The module's result as rmcp's type: `input_required` as such, the rest as a result.
/// A finished result is moved field by field (a plain text item as it is, other items
/// through serde) rather than written out as a JSON tree and parsed back: this runs once
/// per call on the relay's hot path.
pub(crate) fn to_response(mut result: ToolResult) -> Result<CallToolResponse, McpError> {
    if result.needs_input() {
        let wire = serde_json::to_value(&result).expect("a ToolResult always serialises");
        return serde_json::from_value::<InputRequiredResult>(wire)
            .map(CallToolResponse::InputRequired)
            .map_err(|e| McpError::internal_error(format!("input_required result: {e}"), None));
    }
    let not_valid = |e: serde_json::Error| {
        CallToolResult::error(vec![ContentBlock::text(format!(
            "the tool's result is not a valid CallToolResult: {e}"
        ))])
    };
    let content: Result<Vec<ContentBlock>, _> = result
        .content
        .into_iter()
        .map(|item| content_block(item.0))
        .collect();
    let meta = result
        .extra
        .remove("_meta")
        .map(serde_json::from_value::<MetaObject>)
        .transpose();
    let answer = match (content, meta) {
        (Ok(content), Ok(meta)) => {
            let mut answer = CallToolResult::success(content);
            answer.structured_content = result.structured_content;
            answer.is_error = result.is_error.then_some(true);
            answer.meta = meta;
            answer
        }
        (Err(e), _) | (_, Err(e)) => not_valid(e),
    };
    // 2026-07-28 requires the marker (which `success` and `error` set); rmcp takes it off
    // again for older peers.
    Ok(CallToolResponse::Complete(answer))
}

/// One content item as rmcp's type: a text item of only `type` and `text` moved as it is.
fn content_block(mut item: Map<String, Value>) -> Result<ContentBlock, serde_json::Error> {
    if item.len() == 2
        && item.get("type").and_then(Value::as_str) == Some("text")
        && item.get("text").is_some_and(Value::is_string)
        && let Some(Value::String(text)) = item.remove("text")
    {
        return Ok(ContentBlock::text(text));
    }
    serde_json::from_value(Value::Object(item))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// What the relay answered before results were moved field by field: written out as
    /// JSON and parsed back by rmcp.
    fn through_json(result: &ToolResult) -> Value {
        let mut parsed: CallToolResult =
            serde_json::from_value(serde_json::to_value(result).unwrap()).unwrap_or_else(|e| {
                CallToolResult::error(vec![ContentBlock::text(format!(
                    "the tool's result is not a valid CallToolResult: {e}"
                ))])
            });
        parsed
            .result_type
            .get_or_insert(rmcp::model::ResultType::COMPLETE);
        serde_json::to_value(parsed).unwrap()
    }

    fn moved(result: ToolResult) -> Value {
        match to_response(result).unwrap() {
            CallToolResponse::Complete(r) => serde_json::to_value(r).unwrap(),
            other => panic!("not complete: {other:?}"),
        }
    }

    #[test]
    fn a_result_moved_field_by_field_is_what_rmcp_parses_from_its_json() {
        let cases = [
            json!({"content": [{"type": "text", "text": "hi"}]}),
            json!({"content": [{"type": "text", "text": "no"}], "isError": true}),
            json!({"content": [{"type": "text", "text": "{\"a\":1}"}], "structuredContent": {"a": 1}}),
            json!({"content": [{"type": "text", "text": "t", "annotations": {"priority": 0.5}},
                               {"type": "image", "data": "AA==", "mimeType": "image/png"},
                               {"type": "resource_link", "uri": "file:///x", "name": "x"}],
                   "_meta": {"k": [1, 2]}, "unknown": 3}),
            json!({"content": [{"type": "video", "text": "?"}]}),
            json!({"content": [{"type": "text", "text": 7}]}),
            json!({"content": [{"type": "text", "text": "x"}], "_meta": "not an object"}),
        ];
        for wire in cases {
            let result: ToolResult = serde_json::from_value(wire.clone()).unwrap();
            assert_eq!(moved(result.clone()), through_json(&result), "{wire}");
        }
    }

    /// A result with nothing in it is an empty result, as MCP allows; the trip through JSON
    /// made it `{}`, which rmcp refuses to read (no field it knows), and so a tool error.
    #[test]
    fn an_empty_result_stays_an_empty_result() {
        assert_eq!(
            moved(ToolResult::default()),
            json!({"content": [], "resultType": "complete"})
        );
    }
}
