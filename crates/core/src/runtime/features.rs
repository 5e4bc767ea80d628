//! What a module serves besides tools: resources, resource templates, prompts and
//! completions, declared beside its tools ([`Module::resource`], [`Module::prompt`], …) or
//! offered whole by an [`Offering`] (the bridge: a joined server's own). Served on the
//! subjects of `subjects::features`, in turn by caller (as the `tools` verb is), each
//! answer on a task of its own within a bound, so a slow read holds up nobody else's.
//!
//! A module that offers none of them subscribes to none: a relay asking it hears "nobody
//! serves" at once, and takes that as nothing to list.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use async_nats::{Client, HeaderMap, Message, Subscriber};
use bytes::Bytes;
use serde_json::{Map, Value, json};
use tokio::sync::{Semaphore, watch};

use super::module::{Continuation, Module};
use crate::actor::{Caller, Layout, Route, identify};
use crate::subjects::features::{
    self, CompleteRequest, FeatureError, GetRequest, PageRequest, ReadRequest, Refusal, Updated,
};
use crate::subjects::{self, HEADER_SERVICE_ERROR, HEADER_SERVICE_ERROR_CODE};

/// What a feature's handler answers: the MCP result as a JSON object, or a refusal.
pub type FeatureFuture =
    Pin<Box<dyn Future<Output = Result<Map<String, Value>, FeatureError>> + Send>>;

/// Answers being made at once, by one instance, across all its features: past this a
/// request is answered busy (the turns go on reading; nothing waits inside them).
const AT_ONCE: usize = 64;
/// Answers one caller may have running at once: a quarter of [`AT_ONCE`], so that no one
/// caller's slow reads take every slot from the others; past it, busy.
const PER_CALLER_AT_ONCE: usize = AT_ONCE / 4;
/// When a caller answered busy is told to try again.
const BUSY_RETRY: std::time::Duration = std::time::Duration::from_millis(500);

/// Items in one page of a declared listing.
const PAGE: usize = 100;

/// Whatever serves a module's resources and prompts. Each method answers one request from
/// `caller` (who nats-server stamped; `Caller::Unknown` in local mode) with the MCP result.
pub trait Offering: Send + Sync + 'static {
    /// Which of the two it offers: resources (with templates), prompts.
    fn offers(&self) -> (bool, bool);
    /// A page of `ListResourcesResult`.
    fn resources(&self, page: PageRequest, caller: Caller) -> FeatureFuture;
    /// A page of `ListResourceTemplatesResult`.
    fn templates(&self, page: PageRequest, caller: Caller) -> FeatureFuture;
    /// `ReadResourceResult` of `uri`.
    fn read(&self, uri: String, caller: Caller) -> FeatureFuture;
    /// `ReadResourceResult` of the request's uri, or an `input_required` result asking the
    /// caller first, answered in a later `request` carrying `inputResponses` and the
    /// `requestState` it gave. What offers no questions reads as [`Offering::read`].
    fn read_asked(&self, request: ReadRequest, caller: Caller) -> FeatureFuture {
        self.read(request.uri, caller)
    }
    /// A page of `ListPromptsResult`.
    fn prompts(&self, page: PageRequest, caller: Caller) -> FeatureFuture;
    /// `GetPromptResult` of prompt `name` (the module's own name for it), or an
    /// `input_required` result asking the caller first (as a tool asks), answered in a later
    /// `request` carrying `inputResponses` and the `requestState` it gave.
    fn prompt(&self, name: String, request: GetRequest, caller: Caller) -> FeatureFuture;
    /// `CompleteResult` for an argument of prompt `prompt`, or (`None`) of the resource
    /// template the request's `ref` names.
    fn complete(
        &self,
        prompt: Option<String>,
        request: CompleteRequest,
        caller: Caller,
    ) -> FeatureFuture;
    /// Someone wants to hear when `uri` changes (`{}` once noted). A module whose resources
    /// change by themselves says so with [`ResourceUpdates`] and needs nothing here; the
    /// bridge subscribes at its server.
    fn subscribe(&self, uri: String, caller: Caller) -> FeatureFuture {
        let _ = (uri, caller);
        Box::pin(async { Ok(Map::new()) })
    }
}

/// One read of a resource or a template, as its handler receives it.
#[derive(Debug, Clone)]
pub struct Read {
    pub uri: String,
    /// A template's variables as the uri fills them (empty for a resource).
    pub variables: Map<String, Value>,
    pub caller: Caller,
    /// The answers and the state of a later round, when the read asked first.
    pub continuation: Option<Continuation>,
}

/// One get of a prompt, as its handler receives it.
#[derive(Debug, Clone)]
pub struct PromptCall {
    pub arguments: Map<String, Value>,
    pub caller: Caller,
    /// The answers and the state of a later round, when the prompt asked first (its
    /// handler answered [`prompt_input_required`]); `None` on the first.
    pub continuation: Option<Continuation>,
}

/// One completion request, as the module's completer receives it.
#[derive(Debug, Clone)]
pub struct Completing {
    /// The prompt (the module's name for it), or `None` for a resource template.
    pub prompt: Option<String>,
    /// The resource template's uri, when it is one.
    pub template: Option<String>,
    pub argument: String,
    pub value: String,
    /// Other arguments already given (`context.arguments`).
    pub context: Map<String, Value>,
    pub caller: Caller,
}

type Answer = Pin<Box<dyn Future<Output = Result<ReadAnswer, FeatureError>> + Send>>;
type ReadHandler = Arc<dyn Fn(Read) -> Answer + Send + Sync>;

/// What a read's handler answers ([`Resource::asking`]): the resource's contents, or a
/// question first (`input_required`, as a tool asks), whose answers come in a later read's
/// [`Read::continuation`].
#[derive(Debug, Clone, PartialEq)]
pub enum ReadAnswer {
    Contents(Vec<Value>),
    Asks {
        input_requests: Map<String, Value>,
        request_state: Option<String>,
    },
}
type PromptHandler = Arc<
    dyn Fn(PromptCall) -> Pin<Box<dyn Future<Output = Result<Value, FeatureError>> + Send>>
        + Send
        + Sync,
>;
type CompleteHandler = Arc<
    dyn Fn(Completing) -> Pin<Box<dyn Future<Output = Result<Vec<String>, FeatureError>> + Send>>
        + Send
        + Sync,
>;

/// A resource: its MCP description (`uri`, `name`, …) and what reading it gives.
#[derive(Clone)]
pub struct Resource {
    pub spec: Map<String, Value>,
    handler: ReadHandler,
}

impl Resource {
    /// A resource read by `handler`, which answers its contents (MCP `ResourceContents`:
    /// [`text_contents`], [`blob_contents`]).
    pub fn new<F, Fut>(uri: &str, name: &str, handler: F) -> Resource
    where
        F: Fn(Read) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Vec<Value>, FeatureError>> + Send + 'static,
    {
        let mut spec = Map::new();
        spec.insert("uri".into(), json!(uri));
        spec.insert("name".into(), json!(name));
        Resource {
            spec,
            handler: contents_only(handler),
        }
    }

    /// A resource whose `handler` may ask before it answers ([`ReadAnswer::Asks`]).
    pub fn asking<F, Fut>(uri: &str, name: &str, handler: F) -> Resource
    where
        F: Fn(Read) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<ReadAnswer, FeatureError>> + Send + 'static,
    {
        let mut spec = Map::new();
        spec.insert("uri".into(), json!(uri));
        spec.insert("name".into(), json!(name));
        Resource {
            spec,
            handler: Arc::new(move |r| Box::pin(handler(r))),
        }
    }

    /// A resource whose contents are always `text`.
    pub fn text(uri: &str, name: &str, mime_type: &str, text: &str) -> Resource {
        let (u, m, t) = (uri.to_owned(), mime_type.to_owned(), text.to_owned());
        Resource::new(uri, name, move |_| {
            let contents = text_contents(&u, &m, &t);
            async move { Ok(vec![contents]) }
        })
        .mime_type(mime_type)
    }

    pub fn description(mut self, description: &str) -> Self {
        self.spec.insert("description".into(), json!(description));
        self
    }

    pub fn mime_type(mut self, mime_type: &str) -> Self {
        self.spec.insert("mimeType".into(), json!(mime_type));
        self
    }

    pub fn title(mut self, title: &str) -> Self {
        self.spec.insert("title".into(), json!(title));
        self
    }

    fn uri(&self) -> &str {
        self.spec
            .get("uri")
            .and_then(Value::as_str)
            .unwrap_or_default()
    }
}

/// A read handler that answers contents only, as one that may ask.
fn contents_only<F, Fut>(handler: F) -> ReadHandler
where
    F: Fn(Read) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<Vec<Value>, FeatureError>> + Send + 'static,
{
    let handler = Arc::new(handler);
    Arc::new(move |r| {
        let answered = handler(r);
        Box::pin(async move { answered.await.map(ReadAnswer::Contents) })
    })
}

/// A resource template (`uriTemplate`, RFC 6570) and what reading a uri it expands to gives.
#[derive(Clone)]
pub struct ResourceTemplate {
    pub spec: Map<String, Value>,
    handler: ReadHandler,
}

impl ResourceTemplate {
    /// A template whose `handler` may ask before it answers ([`ReadAnswer::Asks`]).
    pub fn asking<F, Fut>(uri_template: &str, name: &str, handler: F) -> ResourceTemplate
    where
        F: Fn(Read) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<ReadAnswer, FeatureError>> + Send + 'static,
    {
        let mut spec = Map::new();
        spec.insert("uriTemplate".into(), json!(uri_template));
        spec.insert("name".into(), json!(name));
        ResourceTemplate {
            spec,
            handler: Arc::new(move |r| Box::pin(handler(r))),
        }
    }

    pub fn new<F, Fut>(uri_template: &str, name: &str, handler: F) -> ResourceTemplate
    where
        F: Fn(Read) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Vec<Value>, FeatureError>> + Send + 'static,
    {
        let mut spec = Map::new();
        spec.insert("uriTemplate".into(), json!(uri_template));
        spec.insert("name".into(), json!(name));
        ResourceTemplate {
            spec,
            handler: contents_only(handler),
        }
    }

    pub fn description(mut self, description: &str) -> Self {
        self.spec.insert("description".into(), json!(description));
        self
    }

    pub fn mime_type(mut self, mime_type: &str) -> Self {
        self.spec.insert("mimeType".into(), json!(mime_type));
        self
    }

    fn template(&self) -> &str {
        self.spec
            .get("uriTemplate")
            .and_then(Value::as_str)
            .unwrap_or_default()
    }
}

/// A prompt: its MCP description (`name`, `description`, `arguments`) and what getting it
/// gives (a `GetPromptResult`: `{"description"?, "messages": [...]}`, see [`prompt_result`]).
#[derive(Clone)]
pub struct Prompt {
    pub spec: Map<String, Value>,
    handler: PromptHandler,
}

impl Prompt {
    /// A prompt named `name` (a subject token, as a tool's name is).
    pub fn new<F, Fut>(name: &str, description: &str, handler: F) -> Prompt
    where
        F: Fn(PromptCall) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Value, FeatureError>> + Send + 'static,
    {
        let mut spec = Map::new();
        spec.insert("name".into(), json!(name));
        spec.insert("description".into(), json!(description));
        Prompt {
            spec,
            handler: Arc::new(move |c| Box::pin(handler(c))),
        }
    }

    /// Declares an argument; a required one missing from a get is refused before the
    /// handler runs.
    pub fn argument(mut self, name: &str, description: &str, required: bool) -> Self {
        let arguments = self
            .spec
            .entry("arguments")
            .or_insert_with(|| Value::Array(Vec::new()));
        if let Value::Array(a) = arguments {
            a.push(json!({"name": name, "description": description, "required": required}));
        }
        self
    }

    pub fn title(mut self, title: &str) -> Self {
        self.spec.insert("title".into(), json!(title));
        self
    }

    pub fn name(&self) -> &str {
        self.spec
            .get("name")
            .and_then(Value::as_str)
            .unwrap_or_default()
    }

    fn required(&self) -> impl Iterator<Item = &str> {
        self.spec
            .get("arguments")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter(|a| a.get("required").and_then(Value::as_bool) == Some(true))
            .filter_map(|a| a.get("name").and_then(Value::as_str))
    }
}

/// `{"uri", "mimeType", "text"}`: MCP's text resource contents.
pub fn text_contents(uri: &str, mime_type: &str, text: &str) -> Value {
    json!({"uri": uri, "mimeType": mime_type, "text": text})
}

/// `{"uri", "mimeType", "blob"}`: MCP's binary resource contents, base64 as MCP writes it.
pub fn blob_contents(uri: &str, mime_type: &str, bytes: &[u8]) -> Value {
    use base64::Engine as _;
    let blob = base64::engine::general_purpose::STANDARD.encode(bytes);
    json!({"uri": uri, "mimeType": mime_type, "blob": blob})
}

/// A `GetPromptResult` of `messages`, each `(role, content)` with an MCP content block
/// (`{"type": "text", "text": …}`, an image, an embedded resource).
pub fn prompt_result(description: Option<&str>, messages: Vec<(&str, Value)>) -> Value {
    let messages: Vec<Value> = messages
        .into_iter()
        .map(|(role, content)| json!({"role": role, "content": content}))
        .collect();
    let mut result = json!({ "messages": messages });
    if let Some(d) = description {
        result["description"] = json!(d);
    }
    result
}

/// A prompt's (or a read's) answer that asks the caller first: MCP's `InputRequiredResult` (`inputRequests`
/// keyed as the answers will be, each `{method, params}`: [`crate::subjects::ToolResult::elicitation`]),
/// with the `requestState` the next round carries back (seal it as a tool does:
/// `request_state.rs`; the caller holds it).
pub fn prompt_input_required(
    input_requests: Map<String, Value>,
    request_state: Option<String>,
) -> Value {
    let mut result = json!({"resultType": "input_required", "inputRequests": input_requests});
    if let Some(state) = request_state {
        result["requestState"] = json!(state);
    }
    result
}

/// The resources, templates and prompts a module declared, and its completer.
#[derive(Clone, Default)]
pub struct Declared {
    pub resources: Vec<Resource>,
    pub templates: Vec<ResourceTemplate>,
    pub prompts: Vec<Prompt>,
    completer: Option<CompleteHandler>,
}

impl std::fmt::Debug for Declared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Declared")
            .field("resources", &self.resources.len())
            .field("templates", &self.templates.len())
            .field("prompts", &self.prompts.len())
            .finish_non_exhaustive()
    }
}

/// What a module serves besides tools: declared, or offered by something else.
#[derive(Clone, Default)]
pub struct Features {
    pub(crate) declared: Declared,
    pub(crate) offering: Option<Arc<dyn Offering>>,
    pub(crate) updates: ResourceUpdates,
}

/// How a module says one of its resources changed: each [`ResourceUpdates::updated`] is
/// published on `mesh-resources.<module>.updated`, where the relays of the people who may
/// read its resources (nats-server's subscribe permissions say who) tell the sessions that
/// subscribed to that uri. Taken from [`Module::resource_updates`] before serving (a
/// handler keeps a clone); it publishes once the module serves.
#[derive(Clone, Default)]
pub struct ResourceUpdates {
    bound: Arc<std::sync::OnceLock<(Client, String)>>,
}

/// Why an update was not said.
#[derive(Debug, thiserror::Error)]
pub enum UpdateError {
    #[error(
        "the module does not serve yet: say a resource changed once it serves (Serving::start returned)"
    )]
    NotServing,
    #[error("a uri of {len} bytes is longer than the {max} an update may name; name a shorter one")]
    TooLong { len: usize, max: usize },
    #[error("the update of {uri} was not published: {source}")]
    Publish {
        uri: String,
        source: async_nats::PublishError,
    },
}

impl ResourceUpdates {
    /// Says `uri` changed: the sessions subscribed to it read it again.
    pub async fn updated(&self, uri: &str) -> Result<(), UpdateError> {
        let Some((client, module)) = self.bound.get() else {
            return Err(UpdateError::NotServing);
        };
        if uri.len() > features::MAX_URI {
            return Err(UpdateError::TooLong {
                len: uri.len(),
                max: features::MAX_URI,
            });
        }
        let body = serde_json::to_vec(&Updated {
            uri: uri.to_owned(),
        })
        .expect("an update serialises");
        client
            .publish(features::resource_updated_subject(module), body.into())
            .await
            .map_err(|source| UpdateError::Publish {
                uri: uri.to_owned(),
                source,
            })
    }

    /// A handle that publishes on `client` as `module` at once: for what serves a module's
    /// resources outside its `Module` (the bridge hears a server's updates in another task).
    pub fn publishing(client: &Client, module: &str) -> ResourceUpdates {
        let updates = ResourceUpdates::default();
        updates.bind(client, module);
        updates
    }

    /// Publishes on `client` as `module` from now on (the first binding stays).
    pub(crate) fn bind(&self, client: &Client, module: &str) {
        let _ = self.bound.set((client.clone(), module.to_owned()));
    }
}

impl Module {
    /// Serves a resource beside the tools.
    pub fn resource(mut self, resource: Resource) -> Self {
        self.features.declared.resources.push(resource);
        self
    }

    /// Serves a resource template beside the tools.
    pub fn resource_template(mut self, template: ResourceTemplate) -> Self {
        self.features.declared.templates.push(template);
        self
    }

    /// Serves a prompt beside the tools.
    pub fn prompt(mut self, prompt: Prompt) -> Self {
        self.features.declared.prompts.push(prompt);
        self
    }

    /// Completes the arguments of its prompts and resource templates with `handler`;
    /// without one, every completion is empty.
    pub fn completion<F, Fut>(mut self, handler: F) -> Self
    where
        F: Fn(Completing) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Vec<String>, FeatureError>> + Send + 'static,
    {
        self.features.declared.completer = Some(Arc::new(move |c| Box::pin(handler(c))));
        self
    }

    /// Serves what `offering` offers in place of anything declared (the bridge: a joined
    /// server's resources and prompts).
    pub fn offering(mut self, offering: Arc<dyn Offering>) -> Self {
        self.features.offering = Some(offering);
        self
    }

    /// The handle its handlers (or the bridge) say a resource changed with.
    pub fn resource_updates(&self) -> ResourceUpdates {
        self.features.updates.clone()
    }

    /// Whether it offers resources, prompts.
    pub fn offers(&self) -> (bool, bool) {
        match &self.features.offering {
            Some(o) => o.offers(),
            None => self.features.declared.offers(),
        }
    }
}

/// A page of `items` from `cursor` (an offset, as this module wrote it), under `key`: the
/// declared features' pages, and the bridge's of a server's prompts.
pub fn page_of(
    key: &str,
    items: Vec<Value>,
    page: &PageRequest,
) -> Result<Map<String, Value>, FeatureError> {
    let from = match &page.cursor {
        None => 0,
        Some(c) => c
            .parse::<usize>()
            .ok()
            .filter(|n| *n <= items.len())
            .ok_or_else(|| {
                FeatureError::invalid(format!("cursor {c:?} is not one this module gave"))
            })?,
    };
    let to = (from + PAGE).min(items.len());
    let mut result = Map::new();
    result.insert(key.into(), Value::Array(items[from..to].to_vec()));
    if to < items.len() {
        result.insert("nextCursor".into(), json!(to.to_string()));
    }
    Ok(result)
}

impl Declared {
    fn offers(&self) -> (bool, bool) {
        (
            !self.resources.is_empty() || !self.templates.is_empty(),
            !self.prompts.is_empty(),
        )
    }
}

impl Offering for Declared {
    fn offers(&self) -> (bool, bool) {
        Declared::offers(self)
    }

    fn resources(&self, page: PageRequest, _caller: Caller) -> FeatureFuture {
        let items = self
            .resources
            .iter()
            .map(|r| Value::Object(r.spec.clone()))
            .collect();
        let page = page_of("resources", items, &page);
        Box::pin(async move { page })
    }

    fn templates(&self, page: PageRequest, _caller: Caller) -> FeatureFuture {
        let items = self
            .templates
            .iter()
            .map(|t| Value::Object(t.spec.clone()))
            .collect();
        let page = page_of("resourceTemplates", items, &page);
        Box::pin(async move { page })
    }

    fn read(&self, uri: String, caller: Caller) -> FeatureFuture {
        self.read_asked(
            ReadRequest {
                uri,
                input_responses: None,
                request_state: None,
            },
            caller,
        )
    }

    fn read_asked(&self, request: ReadRequest, caller: Caller) -> FeatureFuture {
        let uri = request.uri;
        let continuation = (request.input_responses.is_some() || request.request_state.is_some())
            .then_some(Continuation {
                request_state: request.request_state,
                input_responses: request.input_responses,
            });
        // A resource of that uri first, then the first template it expands.
        let found = self
            .resources
            .iter()
            .find(|r| r.uri() == uri)
            .map(|r| (r.handler.clone(), Map::new()))
            .or_else(|| {
                self.templates.iter().find_map(|t| {
                    features::template_match(t.template(), &uri).map(|v| (t.handler.clone(), v))
                })
            });
        Box::pin(async move {
            let Some((handler, variables)) = found else {
                return Err(FeatureError::no_resource(&uri));
            };
            let answer = handler(Read {
                uri,
                variables,
                caller,
                continuation,
            })
            .await?;
            match answer {
                ReadAnswer::Contents(contents) => {
                    let mut result = Map::new();
                    result.insert("contents".into(), Value::Array(contents));
                    Ok(result)
                }
                ReadAnswer::Asks {
                    input_requests,
                    request_state,
                } => match prompt_input_required(input_requests, request_state) {
                    Value::Object(o) => Ok(o),
                    _ => unreachable!("an input_required result is an object"),
                },
            }
        })
    }

    fn prompts(&self, page: PageRequest, _caller: Caller) -> FeatureFuture {
        let items = self
            .prompts
            .iter()
            .map(|p| Value::Object(p.spec.clone()))
            .collect();
        let page = page_of("prompts", items, &page);
        Box::pin(async move { page })
    }

    fn prompt(&self, name: String, request: GetRequest, caller: Caller) -> FeatureFuture {
        let arguments = request.arguments.unwrap_or_default();
        let continuation = (request.input_responses.is_some() || request.request_state.is_some())
            .then_some(Continuation {
                request_state: request.request_state,
                input_responses: request.input_responses,
            });
        let Some(prompt) = self.prompts.iter().find(|p| p.name() == name) else {
            return Box::pin(async move { Err(FeatureError::no_prompt(&name)) });
        };
        if let Some(missing) = prompt.required().find(|a| !arguments.contains_key(*a)) {
            let e = FeatureError::invalid(format!("prompt {name} needs argument {missing}"));
            return Box::pin(async move { Err(e) });
        }
        let handler = prompt.handler.clone();
        Box::pin(async move {
            match handler(PromptCall {
                arguments,
                caller,
                continuation,
            })
            .await?
            {
                Value::Object(o) => Ok(o),
                _ => Err(FeatureError::internal(format!(
                    "prompt {name} answered something that is not a GetPromptResult"
                ))),
            }
        })
    }

    fn complete(
        &self,
        prompt: Option<String>,
        request: CompleteRequest,
        caller: Caller,
    ) -> FeatureFuture {
        let completer = self.completer.clone();
        let template = request
            .reference
            .as_ref()
            .and_then(|r| r.get("uri"))
            .and_then(Value::as_str)
            .map(str::to_owned);
        let context = request
            .context
            .as_ref()
            .and_then(|c| c.get("arguments"))
            .and_then(Value::as_object)
            .cloned()
            .unwrap_or_default();
        Box::pin(async move {
            let values = match completer {
                None => Vec::new(),
                Some(c) => {
                    c(Completing {
                        prompt,
                        template,
                        argument: request.argument.name,
                        value: request.argument.value,
                        context,
                        caller,
                    })
                    .await?
                }
            };
            // MCP caps a completion at 100 values, saying how many there were.
            let total = values.len();
            let values: Vec<Value> = values.into_iter().take(100).map(Value::String).collect();
            let mut result = Map::new();
            result.insert(
                "completion".into(),
                json!({"values": values, "total": total, "hasMore": total > 100}),
            );
            Ok(result)
        })
    }
}

/// What one request on a feature subject asks.
enum Asked {
    Resources,
    Templates,
    Read,
    ResourceComplete,
    Subscribe,
    Prompts,
    Get(String),
    PromptComplete(String),
}

impl Asked {
    /// The request a subject under `mesh.<module>.` names.
    fn of(module: &str, subject: &str) -> Option<Asked> {
        let rest = subject
            .strip_prefix(subjects::PREFIX)?
            .strip_prefix('.')?
            .strip_prefix(module)?
            .strip_prefix('.')?;
        let (kind, verb) = rest.split_once('.')?;
        Some(match (kind, verb) {
            (features::RESOURCES, "list") => Asked::Resources,
            (features::RESOURCES, "templates") => Asked::Templates,
            (features::RESOURCES, "read") => Asked::Read,
            (features::RESOURCES, "complete") => Asked::ResourceComplete,
            (features::RESOURCES, "subscribe") => Asked::Subscribe,
            (features::PROMPTS, "list") => Asked::Prompts,
            (features::PROMPTS, v) => match v.split_once('.')? {
                ("get", p) => Asked::Get(p.to_owned()),
                ("complete", p) => Asked::PromptComplete(p.to_owned()),
                _ => return None,
            },
            _ => return None,
        })
    }

    /// Whether it is a call (the call log's), which in the accounts layout must have
    /// crossed an import.
    fn is_call(&self) -> bool {
        matches!(self, Asked::Read | Asked::Get(_))
    }
}

/// A module's features, subscribed and ready to answer.
pub(crate) struct Served {
    module: String,
    offering: Arc<dyn Offering>,
    subs: Vec<Subscriber>,
}

impl Served {
    /// Subscribes to the subjects of what `module` offers (none when it offers nothing).
    pub(crate) async fn start(
        client: &Client,
        module: &Module,
    ) -> Result<Option<Served>, (String, async_nats::SubscribeError)> {
        let offering: Arc<dyn Offering> = match &module.features.offering {
            Some(o) => o.clone(),
            None => Arc::new(module.features.declared.clone()),
        };
        let (resources, prompts) = offering.offers();
        if !resources && !prompts {
            return Ok(None);
        }
        let m = &module.name;
        let mut wanted = Vec::new();
        if resources {
            wanted.push(features::resources_grant(m));
        }
        if prompts {
            wanted.push(format!("{}.{m}.{}.>", subjects::PREFIX, features::PROMPTS));
        }
        let mut subs = Vec::new();
        for subject in wanted {
            let sub = client
                .queue_subscribe(subject.clone(), m.clone())
                .await
                .map_err(|e| (subject, e))?;
            subs.push(sub);
        }
        Ok(Some(Served {
            module: m.clone(),
            offering,
            subs,
        }))
    }

    /// Answers until `stop`, in turn by caller, at most [`AT_ONCE`] at a time.
    pub(crate) async fn run(self, client: Client, layout: Layout, mut stop: watch::Receiver<bool>) {
        let stopped = async move {
            let _ = stop.wait_for(|s| *s).await;
        };
        let what = format!("module {}'s resources and prompts", self.module);
        let requests = super::turns::until_drained(self.subs, stopped);
        let at_once = Arc::new(Semaphore::new(AT_ONCE));
        let running = Arc::new(std::sync::Mutex::new(std::collections::HashMap::<
            Arc<str>,
            usize,
        >::new()));
        let module: Arc<str> = Arc::from(self.module.as_str());
        let offering = self.offering;
        super::turns::answer_in_turn(
            client.clone(),
            &what,
            super::turns::PER_CALLER,
            requests,
            |msg| super::turns::caller_key(msg, layout),
            |msg| {
                let (client, module, offering, at_once, running) = (
                    client.clone(),
                    module.clone(),
                    offering.clone(),
                    at_once.clone(),
                    running.clone(),
                );
                // Taken in turn, never waited for: a caller past its share, or an instance
                // with every slot in use, is answered busy at once, and the answer itself
                // runs on a task of its own.
                async move {
                    let key = super::turns::caller_key(&msg, layout);
                    let slot = Slot::take(&running, key, &at_once);
                    match slot {
                        Some(slot) => {
                            if let Some(task) =
                                running_answer(client, layout, module, offering, msg, slot)
                            {
                                tokio::spawn(task);
                            }
                        }
                        None => busy(&client, &msg).await,
                    }
                }
            },
        )
        .await;
        // The answers still running end before the module says it stopped.
        let _ = at_once.acquire_many(AT_ONCE as u32).await;
    }
}

/// One running answer's room: a slot of the instance's and one of its caller's share, both
/// given back when it is dropped.
struct Slot {
    _permit: tokio::sync::OwnedSemaphorePermit,
    running: Arc<std::sync::Mutex<std::collections::HashMap<Arc<str>, usize>>>,
    caller: Arc<str>,
}

impl Slot {
    /// A slot for `caller`, if it runs fewer than its share and the instance has one free.
    fn take(
        running: &Arc<std::sync::Mutex<std::collections::HashMap<Arc<str>, usize>>>,
        caller: Arc<str>,
        at_once: &Arc<Semaphore>,
    ) -> Option<Slot> {
        let mut counts = running.lock().unwrap_or_else(|p| p.into_inner());
        let held = counts.get(&caller).copied().unwrap_or(0);
        if held >= PER_CALLER_AT_ONCE {
            return None;
        }
        let permit = at_once.clone().try_acquire_owned().ok()?;
        counts.insert(caller.clone(), held + 1);
        Some(Slot {
            _permit: permit,
            running: running.clone(),
            caller,
        })
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut counts = self.running.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(n) = counts.get_mut(&self.caller) {
            *n -= 1;
            if *n == 0 {
                counts.remove(&self.caller);
            }
        }
    }
}

/// Answers `msg` busy (the services protocol's 429, with when to try again): the client
/// tells it apart as it does a tool's busy answer.
async fn busy(client: &Client, msg: &Message) {
    let Some(reply) = msg.reply.clone() else {
        return;
    };
    let why = crate::subjects::limits::Busy {
        retry_after: BUSY_RETRY,
        why: format!("{PER_CALLER_AT_ONCE} of yours, or {AT_ONCE} in all, are being answered"),
    };
    let (headers, body) = why.reply(&msg.subject);
    if let Err(e) = client.publish_with_headers(reply, headers, body).await {
        tracing::debug!(subject = %msg.subject, "a busy answer was not sent: {e}");
    }
}

/// The answer to one request, ready to run on a task of its own holding `slot`; `None`
/// for a request that is answered not at all.
fn running_answer(
    client: Client,
    layout: Layout,
    module: Arc<str>,
    offering: Arc<dyn Offering>,
    msg: Message,
    slot: Slot,
) -> Option<impl Future<Output = ()> + Send + 'static> {
    let reply = msg.reply.clone()?;
    let asked = Asked::of(&module, &msg.subject)?;
    // As a tool call: in the accounts layout a call crossed an import, where nats-server
    // witnessed it; one that did not (its reply is not nats-server's) runs nothing.
    if asked.is_call() && layout == Layout::Accounts && !reply.starts_with("_R_.") {
        tracing::debug!(subject = %msg.subject, "a request that did not cross the mesh's account is not run");
        return None;
    }
    Some(async move {
        let _slot = slot;
        let answered = match identify(
            msg.headers.as_ref(),
            msg.description.as_deref(),
            layout,
            Route::Direct,
            &msg.subject,
        ) {
            Err(e) => Err((FeatureError::internal(format!("{}: {e}", msg.subject)), 403)),
            // A handler that panics is a tool error said at once, not an answer never sent.
            Ok(caller) => {
                let answering =
                    std::panic::AssertUnwindSafe(answer(&*offering, asked, &msg.payload, caller));
                match futures_util::FutureExt::catch_unwind(answering).await {
                    Ok(answered) => answered,
                    Err(_) => Err(FeatureError::internal(format!(
                        "{}: the module's handler failed unexpectedly",
                        msg.subject
                    ))),
                }
                .map_err(|e| {
                    let code = e.service_code();
                    (e, code)
                })
            }
        };
        let (headers, body) = match answered {
            Ok(result) => (
                None,
                serde_json::to_vec(&result).expect("a JSON object serialises"),
            ),
            Err((error, code)) => {
                let mut headers = HeaderMap::new();
                headers.insert(
                    HEADER_SERVICE_ERROR,
                    subjects::header_line(&error.message).as_str(),
                );
                headers.insert(HEADER_SERVICE_ERROR_CODE, code.to_string().as_str());
                let body = serde_json::to_vec(&Refusal { error }).expect("a refusal serialises");
                (Some(headers), body)
            }
        };
        let max = client.max_payload();
        let (headers, body) = if max > 0 && body.len() > max.saturating_sub(1024) {
            let error = FeatureError::internal(format!(
                "the answer of {} is {} bytes, more than one message on this bus carries ({max} bytes)",
                msg.subject,
                body.len()
            ));
            let mut headers = HeaderMap::new();
            headers.insert(
                HEADER_SERVICE_ERROR,
                subjects::header_line(&error.message).as_str(),
            );
            headers.insert(HEADER_SERVICE_ERROR_CODE, "500");
            let body = serde_json::to_vec(&Refusal { error }).expect("a refusal serialises");
            (Some(headers), body)
        } else {
            (headers, body)
        };
        let sent = match headers {
            None => client.publish(reply, Bytes::from(body)).await,
            Some(h) => {
                client
                    .publish_with_headers(reply, h, Bytes::from(body))
                    .await
            }
        };
        if let Err(e) = sent {
            tracing::warn!(module = %module, "an answer was not sent: {e}");
        }
    })
}

/// Reads a request's body as `T`; an empty body as `T`'s default where it has one.
fn body<T: serde::de::DeserializeOwned>(payload: &[u8], what: &str) -> Result<T, FeatureError> {
    let payload = if payload.iter().all(u8::is_ascii_whitespace) {
        b"{}".as_slice()
    } else {
        payload
    };
    serde_json::from_slice(payload)
        .map_err(|e| FeatureError::invalid(format!("the request for {what} does not read: {e}")))
}

async fn answer(
    offering: &dyn Offering,
    asked: Asked,
    payload: &[u8],
    caller: Caller,
) -> Result<Map<String, Value>, FeatureError> {
    match asked {
        Asked::Resources => {
            offering
                .resources(body(payload, "resources")?, caller)
                .await
        }
        Asked::Templates => {
            offering
                .templates(body(payload, "resource templates")?, caller)
                .await
        }
        Asked::Read => {
            offering
                .read_asked(body(payload, "a resource")?, caller)
                .await
        }
        Asked::ResourceComplete => {
            offering
                .complete(None, body(payload, "a completion")?, caller)
                .await
        }
        Asked::Prompts => offering.prompts(body(payload, "prompts")?, caller).await,
        Asked::Get(name) => {
            offering
                .prompt(name, body(payload, "a prompt")?, caller)
                .await
        }
        Asked::Subscribe => {
            let r: ReadRequest = body(payload, "a subscription")?;
            if r.uri.len() > features::MAX_URI {
                return Err(FeatureError::invalid(format!(
                    "a uri of {} bytes is longer than the {} a subscription may name",
                    r.uri.len(),
                    features::MAX_URI
                )));
            }
            offering.subscribe(r.uri, caller).await
        }
        Asked::PromptComplete(name) => {
            offering
                .complete(Some(name), body(payload, "a completion")?, caller)
                .await
        }
    }
}
