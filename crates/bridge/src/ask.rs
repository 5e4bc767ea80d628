//! An older server's question during a call (`elicitation/create`, before 2026-07-28) as
//! the mesh's `input_required`: the call at the server stays open while its caller is asked,
//! one question per round trip; the caller's next call (its state sealed to it and the tool)
//! hands the answer to the waiting server and goes on waiting for the call's end.
//!
//! MCP on stdio does not say which call a question belongs to: a question is the call's when
//! exactly one call is open at the server; with several open, it is declined (the log says
//! why). A question unanswered for [`ANSWER_WITHIN`] is cancelled at the server.

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use rmcp::model::{ElicitResult, ElicitationAction, ServerResult};
use rmcp::{ErrorData, ServiceError};
use serde_json::Value;
use tokio::sync::{mpsc, oneshot};

/// How long a server's question waits for its caller's answer.
pub const ANSWER_WITHIN: Duration = Duration::from_secs(600);

/// The most calls parked on a question at once: more, and the oldest is let go.
const MAX_PARKED: usize = 1024;

/// A server's question, and where its answer goes.
pub struct Question {
    pub params: Value,
    pub answer: oneshot::Sender<ElicitResult>,
}

/// A call open at the server: its end, and the questions its server asks meanwhile.
pub struct InFlight {
    pub end: tokio::task::JoinHandle<Option<Result<ServerResult, ServiceError>>>,
    pub questions: mpsc::Receiver<Question>,
    /// Tells the call's task to cancel it at the server.
    pub cancel: Option<oneshot::Sender<()>>,
}

/// A call open at the server, closed when dropped.
pub struct Open {
    asking: std::sync::Arc<Asking>,
    id: u64,
}

impl Drop for Open {
    fn drop(&mut self) {
        self.asking
            .open
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&self.id);
    }
}

/// A call whose question went to its caller.
struct Parked {
    call: InFlight,
    answer: oneshot::Sender<ElicitResult>,
    since: Instant,
}

/// The calls open at one server, for its questions to find.
#[derive(Default)]
pub struct Asking {
    next: AtomicU64,
    open: Mutex<HashMap<u64, mpsc::Sender<Question>>>,
    parked: Mutex<HashMap<String, Parked>>,
}

impl Asking {
    /// A new call open at the server: its id, and where its server's questions arrive.
    pub fn open(&self) -> (u64, mpsc::Receiver<Question>) {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = mpsc::channel(4);
        self.open
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(id, tx);
        (id, rx)
    }

    /// Holds call `id` open until the returned guard is dropped (when the call is over at
    /// the server).
    pub fn hold(self: &std::sync::Arc<Self>, id: u64) -> Open {
        Open {
            asking: self.clone(),
            id,
        }
    }

    /// Parks `call` on its question under `key` until its caller answers.
    pub fn park(&self, key: String, call: InFlight, answer: oneshot::Sender<ElicitResult>) {
        let mut parked = self.parked.lock().unwrap_or_else(|p| p.into_inner());
        // Those long unanswered (their server was told so already) and, past the bound, the
        // oldest, are let go: their calls cancelled at the server.
        parked.retain(|_, p| p.since.elapsed() < ANSWER_WITHIN);
        if parked.len() >= MAX_PARKED
            && let Some(oldest) = parked
                .iter()
                .min_by_key(|(_, p)| p.since)
                .map(|(k, _)| k.clone())
        {
            parked.remove(&oldest);
        }
        parked.insert(
            key,
            Parked {
                call,
                answer,
                since: Instant::now(),
            },
        );
    }

    /// The call parked under `key`, once: the caller's answer goes to its server.
    pub fn resume(&self, key: &str, answer: ElicitResult) -> Option<InFlight> {
        let parked = self
            .parked
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(key)?;
        let _ = parked.answer.send(answer);
        Some(parked.call)
    }

    /// A question from the server: to the one call open, if there is exactly one.
    pub async fn ask(&self, params: Value) -> Result<ElicitResult, ErrorData> {
        let only = {
            let open = self.open.lock().unwrap_or_else(|p| p.into_inner());
            if open.len() == 1 {
                open.values().next().cloned()
            } else {
                None
            }
        };
        let Some(call) = only else {
            tracing::warn!(
                "an MCP server asked a question with no call or several open: declined (stdio does not say which call asks)"
            );
            return Ok(ElicitResult::new(ElicitationAction::Decline));
        };
        let (answer, answered) = oneshot::channel();
        // Handing the question over waits too (a call parked on an earlier question reads
        // the next only once answered): the whole of it within the bound.
        let asked = async {
            call.send(Question { params, answer }).await.ok()?;
            answered.await.ok()
        };
        Ok(tokio::time::timeout(ANSWER_WITHIN, asked)
            .await
            .ok()
            .flatten()
            .unwrap_or_else(|| ElicitResult::new(ElicitationAction::Cancel)))
    }
}
