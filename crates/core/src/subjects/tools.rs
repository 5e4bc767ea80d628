//! The reply to a module's `tools` verb: the module and its tools as MCP `Tool` objects.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use serde_json::value::RawValue;

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
    /// MCP's `icons` (2025-11-25): images a client may show beside the tool.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub icons: Option<Value>,
    /// MCP's `_meta`: what a tool says of itself beyond its schema (`mesh/actsForPeople`).
    #[serde(rename = "_meta", default, skip_serializing_if = "Option::is_none")]
    pub meta: Option<Value>,
    /// MCP's `execution` (`{"taskSupport": "optional"}`): whether a call may run as a task
    /// (`task::TaskSupport`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub execution: Option<Value>,
}

/// A tool as discovery lists it: the object the module wrote, kept as its JSON text — schemas,
/// annotations, and whatever else MCP gives a tool (`icons`, `_meta`…) pass on without being
/// built into trees and printed again — with the fields a listing reads.
#[derive(Debug, Clone)]
pub struct ListedTool {
    pub name: String,
    pub title: Option<String>,
    pub description: String,
    raw: Box<RawValue>,
}

/// The fields of a tool a listing reads; the rest is skipped, not built.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Head<'a> {
    name: String,
    #[serde(default)]
    title: Option<String>,
    #[serde(default)]
    description: String,
    #[serde(borrow)]
    input_schema: &'a RawValue,
    #[serde(default, borrow)]
    output_schema: Option<&'a RawValue>,
}

impl ListedTool {
    /// The tool as a module declares it, its JSON written once.
    pub fn of(spec: &ToolSpec) -> ListedTool {
        ListedTool {
            name: spec.name.clone(),
            title: spec.title.clone(),
            description: spec.description.clone(),
            raw: serde_json::value::to_raw_value(spec).expect("a tool serialises"),
        }
    }

    /// A tool from its JSON text: an object with at least `name` and `inputSchema`.
    pub fn from_raw(raw: Box<RawValue>) -> Result<ListedTool, serde_json::Error> {
        let head: Head = serde_json::from_str(raw.get())?;
        let (name, title, description) = (head.name, head.title, head.description);
        Ok(ListedTool {
            name,
            title,
            description,
            raw,
        })
    }

    /// The tool's JSON, as the module wrote it.
    pub fn raw(&self) -> &RawValue {
        &self.raw
    }

    /// Whether its input schema (and output schema, if any) is a JSON object, as MCP requires.
    pub fn schemas_are_objects(&self) -> bool {
        let object = |r: &RawValue| r.get().trim_start().starts_with('{');
        serde_json::from_str::<Head>(self.raw.get())
            .is_ok_and(|h| object(h.input_schema) && h.output_schema.is_none_or(object))
    }

    /// The tool with its schemas as trees, for a reader that looks inside them.
    pub fn to_spec(&self) -> Result<ToolSpec, serde_json::Error> {
        serde_json::from_str(self.raw.get())
    }
}

impl PartialEq for ListedTool {
    fn eq(&self, other: &Self) -> bool {
        self.raw.get() == other.raw.get()
    }
}

impl Serialize for ListedTool {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.raw.serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for ListedTool {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let raw = Box::<RawValue>::deserialize(deserializer)?;
        ListedTool::from_raw(raw).map_err(serde::de::Error::custom)
    }
}

impl schemars::JsonSchema for ListedTool {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "ListedTool".into()
    }

    /// An MCP `Tool` as a module registers it: the keys MCP gives a tool, no others.
    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({
            "description": "A tool in full, as the module's tools verb answers it (an MCP Tool)",
            "type": "object",
            "properties": {
                "name": {"type": "string", "maxLength": 64},
                "title": {"type": "string"},
                "description": {"type": "string"},
                // Free-form: the catalogue checks the schemas are objects.
                "inputSchema": {"description": "a JSON Schema (an object)"},
                "outputSchema": {"description": "a JSON Schema (an object)"},
                "annotations": {"description": "MCP tool annotations"},
                "icons": {"type": "array"},
                "execution": {"description": "MCP tool execution properties"},
                "_meta": {"description": "MCP metadata"}
            },
            "required": ["name", "inputSchema"],
            "additionalProperties": false
        })
    }
}

/// A module's tools as discovery has them: its `tools` verb's reply read without parsing the
/// schemas, or the copy it registered with the catalogue — shared with the reader's cache,
/// not copied per discovery.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Listing {
    pub module: String,
    pub version: String,
    pub description: String,
    #[serde(with = "shared")]
    pub tools: std::sync::Arc<[ListedTool]>,
}

/// `Arc<[ListedTool]>` as the JSON array it is.
mod shared {
    use super::ListedTool;
    use serde::{Deserialize, Deserializer, Serialize, Serializer};
    use std::sync::Arc;

    pub fn serialize<S: Serializer>(tools: &Arc<[ListedTool]>, s: S) -> Result<S::Ok, S::Error> {
        tools[..].serialize(s)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Arc<[ListedTool]>, D::Error> {
        Vec::<ListedTool>::deserialize(d).map(Arc::from)
    }
}

/// What a module's tools are, in 32 hex digits: the first half of the SHA-256 of the tools
/// written canonically (keys in order, no spaces), so a copy that went through another
/// reader's hands (the catalogue's) has the digest of the module's own answer. Two listings
/// with the same digest hold the same tools, whoever said so: a reader checks the digest of
/// what it keeps.
pub fn tools_digest(tools: &[ListedTool]) -> String {
    use sha2::Digest;
    let mut hash = sha2::Sha256::new();
    let mut out = Vec::with_capacity(4096);
    hash.update(b"[");
    for (i, t) in tools.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        // A tool that is not JSON cannot be listed: its text stands for itself.
        match serde_json::from_str::<Value>(t.raw().get()) {
            Ok(v) => crate::canonical::write_canonical(&v, &mut out),
            Err(_) => out.extend_from_slice(t.raw().get().as_bytes()),
        }
        hash.update(&out);
        out.clear();
    }
    hash.update(b"]");
    hash.finalize()[..16]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `subjects/tools-digest-vectors.json`: the digests other languages check theirs against
    /// (`tests/it/listing.rs` has Python and JavaScript compute them by the recipe in
    /// `subjects/README.md`).
    #[test]
    fn digests_of_the_published_vectors() {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../subjects/tools-digest-vectors.json"
        );
        let file: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
        let vectors = file["vectors"].as_array().unwrap();
        assert!(vectors.len() >= 8);
        let mut wrong = Vec::new();
        for v in vectors {
            let tools: Vec<ListedTool> = serde_json::from_value(v["tools"].clone()).unwrap();
            let digest = tools_digest(&tools);
            if v["digest"] != digest.as_str() {
                wrong.push(format!("{}: {digest}", v["why"]));
            }
        }
        assert!(wrong.is_empty(), "{wrong:#?}");
    }
}
