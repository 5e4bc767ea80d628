//! `echo`: a module for trying the mesh out and for measuring it — it answers, fails, waits
//! and tells who called, on request.

use std::sync::Arc;
use std::time::Duration;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use mesh_core::actor::Caller;
use mesh_core::runtime::request_state::{SpentStates, StateKey};
use mesh_core::runtime::{Call, Module, NoArgs, Prompt, Resource, Tool, prompt_result};
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
        Tool::typed("echo", "Returns the text it is given", |args: Echo, _| async move {
            ToolResult::text(args.text)
        })
        .annotations(json!({"readOnlyHint": true, "idempotentHint": true, "openWorldHint": false})),
    )
    .tool(
        Tool::typed(
            "fail",
            "Always answers with a tool error carrying the given text",
            |args: Fail, _| async move {
                ToolResult::error(if args.text.is_empty() {
                    "failed on request".to_owned()
                } else {
                    args.text
                })
            },
        )
        .annotations(json!({"readOnlyHint": true})),
    )
    .tool(
        Tool::typed(
            "sleep",
            "Waits the given milliseconds (at most 60000), saying how far it has got, then answers",
            |args: Sleep, call: Call| async move {
                sleep(args.ms, &call).await;
                ToolResult::text(format!("slept {} ms", args.ms))
            },
        )
        .annotations(json!({"readOnlyHint": true})),
    )
    .tool(
        Tool::typed(
            "choose",
            "Asks the person to pick one of the given options, then answers with the pick",
            move |args: Choose, call| {
                let questions = questions.clone();
                async move { choose(&questions, args, call) }
            },
        )
        .annotations(json!({"readOnlyHint": true})),
    )
    .tool(
        Tool::typed(
            "whoami",
            "Tells who the bus says is calling: a person (and the module acting for them), a module, or nobody known",
            |_: NoArgs, call| async move { whoami(&call.caller) },
        )
        .annotations(json!({"readOnlyHint": true})),
    )
    // The mesh's own example of a resource and a prompt (`mesh read echo://readme`,
    // `mesh prompt echo_say text=hi`).
    .resource(
        Resource::text("echo://readme", "readme", "text/plain", README)
            .description("What module echo is for"),
    )
    .prompt(
        Prompt::new("say", "Asks the model to say the given text back", |p| async move {
            let text = p.arguments.get("text").and_then(Value::as_str).unwrap_or_default();
            Ok(prompt_result(
                Some("say a text back"),
                vec![("user", json!({"type": "text", "text": format!("Say exactly this and nothing else: {text}")}))],
            ))
        })
        .argument("text", "what to say", true),
    )
}

/// echo's one resource.
const README: &str = "echo answers, fails, waits and tells who called, on request: a module for trying the mesh out and for measuring it.";

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct Echo {
    /// what to send back
    text: String,
}

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct Fail {
    /// what the error says
    #[serde(default)]
    text: String,
}

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct Sleep {
    /// how long to wait, in milliseconds
    #[schemars(range(max = MAX_SLEEP_MS))]
    ms: u64,
}

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct Choose {
    /// what to choose from
    #[schemars(length(min = 1, max = 8))]
    options: Vec<String>,
    /// the question to ask
    #[serde(default = "pick_one")]
    question: String,
}

fn pick_one() -> String {
    "Pick one".into()
}

/// Who is calling, as the bus stamped it.
#[derive(Serialize, JsonSchema)]
struct Whoami {
    /// `user@ACCOUNT` of the person, or null when no person is known
    actor: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    user: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    account: Option<String>,
    /// whether a module relays the call for the person
    #[serde(skip_serializing_if = "Option::is_none")]
    relayed: Option<bool>,
    /// the module relaying it
    #[serde(skip_serializing_if = "Option::is_none")]
    via: Option<String>,
    /// the module calling as itself
    #[serde(skip_serializing_if = "Option::is_none")]
    module: Option<String>,
}

/// Sleeps `ms`, reporting the milliseconds slept (of `ms`) every quarter second to a caller
/// that listens.
async fn sleep(ms: u64, call: &Call) {
    let whole = Duration::from_millis(ms);
    if !call.progress.is_wanted() {
        tokio::time::sleep(whole).await;
        return;
    }
    let started = tokio::time::Instant::now();
    let step = Duration::from_millis(250);
    loop {
        let slept = started.elapsed().min(whole);
        call.progress.report(
            slept.as_millis() as f64,
            Some(ms as f64),
            Some(&format!("{} of {ms} ms", slept.as_millis())),
        );
        if slept >= whole {
            return;
        }
        tokio::time::sleep(step.min(whole - slept)).await;
    }
}

fn whoami(caller: &Caller) -> Result<Whoami, std::convert::Infallible> {
    let nobody = Whoami {
        actor: None,
        user: None,
        account: None,
        relayed: None,
        via: None,
        module: None,
    };
    Ok(match caller {
        Caller::Person(a) => Whoami {
            actor: Some(a.to_string()),
            user: Some(a.user.clone()),
            account: Some(a.account.clone()),
            relayed: Some(a.via.is_some()),
            via: a.via.clone(),
            ..nobody
        },
        Caller::Module(m) => Whoami {
            module: Some(m.clone()),
            ..nobody
        },
        Caller::Unknown => nobody,
    })
}

/// The key of `choose`'s one input request.
const CHOICE: &str = "choice";

fn choose(questions: &Questions, args: Choose, call: Call) -> ToolResult {
    let options = args.options;
    let who = call.actor().map(|a| a.to_string());
    let continuation = call.continuation.as_ref();
    let response = continuation
        .and_then(|c| c.input_responses.as_ref())
        .and_then(|r| r.get(CHOICE));
    let Some(response) = response else {
        let question = if args.question.is_empty() {
            pick_one()
        } else {
            args.question
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
        Err(e) => return ToolResult::refused_state(&e),
    };
    if let Err(e) = questions.spent.spend(&opened) {
        return ToolResult::refused_state(&e);
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
