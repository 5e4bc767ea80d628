//! Tasks (MCP's `io.modelcontextprotocol/tasks` extension, SEP-2663), both sides of their
//! wire: a call that outlives its request. The catalogue keeps every task in its bucket
//! `mesh_tasks`; a person's client creates one (`mesh.catalog.task.create`, its owner the
//! caller nats-server stamped) and calls the tool with `Mesh-Task: <id>`; the module's runtime
//! answers at once that it took the task (`Mesh-Task` on the answer) and writes the task's
//! state as it runs (`mesh.catalog.task.write`, taken only from the module the task names);
//! its owner reads it, answers its questions and cancels it (`get`, `update`, `cancel`, taken
//! only from the owner). A module that does not know tasks simply answers the call.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::Progress;

/// The header naming the task a call is offered as (caller → module), and the task a module
/// took (on its answer: the call's result is then the task's, not the answer's).
pub const HEADER_TASK: &str = "Mesh-Task";

/// Where a person creates a task ([`Create`] → [`Reply`]).
pub const CREATE_SUBJECT: &str = "mesh.catalog.task.create";
/// Where its owner reads a task ([`Asked`] → [`Reply`]).
pub const GET_SUBJECT: &str = "mesh.catalog.task.get";
/// Where its owner answers a task's questions ([`Update`] → [`Reply`]).
pub const UPDATE_SUBJECT: &str = "mesh.catalog.task.update";
/// Where its owner cancels a task ([`Asked`] → [`Reply`]).
pub const CANCEL_SUBJECT: &str = "mesh.catalog.task.cancel";
/// Where the module running a task writes its state ([`Write`] → [`WriteReply`]).
pub const WRITE_SUBJECT: &str = "mesh.catalog.task.write";

/// The bucket the catalogue keeps tasks in.
pub const BUCKET: &str = "mesh_tasks";

/// How long a task is kept after it was created (its `ttlMs`), unless asked for less.
pub const TTL_MS: u64 = 3_600_000;
/// The shortest `ttlMs` taken.
pub const MIN_TTL_MS: u64 = 1_000;
/// How often a client is told to poll (`pollIntervalMs`); the runtime asks as often whether
/// its task was cancelled or answered.
pub const POLL_MS: u64 = 250;
/// Tasks one owner may have kept at once (running or ended, until their ttl): a flood of
/// creations fills only its owner's part of the bucket.
pub const MAX_PER_OWNER: usize = 256;
/// The largest request a task verb reads (an update's answers included).
pub const MAX_REQUEST: usize = 256 * 1024;
/// The largest result a task's record keeps inline; a larger one is kept as a claim (the
/// module's, read through it), so that a few people's tasks cannot fill the bucket.
pub const MAX_INLINE_RESULT: usize = 64 * 1024;
/// The largest record the bucket keeps: a result inline or questions and their answers
/// (each at most a request), beside the task's state.
pub const MAX_RECORD: usize = 2 * MAX_REQUEST + MAX_INLINE_RESULT;

/// A task's status, as SEP-2663 names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    Working,
    InputRequired,
    Completed,
    Failed,
    Cancelled,
}

impl Status {
    /// Whether nothing more happens to it.
    pub fn is_terminal(self) -> bool {
        matches!(self, Status::Completed | Status::Failed | Status::Cancelled)
    }

    /// Its name on the wire.
    pub fn name(self) -> &'static str {
        match self {
            Status::Working => "working",
            Status::InputRequired => "input_required",
            Status::Completed => "completed",
            Status::Failed => "failed",
            Status::Cancelled => "cancelled",
        }
    }
}

/// A person's request for a task: the tool it is for (by full name) and how long to keep it.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct Create {
    pub tool: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttl_ms: Option<u64>,
}

/// The owner's question about one task (`get`, `cancel`).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct Asked {
    pub id: String,
}

/// The owner's answers to a task's questions (`inputResponses`, keyed like its
/// `inputRequests`; a key it did not ask is ignored).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Update {
    pub id: String,
    pub input_responses: Map<String, Value>,
}

/// A task as the catalogue keeps it (and its verbs answer, without `owner`'s answers): what
/// SEP-2663 calls a `DetailedTask`, and who it is for.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Record {
    pub id: String,
    /// Who created it, as nats-server stamped them (empty on a bus without accounts).
    pub owner: String,
    /// The module running it, and the tool (full name).
    pub module: String,
    pub tool: String,
    pub status: Status,
    pub created_ms: u64,
    pub updated_ms: u64,
    pub ttl_ms: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status_message: Option<String>,
    /// How far it got, as its tool last reported (`statusMessage` is the report's message).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub progress: Option<Progress>,
    /// The questions still open (status `input_required`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input_requests: Option<Map<String, Value>>,
    /// The answers given so far, for the module to take when every question has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input_responses: Option<Map<String, Value>>,
    /// The tool's `CallToolResult` (status `completed`; a claim when it was large).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<Value>,
    /// A JSON-RPC error object (status `failed`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<Value>,
    /// A call of its tool by its owner was taken as it (the module's first write named
    /// them): only then does the module write its state. One cancelled before is purged.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub taken: bool,
    /// The registered instance that took it: when the catalogue takes that instance for
    /// gone (it stopped refreshing), the task is failed rather than left working.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instance: Option<String>,
}

impl Record {
    /// Whether its ttl has passed at `now_ms`: then it is gone for everyone.
    pub fn expired(&self, now_ms: u64) -> bool {
        now_ms > self.created_ms.saturating_add(self.ttl_ms)
    }
}

/// A task verb's answer: the task, or why not.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Default)]
pub struct Reply {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task: Option<Record>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The task named is none of the caller's (none at all, another's, or expired): told
    /// apart from a refusal so that MCP's `-32602` can be said of it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub unknown: bool,
}

/// What the module running a task writes: its new status and what goes with it. A write
/// with no `status` only asks ([`WriteReply`]) whether the task was cancelled or answered.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Default)]
#[serde(deny_unknown_fields)]
pub struct Write {
    pub id: String,
    /// On the write that takes the task: the caller and tool (full name) of the call it was
    /// offered with, refused unless they are the task's owner and tool (an id someone else
    /// learnt takes nobody's task for them).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool: Option<String>,
    /// On the take: the module instance that runs it, as it registered with the catalogue
    /// (none when it does not register): taken for gone with it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instance: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<Status>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status_message: Option<String>,
    /// With no `status`: how far the task got (kept while it works).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub progress: Option<Progress>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input_requests: Option<Map<String, Value>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<Value>,
}

/// The catalogue's answer to a module's write.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Default)]
pub struct WriteReply {
    /// The task's status now (`cancelled`: its owner gave it up; stop).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<Status>,
    /// Every question answered: the answers, taken (the task is `working` again).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input_responses: Option<Map<String, Value>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The error is the catalogue's own (its bucket failed or raced): the same write may be
    /// taken later. Without it an error is for good (the task expired, or is not yours).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub again: bool,
}

/// Whether `id` has the shape of a task's id: 1 to 64 of `[A-Za-z0-9_-]`.
pub fn valid_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= 64
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

/// The part of a task's id and key that names its owner: 16 hex digits of the SHA-256 of
/// the owner's id (`ann@PEOPLE`; empty on a bus without accounts). A task's key is
/// `t.<owner part>.<rest of the id>`, so another person's id names no key of theirs.
pub fn owner_part(owner: &str) -> String {
    use sha2::Digest;
    let digest = sha2::Sha256::digest(owner.as_bytes());
    digest[..8].iter().map(|b| format!("{b:02x}")).collect()
}

/// A new task's id for `owner`: its owner part, `-`, and 32 random hex digits.
pub fn new_id(owner: &str) -> String {
    format!("{}-{}", owner_part(owner), uuid::Uuid::new_v4().simple())
}

/// The bucket key of task `id`, if it has an id's shape.
pub fn key_of(id: &str) -> Option<String> {
    let (owner, rest) = id.split_once('-')?;
    let hex = |s: &str, n: usize| s.len() == n && s.bytes().all(|b| b.is_ascii_hexdigit());
    (hex(owner, 16) && hex(rest, 32)).then(|| format!("t.{owner}.{rest}"))
}

/// An ISO 8601 time (UTC, milliseconds) of `ms` since the epoch, as MCP writes task times.
pub fn iso(ms: u64) -> String {
    use time::format_description::BorrowedFormatItem;
    static FORMAT: std::sync::LazyLock<Vec<BorrowedFormatItem<'static>>> =
        std::sync::LazyLock::new(|| {
            time::format_description::parse_borrowed::<1>(
                "[year]-[month]-[day]T[hour]:[minute]:[second].[subsecond digits:3]Z",
            )
            .expect("the format reads")
        });
    time::OffsetDateTime::from_unix_timestamp_nanos(i128::from(ms) * 1_000_000)
        .ok()
        .and_then(|t| t.format(&FORMAT).ok())
        .unwrap_or_default()
}

/// A tool's `execution.taskSupport` as its spec says (`forbidden` when it says nothing).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum TaskSupport {
    #[default]
    Forbidden,
    Optional,
    Required,
}

impl TaskSupport {
    /// What a tool's JSON (`{"execution": {"taskSupport": …}}`) says.
    pub fn of_tool(tool: &Value) -> TaskSupport {
        tool.get("execution")
            .and_then(|e| e.get("taskSupport"))
            .and_then(|s| serde_json::from_value(s.clone()).ok())
            .unwrap_or_default()
    }

    /// The `execution` object a tool lists.
    pub fn execution(self) -> Value {
        let name = match self {
            TaskSupport::Forbidden => "forbidden",
            TaskSupport::Optional => "optional",
            TaskSupport::Required => "required",
        };
        serde_json::json!({ "taskSupport": name })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_are_iso_8601() {
        assert_eq!(iso(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(iso(1_764_500_000_123), "2025-11-30T10:53:20.123Z");
        assert_eq!(iso(951_782_400_000), "2000-02-29T00:00:00.000Z");
    }

    #[test]
    fn a_tool_says_whether_it_runs_as_a_task() {
        let t = serde_json::json!({"name": "x", "execution": {"taskSupport": "required"}});
        assert_eq!(TaskSupport::of_tool(&t), TaskSupport::Required);
        assert_eq!(
            TaskSupport::of_tool(&serde_json::json!({"name": "x"})),
            TaskSupport::Forbidden
        );
        assert_eq!(
            TaskSupport::of_tool(&serde_json::json!({"execution": {"taskSupport": "odd"}})),
            TaskSupport::Forbidden
        );
    }

    #[test]
    fn ids_are_header_and_key_safe() {
        assert!(valid_id("0a1b-c_d"));
        assert!(!valid_id(""));
        assert!(!valid_id("a.b"));
        assert!(!valid_id(&"a".repeat(65)));
    }
}
