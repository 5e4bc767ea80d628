//! Quick verbs answered in turn by caller: the listing, a module's `tools`, the services
//! protocol, the ticket verbs. Between rounds of answers, everything the bus has delivered
//! is read (up to a bound), so a flood fills its own queue rather than the connection's
//! buffer, where someone else's request would be dropped with it; sorted into a short queue
//! per caller (the identity nats-server stamped), and answered one per caller in turn: a
//! caller sending thousands a second waits behind themselves, and anyone else is answered
//! within one round. Past their queue a caller is answered busy at once — every request
//! answered, since nats-server holds a request's reply mapping until its answer (up to the
//! export's threshold, an hour for a tool's); what is held is bounded in requests and bytes
//! whoever sends.

use std::collections::{HashMap, VecDeque};
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use async_nats::{Client, Message, Subscriber};
use futures_util::{FutureExt, Stream, StreamExt};

use crate::actor::{self, Layout, Route};
use crate::subjects::limits::Busy;

/// Requests one person may have waiting on a verb people use (the listing, `tools`, `$SRV`,
/// tickets).
pub const PER_CALLER: usize = 16;
/// Requests one caller may have waiting on a verb modules use once per call they serve
/// (whether a ticket's call still runs, its end): a busy module asks many at once.
pub const PER_MODULE: usize = 1024;
/// Requests all callers may have waiting together.
const TOTAL: usize = 4096;
/// Bytes of requests all callers may have waiting together.
const BYTES: usize = 16 * 1024 * 1024;
/// Requests read off the bus before the next round of answers.
const READ_AHEAD: usize = 1024;

/// Who sent a request, as a key for their turn: the identity nats-server stamped where it
/// crossed into the module's account; one key for everything unstamped (the local layout,
/// where nobody is named).
pub fn caller_key(msg: &Message, layout: Layout) -> Arc<str> {
    match actor::identify(
        msg.headers.as_ref(),
        msg.description.as_deref(),
        layout,
        Route::Direct,
        &msg.subject,
    ) {
        Ok(caller) => Arc::from(caller.id().unwrap_or_default()),
        Err(_) => Arc::from(""),
    }
}

/// A request's bytes as it came (headers and payload).
fn size(msg: &Message) -> usize {
    msg.length.max(msg.payload.len())
}

/// The requests waiting, by caller, and the order their turns come in.
struct Queues {
    /// Requests one caller may have waiting.
    per_caller: usize,
    by_caller: HashMap<Arc<str>, VecDeque<Message>>,
    order: VecDeque<Arc<str>>,
    held: usize,
    bytes: usize,
}

impl Queues {
    fn new(per_caller: usize) -> Queues {
        Queues {
            per_caller,
            by_caller: HashMap::new(),
            order: VecDeque::new(),
            held: 0,
            bytes: 0,
        }
    }

    /// Why a request of `caller`'s of `size` bytes cannot be kept: their queue, or
    /// everyone's, is full. Where nobody is named (the local layout: one key for all), the
    /// one queue is everyone's and only the bound of all applies.
    fn refusal(&self, caller: &Arc<str>, size: usize) -> Option<Refusal> {
        let mine = self.by_caller.get(caller).map_or(0, VecDeque::len);
        if !caller.is_empty() && mine >= self.per_caller {
            Some(Refusal::Yours)
        } else if self.held >= TOTAL || self.bytes + size > BYTES {
            Some(Refusal::Full)
        } else {
            None
        }
    }

    /// Keeps `msg` for its caller's turn (checked by [`Queues::refusal`] first).
    fn keep(&mut self, caller: Arc<str>, msg: Message) {
        self.held += 1;
        self.bytes += size(&msg);
        let queue = self.by_caller.entry(caller.clone()).or_default();
        if queue.is_empty() {
            self.order.push_back(caller);
        }
        queue.push_back(msg);
    }

    /// The next caller's oldest request, their turn then passed on.
    fn next(&mut self) -> Option<Message> {
        let caller = self.order.pop_front()?;
        let queue = self.by_caller.get_mut(&caller)?;
        let msg = queue.pop_front()?;
        self.held -= 1;
        self.bytes -= size(&msg);
        if queue.is_empty() {
            self.by_caller.remove(&caller);
        } else {
            self.order.push_back(caller);
        }
        Some(msg)
    }
}

/// Why a request was not kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Refusal {
    /// The caller's own queue is full.
    Yours,
    /// Everyone's together is.
    Full,
}

/// The busy answers, made once: a flood is answered request by request.
struct BusyReplies {
    yours: (async_nats::HeaderMap, bytes::Bytes),
    full: (async_nats::HeaderMap, bytes::Bytes),
}

impl BusyReplies {
    fn new(what: &str, per_caller: usize) -> BusyReplies {
        let busy = |why: String| {
            Busy {
                retry_after: Duration::from_secs(1),
                why,
            }
            .reply(what)
        };
        BusyReplies {
            yours: busy(format!("{per_caller} of your requests wait to be answered")),
            full: busy("this verb's queue is full".into()),
        }
    }
}

/// The requests of `subs` until `stop`, then what the server had already sent them: at
/// `stop` each is drained (unsubscribed, and the server's answer to a PING after that
/// awaited), so a request sent to this instance just before it stopped is still answered
/// rather than waiting out its caller's deadline; the stream ends once all have drained.
pub fn until_drained(
    subs: impl IntoIterator<Item = Subscriber>,
    stop: impl Future<Output = ()> + Send + 'static,
) -> impl Stream<Item = Message> + Send {
    let subs = futures_util::stream::select_all(subs);
    let stop: Option<std::pin::Pin<Box<dyn Future<Output = ()> + Send>>> = Some(Box::pin(stop));
    futures_util::stream::unfold((subs, stop), |(mut subs, mut stop)| async move {
        if let Some(stopping) = stop.as_mut() {
            tokio::select! {
                biased;
                () = stopping => {
                    stop = None;
                    for sub in subs.iter_mut() {
                        // The client closed (not a disconnect, which waits for the next
                        // connection): nothing more can come.
                        if sub.drain().await.is_err() {
                            return None;
                        }
                    }
                }
                msg = subs.next() => return msg.map(|m| (m, (subs, stop))),
            }
        }
        subs.next().await.map(|m| (m, (subs, stop)))
    })
}

/// Answers `requests` with `answer`, in turn by the caller `caller_of` names, each caller
/// with at most `per_caller` waiting, until the stream ends. `what` names the verb in a busy
/// answer.
pub async fn answer_in_turn<S, K, A, F>(
    client: Client,
    what: &str,
    per_caller: usize,
    requests: S,
    caller_of: K,
    mut answer: A,
) where
    S: Stream<Item = Message>,
    K: Fn(&Message) -> Arc<str>,
    A: FnMut(Message) -> F,
    F: Future<Output = ()>,
{
    let mut requests = std::pin::pin!(requests);
    let busy = BusyReplies::new(what, per_caller);
    let mut queues = Queues::new(per_caller);
    let mut open = true;
    while open || queues.held > 0 {
        // Wait for a request only with none to answer.
        if queues.held == 0 {
            match requests.next().await {
                Some(msg) => keep_or_refuse(&client, &busy, &mut queues, &caller_of, msg).await,
                None => open = false,
            }
        }
        // Everything already read off the bus, up to a bound: sorted before anyone is
        // answered, so a flood cannot push another's request out of the connection's buffer.
        for _ in 0..READ_AHEAD {
            if !open {
                break;
            }
            match requests.next().now_or_never() {
                Some(Some(msg)) => {
                    keep_or_refuse(&client, &busy, &mut queues, &caller_of, msg).await
                }
                Some(None) => open = false,
                None => break,
            }
        }
        // One round: a request of each caller waiting.
        let round = queues.order.len();
        for _ in 0..round {
            let Some(msg) = queues.next() else { break };
            answer(msg).await;
        }
    }
}

async fn keep_or_refuse<K: Fn(&Message) -> Arc<str>>(
    client: &Client,
    busy: &BusyReplies,
    queues: &mut Queues,
    caller_of: &K,
    msg: Message,
) {
    let caller = caller_of(&msg);
    let Some(refusal) = queues.refusal(&caller, size(&msg)) else {
        queues.keep(caller, msg);
        return;
    };
    // Nobody to tell (a message said without a reply, an end).
    let Some(reply) = msg.reply else { return };
    let (headers, body) = match refusal {
        Refusal::Yours => &busy.yours,
        Refusal::Full => &busy.full,
    };
    if let Err(e) = client
        .publish_with_headers(reply, headers.clone(), body.clone())
        .await
    {
        tracing::debug!("a busy answer was not sent: {e}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn msg(n: usize) -> Message {
        Message {
            subject: "mesh.catalog.listing".into(),
            reply: Some(format!("_INBOX.{n}").into()),
            payload: Default::default(),
            headers: None,
            status: None,
            description: None,
            length: 0,
        }
    }

    #[test]
    fn each_caller_in_turn_and_a_flood_waits_behind_itself() {
        let mut q = Queues::new(PER_CALLER);
        for n in 0..PER_CALLER {
            assert_eq!(q.refusal(&"flood".into(), 0), None);
            q.keep("flood".into(), msg(n));
        }
        assert_eq!(q.refusal(&"flood".into(), 0), Some(Refusal::Yours));
        assert_eq!(q.refusal(&"eve".into(), 0), None);
        q.keep("eve".into(), msg(1000));
        // The flooder's first, then eve's: she waits one request, not sixteen.
        assert_eq!(q.next().unwrap().reply.unwrap().as_str(), "_INBOX.0");
        assert_eq!(q.next().unwrap().reply.unwrap().as_str(), "_INBOX.1000");
        while q.next().is_some() {}
        assert_eq!((q.held, q.bytes, q.by_caller.len()), (0, 0, 0));
    }

    #[test]
    fn where_nobody_is_named_only_the_bound_of_all_applies() {
        let mut q = Queues::new(PER_CALLER);
        for n in 0..TOTAL {
            assert_eq!(q.refusal(&"".into(), 0), None, "{n}");
            q.keep("".into(), msg(n));
        }
        assert_eq!(q.refusal(&"".into(), 0), Some(Refusal::Full));
    }
}
