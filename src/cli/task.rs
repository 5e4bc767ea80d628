//! Tasks at the command line: `mesh call` waits on a call that became a task (its progress
//! as the bar, its questions asked at the terminal and answered with `tasks/update`), and
//! `--detach` prints its id instead; `mesh task get ID` and `mesh task cancel ID` read and
//! cancel one later, from any process of the same person. Exit codes are `mesh call`'s.

use std::time::Duration;

use serde_json::Value;
use tokio::sync::watch;

use super::args::ConnectArgs;
use super::failed;
use super::input::Terminal;
use mesh_bus::duration::parse_duration;
use mesh_core::client::{CallError, Client, Exit, TaskError};
use mesh_core::subjects::task::{self, Record, Status};
use mesh_core::subjects::{Progress, ToolResult};

#[derive(Debug, clap::Args)]
pub struct TaskArgs {
    #[command(subcommand)]
    pub what: TaskCommand,
    /// The connection flags, given after the command (or before it)
    #[command(flatten)]
    pub connect: ConnectArgs,
}

#[derive(Debug, clap::Subcommand)]
pub enum TaskCommand {
    /// Print a task's status, and its result once it has one (exit codes as `mesh call`'s)
    Get(TaskId),
    /// Cancel a task (one that ended stays as it ended)
    Cancel(TaskId),
}

#[derive(Debug, clap::Args)]
pub struct TaskId {
    /// The connection flags, given after the command (or before it)
    #[command(flatten)]
    pub connect: ConnectArgs,
    /// The task's id, as `mesh call --detach` printed it
    pub id: String,
    /// Print the task as JSON
    #[arg(long)]
    pub json: bool,
    /// How long to wait for the catalogue (e.g. 5s)
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    pub timeout: Duration,
}

/// A task verb's failure as `mesh call` says a failed call.
pub(crate) fn as_call_error(e: TaskError) -> CallError {
    match e {
        TaskError::Call(e) => e,
        e => CallError::BadReply {
            target: "the catalogue's tasks".into(),
            why: e.to_string(),
        },
    }
}

pub async fn run(connect: &ConnectArgs, args: TaskArgs) -> anyhow::Result<Exit> {
    let (TaskCommand::Get(id) | TaskCommand::Cancel(id)) = &args.what;
    let client = super::connect(&id.connect.clone().or(connect)).await?;
    let asked = match &args.what {
        TaskCommand::Get(id) => client.task_get(&id.id, id.timeout).await,
        TaskCommand::Cancel(id) => client.task_cancel(&id.id, id.timeout).await,
    };
    let record = match asked {
        Ok(r) => r,
        Err(TaskError::Unknown(why)) => {
            eprintln!("mesh: {why}");
            return Ok(Exit::Usage);
        }
        Err(e) => return Ok(failed(&as_call_error(e))),
    };
    let result = match client.task_result(&record, id.timeout).await {
        Ok(r) => r,
        Err(e) => return Ok(failed(&e)),
    };
    if id.json {
        let mut shown = serde_json::to_value(&record)?;
        if let Some(r) = &result {
            shown["result"] = serde_json::to_value(r)?;
        }
        println!("{}", serde_json::to_string_pretty(&shown)?);
    } else {
        let said = record.status_message.as_deref().unwrap_or("");
        eprintln!(
            "mesh: task {} of {}: {} {said}",
            record.id,
            record.tool,
            record.status.name()
        );
        if let Some(r) = &result {
            if r.is_error {
                eprintln!("mesh: {}: {}", record.tool, r.text_content());
            } else {
                let mut files = super::content::Files::new(&record.tool, None);
                println!("{}", super::content::printed(r, &mut files));
            }
        }
    }
    Ok(exit_of(&record, result.as_ref()))
}

/// How a task's state reads as `mesh call`'s exit: done well 0, a tool error or a failure 1,
/// waiting for input 6, still working (or cancelled) 0.
fn exit_of(record: &Record, result: Option<&ToolResult>) -> Exit {
    match (record.status, result) {
        (Status::Completed, Some(r)) if r.is_error => Exit::ToolError,
        (Status::Failed, _) => Exit::ToolError,
        (Status::InputRequired, _) => Exit::NeedsInput,
        _ => Exit::Ok,
    }
}

/// Why waiting on a task ended without a result.
pub(crate) enum Unfinished {
    Failed(CallError),
    /// Its questions could not be asked here; it waits for answers (said on stderr).
    NeedsInput,
}

impl From<CallError> for Unfinished {
    fn from(e: CallError) -> Self {
        Unfinished::Failed(e)
    }
}

/// Waits on task `id`, which a call became: its reports into `reports` (the bar), its
/// questions asked as `mesh call` asks them and answered into the task, until it ends; its
/// result then. A cancelled or failed task is a tool error saying so.
pub(crate) async fn wait(
    client: &Client,
    id: &str,
    reports: Option<&watch::Sender<Option<Progress>>>,
    terminal: &Terminal,
    within: Duration,
) -> Result<ToolResult, Unfinished> {
    let mut asked_for = None;
    loop {
        let now = client.task_get(id, within).await.map_err(as_call_error)?;
        if let (Some(reports), Some(p)) = (reports, &now.progress) {
            reports.send_replace(Some(p.clone()));
        }
        match now.status {
            Status::Completed => {
                return client.task_result(&now, within).await?.ok_or_else(|| {
                    Unfinished::Failed(CallError::BadReply {
                        target: now.tool.clone(),
                        why: "a completed task without its result".into(),
                    })
                });
            }
            Status::Failed => {
                let why = now
                    .error
                    .as_ref()
                    .and_then(|e| e.get("message"))
                    .and_then(Value::as_str)
                    .unwrap_or("no reason given")
                    .to_owned();
                return Ok(ToolResult::error(format!("task {id} failed: {why}")));
            }
            Status::Cancelled => {
                return Ok(ToolResult::error(format!("task {id} was cancelled")));
            }
            // Each set of questions asked once; the answers go into the task.
            Status::InputRequired if asked_for != now.input_requests => {
                let requests = now.input_requests.clone().unwrap_or_default();
                let responses = match terminal.respond(&requests).await {
                    Ok(r) => r,
                    Err(what) => {
                        eprintln!(
                            "mesh: task {id} needs input that could not be asked for:\n{what}\nanswer it later, or `mesh task cancel {id}`"
                        );
                        return Err(Unfinished::NeedsInput);
                    }
                };
                client
                    .task_update(id, responses, within)
                    .await
                    .map_err(as_call_error)?;
                asked_for = Some(requests);
            }
            _ => {}
        }
        tokio::time::sleep(Duration::from_millis(task::POLL_MS)).await;
    }
}
