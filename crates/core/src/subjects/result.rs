//! The reply to a tool call: an MCP `CallToolResult`, exactly what the MCP surface returns.

use std::fmt;

use serde::de::{MapAccess, Visitor};
use serde::{Deserialize, Deserializer, Serialize};
use serde_json::{Map, Value};

/// The `_meta` key naming what of the request a tool refused (`"requestState"`).
pub const REFUSED_META: &str = "mesh/refused";

/// One item of a result's `content`, kept as the JSON object it is, so every MCP content
/// kind (text, image, audio, resource…) passes through untouched.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Content(pub Map<String, Value>);

/// `resultType` of MCP 2026-07-28: whether the tool finished or needs input first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ResultType {
    Complete,
    InputRequired,
    /// The call was taken as a task (`task.rs`): `taskId` names it, and its result is read
    /// from the catalogue.
    Task,
}

/// An MCP `CallToolResult`. Fields the mesh does not know are kept in `extra`, so a
/// result relayed through the client reaches the surface unshaped.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ToolResult {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub content: Vec<Content>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub structured_content: Option<Value>,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub is_error: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result_type: Option<ResultType>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input_requests: Option<Map<String, Value>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_state: Option<String>,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

impl ToolResult {
    /// A finished result with one text item.
    pub fn text(text: impl Into<String>) -> Self {
        Self {
            content: vec![Content::text(text)],
            ..Self::default()
        }
    }

    /// A finished result carrying `value` as structured content and as its JSON text,
    /// so clients that read only text see the same thing.
    pub fn json(value: Value) -> Self {
        Self {
            content: vec![Content::text(value.to_string())],
            structured_content: Some(value),
            ..Self::default()
        }
    }

    /// The tool ran and said no: `isError: true` with a text saying why.
    pub fn error(text: impl Into<String>) -> Self {
        Self {
            is_error: true,
            ..Self::text(text)
        }
    }

    /// The tool needs the person first (MCP 2026-07-28 multi round trip).
    pub fn input_required(input_requests: Map<String, Value>, request_state: String) -> Self {
        Self {
            result_type: Some(ResultType::InputRequired),
            input_requests: Some(input_requests),
            request_state: Some(request_state),
            ..Self::default()
        }
    }

    /// One elicitation form, as a value of `inputRequests`.
    pub fn elicitation(message: impl Into<String>, requested_schema: Value) -> Value {
        serde_json::json!({
            "method": "elicitation/create",
            "params": {"message": message.into(), "requestedSchema": requested_schema}
        })
    }

    /// The call's `requestState` is refused (altered, expired, spent, another's): a fault of
    /// the request, not of the tool, which a relay answers as a protocol error (JSON-RPC
    /// invalid params) rather than a result for the model to read.
    pub fn refused_state(why: &impl fmt::Display) -> Self {
        Self::refused(why.to_string(), "requestState")
    }

    /// Whether this is [`ToolResult::refused_state`]'s refusal.
    pub fn refuses_state(&self) -> bool {
        self.refuses("requestState")
    }

    /// The call was typed by tools the module no longer has (`Mesh-Tools` named another
    /// digest than its own): nothing ran; the caller reads the tools again and calls again.
    pub fn tools_changed(full: &str) -> Self {
        Self::refused(
            format!(
                "{full}: the module's tools changed since the caller read them; nothing ran (read its tools again and call again)"
            ),
            "tools",
        )
    }

    /// Whether this says it is [`ToolResult::tools_changed`]'s refusal (which only the
    /// answer's `Mesh-Tools` header proves: a handler can write this body).
    pub fn refuses_tools(&self) -> bool {
        self.refuses("tools")
    }

    /// An error marked in `_meta["mesh/refused"]` as refused for `what`.
    fn refused(text: String, what: &str) -> Self {
        let mut result = Self::error(text);
        let mut meta = Map::with_capacity(1);
        meta.insert(REFUSED_META.into(), Value::String(what.into()));
        result.extra.insert("_meta".into(), Value::Object(meta));
        result
    }

    /// Whether this is an error marked refused for `what`.
    fn refuses(&self, what: &str) -> bool {
        self.is_error
            && self
                .extra
                .get("_meta")
                .and_then(|m| m.get(REFUSED_META))
                .and_then(Value::as_str)
                == Some(what)
    }

    /// The task this answer says the call was taken as, if it says so.
    pub fn taken_as_task(&self) -> Option<&str> {
        if self.result_type != Some(ResultType::Task) {
            return None;
        }
        self.extra.get("taskId").and_then(Value::as_str)
    }

    pub fn needs_input(&self) -> bool {
        self.result_type == Some(ResultType::InputRequired)
    }

    /// All text items joined by newlines: what a person at a terminal reads.
    pub fn text_content(&self) -> String {
        let texts: Vec<&str> = self.content.iter().filter_map(Content::as_text).collect();
        texts.join("\n")
    }
}

impl Content {
    pub fn text(text: impl Into<String>) -> Self {
        let mut item = Map::with_capacity(2);
        item.insert("type".into(), Value::String("text".into()));
        item.insert("text".into(), Value::String(text.into()));
        Content(item)
    }

    /// The text of a text item; `None` for other kinds.
    pub fn as_text(&self) -> Option<&str> {
        match (self.0.get("type"), self.0.get("text")) {
            (Some(Value::String(kind)), Some(Value::String(text))) if kind == "text" => Some(text),
            _ => None,
        }
    }
}

/// By hand rather than derived: `#[serde(flatten)]` buffers the whole reply before
/// reading it, which costs more than the rest of a relay.
impl<'de> Deserialize<'de> for ToolResult {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Fields;
        impl<'de> Visitor<'de> for Fields {
            type Value = ToolResult;

            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a CallToolResult object")
            }

            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<ToolResult, A::Error> {
                let mut r = ToolResult::default();
                while let Some(key) = map.next_key::<String>()? {
                    match key.as_str() {
                        "content" => r.content = map.next_value()?,
                        "structuredContent" => r.structured_content = map.next_value()?,
                        "isError" => {
                            r.is_error = map.next_value::<Option<bool>>()?.unwrap_or(false)
                        }
                        "resultType" => r.result_type = map.next_value()?,
                        "inputRequests" => r.input_requests = map.next_value()?,
                        "requestState" => r.request_state = map.next_value()?,
                        _ => {
                            let value = map.next_value()?;
                            r.extra.insert(key, value);
                        }
                    }
                }
                Ok(r)
            }
        }
        deserializer.deserialize_map(Fields)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn error_result_wire_shape() {
        let v = serde_json::to_value(ToolResult::error("no such path")).unwrap();
        assert_eq!(
            v,
            json!({"content": [{"type": "text", "text": "no such path"}], "isError": true})
        );
    }

    #[test]
    fn unknown_fields_and_content_kinds_survive_a_round_trip() {
        let wire = json!({
            "content": [{"type": "image", "data": "AA==", "mimeType": "image/png"},
                        {"type": "text", "text": "hi"}],
            "_meta": {"x": 1}
        });
        let r: ToolResult = serde_json::from_value(wire.clone()).unwrap();
        assert_eq!(r.text_content(), "hi");
        assert_eq!(serde_json::to_value(&r).unwrap(), wire);
    }

    #[test]
    fn input_required_shape() {
        let mut reqs = Map::new();
        reqs.insert(
            "k".into(),
            ToolResult::elicitation("pick", json!({"type": "object"})),
        );
        let r = ToolResult::input_required(reqs, "st".into());
        let v = serde_json::to_value(&r).unwrap();
        assert_eq!(v["resultType"], "input_required");
        assert_eq!(v["requestState"], "st");
        assert!(r.needs_input());
        assert_eq!(v["inputRequests"]["k"]["method"], "elicitation/create");
        let schema: Value = serde_json::from_str(crate::subjects::CALL_RESULT_SCHEMA).unwrap();
        let validator = jsonschema::validator_for(&schema).unwrap();
        let errors: Vec<String> = validator.iter_errors(&v).map(|e| e.to_string()).collect();
        assert!(errors.is_empty(), "{errors:?}");
    }
}
