//! What a module serves besides tools, on the wire: its resources, resource templates,
//! prompts and completions (MCP's), each on a subject of four or five tokens under the
//! module's own (`mesh.<module>.resources.read`, `mesh.<module>.prompts.get.<prompt>`), so
//! none can ever be a tool's (a tool's subject has exactly three) and a grant of the whole
//! module (`mesh.<module>.>`) reaches them all.
//!
//! Requests and replies are MCP's own objects as JSON (`ListResourcesResult`,
//! `ReadResourceResult`, `GetPromptResult`, `CompleteResult`, …), so a relay passes them on
//! as they are; a refusal is `{"error": {"code", "message", "data"?}}` with a JSON-RPC code,
//! which a relay answers as that error. A module says a resource changed on a subject of its
//! own outside `mesh.` ([`resource_updated_subject`]), which only it may publish.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::PREFIX;

/// The token under a module's subject for its resources.
pub const RESOURCES: &str = "resources";
/// The token under a module's subject for its prompts.
pub const PROMPTS: &str = "prompts";

/// `mesh.<module>.resources.list` (a verb): a page of the module's resources.
pub fn resources_list_subject(module: &str) -> String {
    format!("{PREFIX}.{module}.{RESOURCES}.list")
}

/// `mesh.<module>.resources.templates` (a verb): a page of its resource templates.
pub fn resource_templates_subject(module: &str) -> String {
    format!("{PREFIX}.{module}.{RESOURCES}.templates")
}

/// `mesh.<module>.resources.read` (a call, in the call log): one resource's contents.
pub fn resource_read_subject(module: &str) -> String {
    format!("{PREFIX}.{module}.{RESOURCES}.read")
}

/// `mesh.<module>.resources.complete` (a verb): completions of a resource template's
/// argument.
pub fn resource_complete_subject(module: &str) -> String {
    format!("{PREFIX}.{module}.{RESOURCES}.complete")
}

/// `mesh.<module>.prompts.list` (a verb): a page of the module's prompts.
pub fn prompts_list_subject(module: &str) -> String {
    format!("{PREFIX}.{module}.{PROMPTS}.list")
}

/// `mesh.<module>.prompts.get.<prompt>` (a call, in the call log): one prompt's messages.
/// The prompt is in the subject, so a grant may name one prompt.
pub fn prompt_get_subject(module: &str, prompt: &str) -> String {
    format!("{PREFIX}.{module}.{PROMPTS}.get.{prompt}")
}

/// `mesh.<module>.prompts.complete.<prompt>` (a verb): completions of one prompt's
/// argument, granted with the prompt.
pub fn prompt_complete_subject(module: &str, prompt: &str) -> String {
    format!("{PREFIX}.{module}.{PROMPTS}.complete.{prompt}")
}

/// The root of the subjects a module says its resources changed on. Not under
/// `mesh.<module>.`: people publish there (a grant of resources is
/// `mesh.<module>.resources.>`) and the module's queue group hears it; here only the module
/// publishes, and only a person who may read its resources may subscribe.
pub const UPDATES_PREFIX: &str = "mesh-resources";

/// `mesh-resources.<module>.updated` (published by the module, no reply): one of its
/// resources changed, `{"uri"}` ([`Updated`]).
pub fn resource_updated_subject(module: &str) -> String {
    format!("{UPDATES_PREFIX}.{module}.updated")
}

/// `mesh.<module>.resources.subscribe` (a verb, under the resources' grant): someone wants
/// to hear when `{"uri"}` changes. A module whose resources change by themselves answers
/// `{}`; the bridge subscribes at its server, which says so only for uris it was asked of.
pub fn resource_subscribe_subject(module: &str) -> String {
    format!("{PREFIX}.{module}.{RESOURCES}.subscribe")
}

/// The longest uri a subscription or an update names, in bytes: past it, refused (a uri is
/// kept per subscription and sent per update).
pub const MAX_URI: usize = 2048;

/// What a module publishes on [`resource_updated_subject`]: the uri that changed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Updated {
    pub uri: String,
}

impl Updated {
    /// The update `body` says, if it is exactly one: a JSON object of one `uri` within
    /// [`MAX_URI`]. Anything else is not acted on (anyone in `PEOPLE` can make a module's
    /// answer land on any subject there, as a reply).
    pub fn read(body: &[u8]) -> Option<Updated> {
        if body.len() > MAX_URI + 64 {
            return None;
        }
        serde_json::from_slice::<Updated>(body)
            .ok()
            .filter(|u| !u.uri.is_empty() && u.uri.len() <= MAX_URI)
    }
}

/// The name a relay gives a module's prompt, as it names tools: `<module>_<prompt>`.
pub fn prompt_full_name(module: &str, prompt: &str) -> String {
    super::full_name(module, prompt)
}

/// The subjects of a module's resources and prompts, each with whether it is a call (the
/// layout witnesses it for the call log) or a verb (listings and completions: not calls).
/// Prompts by name are covered by a `*` in their last token.
pub fn module_subjects(module: &str) -> [(String, bool); 8] {
    [
        (resources_list_subject(module), false),
        (resource_templates_subject(module), false),
        (resource_read_subject(module), true),
        (resource_complete_subject(module), false),
        (resource_subscribe_subject(module), false),
        (prompts_list_subject(module), false),
        (prompt_get_subject(module, "*"), true),
        (prompt_complete_subject(module, "*"), false),
    ]
}

/// Every subject of a module's resources (a grant `resources: [<module>]`).
pub fn resources_grant(module: &str) -> String {
    format!("{PREFIX}.{module}.{RESOURCES}.>")
}

/// What a grant of one prompt (or all, with `*`) lets a person publish: the listing, the
/// prompt and its completions.
pub fn prompt_grant(module: &str, prompt: &str) -> [String; 3] {
    [
        prompts_list_subject(module),
        prompt_get_subject(module, prompt),
        prompt_complete_subject(module, prompt),
    ]
}

/// The token the call log names a resource read by, where the layout witnesses it apart;
/// a `-` no tool's name can hold, so it is never a tool's.
pub const READ_WITNESS: &str = "resources-read";
/// The token the call log names a prompt's get by.
pub const GET_WITNESS: &str = "prompts-get";

/// A request for one page of a listing: `{}` or `{"cursor": "<the last page's nextCursor>"}`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct PageRequest {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cursor: Option<String>,
}

/// `mesh.<module>.resources.read`'s request, and on a later round of a read that asked
/// (`input_required`) the answers and the state it gave.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ReadRequest {
    pub uri: String,
    #[serde(
        rename = "inputResponses",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub input_responses: Option<Map<String, Value>>,
    #[serde(
        rename = "requestState",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub request_state: Option<String>,
}

impl ReadRequest {
    /// A first read of `uri`.
    pub fn of(uri: &str) -> ReadRequest {
        ReadRequest {
            uri: uri.to_owned(),
            input_responses: None,
            request_state: None,
        }
    }
}

/// `mesh.<module>.prompts.get.<prompt>`'s request: its arguments, strings by name, and on a
/// later round of a prompt that asked (`input_required`, as a tool asks) the answers and the
/// state it gave.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct GetRequest {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub arguments: Option<Map<String, Value>>,
    #[serde(
        rename = "inputResponses",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub input_responses: Option<Map<String, Value>>,
    #[serde(
        rename = "requestState",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub request_state: Option<String>,
}

/// A completion request, as MCP's `completion/complete` params without `ref` for a prompt
/// (its subject names it): `{"ref"?: {"type": "ref/resource", "uri"}, "argument": {"name",
/// "value"}, "context"?: {"arguments": {…}}}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CompleteRequest {
    #[serde(rename = "ref", default, skip_serializing_if = "Option::is_none")]
    pub reference: Option<Value>,
    pub argument: CompleteArgument,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context: Option<Value>,
}

/// The argument being completed and what was typed of it so far.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CompleteArgument {
    pub name: String,
    pub value: String,
}

/// JSON-RPC codes a refusal carries, as MCP uses them.
pub const CODE_INVALID_PARAMS: i64 = -32602;
pub const CODE_INTERNAL: i64 = -32603;
/// What a module answers for a method it does not serve (a listing it has none of).
pub const CODE_METHOD_NOT_FOUND: i64 = -32601;

/// A refusal: the module could not answer (no such resource or prompt, bad arguments, the
/// handler's own error). `code` is JSON-RPC's; `data` as MCP would send it (a resource not
/// found names its `uri`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, thiserror::Error)]
#[error("{message}")]
pub struct FeatureError {
    pub code: i64,
    pub message: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data: Option<Value>,
}

impl FeatureError {
    /// A resource nobody here has (SEP-2164: -32602, the uri in `data`).
    pub fn no_resource(uri: &str) -> FeatureError {
        FeatureError {
            code: CODE_INVALID_PARAMS,
            message: format!("resource not found: {uri}"),
            data: Some(serde_json::json!({ "uri": uri })),
        }
    }

    /// A prompt the module does not have.
    pub fn no_prompt(name: &str) -> FeatureError {
        FeatureError::invalid(format!("prompt not found: {name}"))
    }

    /// The request itself is wrong (a missing argument, an unreadable body).
    pub fn invalid(message: impl Into<String>) -> FeatureError {
        FeatureError {
            code: CODE_INVALID_PARAMS,
            message: message.into(),
            data: None,
        }
    }

    /// The handler failed.
    pub fn internal(message: impl Into<String>) -> FeatureError {
        FeatureError {
            code: CODE_INTERNAL,
            message: message.into(),
            data: None,
        }
    }

    /// The services protocol's code for its `Nats-Service-Error-Code` header.
    pub fn service_code(&self) -> u16 {
        match self.code {
            CODE_INVALID_PARAMS => 400,
            CODE_METHOD_NOT_FOUND => 404,
            _ => 500,
        }
    }
}

/// A reply's body when it is a refusal.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Refusal {
    pub error: FeatureError,
}

/// A reply as it reads: the MCP result, or the module's refusal.
pub fn read_reply(body: &[u8]) -> Result<Result<Map<String, Value>, FeatureError>, String> {
    let value: Map<String, Value> =
        serde_json::from_slice(body).map_err(|e| format!("not a JSON object: {e}"))?;
    match value.get("error") {
        Some(e) if value.len() == 1 => serde_json::from_value::<FeatureError>(e.clone())
            .map(Err)
            .map_err(|e| format!("an error that does not read: {e}")),
        _ => Ok(Ok(value)),
    }
}

/// Whether `uri` is one `template` (RFC 6570, the expressions MCP servers use: `{var}`,
/// `{+var}`, `{/var}`, `{?a,b}`, `{&a}`, `{#var}`) expands to, and its variables if so.
/// A simple `{var}` matches up to the next `/`, `?` or `#`; `{+var}` and `{#var}` anything.
pub fn template_match(template: &str, uri: &str) -> Option<Map<String, Value>> {
    let mut vars = Map::new();
    if match_from(template, uri, &mut vars) {
        Some(vars)
    } else {
        None
    }
}

fn match_from(template: &str, uri: &str, vars: &mut Map<String, Value>) -> bool {
    let Some(open) = template.find('{') else {
        return template == uri;
    };
    let (literal, rest) = template.split_at(open);
    let Some(uri) = uri.strip_prefix(literal) else {
        return false;
    };
    let Some(close) = rest.find('}') else {
        return rest == uri;
    };
    let expression = &rest[1..close];
    let after = &rest[close + 1..];
    let (operator, names) = match expression.chars().next() {
        Some(c @ ('+' | '#' | '/' | '?' | '&' | '.' | ';')) => (Some(c), &expression[1..]),
        _ => (None, expression),
    };
    let names: Vec<&str> = names
        .split(',')
        .map(|n| n.trim_end_matches('*'))
        .filter(|n| !n.is_empty())
        .collect();
    if matches!(operator, Some('?' | '&')) {
        // A query: whatever is left up to a fragment, as name=value pairs (any may be absent).
        let end = uri.find('#').unwrap_or(uri.len());
        let (query, remaining) = uri.split_at(end);
        let query = match (operator, query.chars().next()) {
            (_, None) => "",
            (Some('?'), Some('?')) | (Some('&'), Some('&')) => &query[1..],
            _ => return false,
        };
        for pair in query.split('&').filter(|p| !p.is_empty()) {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            if names.contains(&k) {
                vars.insert(k.to_owned(), Value::String(v.to_owned()));
            }
        }
        return match_from(after, remaining, vars);
    }
    let stops: &[char] = match operator {
        Some('+' | '#') => &[],
        _ => &['/', '?', '#'],
    };
    let prefix = match operator {
        Some(c @ ('#' | '/' | '.' | ';')) => Some(c),
        _ => None,
    };
    let uri = match prefix {
        Some(p) => match uri.strip_prefix(p) {
            Some(u) => u,
            None => return false,
        },
        None => uri,
    };
    // The shortest value that lets the rest match, then longer ones: a template is short.
    let longest = uri.find(stops).unwrap_or(uri.len());
    for end in (1..=longest).filter(|e| uri.is_char_boundary(*e)) {
        let mut tried = vars.clone();
        let value = &uri[..end];
        if let Some(first) = names.first() {
            tried.insert((*first).to_owned(), Value::String(value.to_owned()));
        }
        if match_from(after, &uri[end..], &mut tried) {
            *vars = tried;
            return true;
        }
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn subjects_have_more_tokens_than_any_tool() {
        for (subject, _) in module_subjects("files") {
            assert!(subject.split('.').count() >= 4, "{subject}");
        }
        assert_eq!(
            prompt_get_subject("everything", "simple_prompt"),
            "mesh.everything.prompts.get.simple_prompt"
        );
    }

    #[test]
    fn templates_match_what_they_expand_to() {
        let m = template_match("test://template/{id}/data", "test://template/123/data").unwrap();
        assert_eq!(m["id"], json!("123"));
        assert!(template_match("test://template/{id}/data", "test://template/1/2/data").is_none());
        assert!(template_match("test://template/{id}/data", "test://other/1/data").is_none());
        let m = template_match("file:///{+path}", "file:///a/b/c.txt").unwrap();
        assert_eq!(m["path"], json!("a/b/c.txt"));
        let m = template_match("demo://r/{id}{?q}", "demo://r/7?q=x").unwrap();
        assert_eq!((m["id"].clone(), m["q"].clone()), (json!("7"), json!("x")));
        assert!(template_match("demo://static", "demo://static").is_some());
        assert!(template_match("demo://r/{id}", "demo://r/").is_none());
    }

    #[test]
    fn a_refusal_reads_apart_from_a_result() {
        let refused = serde_json::to_vec(&Refusal {
            error: FeatureError::no_resource("x://y"),
        })
        .unwrap();
        let e = read_reply(&refused).unwrap().unwrap_err();
        assert_eq!((e.code, e.data), (-32602, Some(json!({"uri": "x://y"}))));
        let ok = read_reply(br#"{"contents": []}"#).unwrap().unwrap();
        assert!(ok.contains_key("contents"));
        assert!(read_reply(b"[]").is_err());
    }
}
