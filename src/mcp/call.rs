//! The plain `tools/call` that both transports answer without rmcp once a session is
//! initialised: how it is read (a name and arguments, nothing more) and how its answer is
//! written (as rmcp writes it for a peer before 2026-07-28).

use std::borrow::Cow;
use std::collections::HashMap;

use rmcp::model::CallToolResponse;
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use serde_json::{Map, Value};

use mesh_core::subjects::ToolResult;

use super::{Call, Relay};
use mesh_core::telemetry::{TRACEPARENT, TRACESTATE, TraceContext};

/// A request as the fast path reads it: these four keys and no other (a message that is
/// also a response, with `result` or `error`, is no JSON-RPC message: rmcp refuses it).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Request<'a> {
    #[serde(borrow)]
    jsonrpc: Cow<'a, str>,
    #[serde(borrow)]
    id: &'a RawValue,
    #[serde(borrow)]
    method: Cow<'a, str>,
    #[serde(borrow)]
    params: &'a RawValue,
}

/// A `tools/call` with a name and arguments only (and `_meta`, which the relay has no use
/// for unless it asks for progress): anything more (`requestState`, `inputResponses`, a
/// task, a `progressToken`) goes to rmcp. `_meta` is
/// read as rmcp reads it, an object: rmcp refuses a message whose `_meta` is not one.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CallParams<'a> {
    #[serde(borrow)]
    name: Cow<'a, str>,
    #[serde(default)]
    arguments: Option<Map<String, Value>>,
    #[serde(default, rename = "_meta", borrow)]
    meta: Option<HashMap<Cow<'a, str>, &'a RawValue>>,
}

/// A plain `tools/call` read from one message.
pub(crate) struct PlainCall {
    pub id: Box<RawValue>,
    pub name: String,
    pub arguments: Map<String, Value>,
    /// The W3C trace context the client sent in `_meta` (SEP-414), if one reads.
    pub trace: Option<TraceContext>,
}

impl PlainCall {
    /// The call in `message`, if it is a plain `tools/call` with an id MCP allows; `None`
    /// leaves the message to rmcp.
    pub fn read(message: &str) -> Option<PlainCall> {
        let request = serde_json::from_str::<Request>(message).ok()?;
        if request.jsonrpc != "2.0" || request.method != "tools/call" || !mcp_id(request.id) {
            return None;
        }
        let params = serde_json::from_str::<CallParams>(request.params.get()).ok()?;
        // A protocol version in `_meta` is one rmcp checks against the header, and may take
        // the request out of its session (2026-07-28): rmcp's to answer.
        // A progress token asks for notifications on the call's stream: rmcp's too.
        if params.meta.as_ref().is_some_and(|m| {
            m.contains_key("io.modelcontextprotocol/protocolVersion")
                || m.contains_key("progressToken")
        }) {
            return None;
        }
        let text = |key: &str| {
            params
                .meta
                .as_ref()
                .and_then(|m| m.get(key))
                .and_then(|raw| serde_json::from_str::<String>(raw.get()).ok())
        };
        let trace = text(TRACEPARENT)
            .and_then(|parent| TraceContext::parse(&parent, text(TRACESTATE).as_deref()));
        Some(PlainCall {
            id: request.id.to_owned(),
            name: params.name.into_owned(),
            arguments: params.arguments.unwrap_or_default(),
            trace,
        })
    }

    /// Relays the call; `asker` as for [`Relay::answer`]. `header_trace` is a trace context
    /// the transport carried (an HTTP `traceparent`), taken when `_meta` has none;
    /// `session` the MCP session it came on.
    pub async fn relay(
        self,
        relay: &Relay,
        asker: Option<(&rmcp::service::Peer<rmcp::RoleServer>, bool)>,
        header_trace: Option<TraceContext>,
        session: Option<&str>,
    ) -> (Box<RawValue>, Result<ToolResult, rmcp::ErrorData>) {
        let call = Call {
            name: &self.name,
            arguments: self.arguments,
            request_state: None,
            input_responses: None,
            trace: self.trace.or(header_trace),
            request_id: Some(self.id.get().to_owned()),
            session: session.map(str::to_owned),
        };
        let answered = relay.answer(call, asker, None, None).await;
        (self.id, answered)
    }
}

/// The JSON-RPC answer to a call, as rmcp writes it for a peer before 2026-07-28.
pub(crate) fn written(id: &RawValue, answered: Result<ToolResult, rmcp::ErrorData>) -> String {
    match answered.and_then(super::to_response) {
        Ok(CallToolResponse::Complete(mut result)) => {
            // As rmcp answers a peer before 2026-07-28: no `resultType`.
            result.result_type = None;
            answer(id, Some(result), None)
        }
        Ok(_) => answer::<()>(
            id,
            None,
            Some(rmcp::ErrorData::internal_error(
                "a result the client's protocol (before 2026-07-28) cannot carry",
                None,
            )),
        ),
        Err(e) => answer::<()>(id, None, Some(e)),
    }
}

#[derive(Serialize)]
struct Answer<'a, T: Serialize> {
    jsonrpc: &'static str,
    id: &'a RawValue,
    #[serde(skip_serializing_if = "Option::is_none")]
    result: Option<T>,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<rmcp::ErrorData>,
}

fn answer<T: Serialize>(
    id: &RawValue,
    result: Option<T>,
    error: Option<rmcp::ErrorData>,
) -> String {
    serde_json::to_string(&Answer {
        jsonrpc: "2.0",
        id,
        result,
        error,
    })
    .expect("an answer serialises")
}

/// An id MCP allows: a string or an integer (never null, a fraction, or anything else), and
/// one rmcp reads: an integer past i64 (a u64 only) is a message rmcp refuses (415 over
/// HTTP), so the fast path must leave it to rmcp rather than answer it.
fn mcp_id(id: &RawValue) -> bool {
    match serde_json::from_str::<Value>(id.get()) {
        Ok(Value::String(_)) => true,
        Ok(Value::Number(n)) => n.is_i64(),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_plain_calls_are_read() {
        let plain = r#"{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"echo_echo","arguments":{"text":"hi"}}}"#;
        let call = PlainCall::read(plain).expect("a plain call");
        assert_eq!((call.id.get(), call.name.as_str()), ("3", "echo_echo"));
        assert_eq!(call.arguments["text"], "hi");
        for other in [
            r#"{"jsonrpc":"2.0","id":null,"method":"tools/call","params":{"name":"a_b"}}"#,
            r#"{"jsonrpc":"2.0","id":1.5,"method":"tools/call","params":{"name":"a_b"}}"#,
            r#"{"jsonrpc":"2.0","id":9223372036854775808,"method":"tools/call","params":{"name":"a_b"}}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"a_b","_meta":5}}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"a_b","_meta":{"io.modelcontextprotocol/protocolVersion":"2025-11-25"}}}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{}}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"a_b","_meta":{"progressToken":7}}}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"a_b","requestState":"x"}}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"a_b"},"result":{}}"#,
            r#"{"jsonrpc":"1.0","id":1,"method":"tools/call","params":{"name":"a_b"}}"#,
        ] {
            assert!(PlainCall::read(other).is_none(), "{other}");
        }
    }
}
