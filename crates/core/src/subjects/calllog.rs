//! The call log, both sides of its wire: what nats-server witnesses of every call (its
//! service latency events), what a module says of the calls it took (its word), what a
//! caller says of calls the bus refused it (its report), and where each is kept.
//!
//! In the accounts layout a call crosses one service import, from its caller's account to the
//! module's, whose export of the tool tracks latency at 100%: nats-server publishes an
//! `io.nats.server.metric.v1.service_latency` event for every call into the module's account,
//! on a subject under `_R_.` ([`witnessed_subject`]) that the account exports to `MESH`, where
//! JetStream keeps it without the prefix. Nothing else can put a message there: the module's
//! user may not publish under `_R_.mesh-log.`, nats-server refuses an `_R_.` subject as anyone's
//! reply (so no answer to the module's own requests lands there), and a module's account has
//! no JetStream (whose republish and push consumers publish without permissions). Only the
//! catalogue's account has one (its bucket): the catalogue, which signs tickets, is the mesh's
//! own.
//!
//! The server's event names the caller (account, user, client connection) and the outcome; its
//! subject names the module and, where the layout knows the module's tools (an export per
//! tool), the tool. A module's word says what only the module knows (how its tool ended, the
//! person it acted for, digests), matched to the server's event by caller connection and time.
//! Words and reports reach `MESH` across imports that put the module's or the caller's name in
//! the subject they are kept under.

use serde::{Deserialize, Serialize};

/// The mesh's own account: the call log's streams.
pub const ACCOUNT: &str = "MESH";
/// Its one user, the mesh's owner (`mesh up` holds the password): it makes the streams.
pub const OWNER: &str = "owner";
/// The key the owner's password is kept under among the credentials (never a person's name).
pub const OWNER_CREDENTIAL: &str = "owner@MESH";

/// nats-server's events, one subject per module (or tool) and way in.
pub const SERVED_PREFIX: &str = "mesh-log.calls";
pub const SERVED_OBO_PREFIX: &str = "mesh-log.obo";
/// What nats-server's events are published under in the module's account: a prefix no client
/// may reply to.
pub const WITNESS_PREFIX: &str = "_R_.";
/// Modules' words on calls they took: a module publishes here, and its account's import
/// takes it to `mesh-log.words.<module>` (JetStream keeps no `Nats-Request-Info`, so who
/// said it is in the subject, put there by the configuration, not by the module).
pub const WORDS_SUBJECT: &str = "mesh-log.words";
/// Callers' reports of calls refused before reaching a module: a caller publishes on
/// `mesh-log.reports.<its user>` (the only one its permissions allow), which its account's
/// import takes to `mesh-log.reports.<ACCOUNT>.<user>`.
pub const REPORTS_PREFIX: &str = "mesh-log.reports";

/// Where `module`'s words are kept.
pub fn words_subject(module: &str) -> String {
    format!("{WORDS_SUBJECT}.{module}")
}

/// The module whose words a kept subject holds.
pub fn words_module(subject: &str) -> Option<&str> {
    subject
        .strip_prefix(WORDS_SUBJECT)?
        .strip_prefix('.')
        .filter(|m| !m.is_empty() && !m.contains('.'))
}

/// Where a caller publishes its reports: `mesh-log.reports.<user>`.
pub fn report_subject(user: &str) -> String {
    format!("{REPORTS_PREFIX}.{user}")
}

/// The caller (`user@ACCOUNT`) whose report a kept subject holds.
pub fn report_caller(subject: &str) -> Option<String> {
    let rest = subject.strip_prefix(REPORTS_PREFIX)?.strip_prefix('.')?;
    let (account, user) = rest.split_once('.')?;
    (!account.is_empty() && !user.is_empty() && !user.contains('.'))
        .then(|| format!("{user}@{account}"))
}

/// The stream of nats-server's events; of modules' words; of callers' reports. Apart, so a
/// module or a person saying much can push out only what it and its kind said.
pub const CALLS_STREAM: &str = "MESH_CALLS";
pub const WORDS_STREAM: &str = "MESH_WORDS";
pub const REPORTS_STREAM: &str = "MESH_REPORTS";

/// The largest word the log keeps (its stream refuses a longer one): a word is a few
/// hundred bytes, and one whose values would make it longer is said without them.
pub const MAX_WORD: usize = 16 * 1024;

/// The type nats-server gives its latency events.
pub const SERVED_TYPE: &str = "io.nats.server.metric.v1.service_latency";

/// Where the log keeps nats-server's events of calls to `module` (`tool`, where the layout
/// exports each tool apart): `mesh-log.calls.<module>[.<tool>]`, or `mesh-log.obo.…` for calls
/// made for a person.
pub fn served_subject(module: &str, tool: Option<&str>, obo: bool) -> String {
    let prefix = if obo {
        SERVED_OBO_PREFIX
    } else {
        SERVED_PREFIX
    };
    match tool {
        Some(t) => format!("{prefix}.{module}.{t}"),
        None => format!("{prefix}.{module}"),
    }
}

/// Where nats-server publishes those events, in the module's own account.
pub fn witnessed_subject(module: &str, tool: Option<&str>, obo: bool) -> String {
    format!("{WITNESS_PREFIX}{}", served_subject(module, tool, obo))
}

/// What a kept event's subject says: the module called, the tool if the bus named it, and
/// whether the call was made for a person.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ServedOn<'a> {
    pub module: &'a str,
    pub tool: Option<&'a str>,
    pub obo: bool,
}

/// The module, tool and way in a kept event's subject names.
pub fn served_on(subject: &str) -> Option<ServedOn<'_>> {
    let (rest, obo) = if let Some(r) = subject.strip_prefix(SERVED_PREFIX) {
        (r, false)
    } else {
        (subject.strip_prefix(SERVED_OBO_PREFIX)?, true)
    };
    let rest = rest.strip_prefix('.')?;
    let (module, tool) = match rest.split_once('.') {
        Some((m, t)) => (m, Some(t)),
        None => (rest, None),
    };
    let token = |t: &str| !t.is_empty() && !t.contains('.');
    (token(module) && tool.is_none_or(token)).then_some(ServedOn { module, tool, obo })
}

/// A client as nats-server describes it (the fields the log reads).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClientInfo {
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub acc: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub user: String,
    /// A JWT user's name (operator mode, where `user` is their key).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub name_tag: String,
    /// The connection's id on its server.
    #[serde(default)]
    pub id: u64,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub server: String,
    /// Round trip to its server, in nanoseconds.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub rtt: i64,
}

fn is_zero(n: &i64) -> bool {
    *n == 0
}

/// nats-server's event for one call (`ServiceLatency`): durations in nanoseconds, times in
/// RFC 3339. Status 200 answered, 400 published without a reply subject (a cancel), 408 the
/// caller gone before the answer, 503 nobody serves, 504 no answer within the export's
/// threshold.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Served {
    #[serde(rename = "type", default)]
    pub kind: String,
    #[serde(default)]
    pub status: u16,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requestor: Option<ClientInfo>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub responder: Option<ClientInfo>,
    /// When the request reached the server, less the caller's round trip.
    #[serde(default)]
    pub start: String,
    #[serde(default)]
    pub service: i64,
    #[serde(default)]
    pub system: i64,
    #[serde(default)]
    pub total: i64,
}

/// How a call ended, in a module's word or a caller's report.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Said {
    /// The tool answered.
    Ok,
    /// The tool answered with an error of its own.
    ToolError,
    /// The runtime refused it before the tool ran (identity, ticket, arguments).
    Refused,
    /// The caller's share, or the module, was busy.
    Busy,
    /// Its caller cancelled it; the handler was dropped.
    Cancelled,
    /// The bus refused the caller's publish (a caller's report).
    Denied,
}

impl Said {
    pub fn name(self) -> &'static str {
        match self {
            Said::Ok => "ok",
            Said::ToolError => "tool_error",
            Said::Refused => "refused",
            Said::Busy => "busy",
            Said::Cancelled => "cancelled",
            Said::Denied => "denied",
        }
    }
}

/// The size and digest of a call's arguments or result; the value only where the grants
/// file asks for it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Body {
    pub bytes: usize,
    /// `SHA-256=<base64url>` of the bytes as sent.
    pub digest: String,
    /// The value itself, only of a tool the grants file names in `log { values }`, and only
    /// when it is JSON of at most [`MAX_VALUE`] bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<serde_json::Value>,
    /// The value was asked for but left out: larger than [`MAX_VALUE`], or not JSON.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub cut: bool,
}

/// The largest value a word keeps (a word is at most 16 KiB).
pub const MAX_VALUE: usize = 6 * 1024;

impl Body {
    pub fn of(bytes: &[u8]) -> Body {
        Body {
            bytes: bytes.len(),
            digest: super::claim::digest(bytes),
            value: None,
            cut: false,
        }
    }

    /// `bytes` as a value a word may keep, if it is JSON and small enough.
    pub fn value_of(bytes: &[u8]) -> Option<serde_json::Value> {
        (bytes.len() <= MAX_VALUE)
            .then(|| serde_json::from_slice(bytes).ok())
            .flatten()
    }
}

/// A module's word on one call it took, published on [`WORDS_SUBJECT`] when the call ends.
/// Its author is the module its kept subject names, not anything in it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Word {
    /// The tool, or the verb (`tools`).
    pub name: String,
    /// Whether it came on the `mesh-obo` twin (a module acting for a person).
    #[serde(default)]
    pub obo: bool,
    /// The caller's id for it (`Mesh-Call`), if it named one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub call: Option<String>,
    /// The caller as the module read nats-server's stamp: the key to the server's event.
    pub caller: ClientInfo,
    /// The person a module acting for people named, checked against their ticket.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub for_person: Option<String>,
    /// That ticket, as it came (`Mesh-Ticket`): signed by the mesh's issuer, so the log's
    /// reader checks the person against it, not against the module's word.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ticket: Option<String>,
    /// When the module took it (RFC 3339) and how long it ran, in microseconds.
    pub at: String,
    pub took_us: u64,
    pub outcome: Said,
    pub arguments: Body,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<Body>,
    /// The W3C trace it ran in, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trace: Option<String>,
    /// Words of the same caller's refused, busy or cancelled calls not said since their last
    /// one said: past ten a second, a caller's refusals cost their own budget, not the
    /// module's part of the log.
    #[serde(default, skip_serializing_if = "is_zero_u64")]
    pub unsaid: u64,
}

fn is_zero_u64(n: &u64) -> bool {
    *n == 0
}

/// A caller's report of a call the bus refused before any module saw it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Report {
    /// The subject it was published on.
    pub subject: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub call: Option<String>,
    pub at: String,
    pub outcome: Said,
}

/// Now, as the log writes times.
pub fn now() -> String {
    rfc3339_fixed(time::OffsetDateTime::now_utc())
}

/// `t` as RFC 3339 in UTC with all nine digits of its nanoseconds, written digit by digit:
/// a module's word on every call carries one, and the general formatter costs a visible part
/// of a call.
fn rfc3339_fixed(t: time::OffsetDateTime) -> String {
    let t = t.to_offset(time::UtcOffset::UTC);
    let Ok(year) = u32::try_from(t.year()) else {
        return rfc3339(t);
    };
    if year > 9999 {
        return rfc3339(t);
    }
    let mut out = String::with_capacity(30);
    let mut put = |before: Option<char>, n: u32, width: u32| {
        out.extend(before);
        for place in (0..width).rev() {
            out.push(char::from(b'0' + (n / 10u32.pow(place) % 10) as u8));
        }
    };
    put(None, year, 4);
    put(Some('-'), u32::from(u8::from(t.month())), 2);
    put(Some('-'), u32::from(t.day()), 2);
    put(Some('T'), u32::from(t.hour()), 2);
    put(Some(':'), u32::from(t.minute()), 2);
    put(Some(':'), u32::from(t.second()), 2);
    put(Some('.'), t.nanosecond(), 9);
    out.push('Z');
    out
}

/// A time as the log writes it (RFC 3339, UTC, nanoseconds).
pub fn rfc3339(t: time::OffsetDateTime) -> String {
    t.format(&time::format_description::well_known::Rfc3339)
        .unwrap_or_default()
}

/// A time the log wrote (or nats-server did), if it reads.
pub fn parse_time(s: &str) -> Option<time::OffsetDateTime> {
    time::OffsetDateTime::parse(s, &time::format_description::well_known::Rfc3339).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_fixed_time_reads_as_the_general_one_writes() {
        let at = |nanos: i128| time::OffsetDateTime::from_unix_timestamp_nanos(nanos).unwrap();
        for t in [
            time::OffsetDateTime::now_utc(),
            time::OffsetDateTime::UNIX_EPOCH,
            at(1_796_452_167_000_000_001),
            at(917_827_199_500_000_000),
        ] {
            let fixed = rfc3339_fixed(t);
            assert_eq!(parse_time(&fixed), Some(t), "{fixed}");
            assert_eq!(fixed.len(), 30, "{fixed}");
            assert_eq!(parse_time(&rfc3339(t)), Some(t));
        }
    }

    #[test]
    fn a_server_event_reads() {
        let e = r#"{"type":"io.nats.server.metric.v1.service_latency","id":"x","timestamp":"2026-12-01T20:38:42.777012029Z","status":200,"requestor":{"start":"2026-12-01T20:38:42.774573898Z","host":"127.0.0.1","id":9,"acc":"PEOPLE","user":"alice","rtt":292940,"server":"N","kind":"Client"},"responder":{"id":10,"acc":"MODULE_echo","user":"echo"},"start":"2026-12-01T20:38:42.775046207Z","service":1200,"system":0,"total":1500}"#;
        let s: Served = serde_json::from_str(e).unwrap();
        assert_eq!(s.status, 200);
        let r = s.requestor.unwrap();
        assert_eq!(
            (r.acc.as_str(), r.user.as_str(), r.id),
            ("PEOPLE", "alice", 9)
        );
        assert!(parse_time(&s.start).is_some());
    }

    #[test]
    fn served_subjects_name_their_module() {
        let on = |m, t, obo| ServedOn {
            module: m,
            tool: t,
            obo,
        };
        assert_eq!(
            served_on(&served_subject("avu", None, false)),
            Some(on("avu", None, false))
        );
        assert_eq!(
            served_on(&served_subject("avu", Some("add"), true)),
            Some(on("avu", Some("add"), true))
        );
        assert_eq!(
            witnessed_subject("avu", Some("add"), false),
            "_R_.mesh-log.calls.avu.add"
        );
        assert_eq!(served_on("mesh-log.callsx.avu"), None);
        assert_eq!(served_on("mesh-log.calls.avu.add.x"), None);
        assert_eq!(served_on("mesh-log.calls."), None);
        assert_eq!(words_module(&words_subject("avu")), Some("avu"));
        assert_eq!(words_module("mesh-log.words.a.b"), None);
        assert_eq!(
            report_caller("mesh-log.reports.PEOPLE.bob").as_deref(),
            Some("bob@PEOPLE")
        );
        assert_eq!(report_caller("mesh-log.reports.bob"), None);
    }
}
