//! The wire contract in code: names, subjects, headers and reserved keys, kept in step with `subjects/`.

use std::fmt;

pub mod calllog;
pub mod catalog;
pub mod claim;
pub mod features;
pub mod limits;
pub mod progress;
mod result;
pub mod task;
pub mod ticket;
mod tools;

pub use progress::{HEADER_PROGRESS, PROGRESS_PREFIX, Progress};
pub use result::{Content, ResultType, ToolResult};
pub use tools::{ListedTool, Listing, ToolSpec, ToolsReply, tools_digest};

/// The account people live in (the accounts layout).
pub const PEOPLE_ACCOUNT: &str = "PEOPLE";

/// Every mesh subject starts here.
pub const PREFIX: &str = "mesh";
/// The verb a module answers with its tool list; no tool may take this name.
pub const TOOLS_VERB: &str = "tools";
/// A tool's twin subject for modules acting for a person: `mesh-obo.<module>.<tool>`. It
/// lies outside `mesh.>` so that no grant of tools reaches it by accident.
pub const OBO_PREFIX: &str = "mesh-obo";
/// Each module's account is named `MODULE_<module>` in the accounts layout; a stamped
/// `Nats-Request-Info` whose `acc` has this prefix came from that module.
pub const MODULE_ACCOUNT_PREFIX: &str = "MODULE_";

/// Stamped by nats-server on requests crossing a `share: true` import.
pub const HEADER_REQUEST_INFO: &str = "Nats-Request-Info";
/// A module acting for a person names them here; counted only on `mesh-obo` subjects.
pub const HEADER_ON_BEHALF_OF: &str = "Mesh-On-Behalf-Of";
/// When the caller stops waiting, in milliseconds since the Unix epoch.
pub const HEADER_DEADLINE: &str = "Mesh-Deadline";
/// A call's own id, chosen by its caller (1 to 64 of `[A-Za-z0-9_-]`): what a cancel names.
pub const HEADER_CALL: &str = "Mesh-Call";
/// On a message to a module's cancel verb (`mesh.<module>.cancel`, or its `mesh-obo` twin
/// for a call made there): the caller gives up on its call of this id. Every instance hears
/// it; the one running the call takes it only from the caller stamped on that call.
pub const HEADER_CANCEL: &str = "Mesh-Cancel";
/// The verb every instance of a module hears a caller's cancel on (no tool may be named so).
pub const CANCEL_VERB: &str = "cancel";

/// `mesh.<module>.cancel`.
pub fn cancel_subject(module: &str) -> String {
    format!("{PREFIX}.{module}.{CANCEL_VERB}")
}

/// `mesh-obo.<module>.cancel`: where a module acting for a person cancels a call it made
/// on the `mesh-obo` twin.
pub fn obo_cancel_subject(module: &str) -> String {
    format!("{OBO_PREFIX}.{module}.{CANCEL_VERB}")
}
/// On the answer to a call nats-server traces (`Nats-Trace-Dest`): the module's own time,
/// as HTTP's `Server-Timing` writes it (`run;dur=<milliseconds>`).
pub const HEADER_TIMING: &str = "Mesh-Timing";
/// nats-server's message trace header (2.11+); a call carrying it is answered with timing.
pub const HEADER_TRACE_DEST: &str = "Nats-Trace-Dest";
/// On a call: the digest ([`tools_digest`]) of the tools its caller typed the arguments by.
/// A module whose tools have another digest refuses the call without running it
/// ([`ToolResult::tools_changed`]); one whose tools have it runs the call and says the digest
/// again on its answer, so the caller knows its copy of the schemas was checked.
pub const HEADER_TOOLS: &str = "Mesh-Tools";
/// NATS services protocol error headers, set on every `isError: true` reply.
pub const HEADER_SERVICE_ERROR: &str = "Nats-Service-Error";
pub const HEADER_SERVICE_ERROR_CODE: &str = "Nats-Service-Error-Code";

/// A text as a header value ([`HEADER_SERVICE_ERROR`]'s): one line, at most 256 characters,
/// never empty.
pub fn header_line(text: &str) -> String {
    let line: String = text
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .take(256)
        .collect();
    if line.is_empty() {
        "tool error".into()
    } else {
        line
    }
}

/// Reserved top-level argument keys carrying a multi-round-trip continuation.
pub const KEY_REQUEST_STATE: &str = "requestState";
pub const KEY_INPUT_RESPONSES: &str = "inputResponses";
pub const RESERVED_KEYS: [&str; 2] = [KEY_REQUEST_STATE, KEY_INPUT_RESPONSES];

/// Sets a call's arguments up to continue after `input_required`: the answers and the state
/// the result carried (or none). The one place the reserved keys are put back.
pub fn continue_with(
    arguments: &mut serde_json::Map<String, serde_json::Value>,
    request_state: Option<&str>,
    responses: serde_json::Map<String, serde_json::Value>,
) {
    match request_state {
        Some(state) => arguments.insert(KEY_REQUEST_STATE.into(), state.into()),
        None => arguments.remove(KEY_REQUEST_STATE),
    };
    arguments.insert(
        KEY_INPUT_RESPONSES.into(),
        serde_json::Value::Object(responses),
    );
}

/// How many input rounds a surface answers before it stops a tool that keeps asking. Tools
/// ask one question per round trip, and `decide_apply` one per candidate group: a wide card
/// has dozens.
pub const MAX_INPUT_ROUNDS: usize = 200;

/// JSON Schema of the `tools` verb's reply.
pub const TOOLS_REPLY_SCHEMA: &str = include_str!("../../../../subjects/tools-reply.schema.json");
/// JSON Schema of a tool call's reply.
pub const CALL_RESULT_SCHEMA: &str = include_str!("../../../../subjects/call-result.schema.json");
/// JSON Schema of `catalog_modules`' structured content.
pub const CATALOG_MODULES_SCHEMA: &str =
    include_str!("../../../../subjects/catalog-modules.schema.json");

/// nats-server template of the accounts layout (an account per module, one for people).
pub const ACCOUNTS_TEMPLATE: &str = include_str!("../../../../subjects/accounts.conf");

/// A name that breaks the grammar in `subjects/README.md`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NameError {
    #[error("module name {name:?} is invalid: {why} (a module is [a-z][a-z0-9-]{{0,31}})")]
    Module { name: String, why: &'static str },
    #[error("tool name {name:?} is invalid: {why} (a tool is [a-z][a-z0-9_]{{0,63}})")]
    Tool { name: String, why: &'static str },
    #[error(
        "tool name {0:?} is reserved: mesh.<module>.tools lists a module's tools and mesh.<module>.result gives large results"
    )]
    ReservedTool(&'static str),
    #[error("{name:?} is not a full tool name: expected <module>_<tool>, e.g. decide_annotate")]
    FullName { name: String },
}

/// Checks a module name against `[a-z][a-z0-9-]{0,31}`.
pub fn check_module(name: &str) -> Result<(), NameError> {
    let bad = |why| NameError::Module {
        name: name.to_owned(),
        why,
    };
    check_chars(name, 32, |c| c == '-').map_err(bad)
}

/// Checks a tool name against `[a-z][a-z0-9_]{0,63}` and refuses the verb `tools`.
pub fn check_tool(name: &str) -> Result<(), NameError> {
    check_chars(name, 64, |c| c == '_').map_err(|why| NameError::Tool {
        name: name.to_owned(),
        why,
    })?;
    for verb in [TOOLS_VERB, claim::RESULT_VERB, CANCEL_VERB] {
        if name == verb {
            return Err(NameError::ReservedTool(verb));
        }
    }
    Ok(())
}

fn check_chars(name: &str, max: usize, extra: impl Fn(char) -> bool) -> Result<(), &'static str> {
    let mut chars = name.chars();
    match chars.next() {
        None => return Err("it is empty"),
        Some(c) if !c.is_ascii_lowercase() => return Err("it must start with a letter a-z"),
        Some(_) => {}
    }
    if name.len() > max {
        return Err("it is too long");
    }
    if chars.any(|c| !(c.is_ascii_lowercase() || c.is_ascii_digit() || extra(c))) {
        return Err("it holds a character outside the allowed set");
    }
    Ok(())
}

/// `mesh.<module>.<tool>`: the subject a tool is served on.
pub fn tool_subject(module: &str, tool: &str) -> String {
    format!("{PREFIX}.{module}.{tool}")
}

/// `mesh-obo.<module>.<tool>`: where a module granted to act for people calls a tool.
pub fn obo_subject(module: &str, tool: &str) -> String {
    format!("{OBO_PREFIX}.{module}.{tool}")
}

/// The account a module lives in, in the accounts layout.
pub fn module_account(module: &str) -> String {
    format!("{MODULE_ACCOUNT_PREFIX}{module}")
}

/// `mesh.<module>.tools`: the subject of a module's `tools` verb.
pub fn tools_subject(module: &str) -> String {
    format!("{PREFIX}.{module}.{TOOLS_VERB}")
}

/// `<module>_<tool>`: the full name of a tool, joined (not checked: see [`FullName::parse`]);
/// a module's eponymous tool (module `greet`'s tool `greet`) is its name alone, `greet`.
pub fn full_name(module: &str, tool: &str) -> String {
    if module == tool {
        module.to_owned()
    } else {
        format!("{module}_{tool}")
    }
}

/// A tool's full name, `<module>_<tool>`, as a person types it and an agent sees it; a
/// module's eponymous tool is the module's name alone (`greet`, served on `mesh.greet.greet`).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct FullName {
    full: String,
    /// Where the module's name ends in `full`.
    split: usize,
    /// Where the tool's name starts in `full`: 0 for an eponymous tool.
    tool_at: usize,
    subject: String,
}

impl FullName {
    /// Splits at the first `_` (module names have none) and checks both halves; a name
    /// without `_` is a module's eponymous tool. `greet_greet` is read as `greet`, so one
    /// tool has one name.
    pub fn parse(name: &str) -> Result<Self, NameError> {
        let (module, tool) = match name.split_once('_') {
            Some(halves) => halves,
            None => {
                let not_a_name = |_| NameError::FullName {
                    name: name.to_owned(),
                };
                check_module(name).map_err(not_a_name)?;
                check_tool(name).map_err(not_a_name)?;
                (name, name)
            }
        };
        check_module(module)?;
        check_tool(tool)?;
        let full = full_name(module, tool);
        let tool_at = if module == tool { 0 } else { module.len() + 1 };
        Ok(Self {
            split: module.len(),
            tool_at,
            subject: tool_subject(module, tool),
            full,
        })
    }

    pub fn module(&self) -> &str {
        &self.full[..self.split]
    }

    pub fn tool(&self) -> &str {
        &self.full[self.tool_at..]
    }

    /// `mesh.<module>.<tool>`, made once at parse time since every call needs it.
    pub fn subject(&self) -> &str {
        &self.subject
    }

    pub fn as_str(&self) -> &str {
        &self.full
    }
}

impl fmt::Display for FullName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.full)
    }
}

/// nats-server's request for a connection's own account and permissions (2.10+).
pub const USER_INFO: &str = "$SYS.REQ.USER.INFO";

/// The inbox prefix a user subscribes to and its client must use: `_INBOX.<user>`.
pub fn inbox_prefix(user: &str) -> String {
    format!("_INBOX.{user}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn module_grammar() {
        assert!(check_module("decide").is_ok());
        assert!(check_module("a-1").is_ok());
        assert!(check_module(&"a".repeat(32)).is_ok());
        for bad in ["", "1a", "Decide", "de_cide", "de.cide", &"a".repeat(33)] {
            assert!(check_module(bad).is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn tool_grammar_and_reserved_verb() {
        assert!(check_tool("annotate").is_ok());
        assert!(check_tool("apply_term2").is_ok());
        assert_eq!(check_tool("tools"), Err(NameError::ReservedTool("tools")));
        assert_eq!(check_tool("result"), Err(NameError::ReservedTool("result")));
        for bad in ["", "_a", "a-b", "a.b", "A", &"a".repeat(65)] {
            assert!(check_tool(bad).is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn full_name_splits_at_first_underscore() {
        let n = FullName::parse("avu_apply_term").unwrap();
        assert_eq!((n.module(), n.tool()), ("avu", "apply_term"));
        assert_eq!(n.subject(), "mesh.avu.apply_term");
        assert_eq!(n.to_string(), "avu_apply_term");
        assert!(FullName::parse("decide_tools").is_err());
        assert!(FullName::parse("tools").is_err());
        assert!(FullName::parse("a-1").is_err());
        assert!(FullName::parse("Decide").is_err());
        assert!(FullName::parse("de.cide").is_err());
    }

    #[test]
    fn an_eponymous_tool_is_named_by_its_module_alone() {
        let n = FullName::parse("greet").unwrap();
        assert_eq!((n.module(), n.tool()), ("greet", "greet"));
        assert_eq!(n.subject(), "mesh.greet.greet");
        assert_eq!(n.as_str(), "greet");
        assert_eq!(full_name("greet", "greet"), "greet");
        // The long form names the same tool, and is read as the short one.
        assert_eq!(FullName::parse("greet_greet").unwrap(), n);
        let other = FullName::parse("greet_again").unwrap();
        assert_eq!((other.module(), other.tool()), ("greet", "again"));
    }

    #[test]
    fn embedded_schemas_are_json() {
        for s in [
            TOOLS_REPLY_SCHEMA,
            CALL_RESULT_SCHEMA,
            CATALOG_MODULES_SCHEMA,
        ] {
            let v: serde_json::Value = serde_json::from_str(s).unwrap();
            assert!(jsonschema::validator_for(&v).is_ok());
        }
    }
}
