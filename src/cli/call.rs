//! `mesh call <tool> [args]`: one call, its outcome as an exit code, and the person asked
//! whenever the tool needs input.

use std::io::{IsTerminal, Read};

use anyhow::{Context, bail};
use serde_json::{Map, Value};

use super::args::{CallArgs, ConnectArgs};
use super::input::{self, Answers};
use super::{Reach, failed};
use mesh_core::client::Access;
use mesh_core::client::Exit;
use mesh_core::subjects::{
    FullName, KEY_INPUT_RESPONSES, KEY_REQUEST_STATE, MAX_INPUT_ROUNDS, continue_with,
};

pub async fn run(connect_args: &ConnectArgs, args: CallArgs) -> anyhow::Result<Exit> {
    let name = FullName::parse(&args.tool)?;
    let answerer = args
        .answer_with
        .as_deref()
        .map(FullName::parse)
        .transpose()
        .context("--answer-with names a tool by its full name")?;
    let mut arguments = parse_arguments(&args.args)?;
    let answers = Answers::parse(&args.answers, &args.declines).map_err(anyhow::Error::msg)?;
    let interactive = std::io::stdin().is_terminal() && std::io::stderr().is_terminal();
    let client = match Reach::new(connect_args, args.console.as_deref()).await {
        Ok(r) => r,
        Err(exit) => return Ok(exit),
    };
    for _round in 0..=MAX_INPUT_ROUNDS {
        let result = match client
            .call(&name, &Value::Object(arguments.clone()), args.timeout)
            .await
        {
            Ok(r) => r,
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

/// One JSON object, `-` for a JSON object on stdin, or `key=value` pairs whose values are
/// JSON where they parse and strings otherwise.
fn parse_arguments(args: &[String]) -> anyhow::Result<Map<String, Value>> {
    let object = |text: &str, from: &str| -> anyhow::Result<Map<String, Value>> {
        match serde_json::from_str::<Value>(text)
            .with_context(|| format!("arguments from {from} are not valid JSON"))?
        {
            Value::Object(m) => Ok(m),
            other => bail!("arguments from {from} must be a JSON object, got {other}"),
        }
    };
    match args {
        [] => Ok(Map::new()),
        [only] if only == "-" => {
            let mut text = String::new();
            std::io::stdin()
                .read_to_string(&mut text)
                .context("cannot read arguments from stdin")?;
            object(&text, "stdin")
        }
        [only] if only.trim_start().starts_with('{') => object(only, "the command line"),
        pairs => {
            let mut map = Map::new();
            for pair in pairs {
                let Some((key, raw)) = pair.split_once('=') else {
                    bail!(
                        "argument {pair:?} is not key=value (or give one JSON object, or - for stdin)"
                    );
                };
                if key.is_empty() {
                    bail!("argument {pair:?} has an empty key");
                }
                let value = serde_json::from_str(raw).unwrap_or_else(|_| Value::String(raw.into()));
                if map.insert(key.to_owned(), value).is_some() {
                    bail!("argument {key} is given twice");
                }
            }
            Ok(map)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn parse(args: &[&str]) -> anyhow::Result<Value> {
        let v: Vec<String> = args.iter().map(|s| s.to_string()).collect();
        parse_arguments(&v).map(Value::Object)
    }

    #[test]
    fn json_object_or_pairs() {
        assert_eq!(parse(&[r#"{"a": [1]}"#]).unwrap(), json!({"a": [1]}));
        assert_eq!(
            parse(&["n=5", "s=hello", "b=true", "o={\"x\":1}", "q=\"5\""]).unwrap(),
            json!({"n": 5, "s": "hello", "b": true, "o": {"x": 1}, "q": "5"})
        );
        assert_eq!(parse(&[]).unwrap(), json!({}));
    }

    #[test]
    fn bad_arguments_say_what_is_wrong() {
        let e = parse(&["{\"a\":"]).unwrap_err().to_string();
        assert!(e.contains("not valid JSON"), "{e}");
        let e = parse(&["[1]"]).unwrap_err().to_string();
        assert!(e.contains("not key=value"), "{e}");
        let e = parse(&["a=1", "a=2"]).unwrap_err().to_string();
        assert!(e.contains("given twice"), "{e}");
    }
}
