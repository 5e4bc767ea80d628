//! Reaching the mesh through a running console (`mesh serve`) as an MCP client, with no bus
//! credential of one's own. The console marks the mesh's failure kinds in each error
//! result's `_meta`, so they come back here as the same `CallError`s the bus gives.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rmcp::model::{
    CallToolRequest, CallToolRequestParams, CallToolResponse, ClientRequest,
    PaginatedRequestParams, ProgressNotificationParam, ProgressToken, ProtocolVersion,
    ServerResult,
};
use rmcp::service::{
    ClientLifecycleMode, ClientServiceExt, NotificationContext, PeerRequestOptions, RunningService,
};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::{ClientHandler, RoleClient, ServiceError};
use serde_json::Value;
use tokio::sync::{mpsc, watch};

use mesh_core::client::{
    Access, CATALOG_MODULES, CallError, Discovery, Found, Listed, Outcome, YOURS_META,
    catalogue_pages,
};
use mesh_core::subjects::progress::Rising;
use mesh_core::subjects::{FullName, ListedTool, Listing, Progress, ToolResult, ToolsReply};

/// The `_meta` key under which the console names a mesh failure kind.
pub const OUTCOME_META: &str = "mesh/outcome";
/// The `_meta` key under which a busy answer says when to try again (milliseconds).
pub const RETRY_AFTER_META: &str = "mesh/retryAfterMs";
/// The key in an error's `data` by which a console refusing a tool outside its selection
/// names the selection.
pub const SELECTION_DATA: &str = "mesh/selection";

/// A connection to a console.
pub struct Console {
    url: String,
    service: RunningService<RoleClient, Listener>,
    listener: Listener,
}

/// The console's `notifications/progress`, handed to the call whose token they carry: a few
/// waiting at most per call (the relay sends ten a second), the rest dropped.
#[derive(Clone, Default)]
struct Listener {
    calls: Arc<Mutex<HashMap<ProgressToken, mpsc::Sender<Progress>>>>,
}

impl Listener {
    fn calls(&self) -> std::sync::MutexGuard<'_, HashMap<ProgressToken, mpsc::Sender<Progress>>> {
        self.calls.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl ClientHandler for Listener {
    /// Declares elicitation: a tool's questions come back to the command line, which asks
    /// the person (a 2026-07-28 server refuses, -32021, a question its client cannot take).
    fn get_info(&self) -> rmcp::model::ClientConfig {
        let capabilities = serde_json::from_value(serde_json::json!({"elicitation": {}}))
            .expect("a valid capability set");
        rmcp::model::ClientConfig::new(capabilities, rmcp::model::Implementation::from_build_env())
    }

    async fn on_progress(
        &self,
        params: ProgressNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        let report = Progress::new(params.progress, params.total, params.message.as_deref());
        if let Some(call) = self.calls().get(&params.progress_token) {
            let _ = call.try_send(report);
        }
    }
}

impl Console {
    /// Connects to the console at `url` (e.g. `http://127.0.0.1:7411/mcp`), speaking the
    /// stateless 2026-07-28 protocol so input requests come back as they are, with the token
    /// `mesh --console` finds by itself (`$MESH_CONSOLE_TOKEN`, else the owner's token file).
    pub async fn connect(url: &str) -> Result<Console, CallError> {
        Self::connect_with(url, crate::state::client_console_token()).await
    }

    /// Connects sending `token` as the bearer token (none: no `Authorization` header).
    pub async fn connect_with(url: &str, token: Option<String>) -> Result<Console, CallError> {
        // The console's bearer token: the owner's own file, or $MESH_CONSOLE_TOKEN.
        let mut config = StreamableHttpClientTransportConfig::with_uri(url.to_owned());
        if let Some(token) = token {
            config = config.auth_header(token);
        }
        let transport = StreamableHttpClientTransport::from_config(config);
        let lifecycle = ClientLifecycleMode::Discover {
            preferred_versions: vec![ProtocolVersion::V_2026_07_28],
        };
        let listener = Listener::default();
        let service = listener
            .clone()
            .serve_with_lifecycle(transport, lifecycle)
                .await
                .map_err(|e| {
                    let why = e.to_string();
                    let unreachable = ["Connection refused", "tcp connect error", "error sending request"]
                        .iter()
                        .any(|m| why.contains(m));
                    let why = if unreachable {
                        "nothing answers there: is `mesh serve` (or `mesh up`, which starts one) running, and is this its URL?".to_owned()
                    } else if why.contains("Auth required") {
                        format!(
                            "it refused this client's bearer token (none, or not its own): the \
                             token is read from {} or ${}",
                            crate::state::console_token_path().display(),
                            crate::state::CONSOLE_TOKEN_ENV
                        )
                    } else {
                        why
                    };
                    CallError::Connection {
                        target: format!("the console at {url}"),
                        why,
                    }
                })?;
        Ok(Console {
            url: url.to_owned(),
            service,
            listener,
        })
    }

    fn failed(&self, target: &str, e: ServiceError) -> CallError {
        match e {
            // A tool outside the console's selection: not the caller's through it, in its
            // words (which name the selection).
            ServiceError::McpError(e)
                if e.code.0 == -32602
                    && e.data
                        .as_ref()
                        .and_then(|d| d.get(SELECTION_DATA))
                        .is_some() =>
            {
                CallError::Relayed {
                    outcome: Outcome::Denied,
                    message: e.message.to_string(),
                }
            }
            // The console refuses names the catalogue does not know.
            ServiceError::McpError(e) if e.code.0 == -32602 => CallError::NobodyServes {
                target: target.to_owned(),
            },
            other => CallError::Connection {
                target: format!("{target} through the console at {}", self.url),
                why: other.to_string(),
            },
        }
    }

    async fn with_deadline<T>(
        &self,
        target: &str,
        deadline: Duration,
        work: impl Future<Output = Result<T, CallError>>,
    ) -> Result<T, CallError> {
        tokio::time::timeout(deadline, work)
            .await
            .unwrap_or_else(|_| {
                Err(CallError::Slow {
                    target: target.to_owned(),
                    after: deadline,
                })
            })
    }
}

use std::future::Future;

/// The most pages of tools read from a console (a mesh registers at most 1,024 tools a
/// module; a page holds many).
const MAX_PAGES: usize = 1024;

impl Console {
    /// Every tool the console offers, page by page, asked as a list even where it offers
    /// agents its search in place of one (`mesh/wholeList`).
    async fn whole_list(&self) -> Result<Vec<rmcp::model::Tool>, ServiceError> {
        let mut meta = rmcp::model::RequestMetaObject::new();
        meta.insert(crate::mcp::WHOLE_LIST_META.into(), Value::Bool(true));
        let mut tools = Vec::new();
        let mut cursor = None;
        let mut seen = std::collections::HashSet::new();
        // As many pages as it gives, each once and at most MAX_PAGES: a cursor seen before
        // (a console naming pages round and round) ends the list.
        for _ in 0..MAX_PAGES {
            let mut params = PaginatedRequestParams::default().with_cursor(cursor.clone());
            params.meta = Some(meta.clone());
            let page = self.service.list_tools(Some(params)).await?;
            tools.extend(page.tools);
            match page.next_cursor {
                Some(next) if seen.insert(next.clone()) => cursor = Some(next),
                _ => return Ok(tools),
            }
        }
        Ok(tools)
    }
}

impl Access for Console {
    async fn discover(
        &self,
        module: Option<&str>,
        deadline: Duration,
    ) -> Result<Discovery, CallError> {
        self.with_deadline(CATALOG_MODULES, deadline, async {
            let entries = catalogue_pages(self, module, deadline).await?;
            let tools = self
                .whole_list()
                .await
                .map_err(|e| self.failed("tools/list", e))?;
            // The console lists the tools of modules that answered; group them back, and
            // read which are its credential's.
            let mut by_module: BTreeMap<String, Vec<ListedTool>> = BTreeMap::new();
            let mut yours: Result<BTreeSet<String>, String> = Ok(BTreeSet::new());
            for tool in tools {
                let mine = tool
                    .meta
                    .as_ref()
                    .and_then(|m| m.get(YOURS_META))
                    .and_then(Value::as_bool);
                match (&mut yours, mine) {
                    (Ok(set), Some(true)) => {
                        set.insert(tool.name.to_string());
                    }
                    (Ok(_), Some(false)) | (Err(_), _) => {}
                    (Ok(_), None) => {
                        yours =
                            Err("the console did not say which tools are its credential's".into());
                    }
                }
                let mut wire = serde_json::to_value(&tool).map_err(|e| CallError::BadReply {
                    target: "tools/list".into(),
                    why: e.to_string(),
                })?;
                let full = tool.name.to_string();
                let Ok(name) = FullName::parse(&full) else {
                    continue;
                };
                wire["name"] = Value::String(name.tool().to_owned());
                if let Ok(spec) = serde_json::from_str::<ListedTool>(&wire.to_string()) {
                    by_module
                        .entry(name.module().to_owned())
                        .or_default()
                        .push(spec);
                }
            }
            // The console lists only its credential's tools: a running module with none of
            // them listed has none for it, rather than not answering.
            let says_whose = yours.is_ok();
            let modules = entries
                .into_iter()
                .map(|entry| {
                    let listing = |tools: Vec<ListedTool>| Listing {
                        module: entry.module.clone(),
                        version: entry.version.clone(),
                        description: entry.description.clone(),
                        tools: tools.into(),
                    };
                    let tools = match by_module.remove(&entry.module) {
                        Some(tools) => Ok(listing(tools)),
                        None if says_whose && entry.instances > 0 => Ok(listing(Vec::new())),
                        None => Err(CallError::NobodyServes {
                            target: format!("module {}", entry.module),
                        }),
                    };
                    Found { entry, tools }
                })
                .collect();
            Ok(Discovery { modules, yours })
        })
        .await
    }

    async fn tools(&self, module: &str, deadline: Duration) -> Result<ToolsReply, CallError> {
        let found = Access::discover(self, Some(module), deadline).await?;
        match found.modules.into_iter().next() {
            Some(f) => f.tools.and_then(|listing| {
                let tools = listing.tools.iter().map(ListedTool::to_spec);
                Ok(ToolsReply {
                    tools: tools
                        .collect::<Result<_, _>>()
                        .map_err(|e| CallError::BadReply {
                            target: "tools/list".into(),
                            why: format!("a schema is not JSON: {e}"),
                        })?,
                    module: listing.module,
                    version: listing.version,
                    description: listing.description,
                })
            }),
            None => Err(CallError::NobodyServes {
                target: format!("module {module}"),
            }),
        }
    }

    /// A module's tools as a typed call reads them, naming those its catalogue entry has
    /// that the console does not list (not its credential's): such a call goes untyped, and
    /// the bus says it is not the caller's.
    async fn listing(
        &self,
        module: &str,
        deadline: Duration,
        _use_kept: bool,
    ) -> Result<Listed, CallError> {
        let found = Access::discover(self, Some(module), deadline).await?;
        let Some(found) = found.modules.into_iter().next() else {
            return Err(CallError::NobodyServes {
                target: format!("module {module}"),
            });
        };
        let listing = found.tools?;
        let unlisted = found
            .entry
            .tools
            .iter()
            .filter(|t| !listing.tools.iter().any(|l| &l.name == *t))
            .cloned()
            .collect();
        Ok(Listed {
            tools: listing.tools,
            digest: None,
            kept: false,
            unlisted,
        })
    }

    async fn call(
        &self,
        tool: &FullName,
        args: &Value,
        deadline: Duration,
    ) -> Result<ToolResult, CallError> {
        self.call_with(tool, args, deadline, None).await
    }

    /// A call with a `progressToken`: the console's reports of it kept in `progress`, only
    /// growing, while it runs.
    async fn call_watched(
        &self,
        tool: &FullName,
        args: &Value,
        deadline: Duration,
        progress: &watch::Sender<Option<Progress>>,
    ) -> Result<ToolResult, CallError> {
        let (tx, mut rx) = mpsc::channel(8);
        let call = self.call_with(tool, args, deadline, Some(tx));
        tokio::pin!(call);
        let mut rising = Rising::default();
        let mut read = |report: Progress| {
            if rising.admit(&report) {
                progress.send_replace(Some(report));
            }
        };
        let ended = loop {
            tokio::select! {
                biased;
                ended = &mut call => break ended,
                Some(report) = rx.recv() => read(report),
            }
        };
        // Notifications that came before the answer: the last is often "done".
        while let Ok(report) = rx.try_recv() {
            read(report);
        }
        ended
    }
}

impl Console {
    /// A `tools/call` whose progress notifications go to `reports`: under the token rmcp
    /// gives the request (it gives every request one), known once the request is sent.
    async fn call_listening(
        &self,
        params: CallToolRequestParams,
        reports: mpsc::Sender<Progress>,
    ) -> Result<CallToolResponse, ServiceError> {
        let request = ClientRequest::CallToolRequest(CallToolRequest::new(params));
        let handle = self
            .service
            .send_cancellable_request(request, PeerRequestOptions::no_options())
            .await?;
        let token = handle.progress_token.clone();
        self.listener.calls().insert(token.clone(), reports);
        // Until the answer: dropped at the caller's deadline, it forgets the call's reports
        // and cancels the call at the console, as rmcp's own call does.
        let mut waiting = Waiting {
            listener: &self.listener,
            token,
            peer: handle.peer.clone(),
            id: Some(handle.id.clone()),
        };
        let answered = handle.await_response().await;
        waiting.id = None;
        drop(waiting);
        match answered? {
            ServerResult::CallToolResult(r) => Ok(CallToolResponse::Complete(r)),
            ServerResult::InputRequiredResult(r) => Ok(CallToolResponse::InputRequired(r)),
            _ => Err(ServiceError::UnexpectedResponse),
        }
    }

    /// One call; with `reports`, the console's progress notifications of it go there.
    async fn call_with(
        &self,
        tool: &FullName,
        args: &Value,
        deadline: Duration,
        reports: Option<mpsc::Sender<Progress>>,
    ) -> Result<ToolResult, CallError> {
        let target = tool.to_string();
        self.with_deadline(&target, deadline, async {
            let mut arguments = match args {
                Value::Object(m) => m.clone(),
                _ => Default::default(),
            };
            let mut params = CallToolRequestParams::new(target.clone());
            // The continuation keys travel as MCP parameters, not as arguments.
            if let Some(Value::String(state)) =
                arguments.remove(mesh_core::subjects::KEY_REQUEST_STATE)
            {
                params.request_state = Some(state);
            }
            if let Some(Value::Object(responses)) =
                arguments.remove(mesh_core::subjects::KEY_INPUT_RESPONSES)
            {
                params.input_responses = Some(responses.into_iter().collect());
            }
            params.arguments = Some(arguments);
            let response = match reports {
                None => self.service.call_tool_once(params).await,
                Some(reports) => self.call_listening(params, reports).await,
            }
            .map_err(|e| self.failed(&target, e))?;
            let wire = match response {
                CallToolResponse::Complete(r) => serde_json::to_value(r),
                CallToolResponse::InputRequired(r) => serde_json::to_value(r),
                other => {
                    return Err(CallError::BadReply {
                        target: target.clone(),
                        why: format!("unexpected answer {other:?}"),
                    });
                }
            }
            .map_err(|e| CallError::BadReply {
                target: target.clone(),
                why: e.to_string(),
            })?;
            let result: ToolResult =
                serde_json::from_value(wire).map_err(|e| CallError::BadReply {
                    target: target.clone(),
                    why: e.to_string(),
                })?;
            match marked_outcome(&result) {
                // Busy keeps when to try again, as on the bus.
                Some(Outcome::Busy) => Err(CallError::Busy {
                    target: target.clone(),
                    retry_after: std::time::Duration::from_millis(
                        result
                            .extra
                            .get("_meta")
                            .and_then(|m| m.get(RETRY_AFTER_META))
                            .and_then(Value::as_u64)
                            .unwrap_or(1000)
                            .min(3_600_000),
                    ),
                    message: result.text_content(),
                }),
                Some(outcome) => Err(CallError::Relayed {
                    outcome,
                    message: result.text_content(),
                }),
                None => Ok(result),
            }
        })
        .await
    }
}

/// A call listened to, until its answer; see `call_listening`.
struct Waiting<'a> {
    listener: &'a Listener,
    token: ProgressToken,
    peer: rmcp::service::Peer<RoleClient>,
    /// The request to cancel if it is dropped unanswered.
    id: Option<rmcp::model::RequestId>,
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.listener.calls().remove(&self.token);
        if let Some(id) = self.id.take() {
            let peer = self.peer.clone();
            let cancelled = rmcp::model::CancelledNotificationParam::new(
                Some(id),
                Some("the caller stopped waiting".into()),
            );
            tokio::spawn(async move {
                let _ = peer.notify_cancelled(cancelled).await;
            });
        }
    }
}

/// The failure kind the console marked in an error result, if any.
fn marked_outcome(result: &ToolResult) -> Option<Outcome> {
    if !result.is_error {
        return None;
    }
    let kind = result.extra.get("_meta")?.get(OUTCOME_META)?.as_str()?;
    Outcome::from_name(kind)
}
