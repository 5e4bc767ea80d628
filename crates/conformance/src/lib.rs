//! mesh-conformance: the module `test`, the tools the MCP conformance suite calls
//! (`test_simple_text`, `test_input_required_result_elicitation`, …), and `json`, written as
//! any mesh module is, so the suite drives the relays end to end through any mesh's bus (the
//! binary `mesh-conformance` serves both; the tests serve them in-process). What each answers is what the suite's
//! reference server answers; the questions travel as `input_required` results, which the
//! relays pass through to a 2026-07-28 client and ask an older one themselves.

mod fixtures;
mod tasks;

pub use tasks::modules as task_modules;

use std::sync::Arc;
use std::time::Duration;

use mesh_core::runtime::request_state::StateKey;
use mesh_core::runtime::{Call, Module, ServeError, ServeOptions, Serving, Tool};
use mesh_core::subjects::ToolResult;
use serde_json::{Map, Value, json};
use tokio::sync::{mpsc, oneshot};

/// A 1×1 PNG.
pub(crate) const PNG: &str = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg==";
/// Eight samples of silence, 8 kHz mono WAV.
const WAV: &str = "UklGRiwAAABXQVZFZm10IBAAAAABAAEAQB8AAEAfAAABAAgAZGF0YQgAAACAgICAgICAgA==";

fn content(items: Vec<Value>) -> ToolResult {
    ToolResult {
        content: items
            .into_iter()
            .map(|v| match v {
                Value::Object(m) => mesh_core::subjects::Content(m),
                _ => unreachable!("content items are objects"),
            })
            .collect(),
        ..ToolResult::default()
    }
}

fn no_args() -> Value {
    json!({"type": "object", "properties": {}})
}

/// A tool taking no arguments whose answer does not depend on the call.
fn fixed(name: &str, description: &str, answer: fn() -> ToolResult) -> Tool {
    Tool::new(name, description, no_args(), move |_c: Call| async move {
        answer()
    })
}

fn elicit(message: &str, properties: Value, required: &[&str]) -> Value {
    ToolResult::elicitation(
        message,
        json!({"type": "object", "properties": properties, "required": required}),
    )
}

fn sampling(question: &str) -> Value {
    json!({"method": "sampling/createMessage", "params": {
        "messages": [{"role": "user", "content": {"type": "text", "text": question}}],
        "maxTokens": 100
    }})
}

fn roots() -> Value {
    json!({"method": "roots/list", "params": {}})
}

fn asks(requests: Vec<(&str, Value)>, state: Option<String>) -> ToolResult {
    let requests: Map<String, Value> = requests
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v))
        .collect();
    let mut r = ToolResult::input_required(requests, state.unwrap_or_default());
    if r.request_state.as_deref() == Some("") {
        r.request_state = None;
    }
    r
}

/// The answer to `key`, if the call carries one.
fn answer<'a>(call: &'a Call, key: &str) -> Option<&'a Value> {
    call.continuation
        .as_ref()?
        .input_responses
        .as_ref()?
        .get(key)
}

/// An accepted form's field, as text.
/// The call's argument `name`, when it is text.
pub(crate) fn text_arg<'a>(call: &'a Call, name: &str) -> Option<&'a str> {
    call.args.get(name).and_then(Value::as_str)
}

fn field(answer: &Value, name: &str) -> Option<String> {
    match answer.pointer(&format!("/content/{name}"))? {
        Value::String(s) => Some(s.clone()),
        other => Some(other.to_string()),
    }
}

/// The state the call carries, opened with `key` for `tool`: its step, or why it is refused.
fn step(key: &StateKey, call: &Call, tool: &str) -> Result<Option<u64>, Box<ToolResult>> {
    let Some(state) = call
        .continuation
        .as_ref()
        .and_then(|c| c.request_state.as_deref())
    else {
        return Ok(None);
    };
    let who = call.actor().map(|a| a.to_string());
    match key.open(state, tool, who.as_deref()) {
        Ok(opened) => Ok(opened.ids["step"].as_u64()),
        Err(e) => Err(Box::new(ToolResult::refused_state(&e))),
    }
}

fn seal(key: &StateKey, call: &Call, tool: &str, step: u64) -> String {
    let who = call.actor().map(|a| a.to_string());
    key.seal(tool, who.as_deref(), json!({"step": step}))
}

/// A tool that asks `key` once and is done when it has the answer.
fn ask_once(name: &str, description: &str, key: &'static str, request: fn() -> Value) -> Tool {
    Tool::new(name, description, no_args(), move |call: Call| async move {
        match answer(&call, key) {
            Some(_) => ToolResult::text(format!("{key} answered")),
            None => asks(vec![(key, request())], None),
        }
    })
}

/// A tool that asks one form with `properties` and says what came back.
fn form(name: &str, description: &str, properties: Value) -> Tool {
    Tool::new(name, description, no_args(), move |call: Call| {
        let properties = properties.clone();
        async move {
            match answer(&call, "form") {
                Some(a) => ToolResult::text(format!(
                    "Elicitation completed: action={}, content={}",
                    a.get("action").and_then(Value::as_str).unwrap_or("none"),
                    a.get("content").unwrap_or(&Value::Null)
                )),
                None => asks(
                    vec![(
                        "form",
                        elicit("Please review and update the form fields", properties, &[]),
                    )],
                    None,
                ),
            }
        }
    })
}

/// The module `json`, whose one tool the suite calls `json_schema_2020_12_tool`: its input
/// schema uses JSON Schema 2020-12's vocabulary, which must reach the client as written.
pub fn json_module() -> Module {
    Module::new("json", "1.0.0", "a tool with a JSON Schema 2020-12 input schema").tool(Tool::new(
        "schema_2020_12_tool",
        "Tool with JSON Schema 2020-12 features",
        json!({
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "type": "object",
            "$defs": {"address": {
                "$anchor": "addressDef",
                "type": "object",
                "properties": {"street": {"type": "string"}, "city": {"type": "string"}}
            }},
            "properties": {
                "name": {"type": "string"},
                "address": {"$ref": "#/$defs/address"},
                "contactMethod": {"type": "string", "enum": ["phone", "email"]},
                "phone": {"type": "string"},
                "email": {"type": "string"}
            },
            "allOf": [{"anyOf": [{"required": ["phone"]}, {"required": ["email"]}]}],
            "if": {"properties": {"contactMethod": {"const": "phone"}}, "required": ["contactMethod"]},
            "then": {"required": ["phone"]},
            "else": {"required": ["email"]},
            "additionalProperties": false
        }),
        |_c: Call| async { ToolResult::text("ok") },
    ))
}

/// A tool whose handler gets the module's state key.
fn stateful(
    key: &Arc<StateKey>,
    name: &'static str,
    description: &str,
    handler: fn(&StateKey, &Call, &str) -> ToolResult,
) -> Tool {
    let key = key.clone();
    Tool::new(name, description, no_args(), move |call: Call| {
        let key = key.clone();
        async move { handler(&key, &call, &format!("test_{name}")) }
    })
}

/// `test_trigger_tool_change`: module `test` is served again with one tool more
/// (`test_late0`, `test_late1`, …), as a module upgraded in place, so the tools listed change
/// and the relay tells the clients that listen. On its own credential, so it works in the
/// accounts layout and in operator mode as anywhere.
fn trigger_tool_change(changes: Option<mpsc::UnboundedSender<()>>, added: usize) -> Tool {
    Tool::new(
        "trigger_tool_change",
        "Serves this module again with one tool more, changing the tools listed",
        no_args(),
        move |_c: Call| {
            let changes = changes.clone();
            async move {
                // Bounded: a flood of changes neither grows the module past what the
                // catalogue registers nor serves it again without end.
                if changes.is_some() && added >= MAX_ADDED {
                    return ToolResult::error(format!(
                        "module test has changed its tools {MAX_ADDED} times, the most it does; restart mesh-conformance"
                    ));
                }
                match changes.map(|c| c.send(())) {
                    Some(Ok(())) => {
                        ToolResult::text("module test is served again with a tool more")
                    }
                    _ => ToolResult::error(
                        "module test was not started to change its tools: run it with mesh-conformance",
                    ),
                }
            }
        },
    )
}

/// The most tools `test_trigger_tool_change` adds.
const MAX_ADDED: usize = 16;

/// `test_late<n>`: a tool added by the `n`-th change.
fn late(n: usize) -> Tool {
    Tool::new(
        format!("late{n}"),
        "A tool added while the module ran; answers pong",
        no_args(),
        |_c: Call| async { ToolResult::text("pong") },
    )
}

/// Serves module `test` until `shutdown`, again with one tool more at each
/// `test_trigger_tool_change`: the new one starts before the one before is drained behind
/// it, so no call finds nobody meanwhile (as the bridge serves a joined server's new list).
pub async fn serve_test(
    nats: async_nats::Client,
    options: ServeOptions,
    shutdown: impl std::future::Future<Output = ()>,
) -> Result<(), ServeError> {
    let (changes, mut changed) = mpsc::unbounded_channel();
    let mut added = 0;
    tokio::pin!(shutdown);
    let start = |added: usize| {
        let module = (0..added).fold(module_changing(Some(changes.clone()), added), |m, n| {
            m.tool(late(n))
        });
        Serving::start(module, nats.clone(), options.clone())
    };
    let mut serving = tokio::select! {
        s = start(0) => s?,
        () = &mut shutdown => return Ok(()),
    };
    loop {
        let (stop, stopped) = oneshot::channel::<()>();
        let running = tokio::spawn(serving.run(async move {
            let _ = stopped.await;
        }));
        tokio::select! {
            () = &mut shutdown => {
                let _ = stop.send(());
                let _ = running.await;
                return Ok(());
            }
            Some(()) = changed.recv(), if added < MAX_ADDED => {
                added += 1;
                serving = start(added).await?;
                tokio::spawn(async move {
                    let _ = stop.send(());
                    let _ = running.await;
                });
            }
        }
    }
}

/// `test_custom_headers`: parameters an HTTP client mirrors into `Mcp-Param-*` headers
/// (SEP-2243's `x-mcp-header`), which the console checks against the body.
fn custom_headers() -> Tool {
    Tool::new(
        "custom_headers",
        "Echoes a region and a priority, which HTTP clients also send as headers",
        json!({"type": "object", "properties": {
            "region": {"type": "string", "description": "Where to route", "x-mcp-header": "Region"},
            "priority": {"type": "integer", "description": "How urgent", "x-mcp-header": "Priority"},
            "query": {"type": "string", "description": "What to ask (no header)"}
        }, "required": ["region", "query"]}),
        |call: Call| async move {
            let region = text_arg(&call, "region").unwrap_or("");
            let priority = call
                .args
                .get("priority")
                .and_then(Value::as_i64)
                .unwrap_or(0);
            ToolResult::text(format!("region {region}, priority {priority}"))
        },
    )
}

/// The module `test`, its `test_trigger_tool_change` refusing (it changes its tools only
/// when served by [`serve_test`]).
pub fn module() -> Module {
    module_changing(None, 0)
}

fn module_changing(changes: Option<mpsc::UnboundedSender<()>>, added: usize) -> Module {
    let key = Arc::new(StateKey::generate());
    fixtures::beside(Module::new("test", "1.0.0", "the tools the MCP conformance suite calls"))
        .tool(trigger_tool_change(changes, added))
        .tool(custom_headers())
        .tool(tasks::tool_with_task())
        .tool(fixed("simple_text", "Answers with one text item", || {
            ToolResult::text("This is a simple text response for testing.")
        }))
        .tool(fixed("image_content", "Answers with one image", || {
            content(vec![json!({"type": "image", "data": PNG, "mimeType": "image/png"})])
        }))
        .tool(fixed("audio_content", "Answers with one sound", || {
            content(vec![json!({"type": "audio", "data": WAV, "mimeType": "audio/wav"})])
        }))
        .tool(fixed("embedded_resource", "Answers with an embedded resource", || {
            content(vec![json!({"type": "resource", "resource": {
                "uri": "test://embedded-resource", "mimeType": "text/plain",
                "text": "This is an embedded resource content."
            }})])
        }))
        .tool(fixed(
            "multiple_content_types",
            "Answers with text, an image and a resource",
            || {
                content(vec![
                    json!({"type": "text", "text": "Multiple content types test:"}),
                    json!({"type": "image", "data": PNG, "mimeType": "image/png"}),
                    json!({"type": "resource", "resource": {
                        "uri": "test://mixed-content-resource", "mimeType": "application/json",
                        "text": "{\"test\":\"data\",\"value\":123}"
                    }}),
                ])
            },
        ))
        .tool(fixed("error_handling", "Fails, as a tool error", || {
            ToolResult::error("This tool intentionally returns an error for testing")
        }))
        .tool(Tool::new(
            "tool_with_progress",
            "Reports its progress three times",
            no_args(),
            |call: Call| async move {
                // Further apart than the runtime's pacing (100 ms), so each is sent.
                for done in [0.0, 50.0, 100.0] {
                    call.progress.report(done, Some(100.0), None);
                    tokio::time::sleep(Duration::from_millis(150)).await;
                }
                ToolResult::text("Progress test completed")
            },
        ))
        .tool(Tool::new(
            "sampling",
            "Asks the client's model",
            json!({"type": "object", "properties": {"prompt": {"type": "string"}}}),
            |call: Call| async move {
                match answer(&call, "answer") {
                    None => {
                        let prompt = call.args.get("prompt").and_then(Value::as_str);
                        asks(vec![("answer", sampling(prompt.unwrap_or("Say something")))], None)
                    }
                    Some(a) => ToolResult::text(format!(
                        "LLM response: {}",
                        a.pointer("/content/text").and_then(Value::as_str).unwrap_or("")
                    )),
                }
            },
        ))
        .tool(Tool::new(
            "elicitation",
            "Asks the person for a name and an address",
            json!({"type": "object", "properties": {"message": {"type": "string"}}}),
            |call: Call| async move {
                match answer(&call, "user") {
                    None => {
                        let message = call.args.get("message").and_then(Value::as_str);
                        asks(vec![("user", elicit(
                            message.unwrap_or("Please provide your information"),
                            json!({"username": {"type": "string"}, "email": {"type": "string"}}),
                            &["username", "email"],
                        ))], None)
                    }
                    Some(a) => ToolResult::text(format!(
                        "User response: {}",
                        a.get("action").and_then(Value::as_str).unwrap_or("none")
                    )),
                }
            },
        ))
        .tool(ask_once("missing_capability", "Needs the client's model", "answer", || {
            sampling("What is 2 + 2?")
        }))
        .tool(ask_once(
            "streaming_elicitation",
            "Asks the person, as a result",
            "confirm",
            || elicit("Continue?", json!({"ok": {"type": "boolean"}}), &["ok"]),
        ))
        .tool(fixed("logging_tool", "Logs nothing the client did not ask for", || {
            ToolResult::text("Logging tool completed")
        }))
        .tool(form(
            "elicitation_sep1034_defaults",
            "Asks with a default for every primitive type",
            json!({
                "name": {"type": "string", "default": "John Doe"},
                "age": {"type": "integer", "default": 30},
                "score": {"type": "number", "default": 95.5},
                "status": {"type": "string", "enum": ["active", "inactive", "pending"], "default": "active"},
                "verified": {"type": "boolean", "default": true}
            }),
        ))
        .tool(form(
            "elicitation_sep1330_enums",
            "Asks with every kind of enum",
            json!({
                "untitledSingle": {"type": "string", "enum": ["option1", "option2", "option3"]},
                "titledSingle": {"type": "string", "oneOf": [
                    {"const": "value1", "title": "First Option"},
                    {"const": "value2", "title": "Second Option"},
                    {"const": "value3", "title": "Third Option"}
                ]},
                "legacyEnum": {"type": "string", "enum": ["opt1", "opt2", "opt3"],
                    "enumNames": ["Option One", "Option Two", "Option Three"]},
                "untitledMulti": {"type": "array", "items": {"type": "string", "enum": ["option1", "option2", "option3"]}},
                "titledMulti": {"type": "array", "items": {"anyOf": [
                    {"const": "value1", "title": "First Choice"},
                    {"const": "value2", "title": "Second Choice"},
                    {"const": "value3", "title": "Third Choice"}
                ]}}
            }),
        ))
        .tool(Tool::new(
            "input_required_result_elicitation",
            "Asks for a name",
            no_args(),
            |call: Call| async move {
                match answer(&call, "user_name") {
                    Some(a) if a.get("action").and_then(Value::as_str) == Some("accept") => {
                        match field(a, "name") {
                            Some(name) if a["content"]["name"].is_string() => {
                                ToolResult::text(format!("Hello, {name}!"))
                            }
                            _ => ToolResult::error("the answer to user_name has no name"),
                        }
                    }
                    Some(Value::Object(_)) => ToolResult::text("No name given"),
                    _ => asks(vec![("user_name", elicit(
                        "What is your name?",
                        json!({"name": {"type": "string"}}),
                        &["name"],
                    ))], None),
                }
            },
        ))
        .tool(ask_once(
            "input_required_result_sampling",
            "Asks the client's model",
            "capital_question",
            || sampling("What is the capital of France?"),
        ))
        .tool(stateful(
            &key,
            "input_required_result_request_state",
            "Asks to confirm, keeping a sealed state",
            |key, call, tool| match step(key, call, tool) {
                Err(refused) => *refused,
                Ok(Some(1)) if answer(call, "confirm").is_some() => {
                    ToolResult::text("state-ok: confirmed")
                }
                _ => asks(
                    vec![("confirm", elicit("Confirm?", json!({"ok": {"type": "boolean"}}), &["ok"]))],
                    Some(seal(key, call, tool, 1)),
                ),
            },
        ))
        .tool(stateful(
            &key,
            "input_required_result_multiple_inputs",
            "Asks three things at once",
            |key, call, tool| match step(key, call, tool) {
                Err(refused) => *refused,
                Ok(Some(1))
                    if ["user_name", "greeting", "client_roots"]
                        .iter()
                        .all(|k| answer(call, k).is_some()) =>
                {
                    ToolResult::text("All three answered")
                }
                _ => asks(
                    vec![
                        ("user_name", elicit("What is your name?", json!({"name": {"type": "string"}}), &["name"])),
                        ("greeting", sampling("Say hello")),
                        ("client_roots", roots()),
                    ],
                    Some(seal(key, call, tool, 1)),
                ),
            },
        ))
        .tool(stateful(
            &key,
            "input_required_result_multi_round",
            "Asks twice, one question a round",
            |key, call, tool| match step(key, call, tool) {
                Err(refused) => *refused,
                Ok(Some(2)) if answer(call, "step2").is_some() => ToolResult::text("Both rounds answered"),
                Ok(Some(1)) if answer(call, "step1").is_some() => asks(
                    vec![("step2", elicit("What is your favourite colour?", json!({"color": {"type": "string"}}), &["color"]))],
                    Some(seal(key, call, tool, 2)),
                ),
                _ => asks(
                    vec![("step1", elicit("What is your name?", json!({"name": {"type": "string"}}), &["name"]))],
                    Some(seal(key, call, tool, 1)),
                ),
            },
        ))
        .tool(stateful(
            &key,
            "input_required_result_tampered_state",
            "Refuses a state it did not seal",
            |key, call, tool| match step(key, call, tool) {
                Err(refused) => *refused,
                Ok(Some(1)) => ToolResult::text("state-ok"),
                _ => asks(
                    vec![("confirm", elicit("Confirm?", json!({"ok": {"type": "boolean"}}), &["ok"]))],
                    Some(seal(key, call, tool, 1)),
                ),
            },
        ))
        .tool(ask_once(
            "input_required_result_capabilities",
            "Asks only what a client with sampling alone can answer",
            "capital_question",
            || sampling("What is the capital of France?"),
        ))
        .tool(ask_once(
            "input_required_result_list_roots",
            "Asks for the client's roots",
            "client_roots",
            roots,
        ))
}
