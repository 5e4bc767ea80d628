//! The reply to a module's `tools` verb: the module and its tools as MCP `Tool` objects.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// `{module, version, description, tools}` as `subjects/tools-reply.schema.json` fixes it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolsReply {
    pub module: String,
    pub version: String,
    pub description: String,
    pub tools: Vec<ToolSpec>,
}

/// An MCP `Tool` as a module declares it. `name` is the module's own name for the tool;
/// the full name is `<module>_<name>`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ToolSpec {
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    pub description: String,
    pub input_schema: Value,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_schema: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub annotations: Option<Value>,
}
