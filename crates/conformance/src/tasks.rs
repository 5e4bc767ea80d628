//! The tools the conformance suite's tasks scenarios call (SEP-2663): `slow_compute`,
//! `failing_job`, `protocol_error_job`, `confirm_delete`, `multi_input` and
//! `test_tool_with_task` and `greet`. A mesh tool's name is `<module>_<tool>`, so each is a
//! tool of the module its name begins with (`slow`'s `compute`, …), and `greet` is module
//! `greet`'s eponymous tool.
//!
//! Each works first and asks or answers after (a `yield`, a sleep): the runtime takes a call
//! offered as a task when the handler does not end on its first step, and answers one that
//! does as any call — `test_tool_with_task` asks at once, so its first round is answered
//! directly, as the composition scenario wants, and its second becomes a task.

use std::time::Duration;

use mesh_core::runtime::{Call, Module, Tool};
use mesh_core::subjects::ToolResult;
use mesh_core::subjects::task::TaskSupport;
use serde_json::{Value, json};

use crate::{answer, asks, elicit, field, text_arg};

fn schema(properties: Value) -> Value {
    json!({"type": "object", "properties": properties})
}

/// `greet`: `Hello, {name}!`, never a task.
fn greet() -> Module {
    let greet = Tool::new(
        "greet",
        "Greets `name`; answers at once",
        schema(json!({"name": {"type": "string"}})),
        |call: Call| async move {
            let name = text_arg(&call, "name").unwrap_or("World");
            ToolResult::text(format!("Hello, {name}!"))
        },
    );
    Module::new("greet", "1.0.0", "the suite's greet").tool(greet)
}

/// `slow_compute`: `seconds` of sleep, then a result naming `label`.
fn slow() -> Module {
    let compute = Tool::new(
        "compute",
        "Sleeps `seconds`, then answers; may run as a task",
        schema(json!({"seconds": {"type": "number"}, "label": {"type": "string"}})),
        |call: Call| async move {
            let seconds = call
                .args
                .get("seconds")
                .and_then(Value::as_f64)
                .unwrap_or(0.0);
            let label = text_arg(&call, "label").unwrap_or("");
            if seconds > 0.0 {
                tokio::time::sleep(Duration::from_secs_f64(seconds.min(3600.0))).await;
            }
            ToolResult::text(format!("computed {label} after {seconds} s"))
        },
    )
    .task_support(TaskSupport::Optional);
    Module::new("slow", "1.0.0", "the suite's slow_compute").tool(compute)
}

/// `failing_job`: a tool error after a second; runs only as a task.
fn failing() -> Module {
    let job = Tool::new(
        "job",
        "Fails (a tool error) after a second; runs only as a task",
        schema(json!({})),
        |_c: Call| async move {
            tokio::time::sleep(Duration::from_secs(1)).await;
            ToolResult::error("the job failed, as it always does")
        },
    )
    .task_support(TaskSupport::Required);
    Module::new("failing", "1.0.0", "the suite's failing_job").tool(job)
}

/// `protocol_error_job`: a panic, which a task reports as `failed`.
fn protocol() -> Module {
    let job = Tool::new(
        "error_job",
        "Panics after a moment: the task fails with a JSON-RPC error",
        schema(json!({})),
        |_c: Call| async move {
            tokio::time::sleep(Duration::from_millis(100)).await;
            panic!("the job broke, as it always does");
        },
    )
    .task_support(TaskSupport::Optional);
    Module::new("protocol", "1.0.0", "the suite's protocol_error_job").tool(job)
}

/// `confirm_delete`: asks to confirm once, then says what it did.
fn confirm() -> Module {
    let delete = Tool::new(
        "delete",
        "Asks to confirm deleting `filename`, then says whether it did",
        schema(json!({"filename": {"type": "string"}})),
        |call: Call| async move {
            tokio::task::yield_now().await;
            let file = call
                .args
                .get("filename")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_owned();
            match answer(&call, "confirm") {
                Some(a) if field(a, "confirm").as_deref() == Some("true") => {
                    ToolResult::text(format!("deleted {file}"))
                }
                Some(_) => ToolResult::text(format!("kept {file}")),
                None => asks(
                    vec![(
                        "confirm",
                        elicit(
                            &format!("Delete {file}?"),
                            json!({"confirm": {"type": "boolean"}}),
                            &["confirm"],
                        ),
                    )],
                    None,
                ),
            }
        },
    )
    .task_support(TaskSupport::Optional);
    Module::new("confirm", "1.0.0", "the suite's confirm_delete").tool(delete)
}

/// `multi_input`: two questions at once, done when both have answers.
fn multi() -> Module {
    let input = Tool::new(
        "input",
        "Asks two things at once, then says both answers",
        schema(json!({})),
        |call: Call| async move {
            tokio::task::yield_now().await;
            match (answer(&call, "name"), answer(&call, "confirm")) {
                (Some(n), Some(c)) => ToolResult::text(format!(
                    "name={} confirm={}",
                    field(n, "name").unwrap_or_default(),
                    field(c, "confirm").unwrap_or_default()
                )),
                _ => asks(
                    vec![
                        (
                            "name",
                            elicit("Your name?", json!({"name": {"type": "string"}}), &["name"]),
                        ),
                        (
                            "confirm",
                            elicit(
                                "Go on?",
                                json!({"confirm": {"type": "boolean"}}),
                                &["confirm"],
                            ),
                        ),
                    ],
                    None,
                ),
            }
        },
    )
    .task_support(TaskSupport::Optional);
    Module::new("multi", "1.0.0", "the suite's multi_input").tool(input)
}

/// `test_tool_with_task`: asks the user's name at once (answered directly), then greets them
/// as a task.
pub(crate) fn tool_with_task() -> Tool {
    Tool::new(
        "tool_with_task",
        "Asks a name, then greets it as a task; runs only as a task",
        schema(json!({})),
        |call: Call| async move {
            let Some(name) = answer(&call, "user_name").and_then(|a| field(a, "name")) else {
                return asks(
                    vec![(
                        "user_name",
                        elicit(
                            "What is your name?",
                            json!({"name": {"type": "string"}}),
                            &["name"],
                        ),
                    )],
                    None,
                );
            };
            tokio::time::sleep(Duration::from_millis(100)).await;
            ToolResult::text(format!("Hello, {name}!"))
        },
    )
    .task_support(TaskSupport::Required)
}

/// The modules of the tasks scenarios' tools (beside `test`, which has `tool_with_task`).
pub fn modules() -> Vec<Module> {
    vec![greet(), slow(), failing(), protocol(), confirm(), multi()]
}
