//! Calling a tool as a task (MCP's tasks extension), once, for every surface: the catalogue
//! makes the task for the caller nats-server stamps (`mesh.catalog.task.create`), the call is
//! offered as it (`Mesh-Task`), and the module either takes it — its answer says so, and the
//! task's state is the catalogue's from then on — or answers it as any call. Reading,
//! answering and cancelling a task are the catalogue's verbs, which only its owner may ask.

use std::time::{Duration, Instant};

use serde_json::{Map, Value};

use super::{CallError, Client};
use crate::subjects::task::{self, Asked, Create, Record, Reply, Status, Update};
use crate::subjects::{FullName, ToolResult, claim};

/// How a task verb failed.
#[derive(Debug, thiserror::Error)]
pub enum TaskError {
    /// The verb could not be asked (no catalogue, denied, slow, …).
    #[error(transparent)]
    Call(#[from] CallError),
    /// No task of the caller's has that id: none was made, it expired, or it is another's.
    #[error("{0}")]
    Unknown(String),
    /// The catalogue refused (a bound reached, a request it cannot read, its bucket away).
    #[error("the catalogue refused: {0}")]
    Refused(String),
    #[error("the catalogue's answer does not read: {0}")]
    BadReply(String),
}

/// What became of a call offered as a task.
// Unboxed: one is made per call offered as a task and read at once; a box buys nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Debug)]
pub enum TaskCall {
    /// The module took it: read it with [`Client::task_get`].
    Taken(Record),
    /// The module answered at once (a tool that ended on its first step, or a module that
    /// knows no tasks); the task made for it was cancelled.
    Answered(ToolResult),
}

impl Client {
    /// The same client, its tool calls offered as task `id` (`Mesh-Task`).
    pub fn offering(&self, id: &str) -> Client {
        Client {
            offered_task: Some(id.into()),
            ..self.clone()
        }
    }

    /// One task verb: its answer's task, or why not.
    async fn task_verb(
        &self,
        subject: &str,
        body: Vec<u8>,
        deadline: Duration,
    ) -> Result<Record, TaskError> {
        let target = format!("the catalogue's tasks ({subject})");
        let msg = self.request(&target, subject, body, deadline).await?;
        let reply: Reply =
            serde_json::from_slice(&msg.payload).map_err(|e| TaskError::BadReply(e.to_string()))?;
        match reply {
            Reply {
                task: Some(task), ..
            } => Ok(task),
            Reply {
                unknown: true,
                error,
                ..
            } => Err(TaskError::Unknown(
                error.unwrap_or_else(|| "no such task".into()),
            )),
            Reply { error, .. } => Err(TaskError::Refused(
                error.unwrap_or_else(|| "it said nothing".into()),
            )),
        }
    }

    /// Makes a task for a call of `tool`, kept `ttl` (the catalogue's most when none).
    pub async fn task_create(
        &self,
        tool: &FullName,
        ttl: Option<Duration>,
        deadline: Duration,
    ) -> Result<Record, TaskError> {
        let body = serde_json::to_vec(&Create {
            tool: tool.to_string(),
            ttl_ms: ttl.map(|t| t.as_millis() as u64),
        })
        .expect("a request serialises");
        self.task_verb(task::CREATE_SUBJECT, body, deadline).await
    }

    /// Task `id` as it is now.
    pub async fn task_get(&self, id: &str, deadline: Duration) -> Result<Record, TaskError> {
        let body = serde_json::to_vec(&Asked { id: id.to_owned() }).expect("serialises");
        self.task_verb(task::GET_SUBJECT, body, deadline).await
    }

    /// Cancels task `id` (one that ended stays as it ended).
    pub async fn task_cancel(&self, id: &str, deadline: Duration) -> Result<Record, TaskError> {
        let body = serde_json::to_vec(&Asked { id: id.to_owned() }).expect("serialises");
        self.task_verb(task::CANCEL_SUBJECT, body, deadline).await
    }

    /// Answers task `id`'s questions (`inputResponses`, keyed like its `inputRequests`).
    pub async fn task_update(
        &self,
        id: &str,
        responses: Map<String, Value>,
        deadline: Duration,
    ) -> Result<Record, TaskError> {
        let body = serde_json::to_vec(&Update {
            id: id.to_owned(),
            input_responses: responses,
        })
        .expect("serialises");
        self.task_verb(task::UPDATE_SUBJECT, body, deadline).await
    }

    /// Calls `tool` offered as a task: made first (so that it can be read as soon as the
    /// module says it took it), then the call. A call answered at once is the answer, and
    /// its unused task is cancelled.
    pub async fn call_as_task(
        &self,
        tool: &FullName,
        args: &Value,
        deadline: Duration,
    ) -> Result<TaskCall, TaskError> {
        let task = self.task_create(tool, None, deadline).await?;
        let answer = self.offering(&task.id).call(tool, args, deadline).await;
        self.taken_or_answered(task, answer, deadline).await
    }

    /// What an offered call's `answer` says of `task`: taken, or answered (the task then
    /// cancelled, so it is not left working).
    pub async fn taken_or_answered(
        &self,
        task: Record,
        answer: Result<ToolResult, CallError>,
        deadline: Duration,
    ) -> Result<TaskCall, TaskError> {
        if let Ok(result) = &answer
            && result.taken_as_task() == Some(task.id.as_str())
        {
            return Ok(TaskCall::Taken(task));
        }
        if let Err(e) = self.task_cancel(&task.id, deadline).await {
            tracing::debug!(task = %task.id, "an unused task was not cancelled: {e}");
        }
        Ok(TaskCall::Answered(answer?))
    }

    /// A completed task's result, fetched whole where the module kept it as a claim.
    pub async fn task_result(
        &self,
        task: &Record,
        deadline: Duration,
    ) -> Result<Option<ToolResult>, CallError> {
        if task.status != Status::Completed {
            return Ok(None);
        }
        let Some(value) = &task.result else {
            return Ok(None);
        };
        let tool = FullName::parse(&task.tool).map_err(|e| CallError::BadReply {
            target: task.tool.clone(),
            why: e.to_string(),
        })?;
        let result: ToolResult =
            serde_json::from_value(value.clone()).map_err(|e| CallError::BadReply {
                target: task.tool.clone(),
                why: format!("the task's result is not a CallToolResult: {e}"),
            })?;
        let claimed = result
            .extra
            .get("_meta")
            .and_then(|m| m.get(claim::CLAIM_META))
            .is_some();
        if !claimed {
            return Ok(Some(result));
        }
        Box::pin(self.fetch_claimed(&tool, &result, Instant::now(), deadline))
            .await
            .map(Some)
    }
}
