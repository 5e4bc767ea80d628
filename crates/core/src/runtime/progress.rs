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
}

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
        if let Some(task) = self.task.take() {
            let _ = task.await;
        }
    }
}

async fn send(
    client: Client,
    subject: String,
    mut latest: watch::Receiver<Option<Progress>>,
    mut stopped: oneshot::Receiver<()>,
) {
    let mut rising = Rising::default();
    loop {
        let stopping = tokio::select! {
            biased;
            _ = &mut stopped => true,
            changed = latest.changed() => changed.is_err(),
        };
        // The newest report not yet sent goes even when the call is ending: a tool's last
        // report is often the one that says it is done.
        if !send_newest(&client, &subject, &mut latest, &mut rising).await || stopping {
            return;
        }
        let stopping = tokio::select! {
            biased;
            _ = &mut stopped => true,
            () = tokio::time::sleep(REPORT_EVERY) => false,
        };
        if stopping {
            send_newest(&client, &subject, &mut latest, &mut rising).await;
            return;
        }
    }
}

/// Sends the newest report if it is above the last one sent; false if the bus refused it.
async fn send_newest(
    client: &Client,
    subject: &str,
    latest: &mut watch::Receiver<Option<Progress>>,
    rising: &mut Rising,
) -> bool {
    let report = latest.borrow_and_update().clone();
    // Numbers no caller reads are never sent, and do not count as sent.
    let Some((report, body)) = report.and_then(|r| r.encode().map(|b| (r, b))) else {
        return true;
    };
    if !rising.admit(&report) {
        return true;
    }
    if let Err(e) = client.publish(subject.to_owned(), body.into()).await {
        tracing::debug!(%subject, "progress report not sent: {e}");
        return false;
    }
    true
}
