//! A call run as a task (MCP's tasks extension): offered by its caller (`Mesh-Task: <id>`, a
//! task the catalogue made for them), taken by the runtime when the handler does not finish
//! on its first poll — the caller then hears at once that it was taken — and from then on its
//! state is written to the catalogue (`mesh.catalog.task.write`), which answers each write
//! with whether the task was cancelled or its questions answered. A handler that finishes at
//! once is answered as any call (MCP lets a server answer a task-capable call directly), so a
//! tool that asks before it works (`input_required` at once) asks its caller directly too.

use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use async_nats::{Client, HeaderMap, Message};
use serde_json::{Map, Value, json};
use tokio::sync::watch;

use super::header;
use super::module::Tool;
use crate::subjects::task::{
    HEADER_TASK, POLL_MS, Status, WRITE_SUBJECT, Write, WriteReply, valid_id,
};
use crate::subjects::{Progress, ticket};

/// How long one write waits for the catalogue's answer.
const WRITE_WITHIN: Duration = Duration::from_secs(5);

/// How long a task's writes may fail in a row (no catalogue, its bucket away) before the task
/// is given up: a catalogue that restarts, or whose bucket moves to a new leader, is ridden
/// out.
const FAILING_FOR: Duration = Duration::from_secs(120);

/// A task a call was offered as, and what became of it.
pub(crate) struct Offer {
    id: String,
    /// The call's caller (`claims::owner`) and tool, which the task must have been made for.
    owner: String,
    tool: String,
    /// The instance it runs in, as registered with the catalogue (none: not registered).
    instance: Option<String>,
    client: Client,
    /// Where the call's answer goes: the "taken" answer, when it is.
    reply: Option<async_nats::Subject>,
    taken: AtomicBool,
    cancelled: AtomicBool,
    /// Its writes failed for [`FAILING_FOR`]: no owner cancelled it, the runtime gave it up.
    given_up: AtomicBool,
    /// The handler panicked: a protocol error for the task (`failed`), not a tool error.
    panicked: AtomicBool,
    /// The handler's reports, and the last one written to the task.
    reports: std::sync::Mutex<Option<watch::Receiver<Option<Progress>>>>,
    written: std::sync::Mutex<Option<Progress>>,
    /// The ticket the person's call carried, said to end when the task does.
    ticket: std::sync::Mutex<Option<String>>,
    /// Its end was written (or it was cancelled): nothing is left to say of it.
    ended: AtomicBool,
}

/// A task dropped before its end was written (the module stopped, its drain gave up) is not
/// left working for ever: it is written failed, saying so. And the person's ticket it kept
/// ends with it, taken or not: else a module gone mid-task leaves an hour's ticket acting
/// for them.
impl Drop for Offer {
    fn drop(&mut self) {
        let Ok(rt) = tokio::runtime::Handle::try_current() else {
            return;
        };
        if let Some(raw) = self.kept_ticket() {
            let body =
                serde_json::to_vec(&ticket::Ended { ticket: raw }).expect("an end serialises");
            let client = self.client.clone();
            rt.spawn(async move { ticket::say_ended(&client, body.into()).await });
        }
        if !self.taken() || self.cancelled() || self.ended.load(Ordering::Acquire) {
            return;
        }
        let write = Write {
            id: self.id.clone(),
            status: Some(Status::Failed),
            error: Some(json!({
                "code": -32603,
                "message": "the module running the task stopped before it ended; call the tool again",
            })),
            ..Write::default()
        };
        let client = self.client.clone();
        rt.spawn(async move {
            let body = serde_json::to_vec(&write).expect("a write serialises");
            let _ = tokio::time::timeout(WRITE_WITHIN, client.request(WRITE_SUBJECT, body.into()))
                .await;
        });
    }
}

/// Why a task's state was not written.
#[derive(Debug, Clone, thiserror::Error)]
pub(crate) enum Unwritten {
    /// The catalogue did not answer (gone, or slow) or failed itself: worth asking again for
    /// a while.
    #[error("{0}")]
    Unreachable(String),
    /// The catalogue answered no (the task expired or is not this module's): for good.
    #[error("the catalogue refused: {0}")]
    Refused(String),
}

/// How a handler run as a task ended.
pub(crate) enum Ran<T> {
    /// As any call: the task was not taken, or the handler ended after it was.
    Ended(T),
    /// The task's owner cancelled it: the handler was dropped.
    Cancelled,
    /// Its state could not be written for [`FAILING_FOR`]: the handler was dropped.
    GivenUp,
}

impl Offer {
    /// The task `msg` offers, if it names one and `tool` (full name `full`) may run as a
    /// task; `owner` names the caller as the runtime names the owner of what it keeps, asked
    /// only then. Boxed: every call's future holds room for it, and few calls are tasks.
    pub(crate) fn of(
        tool: &Tool,
        full: &str,
        owner: impl FnOnce() -> Option<String>,
        msg: &Message,
        client: &Client,
        instance: Option<&str>,
    ) -> Option<Box<Offer>> {
        let id = header(msg.headers.as_ref(), HEADER_TASK)?;
        if !valid_id(id) || !tool.runs_as_task() {
            return None;
        }
        Some(Box::new(Offer {
            id: id.to_owned(),
            owner: owner()?,
            tool: full.to_owned(),
            instance: instance.map(str::to_owned),
            client: client.clone(),
            reply: msg.reply.clone(),
            taken: AtomicBool::new(false),
            cancelled: AtomicBool::new(false),
            given_up: AtomicBool::new(false),
            panicked: AtomicBool::new(false),
            reports: std::sync::Mutex::new(None),
            written: std::sync::Mutex::new(None),
            ticket: std::sync::Mutex::new(None),
            ended: AtomicBool::new(false),
        }))
    }

    /// Keeps the call's ticket (the same one each round) until [`Offer::kept_ticket`].
    pub(crate) fn keep_ticket(&self, raw: String) {
        if !raw.is_empty() {
            *self.ticket.lock().unwrap_or_else(|p| p.into_inner()) = Some(raw);
        }
    }

    /// The ticket kept, taken: to be said ended.
    pub(crate) fn kept_ticket(&self) -> Option<String> {
        self.ticket.lock().unwrap_or_else(|p| p.into_inner()).take()
    }

    /// Keeps the reports of the handler running now, written to the task at each look.
    pub(crate) fn follow(&self, reports: watch::Receiver<Option<Progress>>) {
        *self.reports.lock().unwrap_or_else(|p| p.into_inner()) = Some(reports);
    }

    /// The newest report, if it is not the one written last.
    fn unwritten(&self) -> Option<Progress> {
        let newest = self
            .reports
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .as_ref()
            .and_then(|r| r.borrow().clone())
            .filter(|p| p.encode().is_some())?;
        let mut written = self.written.lock().unwrap_or_else(|p| p.into_inner());
        if written.as_ref() == Some(&newest) {
            return None;
        }
        *written = Some(newest.clone());
        Some(newest)
    }

    pub(crate) fn taken(&self) -> bool {
        self.taken.load(Ordering::Acquire)
    }

    pub(crate) fn cancelled(&self) -> bool {
        self.cancelled.load(Ordering::Acquire)
    }

    pub(crate) fn given_up(&self) -> bool {
        self.given_up.load(Ordering::Acquire)
    }

    pub(crate) fn panicked(&self) {
        self.panicked.store(true, Ordering::Release);
    }

    /// The answer that says the task was taken (as the call's reply and the call log's).
    pub(crate) fn taken_body(&self) -> Vec<u8> {
        serde_json::to_vec(&json!({"resultType": "task", "taskId": self.id}))
            .expect("an answer serialises")
    }

    /// Takes the task, once: the catalogue checks it was made for this call's caller and
    /// tool, then the caller hears it was taken and reads it from the catalogue. False when
    /// it may not be taken: the call is then answered as any call.
    async fn take(&self) -> bool {
        if self.taken() {
            return true;
        }
        let claim = Write {
            status: Some(Status::Working),
            owner: Some(self.owner.clone()),
            tool: Some(self.tool.clone()),
            instance: self.instance.clone(),
            ..Write::default()
        };
        match self.write(claim).await {
            Ok(r) if r.status == Some(Status::Working) => {}
            Ok(r) => {
                tracing::debug!(task = %self.id, "a task {:?} is not taken", r.status);
                return false;
            }
            Err(why) => {
                tracing::info!(task = %self.id, "the call is answered, not run as a task: {why}");
                return false;
            }
        }
        self.taken.store(true, Ordering::Release);
        let Some(reply) = self.reply.clone() else {
            return true;
        };
        let mut headers = HeaderMap::new();
        headers.insert(HEADER_TASK, self.id.as_str());
        if let Err(e) = self
            .client
            .publish_with_headers(reply, headers, self.taken_body().into())
            .await
        {
            tracing::warn!(task = %self.id, "the answer that a task was taken was not sent: {e}");
        }
        true
    }

    /// Runs `handler`: answered as any call if it ends on its first poll; else the task is
    /// taken, and the handler runs until it ends or the task's owner cancels it.
    pub(crate) async fn run<T>(&self, handler: impl Future<Output = T>) -> Ran<T> {
        let mut handler = std::pin::pin!(handler);
        if !self.taken()
            && let std::task::Poll::Ready(out) = futures_util::poll!(handler.as_mut())
        {
            return Ran::Ended(out);
        }
        if !self.take().await {
            return Ran::Ended(handler.await);
        }
        tokio::select! {
            out = handler => Ran::Ended(out),
            () = self.until_cancelled() => if self.given_up() {
                Ran::GivenUp
            } else {
                Ran::Cancelled
            },
        }
    }

    /// Writes `write` (its id set here); the catalogue's answer.
    async fn write(&self, mut write: Write) -> Result<WriteReply, Unwritten> {
        write.id.clone_from(&self.id);
        let body = serde_json::to_vec(&write).expect("a write serialises");
        let asked = tokio::time::timeout(
            WRITE_WITHIN,
            self.client.request(WRITE_SUBJECT, body.into()),
        )
        .await
        .map_err(|_| Unwritten::Unreachable("the catalogue did not answer in time".to_owned()))?
        .map_err(|e| Unwritten::Unreachable(format!("the catalogue cannot be asked: {e}")))?;
        let reply: WriteReply = serde_json::from_slice(&asked.payload).map_err(|e| {
            Unwritten::Unreachable(format!("the catalogue's answer does not read ({e})"))
        })?;
        if reply.status == Some(Status::Cancelled) {
            self.cancelled.store(true, Ordering::Release);
        }
        match &reply.error {
            Some(why) if reply.again => Err(Unwritten::Unreachable(why.clone())),
            Some(why) => Err(Unwritten::Refused(why.clone())),
            None => Ok(reply),
        }
    }

    /// [`Offer::write`], again every poll while the catalogue cannot be reached, for
    /// [`FAILING_FOR`] at most; a refusal (the task expired, say) is not asked again.
    async fn write_riding_out(&self, write: Write) -> Result<WriteReply, Unwritten> {
        let started = std::time::Instant::now();
        loop {
            match self.write(write.clone()).await {
                Ok(r) => return Ok(r),
                Err(why @ Unwritten::Refused(_)) => return Err(why),
                Err(why) if started.elapsed() >= FAILING_FOR => return Err(why),
                Err(why) => {
                    tracing::debug!(task = %self.id, "a task's state was not written: {why}");
                    tokio::time::sleep(Duration::from_millis(POLL_MS)).await;
                }
            }
        }
    }

    /// Asks the catalogue, every poll, until the task is cancelled, or given up (it cannot be
    /// written: it expired, or the catalogue is gone for good).
    async fn until_cancelled(&self) {
        loop {
            tokio::time::sleep(Duration::from_millis(POLL_MS)).await;
            let look = Write {
                progress: self.unwritten(),
                ..Write::default()
            };
            match self.write_riding_out(look).await {
                Ok(_) if self.cancelled() => return,
                Ok(_) => {}
                Err(why) => {
                    tracing::warn!(task = %self.id, "task given up: {why}");
                    self.given_up.store(true, Ordering::Release);
                    return;
                }
            }
        }
    }

    /// Puts the tool's questions to the task's owner and waits for every answer: none when
    /// the task was cancelled or cannot be written.
    pub(crate) async fn ask(&self, asks: Map<String, Value>) -> Option<Map<String, Value>> {
        let asked = Write {
            status: Some(Status::InputRequired),
            input_requests: Some(asks),
            ..Write::default()
        };
        if let Err(why) = self.write_riding_out(asked).await {
            tracing::warn!(task = %self.id, "a task's questions were not written: {why}");
            self.given_up.store(true, Ordering::Release);
            return None;
        }
        loop {
            if self.cancelled() {
                return None;
            }
            tokio::time::sleep(Duration::from_millis(POLL_MS)).await;
            match self.write_riding_out(Write::default()).await {
                Ok(WriteReply {
                    input_responses: Some(answers),
                    ..
                }) => {
                    // Handed over at every look until the task says it works on with them:
                    // said here, so that they are not handed again (should this say go
                    // unheard, the next status the task writes says it).
                    let working = Write {
                        status: Some(Status::Working),
                        ..Write::default()
                    };
                    if let Err(why) = self.write(working).await {
                        tracing::debug!(task = %self.id, "the answers' receipt was not said: {why}");
                    }
                    return Some(answers);
                }
                Ok(_) => {}
                Err(why) => {
                    tracing::warn!(task = %self.id, "task given up: {why}");
                    self.given_up.store(true, Ordering::Release);
                    return None;
                }
            }
        }
    }

    /// Writes how the task ended: the tool's result (`completed`, a tool error too), or a
    /// JSON-RPC error (`failed`: the runtime refused the call, the handler panicked, or the
    /// task was given up).
    pub(crate) async fn end(&self, result: Value, refused: Option<(i64, String)>) {
        // Said once, whether the write below is taken or not: a drop says no more.
        self.ended.store(true, Ordering::Release);
        if self.cancelled() {
            return;
        }
        let write = match refused {
            Some((code, message)) => Write {
                status: Some(Status::Failed),
                error: Some(json!({"code": code, "message": message})),
                ..Write::default()
            },
            None if self.panicked.load(Ordering::Acquire) => Write {
                status: Some(Status::Failed),
                error: Some(json!({
                    "code": -32603,
                    "message": result_text(&result),
                })),
                ..Write::default()
            },
            None => Write {
                status: Some(Status::Completed),
                result: Some(result),
                ..Write::default()
            },
        };
        // Given up, its writes failed for long already: tried once more, not waited on.
        if self.given_up() {
            if let Err(why) = self.write(write).await {
                tracing::debug!(task = %self.id, "a given up task's end was not written: {why}");
            }
            return;
        }
        // The result is the task's only way out: a catalogue away a moment is waited for.
        if let Err(why) = self.write_riding_out(write).await {
            tracing::warn!(task = %self.id, "a task's end was not written: {why}");
        }
    }
}

/// The text of a result's content, for a failed task's message.
fn result_text(result: &Value) -> String {
    result["content"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|c| c["text"].as_str())
        .collect::<Vec<_>>()
        .join("\n")
}
