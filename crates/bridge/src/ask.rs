//! An older server's question during a call (`elicitation/create`, before 2026-07-28) as
//! the mesh's `input_required`: the call at the server stays open while its caller is asked,
//! one question per round trip; the caller's next call (its state sealed to it and the tool)
//! hands the answer to the waiting server and goes on waiting for the call's end.
//!
//! MCP before 2026-07-28 does not say which call a question belongs to. A question is the
//! call's that is **active**: open at the server and not parked on a question of its own (a
//! server waits for a question's answer before it goes on with that call). So that there is
//! never more than one, a server that has asked once has its calls **take turns**: a call
//! holds the server's one turn while it is active (from its request until it ends or parks,
//! and again from its answer on), and the others wait for it — within their deadlines, at
//! most [`MAX_WAITING`] at once, past that answered busy. A server that never asks is called
//! without turns (its calls hold it shared, so the first turn after its first question waits
//! for the calls open then too). A question no single call can own (the first, while several calls were
//! already open; one from a call given up) is refused to the server with an error that says
//! why — never answered for anybody, since a made-up "decline" would reach a person as their
//! own answer. A question unanswered for [`ANSWER_WITHIN`] (its caller could not ask, or
//! left) lets its call go: cancelled at the server, which is told its question got no answer.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use rmcp::model::{ElicitResult, ServerResult};
use rmcp::{ErrorData, ServiceError};
use serde_json::Value;
use tokio::sync::{OwnedRwLockReadGuard, OwnedRwLockWriteGuard, RwLock, mpsc, oneshot};

/// How long a server's question waits for its caller's answer.
pub const ANSWER_WITHIN: Duration = Duration::from_secs(600);

/// The most calls parked on a question at once: more, and the oldest is let go.
const MAX_PARKED: usize = 1024;

/// The most calls waiting for their turn at one server: more are answered busy.
pub const MAX_WAITING: usize = 64;

/// A server's question, and where its answer goes.
pub struct Question {
    pub params: Value,
    pub answer: oneshot::Sender<ElicitResult>,
}

/// A call open at the server: its end, and the questions its server asks meanwhile.
pub struct InFlight {
    /// Its place among the calls open ([`Asking::open`]).
    pub id: u64,
    pub end: tokio::task::JoinHandle<Option<Result<ServerResult, ServiceError>>>,
    pub questions: mpsc::Receiver<Question>,
    /// Tells the call's task to cancel it at the server (so does dropping it).
    pub cancel: Option<oneshot::Sender<()>>,
}

/// A call's hold on the server while it is active: shared where the server never asked a
/// question, its one turn where it has. Calls made before its first question hold it
/// shared, so the first call to take its turn waits for them to end too.
pub enum Turn {
    Shared { _held: OwnedRwLockReadGuard<()> },
    Own { _held: OwnedRwLockWriteGuard<()> },
}

/// Why a call did not get its turn.
#[derive(Debug, thiserror::Error)]
pub enum TurnError {
    #[error(
        "{0} calls wait their turn at the MCP server already (it asks its callers questions, so its calls run one at a time); call again in a moment"
    )]
    Busy(usize),
    #[error(
        "the call waited {0:?} for its turn at the MCP server (it asks its callers questions, so its calls run one at a time) and was not made; call again in a moment"
    )]
    Slow(Duration),
}

/// A call open at the server, closed when dropped.
pub struct Open {
    asking: Arc<Asking>,
    id: u64,
}

impl Drop for Open {
    fn drop(&mut self) {
        // Its turn goes with it.
        self.asking.open_calls().remove(&self.id);
    }
}

/// A call open at the server, as its questions find it.
struct Entry {
    questions: mpsc::Sender<Question>,
    /// Waiting for its caller's answer: no question of the server's is its.
    parked: bool,
    turn: Option<Turn>,
}

/// A call whose question went to its caller.
pub struct Parked {
    pub call: InFlight,
    pub answer: oneshot::Sender<ElicitResult>,
    since: Instant,
}

/// The calls open at one server, for its questions to find.
pub struct Asking {
    next: AtomicU64,
    open: Mutex<HashMap<u64, Entry>>,
    parked: Mutex<HashMap<String, Parked>>,
    /// Whether the server has asked a question: from then on its calls take turns.
    asks: AtomicBool,
    turn: Arc<RwLock<()>>,
    waiting: AtomicUsize,
}

impl Default for Asking {
    fn default() -> Self {
        Asking {
            next: AtomicU64::new(0),
            open: Mutex::default(),
            parked: Mutex::default(),
            asks: AtomicBool::new(false),
            turn: Arc::new(RwLock::new(())),
            waiting: AtomicUsize::new(0),
        }
    }
}

impl Asking {
    fn open_calls(&self) -> std::sync::MutexGuard<'_, HashMap<u64, Entry>> {
        self.open.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn parked_calls(&self) -> std::sync::MutexGuard<'_, HashMap<String, Parked>> {
        self.parked.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The call's hold on the server: shared where it never asked a question, else its
    /// turn, waited for `within`.
    pub async fn turn(&self, within: Duration) -> Result<Turn, TurnError> {
        let lock = self.turn.clone();
        // Failing only once a call waits for its turn: the server asks.
        if !self.asks.load(Ordering::Acquire)
            && let Ok(shared) = lock.clone().try_read_owned()
        {
            return Ok(Turn::Shared { _held: shared });
        }
        if let Ok(own) = lock.clone().try_write_owned() {
            return Ok(Turn::Own { _held: own });
        }
        let waiting = self.waiting.fetch_add(1, Ordering::AcqRel);
        let waited = if waiting >= MAX_WAITING {
            Err(TurnError::Busy(waiting))
        } else {
            tokio::time::timeout(within, lock.write_owned())
                .await
                .map(|own| Turn::Own { _held: own })
                .map_err(|_| TurnError::Slow(within))
        };
        self.waiting.fetch_sub(1, Ordering::AcqRel);
        waited
    }

    /// A new call open at the server (before its request is sent, so that a question asked
    /// at once finds it), holding `turn`: its id, and where its server's questions arrive.
    pub fn open(&self, turn: Turn) -> (u64, mpsc::Receiver<Question>) {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let (questions, rx) = mpsc::channel(4);
        self.open_calls().insert(
            id,
            Entry {
                questions,
                parked: false,
                turn: Some(turn),
            },
        );
        (id, rx)
    }

    /// Holds call `id` open until the returned guard is dropped (when the call is over at
    /// the server).
    pub fn hold(self: &Arc<Self>, id: u64) -> Open {
        Open {
            asking: self.clone(),
            id,
        }
    }

    /// Parks `call` on its question under `key` until its caller answers: it gives up its
    /// turn meanwhile, and is let go (cancelled at the server) if no answer comes within
    /// [`ANSWER_WITHIN`].
    pub fn park(
        self: &Arc<Self>,
        key: String,
        call: InFlight,
        answer: oneshot::Sender<ElicitResult>,
    ) {
        if let Some(entry) = self.open_calls().get_mut(&call.id) {
            entry.parked = true;
            entry.turn = None;
        }
        let parked = Parked {
            call,
            answer,
            since: Instant::now(),
        };
        self.put(key.clone(), parked);
        let asking = Arc::downgrade(self);
        tokio::spawn(let_go(asking, key));
    }

    /// Parks again a call [`Asking::resume`] took, as it was (its answer not handed over).
    pub fn put(&self, key: String, parked: Parked) {
        let mut all = self.parked_calls();
        // Those long unanswered and, past the bound, the oldest, are let go: their calls
        // cancelled at the server as they are dropped.
        all.retain(|_, p| p.since.elapsed() < ANSWER_WITHIN);
        if all.len() >= MAX_PARKED
            && let Some(oldest) = all
                .iter()
                .min_by_key(|(_, p)| p.since)
                .map(|(k, _)| k.clone())
        {
            all.remove(&oldest);
        }
        all.insert(key, parked);
    }

    /// The call parked under `key`, once.
    pub fn resume(&self, key: &str) -> Option<Parked> {
        self.parked_calls().remove(key)
    }

    /// Call `id`, answered, is active again, holding `turn`.
    pub fn activate(&self, id: u64, turn: Turn) {
        if let Some(entry) = self.open_calls().get_mut(&id) {
            entry.parked = false;
            entry.turn = Some(turn);
        }
    }

    /// A question from the server: to the one active call, if there is exactly one.
    pub async fn ask(&self, params: Value) -> Result<ElicitResult, ErrorData> {
        // From now on the server's calls take turns, so that each question has one owner.
        self.asks.store(true, Ordering::Release);
        let active: Vec<mpsc::Sender<Question>> = self
            .open_calls()
            .values()
            .filter(|e| !e.parked)
            .map(|e| e.questions.clone())
            .collect();
        let [call] = active.as_slice() else {
            let why = if active.is_empty() {
                "no call is waiting at this server for a question".to_owned()
            } else {
                format!(
                    "{} calls are open at this server and MCP does not say which one asks (calls made from now on take turns)",
                    active.len()
                )
            };
            tracing::warn!("an MCP server's question was refused: {why}");
            return Err(ErrorData::internal_error(
                format!("the mesh bridge asked nobody this question: {why}"),
                None,
            ));
        };
        let (answer, answered) = oneshot::channel();
        // Handing the question over waits too (a call reads its next question only once it
        // has been answered): the whole of it within the bound.
        let asked = async {
            call.send(Question { params, answer }).await.ok()?;
            answered.await.ok()
        };
        match tokio::time::timeout(ANSWER_WITHIN, asked).await {
            Ok(Some(answer)) => Ok(answer),
            _ => Err(ErrorData::internal_error(
                "the mesh bridge got no answer to this question: its caller could not be asked, did not answer, or gave the call up; the call is cancelled",
                None,
            )),
        }
    }
}

/// Lets the call parked under `key` go once its question has waited [`ANSWER_WITHIN`]:
/// dropped, it is cancelled at the server, whose question gets an error.
async fn let_go(asking: Weak<Asking>, key: String) {
    tokio::time::sleep(ANSWER_WITHIN).await;
    let Some(asking) = asking.upgrade() else {
        return;
    };
    let mut parked = asking.parked_calls();
    if parked
        .get(&key)
        .is_some_and(|p| p.since.elapsed() >= ANSWER_WITHIN)
    {
        parked.remove(&key);
    }
}
