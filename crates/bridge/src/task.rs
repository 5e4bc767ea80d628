//! A call of a tool its server runs only as a task (`execution.taskSupport: "required"`):
//! made a task at the server and followed there. The bridge asks for the task (before
//! 2026-07-28 the `task` parameter of SEP-1686, at 2026-07-28 the tasks extension declared
//! in the request's `_meta`), polls `tasks/get`, says the server's status message as the
//! call's progress, and answers with the task's result (`tasks/result` before 2026-07-28,
//! inlined at 2026-07-28). A 2026-07-28 server's questions go to the caller as the mesh's
//! `input_required` (the server's task sealed in the state), and the answers back with
//! `tasks/update`. The mesh call given up (its deadline, its task cancelled in the mesh,
//! Ctrl-C) cancels the task at the server (`tasks/cancel`).
//!
//! What the mesh call is to its caller — a task of the mesh's or a call answered when done —
//! is the mesh runtime's; the bridge only follows the server's.

use std::time::{Duration, SystemTime};

use mesh_core::runtime::Call;
use mesh_core::subjects::ToolResult;
use rmcp::model::{
    ClientRequest, CustomRequest, MetaObject, ProtocolVersion, RequestMetaObject, ServerResult,
};
use rmcp::service::{Peer, PeerRequestOptions, RoleClient};
use serde_json::{Map, Value, json};

use crate::call::{CALLER_META, caller_meta};
use crate::server::Server;

/// How long a task is asked to be kept at the server.
const TTL_MS: u64 = 3_600_000;

/// How often the server is polled when it suggests nothing, and the bounds on what it may
/// suggest.
const POLL: Duration = Duration::from_millis(500);
const POLL_LEAST: Duration = Duration::from_millis(100);
const POLL_MOST: Duration = Duration::from_secs(5);

/// How long one request to the server may take.
const ASK_WITHIN: Duration = Duration::from_secs(30);

/// The keys of the sealed state: the server's task that asked, or the server's own state of
/// a call that asked before it became one.
const TASK_STATE: &str = "t";
const SERVER_STATE: &str = "s";

/// Cancels the server's task when dropped armed: the mesh call was given up.
struct CancelAtServer {
    peer: Peer<RoleClient>,
    modern: bool,
    id: String,
    armed: bool,
}

impl Drop for CancelAtServer {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        let (peer, id, modern) = (self.peer.clone(), self.id.clone(), self.modern);
        // A drop cannot wait; outside a runtime there is nobody to tell.
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            rt.spawn(async move {
                if let Err(e) = ask(&peer, modern, "tasks/cancel", json!({"taskId": id})).await {
                    tracing::debug!(task = %id, "the server's task was not cancelled: {e}");
                }
            });
        }
    }
}

/// One request to the server, its answer as JSON; at 2026-07-28 (`modern`) declaring the
/// tasks extension, which every `tasks/*` request must.
async fn ask(
    peer: &Peer<RoleClient>,
    modern: bool,
    method: &str,
    params: Value,
) -> Result<Value, String> {
    let mut meta = Map::new();
    if modern {
        declare_tasks(&mut meta);
    }
    ask_with(peer, method, params, Some(meta).filter(|m| !m.is_empty())).await
}

/// The session's own capabilities and the tasks extension, in a request's `_meta`: given
/// whole, they stand for the session's in that request.
fn declare_tasks(meta: &mut Map<String, Value>) {
    let mut declared = crate::server::capabilities();
    declared
        .extensions
        .get_or_insert_with(Default::default)
        .insert(rmcp::model::TASKS_EXTENSION_ID.to_owned(), Map::new());
    meta.insert(
        "io.modelcontextprotocol/clientCapabilities".into(),
        serde_json::to_value(declared).unwrap_or_default(),
    );
}

/// [`ask`] with `_meta` of its own: given as rmcp's request options, which it writes over
/// the session's own (its client capabilities, at 2026-07-28), where `params._meta` would be
/// written over.
async fn ask_with(
    peer: &Peer<RoleClient>,
    method: &str,
    params: Value,
    meta: Option<Map<String, Value>>,
) -> Result<Value, String> {
    let request = ClientRequest::CustomRequest(CustomRequest::new(method, Some(params)));
    let mut options = PeerRequestOptions::with_timeout(ASK_WITHIN);
    if let Some(meta) = meta {
        options = options.with_meta(RequestMetaObject(MetaObject(meta)));
    }
    let sent = async {
        peer.send_request_with_option(request, options)
            .await?
            .await_response()
            .await
    };
    let answered = tokio::time::timeout(ASK_WITHIN, sent)
        .await
        .map_err(|_| format!("the MCP server did not answer {method} within {ASK_WITHIN:?}"))?
        .map_err(|e| format!("the MCP server refused {method}: {e}"))?;
    // Whatever shape rmcp read it as, the fields are the server's: read them from its JSON.
    match answered {
        ServerResult::CustomResult(v) => Ok(v.0),
        other => serde_json::to_value(other).map_err(|e| e.to_string()),
    }
}

/// What is left of a call's time (an hour at most).
fn left(deadline: Option<SystemTime>) -> Duration {
    deadline
        .and_then(|d| d.duration_since(SystemTime::now()).ok())
        .unwrap_or(Duration::from_secs(3600))
        .min(Duration::from_secs(3600))
}

/// The result a task's JSON carries, as the mesh's.
fn result_of(value: &Value, target: &str) -> ToolResult {
    serde_json::from_value::<ToolResult>(value.clone()).unwrap_or_else(|e| {
        ToolResult::error(format!(
            "the MCP server's result of {target} is no tool result the mesh can read: {e}"
        ))
    })
}

/// Forwards `call` of the mesh's tool `mesh_tool` to the server's task-only tool `target`.
pub async fn forward(server: &Server, mesh_tool: &str, target: &str, call: Call) -> ToolResult {
    let left_at_start = left(call.deadline);
    let connected = match server.current() {
        Some(c) => c,
        None => match tokio::time::timeout(left_at_start, server.connected()).await {
            Ok(c) => c,
            Err(_) => {
                return ToolResult::error(
                    "the MCP server is not running (it is being started); call again in a moment",
                );
            }
        },
    };
    let peer = connected.peer.clone();
    let modern = peer
        .peer_info()
        .is_some_and(|i| i.protocol_version >= ProtocolVersion::V_2026_07_28);
    let actor = call.caller.id();
    // A call answering a 2026-07-28 server's questions: the task that asked (from the sealed
    // state), or the server's own state of a call that asked before it became a task.
    let (resumed, state) = match call
        .continuation
        .as_ref()
        .and_then(|c| c.request_state.as_ref())
    {
        Some(sealed) => match server.key.open(sealed, mesh_tool, actor.as_deref()) {
            Ok(opened) => (
                opened.ids[TASK_STATE].as_str().map(str::to_owned),
                opened.ids[SERVER_STATE].as_str().map(str::to_owned),
            ),
            Err(e) => {
                return ToolResult::error(format!(
                    "the requestState of {mesh_tool} is refused: {e}; call it again without inputResponses"
                ));
            }
        },
        None => (None, None),
    };
    let responses = call
        .continuation
        .as_ref()
        .and_then(|c| c.input_responses.clone());
    let (id, mut poll) = match resumed {
        Some(id) => {
            let update = json!({"taskId": id, "inputResponses": responses.unwrap_or_default()});
            if let Err(e) = ask(&peer, modern, "tasks/update", update).await {
                return ToolResult::error(e);
            }
            (id, POLL)
        }
        None => {
            let mut meta = Map::new();
            if let Some(who) = caller_meta(&call.caller) {
                meta.insert(CALLER_META.into(), who);
            }
            let mut params = json!({"name": target, "arguments": call.args});
            if modern {
                declare_tasks(&mut meta);
                if let Some(state) = state {
                    params["requestState"] = json!(state);
                }
                if let Some(responses) = responses {
                    params["inputResponses"] = Value::Object(responses);
                }
            } else {
                params["task"] = json!({"ttl": TTL_MS});
            }
            let created = match ask_with(&peer, "tools/call", params, Some(meta)).await {
                Ok(v) => v,
                Err(e) => return ToolResult::error(e),
            };
            // The task: flat at 2026-07-28, under `task` before.
            let task = if created.get("task").is_some_and(Value::is_object) {
                &created["task"]
            } else {
                &created
            };
            let Some(id) = task.get("taskId").and_then(Value::as_str) else {
                // Answered directly after all: its questions the caller's, its state sealed
                // to the caller and the tool, as any call's (call.rs).
                let mut answer = result_of(&created, target);
                if answer.needs_input() {
                    let state = answer.request_state.take();
                    answer.request_state = Some(server.key.seal(
                        mesh_tool,
                        actor.as_deref(),
                        json!({SERVER_STATE: state}),
                    ));
                }
                return answer;
            };
            let suggested = task
                .get("pollIntervalMs")
                .or_else(|| task.get("pollInterval"))
                .and_then(Value::as_u64)
                .map_or(POLL, Duration::from_millis);
            (id.to_owned(), suggested)
        }
    };
    poll = poll.clamp(POLL_LEAST, POLL_MOST);
    let mut guard = CancelAtServer {
        peer: peer.clone(),
        modern,
        id: id.clone(),
        armed: true,
    };
    let followed = follow(
        &peer,
        modern,
        &id,
        poll,
        &call,
        target,
        mesh_tool,
        actor.as_deref(),
        server,
    );
    let answer = match tokio::time::timeout(left(call.deadline), followed).await {
        Ok(answer) => answer,
        Err(_) => {
            return ToolResult::error(format!(
                "the MCP server's task for {target} did not end within the call's time; it was cancelled there"
            ));
        }
    };
    // Ended at the server (or waiting there for the caller's answers): nothing to cancel.
    guard.armed = false;
    answer
}

/// Polls the server's task `id` to its end, or to its questions.
#[allow(clippy::too_many_arguments)]
async fn follow(
    peer: &Peer<RoleClient>,
    modern: bool,
    id: &str,
    poll: Duration,
    call: &Call,
    target: &str,
    mesh_tool: &str,
    actor: Option<&str>,
    server: &Server,
) -> ToolResult {
    let mut said = String::new();
    let mut step = 0.0;
    loop {
        let got = match ask(peer, modern, "tasks/get", json!({"taskId": id})).await {
            Ok(v) => v,
            Err(e) => return ToolResult::error(e),
        };
        if let Some(message) = got.get("statusMessage").and_then(Value::as_str)
            && message != said
        {
            said = message.to_owned();
            step += 1.0;
            call.progress.report(step, None, Some(message));
        }
        match got.get("status").and_then(Value::as_str).unwrap_or("") {
            "completed" => {
                if let Some(result) = got.get("result") {
                    return result_of(result, target);
                }
                return match ask(peer, modern, "tasks/result", json!({"taskId": id})).await {
                    Ok(result) => result_of(&result, target),
                    Err(e) => ToolResult::error(e),
                };
            }
            "failed" => {
                let why = got
                    .pointer("/error/message")
                    .or_else(|| got.get("statusMessage"))
                    .and_then(Value::as_str)
                    .unwrap_or("no reason given");
                return ToolResult::error(format!(
                    "the MCP server's task for {target} failed: {why}"
                ));
            }
            "cancelled" => {
                return ToolResult::error(format!(
                    "the MCP server cancelled its task for {target}"
                ));
            }
            // A 2026-07-28 server's questions are the caller's.
            "input_required" => {
                if let Some(Value::Object(requests)) = got.get("inputRequests")
                    && !requests.is_empty()
                {
                    let state = server.key.seal(mesh_tool, actor, json!({TASK_STATE: id}));
                    return ToolResult::input_required(requests.clone(), state);
                }
                // Before 2026-07-28 the question comes on `tasks/result`'s stream, which the
                // bridge does not follow: the task waits at the server.
            }
            _ => {}
        }
        tokio::time::sleep(poll).await;
    }
}
