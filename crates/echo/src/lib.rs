//! `echo`: a module for trying the mesh out and for measuring it — it answers, fails, waits
//! and tells who called, on request.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};

use mesh_core::actor::Caller;
use mesh_core::runtime::request_state::{SpentStates, StateKey};
use mesh_core::runtime::{Call, Module, Tool};
use mesh_core::subjects::ToolResult;

/// The longest `echo_sleep` waits, so a stray call cannot hold a slot for long.
const MAX_SLEEP_MS: u64 = 60_000;

/// `echo_choose`'s sealed questions: the key, and the states answered already. echo writes
/// nothing, so it keeps them in memory: a replay after a restart gains nothing.
struct Questions {
    key: StateKey,
    spent: SpentStates,
}

/// echo with a key of its own for this process (tests, one instance).
pub fn module() -> Module {
    module_with_key(StateKey::generate())
}

/// echo sealing `echo_choose`'s state with `key` (every instance sharing the key accepts
/// the others' questions).
pub fn module_with_key(key: StateKey) -> Module {
    let questions = Arc::new(Questions {
        key,
        spent: SpentStates::default(),
    });
    Module::new(
        "echo",
        env!("CARGO_PKG_VERSION"),
        "Echoes, fails, waits and tells who called: for trying the mesh out",
    )
    .tool(
        Tool::new(
            "echo",
            "Returns the text it is given",
            json!({
                "type": "object",
                "properties": {"text": {"type": "string", "description": "what to send back"}},
                "required": ["text"],
                "additionalProperties": false
            }),
            |call: Call| async move { ToolResult::text(str_arg(&call, "text")) },
        )
        .annotations(json!({"readOnlyHint": true, "idempotentHint": true, "openWorldHint": false})),
    )
    .tool(
        Tool::new(
            "fail",
            "Always answers with a tool error carrying the given text",
            json!({
                "type": "object",
                "properties": {"text": {"type": "string"}},
                "additionalProperties": false
            }),
            |call: Call| async move {
                let text = str_arg(&call, "text");
                ToolResult::error(if text.is_empty() {
                    "failed on request"
                } else {
                    text
                })
            },
        )
        .annotations(json!({"readOnlyHint": true})),
    )
    .tool(
        Tool::new(
            "sleep",
            "Waits the given milliseconds (at most 60000), then answers",
            json!({
                "type": "object",
                "properties": {"ms": {"type": "integer", "minimum": 0, "maximum": MAX_SLEEP_MS}},
                "required": ["ms"],
                "additionalProperties": false
            }),
            |call: Call| async move {
                let ms = call.args.get("ms").and_then(Value::as_u64).unwrap_or(0);
                tokio::time::sleep(Duration::from_millis(ms)).await;
                ToolResult::text(format!("slept {ms} ms"))
            },
        )
        .annotations(json!({"readOnlyHint": true})),
    )
    .tool(
        Tool::new(
            "choose",
            "Asks the person to pick one of the given options, then answers with the pick",
            json!({
                "type": "object",
                "properties": {
                    "options": {"type": "array", "items": {"type": "string"}, "minItems": 1, "maxItems": 8},
                    "question": {"type": "string"}
                },
                "required": ["options"],
                "additionalProperties": false
            }),
            move |call: Call| {
                let questions = questions.clone();
                async move { choose(&questions, call) }
            },
        )
        .annotations(json!({"readOnlyHint": true})),
    )
    .tool(
        Tool::new(
            "whoami",
            "Tells who the bus says is calling: a person (and the module acting for them), a module, or nobody known",
            json!({"type": "object", "additionalProperties": false}),
            |call: Call| async move {
                match &call.caller {
                    Caller::Person(a) => ToolResult::json(json!({
                        "actor": a.to_string(), "user": a.user, "account": a.account,
                        "relayed": a.via.is_some(), "via": a.via
                    })),
                    Caller::Module(m) => ToolResult::json(json!({"actor": null, "module": m})),
                    Caller::Unknown => ToolResult::json(json!({"actor": null})),
                }
            },
        )
        .annotations(json!({"readOnlyHint": true})),
    )
}

/// The key of `choose`'s one input request.
const CHOICE: &str = "choice";

fn choose(questions: &Questions, call: Call) -> ToolResult {
    let options: Vec<&str> = call
        .args
        .get("options")
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let who = call.actor().map(|a| a.to_string());
    let continuation = call.continuation.as_ref();
    let response = continuation
        .and_then(|c| c.input_responses.as_ref())
        .and_then(|r| r.get(CHOICE));
    let Some(response) = response else {
        let question = str_arg(&call, "question");
        let question = if question.is_empty() {
            "Pick one"
        } else {
            question
        };
        let schema = json!({
            "type": "object",
            "properties": {"pick": {
                "type": "string",
                "title": "Option",
                "oneOf": options.iter().map(|o| json!({"const": o, "title": o})).collect::<Vec<_>>()
            }},
            "required": ["pick"]
        });
        let mut requests = serde_json::Map::new();
        requests.insert(CHOICE.into(), ToolResult::elicitation(question, schema));
        // The options offered travel sealed: a repeated call cannot widen them.
        let state = questions
            .key
            .seal("echo_choose", who.as_deref(), json!({"options": options}));
        return ToolResult::input_required(requests, state);
    };
    let Some(state) = continuation.and_then(|c| c.request_state.as_deref()) else {
        return ToolResult::error(
            "the answer to choice came without its requestState: call echo_choose again without inputResponses",
        );
    };
    let opened = match questions.key.open(state, "echo_choose", who.as_deref()) {
        Ok(o) => o,
        Err(e) => return ToolResult::error(e.to_string()),
    };
    if let Err(e) = questions.spent.spend(&opened) {
        return ToolResult::error(e.to_string());
    }
    let offered: Vec<&str> = opened.ids["options"]
        .as_array()
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    match response.get("action").and_then(Value::as_str) {
        Some("accept") => {
            let pick = response.pointer("/content/pick").and_then(Value::as_str);
            match pick {
                Some(p) if offered.contains(&p) => ToolResult::text(format!("you chose {p}")),
                Some(p) => ToolResult::error(format!("{p:?} was not one of the options offered")),
                None => ToolResult::error("the answer carries no pick"),
            }
        }
        Some("decline") | Some("cancel") => ToolResult::text("nothing chosen"),
        _ => ToolResult::error("the answer to choice has no valid action"),
    }
}

fn str_arg<'a>(call: &'a Call, key: &str) -> &'a str {
    call.args
        .get(key)
        .and_then(Value::as_str)
        .unwrap_or_default()
}
