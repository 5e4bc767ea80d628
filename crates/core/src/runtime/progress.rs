//! A call's progress as its tool reports it: a handle in every [`Call`](super::Call) that
//! does nothing unless the caller asked for reports (`Mesh-Progress`), and the task that
//! sends them — only ever growing, one every `REPORT_EVERY` at most, none after the reply.

use std::sync::Arc;

use async_nats::Client;
use tokio::sync::{oneshot, watch};
use tokio::task::JoinHandle;

use crate::subjects::progress::{Progress, REPORT_EVERY, Rising};

/// Where a tool reports how far a call has got. Cheap to clone; `report` never waits, so
/// blocking work can call it too. A call whose caller did not ask for progress gets a
/// reporter that drops every report.
#[derive(Clone, Default)]
pub struct Reporter {
    latest: Option<Arc<watch::Sender<Option<Progress>>>>,
}

impl std::fmt::Debug for Reporter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Reporter")
            .field("wanted", &self.is_wanted())
            .finish()
    }
}

impl Reporter {
    /// Reports that the call has got to `progress` (of `total`, when known), with a short
    /// message for people. A report not above the last one sent is dropped; between two
    /// sends only the newest report is kept.
    pub fn report(&self, progress: f64, total: Option<f64>, message: Option<&str>) {
        if let Some(latest) = &self.latest {
            latest.send_replace(Some(Progress::new(progress, total, message)));
        }
    }

    /// Whether the caller listens: a tool may skip work that only feeds reports.
    pub fn is_wanted(&self) -> bool {
        self.latest.is_some()
    }

    /// A reporter whose reports are only kept, for [`Reporter::subscribe`] (a call that may
    /// become a task keeps how far it got in the task).
    pub(crate) fn kept() -> Reporter {
        Reporter {
            latest: Some(Arc::new(watch::channel(None).0)),
        }
    }

    /// The reports as they come, where they are wanted.
    pub(crate) fn subscribe(&self) -> Option<watch::Receiver<Option<Progress>>> {
        self.latest.as_ref().map(|l| l.subscribe())
    }
}

/// The longest the end of a call waits for its last report to be handed to the connection.
const FINISH_WITHIN: std::time::Duration = std::time::Duration::from_secs(2);

/// The sending of one call's reports, ended before its reply is sent; a call dropped
/// unanswered (a drain that gave up) takes its task with it.
pub(crate) struct Sending {
    stop: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<()>>,
}

impl Drop for Sending {
    fn drop(&mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }
}

impl Sending {
    /// A reporter whose reports go to `subject`, and the task that sends them.
    pub fn start(client: Client, subject: String) -> (Reporter, Sending) {
        let (latest, rx) = watch::channel(None);
        let (stop, stopped) = oneshot::channel();
        let task = tokio::spawn(send(client, subject, rx, stopped));
        let reporter = Reporter {
            latest: Some(Arc::new(latest)),
        };
        let sending = Sending {
            stop: Some(stop),
            task: Some(task),
        };
        (reporter, sending)
    }

    /// Stops sending and waits until the task has stopped: no report leaves after this, so
    /// none follows the reply.
    pub async fn finish(mut self) {
        drop(self.stop.take());
        if let Some(task) = self.task.as_mut() {
            // Bounded: a publish can wait on a bus that is gone; the task is then aborted
            // (on drop), and the reply goes its own way.
            let _ = tokio::time::timeout(FINISH_WITHIN, task).await;
        }
    }
}

async fn send(
    client: Client,
    subject: String,
    latest: watch::Receiver<Option<Progress>>,
    stopped: oneshot::Receiver<()>,
) {
    paced(latest, stopped, |report| {
        let (client, subject) = (&client, &subject);
        async move {
            let body = report.encode().expect("paced passes sane reports only");
            match client.publish(subject.clone(), body.into()).await {
                Ok(()) => true,
                Err(e) => {
                    tracing::debug!(%subject, "progress report not sent: {e}");
                    false
                }
            }
        }
    })
    .await
}

/// Passes `latest`'s reports on to `send` as every side passes them (the runtime to its
/// caller, the MCP relay to its client): the newest only, only growing, sane, one every
/// `REPORT_EVERY` at most; when `stopped` (or `latest`'s sender goes), the newest not yet
/// passed goes at once — a tool's last report often says it is done — and nothing after.
/// `send` answers false when its sink is gone, which ends it.
pub async fn paced<F, Fut>(
    mut latest: watch::Receiver<Option<Progress>>,
    mut stopped: oneshot::Receiver<()>,
    mut send: F,
) where
    F: FnMut(Progress) -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let mut rising = Rising::default();
    let mut newest = |latest: &mut watch::Receiver<Option<Progress>>| {
        let report = latest.borrow_and_update().clone()?;
        // Numbers no caller reads are never sent, and do not count as sent.
        (report.encode().is_some() && rising.admit(&report)).then_some(report)
    };
    loop {
        let stopping = tokio::select! {
            biased;
            _ = &mut stopped => true,
            changed = latest.changed() => changed.is_err(),
        };
        if let Some(report) = newest(&mut latest)
            && !send(report).await
        {
            return;
        }
        if stopping {
            return;
        }
        let stopping = tokio::select! {
            biased;
            _ = &mut stopped => true,
            () = tokio::time::sleep(REPORT_EVERY) => false,
        };
        if stopping {
            if let Some(report) = newest(&mut latest) {
                send(report).await;
            }
            return;
        }
    }
}
