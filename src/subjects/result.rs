//! The reply to a tool call: an MCP `CallToolResult`, exactly what the MCP surface returns.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// One item of a result's `content`. Text is what the mesh produces; other MCP content
/// kinds pass through untouched in `Other`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Content {
    Text {
        #[serde(rename = "type")]
        kind: TextKind,
        text: String,
    },
    Other(Map<String, Value>),
}

/// The literal `"text"` tag of a text content item.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TextKind {
    Text,
}

/// `resultType` of MCP 2026-07-28: whether the tool finished or needs input first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ResultType {
    Complete,
    InputRequired,
}

/// An MCP `CallToolResult`. Fields the mesh does not know are kept in `extra`, so a
/// result relayed through the client reaches the surface unshaped.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
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

    pub fn needs_input(&self) -> bool {
        self.result_type == Some(ResultType::InputRequired)
    }

    /// All text items joined by newlines: what a person at a terminal reads.
    pub fn text_content(&self) -> String {
        let texts: Vec<&str> = self
            .content
            .iter()
            .filter_map(|c| match c {
                Content::Text { text, .. } => Some(text.as_str()),
                Content::Other(_) => None,
            })
            .collect();
        texts.join("\n")
    }
}

impl Content {
    pub fn text(text: impl Into<String>) -> Self {
        Content::Text {
            kind: TextKind::Text,
            text: text.into(),
        }
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
            json!({"message": "pick", "requestedSchema": {}}),
        );
        let r = ToolResult::input_required(reqs, "st".into());
        let v = serde_json::to_value(&r).unwrap();
        assert_eq!(v["resultType"], "input_required");
        assert_eq!(v["requestState"], "st");
        assert!(r.needs_input());
    }
}
