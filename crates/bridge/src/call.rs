//! One mesh call of a bridged tool, forwarded as the server's `tools/call`: the stamped
//! caller in `_meta` (`mesh/caller`), the server's progress as the call's, the caller's
//! deadline as the bound (a call given up on is cancelled at the server), the server's
//! questions as the caller's (`input_required`, one per round trip), and the server's
//! answer passed back whole.

use mesh_core::telemetry::{self, TRACEPARENT, TRACESTATE};
use std::time::{Duration, SystemTime};
use tracing::Instrument;

use mesh_core::actor::Caller;
use mesh_core::runtime::Call;
use mesh_core::runtime::request_state::StateKey;
use mesh_core::subjects::ToolResult;
use rmcp::ServiceError;
use rmcp::model::{
    CallToolRequest, CallToolRequestParams, CancelledNotificationParam, ClientRequest,
    ElicitResult, MetaObject, RequestMetaObject, ServerResult,
};
use rmcp::service::PeerRequestOptions;
use serde_json::{Map, Value, json};
use tokio::sync::oneshot;

use crate::ask::InFlight;
use crate::server::Server;

/// The `_meta` key under which a bridged server learns who calls: `{"id": "ann@PEOPLE",
/// "person": "ann", "account": "PEOPLE"}` (and `"via": "<module>"` when a module acts for
/// the person), `{"id": "<module>", "module": "<module>"}` for a module calling as itself;
/// absent where nothing is stamped (a bus without accounts).
pub const CALLER_META: &str = "mesh/caller";

/// How long a call may take at the server, whatever the caller's deadline.
const UNBOUNDED_CALL: Duration = Duration::from_secs(3600);

/// How long after the caller's deadline the server is told the call is cancelled.
const AFTER_DEADLINE: Duration = Duration::from_millis(250);

/// How long a call cancelled at the server still counts as open there.
const SETTLE: Duration = Duration::from_millis(500);

/// What a server is told of the caller, if the bus stamped one.
pub fn caller_meta(caller: &Caller) -> Option<Value> {
    match caller {
        Caller::Unknown => None,
        Caller::Person(a) => {
            let mut m = json!({"id": caller.id(), "person": a.user, "account": a.account});
            if let Some(via) = &a.via {
                m["via"] = json!(via);
            }
            Some(m)
        }
        Caller::Module(module) => Some(json!({"id": module, "module": module})),
    }
}

/// The input request key under which an older server's question goes to the caller.
pub const QUESTION: &str = "question";

/// Forwards `call` of the mesh's tool `mesh_tool` to the server's tool `target`.
pub async fn forward(server: &Server, mesh_tool: &str, target: &str, call: Call) -> ToolResult {
    let actor = call.caller.id();
    let mut params = CallToolRequestParams::new(target.to_owned());
    // The caller's answers, with the state the mesh sealed to this caller and this tool, so
    // nobody answers for another: to a call parked on its server's question, or (2026-07-28)
    // the server's own state to send back with a new call.
    if let Some(continuation) = &call.continuation {
        if let Some(sealed) = &continuation.request_state {
            let opened = match server.key.open(sealed, mesh_tool, actor.as_deref()) {
                Ok(opened) => opened,
                Err(e) => {
                    return ToolResult::error(format!(
                        "the requestState of {mesh_tool} is refused: {e}; call it again without inputResponses"
                    ));
                }
            };
            if let Some(key) = opened.ids["p"].as_str() {
                return answered(server, mesh_tool, target, actor, key, &call).await;
            }
            params.request_state = opened.ids["s"].as_str().map(str::to_owned);
        }
        params.input_responses = continuation
            .input_responses
            .as_ref()
            .map(|r| r.iter().map(|(k, v)| (k.clone(), v.clone())).collect());
    }
    // A server just started for this caller (or started again) is waited for, within the
    // call's deadline.
    let connected = match server.current() {
        Some(c) => c,
        None => match tokio::time::timeout(left(call.deadline), server.connected()).await {
            Ok(c) => c,
            Err(_) => {
                return ToolResult::error(
                    "the MCP server is not running (it is being started); call again in a moment",
                );
            }
        },
    };
    let mut meta = RequestMetaObject(MetaObject(Map::new()));
    if let Some(who) = caller_meta(&call.caller) {
        meta.0.0.insert(CALLER_META.into(), who);
    }
    // The call to the server, a span of its own (where spans are exported) within the
    // mesh call's; its trace goes in `_meta` as MCP carries one (SEP-414), or, where no
    // spans are made, the mesh caller's is passed on.
    let span = if telemetry::exporting() {
        tracing::info_span!(
            "tools/call",
            otel.name = %format_args!("tools/call {target}"),
            otel.kind = "client",
            mcp.method.name = "tools/call",
            gen_ai.operation.name = "execute_tool",
            gen_ai.tool.name = %target,
            mesh.tool = %mesh_tool,
        )
    } else {
        tracing::Span::none()
    };
    if let Some(t) = telemetry::outgoing(&span) {
        meta.0.0.insert(TRACEPARENT.into(), t.traceparent.into());
        if let Some(state) = t.tracestate {
            meta.0.0.insert(TRACESTATE.into(), state.into());
        }
    }
    params.arguments = Some(call.args);
    let request = ClientRequest::CallToolRequest(CallToolRequest::new(params));
    // The call's own bound is an hour, whatever its callers' deadlines: a call parked on a
    // question outlives the mesh call that asked it. Each mesh call's deadline is kept in
    // `drive`.
    let options = PeerRequestOptions::with_timeout(UNBOUNDED_CALL).with_meta(meta);
    // Where the server asks questions, its calls take turns (see `ask`): this one's, waited
    // for within its deadline.
    let turn = match server.asking.turn(left(call.deadline)).await {
        Ok(turn) => turn,
        Err(e) => return ToolResult::error(e.to_string()),
    };
    // Open before it is sent: a question asked at once is this call's.
    let (id, questions) = server.asking.open(turn);
    let open = server.asking.hold(id);
    let handle = match connected
        .peer
        .send_request_with_option(request, options)
        .await
    {
        Ok(h) => h,
        Err(e) => return failed(target, e),
    };
    // rmcp names the call's progress token: the server's reports under it are the call's.
    let listening = server.listen(handle.progress_token.clone(), call.progress.clone());
    let (cancel, cancelled) = oneshot::channel::<()>();
    let (peer, request_id) = (handle.peer.clone(), handle.id.clone());
    let end = tokio::spawn(async move {
        let _listening = listening;
        // Closed when the call ends at the server, however the mesh call that made it went
        // (answered, parked, given up, dropped): a stale open call would take the next
        // question of the one call really open, or make every question ambiguous.
        let _open = open;
        tokio::select! {
            answered = handle.await_response() => Some(answered),
            // Told to, or given up: the mesh call that held it was dropped unanswered (and
            // not parked on a question), or a parked one was let go.
            _ = cancelled => {
                let why = CancelledNotificationParam::new(Some(request_id), Some("the caller gave up".into()));
                // Bounded: a server that reads its stdin no more keeps no turn for ever.
                let _ = tokio::time::timeout(SETTLE, peer.notify_cancelled(why)).await;
                // Still open a moment, holding its turn: a question the server wrote before
                // it read the cancel is refused as this call's, not taken for the next's.
                tokio::time::sleep(SETTLE).await;
                None
            }
        }
    });
    let open = InFlight {
        id,
        end,
        questions,
        cancel: Some(cancel),
    };
    drive(server, mesh_tool, target, actor, open, call.deadline)
        .instrument(span)
        .await
}

/// The caller's answer to the question of the call parked under `key`: handed to the server
/// once the call has its turn again, and the call driven on. A call with no answer its
/// caller could give is cancelled at the server: nobody's answer is made up for it.
async fn answered(
    server: &Server,
    mesh_tool: &str,
    target: &str,
    actor: Option<String>,
    key: &str,
    call: &Call,
) -> ToolResult {
    let answer = call
        .continuation
        .as_ref()
        .and_then(|c| c.input_responses.as_ref())
        .and_then(|r| r.get(QUESTION))
        .and_then(|v| serde_json::from_value::<ElicitResult>(v.clone()).ok());
    let Some(parked) = server.asking.resume(key) else {
        return ToolResult::error(format!(
            "the question of {mesh_tool} was answered already or waited too long; call it again without inputResponses"
        ));
    };
    let Some(answer) = answer else {
        // Dropped, the call is cancelled at the server.
        drop(parked);
        return ToolResult::error(format!(
            "the answer to {mesh_tool}'s question is missing from inputResponses.{QUESTION} (an ElicitResult: {{\"action\": \"accept\", \"content\": {{…}}}}, or decline, or cancel); the call was cancelled at the MCP server, call it again"
        ));
    };
    let turn = match server.asking.turn(left(call.deadline)).await {
        Ok(turn) => turn,
        Err(e) => {
            // Still parked, its answer not given: the same answer may be sent again.
            server.asking.put(key.to_owned(), parked);
            return ToolResult::error(format!("{e} (with the same requestState and answer)"));
        }
    };
    server.asking.activate(parked.call.id, turn);
    let _ = parked.answer.send(answer);
    drive(server, mesh_tool, target, actor, parked.call, call.deadline).await
}

/// Waits, within the mesh call's deadline, for the call's end at the server or its next
/// question (which parks the call and goes to the caller).
async fn drive(
    server: &Server,
    mesh_tool: &str,
    target: &str,
    actor: Option<String>,
    mut open: InFlight,
    deadline: Option<SystemTime>,
) -> ToolResult {
    let left = left(deadline);
    tokio::select! {
        ended = &mut open.end => {
            match ended {
                Ok(Some(answered)) => answer(server, mesh_tool, target, actor, answered),
                Ok(None) | Err(_) => ToolResult::error(format!("the call of {target} was cancelled at the MCP server")),
            }
        }
        Some(question) = open.questions.recv() => {
            let key: String = StateKey::random()[..16].iter().map(|b| format!("{b:02x}")).collect();
            let mut requests = Map::new();
            requests.insert(
                QUESTION.into(),
                json!({"method": "elicitation/create", "params": question.params}),
            );
            let state = server.key.seal(mesh_tool, actor.as_deref(), json!({"p": key}));
            server.asking.park(key, open, question.answer);
            ToolResult::input_required(requests, state)
        }
        () = tokio::time::sleep(left) => {
            if let Some(cancel) = open.cancel.take() {
                let _ = cancel.send(());
            }
            ToolResult::error(format!(
                "the MCP server did not answer {target} within {left:?}; the call was cancelled there"
            ))
        }
    }
}

/// What is left of a call's time: 250 ms past the caller's deadline (so the caller's own
/// timer says "slow" first), an hour at most.
fn left(deadline: Option<SystemTime>) -> Duration {
    deadline
        .map_or(UNBOUNDED_CALL, |deadline| {
            deadline
                .duration_since(SystemTime::now())
                .unwrap_or_default()
                + AFTER_DEADLINE
        })
        .min(UNBOUNDED_CALL)
}

/// The server's answer as the mesh's.
fn answer(
    server: &Server,
    mesh_tool: &str,
    target: &str,
    actor: Option<String>,
    answered: Result<ServerResult, ServiceError>,
) -> ToolResult {
    match answered {
        Ok(ServerResult::CallToolResult(result)) => {
            match serde_json::to_value(result).and_then(serde_json::from_value::<ToolResult>) {
                Ok(r) => r,
                Err(e) => ToolResult::error(format!(
                    "the MCP server's answer to {target} is no tool result the mesh can read: {e}"
                )),
            }
        }
        Ok(ServerResult::InputRequiredResult(asked)) => {
            // The server's questions go to the caller as they are; its state goes sealed.
            let requests = match serde_json::to_value(asked.input_requests.unwrap_or_default()) {
                Ok(Value::Object(r)) => r,
                _ => Map::new(),
            };
            let state = server.key.seal(
                mesh_tool,
                actor.as_deref(),
                json!({"s": asked.request_state}),
            );
            ToolResult::input_required(requests, state)
        }
        Ok(_) => ToolResult::error(format!(
            "the MCP server answered {target} with something other than a tool result (a task?), which the bridge does not follow"
        )),
        Err(ServiceError::Timeout { timeout }) => ToolResult::error(format!(
            "the MCP server did not answer {target} within {timeout:?}; the call was cancelled there"
        )),
        Err(e) => failed(target, e),
    }
}

/// A call the server refused or could not answer.
fn failed(target: &str, e: ServiceError) -> ToolResult {
    match e {
        // Said by the bridge, not the server: its answer was not read.
        ServiceError::McpError(e)
            if e.data
                .as_ref()
                .is_some_and(|d| d.get(crate::lines::UNREAD).is_some()) =>
        {
            ToolResult::error(format!(
                "the MCP server's answer to {target} was not read: {}",
                e.message
            ))
        }
        ServiceError::McpError(e) => ToolResult::error(format!(
            "the MCP server refused {target}: {} (JSON-RPC {})",
            e.message, e.code.0
        )),
        // An HTTP answer past the bound: rmcp's error comes boxed, of a type generic over its
        // HTTP client, and only its text says so. The session goes on.
        e if e.to_string().contains("exceeded the maximum size") => ToolResult::error(format!(
            "the MCP server's answer to {target} was not read: it is more than the {} MiB the bridge reads from a server (the most of a caller's results the mesh keeps); ask for less at a time",
            crate::lines::MAX_LINE / (1024 * 1024)
        )),
        e => ToolResult::error(format!(
            "the MCP server failed during {target} ({e}): it exited or broke the protocol, and is being started again"
        )),
    }
}
