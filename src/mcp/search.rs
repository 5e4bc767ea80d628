//! The relay's search: when it is asked to (`--search`) or the tools it offers are many
//! (`--search-over`), `tools/list` lists three tools of the relay's own in place of them —
//! `mesh_find` (words → names and one-line descriptions), `mesh_describe` (a name → its
//! description and schemas) and `mesh_call` (a name and arguments → the call, relayed as a
//! `tools/call` of that tool is: selection, failure kinds, questions and progress alike). An
//! agent on a large mesh holds three tools in its context instead of thousands.
//!
//! Find and describe read the list the relay already keeps (`live.rs`), so they reach only
//! what it would list: the selection's tools that the credential may call.

use std::sync::Arc;

use rmcp::model::{Tool, ToolAnnotations};
use serde_json::{Map, Value, json};

use mesh_core::client::{Selection, ranked};
use mesh_core::subjects::ToolResult;

pub const FIND: &str = "mesh_find";
pub const DESCRIBE: &str = "mesh_describe";
pub const CALL: &str = "mesh_call";

/// Past this many tools, the relay offers its search unless told otherwise: far more than a
/// person would read, and about where a list's schemas fill a sizeable part of a model's
/// context.
pub const DEFAULT_OVER: usize = 64;

/// How many tools `mesh_find` names when not told.
const FIND_LIMIT: u64 = 20;
/// The most it names.
const FIND_MOST: u64 = 100;

/// When `tools/list` offers the search in place of the tools.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Mode {
    /// Always (`--search`).
    pub always: bool,
    /// When the tools offered are more than this (`--search-over`).
    pub over: usize,
}

impl Default for Mode {
    fn default() -> Self {
        Mode {
            always: false,
            over: DEFAULT_OVER,
        }
    }
}

impl Mode {
    /// Whether a list of `count` tools is offered as the search.
    pub fn offers(&self, count: usize) -> bool {
        self.always || count > self.over
    }
}

/// Whether `name` is one of the search's tools.
pub fn is_search_tool(name: &str) -> bool {
    [FIND, DESCRIBE, CALL].contains(&name)
}

/// The three tools, for a list of `count` tools.
pub fn tools(count: usize) -> Vec<Tool> {
    let schema = |value: Value| match value {
        Value::Object(map) => Arc::new(map),
        _ => unreachable!("the schemas below are objects"),
    };
    let reading = || ToolAnnotations::new().read_only(true).open_world(false);
    vec![
        Tool::new(
            FIND,
            format!(
                "Find tools among the {count} of this mesh you may use, by words (a task, a noun, \
                 a module's name): their full names and one-line descriptions, best match first. \
                 No words lists them all, by name. Then mesh_describe one, and mesh_call it."
            ),
            schema(json!({
                "type": "object",
                "properties": {
                    "words": {"type": "string", "description": "what the tool does or is called, e.g. \"list metadata\""},
                    "limit": {"type": "integer", "minimum": 1, "maximum": FIND_MOST, "description": format!("the most tools to name (default {FIND_LIMIT})")}
                }
            })),
        )
        .annotate(reading()),
        Tool::new(
            DESCRIBE,
            "Describe one tool of this mesh by its full name (from mesh_find): its whole \
             description, its input schema (the arguments mesh_call takes for it) and its \
             output schema.",
            schema(json!({
                "type": "object",
                "properties": {
                    "tool": {"type": "string", "description": "the tool's full name, <module>_<tool>"}
                },
                "required": ["tool"]
            })),
        )
        .annotate(reading()),
        Tool::new(
            CALL,
            "Call one tool of this mesh by its full name, with its arguments as its input schema \
             (mesh_describe) says. The answer is the tool's own, or why the mesh could not call \
             it: nobody serves it, it is not yours, it was slow, or it is busy.",
            schema(json!({
                "type": "object",
                "properties": {
                    "tool": {"type": "string", "description": "the tool's full name, <module>_<tool>"},
                    "arguments": {"type": "object", "description": "the tool's arguments"}
                },
                "required": ["tool"]
            })),
        ),
    ]
}

/// What a call of a search tool comes to.
pub enum Route {
    /// Answered here (find, describe, or arguments that do not read).
    Answer(ToolResult),
    /// `mesh_call`: relay this tool's call with these arguments.
    Call {
        tool: String,
        arguments: Map<String, Value>,
    },
}

/// Answers a call of the search tool `name` from `tools` (the relay's list) or routes it on.
pub fn route(
    name: &str,
    arguments: &Map<String, Value>,
    tools: &[Tool],
    selection: Option<&Selection>,
) -> Route {
    match name {
        FIND => Route::Answer(find(arguments, tools)),
        DESCRIBE => Route::Answer(describe(arguments, tools, selection)),
        _ => call(arguments),
    }
}

fn find(arguments: &Map<String, Value>, tools: &[Tool]) -> ToolResult {
    let words = match arguments.get("words") {
        None | Some(Value::Null) => "",
        Some(Value::String(w)) => w.as_str(),
        Some(_) => {
            return ToolResult::error("mesh_find: words must be a string, e.g. \"list metadata\"");
        }
    };
    let limit = match arguments.get("limit") {
        None | Some(Value::Null) => FIND_LIMIT,
        Some(v) => match v.as_u64() {
            Some(n) if (1..=FIND_MOST).contains(&n) => n,
            _ => {
                return ToolResult::error(format!(
                    "mesh_find: limit must be a whole number from 1 to {FIND_MOST}"
                ));
            }
        },
    };
    let description = |t: &Tool| t.description.as_deref().unwrap_or_default().to_owned();
    let found = ranked(
        tools,
        words,
        |t| &t.name,
        |t| t.description.as_deref().unwrap_or_default(),
    );
    let named: Vec<Value> = found
        .iter()
        .take(limit as usize)
        .map(|t| {
            let first = description(t).lines().next().unwrap_or_default().to_owned();
            json!({"name": t.name, "description": first})
        })
        .collect();
    ToolResult::json(json!({
        "tools": named,
        "found": found.len(),
        "of": tools.len(),
    }))
}

fn describe(
    arguments: &Map<String, Value>,
    tools: &[Tool],
    selection: Option<&Selection>,
) -> ToolResult {
    let Some(name) = arguments.get("tool").and_then(Value::as_str) else {
        return ToolResult::error(
            "mesh_describe needs tool, a tool's full name (<module>_<tool>) from mesh_find",
        );
    };
    if let Some(tool) = tools.iter().find(|t| t.name == name) {
        let mut described = serde_json::to_value(tool).expect("a tool serialises");
        // The relay's own marks are no part of what the tool is.
        if let Some(fields) = described.as_object_mut() {
            fields.remove("_meta");
        }
        return ToolResult::json(described);
    }
    ToolResult::error(unoffered(name, selection))
}

/// Why `name` is not among the relay's tools.
pub fn unoffered(name: &str, selection: Option<&Selection>) -> String {
    match selection {
        Some(s) if !s.selects(name) => {
            format!("{name} is not offered here: this relay offers only {s}")
        }
        _ => format!(
            "no tool {name} is offered here: only the tools of running modules that are yours to call are; mesh_find finds them by words"
        ),
    }
}

fn call(arguments: &Map<String, Value>) -> Route {
    let Some(tool) = arguments.get("tool").and_then(Value::as_str) else {
        return Route::Answer(ToolResult::error(
            "mesh_call needs tool, a tool's full name (<module>_<tool>) from mesh_find, and arguments, an object",
        ));
    };
    let arguments = match arguments.get("arguments") {
        None | Some(Value::Null) => Map::new(),
        Some(Value::Object(a)) => a.clone(),
        Some(_) => {
            return Route::Answer(ToolResult::error(format!(
                "mesh_call: arguments must be an object, the arguments of {tool} as mesh_describe's inputSchema says"
            )));
        }
    };
    Route::Call {
        tool: tool.to_owned(),
        arguments,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tool(name: &str, description: &str) -> Tool {
        Tool::new(
            name.to_owned(),
            description.to_owned(),
            Arc::new(Map::new()),
        )
    }

    fn answer(route: Route) -> ToolResult {
        match route {
            Route::Answer(r) => r,
            Route::Call { tool, .. } => panic!("routed to {tool}"),
        }
    }

    #[test]
    fn find_names_the_best_first_and_describe_gives_the_schema() {
        let tools = [
            tool("avu_list", "Lists the AVUs of a path.\nMore."),
            tool("echo", "Says the text back."),
        ];
        let args = |v: Value| v.as_object().unwrap().clone();
        let found = answer(route(FIND, &args(json!({"words": "list"})), &tools, None));
        assert_eq!(
            found.structured_content.unwrap(),
            json!({"tools": [{"name": "avu_list", "description": "Lists the AVUs of a path."}], "found": 1, "of": 2})
        );
        let all = answer(route(FIND, &args(json!({"limit": 1})), &tools, None));
        assert_eq!(all.structured_content.unwrap()["found"], 2);
        assert!(answer(route(FIND, &args(json!({"limit": 0})), &tools, None)).is_error);
        let d = answer(route(
            DESCRIBE,
            &args(json!({"tool": "echo"})),
            &tools,
            None,
        ));
        assert_eq!(d.structured_content.unwrap()["inputSchema"], json!({}));
        let selection = Selection::parse(["avu_*"]).unwrap();
        let outside = answer(route(
            DESCRIBE,
            &args(json!({"tool": "echo_fail"})),
            &tools,
            Some(&selection),
        ));
        assert!(outside.is_error);
        assert!(
            outside.text_content().contains("offers only --tools avu_*"),
            "{}",
            outside.text_content()
        );
        match route(
            CALL,
            &args(json!({"tool": "echo", "arguments": {"text": "hi"}})),
            &tools,
            None,
        ) {
            Route::Call { tool, arguments } => {
                assert_eq!(tool, "echo");
                assert_eq!(arguments["text"], "hi");
            }
            Route::Answer(r) => panic!("{}", r.text_content()),
        }
        assert!(
            answer(route(
                CALL,
                &args(json!({"tool": "echo", "arguments": 5})),
                &tools,
                None
            ))
            .is_error
        );
        assert!(answer(route(CALL, &args(json!({})), &tools, None)).is_error);
    }
}
