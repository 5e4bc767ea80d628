//! The module a bridge serves for one start of its server: the server's `tools/list` as
//! mesh tools, each passed through as the server wrote it (title, schemas, annotations,
//! icons, `_meta`), under its mesh spelling; a tool the mesh cannot serve is left out, named
//! in the log.

use mesh_core::runtime::{Module, Tool, is_semver};
use mesh_core::subjects::task::TaskSupport;
use mesh_core::subjects::{self, CANCEL_VERB, RESERVED_KEYS, TOOLS_VERB, claim::RESULT_VERB};
use serde_json::{Map, Value, json};

use crate::call;
use crate::names::{self, MCP_NAME_META};
use crate::pool::Pool;
use crate::server::Connected;

/// Module `name` serving `tools`, as listed by the server `connected` is.
pub fn build(
    name: &str,
    connected: &Connected,
    tools: Vec<rmcp::model::Tool>,
    pool: &Pool,
) -> Module {
    let info = connected.peer.peer_info();
    let (version, description) = match info.as_deref().and_then(|i| i.server_info.as_ref()) {
        Some(s) => {
            let version = if is_semver(&s.version) {
                s.version.clone()
            } else {
                "0.0.0".to_owned()
            };
            let title = s.title.as_deref().unwrap_or(&s.name);
            (
                version,
                format!("{title} (MCP server {} {}, bridged)", s.name, s.version),
            )
        }
        None => ("0.0.0".to_owned(), format!("MCP server {name}, bridged")),
    };
    let mut seen = std::collections::HashSet::new();
    let listed: Vec<Map<String, Value>> = tools
        .into_iter()
        .filter_map(|t| match serde_json::to_value(t) {
            Ok(Value::Object(o)) => Some(o),
            _ => None,
        })
        // One tool of a name: a second of the same name is left out (calls go by the name).
        .filter(|t| {
            let tool = t.get("name").and_then(Value::as_str).unwrap_or_default();
            let first = seen.insert(tool.to_owned());
            if !first {
                tracing::warn!(module = %name, %tool, "left out: listed twice");
            }
            first
        })
        .collect();
    let mcp_names: Vec<&str> = listed
        .iter()
        .map(|t| t.get("name").and_then(Value::as_str).unwrap_or_default())
        .collect();
    let mesh_names = names::for_listing(&mcp_names, &[TOOLS_VERB, RESULT_VERB, CANCEL_VERB]);
    let mut module = Module::new(name, version, description);
    // Its resources and prompts, where it says it has them.
    let (resources, prompts, subscribable) = info
        .as_deref()
        .map(|i| {
            (
                i.capabilities.resources.is_some(),
                i.capabilities.prompts.is_some(),
                i.capabilities
                    .resources
                    .as_ref()
                    .is_some_and(|r| r.subscribe == Some(true)),
            )
        })
        .unwrap_or_default();
    if resources || prompts {
        module = module.offering(crate::features::Joined::new(
            pool,
            resources,
            prompts,
            subscribable,
        ));
    }
    for ((listed, mcp_name), mesh_name) in listed.iter().zip(&mcp_names).zip(mesh_names) {
        match tool(listed, mcp_name, &mesh_name, pool) {
            Ok(t) => module = module.tool(t),
            Err(why) => {
                tracing::warn!(module = %name, tool = %mcp_name, "left out: {why}");
            }
        }
    }
    module
}

/// One listed tool as a mesh tool, or why the mesh cannot serve it.
fn tool(
    listed: &Map<String, Value>,
    mcp_name: &str,
    mesh_name: &str,
    pool: &Pool,
) -> Result<Tool, String> {
    subjects::check_tool(mesh_name).map_err(|e| e.to_string())?;
    let input = listed
        .get("inputSchema")
        .cloned()
        .unwrap_or_else(|| json!({"type": "object"}));
    check_schema(&input).map_err(|w| format!("its input schema {w}"))?;
    if let Some(props) = input.get("properties").and_then(Value::as_object)
        && let Some(key) = RESERVED_KEYS.into_iter().find(|k| props.contains_key(*k))
    {
        return Err(format!(
            "its input schema declares {key:?}, which the mesh keeps for a call's continuation"
        ));
    }
    let output = listed.get("outputSchema").cloned();
    if let Some(out) = &output {
        check_schema(out).map_err(|w| format!("its output schema {w}"))?;
    }
    let description = listed
        .get("description")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned();
    let (target, called) = (mcp_name.to_owned(), mesh_name.to_owned());
    let from = pool.clone();
    // A tool its server runs only as a task is made one there and followed (task.rs).
    let execution = listed.get("execution").filter(|e| e.is_object()).cloned();
    let task_only = TaskSupport::of_tool(&Value::Object(listed.clone())) == TaskSupport::Required;
    let mut tool = Tool::new(mesh_name, description, input, move |c| {
        let (pool, target, called) = (from.clone(), target.clone(), called.clone());
        async move {
            // The caller's own server (per person), or the module's.
            match pool.lease(&c.caller).await {
                Ok(lease) if task_only => {
                    crate::task::forward(&lease.server, &called, &target, c).await
                }
                Ok(lease) => call::forward(&lease.server, &called, &target, c).await,
                Err(e) => mesh_core::subjects::ToolResult::error(e.to_string()),
            }
        }
    });
    // Its `execution` passes through: a call may be a task in the mesh as at the server.
    tool.spec.execution = execution;
    if let Some(title) = listed.get("title").and_then(Value::as_str) {
        tool = tool.title(title);
    }
    if let Some(out) = output {
        tool = tool.output_schema(out);
    }
    if let Some(annotations) = listed.get("annotations").filter(|a| a.is_object()) {
        tool = tool.annotations(annotations.clone());
    }
    tool.spec.icons = listed.get("icons").filter(|i| i.is_array()).cloned();
    let mut meta = match listed.get("_meta") {
        Some(Value::Object(m)) => m.clone(),
        _ => Map::new(),
    };
    // `mesh/…` keys are the mesh's word about a tool, never a server's: a server that says
    // `mesh/actsForPeople` would have people's clients fetch and send it their tickets.
    meta.retain(|k, _| !k.starts_with("mesh/"));
    meta.insert(MCP_NAME_META.into(), Value::String(mcp_name.to_owned()));
    tool.spec.meta = Some(Value::Object(meta));
    Ok(tool)
}

/// A schema the runtime can hold a call to: an object, that compiles.
fn check_schema(schema: &Value) -> Result<(), String> {
    if schema.get("type").and_then(Value::as_str) != Some("object") {
        return Err("is not of type \"object\"".into());
    }
    jsonschema::validator_for(schema)
        .map(|_| ())
        .map_err(|e| format!("does not compile: {e}"))
}
