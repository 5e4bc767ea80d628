//! `mesh call <tool> [args]`: one call, its outcome as an exit code, and the person asked
//! whenever the tool needs input.

use std::io::IsTerminal;

use anyhow::Context;
use serde_json::Value;
use tokio::sync::watch;

use super::args::{CallArgs, ConnectArgs};
use super::arguments;
use super::input::{Answers, Terminal};
use super::progress;
use super::task;
use super::{Reach, failed};
use mesh_core::client::{
    Access, Asked, Asker, CallError, Ended, Exit, NoSuchTool, TaskCall, TypedCall, converse,
};
use mesh_core::subjects::task::TaskSupport;
use mesh_core::subjects::{FullName, KEY_INPUT_RESPONSES, MAX_INPUT_ROUNDS};

/// The longest `mesh call` waits for a module to give its tools' schemas before calling.
const SCHEMA_WITHIN: std::time::Duration = std::time::Duration::from_secs(2);

pub async fn run(connect_args: &ConnectArgs, args: CallArgs) -> anyhow::Result<Exit> {
    let client = match Reach::new(connect_args, args.console.as_deref()).await {
        Ok(r) => r,
        Err(exit) => return Ok(exit),
    };
    if !args.trace {
        return call(client, args).await;
    }
    let Reach::Bus(bus) = &client else {
        unreachable!("--trace conflicts with --console");
    };
    let trace = super::trace::Trace::start(bus).await?;
    let exit = call(Reach::Bus(trace.client()), args).await;
    trace.print().await;
    exit
}

/// The call, on `client`, as the arguments say.
async fn call(client: Reach, args: CallArgs) -> anyhow::Result<Exit> {
    let name = FullName::parse(&args.tool)?;
    let answerer = args
        .answer_with
        .as_deref()
        .map(FullName::parse)
        .transpose()
        .context("--answer-with names a tool by its full name")?;
    let given = arguments::given(&args.args)?;
    let answers = Answers::parse(&args.answers, &args.declines).map_err(anyhow::Error::msg)?;
    let terminal = Terminal::new(answers);
    let show_progress = std::io::stderr().is_terminal();
    // The tool's schema: key=value read by it, a tool the module does not have named as
    // such, arguments it refuses named in words before the call. The client decides what
    // the call is typed by (what was kept, or the module asked) and whether it goes again
    // (`TypedCall`). Asked for a short while only: a module too busy to say leaves the call
    // its own deadline, not twice it.
    let within = args.timeout.min(SCHEMA_WITHIN);
    let mut typing = TypedCall::new(&client, &name, within);
    let outcome = loop {
        let typed = match typing.read().await {
            Ok(typed) => typed,
            Err(NoSuchTool { name, tools }) => {
                let near = arguments::nearest(name.as_str(), tools.iter().map(String::as_str));
                let hint = match near.as_slice() {
                    [] => format!("`mesh tools {}` lists its tools", name.module()),
                    [one] => format!("did you mean {one}?"),
                    more => format!("did you mean one of {}?", more.join(", ")),
                };
                eprintln!(
                    "mesh: module {} is running but has no tool {name}; {hint}",
                    name.module()
                );
                return Ok(Exit::Usage);
            }
        };
        let schema = typed
            .tool
            .as_ref()
            .and_then(|t| t.to_spec().ok())
            .map(|s| s.input_schema);
        // The call alone: what else is asked (the answering tool, who may call what) names
        // no tools of its own.
        let caller = typed.caller.as_ref().unwrap_or(&client);
        // Cloned: a call refused for changed tools is typed again.
        let arguments = match &schema {
            Some(schema) => given.clone().typed(schema),
            None => given.clone().untyped(),
        };
        if let Some(schema) = &schema {
            let problems = arguments::problems(name.as_str(), schema, &arguments);
            // What was kept may be behind the module: read again before it is said.
            if !problems.is_empty() && typed.from_kept {
                typing.stale();
                continue;
            }
            if !problems.is_empty() {
                for p in &problems {
                    eprintln!("mesh: {p}");
                }
                return Ok(Exit::Usage);
            }
        }
        let mut asker = Asking {
            client: &client,
            name: &name,
            answerer: answerer.as_ref(),
            terminal: &terminal,
            timeout: args.timeout,
        };
        // Offered as a task (task.rs) when asked to detach, or when the tool runs only so.
        let task_only = typed
            .tool
            .as_ref()
            .and_then(|t| t.to_spec().ok())
            .and_then(|s| s.execution)
            .is_some_and(|e| {
                TaskSupport::of_tool(&serde_json::json!({ "execution": e }))
                    == TaskSupport::Required
            });
        if task_only && matches!(&client, Reach::Console(_)) {
            eprintln!(
                "mesh: {name} runs only as a task, which mesh call does not follow through a console yet: call it on the bus (without --console)"
            );
            return Ok(Exit::Usage);
        }
        let as_task = matches!(&client, Reach::Bus(_)) && (args.detach || task_only);
        let round = |arguments: std::sync::Arc<serde_json::Map<String, Value>>| {
            let called = Value::Object((*arguments).clone());
            // A round carrying the person's answers.
            let answered = arguments.contains_key(KEY_INPUT_RESPONSES);
            let (client, caller, name, typed) = (&client, caller, &name, &typed);
            async move {
                let call_plain = async |by: &Reach| {
                    if show_progress {
                        // The tool's reports as a bar while it runs, cleared before anything
                        // is printed or asked.
                        let (reports, watched) = watch::channel(None);
                        let bar = progress::follow(name.to_string(), watched);
                        let result = by.call_watched(name, &called, args.timeout, &reports).await;
                        drop(reports);
                        let _ = bar.await;
                        result
                    } else {
                        by.call(name, &called, args.timeout).await
                    }
                };
                // As a task: made first, the call offered as it; taken, the round ends with
                // the task's marker, and the task is waited on (or its id said) below.
                let call_by = async |by: &Reach| {
                    let Reach::Bus(bus) = by else {
                        return call_plain(by).await;
                    };
                    if !as_task {
                        return call_plain(by).await;
                    }
                    let made = bus
                        .task_create(name, None, args.timeout)
                        .await
                        .map_err(task::as_call_error)?;
                    let offered = Reach::Bus(bus.offering(&made.id));
                    let answer = call_plain(&offered).await;
                    match bus.taken_or_answered(made, answer, args.timeout).await {
                        Ok(TaskCall::Taken(t)) => Ok(taken(&t.id)),
                        Ok(TaskCall::Answered(r)) => Ok(r),
                        Err(e) => Err(task::as_call_error(e)),
                    }
                };
                let calling = async {
                    match call_by(caller).await {
                        // The module's tools changed while the person answered: the answers
                        // stand, and the round goes again naming no tools (the module checks
                        // the arguments against its own) instead of the conversation
                        // starting over and the person being asked again.
                        // Only the runtime's refusal (in headers no handler writes): a round
                        // whose body alone says so ran, and is not made twice.
                        Ok(r) if answered && r.refuses_tools() && typed.tools_changed() => {
                            call_by(client).await
                        }
                        other => other,
                    }
                };
                // Ctrl-C gives the call up: dropped here, it tells its module (`Mesh-Cancel`),
                // which stops the tool, and the message is out before this process is.
                tokio::select! {
                    called = calling => match called {
                        Ok(result) => Ok(result),
                        // Told apart where every surface tells it: not this credential's to call
                        // (the bus drops it silently through a leaf node), or nobody serving.
                        Err(e) => Err(Round::Failed(client.told_apart(name, e, within).await)),
                    },
                    _ = tokio::signal::ctrl_c() => {
                        client.give_up().await;
                        Err(Round::Interrupted)
                    }
                }
            }
        };
        let outcome = converse(arguments, round, &mut asker).await;
        // What the module said of the tools the call was typed by decides what is kept, and
        // a call its runtime refused unrun for other tools is read, typed and made again
        // (once). A result that only says so in its body ran, and is not run twice.
        if typing.again(matches!(&outcome, Ok(r) if r.refuses_tools())) {
            continue;
        }
        break outcome;
    };
    let result = match outcome {
        Ok(result) if result.taken_as_task().is_some() => {
            let id = result.taken_as_task().unwrap_or_default().to_owned();
            if args.detach {
                println!("{id}");
                return Ok(Exit::Ok);
            }
            let Reach::Bus(bus) = &client else {
                unreachable!("only a call on the bus is offered as a task");
            };
            tracing::info!(task = %id, "{name} runs as a task: waiting on it");
            let (reports, watched) = watch::channel(None);
            let bar = show_progress.then(|| progress::follow(name.to_string(), watched));
            let waiting = task::wait(bus, &id, Some(&reports), &terminal, args.timeout);
            // Ctrl-C gives the task up, as it gives a call up: cancelled, and said so.
            let waited = tokio::select! {
                waited = waiting => Some(waited),
                _ = tokio::signal::ctrl_c() => None,
            };
            drop(reports);
            if let Some(bar) = bar {
                let _ = bar.await;
            }
            match waited {
                Some(Ok(result)) => result,
                Some(Err(task::Unfinished::Failed(e))) => return Ok(failed(&e)),
                Some(Err(task::Unfinished::NeedsInput)) => return Ok(Exit::NeedsInput),
                None => {
                    if let Err(e) = bus.task_cancel(&id, args.timeout).await {
                        eprintln!("mesh: task {id} could not be cancelled: {e}");
                    }
                    eprintln!("mesh: interrupted: task {id} of {name} was cancelled");
                    return Ok(Exit::Interrupted);
                }
            }
        }
        Ok(result) => {
            if args.detach {
                eprintln!(
                    "mesh: {name} answered at once, not as a task (it ran, or does not run as one)"
                );
            }
            result
        }
        Err(Ended::Call(Round::Failed(e))) => return Ok(failed(&e)),
        Err(Ended::Call(Round::Interrupted)) => {
            eprintln!("mesh: interrupted: {name} was cancelled");
            return Ok(Exit::Interrupted);
        }
        Err(Ended::NotAsked(NotAsked::Failed(e))) => return Ok(failed(&e)),
        Err(Ended::NotAsked(NotAsked::Said(exit, what))) => {
            eprintln!("mesh: {what}");
            return Ok(exit);
        }
        Err(Ended::TooManyRounds) => {
            eprintln!(
                "mesh: {name} still asked for input after {MAX_INPUT_ROUNDS} rounds; stopped"
            );
            return Ok(Exit::NeedsInput);
        }
    };
    if args.json {
        println!("{}", serde_json::to_string_pretty(&result)?);
    } else if result.is_error {
        eprintln!("mesh: {name}: {}", result.text_content());
    } else {
        // Every item said, not only the text: an image or a resource link is named.
        let mut files = super::content::Files::new(name.as_str(), args.save_to.clone());
        println!("{}", super::content::printed(&result, &mut files));
    }
    Ok(if result.is_error {
        Exit::ToolError
    } else {
        Exit::Ok
    })
}

/// The mark a round leaves when its call became task `id`.
fn taken(id: &str) -> mesh_core::subjects::ToolResult {
    let mut marker = mesh_core::subjects::ToolResult {
        result_type: Some(mesh_core::subjects::ResultType::Task),
        ..Default::default()
    };
    marker
        .extra
        .insert("taskId".into(), Value::String(id.to_owned()));
    marker
}

/// How a round of `mesh call` ended short of a result.
enum Round {
    Failed(CallError),
    Interrupted,
}

/// Why `mesh call` got no answers to a tool's questions.
enum NotAsked {
    /// The answering tool's call failed.
    Failed(CallError),
    /// Said as this, with this exit.
    Said(Exit, String),
}

/// Who answers at `mesh call`: another tool (`--answer-with`), else the `--answer` values
/// and the person at the terminal.
struct Asking<'a> {
    client: &'a Reach,
    name: &'a FullName,
    answerer: Option<&'a FullName>,
    terminal: &'a Terminal,
    timeout: std::time::Duration,
}

impl Asker for Asking<'_> {
    type Error = NotAsked;

    async fn ask(
        &mut self,
        requests: &serde_json::Map<String, Value>,
        arguments: &serde_json::Map<String, Value>,
    ) -> Result<Asked, NotAsked> {
        let name = self.name;
        if let Some(answerer) = self.answerer {
            // Another tool answers: it gets what was asked and gives the answers.
            let question = serde_json::json!({
                "tool": name.as_str(), "arguments": arguments, "inputRequests": requests,
            });
            let answered = match self.client.call(answerer, &question, self.timeout).await {
                Ok(r) if !r.is_error => r,
                Ok(r) => {
                    return Err(NotAsked::Said(
                        Exit::ToolError,
                        format!("{answerer}: {}", r.text_content()),
                    ));
                }
                Err(e) => return Err(NotAsked::Failed(e)),
            };
            let Some(Value::Object(responses)) = answered
                .structured_content
                .as_ref()
                .and_then(|s| s.get(KEY_INPUT_RESPONSES))
                .cloned()
            else {
                return Err(NotAsked::Said(
                    Exit::ToolError,
                    format!(
                        "{answerer} gave no {KEY_INPUT_RESPONSES} in its structuredContent: it does not answer other tools' questions"
                    ),
                ));
            };
            eprintln!("mesh: {answerer} answered: {}", answered.text_content());
            return Ok(Asked::Answers(responses));
        }
        let asked = self.terminal.respond(requests).await;
        asked.map(Asked::Answers).map_err(|what| {
            NotAsked::Said(
                Exit::NeedsInput,
                format!("{name} needs input that could not be asked for:\n{what}"),
            )
        })
    }
}
