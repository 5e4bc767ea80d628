//! A joined server's resources, resource templates, prompts and completions, served as the
//! module's (`mesh_core::runtime::Offering`): each request forwarded to the caller's server
//! (per person, or the module's), its answer passed back as the server wrote it.
//!
//! Resource uris and templates are the server's own, its pages passed through with its own
//! cursors. Prompt names become subject tokens as tool names do (`simple-prompt` →
//! `simple_prompt`, marked where two would be alike), so the prompts are read whole (at most
//! 64 pages) and paged by the bridge; the server's own name is kept in the prompt's
//! `_meta["mesh/mcpName"]` and used for its get and completions. A subscription is asked of
//! the caller's server once per uri and start (`resources/subscribe`, or from 2026-07-28 a
//! `subscriptions/listen` stream read here); the server's updates are said as the module's.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use mesh_core::actor::Caller;
use mesh_core::runtime::{
    FeatureFuture, Offering, ResourceUpdates, page_of, prompt_input_required,
};
use mesh_core::subjects::features::{
    CompleteRequest, FeatureError, GetRequest, PageRequest, ReadRequest,
};
use mesh_core::subjects::{CANCEL_VERB, TOOLS_VERB, claim::RESULT_VERB};
use rmcp::model::{
    CompleteRequestParams, GetPromptRequestParams, GetPromptResponse, PaginatedRequestParams,
    ProtocolVersion, ReadResourceRequestParams, ReadResourceResponse, ServerNotification,
    SubscriptionFilter,
};
use rmcp::{Peer, RoleClient, ServiceError};
use serde_json::{Map, Value, json};

use crate::names::{self, MCP_NAME_META};
use crate::pool::Pool;

/// The longest a request to the server may take.
const WITHIN: Duration = Duration::from_secs(60);
/// Pages of the server's prompts read at most.
const MAX_PAGES: usize = 64;

/// What a joined server offers besides tools, as its module serves it; cheap to clone (a
/// request's future holds a clone).
#[derive(Clone)]
pub struct Joined {
    pool: Pool,
    resources: bool,
    prompts: bool,
    /// The server's prompt names by their mesh names, from the last listing.
    names: Arc<RwLock<HashMap<String, String>>>,
    /// Whether the server says when a resource changes (`resources.subscribe`).
    subscribable: bool,
    /// The uris subscribed to at each server (by caller and start), at most
    /// [`MAX_SUBSCRIBED`]: asked once each, not once per relay's session; with the task
    /// reading a 2026-07-28 server's listen stream for it.
    subscribed: Arc<std::sync::Mutex<HashMap<Subscribed, Option<tokio::task::AbortHandle>>>>,
    /// Where a 2026-07-28 server's updates are said (older ones' come to the listener).
    updates: ResourceUpdates,
}

/// A subscription at a server: which server (a caller's own is made again after it idles
/// out, its starts counted afresh), the server's start, the uri.
type Subscribed = (usize, u64, String);

/// The most subscriptions kept as made: past it they are forgotten and asked of the server
/// again (which takes a repeated subscription as one).
const MAX_SUBSCRIBED: usize = 1024;

impl Joined {
    /// What the server at `pool` said it offers (its capabilities).
    pub fn new(pool: &Pool, resources: bool, prompts: bool, subscribable: bool) -> Arc<Joined> {
        Arc::new(Joined {
            pool: pool.clone(),
            resources,
            prompts,
            names: Arc::default(),
            subscribable,
            subscribed: Arc::default(),
            updates: pool.updates.clone(),
        })
    }
}

/// A failure talking to the server, as the module's refusal: the server's own JSON-RPC
/// error passes as it said it.
fn refused(what: &str, e: ServiceError) -> FeatureError {
    match e {
        ServiceError::McpError(e) => FeatureError {
            code: i64::from(e.code.0),
            message: e.message.into_owned(),
            data: e.data,
        },
        other => FeatureError::internal(format!("the MCP server's {what} failed: {other}")),
    }
}

/// An answer of the server's as the JSON object it was (`serde_json::to_value` of it).
fn object(value: Result<Value, serde_json::Error>) -> Result<Map<String, Value>, FeatureError> {
    match value {
        Ok(Value::Object(o)) => Ok(o),
        _ => Err(FeatureError::internal(
            "the MCP server's answer is no JSON object",
        )),
    }
}

/// The caller's server, when it runs (waited for a moment, as a tool call waits).
async fn peer(pool: &Pool, caller: &Caller) -> Result<Peer<RoleClient>, FeatureError> {
    let lease = pool
        .lease(caller)
        .await
        .map_err(|e| FeatureError::internal(e.to_string()))?;
    if let Some(c) = lease.server.current() {
        return Ok(c.peer);
    }
    tokio::time::timeout(Duration::from_secs(10), lease.server.connected())
        .await
        .map(|c| c.peer)
        .map_err(|_| {
            FeatureError::internal(
                "the MCP server is not running (it is being started); ask again in a moment",
            )
        })
}

/// `request` within [`WITHIN`].
async fn bounded<T>(
    what: &str,
    request: impl std::future::Future<Output = Result<T, ServiceError>>,
) -> Result<T, FeatureError> {
    match tokio::time::timeout(WITHIN, request).await {
        Ok(r) => r.map_err(|e| refused(what, e)),
        Err(_) => Err(FeatureError::internal(format!(
            "the MCP server did not answer its {what} within {WITHIN:?}"
        ))),
    }
}

fn paginated(page: &PageRequest) -> Option<PaginatedRequestParams> {
    Some(PaginatedRequestParams::default().with_cursor(page.cursor.clone()))
}

impl Joined {
    fn subscribed(
        &self,
    ) -> std::sync::MutexGuard<'_, HashMap<Subscribed, Option<tokio::task::AbortHandle>>> {
        self.subscribed.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Keeps `key` as subscribed (with the task hearing it, for a 2026-07-28 server); past
    /// [`MAX_SUBSCRIBED`] the others are forgotten first, their streams closed.
    fn keep(&self, key: Subscribed, hearing: Option<tokio::task::AbortHandle>) {
        let mut subscribed = self.subscribed();
        if subscribed.len() >= MAX_SUBSCRIBED {
            for (_, task) in subscribed.drain() {
                if let Some(t) = task {
                    t.abort();
                }
            }
        }
        subscribed.insert(key, hearing);
    }

    /// The server's prompts, named as the mesh names them, every page.
    async fn all_prompts(&self, caller: &Caller) -> Result<Vec<Map<String, Value>>, FeatureError> {
        let peer = peer(&self.pool, caller).await?;
        // Every page within one WITHIN: a server paging slowly holds no listing for long.
        let pages = async {
            let mut prompts = Vec::new();
            let mut cursor = None;
            for _ in 0..MAX_PAGES {
                let params = PaginatedRequestParams::default().with_cursor(cursor.take());
                let page = bounded("prompts/list", peer.list_prompts(Some(params))).await?;
                for p in page.prompts {
                    prompts.push(object(serde_json::to_value(p))?);
                }
                match page.next_cursor {
                    Some(next) => cursor = Some(next),
                    None => break,
                }
            }
            Ok::<_, FeatureError>(prompts)
        };
        let mut prompts = tokio::time::timeout(WITHIN, pages).await.map_err(|_| {
            FeatureError::internal(format!(
                "the MCP server did not list its prompts within {WITHIN:?}"
            ))
        })??;
        let mcp: Vec<String> = prompts
            .iter()
            .map(|p| {
                p.get("name")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_owned()
            })
            .collect();
        let refs: Vec<&str> = mcp.iter().map(String::as_str).collect();
        // The verbs no tool may be named are no prompt's name either: one named `tools`
        // could be listed and never got.
        let mesh = names::for_listing(&refs, &[TOOLS_VERB, RESULT_VERB, CANCEL_VERB]);
        let mut map = HashMap::new();
        for ((prompt, mcp), mesh) in prompts.iter_mut().zip(&mcp).zip(mesh) {
            map.insert(mesh.clone(), mcp.clone());
            prompt.insert("name".into(), Value::String(mesh));
            let meta = prompt.entry("_meta").or_insert_with(|| json!({}));
            if let Value::Object(meta) = meta {
                meta.retain(|k, _| !k.starts_with("mesh/"));
                meta.insert(MCP_NAME_META.into(), Value::String(mcp.clone()));
            }
        }
        *self.names.write().unwrap_or_else(|p| p.into_inner()) = map;
        Ok(prompts)
    }

    /// The server's name of the mesh's prompt `name`, listing again if it is not known.
    async fn server_name(&self, name: &str, caller: &Caller) -> Result<String, FeatureError> {
        let known = self
            .names
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(name)
            .cloned();
        if let Some(n) = known {
            return Ok(n);
        }
        self.all_prompts(caller).await?;
        self.names
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(name)
            .cloned()
            .ok_or_else(|| FeatureError::no_prompt(name))
    }
}

impl Offering for Joined {
    fn offers(&self) -> (bool, bool) {
        (self.resources, self.prompts)
    }

    fn resources(&self, page: PageRequest, caller: Caller) -> FeatureFuture {
        let pool = self.pool.clone();
        Box::pin(async move {
            let peer = peer(&pool, &caller).await?;
            object(serde_json::to_value(
                bounded("resources/list", peer.list_resources(paginated(&page))).await?,
            ))
        })
    }

    fn templates(&self, page: PageRequest, caller: Caller) -> FeatureFuture {
        let pool = self.pool.clone();
        Box::pin(async move {
            let peer = peer(&pool, &caller).await?;
            object(serde_json::to_value(
                bounded(
                    "resources/templates/list",
                    peer.list_resource_templates(paginated(&page)),
                )
                .await?,
            ))
        })
    }

    fn read(&self, uri: String, caller: Caller) -> FeatureFuture {
        self.read_asked(ReadRequest::of(&uri), caller)
    }

    /// The server's resource; a 2026-07-28 server's question (`input_required`) goes to the
    /// caller sealed as a prompt's does ([`Offering::prompt`] here).
    fn read_asked(&self, request: ReadRequest, caller: Caller) -> FeatureFuture {
        let pool = self.pool.clone();
        Box::pin(async move {
            let key = pool
                .lease(&caller)
                .await
                .map_err(|e| FeatureError::internal(e.to_string()))?
                .server
                .key
                .clone();
            let bound = format!("resource {}", request.uri);
            let actor = caller.id();
            let peer = peer(&pool, &caller).await?;
            let mut params = ReadResourceRequestParams::new(request.uri.clone());
            if let Some(sealed) = &request.request_state {
                let opened = key.open(sealed, &bound, actor.as_deref()).map_err(|e| {
                    FeatureError::invalid(format!(
                        "the requestState of {} is refused: {e}; read it again without inputResponses",
                        request.uri
                    ))
                })?;
                params.request_state = opened.ids["s"].as_str().map(str::to_owned);
            }
            params.input_responses = request.input_responses.map(|r| r.into_iter().collect());
            match bounded("resources/read", peer.read_resource_once(params)).await? {
                ReadResourceResponse::Complete(r) => object(serde_json::to_value(r)),
                ReadResourceResponse::InputRequired(asked) => {
                    let requests =
                        match serde_json::to_value(asked.input_requests.unwrap_or_default()) {
                            Ok(Value::Object(r)) => r,
                            _ => Map::new(),
                        };
                    let state =
                        key.seal(&bound, actor.as_deref(), json!({"s": asked.request_state}));
                    object(Ok(prompt_input_required(requests, Some(state))))
                }
                _ => Err(FeatureError::internal(
                    "the MCP server answered the read with something the bridge cannot read",
                )),
            }
        })
    }

    fn prompts(&self, page: PageRequest, caller: Caller) -> FeatureFuture {
        let this = self.clone();
        Box::pin(async move {
            let prompts = this.all_prompts(&caller).await?;
            page_of(
                "prompts",
                prompts.into_iter().map(Value::Object).collect(),
                &page,
            )
        })
    }

    /// The server's prompt; a 2026-07-28 server's question (`input_required`) goes to the
    /// caller as it is, its `requestState` sealed to the caller and the prompt as a tool's is
    /// (`call.rs`), and comes back opened with the caller's answers.
    fn prompt(&self, name: String, request: GetRequest, caller: Caller) -> FeatureFuture {
        let this = self.clone();
        Box::pin(async move {
            let server_name = this.server_name(&name, &caller).await?;
            let lease = this
                .pool
                .lease(&caller)
                .await
                .map_err(|e| FeatureError::internal(e.to_string()))?;
            let key = lease.server.key.clone();
            // Sealed under a name no tool can have, so a prompt's state opens no tool's call.
            let bound = format!("prompt {name}");
            let actor = caller.id();
            let peer = peer(&this.pool, &caller).await?;
            let mut params = GetPromptRequestParams::new(server_name);
            let arguments = request.arguments.unwrap_or_default();
            if !arguments.is_empty() {
                params = params.with_arguments(arguments);
            }
            if let Some(sealed) = &request.request_state {
                let opened = key.open(sealed, &bound, actor.as_deref()).map_err(|e| {
                    FeatureError::invalid(format!(
                        "the requestState of prompt {name} is refused: {e}; get it again without inputResponses"
                    ))
                })?;
                params.request_state = opened.ids["s"].as_str().map(str::to_owned);
            }
            params.input_responses = request.input_responses.map(|r| r.into_iter().collect());
            match bounded("prompts/get", peer.get_prompt_once(params)).await? {
                GetPromptResponse::Complete(r) => object(serde_json::to_value(r)),
                GetPromptResponse::InputRequired(asked) => {
                    let requests =
                        match serde_json::to_value(asked.input_requests.unwrap_or_default()) {
                            Ok(Value::Object(r)) => r,
                            _ => Map::new(),
                        };
                    let state =
                        key.seal(&bound, actor.as_deref(), json!({"s": asked.request_state}));
                    object(Ok(prompt_input_required(requests, Some(state))))
                }
                _ => Err(FeatureError::internal(
                    "the MCP server answered the prompt with something the bridge cannot read",
                )),
            }
        })
    }

    /// `resources/subscribe` at the caller's server before 2026-07-28 (its
    /// `notifications/resources/updated` the listener says as the module's), a
    /// `subscriptions/listen` stream for the uri from then (read here, for as long as the
    /// server's session lasts or the subscription is kept).
    #[allow(deprecated)] // resources/subscribe: what servers before 2026-07-28 take
    fn subscribe(&self, uri: String, caller: Caller) -> FeatureFuture {
        let this = self.clone();
        Box::pin(async move {
            if !this.subscribable {
                return Err(FeatureError::invalid(
                    "the MCP server does not say when its resources change (it declares no resources.subscribe)",
                ));
            }
            let lease = this
                .pool
                .lease(&caller)
                .await
                .map_err(|e| FeatureError::internal(e.to_string()))?;
            let connected = match lease.server.current() {
                Some(c) => c,
                None => tokio::time::timeout(Duration::from_secs(10), lease.server.connected())
                    .await
                    .map_err(|_| {
                        FeatureError::internal(
                            "the MCP server is not running (it is being started); ask again in a moment",
                        )
                    })?,
            };
            let server = Arc::as_ptr(&lease.server.key) as usize;
            let key = (server, connected.start, uri.clone());
            // Kept, and (on a 2026-07-28 server) its stream still read: nothing to ask.
            if this
                .subscribed()
                .get(&key)
                .is_some_and(|t| t.as_ref().is_none_or(|t| !t.is_finished()))
            {
                return Ok(Map::new());
            }
            let modern = connected
                .peer
                .peer_info()
                .is_some_and(|i| i.protocol_version >= ProtocolVersion::V_2026_07_28);
            if !modern {
                let params = rmcp::model::SubscribeRequestParams::new(uri);
                bounded("resources/subscribe", connected.peer.subscribe(params)).await?;
                this.keep(key, None);
                return Ok(Map::new());
            }
            let filter = SubscriptionFilter::builder()
                .resource_subscription(uri.clone())
                .build();
            let mut stream = bounded("subscriptions/listen", connected.peer.listen(filter)).await?;
            tracing::debug!(%uri, "subscribed at the MCP server on a subscriptions/listen stream");
            let updates = this.updates.clone();
            let hearing = tokio::spawn(async move {
                while let Ok(Some(notification)) = stream.next().await {
                    if let ServerNotification::ResourceUpdatedNotification(n) = notification
                        && let Err(e) = updates.updated(&n.params.uri).await
                    {
                        tracing::warn!(uri = %n.params.uri, "a resource update was not passed on: {e}");
                    }
                }
            });
            this.keep(key, Some(hearing.abort_handle()));
            Ok(Map::new())
        })
    }

    fn complete(
        &self,
        prompt: Option<String>,
        request: CompleteRequest,
        caller: Caller,
    ) -> FeatureFuture {
        let this = self.clone();
        Box::pin(async move {
            let reference = match prompt {
                Some(p) => {
                    json!({"type": "ref/prompt", "name": this.server_name(&p, &caller).await?})
                }
                None => request.reference.clone().unwrap_or(Value::Null),
            };
            let mut params = json!({
                "ref": reference,
                "argument": {"name": request.argument.name, "value": request.argument.value},
            });
            if let Some(c) = request.context {
                params["context"] = c;
            }
            let params: CompleteRequestParams = serde_json::from_value(params)
                .map_err(|e| FeatureError::invalid(format!("the completion does not read: {e}")))?;
            let peer = peer(&this.pool, &caller).await?;
            object(serde_json::to_value(
                bounded("completion/complete", peer.complete(params)).await?,
            ))
        })
    }
}
