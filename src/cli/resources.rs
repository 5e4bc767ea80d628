//! `mesh resources`, `mesh read URI`, `mesh prompts`, `mesh prompt NAME [key=value…]`: the
//! resources and prompts of the modules this credential may ask, through
//! `mesh_core::client::Features` (which gathers and routes them). Exit codes as `mesh call`
//! has them: a module's refusal (no such resource or prompt, a missing argument) is 1, the
//! bus's failure kinds theirs.

use std::io::Write as _;
use std::path::PathBuf;
use std::time::Duration;

use base64::Engine as _;
use mesh_bus::duration::parse_duration;
use mesh_core::client::{
    ConnectArgs, Ended, Exit, FeatureCallError, Features, ListKind, MODULE_META, converse_feature,
};
use mesh_core::subjects::features::{GetRequest, ReadRequest};

use super::input::{Answers, Terminal};
use mesh_core::table;
use serde_json::{Map, Value, json};

/// How many pages of a listing are read at most (a mesh that pages for ever is cut there).
const MAX_PAGES: usize = 1000;

#[derive(Debug, clap::Args)]
pub struct ResourcesArgs {
    /// The connection flags, given after the command (or before it)
    #[command(flatten)]
    pub connect: ConnectArgs,
    /// Print JSON for scripts: {"resources": [...], "resourceTemplates": [...]}
    #[arg(long)]
    pub json: bool,
    /// How long to wait for the catalogue and the modules (e.g. 5s, 500ms)
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    pub timeout: Duration,
}

#[derive(Debug, clap::Args)]
pub struct ReadArgs {
    /// The connection flags, given after the command (or before it)
    #[command(flatten)]
    pub connect: ConnectArgs,
    /// The resource's uri, as `mesh resources` lists it (or one a template it lists makes)
    pub uri: String,
    /// Print the whole result as JSON (binary contents stay base64)
    #[arg(long)]
    pub json: bool,
    /// Write the contents to this file (a binary resource's bytes, decoded)
    #[arg(long, short, value_name = "FILE")]
    pub output: Option<PathBuf>,
    #[arg(long, default_value = "30s", value_parser = parse_duration)]
    pub timeout: Duration,
    #[command(flatten)]
    pub asked: AnswerArgs,
}

/// Answers to what a module asks before it reads or gives a prompt, as `mesh call` takes
/// them; what is not given is asked at the terminal.
#[derive(Debug, clap::Args)]
pub struct AnswerArgs {
    /// Answer a question before it is asked: KEY=VALUE for a one-field form, KEY.FIELD=VALUE
    /// for a field of it (repeatable)
    #[arg(long = "answer", value_name = "KEY=VALUE")]
    pub answers: Vec<String>,
    /// Decline the question KEY (repeatable)
    #[arg(long = "decline", value_name = "KEY")]
    pub declines: Vec<String>,
}

#[derive(Debug, clap::Args)]
pub struct PromptsArgs {
    /// The connection flags, given after the command (or before it)
    #[command(flatten)]
    pub connect: ConnectArgs,
    /// Print JSON for scripts: {"prompts": [...]}
    #[arg(long)]
    pub json: bool,
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    pub timeout: Duration,
}

#[derive(Debug, clap::Args)]
pub struct PromptArgs {
    /// The connection flags, given after the command (or before it)
    #[command(flatten)]
    pub connect: ConnectArgs,
    /// The prompt's name, <module>_<prompt>, as `mesh prompts` lists it
    pub name: String,
    /// Its arguments, key=value (every value a string, as MCP's prompt arguments are)
    pub arguments: Vec<String>,
    /// Print the whole result as JSON
    #[arg(long)]
    pub json: bool,
    #[arg(long, default_value = "30s", value_parser = parse_duration)]
    pub timeout: Duration,
    #[command(flatten)]
    pub asked: AnswerArgs,
}

/// Who answers a read's or a prompt's questions: the `--answer`/`--decline` values, else the
/// person at the terminal.
fn terminal(asked: &AnswerArgs) -> anyhow::Result<Terminal> {
    let answers = Answers::parse(&asked.answers, &asked.declines).map_err(anyhow::Error::msg)?;
    Ok(Terminal::new(answers))
}

/// The result a read's or a prompt's rounds ended with, or how they failed, said on stderr
/// as its exit code (a question that could not be asked: waiting for input, 6).
fn answered(
    rounds: Result<Map<String, Value>, Ended<FeatureCallError, String>>,
    what: &str,
) -> Result<Map<String, Value>, Exit> {
    match rounds {
        Ok(r) => Ok(r),
        Err(Ended::Call(e)) => Err(failed(&e)),
        Err(Ended::NotAsked(asked)) => {
            eprintln!("mesh: {what} needs input that could not be asked for:\n{asked}");
            Err(Exit::NeedsInput)
        }
        Err(e @ Ended::TooManyRounds) => {
            eprintln!("mesh: {what}: {e}");
            Err(Exit::ToolError)
        }
    }
}

/// A failure said on stderr, as its exit code.
fn failed(e: &FeatureCallError) -> Exit {
    eprintln!("mesh: {e}");
    Exit::from(e.outcome())
}

/// Every page of `kind`.
async fn all(
    client: &mesh_core::client::Client,
    kind: ListKind,
    within: Duration,
) -> Result<Vec<Value>, FeatureCallError> {
    let started = std::time::Instant::now();
    let mut items = Vec::new();
    let mut cursor: Option<String> = None;
    for _ in 0..MAX_PAGES {
        let left = within.saturating_sub(started.elapsed());
        let page = client.list(kind, cursor.as_deref(), left).await?;
        items.extend(page.items);
        match page.next {
            Some(n) => cursor = Some(n),
            None => break,
        }
    }
    Ok(items)
}

fn text(v: &Value, key: &str) -> String {
    v.get(key)
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned()
}

fn module_of(v: &Value) -> String {
    v.pointer(&format!("/_meta/{}", MODULE_META.replace('/', "~1")))
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned()
}

pub async fn resources(connect: &ConnectArgs, args: ResourcesArgs) -> anyhow::Result<Exit> {
    let client = super::connect(connect).await?;
    let resources = match all(&client, ListKind::Resources, args.timeout).await {
        Ok(r) => r,
        Err(e) => return Ok(failed(&e)),
    };
    let templates = match all(&client, ListKind::Templates, args.timeout).await {
        Ok(t) => t,
        Err(e) => return Ok(failed(&e)),
    };
    if args.json {
        let out = json!({"resources": resources, "resourceTemplates": templates});
        println!("{}", serde_json::to_string_pretty(&out)?);
        return Ok(Exit::Ok);
    }
    let header = ["URI", "NAME", "TYPE", "MODULE"].map(String::from);
    let mut rows = Vec::new();
    for r in &resources {
        rows.push(vec![
            text(r, "uri"),
            text(r, "name"),
            text(r, "mimeType"),
            module_of(r),
        ]);
    }
    for t in &templates {
        rows.push(vec![
            format!("{} (template)", text(t, "uriTemplate")),
            text(t, "name"),
            text(t, "mimeType"),
            module_of(t),
        ]);
    }
    if rows.is_empty() {
        eprintln!("mesh: no module you may ask serves resources");
        return Ok(Exit::Ok);
    }
    table::print(&header, &rows, &[1], table::width(false));
    Ok(Exit::Ok)
}

pub async fn read(connect: &ConnectArgs, args: ReadArgs) -> anyhow::Result<Exit> {
    let mut terminal = terminal(&args.asked)?;
    let client = super::connect(connect).await?;
    let rounds = converse_feature(
        (None, None),
        |input_responses, request_state| {
            let request = ReadRequest {
                uri: args.uri.clone(),
                input_responses,
                request_state,
            };
            Features::read_asked(&client, request, args.timeout)
        },
        &mut terminal,
    )
    .await;
    let result = match answered(rounds, &args.uri) {
        Ok(r) => r,
        Err(exit) => return Ok(exit),
    };
    if args.json {
        println!("{}", serde_json::to_string_pretty(&Value::Object(result))?);
        return Ok(Exit::Ok);
    }
    let contents = result
        .get("contents")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let mut bytes = Vec::new();
    for c in &contents {
        if let Some(t) = c.get("text").and_then(Value::as_str) {
            bytes.extend_from_slice(t.as_bytes());
        } else if let Some(b) = c.get("blob").and_then(Value::as_str) {
            if args.output.is_none() {
                eprintln!(
                    "mesh: {} is binary ({}): write it to a file with --output FILE, or print it as JSON with --json",
                    args.uri,
                    text(c, "mimeType")
                );
                return Ok(Exit::Usage);
            }
            match base64::engine::general_purpose::STANDARD.decode(b) {
                Ok(decoded) => bytes.extend(decoded),
                Err(e) => {
                    eprintln!(
                        "mesh: the module's blob for {} is not base64: {e}",
                        args.uri
                    );
                    return Ok(Exit::ToolError);
                }
            }
        }
    }
    match &args.output {
        Some(path) => std::fs::write(path, &bytes)
            .map_err(|e| anyhow::anyhow!("cannot write {}: {e}", path.display()))?,
        None => {
            let mut out = std::io::stdout().lock();
            out.write_all(&bytes)?;
            if !bytes.ends_with(b"\n") {
                out.write_all(b"\n")?;
            }
        }
    }
    Ok(Exit::Ok)
}

pub async fn prompts(connect: &ConnectArgs, args: PromptsArgs) -> anyhow::Result<Exit> {
    let client = super::connect(connect).await?;
    let prompts = match all(&client, ListKind::Prompts, args.timeout).await {
        Ok(p) => p,
        Err(e) => return Ok(failed(&e)),
    };
    if args.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&json!({ "prompts": prompts }))?
        );
        return Ok(Exit::Ok);
    }
    if prompts.is_empty() {
        eprintln!("mesh: no module you may ask serves prompts");
        return Ok(Exit::Ok);
    }
    let header = ["PROMPT", "ARGUMENTS", "DESCRIPTION"].map(String::from);
    let mut rows = Vec::new();
    for p in &prompts {
        let arguments: Vec<String> = p
            .get("arguments")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .map(|a| {
                let required = a.get("required").and_then(Value::as_bool) == Some(true);
                format!("{}{}", text(a, "name"), if required { "" } else { "?" })
            })
            .collect();
        rows.push(vec![
            text(p, "name"),
            arguments.join(" "),
            text(p, "description"),
        ]);
    }
    table::print(&header, &rows, &[2], table::width(false));
    Ok(Exit::Ok)
}

pub async fn prompt(connect: &ConnectArgs, args: PromptArgs) -> anyhow::Result<Exit> {
    let mut arguments = Map::new();
    for pair in &args.arguments {
        let Some((k, v)) = pair.split_once('=') else {
            eprintln!("mesh: {pair:?} is not key=value: a prompt's arguments are given so");
            return Ok(Exit::Usage);
        };
        arguments.insert(k.to_owned(), Value::String(v.to_owned()));
    }
    let mut terminal = terminal(&args.asked)?;
    let client = super::connect(connect).await?;
    let rounds = converse_feature(
        (None, None),
        |input_responses, request_state| {
            let asked = GetRequest {
                arguments: Some(arguments.clone()),
                input_responses,
                request_state,
            };
            Features::prompt(&client, &args.name, asked, args.timeout)
        },
        &mut terminal,
    )
    .await;
    let result = match answered(rounds, &args.name) {
        Ok(r) => r,
        Err(exit) => return Ok(exit),
    };
    if args.json {
        println!("{}", serde_json::to_string_pretty(&Value::Object(result))?);
        return Ok(Exit::Ok);
    }
    let messages = result
        .get("messages")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    for m in &messages {
        let role = text(m, "role");
        let content = m.get("content").cloned().unwrap_or(Value::Null);
        match content.get("text").and_then(Value::as_str) {
            Some(t) if content.get("type").and_then(Value::as_str) == Some("text") => {
                println!("{role}: {t}")
            }
            // An image, a sound, an embedded resource: as the module wrote it.
            _ => println!("{role}: {}", serde_json::to_string(&content)?),
        }
    }
    Ok(Exit::Ok)
}
