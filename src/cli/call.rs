//! `mesh call <tool> [args]`: one call, its outcome as an exit code, and the person asked
//! whenever the tool needs input.

use std::io::IsTerminal;

use anyhow::Context;
use serde_json::Value;
use tokio::sync::watch;

use super::args::{CallArgs, ConnectArgs};
use super::arguments;
use super::input::{self, Answers};
use super::progress;
use super::{Reach, failed};
use mesh_core::client::Exit;
use mesh_core::client::{Access, CallError};
use mesh_core::subjects::ticket;
use mesh_core::subjects::{
    FullName, KEY_INPUT_RESPONSES, KEY_REQUEST_STATE, MAX_INPUT_ROUNDS, continue_with,
};

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
    let interactive = std::io::stdin().is_terminal() && std::io::stderr().is_terminal();
    let show_progress = std::io::stderr().is_terminal();
    // The tool's schema, from its module: key=value read by it, a tool the module does not
    // have named as such, arguments it refuses named in words before the call. A module
    // that does not answer leaves the call to say why.
    // Asked for a short while only: a module too busy to say leaves the call its own
    // deadline, not twice it.
    let schema = match client
        .tools(name.module(), args.timeout.min(SCHEMA_WITHIN))
        .await
    {
        Ok(reply) => match reply.tools.iter().find(|t| t.name == name.tool()) {
            Some(tool) => {
                // A tool that acts for you: the ticket is asked for before the first call.
                let acts = tool
                    .meta
                    .as_ref()
                    .and_then(|m| m.get(ticket::ACTS_FOR_PEOPLE_META))
                    .and_then(serde_json::Value::as_bool)
                    == Some(true);
                if acts && let Reach::Bus(bus) = &client {
                    bus.expect_ticket(&name);
                }
                Some(tool.input_schema.clone())
            }
            None => {
                let full: Vec<String> = reply
                    .tools
                    .iter()
                    .map(|t| format!("{}_{}", reply.module, t.name))
                    .collect();
                let near = arguments::nearest(name.as_str(), full.iter().map(String::as_str));
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
        },
        Err(_) => None,
    };
    let mut arguments = match &schema {
        Some(schema) => given.typed(schema),
        None => given.untyped(),
    };
    if let Some(schema) = &schema {
        let problems = arguments::problems(name.as_str(), schema, &arguments);
        if !problems.is_empty() {
            for p in &problems {
                eprintln!("mesh: {p}");
            }
            return Ok(Exit::Usage);
        }
    }
    for _round in 0..=MAX_INPUT_ROUNDS {
        let called = Value::Object(arguments.clone());
        let calling = async {
            if show_progress {
                // The tool's reports as a bar while it runs, cleared before anything is
                // printed or asked.
                let (reports, watched) = watch::channel(None);
                let bar = progress::follow(name.to_string(), watched);
                let result = client
                    .call_watched(&name, &called, args.timeout, &reports)
                    .await;
                drop(reports);
                let _ = bar.await;
                result
            } else {
                client.call(&name, &called, args.timeout).await
            }
        };
        // Ctrl-C gives the call up: dropped here, it tells its module (`Mesh-Cancel`), which
        // stops the tool, and the message is out before this process is.
        let called = tokio::select! {
            called = calling => called,
            _ = tokio::signal::ctrl_c() => {
                client.give_up().await;
                eprintln!("mesh: interrupted: {name} was cancelled");
                return Ok(Exit::Interrupted);
            }
        };
        let result = match called {
            Ok(r) => r,
            // Its module answered for its tools a moment ago, yet no call reaches the tool:
            // not this credential's to call, where the bus says so by silence (a leaf node
            // forwards only what its user may publish), rather than nobody serving it.
            Err(CallError::NobodyServes { .. }) if schema.is_some() => {
                return Ok(failed(&CallError::Unreached {
                    target: name.to_string(),
                    module: name.module().to_owned(),
                }));
            }
            Err(e) => return Ok(failed(&e)),
        };
        if result.needs_input() {
            let requests = result.input_requests.clone().unwrap_or_default();
            if let Some(answerer) = &answerer {
                // Another tool answers: it gets what was asked and gives the answers.
                let mut asked = arguments.clone();
                asked.remove(KEY_REQUEST_STATE);
                asked.remove(KEY_INPUT_RESPONSES);
                let question = serde_json::json!({
                    "tool": name.as_str(), "arguments": asked, "inputRequests": requests,
                });
                let answered = match client.call(answerer, &question, args.timeout).await {
                    Ok(r) if !r.is_error => r,
                    Ok(r) => {
                        eprintln!("mesh: {answerer}: {}", r.text_content());
                        return Ok(Exit::ToolError);
                    }
                    Err(e) => return Ok(failed(&e)),
                };
                let Some(Value::Object(responses)) = answered
                    .structured_content
                    .as_ref()
                    .and_then(|s| s.get(KEY_INPUT_RESPONSES))
                    .cloned()
                else {
                    eprintln!(
                        "mesh: {answerer} gave no {KEY_INPUT_RESPONSES} in its structuredContent: it does not answer other tools' questions"
                    );
                    return Ok(Exit::ToolError);
                };
                eprintln!("mesh: {answerer} answered: {}", answered.text_content());
                continue_with(&mut arguments, result.request_state.as_deref(), responses);
                continue;
            }
            // Reading the terminal blocks: off the runtime's thread (one, for a command that
            // starts soonest), so the connection keeps answering the server meanwhile.
            let asked = {
                let answers = answers.clone();
                tokio::task::spawn_blocking(move || {
                    input::respond(&requests, &answers, interactive)
                })
                .await
                .unwrap_or_else(|e| Err(format!("the form at the terminal failed: {e}")))
            };
            match asked {
                Ok(responses) => {
                    continue_with(&mut arguments, result.request_state.as_deref(), responses);
                    continue;
                }
                Err(what) => {
                    eprintln!("mesh: {name} needs input that could not be asked for:\n{what}");
                    return Ok(Exit::NeedsInput);
                }
            }
        }
        if args.json {
            println!("{}", serde_json::to_string_pretty(&result)?);
        } else if result.is_error {
            eprintln!("mesh: {name}: {}", result.text_content());
        } else {
            println!("{}", result.text_content());
        }
        return Ok(if result.is_error {
            Exit::ToolError
        } else {
            Exit::Ok
        });
    }
    eprintln!("mesh: {name} still asked for input after {MAX_INPUT_ROUNDS} rounds; stopped");
    Ok(Exit::NeedsInput)
}
