//! The relay's side of MCP's tasks extension (`io.modelcontextprotocol/tasks`, SEP-2663): it
//! declares the extension, offers a call as a task when the client declared it and the tool
//! lists `execution.taskSupport` (`mesh_core::client`'s `task.rs` makes and offers it, the
//! module takes it or answers), refuses a `required` tool to a client that did not declare it
//! (-32021), and answers `tasks/get`, `tasks/update` and `tasks/cancel` from the catalogue,
//! which keeps every task: any relay of the same person reads it.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use rmcp::ErrorData as McpError;
use rmcp::RoleServer;
use rmcp::model::{
    CancelTaskParams, ClientCapabilities, CreateTaskResult, DetailedTask, GetTaskParams,
    GetTaskResult, JsonObject, ServerCapabilities, Task, TaskPayload, TaskStatus, UpdateTaskParams,
};
use rmcp::service::RequestContext;
use serde_json::Value;

use super::{Relay, live};
use crate::console::{OUTCOME_META, RETRY_AFTER_META};
use mesh_core::client::{Access, TaskError};
use mesh_core::subjects::task::{self, Record, Status, TaskSupport};
use mesh_core::subjects::{FullName, ToolResult};

/// Says the relay offers the extension (one on the bus: through a console it keeps none).
pub(crate) fn declare(capabilities: &mut ServerCapabilities) {
    capabilities
        .extensions
        .get_or_insert_with(Default::default)
        .insert(
            rmcp::model::TASKS_EXTENSION_ID.to_owned(),
            JsonObject::new(),
        );
}

/// The tools of a list that may run as tasks, read once per list (a call asks at every
/// `tools/call`, and a list may hold thousands of tools, few of them tasks).
#[derive(Default)]
pub(crate) struct Supports(Mutex<Option<(Weak<live::Tools>, Arc<SupportOf>)>>);

/// Tool name → how it may run as a task (tools that may not are left out).
type SupportOf = HashMap<String, TaskSupport>;

impl Supports {
    fn of(&self, listed: &Arc<live::Tools>) -> Arc<SupportOf> {
        let mut read = self.0.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((of, supports)) = read.as_ref()
            && of.ptr_eq(&Arc::downgrade(listed))
        {
            return supports.clone();
        }
        let supports: Arc<SupportOf> = Arc::new(
            listed
                .tools
                .iter()
                .filter_map(|t| {
                    let e = t.execution.as_ref()?;
                    let s = TaskSupport::of_tool(&serde_json::json!({ "execution": e }));
                    (s != TaskSupport::Forbidden).then(|| (t.name.to_string(), s))
                })
                .collect(),
        );
        *read = Some((Arc::downgrade(listed), supports.clone()));
        supports
    }
}

/// The task as MCP shows it.
fn task_of(r: &Record) -> Task {
    let status = match r.status {
        Status::Working => TaskStatus::Working,
        Status::InputRequired => TaskStatus::InputRequired,
        Status::Completed => TaskStatus::Completed,
        Status::Failed => TaskStatus::Failed,
        Status::Cancelled => TaskStatus::Cancelled,
    };
    let mut t = Task::new(
        r.id.clone(),
        status,
        task::iso(r.created_ms),
        task::iso(r.updated_ms),
    )
    .with_ttl_ms(r.ttl_ms)
    .with_poll_interval_ms(task::POLL_MS);
    if let Some(m) = &r.status_message {
        t = t.with_status_message(m.clone());
    }
    t
}

/// A task verb's failure as MCP says it: an id none of the caller's is `-32602`.
fn refused(e: TaskError) -> McpError {
    match e {
        TaskError::Unknown(why) => McpError::invalid_params(why, None),
        e => McpError::internal_error(e.to_string(), None),
    }
}

impl<A: Access + Clone + 'static> Relay<A> {
    /// How long a task verb may take.
    fn verb_within(&self) -> Duration {
        self.options.list_timeout
    }

    /// Whether tool `name` may run as a task, as the relay lists it.
    async fn task_support(&self, name: &str) -> TaskSupport {
        // The list itself (kept in memory where the relay follows the catalogue), not
        // `listed`, which notes every name as known: this is asked at every call.
        let Ok(listed) = self
            .live
            .tools(&self.client, self.options.list_timeout)
            .await
        else {
            return TaskSupport::Forbidden;
        };
        self.tasks
            .of(&listed)
            .get(name)
            .copied()
            .unwrap_or_default()
    }

    /// The task a call of `name` is offered as: one made now when the client declared the
    /// extension (for the session or this request) and the tool may run as a task. A tool
    /// that runs only as a task, called by a client that did not declare it, is `-32021`.
    pub(crate) async fn task_offer(
        &self,
        name: &str,
        context: &RequestContext<RoleServer>,
    ) -> Result<Option<Record>, McpError> {
        let Some(tasks) = self.client.tasks() else {
            return Ok(None);
        };
        let support = self.task_support(name).await;
        if support == TaskSupport::Forbidden {
            return Ok(None);
        }
        let declared = context
            .client_capabilities()
            .is_some_and(|c| c.supports_tasks());
        if !declared {
            if support == TaskSupport::Required {
                return Err(McpError::missing_required_client_capability(
                    ClientCapabilities::builder().enable_tasks().build(),
                ));
            }
            return Ok(None);
        }
        let Ok(tool) = FullName::parse(name) else {
            return Ok(None);
        };
        // No task to be had (no catalogue, or the caller keeps as many as they may): the call
        // is made as any call, and its answer waited for.
        match tasks.task_create(&tool, None, self.verb_within()).await {
            Ok(task) => Ok(Some(task)),
            Err(e) => {
                tracing::info!(tool = %name, "called without a task: {e}");
                Ok(None)
            }
        }
    }

    /// What an offered call's answer makes of its task: the task, when the module took it;
    /// else nothing (the answer is the call's), and the task made for it is cancelled.
    pub(crate) fn task_settled(
        &self,
        offered: Record,
        answered: Option<&ToolResult>,
    ) -> Option<CreateTaskResult> {
        if answered.and_then(|r| r.taken_as_task()) == Some(offered.id.as_str()) {
            return Some(CreateTaskResult::new(task_of(&offered)));
        }
        if let Some(tasks) = self.client.tasks() {
            let (tasks, within) = (tasks.clone(), self.verb_within());
            tokio::spawn(async move {
                if let Err(e) = tasks.task_cancel(&offered.id, within).await {
                    tracing::debug!(task = %offered.id, "an unused task was not cancelled: {e}");
                }
            });
        }
        None
    }

    /// `tasks/get`: the task as the catalogue keeps it, its result inlined once completed
    /// (fetched whole where it was large).
    pub(crate) async fn task_get(&self, request: GetTaskParams) -> Result<GetTaskResult, McpError> {
        let tasks = self.client.tasks().ok_or_else(no_tasks)?;
        let record = tasks
            .task_get(&request.task_id, self.verb_within())
            .await
            .map_err(refused)?;
        let payload = match record.status {
            Status::Working => TaskPayload::Working,
            Status::Cancelled => TaskPayload::Cancelled,
            Status::InputRequired => TaskPayload::InputRequired {
                input_requests: serde_json::from_value(Value::Object(
                    record.input_requests.clone().unwrap_or_default(),
                ))
                .map_err(|e| {
                    McpError::internal_error(format!("the task's questions do not read: {e}"), None)
                })?,
            },
            Status::Failed => TaskPayload::Failed {
                error: match &record.error {
                    Some(Value::Object(e)) => e.clone(),
                    _ => serde_json::json!({"code": -32603, "message": "the task failed"})
                        .as_object()
                        .cloned()
                        .unwrap_or_default(),
                },
            },
            Status::Completed => {
                // A large result is kept as a claim for ten minutes: past them, or where it
                // cannot be fetched, the task says so in its result.
                let result = match tasks.task_result(&record, self.options.call_timeout).await {
                    Ok(result) => result.unwrap_or_default(),
                    Err(e) => ToolResult::error(format!(
                        "task {} completed, but its result cannot be read now: {e}",
                        record.id
                    )),
                };
                let mut result = match serde_json::to_value(&result) {
                    Ok(Value::Object(r)) => r,
                    _ => JsonObject::new(),
                };
                // The failure kinds are the relay's to mark, never a module's.
                if let Some(Value::Object(meta)) = result.get_mut("_meta") {
                    meta.remove(OUTCOME_META);
                    meta.remove(RETRY_AFTER_META);
                }
                result
                    .entry("content")
                    .or_insert_with(|| Value::Array(Vec::new()));
                TaskPayload::Completed { result }
            }
        };
        Ok(GetTaskResult::new(DetailedTask::new(
            task_of(&record),
            payload,
        )))
    }

    /// `tasks/update`: the client's answers to the task's questions.
    pub(crate) async fn task_update(&self, request: UpdateTaskParams) -> Result<(), McpError> {
        let tasks = self.client.tasks().ok_or_else(no_tasks)?;
        let responses = request.input_responses.into_iter().collect();
        tasks
            .task_update(&request.task_id, responses, self.verb_within())
            .await
            .map(|_| ())
            .map_err(refused)
    }

    /// `tasks/cancel`: cancelled at once as the client sees it; the module stops at its next
    /// look (a task that ended stays as it ended).
    pub(crate) async fn task_cancel(&self, request: CancelTaskParams) -> Result<(), McpError> {
        let tasks = self.client.tasks().ok_or_else(no_tasks)?;
        tasks
            .task_cancel(&request.task_id, self.verb_within())
            .await
            .map(|_| ())
            .map_err(refused)
    }
}

/// A relay that reaches the mesh through a console keeps no tasks of its own.
fn no_tasks() -> McpError {
    McpError::internal_error(
        "this relay reaches the mesh through a console, which keeps its own tasks: ask it",
        None,
    )
}
