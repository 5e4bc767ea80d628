//! A module's word on each call it takes, for the mesh's call log (`subjects::calllog`): the
//! tool, the caller as nats-server stamped them, how it ended, sizes and digests. Said once
//! per call, when it ends, or — its handler dropped for a cancel — as it is dropped; sent a
//! few together (at most 50 ms after the first, or once they fill 14 KiB), so that a call
//! costs the bus one message of its own, the answer, and not a second.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_nats::{Client, HeaderMap, Message};

use crate::subjects::calllog::{self, Body, ClientInfo, Said, Word};
use crate::subjects::{HEADER_CALL, HEADER_REQUEST_INFO};

/// The W3C trace context header a call may carry.
pub(crate) const TRACEPARENT: &str = "traceparent";

/// Words of refused and busy calls each caller may have said a second: past it, their
/// words are counted, not said, and the next one said carries the count. A caller flooding
/// a module with calls it refuses spends their own words, not the module's part of the log.
const REFUSALS_A_SECOND: u32 = 10;
/// Callers the budget remembers at most: past it, it starts afresh (a flood of names costs
/// memory only this far).
const CALLERS_REMEMBERED: usize = 4096;

/// How long a word waits for others to go with it.
const GATHER: Duration = Duration::from_millis(50);
/// The most bytes of words sent together (a word is at most `calllog::MAX_WORD`).
const BATCH_BYTES: usize = 14 * 1024;

/// Where a module's words go: each caller's budget, and the words gathered to go together.
pub(crate) struct Speaker {
    client: Client,
    budget: Budget,
    gathered: Mutex<Gathered>,
}

/// Words waiting to be sent.
#[derive(Default)]
struct Gathered {
    /// Being filled: a JSON array without its closing bracket.
    open: Vec<u8>,
    /// Filled, in the order they filled, for the next flush.
    full: Vec<Vec<u8>>,
}

impl Speaker {
    pub(crate) fn new(client: Client) -> Arc<Speaker> {
        Arc::new(Speaker {
            client,
            budget: Budget::default(),
            gathered: Mutex::default(),
        })
    }

    /// Gathers `word` with the others waiting; the first of them starts the wait. Sends
    /// nothing itself (a full batch goes from a task of its own): a call's future holds no
    /// room for the word's sending.
    fn say(self: &Arc<Self>, word: &Word) {
        let body = word_bytes(word);
        let (filled, first) = {
            let mut gathered = self.gathered.lock().unwrap_or_else(|p| p.into_inner());
            let open = &mut gathered.open;
            let filled = !open.is_empty() && open.len() + body.len() + 2 > BATCH_BYTES;
            if filled {
                let batch = std::mem::take(open);
                gathered.full.push(batch);
            }
            let open = &mut gathered.open;
            let first = open.is_empty();
            open.push(if first { b'[' } else { b',' });
            open.extend_from_slice(&body);
            (filled, first)
        };
        if filled {
            let speaker = self.clone();
            tokio::spawn(async move { speaker.flush_full().await });
        }
        if first {
            let speaker = self.clone();
            tokio::spawn(async move {
                tokio::time::sleep(GATHER).await;
                speaker.flush().await;
            });
        }
    }

    /// Sends what is gathered now, the filled batches first (a stop does before its last
    /// flush).
    pub(crate) async fn flush(&self) {
        let (full, open) = {
            let mut gathered = self.gathered.lock().unwrap_or_else(|p| p.into_inner());
            (
                std::mem::take(&mut gathered.full),
                std::mem::take(&mut gathered.open),
            )
        };
        for batch in full.into_iter().chain(Some(open).filter(|b| !b.is_empty())) {
            self.publish(batch).await;
        }
    }

    /// Sends the filled batches, leaving the one being filled to its wait.
    async fn flush_full(&self) {
        let full =
            std::mem::take(&mut self.gathered.lock().unwrap_or_else(|p| p.into_inner()).full);
        for batch in full {
            self.publish(batch).await;
        }
    }

    async fn publish(&self, mut batch: Vec<u8>) {
        batch.push(b']');
        if let Err(e) = self
            .client
            .publish(calllog::WORDS_SUBJECT, batch.into())
            .await
        {
            tracing::debug!("words for the call log were not sent: {e}");
        }
    }
}

/// Each caller's words of refused and busy calls this second.
#[derive(Default)]
pub(crate) struct Budget {
    callers: Mutex<HashMap<String, Spent>>,
}

#[derive(Clone, Copy)]
struct Spent {
    since: Instant,
    said: u32,
    unsaid: u64,
}

impl Budget {
    /// Whether `caller` may have one more refusal said now; if so, how many went unsaid
    /// before it.
    fn spend(&self, caller: &str) -> Option<u64> {
        let mut callers = self.callers.lock().unwrap_or_else(|p| p.into_inner());
        if callers.len() >= CALLERS_REMEMBERED && !callers.contains_key(caller) {
            callers.clear();
        }
        let now = Instant::now();
        let spent = callers.entry(caller.to_owned()).or_insert(Spent {
            since: now,
            said: 0,
            unsaid: 0,
        });
        if now.duration_since(spent.since) >= Duration::from_secs(1) {
            spent.since = now;
            spent.said = 0;
        }
        if spent.said < REFUSALS_A_SECOND {
            spent.said += 1;
            Some(std::mem::take(&mut spent.unsaid))
        } else {
            spent.unsaid += 1;
            None
        }
    }
}

/// A word being made for one call; said with [`Saying::end`], or as cancelled when dropped.
pub(crate) struct Saying {
    speaker: Arc<Speaker>,
    word: Option<Word>,
    started: Instant,
    /// Whether the word keeps the values (the grants file asks it of this tool).
    values: bool,
}

/// The stamped caller, when exactly one stamp reads (the runtime refuses any other call).
fn stamped(headers: Option<&HeaderMap>) -> ClientInfo {
    match crate::actor::values(headers, HEADER_REQUEST_INFO).as_slice() {
        [one] => serde_json::from_str(one).unwrap_or_default(),
        _ => ClientInfo::default(),
    }
}

impl Saying {
    /// Starts the word on `msg`, a call of `name` (a tool, or a verb), taken at `started`
    /// from the caller `stamp` names (read from the headers when not given).
    pub(crate) fn start(
        speaker: &Arc<Speaker>,
        name: &str,
        obo: bool,
        msg: &Message,
        started: Instant,
        stamp: Option<ClientInfo>,
    ) -> Saying {
        let headers = msg.headers.as_ref();
        let text = |key: &str| {
            super::header(headers, key).map(|v| v.chars().take(128).collect::<String>())
        };
        Saying {
            speaker: speaker.clone(),
            word: Some(Word {
                name: name.to_owned(),
                obo,
                call: text(HEADER_CALL),
                caller: stamp.unwrap_or_else(|| stamped(headers)),
                for_person: None,
                // On a call made for a person: the ticket it came with (no longer than a
                // ticket is), for the log's reader to check the person against.
                ticket: obo
                    .then(|| super::header(headers, crate::subjects::ticket::HEADER_TICKET))
                    .flatten()
                    .filter(|t| t.len() <= crate::subjects::ticket::MAX_LEN)
                    .map(str::to_owned),
                at: calllog::now(),
                took_us: 0,
                outcome: Said::Ok,
                arguments: Body::of(&msg.payload),
                result: None,
                trace: text(TRACEPARENT),
                unsaid: 0,
            }),
            started,
            values: false,
        }
    }

    /// Keeps the values of the call's arguments (and, at its end, its result) in the word:
    /// the grants file asks it of this tool.
    pub(crate) fn keep_values(&mut self, arguments: &[u8]) {
        if let Some(w) = &mut self.word {
            w.arguments.value = calllog::Body::value_of(arguments);
            w.arguments.cut = w.arguments.value.is_none();
            self.values = true;
        }
    }

    /// The person a module acting for people named (checked by the runtime).
    pub(crate) fn for_person(&mut self, person: Option<String>) {
        if let Some(w) = &mut self.word {
            w.for_person = person;
        }
    }

    /// Says how the call ended, `took` after it was taken, with the reply's bytes if one was
    /// sent. A refused, busy or cancelled call's word is said within its caller's budget only.
    pub(crate) fn end(mut self, outcome: Said, reply: &[u8], took: Duration) {
        let Some(mut word) = self.word.take() else {
            return;
        };
        if !self.within_budget(&mut word, outcome) {
            return;
        }
        let mut body = Body::of(reply);
        if self.values {
            body.value = Body::value_of(reply);
            body.cut = body.value.is_none();
        }
        word.outcome = outcome;
        word.result = Some(body);
        word.took_us = took.as_micros() as u64;
        self.speaker.say(&word);
    }

    /// Whether a word of this outcome is said: always for a call that ran; for one refused,
    /// busy or cancelled, while its caller has words left this second (the count of those
    /// unsaid before goes with it).
    fn within_budget(&self, word: &mut Word, outcome: Said) -> bool {
        if matches!(outcome, Said::Ok | Said::ToolError) {
            return true;
        }
        let caller = format!("{}@{}", word.caller.user, word.caller.acc);
        match self.speaker.budget.spend(&caller) {
            Some(unsaid) => {
                word.unsaid = unsaid;
                true
            }
            None => false,
        }
    }
}

impl Drop for Saying {
    /// Dropped unsaid: its handler was dropped (the caller cancelled it, or the module
    /// stopped), so nothing was answered.
    fn drop(&mut self) {
        let Some(mut word) = self.word.take() else {
            return;
        };
        if !self.within_budget(&mut word, Said::Cancelled) {
            return;
        }
        word.outcome = Said::Cancelled;
        word.took_us = self.started.elapsed().as_micros() as u64;
        if tokio::runtime::Handle::try_current().is_ok() {
            self.speaker.say(&word);
        }
    }
}

/// A word as JSON, said without its values where they would make it longer than the log
/// keeps.
fn word_bytes(word: &Word) -> Vec<u8> {
    // Room for a word without values at once, instead of growing into it a few times.
    let mut body = Vec::with_capacity(768);
    serde_json::to_writer(&mut body, word).expect("a word always serialises");
    // Values a caller chose can come out longer than they went in (`1e15` is written
    // `1000000000000000.0`): a word the stream would refuse is said without them.
    if body.len() + 2 > calllog::MAX_WORD {
        let mut cut = word.clone();
        for b in std::iter::once(&mut cut.arguments).chain(cut.result.as_mut()) {
            if b.value.take().is_some() {
                b.cut = true;
            }
        }
        body = serde_json::to_vec(&cut).expect("a word always serialises");
    }
    body
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_caller_past_their_refusals_a_second_spends_their_own_budget() {
        let budget = Budget::default();
        for _ in 0..REFUSALS_A_SECOND {
            assert_eq!(budget.spend("guest@PEOPLE"), Some(0));
        }
        for _ in 0..5 {
            assert_eq!(budget.spend("guest@PEOPLE"), None);
        }
        // Another caller's are theirs.
        assert_eq!(budget.spend("root@PEOPLE"), Some(0));
        // The next second, the first said carries the count.
        {
            let mut callers = budget.callers.lock().unwrap();
            let spent = callers.get_mut("guest@PEOPLE").unwrap();
            spent.since -= Duration::from_secs(1);
        }
        assert_eq!(budget.spend("guest@PEOPLE"), Some(5));
        assert_eq!(budget.spend("guest@PEOPLE"), Some(0));
    }
}
