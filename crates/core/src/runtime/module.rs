//! A module as its author declares it: name, version, description and tools with async handlers.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::SystemTime;

use serde_json::{Map, Value};

use super::progress::Reporter;
use super::registration::Registry;
use crate::actor::{Actor, Caller};
use crate::subjects::ticket::Ticket;
use crate::subjects::{self, NameError, RESERVED_KEYS, ToolResult, ToolSpec, ToolsReply};

/// What a handler returns: a finished result, a tool error, or a request for input.
pub type HandlerFuture = Pin<Box<dyn Future<Output = ToolResult> + Send>>;
type Handler = Arc<dyn Fn(Call) -> HandlerFuture + Send + Sync>;

/// One call of a tool, as its handler receives it.
#[derive(Debug, Clone)]
pub struct Call {
    /// The arguments, already checked against the tool's input schema.
    pub args: Map<String, Value>,
    /// Who is calling, as nats-server stamped it: a person (perhaps through a module), a
    /// module on its own account, or nobody known (local mode).
    pub caller: Caller,
    /// The answer to an earlier `input_required` result, if this call carries one.
    pub continuation: Option<Continuation>,
    /// When the caller stops waiting, if it said so (`Mesh-Deadline`).
    pub deadline: Option<SystemTime>,
    /// Where the tool reports how far it has got, if the caller listens (`Mesh-Progress`).
    pub progress: Reporter,
    /// The caller's ticket, checked: on a tool that acts for people ([`Tool::acts_for_people`])
    /// called by a person, what lets the module reach other modules for them during this
    /// call (`Client::for_person`); on a call through another module, the ticket it forwarded.
    pub ticket: Option<Ticket>,
}

impl Call {
    /// The person the call is for; `None` in local mode or for a module calling as itself.
    pub fn actor(&self) -> Option<&Actor> {
        self.caller.actor()
    }

    /// The module whose credential sent the call, calling as itself or for a person.
    pub fn module(&self) -> Option<&str> {
        self.caller.module()
    }
}

impl Default for Call {
    /// A call with no arguments from nobody known (for handlers called in tests).
    fn default() -> Call {
        Call {
            args: Map::new(),
            caller: Caller::Unknown,
            continuation: None,
            deadline: None,
            progress: Reporter::default(),
            ticket: None,
        }
    }
}

/// Blocking work that did not finish: it panicked, or the runtime is shutting down.
#[derive(Debug, thiserror::Error)]
#[error("{what} failed: {source}")]
pub struct BlockingError {
    pub what: String,
    #[source]
    pub source: tokio::task::JoinError,
}

/// Runs blocking work (SQLite, files) on tokio's blocking pool; a panic there is an error
/// naming `what`.
pub async fn off_runtime<T: Send + 'static>(
    what: &str,
    f: impl FnOnce() -> T + Send + 'static,
) -> Result<T, BlockingError> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|source| BlockingError {
            what: what.to_owned(),
            source,
        })
}

/// The reserved `requestState` / `inputResponses` keys of a repeated call.
#[derive(Debug, Clone, PartialEq)]
pub struct Continuation {
    pub request_state: Option<String>,
    pub input_responses: Option<Map<String, Value>>,
}

/// A tool: its MCP description and the handler that serves it.
#[derive(Clone)]
pub struct Tool {
    pub spec: ToolSpec,
    pub(crate) handler: Handler,
    /// Whether it reaches other modules for the person calling it: a person's call then
    /// carries a ticket, or is refused before the handler runs.
    pub(crate) acts_for_people: bool,
}

impl Tool {
    /// Declares a tool. The input schema is a JSON Schema whose `type` is `object`.
    pub fn new<F, Fut>(
        name: impl Into<String>,
        description: impl Into<String>,
        input_schema: Value,
        handler: F,
    ) -> Self
    where
        F: Fn(Call) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = ToolResult> + Send + 'static,
    {
        Tool {
            spec: ToolSpec {
                name: name.into(),
                title: None,
                description: description.into(),
                input_schema,
                output_schema: None,
                annotations: None,
                icons: None,
                meta: None,
                execution: None,
            },
            handler: Arc::new(move |call| Box::pin(handler(call))),
            acts_for_people: false,
        }
    }

    /// Declares that the tool reaches other modules' tools for the person calling it (on
    /// their `mesh-obo` twins, which the module's `calls_for_people` grant opens): a person
    /// must call it with a ticket (the mesh's clients get one by themselves), which the
    /// handler finds in [`Call::ticket`] and forwards with `Client::for_person`.
    pub fn acts_for_people(mut self) -> Self {
        self.acts_for_people = true;
        // Said in its spec too, so a client that reads it asks for the ticket first rather
        // than learning from the tool's 401.
        let meta = self.spec.meta.get_or_insert_with(|| serde_json::json!({}));
        if let Some(m) = meta.as_object_mut() {
            m.insert(
                crate::subjects::ticket::ACTS_FOR_PEOPLE_META.into(),
                Value::Bool(true),
            );
        }
        self
    }

    /// Declares that a call of the tool may run as a task (MCP's tasks extension): a caller
    /// that offers one (`Mesh-Task`) hears at once that it was taken when the handler does
    /// not finish on its first poll, and reads the result from the catalogue later; `required`
    /// lists it as callable only so. The runtime keeps the task's state (runtime/task.rs).
    pub fn task_support(mut self, support: crate::subjects::task::TaskSupport) -> Self {
        self.spec.execution = Some(support.execution());
        self
    }

    /// Whether a call may run as a task, as its spec says.
    pub(crate) fn runs_as_task(&self) -> bool {
        self.spec.execution.as_ref().is_some_and(|e| {
            let t = serde_json::json!({ "execution": e });
            crate::subjects::task::TaskSupport::of_tool(&t)
                != crate::subjects::task::TaskSupport::Forbidden
        })
    }

    pub fn title(mut self, title: impl Into<String>) -> Self {
        self.spec.title = Some(title.into());
        self
    }

    pub fn output_schema(mut self, schema: Value) -> Self {
        self.spec.output_schema = Some(schema);
        self
    }

    /// MCP tool annotations (`readOnlyHint`, `destructiveHint`, …).
    pub fn annotations(mut self, annotations: Value) -> Self {
        self.spec.annotations = Some(annotations);
        self
    }
}

impl std::fmt::Debug for Tool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tool").field("spec", &self.spec).finish()
    }
}

/// A module: a name on the bus and the tools it serves there.
#[derive(Clone)]
pub struct Module {
    pub name: String,
    pub version: String,
    pub description: String,
    pub tools: Vec<Tool>,
    /// Where it registers, when not with the catalogue over the bus.
    pub(crate) registry: Option<Arc<dyn Registry>>,
    /// Its resources and prompts, if it serves any (`features.rs`).
    pub(crate) features: super::features::Features,
}

impl std::fmt::Debug for Module {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Module")
            .field("name", &self.name)
            .field("version", &self.version)
            .field("tools", &self.tools)
            .finish_non_exhaustive()
    }
}

/// Why a module refuses to start.
#[derive(Debug, thiserror::Error)]
pub enum ModuleError {
    #[error(transparent)]
    Name(#[from] NameError),
    #[error("module {module} declares tool {tool:?} twice")]
    DuplicateTool { module: String, tool: String },
    #[error("module {module} version {version:?} is not a semantic version (e.g. 1.2.3)")]
    Version { module: String, version: String },
    #[error("tool {tool}: {which} schema is invalid: {why}")]
    Schema {
        tool: String,
        which: &'static str,
        why: String,
    },
    #[error(
        "tool {tool}: input schema declares {key:?}, a key reserved for multi-round-trip continuations"
    )]
    ReservedKey { tool: String, key: &'static str },
}

impl Module {
    pub fn new(
        name: impl Into<String>,
        version: impl Into<String>,
        description: impl Into<String>,
    ) -> Self {
        Module {
            name: name.into(),
            version: version.into(),
            description: description.into(),
            tools: Vec::new(),
            registry: None,
            features: Default::default(),
        }
    }

    pub fn tool(mut self, tool: Tool) -> Self {
        self.tools.push(tool);
        self
    }

    /// Registers through `registry` instead of calling `catalog_register` on the bus: for
    /// the catalogue itself, which owns the bucket.
    pub fn registers_with(mut self, registry: Arc<dyn Registry>) -> Self {
        self.registry = Some(registry);
        self
    }

    /// The reply of this module's `tools` verb.
    pub fn tools_reply(&self) -> ToolsReply {
        ToolsReply {
            module: self.name.clone(),
            version: self.version.clone(),
            description: self.description.clone(),
            tools: self.tools.iter().map(|t| t.spec.clone()).collect(),
        }
    }

    /// Checks every name and schema and compiles the input validators, in tool order.
    pub(crate) fn compile(&self) -> Result<Vec<jsonschema::Validator>, ModuleError> {
        subjects::check_module(&self.name)?;
        if !is_semver(&self.version) {
            return Err(ModuleError::Version {
                module: self.name.clone(),
                version: self.version.clone(),
            });
        }
        let mut validators = Vec::with_capacity(self.tools.len());
        for (i, tool) in self.tools.iter().enumerate() {
            let spec = &tool.spec;
            subjects::check_tool(&spec.name)?;
            if self.tools[..i].iter().any(|t| t.spec.name == spec.name) {
                return Err(ModuleError::DuplicateTool {
                    module: self.name.clone(),
                    tool: spec.name.clone(),
                });
            }
            let schema_error = |which, why: String| ModuleError::Schema {
                tool: spec.name.clone(),
                which,
                why,
            };
            check_object_schema(&spec.input_schema).map_err(|w| schema_error("input", w))?;
            if let Some(out) = &spec.output_schema {
                check_object_schema(out).map_err(|w| schema_error("output", w))?;
                jsonschema::validator_for(out)
                    .map_err(|e| schema_error("output", e.to_string()))?;
            }
            if let Some(props) = spec
                .input_schema
                .get("properties")
                .and_then(Value::as_object)
                && let Some(key) = RESERVED_KEYS.into_iter().find(|k| props.contains_key(*k))
            {
                return Err(ModuleError::ReservedKey {
                    tool: spec.name.clone(),
                    key,
                });
            }
            let validator = jsonschema::validator_for(&spec.input_schema)
                .map_err(|e| schema_error("input", e.to_string()))?;
            validators.push(validator);
        }
        Ok(validators)
    }
}

/// MCP requires tool schemas to describe a JSON object.
fn check_object_schema(schema: &Value) -> Result<(), String> {
    match schema.get("type") {
        Some(Value::String(t)) if t == "object" => Ok(()),
        _ => Err("its \"type\" must be \"object\"".into()),
    }
}

/// `MAJOR.MINOR.PATCH` with optional `-pre` and `+build`, as the NATS services protocol asks.
pub fn is_semver(v: &str) -> bool {
    let core = v.split(['-', '+']).next().unwrap_or_default();
    let parts: Vec<&str> = core.split('.').collect();
    parts.len() == 3
        && parts.iter().all(|p| {
            !p.is_empty()
                && p.bytes().all(|b| b.is_ascii_digit())
                && (p.len() == 1 || !p.starts_with('0'))
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn echo(name: &str, schema: Value) -> Tool {
        Tool::new(name, "echo", schema, |_call| async { ToolResult::text("") })
    }

    #[test]
    fn refuses_reserved_and_bad_names() {
        let m = Module::new("m", "1.0.0", "").tool(echo("tools", json!({"type": "object"})));
        let err = m.compile().unwrap_err().to_string();
        assert!(err.contains("\"tools\" is reserved"), "{err}");
        let m = Module::new("M", "1.0.0", "");
        assert!(matches!(m.compile(), Err(ModuleError::Name(_))));
    }

    #[test]
    fn refuses_duplicates_versions_and_schemas() {
        let obj = json!({"type": "object"});
        let m = Module::new("m", "1.0.0", "")
            .tool(echo("a", obj.clone()))
            .tool(echo("a", obj.clone()));
        assert!(matches!(
            m.compile(),
            Err(ModuleError::DuplicateTool { .. })
        ));
        let m = Module::new("m", "1.0", "");
        assert!(matches!(m.compile(), Err(ModuleError::Version { .. })));
        let m = Module::new("m", "1.0.0", "").tool(echo("a", json!({"type": "string"})));
        assert!(matches!(m.compile(), Err(ModuleError::Schema { .. })));
        let m = Module::new("m", "1.0.0", "").tool(echo(
            "a",
            json!({"type": "object", "properties": {"requestState": {}}}),
        ));
        assert!(matches!(m.compile(), Err(ModuleError::ReservedKey { .. })));
    }

    #[test]
    fn semver() {
        for ok in ["0.1.0", "1.2.3-rc.1", "10.0.0+build"] {
            assert!(is_semver(ok), "{ok}");
        }
        for bad in ["1", "1.2", "01.2.3", "a.b.c", ""] {
            assert!(!is_semver(bad), "{bad}");
        }
    }
}
