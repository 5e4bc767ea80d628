//! The call log's streams in the mesh's account (made and kept to the grants file's retention
//! by `mesh up`), read back by a direct get in batches, and joined into calls: nats-server's
//! event for each, with the word of the module that took it and the reports of callers the
//! bus refused. The wire is `mesh_core::subjects::calllog`.

use std::collections::HashMap;
use std::time::Duration;

use async_nats::HeaderMap;
use async_nats::jetstream::{self, stream};
use bytes::Bytes;
use futures_util::StreamExt;
use mesh_core::subjects::calllog::{
    self, CALLS_STREAM, ClientInfo, REPORTS_STREAM, Report, Said, Served, WORDS_STREAM, Word,
};
use serde::Serialize;
use time::OffsetDateTime;

/// How long and how much of the log is kept, per stream (the grants file's `log`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Retention {
    pub max_age: Duration,
    pub max_bytes: u64,
}

impl Default for Retention {
    fn default() -> Self {
        Retention {
            max_age: Duration::from_secs(30 * 24 * 3600),
            max_bytes: 1 << 30,
        }
    }
}

/// The largest record the log keeps and the reader takes: a word's bound.
pub const MAX_RECORD: i32 = calllog::MAX_WORD as i32;
/// The largest report.
const MAX_REPORT: i32 = 4 * 1024;
/// Who shares the log's streams: its modules (each module's words are kept apart) and its
/// callers (each caller's reports). Each is kept to its share of the stream's bytes, so that
/// whoever says the most pushes out only their own records.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Parties {
    pub modules: usize,
    pub callers: usize,
}

impl Default for Parties {
    fn default() -> Self {
        Parties {
            modules: 8,
            callers: 32,
        }
    }
}

/// Records of one subject (a module's words, a caller's reports) at most: its share of the
/// stream's bytes at the largest record, and never fewer than this.
const FEWEST_PER_SUBJECT: i64 = 256;

fn per_subject(retention: Retention, largest: i32, sharing: usize) -> i64 {
    let share = retention.max_bytes / (largest.max(1) as u64) / (sharing.max(1) as u64);
    i64::try_from(share)
        .unwrap_or(i64::MAX)
        .max(FEWEST_PER_SUBJECT)
}
/// How long making the streams may take, all three (a cluster elects its leaders first).
const MAKE_WITHIN: Duration = Duration::from_secs(30);
/// The most bytes one batch of a direct get brings.
const BATCH_BYTES: usize = 4 * 1024 * 1024;

/// Why the log could not be made or read.
#[derive(Debug, thiserror::Error)]
pub enum LogError {
    #[error("cannot make the call log's stream {stream}: {why}")]
    Make { stream: &'static str, why: String },
    #[error(
        "the bus refused reading the call log ({0}): only its owner and the auditors the grants file names (log {{ auditors: [...] }}) may read it"
    )]
    Denied(String),
    #[error("the call log's stream {0} is not there: is this a mesh started by `mesh up`?")]
    Missing(&'static str),
    #[error(
        "the call log's stream {0} did not answer within 5 s: nats-server 2.11 or newer reads it in batches"
    )]
    Silent(&'static str),
    #[error("cannot read the call log: {0}")]
    Bus(String),
}

/// Makes the log's three streams, or brings their limits to `retention`, each module's words
/// and each caller's reports kept to their share of it (`parties`). With `replicas` (a
/// cluster) each is kept on that many servers.
pub async fn ensure(
    nats: &async_nats::Client,
    retention: Retention,
    replicas: usize,
    parties: Parties,
) -> Result<(), LogError> {
    let js = jetstream::new(nats.clone());
    let until = std::time::Instant::now() + MAKE_WITHIN;
    // Words and reports are bounded each, and kept per subject — a module's, a person's —
    // so whoever says much pushes out their own records first, not everybody's.
    let streams = [
        (
            CALLS_STREAM,
            vec![
                format!("{}.>", calllog::SERVED_PREFIX),
                format!("{}.>", calllog::SERVED_OBO_PREFIX),
            ],
            0,
            0,
        ),
        (
            WORDS_STREAM,
            vec![calllog::words_subject("*")],
            MAX_RECORD,
            per_subject(retention, MAX_RECORD, parties.modules),
        ),
        (
            REPORTS_STREAM,
            vec![format!("{}.*.*", calllog::REPORTS_PREFIX)],
            MAX_REPORT,
            per_subject(retention, MAX_REPORT, parties.callers),
        ),
    ];
    for (name, subjects, max_size, per_subject) in streams {
        let config = stream::Config {
            name: name.to_owned(),
            subjects,
            max_message_size: max_size,
            max_messages_per_subject: per_subject,
            storage: stream::StorageType::File,
            retention: stream::RetentionPolicy::Limits,
            discard: stream::DiscardPolicy::Old,
            max_age: retention.max_age,
            max_bytes: i64::try_from(retention.max_bytes).unwrap_or(i64::MAX),
            num_replicas: replicas.max(1),
            allow_direct: true,
            // Nothing in it is taken out but by age and size.
            deny_delete: true,
            deny_purge: true,
            ..Default::default()
        };
        // JetStream in a cluster elects its leaders for a while after the servers start:
        // tried again until one deadline for all three streams.
        loop {
            match js.create_or_update_stream(config.clone()).await {
                Ok(_) => break,
                Err(e) if std::time::Instant::now() < until => {
                    tracing::debug!(stream = name, "the call log's stream not made yet: {e}");
                    tokio::time::sleep(Duration::from_secs(1)).await;
                }
                Err(e) => {
                    return Err(LogError::Make {
                        stream: name,
                        why: e.to_string(),
                    });
                }
            }
        }
    }
    Ok(())
}

/// One message of a log stream.
#[derive(Debug, Clone)]
pub struct Stored {
    pub seq: u64,
    pub subject: String,
    pub time: Option<OffsetDateTime>,
    pub payload: Bytes,
    /// How many records of the stream follow this one, as the stream said when it gave it.
    pub pending: Option<u64>,
}

/// Where a read starts.
#[derive(Debug, Clone, Copy)]
pub enum From {
    Seq(u64),
    Time(OffsetDateTime),
}

/// The most messages one direct get returns.
const BATCH: usize = 256;
/// How long one batch may take to arrive.
const BATCH_WAIT: Duration = Duration::from_secs(5);

/// Every message of `stream` from `from` on, at most `max` (the oldest first).
pub async fn read(
    client: &mesh_core::client::Client,
    stream: &'static str,
    from: From,
    max: usize,
) -> Result<Vec<Stored>, LogError> {
    let nats = client.nats();
    let subject = format!("$JS.API.DIRECT.GET.{stream}");
    let mut out = Vec::new();
    let mut from = from;
    while out.len() < max {
        let mut request = serde_json::json!({
            "batch": BATCH.min(max - out.len()),
            "max_bytes": BATCH_BYTES,
        });
        match from {
            From::Seq(s) => request["seq"] = s.max(1).into(),
            From::Time(t) => request["start_time"] = calllog::rfc3339(t).into(),
        }
        let inbox = nats.new_inbox();
        let mut sub = nats
            .subscribe(inbox.clone())
            .await
            .map_err(|e| LogError::Bus(e.to_string()))?;
        // A refused publish is said to this connection alone, and asynchronously.
        let refused = client.refused(&subject);
        tokio::pin!(refused);
        nats.publish_with_reply(subject.clone(), inbox, request.to_string().into())
            .await
            .map_err(|e| LogError::Bus(e.to_string()))?;
        let mut got = 0usize;
        let mut pending = 0u64;
        loop {
            let next = tokio::time::timeout(BATCH_WAIT, sub.next());
            let msg = tokio::select! {
                biased;
                m = next => match m {
                    Ok(Some(m)) => m,
                    Ok(None) => return Err(LogError::Bus("the subscription ended".into())),
                    Err(_) => return Err(LogError::Silent(stream)),
                },
                true = &mut refused => return Err(LogError::Denied(subject)),
            };
            if let Some(status) = msg.status {
                match status.as_u16() {
                    // The end of a batch, or nothing (more) to read.
                    204 | 404 => {
                        pending = header(&msg.headers, "Nats-Num-Pending")
                            .and_then(|p| p.parse().ok())
                            .unwrap_or(0);
                        break;
                    }
                    503 => return Err(LogError::Missing(stream)),
                    408 if got > 0 => break,
                    other => {
                        return Err(LogError::Bus(format!(
                            "{stream} answered {other} {}",
                            msg.description.unwrap_or_default()
                        )));
                    }
                }
            }
            let seq = header(&msg.headers, "Nats-Sequence")
                .and_then(|s| s.parse().ok())
                .unwrap_or(0);
            let time =
                header(&msg.headers, "Nats-Time-Stamp").and_then(|t| calllog::parse_time(&t));
            let subj = header(&msg.headers, "Nats-Subject").unwrap_or_default();
            let after = header(&msg.headers, "Nats-Num-Pending").and_then(|p| p.parse().ok());
            got += 1;
            from = From::Seq(seq + 1);
            // No record of the log is this large: one that is (made before the streams were
            // bounded) is left out rather than read.
            if msg.payload.len() > MAX_RECORD as usize {
                continue;
            }
            out.push(Stored {
                seq,
                subject: subj,
                time,
                payload: msg.payload,
                pending: after,
            });
        }
        if got == 0 || pending == 0 {
            break;
        }
    }
    Ok(out)
}

/// What a read of one stream since a time left out.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Window {
    /// Records of the window older than those read, left out to read at most `max`.
    pub left_out: u64,
    /// The oldest record the stream still holds, where it holds one from after the window's
    /// start and older ones were pushed out by its limits: calls from before it are gone.
    pub evicted_before: Option<OffsetDateTime>,
}

/// The newest `max` records of `stream` from `since` on (the oldest of them first), and
/// what the read could not give: older records of the window past `max`, and records the
/// stream's limits pushed out from inside the window.
pub async fn read_newest(
    client: &mesh_core::client::Client,
    stream: &'static str,
    since: OffsetDateTime,
    max: usize,
) -> Result<(Vec<Stored>, Window), LogError> {
    let mut window = Window::default();
    // The stream's oldest record: past the first sequence, older ones were pushed out.
    let oldest = read(client, stream, From::Seq(1), 1).await?;
    if let Some(o) = oldest.first()
        && o.seq > 1
        && o.time.is_some_and(|t| t > since)
    {
        window.evicted_before = o.time;
    }
    let first = read(client, stream, From::Time(since), 1).await?;
    let Some(first) = first.into_iter().next() else {
        return Ok((Vec::new(), window));
    };
    // Nothing is taken out of the log but from its oldest end, so the sequences from the
    // window's first record on are all there: the newest `max` start this far on.
    let in_window = first.pending.unwrap_or(0) + 1;
    let start = match in_window.checked_sub(max as u64) {
        Some(over) if over > 0 => {
            window.left_out = over;
            From::Seq(first.seq + over)
        }
        _ => From::Seq(first.seq),
    };
    Ok((read(client, stream, start, max).await?, window))
}

fn header(headers: &Option<HeaderMap>, name: &str) -> Option<String> {
    headers
        .as_ref()
        .and_then(|h| h.get(name))
        .map(|v| v.as_str().to_owned())
}

/// Who saw a call: nats-server, the module that took it, the caller.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Seen {
    /// nats-server's event and the module's word, matched.
    BusAndModule,
    /// nats-server's event alone (the module said nothing, or not yet).
    Bus,
    /// The module's word alone (nats-server's event not yet there: a call still running
    /// when read, or given up on, whose event comes at the export's threshold).
    Module,
    /// The caller's report alone: the bus refused the call before it reached a module.
    Caller,
}

/// One call as the log knows it.
#[derive(Debug, Clone, Serialize)]
pub struct Call {
    /// When it started: nats-server's time where it has one (its event's start, or when the
    /// log's stream took a caller's report in); else the module's word's.
    pub at: String,
    /// Who called: `user@ACCOUNT`.
    pub caller: String,
    /// The person a module acted for: said by the module called, on a call the bus saw a
    /// module make on the tool's `mesh-obo` twin (where the callee's runtime checks the
    /// person's ticket); never taken from a word alone or on any other call.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub for_person: Option<String>,
    pub module: String,
    /// The tool or verb, as the module said (`None`: the module said nothing).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool: Option<String>,
    /// How it ended, in the mesh's words: ok, tool_error, refused, busy, cancelled, denied,
    /// nobody (503), slow (504), gone (408: the caller left first), no_reply (400), answered
    /// (200 with no word from the module).
    pub outcome: String,
    /// nats-server's status, where it saw the call.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub status: Option<u16>,
    /// Total time in microseconds, as nats-server measured it (else the module).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub total_us: Option<u64>,
    /// The module's own time, in microseconds, as nats-server measured it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub service_us: Option<u64>,
    pub seen: Seen,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub call_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub arguments: Option<calllog::Body>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub result: Option<calllog::Body>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub trace: Option<String>,
    /// With `--config`: whether today's permissions would let this caller make this call.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub allowed_today: Option<bool>,
    /// More than one word of the same caller connection could be this call's (calls to the
    /// same module within the match window): the one nearest in time was taken.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub ambiguous: bool,
    /// The module's words of this caller's refused, busy or cancelled calls it did not say
    /// before this one (past ten a second, a caller's refusals spend their own budget).
    #[serde(skip_serializing_if = "is_zero")]
    pub unsaid: u64,
    /// Where it was read: the stream (0 calls, 1 words, 2 reports), the sequence of the
    /// record it comes from, and its place in that record (words are sent a few together).
    #[serde(skip)]
    pub record: (u8, u64, u32),
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

impl Call {
    /// The full tool name it called, when the module said which.
    pub fn full_tool(&self) -> Option<String> {
        self.tool
            .as_ref()
            .map(|t| mesh_core::subjects::full_name(&self.module, t))
    }
}

/// A server event, read.
struct Event {
    seq: u64,
    module: String,
    /// The tool, where the bus named it (an export per tool).
    tool: Option<String>,
    obo: bool,
    served: Served,
    start: Option<OffsetDateTime>,
}

/// A module's word, read, with the module its kept subject names.
struct Spoken {
    seq: u64,
    /// Its place among the words sent together in one message.
    index: u32,
    module: String,
    word: Word,
    at: Option<OffsetDateTime>,
}

fn key(module: &str, c: &ClientInfo) -> (String, String, String, u64, String) {
    (
        module.to_owned(),
        c.acc.clone(),
        c.user.clone(),
        c.id,
        c.server.clone(),
    )
}

/// The words a module may be matched by: said within this of nats-server's start of the
/// call (the module's clock and the server's are one machine's, or a cluster's).
const MATCH_SLACK: Duration = Duration::from_secs(2);

/// How long the catalogue may take to say its keys.
const KEYS_WAIT: Duration = Duration::from_secs(2);

/// The issuer's public keys, to check the tickets behind a person acted for: asked of the
/// catalogue (`mesh.catalog.keys`, which the grants file lets the log's auditors ask).
pub async fn issuer_keys(client: &mesh_core::client::Client) -> Result<Vec<String>, LogError> {
    use mesh_core::subjects::ticket::{KEYS_SUBJECT, KeysReply};
    let asked =
        tokio::time::timeout(KEYS_WAIT, client.nats().request(KEYS_SUBJECT, Bytes::new())).await;
    match asked {
        Ok(Ok(msg)) => serde_json::from_slice::<KeysReply>(&msg.payload)
            .map(|r| r.keys)
            .map_err(|e| LogError::Bus(format!("the catalogue's keys do not read: {e}"))),
        Ok(Err(e)) => Err(LogError::Bus(format!(
            "cannot ask the catalogue for its keys: {e}"
        ))),
        Err(_) => Err(LogError::Bus(
            "the catalogue did not say its keys in time".into(),
        )),
    }
}

/// The person a word says a module acted for, where the ticket it carries shows it: signed
/// by one of `keys`, current when the call began, naming that person and issued to the module
/// nats-server stamped as the caller.
fn acted_for(
    word: &Word,
    caller: &ClientInfo,
    at: Option<OffsetDateTime>,
    keys: &[String],
) -> Option<String> {
    let person = word.for_person.as_ref()?;
    let module = caller
        .acc
        .strip_prefix(mesh_core::subjects::MODULE_ACCOUNT_PREFIX)?;
    let at = std::time::SystemTime::from(at?);
    let ticket = mesh_core::subjects::ticket::verify(word.ticket.as_deref()?, keys, at).ok()?;
    (ticket.claims.aud == module && ticket.claims.sub == *person).then(|| person.clone())
}

/// Joins what the three streams hold into calls, the oldest first. A person acted for is
/// shown only where a ticket signed by one of `keys` shows it.
pub fn join(calls: &[Stored], words: &[Stored], reports: &[Stored], keys: &[String]) -> Vec<Call> {
    let events: Vec<Event> = calls
        .iter()
        .filter_map(|m| {
            let on = calllog::served_on(&m.subject)?;
            let served: Served = serde_json::from_slice(&m.payload).ok()?;
            (served.kind == calllog::SERVED_TYPE).then(|| Event {
                seq: m.seq,
                module: on.module.to_owned(),
                tool: on.tool.map(str::to_owned),
                obo: on.obo,
                start: calllog::parse_time(&served.start),
                served,
            })
        })
        .collect();
    // A message holds one word, or several sent together (an array).
    let mut said: Vec<Option<Spoken>> = words
        .iter()
        .flat_map(|m| {
            let module = calllog::words_module(&m.subject).map(str::to_owned);
            let words: Vec<Word> = match m.payload.first() {
                Some(b'[') => serde_json::from_slice::<Vec<serde_json::Value>>(&m.payload)
                    .unwrap_or_default()
                    .into_iter()
                    .filter_map(|w| serde_json::from_value(w).ok())
                    .collect(),
                _ => serde_json::from_slice(&m.payload)
                    .ok()
                    .into_iter()
                    .collect(),
            };
            let seq = m.seq;
            words.into_iter().enumerate().map(move |(i, mut word)| {
                // A runtime copies the stamp named; one a module wrote itself may carry the
                // account's key (operator mode): named as the events are.
                word.caller = mesh_core::actor::as_named(std::mem::take(&mut word.caller));
                Some(Spoken {
                    seq,
                    index: i as u32,
                    at: calllog::parse_time(&word.at),
                    module: module.clone()?,
                    word,
                })
            })
        })
        .collect();
    // Each caller connection's words in time order, so that an event looks only at those
    // within the match window (a busy connection has many).
    let mut by_caller: HashMap<_, Vec<(OffsetDateTime, usize)>> = HashMap::new();
    for (i, s) in said.iter().enumerate() {
        if let Some(s) = s
            && let Some(at) = s.at
        {
            by_caller
                .entry(key(&s.module, &s.word.caller))
                .or_default()
                .push((at, i));
        }
    }
    for words in by_caller.values_mut() {
        words.sort();
    }
    let mut out = Vec::with_capacity(events.len());
    for e in &events {
        // Operator mode stamps account keys: named as the words name them.
        let requestor = mesh_core::actor::as_named(e.served.requestor.clone().unwrap_or_default());
        let arrived = e
            .start
            .map(|s| s + Duration::from_nanos(requestor.rtt.max(0) as u64));
        // The closest word by the same caller connection to the same module.
        let mut near: Vec<(Duration, usize)> = arrived
            .and_then(|arrived| {
                let words = by_caller.get(&key(&e.module, &requestor))?;
                let from = words.partition_point(|(at, _)| *at < arrived - MATCH_SLACK);
                Some(
                    words[from..]
                        .iter()
                        .take_while(|(at, _)| *at <= arrived + MATCH_SLACK)
                        .filter_map(|&(at, i)| {
                            let s = said[i].as_ref()?;
                            let gap = (at - arrived).unsigned_abs();
                            // Where the bus named the tool, only a word of that tool.
                            let same = e.tool.as_ref().is_none_or(|t| *t == s.word.name);
                            (s.word.obo == e.obo && same).then_some((gap, i))
                        })
                        .collect(),
                )
            })
            .unwrap_or_default();
        near.sort();
        let word = near
            .first()
            .and_then(|&(_, i)| said[i].take())
            .map(|s| s.word);
        let mut call = from_event(e, &requestor, word, keys);
        call.ambiguous = near.len() > 1;
        call.record = (0, e.seq, 0);
        out.push(call);
    }
    for s in said.into_iter().flatten() {
        out.push(from_word(s));
    }
    for m in reports {
        let (Some(caller), Ok(report)) = (
            calllog::report_caller(&m.subject),
            serde_json::from_slice::<Report>(&m.payload),
        ) else {
            continue;
        };
        // The report is its caller's free text: its time is when the bus took it in (the
        // stream's, not the `at` it says), and its tool only a subject that reads as a tool
        // call, else none (issue 45: a caller wrote another time, tool or row into them).
        let (true, Some(kept_at)) = (report.outcome == Said::Denied, m.time) else {
            continue;
        };
        let (module, tool) = match tool_called(&report.subject) {
            Some((module, tool)) => (module.to_owned(), Some(tool.to_owned())),
            None => (String::new(), None),
        };
        out.push(Call {
            ambiguous: false,
            unsaid: 0,
            record: (2, m.seq, 0),
            at: calllog::rfc3339(kept_at),
            caller,
            for_person: None,
            module,
            tool,
            outcome: Said::Denied.name().into(),
            status: None,
            total_us: None,
            service_us: None,
            seen: Seen::Caller,
            call_id: report.call,
            arguments: None,
            result: None,
            trace: None,
            allowed_today: None,
        });
    }
    out.sort_by_cached_key(|c| calllog::parse_time(&c.at));
    out
}

/// The module and tool a tool call's subject names (`mesh.<m>.<t>` or `mesh-obo.<m>.<t>`),
/// both valid names; `None` for anything else a caller may have written.
fn tool_called(subject: &str) -> Option<(&str, &str)> {
    let (prefix, rest) = subject.split_once('.')?;
    if prefix != mesh_core::subjects::PREFIX && prefix != mesh_core::subjects::OBO_PREFIX {
        return None;
    }
    let (module, tool) = rest.split_once('.')?;
    mesh_core::subjects::check_module(module).ok()?;
    mesh_core::subjects::check_tool(tool).ok()?;
    Some((module, tool))
}

fn from_event(e: &Event, requestor: &ClientInfo, word: Option<Word>, keys: &[String]) -> Call {
    let s = &e.served;
    let outcome = match (s.status, &word) {
        (200, Some(w)) => w.outcome.name(),
        (200, None) => "answered",
        (400, _) => "no_reply",
        (408, _) => "gone",
        (503, _) => "nobody",
        (504, _) => "slow",
        _ => "unknown",
    };
    let us = |ns: i64| Some((ns.max(0) / 1000) as u64);
    Call {
        ambiguous: false,
        unsaid: word.as_ref().map_or(0, |w| w.unsaid),
        record: (0, 0, 0),
        at: s.start.clone(),
        caller: format!("{}@{}", requestor.user, requestor.acc),
        // A person acted for, only where the bus saw a module call a tool's mesh-obo twin
        // and the person's ticket, issued to that module, shows it: a word naming one on any
        // other call, or without the ticket, is the module's say, not the call's.
        for_person: word
            .as_ref()
            .filter(|w| e.obo && w.obo)
            .and_then(|w| acted_for(w, requestor, e.start, keys)),
        module: e.module.clone(),
        tool: e
            .tool
            .clone()
            .or_else(|| word.as_ref().map(|w| w.name.clone())),
        outcome: outcome.into(),
        status: Some(s.status),
        total_us: us(s.total),
        service_us: us(s.service),
        seen: if word.is_some() {
            Seen::BusAndModule
        } else {
            Seen::Bus
        },
        call_id: word.as_ref().and_then(|w| w.call.clone()),
        arguments: word.as_ref().map(|w| w.arguments.clone()),
        result: word.as_ref().and_then(|w| w.result.clone()),
        trace: word.and_then(|w| w.trace),
        allowed_today: None,
    }
}

fn from_word(s: Spoken) -> Call {
    let w = s.word;
    Call {
        ambiguous: false,
        unsaid: w.unsaid,
        record: (1, s.seq, s.index),
        at: w.at.clone(),
        caller: format!("{}@{}", w.caller.user, w.caller.acc),
        // No call of the bus's to put it on: nobody acted for.
        for_person: None,
        module: s.module,
        tool: Some(w.name.clone()),
        outcome: w.outcome.name().into(),
        status: None,
        total_us: Some(w.took_us),
        service_us: None,
        seen: Seen::Module,
        call_id: w.call,
        arguments: Some(w.arguments),
        result: w.result,
        trace: w.trace,
        allowed_today: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn stored(seq: u64, subject: &str, payload: serde_json::Value) -> Stored {
        Stored {
            seq,
            subject: subject.into(),
            time: None,
            payload: serde_json::to_vec(&payload).unwrap().into(),
            pending: None,
        }
    }

    fn word(name: &str, at: &str) -> serde_json::Value {
        json!({"name": name, "caller": {"acc": "PEOPLE", "user": "ann", "id": 7, "server": "S"},
            "at": at, "took_us": 1, "outcome": "ok", "arguments": {"bytes": 2, "digest": "d"}})
    }

    /// A person acted for is shown only on a module's mesh-obo call, and only as far as the
    /// ticket the word carries shows: signed by the issuer, issued to the calling module, for
    /// that person, current when the call began.
    #[test]
    fn a_person_acted_for_is_the_tickets_not_the_words() {
        use mesh_core::subjects::ticket;
        let issuer = nkeys::KeyPair::new_operator();
        let stranger = nkeys::KeyPair::new_operator();
        let keys = [issuer.public_key()];
        let now = ticket::ms(std::time::SystemTime::now());
        let signed = |key: &nkeys::KeyPair, sub: &str, aud: &str| {
            let claims = ticket::Claims {
                v: 1,
                iss: key.public_key(),
                sub: sub.into(),
                aud: aud.into(),
                tool: "caller_relay".into(),
                call: "c1".into(),
                iat: now - 1000,
                exp: now + 60_000,
                may: None,
            };
            ticket::sign(&claims, key).unwrap()
        };
        let start = calllog::rfc3339(time::OffsetDateTime::now_utc());
        let event = json!({"type": calllog::SERVED_TYPE, "status": 200, "start": start,
            "requestor": {"acc": "MODULE_caller", "user": "caller", "id": 3, "server": "S"},
            "service": 1000, "system": 0, "total": 2000});
        let said = |person: &str, ticket: Option<String>| {
            let mut w = json!({"name": "whoami", "obo": true, "for_person": person,
                "caller": {"acc": "MODULE_caller", "user": "caller", "id": 3, "server": "S"},
                "at": start, "took_us": 1, "outcome": "ok", "arguments": {"bytes": 2, "digest": "d"}});
            if let Some(t) = ticket {
                w["ticket"] = json!(t);
            }
            w
        };
        let shown = |word: serde_json::Value| {
            let calls = [stored(1, "mesh-log.obo.echo.whoami", event.clone())];
            let words = [stored(1, "mesh-log.words.echo", word)];
            join(&calls, &words, &[], &keys)
                .into_iter()
                .find(|c| c.seen == Seen::BusAndModule)
                .expect("matched")
                .for_person
        };
        let good = signed(&issuer, "ann@PEOPLE", "caller");
        assert_eq!(
            shown(said("ann@PEOPLE", Some(good.clone()))).as_deref(),
            Some("ann@PEOPLE")
        );
        // Another person than the ticket's, no ticket, another issuer, another module.
        assert_eq!(shown(said("root@PEOPLE", Some(good))), None);
        assert_eq!(shown(said("ann@PEOPLE", None)), None);
        let forged = signed(&stranger, "ann@PEOPLE", "caller");
        assert_eq!(shown(said("ann@PEOPLE", Some(forged))), None);
        let elsewhere = signed(&issuer, "ann@PEOPLE", "other");
        assert_eq!(shown(said("ann@PEOPLE", Some(elsewhere))), None);
    }

    /// A caller's report is its caller's free text (issue 45): its time is when the stream
    /// took it in, and its tool only a tool call's subject of valid names, else none.
    #[test]
    fn a_report_is_timed_by_the_stream_and_names_only_a_tool() {
        let kept = time::OffsetDateTime::from_unix_timestamp(1_800_000_000).unwrap();
        let report = |seq: u64, subject: &str| Stored {
            time: Some(kept),
            ..stored(
                seq,
                "mesh-log.reports.PEOPLE.bob",
                json!({"subject": subject, "at": "1999-12-31 23:59:59.000  root@PEOPLE",
                    "outcome": "denied"}),
            )
        };
        let reports = [
            report(1, "mesh.echo.secret"),
            report(2, "mesh-obo.avu.add"),
            report(
                3,
                "mesh.avu.delete\n1999-12-31  root@PEOPLE  avu_delete  ok",
            ),
            report(4, "mesh.echo.echo  ok"),
            report(5, "mesh.echo"),
            report(6, "other.echo.echo"),
            report(7, "mesh.Echo.echo"),
            report(8, "mesh.echo.tools"),
        ];
        let joined = join(&[], &[], &reports, &[]);
        assert_eq!(joined.len(), 8, "{joined:#?}");
        for c in &joined {
            assert_eq!(c.at, calllog::rfc3339(kept), "{c:?}");
            assert_eq!(c.caller, "bob@PEOPLE");
            assert_eq!(c.seen, Seen::Caller);
        }
        let tools: Vec<Option<String>> = joined.iter().map(Call::full_tool).collect();
        assert_eq!(tools[0].as_deref(), Some("echo_secret"));
        assert_eq!(tools[1].as_deref(), Some("avu_add"));
        for (i, c) in joined.iter().enumerate().skip(2) {
            assert_eq!(
                (c.module.as_str(), c.tool.as_deref()),
                ("", None),
                "{i}: {c:?}"
            );
        }
        // A report the stream gave no time of is not shown.
        let untimed = stored(
            9,
            "mesh-log.reports.PEOPLE.bob",
            json!({"subject": "mesh.echo.echo", "at": "2026-12-01T10:00:00Z", "outcome": "denied"}),
        );
        assert!(join(&[], &[], &[untimed], &[]).is_empty());
    }

    /// Words sent together in one message are each their own, matched to the event of the
    /// tool the bus named; a word of another tool is not that call's.
    #[test]
    fn words_sent_together_are_read_each_and_the_bus_names_the_tool() {
        let event = json!({"type": calllog::SERVED_TYPE, "status": 200,
            "start": "2026-12-01T10:00:00Z",
            "requestor": {"acc": "PEOPLE", "user": "ann", "id": 7, "server": "S"},
            "service": 1000, "system": 0, "total": 2000});
        let calls = [stored(1, "mesh-log.calls.echo.echo", event)];
        let words = [stored(
            9,
            "mesh-log.words.echo",
            json!([
                word("sleep", "2026-12-01T10:00:00.001Z"),
                word("echo", "2026-12-01T10:00:00.002Z"),
                {"not": "a word"}
            ]),
        )];
        let joined = join(&calls, &words, &[], &[]);
        assert_eq!(joined.len(), 2, "{joined:#?}");
        let call = joined
            .iter()
            .find(|c| c.seen == Seen::BusAndModule)
            .unwrap();
        assert_eq!(call.tool.as_deref(), Some("echo"));
        assert!(!call.ambiguous);
        let alone = joined.iter().find(|c| c.seen == Seen::Module).unwrap();
        assert_eq!(alone.tool.as_deref(), Some("sleep"));
        assert_eq!(alone.record, (1, 9, 0));
    }

    /// A server event takes the word of its caller's connection nearest in time, within two
    /// seconds only; more than one within reach marks the match uncertain.
    #[test]
    fn an_event_takes_the_nearest_word_of_its_connection_within_the_window() {
        let event = |start: &str| {
            json!({"type": calllog::SERVED_TYPE, "status": 200, "start": start,
                "requestor": {"acc": "PEOPLE", "user": "ann", "id": 7, "server": "S"},
                "service": 1000, "system": 0, "total": 2000})
        };
        let calls = [stored(
            1,
            "mesh-log.calls.echo",
            event("2026-12-01T10:00:00Z"),
        )];
        let words = [
            stored(
                1,
                "mesh-log.words.echo",
                word("far", "2026-12-01T10:00:03Z"),
            ),
            stored(
                2,
                "mesh-log.words.echo",
                word("near", "2026-12-01T10:00:00.010Z"),
            ),
            stored(
                3,
                "mesh-log.words.echo",
                word("next", "2026-12-01T10:00:00.500Z"),
            ),
            // Another module's word of the same connection and time: never this call's.
            stored(
                4,
                "mesh-log.words.avu",
                word("other", "2026-12-01T10:00:00Z"),
            ),
        ];
        let joined = join(&calls, &words, &[], &[]);
        let call = joined
            .iter()
            .find(|c| c.seen == Seen::BusAndModule)
            .unwrap();
        assert_eq!(call.tool.as_deref(), Some("near"));
        assert_eq!(call.module, "echo");
        assert!(call.ambiguous, "another word within the window");
        // Left unmatched, each the module's word alone.
        for name in ["far", "next", "other"] {
            let c = joined
                .iter()
                .find(|c| c.tool.as_deref() == Some(name))
                .unwrap();
            assert_eq!(c.seen, Seen::Module, "{name}");
        }
    }
}
