//! Resources, resource templates, prompts and completions across the modules a credential
//! may reach: the one place that gathers them (pages across modules, under one cursor),
//! names prompts `<module>_<prompt>` as tools are named, and routes a uri, a prompt or a
//! completion back to its module. The relays and the command line only pass them on.
//!
//! A resource's uri is its server's own, not the mesh's: the client keeps which module
//! listed each uri and each template. A uri two modules list goes to the first in name order
//! (the other's is listed all the same, each marked with its module in
//! `_meta["mesh/module"]`); a uri nobody listed goes to the first module whose template it
//! matches. A module that serves no resources or prompts answers nothing (nobody serves) and
//! is passed over; so is one this credential may not ask.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use base64::Engine as _;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

use super::{CallError, Client, Outcome};
use crate::permission::Rule;
use crate::subjects::FullName;
use crate::subjects::features::{self, FeatureError};

/// The `_meta` key naming the module a listed resource or template is from.
pub const MODULE_META: &str = "mesh/module";

/// Items a page of the gathered listing holds at least (unless it is the last).
const PAGE: usize = 100;

/// Pages of one module read when looking for where a uri goes.
const PAGES_PER_MODULE: usize = 64;

/// How a request for a resource, a prompt or a completion failed.
#[derive(Debug, thiserror::Error)]
pub enum FeatureCallError {
    /// The bus's failure kinds, as for a tool call.
    #[error(transparent)]
    Call(#[from] CallError),
    /// The module (or the mesh, for a uri or prompt nobody has) refused: `error` carries
    /// the JSON-RPC code a relay answers with.
    #[error("{error}")]
    Refused { error: FeatureError },
}

impl FeatureCallError {
    /// The outcome class a surface reports (a refusal reads as the tool error's class: the
    /// module answered).
    pub fn outcome(&self) -> Outcome {
        match self {
            FeatureCallError::Call(e) => e.outcome(),
            FeatureCallError::Refused { .. } => Outcome::ToolError,
        }
    }
}

impl From<FeatureError> for FeatureCallError {
    fn from(error: FeatureError) -> Self {
        FeatureCallError::Refused { error }
    }
}

/// One page of a gathered listing: its items and the cursor of the next, if more follow.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Page {
    pub items: Vec<Value>,
    pub next: Option<String>,
}

/// What a listing lists.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ListKind {
    Resources,
    Templates,
    Prompts,
}

impl ListKind {
    fn subject(self, module: &str) -> String {
        match self {
            ListKind::Resources => features::resources_list_subject(module),
            ListKind::Templates => features::resource_templates_subject(module),
            ListKind::Prompts => features::prompts_list_subject(module),
        }
    }

    /// The key of the result's array.
    pub fn key(self) -> &'static str {
        match self {
            ListKind::Resources => "resources",
            ListKind::Templates => "resourceTemplates",
            ListKind::Prompts => "prompts",
        }
    }
}

/// Where the gathered listing goes on: a module, and its own cursor there.
#[derive(Serialize, Deserialize)]
struct Cursor {
    m: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    c: Option<String>,
}

impl Cursor {
    fn write(&self) -> String {
        base64::engine::general_purpose::URL_SAFE_NO_PAD
            .encode(serde_json::to_vec(self).expect("a cursor serialises"))
    }

    fn read(text: &str) -> Result<Cursor, FeatureError> {
        base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(text)
            .ok()
            .and_then(|b| serde_json::from_slice(&b).ok())
            .ok_or_else(|| {
                FeatureError::invalid(format!("cursor {text:?} is not one the mesh gave"))
            })
    }
}

/// Where each uri and template listed so far goes.
#[derive(Debug, Default)]
pub struct Routes {
    inner: Mutex<RoutesInner>,
}

#[derive(Debug, Default)]
struct RoutesInner {
    uris: HashMap<String, String>,
    /// Templates by module name, then template: the first match wins.
    templates: std::collections::BTreeSet<(String, String)>,
    /// When every listing was last read to learn a uri: an unknown uri read again soon after
    /// is not found without listing the mesh again.
    learned: Option<Instant>,
}

/// The most uris and templates kept: past it they are forgotten and learned again as read
/// (modules list what they like; a long-lived relay keeps no more than this of it).
const MAX_URIS: usize = 65_536;
const MAX_TEMPLATES: usize = 4_096;
/// How soon after learning every listing an unknown uri makes it learn them again.
const RELEARN_AFTER: Duration = Duration::from_secs(2);

impl Routes {
    fn inner(&self) -> std::sync::MutexGuard<'_, RoutesInner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Keeps what `module`'s page lists; a uri another module (earlier by name) has keeps
    /// going there.
    fn learn(&self, module: &str, listed: ListKind, items: &[Value]) {
        let mut inner = self.inner();
        for item in items {
            match listed {
                ListKind::Resources => {
                    if let Some(uri) = item.get("uri").and_then(Value::as_str) {
                        if inner.uris.len() >= MAX_URIS && !inner.uris.contains_key(uri) {
                            inner.uris.clear();
                        }
                        let kept = inner
                            .uris
                            .entry(uri.to_owned())
                            .or_insert_with(|| module.to_owned());
                        if kept.as_str() > module {
                            *kept = module.to_owned();
                        }
                    }
                }
                ListKind::Templates => {
                    if let Some(t) = item.get("uriTemplate").and_then(Value::as_str) {
                        if inner.templates.len() >= MAX_TEMPLATES {
                            inner.templates.clear();
                        }
                        inner.templates.insert((module.to_owned(), t.to_owned()));
                    }
                }
                ListKind::Prompts => {}
            }
        }
    }

    /// The module `uri` goes to: the one that listed it, else the first whose template it
    /// matches (or is).
    fn module_of(&self, uri: &str) -> Option<String> {
        let inner = self.inner();
        inner.uris.get(uri).cloned().or_else(|| {
            inner
                .templates
                .iter()
                .find(|(_, t)| t == uri || features::template_match(t, uri).is_some())
                .map(|(m, _)| m.clone())
        })
    }

    /// Forgets where `uri` went (its module said it has it no more): learned again when read.
    fn forget(&self, uri: &str) {
        self.inner().uris.remove(uri);
    }

    /// Whether every listing was read to learn uris within [`RELEARN_AFTER`]; if not, notes
    /// that it is being read now.
    fn learned_lately(&self) -> bool {
        let mut inner = self.inner();
        match inner.learned {
            Some(at) if at.elapsed() < RELEARN_AFTER => true,
            _ => {
                inner.learned = Some(Instant::now());
                false
            }
        }
    }
}

/// Resources, prompts and completions of the mesh, however it is reached: the relays stand
/// on this as they stand on [`super::Access`] for tools.
pub trait Features: Send + Sync {
    /// A page of the resources (`ListKind::Resources`), templates or prompts of every module
    /// this credential may ask, prompts named `<module>_<prompt>`.
    fn list(
        &self,
        listed: ListKind,
        cursor: Option<&str>,
        deadline: Duration,
    ) -> impl std::future::Future<Output = Result<Page, FeatureCallError>> + Send;

    /// `ReadResourceResult` of `uri`, from the module that has it.
    fn read(
        &self,
        uri: &str,
        deadline: Duration,
    ) -> impl std::future::Future<Output = Result<Map<String, Value>, FeatureCallError>> + Send;

    /// [`Features::read`] of the request's uri, or the `input_required` result it asks with
    /// (`resultType`); a later round carries the answers and the state in `request`.
    fn read_asked(
        &self,
        request: features::ReadRequest,
        deadline: Duration,
    ) -> impl std::future::Future<Output = Result<Map<String, Value>, FeatureCallError>> + Send;

    /// `GetPromptResult` of prompt `name` (`<module>_<prompt>`), or the `input_required`
    /// result it asks with (`resultType`); a later round carries the answers and the state
    /// in `request`.
    fn prompt(
        &self,
        name: &str,
        request: features::GetRequest,
        deadline: Duration,
    ) -> impl std::future::Future<Output = Result<Map<String, Value>, FeatureCallError>> + Send;

    /// `CompleteResult` for `params` (MCP's `completion/complete` params: `ref`,
    /// `argument`, `context`).
    fn complete(
        &self,
        params: Value,
        deadline: Duration,
    ) -> impl std::future::Future<Output = Result<Map<String, Value>, FeatureCallError>> + Send;
}

impl Client {
    /// The modules to ask, in name order: those the catalogue lists whose `subject` this
    /// credential may publish (all, where the server cannot say).
    async fn modules_for(
        &self,
        subject: impl Fn(&str) -> String,
        deadline: Duration,
    ) -> Result<Vec<String>, CallError> {
        Ok(self.modules_and_rule(subject, deadline).await?.0)
    }

    /// [`Self::modules_for`], and the credential's publish rule where the server says it.
    async fn modules_and_rule(
        &self,
        subject: impl Fn(&str) -> String,
        deadline: Duration,
    ) -> Result<(Vec<String>, Option<Rule>), CallError> {
        // The catalogue's listing verb (no call: nothing logged, no share spent), read with
        // what the credential may publish, as discovery reads them.
        let known = self.kept.known();
        let (listed, rule) = tokio::join!(
            self.listing(None, &known, deadline),
            self.publish_rule(deadline)
        );
        let mut names: Vec<String> = listed?.into_iter().map(|m| m.module).collect();
        names.sort();
        names.dedup();
        let rule: Option<Rule> = rule.ok();
        if let Some(rule) = &rule {
            names.retain(|m| rule.permits(&subject(m)));
        }
        Ok((names, rule))
    }

    /// The module `uri` goes to, where this credential may read that module's resources and
    /// hear their updates (where the server cannot say, the bus decides alone).
    pub async fn readable_module(
        &self,
        uri: &str,
        deadline: Duration,
    ) -> Result<String, FeatureCallError> {
        let module = self.module_of(uri, deadline).await?;
        if let Ok((publish, subscribe)) = self.rules(deadline).await {
            let read = features::resource_read_subject(&module);
            let updates = features::resource_updated_subject(&module);
            for (rule, subject) in [(&publish, &read), (&subscribe, &updates)] {
                if !rule.permits(subject) {
                    return Err(CallError::Denied {
                        target: format!("{module}'s resources"),
                        subject: subject.clone(),
                    }
                    .into());
                }
            }
        }
        Ok(module)
    }

    /// The module `uri` goes to, if a listing or template read so far says.
    pub fn known_module(&self, uri: &str) -> Option<String> {
        self.routes.module_of(uri)
    }

    /// [`Self::feature_request`], for the client's other files.
    pub(crate) async fn feature_request_to(
        &self,
        subject: &str,
        body: Value,
        deadline: Duration,
    ) -> Result<Map<String, Value>, FeatureCallError> {
        self.feature_request(subject, body, deadline).await
    }

    /// One request on a feature subject, its answer read: the result, or the refusal.
    async fn feature_request(
        &self,
        subject: &str,
        body: Value,
        deadline: Duration,
    ) -> Result<Map<String, Value>, FeatureCallError> {
        let body = serde_json::to_vec(&body).expect("a JSON value serialises");
        let msg = self.request(&subject, subject, body, deadline).await?;
        match features::read_reply(&msg.payload) {
            Ok(Ok(result)) => Ok(result),
            Ok(Err(error)) => Err(FeatureCallError::Refused { error }),
            Err(why) => Err(CallError::BadReply {
                target: subject.to_owned(),
                why,
            }
            .into()),
        }
    }

    /// One page of `module`'s listing from `cursor`: its items (marked with the module,
    /// prompts renamed) and its next cursor. A module that serves none, or may not be asked,
    /// has an empty last page.
    async fn module_page(
        &self,
        module: &str,
        listed: ListKind,
        cursor: Option<String>,
        deadline: Duration,
    ) -> Result<Page, FeatureCallError> {
        let body = match &cursor {
            Some(c) => json!({ "cursor": c }),
            None => json!({}),
        };
        let mut result = match self
            .feature_request(&listed.subject(module), body, deadline)
            .await
        {
            Ok(r) => r,
            Err(FeatureCallError::Call(
                CallError::NobodyServes { .. }
                | CallError::Denied { .. }
                | CallError::Unreached { .. },
            )) => return Ok(Page::default()),
            Err(e) => return Err(e),
        };
        let next = result
            .get("nextCursor")
            .and_then(Value::as_str)
            .map(str::to_owned)
            // A module that gives the cursor it was given would be listed forever.
            .filter(|n| Some(n) != cursor.as_ref());
        let mut items = match result.remove(listed.key()) {
            Some(Value::Array(a)) => a,
            _ => Vec::new(),
        };
        for item in &mut items {
            let Value::Object(o) = item else { continue };
            if listed == ListKind::Prompts
                && let Some(Value::String(name)) = o.get("name")
            {
                let full = features::prompt_full_name(module, name);
                o.insert("name".into(), Value::String(full));
            }
            let meta = o.entry("_meta").or_insert_with(|| json!({}));
            if let Value::Object(meta) = meta {
                meta.insert(MODULE_META.into(), json!(module));
            }
        }
        self.routes.learn(module, listed, &items);
        Ok(Page { items, next })
    }

    /// Every page of every module's `listed`, to learn where uris go.
    async fn learn_all(&self, deadline: Duration) -> Result<(), FeatureCallError> {
        let started = Instant::now();
        let modules = self
            .modules_for(features::resources_list_subject, deadline)
            .await?;
        for module in modules {
            for listed in [ListKind::Resources, ListKind::Templates] {
                let mut cursor = None;
                for _ in 0..PAGES_PER_MODULE {
                    let left = deadline.saturating_sub(started.elapsed());
                    match self.module_page(&module, listed, cursor.take(), left).await {
                        Ok(page) if page.next.is_some() => cursor = page.next,
                        Ok(_) => break,
                        Err(e) => {
                            tracing::debug!(%module, "its resources were not read: {e}");
                            break;
                        }
                    }
                }
            }
        }
        Ok(())
    }

    /// The module a resource (or template) uri goes to, learning the listings if it is not
    /// known yet.
    async fn module_of(&self, uri: &str, deadline: Duration) -> Result<String, FeatureCallError> {
        if let Some(m) = self.routes.module_of(uri) {
            return Ok(m);
        }
        // An agent reading uris nobody lists makes the mesh list itself at most every
        // RELEARN_AFTER, not once per read.
        if self.routes.learned_lately() {
            return Err(FeatureError::no_resource(uri).into());
        }
        self.learn_all(deadline).await?;
        self.routes
            .module_of(uri)
            .ok_or_else(|| FeatureError::no_resource(uri).into())
    }
}

impl Features for Client {
    async fn list(
        &self,
        listed: ListKind,
        cursor: Option<&str>,
        deadline: Duration,
    ) -> Result<Page, FeatureCallError> {
        let started = Instant::now();
        let from = cursor.map(Cursor::read).transpose()?;
        let (modules, rule) = self
            .modules_and_rule(|m| listed.subject(m), deadline)
            .await?;
        let start = match &from {
            None => 0,
            Some(c) => modules.partition_point(|m| m.as_str() < c.m.as_str()),
        };
        // The cursor's own place in its module, only for that module: one gone or no longer
        // this credential's leaves the next to start at its beginning.
        let mut module_cursor = from
            .filter(|c| modules.get(start) == Some(&c.m))
            .and_then(|c| c.c);
        // A prompt is listed only where the credential may get it (a grant may name one).
        let gettable = |item: &Value| match (&rule, listed) {
            (Some(rule), ListKind::Prompts) => item
                .get("name")
                .and_then(Value::as_str)
                .and_then(|n| FullName::parse(n).ok())
                .is_some_and(|f| rule.permits(&features::prompt_get_subject(f.module(), f.tool()))),
            _ => true,
        };
        let mut items = Vec::new();
        for (i, module) in modules.iter().enumerate().skip(start) {
            loop {
                let left = deadline.saturating_sub(started.elapsed());
                let page = match self
                    .module_page(module, listed, module_cursor.take(), left)
                    .await
                {
                    Ok(p) => p,
                    // One module's failure is not the listing's: the others are listed.
                    Err(e) => {
                        tracing::warn!(%module, "left out of the {} listing: {e}", listed.key());
                        Page::default()
                    }
                };
                items.extend(page.items.into_iter().filter(|i| gettable(i)));
                match page.next {
                    Some(next) if items.len() >= PAGE => {
                        let next = Cursor {
                            m: module.clone(),
                            c: Some(next),
                        };
                        return Ok(Page {
                            items,
                            next: Some(next.write()),
                        });
                    }
                    Some(next) => module_cursor = Some(next),
                    None => break,
                }
            }
            if items.len() >= PAGE
                && let Some(following) = modules.get(i + 1)
            {
                let next = Cursor {
                    m: following.clone(),
                    c: None,
                };
                return Ok(Page {
                    items,
                    next: Some(next.write()),
                });
            }
        }
        Ok(Page { items, next: None })
    }

    async fn read(
        &self,
        uri: &str,
        deadline: Duration,
    ) -> Result<Map<String, Value>, FeatureCallError> {
        self.read_asked(features::ReadRequest::of(uri), deadline)
            .await
    }

    async fn read_asked(
        &self,
        request: features::ReadRequest,
        deadline: Duration,
    ) -> Result<Map<String, Value>, FeatureCallError> {
        let started = Instant::now();
        let uri = request.uri.as_str();
        let module = self.module_of(uri, deadline).await?;
        let left = deadline.saturating_sub(started.elapsed());
        let body = serde_json::to_value(&request).expect("a read's request serialises");
        let read = self
            .feature_request(&features::resource_read_subject(&module), body, left)
            .await;
        // Its module has it no more: where it went is learned again at the next read.
        if let Err(FeatureCallError::Refused { error }) = &read
            && error.code == features::CODE_INVALID_PARAMS
            && error
                .data
                .as_ref()
                .and_then(|d| d.get("uri"))
                .and_then(Value::as_str)
                == Some(uri)
        {
            self.routes.forget(uri);
        }
        read
    }

    async fn prompt(
        &self,
        name: &str,
        request: features::GetRequest,
        deadline: Duration,
    ) -> Result<Map<String, Value>, FeatureCallError> {
        let full = FullName::parse(name).map_err(|_| FeatureError::no_prompt(name))?;
        let subject = features::prompt_get_subject(full.module(), full.tool());
        let started = Instant::now();
        let mut request = request;
        request.arguments.get_or_insert_default();
        let body = serde_json::to_value(&request).expect("a prompt's request serialises");
        match self.feature_request(&subject, body, deadline).await {
            // Nobody answered: a module that runs (its tools verb answers) and serves no such
            // prompt has none of that name, as MCP says it; one that does not run is nobody
            // serving, told apart as for a tool.
            Err(FeatureCallError::Call(e @ CallError::NobodyServes { .. })) => {
                let left = deadline.saturating_sub(started.elapsed());
                match self.tools(full.module(), left).await {
                    Ok(_) => Err(FeatureError::no_prompt(name).into()),
                    Err(_) => Err(e.into()),
                }
            }
            other => other,
        }
    }

    async fn complete(
        &self,
        params: Value,
        deadline: Duration,
    ) -> Result<Map<String, Value>, FeatureCallError> {
        let started = Instant::now();
        let reference = params.get("ref").cloned().unwrap_or(Value::Null);
        let mut body = params.clone();
        let subject = match reference.get("type").and_then(Value::as_str) {
            Some("ref/prompt") => {
                let name = reference
                    .get("name")
                    .and_then(Value::as_str)
                    .unwrap_or_default();
                let full = FullName::parse(name).map_err(|_| FeatureError::no_prompt(name))?;
                // The subject names the prompt; the module reads no `ref`.
                if let Value::Object(o) = &mut body {
                    o.remove("ref");
                }
                features::prompt_complete_subject(full.module(), full.tool())
            }
            Some("ref/resource") => {
                let uri = reference
                    .get("uri")
                    .and_then(Value::as_str)
                    .unwrap_or_default();
                let module = self.module_of(uri, deadline).await?;
                features::resource_complete_subject(&module)
            }
            _ => {
                return Err(FeatureError::invalid(
                    "a completion's ref is {\"type\": \"ref/prompt\", \"name\"} or {\"type\": \"ref/resource\", \"uri\"}",
                )
                .into());
            }
        };
        let left = deadline.saturating_sub(started.elapsed());
        self.feature_request(&subject, body, left).await
    }
}
