//! One mesh call of a bridged tool, forwarded as the server's `tools/call`: the stamped
//! caller in `_meta` (`mesh/caller`), the server's progress as the call's, the caller's
//! deadline as the bound (a call given up on is cancelled at the server), and the server's
//! answer passed back whole.

use std::time::{Duration, SystemTime};

use mesh_core::actor::Caller;
use mesh_core::runtime::Call;
use mesh_core::subjects::ToolResult;
use rmcp::ServiceError;
use rmcp::model::{
    CallToolRequest, CallToolRequestParams, ClientRequest, MetaObject, RequestMetaObject,
    ServerResult,
};
use rmcp::service::PeerRequestOptions;
use serde_json::{Map, Value, json};

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

/// Forwards `call` of the mesh's tool `mesh_tool` to the server's tool `target`.
pub async fn forward(server: &Server, mesh_tool: &str, target: &str, call: Call) -> ToolResult {
    let Some(connected) = server.current() else {
        return ToolResult::error(
            "the MCP server is not running (it exited and is being started again); call again in a moment",
        );
    };
    let mut meta = RequestMetaObject(MetaObject(Map::new()));
    if let Some(who) = caller_meta(&call.caller) {
        meta.0.0.insert(CALLER_META.into(), who);
    }
    let actor = call.caller.id();
    let mut params = CallToolRequestParams::new(target.to_owned());
    params.arguments = Some(call.args);
    // The caller's answers to the server's questions, with the server's state unsealed: the
    // mesh's seal binds it to this caller and this tool, so nobody answers for another.
    if let Some(continuation) = &call.continuation {
        if let Some(sealed) = &continuation.request_state {
            match server.key.open(sealed, mesh_tool, actor.as_deref()) {
                Ok(opened) => {
                    params.request_state = opened.ids["s"].as_str().map(str::to_owned);
                }
                Err(e) => {
                    return ToolResult::error(format!(
                        "the requestState of {mesh_tool} is refused: {e}; call it again without inputResponses"
                    ));
                }
            }
        }
        params.input_responses = continuation
            .input_responses
            .as_ref()
            .map(|r| r.iter().map(|(k, v)| (k.clone(), v.clone())).collect());
    }
    let request = ClientRequest::CallToolRequest(CallToolRequest::new(params));
    // The caller's deadline, a little later: the caller's own timer says "slow" at the
    // deadline, and then the server is told the call is cancelled (rmcp sends
    // notifications/cancelled when the bound passes). A caller that named no deadline still
    // gets an answer: one the server never sends (or too large to read) must not hold the
    // call for ever.
    let left = call
        .deadline
        .map_or(UNBOUNDED_CALL, |deadline| {
            deadline
                .duration_since(SystemTime::now())
                .unwrap_or_default()
                + AFTER_DEADLINE
        })
        // A caller's deadline is its word: a year from now holds the call no longer.
        .min(UNBOUNDED_CALL);
    let options = PeerRequestOptions::with_timeout(left).with_meta(meta);
    let handle = match connected
        .peer
        .send_request_with_option(request, options)
        .await
    {
        Ok(h) => h,
        Err(e) => return failed(target, e),
    };
    // rmcp names the call's progress token: the server's reports under it are the call's.
    let _listening = server.listen(handle.progress_token.clone(), call.progress.clone());
    match handle.await_response().await {
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
        ServiceError::McpError(e) => ToolResult::error(format!(
            "the MCP server refused {target}: {} (JSON-RPC {})",
            e.message, e.code.0
        )),
        e => ToolResult::error(format!(
            "the MCP server failed during {target} ({e}): it exited or broke the protocol, and is being started again"
        )),
    }
}
