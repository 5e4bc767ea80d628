//! A module's word on each call it takes, for the mesh's call log (`subjects::calllog`): the
//! tool, the caller as nats-server stamped them, how it ended, sizes and digests. Said once
//! per call, when it ends, or — its handler dropped for a cancel — as it is dropped.

use std::time::Instant;

use async_nats::{Client, HeaderMap, Message};

use crate::subjects::calllog::{self, Body, ClientInfo, Said, Word};
use crate::subjects::{HEADER_CALL, HEADER_REQUEST_INFO};

/// The W3C trace context header a call may carry.
pub(crate) const TRACEPARENT: &str = "traceparent";

/// A word being made for one call; said with [`Saying::end`], or as cancelled when dropped.
pub(crate) struct Saying {
    client: Client,
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
    /// Starts the word on `msg`, a call of `name` (a tool, or a verb).
    pub(crate) fn start(client: &Client, name: &str, obo: bool, msg: &Message) -> Saying {
        let headers = msg.headers.as_ref();
        let text = |key: &str| {
            headers
                .and_then(|h| h.get(key))
                .map(|v| v.as_str().chars().take(128).collect::<String>())
        };
        Saying {
            client: client.clone(),
            word: Some(Word {
                name: name.to_owned(),
                obo,
                call: text(HEADER_CALL),
                caller: stamped(headers),
                for_person: None,
                at: calllog::now(),
                took_us: 0,
                outcome: Said::Ok,
                arguments: Body::of(&msg.payload),
                result: None,
                trace: text(TRACEPARENT),
            }),
            started: Instant::now(),
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

    /// Says how the call ended, with the reply's bytes if one was sent.
    pub(crate) async fn end(self, outcome: Said, reply: &[u8]) {
        let mut body = Body::of(reply);
        if self.values {
            body.value = Body::value_of(reply);
            body.cut = body.value.is_none();
        }
        self.end_with(outcome, body).await;
    }

    /// As [`Saying::end`], with the reply's size and digest already known (the `tools`
    /// verb's reply is the same every time: hashed once).
    pub(crate) async fn end_with(mut self, outcome: Said, reply: Body) {
        if let Some(mut word) = self.word.take() {
            word.outcome = outcome;
            word.result = Some(reply);
            word.took_us = self.started.elapsed().as_micros() as u64;
            say(&self.client, &word).await;
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
        word.outcome = Said::Cancelled;
        word.took_us = self.started.elapsed().as_micros() as u64;
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            let client = self.client.clone();
            rt.spawn(async move { say(&client, &word).await });
        }
    }
}

async fn say(client: &Client, word: &Word) {
    let mut body = serde_json::to_vec(word).expect("a word always serialises");
    // Values a caller chose can come out longer than they went in (`1e15` is written
    // `1000000000000000.0`): a word the stream would refuse is said without them.
    if body.len() > calllog::MAX_WORD {
        let mut cut = word.clone();
        for b in std::iter::once(&mut cut.arguments).chain(cut.result.as_mut()) {
            if b.value.take().is_some() {
                b.cut = true;
            }
        }
        body = serde_json::to_vec(&cut).expect("a word always serialises");
    }
    if let Err(e) = client.publish(calllog::WORDS_SUBJECT, body.into()).await {
        tracing::debug!("a word for the call log was not sent: {e}");
    }
}
