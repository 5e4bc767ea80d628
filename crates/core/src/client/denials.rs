//! Matches nats-server's asynchronous permission violations, and the connection going down,
//! to the calls waiting on them.
//!
//! A denied publish is not answered: the server sends `-ERR 'Permissions Violation for
//! Publish to "<subject>"'` on the connection and drops the message. Every call pending on
//! that subject from this connection is denied alike, so they are all told at once. A lost
//! connection ends every call pending on it.
//!
//! One registry and one channel per call, rather than a watch per kind of news: a call pays
//! a lock and an insert to register and a lock to leave; the lookup by subject is made only
//! when a violation arrives, which is rare.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use async_nats::{Event, ServerError};
use tokio::sync::oneshot;

use crate::subjects::PROGRESS_PREFIX;

/// What ended a call before its reply came.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Denial {
    /// Publishing the request itself.
    Publish,
    /// Subscribing to the reply inbox: no reply can ever come back.
    Inbox(String),
    /// The connection went down while the call waited: the reply cannot come on it.
    Lost,
}

struct Pending {
    subject: Box<str>,
    tx: oneshot::Sender<Denial>,
}

/// Calls in flight, by registration id.
#[derive(Default)]
pub(crate) struct Denials {
    pending: Mutex<HashMap<u64, Pending>>,
    next: AtomicU64,
}

/// A registration that removes itself when the call ends.
pub(crate) struct Watch {
    denials: Arc<Denials>,
    id: u64,
    pub rx: oneshot::Receiver<Denial>,
}

impl Denials {
    /// Registers a call on `subject` before its request is published.
    pub fn watch(self: &Arc<Self>, subject: &str) -> Watch {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = oneshot::channel();
        let pending = Pending {
            subject: subject.into(),
            tx,
        };
        self.lock().insert(id, pending);
        Watch {
            denials: self.clone(),
            id,
            rx,
        }
    }

    /// Reads a connection event; permission violations wake the calls they concern, and a
    /// disconnection every call.
    pub fn on_event(&self, event: &Event) {
        match event {
            Event::ServerError(ServerError::Other(text)) => match parse_violation(text) {
                Some(Violation::Publish(subject)) => {
                    let denied: Vec<Pending> = self
                        .lock()
                        .extract_if(|_, p| &*p.subject == subject)
                        .map(|(_, p)| p)
                        .collect();
                    for p in denied {
                        let _ = p.tx.send(Denial::Publish);
                    }
                }
                Some(Violation::Subscribe(subject))
                    if subject.starts_with(&format!("{PROGRESS_PREFIX}.")) =>
                {
                    // Progress is best effort: a call goes on without its reports.
                    tracing::debug!("not allowed to listen for progress on {subject}");
                }
                Some(Violation::Subscribe(subject)) => {
                    // Replies to every pending call come through the inbox subscription.
                    self.end_all(|| Denial::Inbox(subject.to_owned()));
                }
                None => tracing::warn!("server error: {text}"),
            },
            Event::Disconnected => {
                tracing::debug!("connection event: {event}");
                self.end_all(|| Denial::Lost);
            }
            other => tracing::debug!("connection event: {other}"),
        }
    }

    fn end_all(&self, why: impl Fn() -> Denial) {
        let all = std::mem::take(&mut *self.lock());
        for (_, p) in all {
            let _ = p.tx.send(why());
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<u64, Pending>> {
        self.pending.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        self.denials.lock().remove(&self.id);
    }
}

enum Violation<'a> {
    Publish(&'a str),
    Subscribe(&'a str),
}

/// `Permissions Violation for Publish to "x"` / `… for Subscription to "x"`, any case.
fn parse_violation(text: &str) -> Option<Violation<'_>> {
    let lower = text.to_ascii_lowercase();
    let subject = || {
        let start = text.find('"')? + 1;
        let end = start + text[start..].find('"')?;
        Some(&text[start..end])
    };
    if lower.contains("permissions violation for publish to") {
        subject().map(Violation::Publish)
    } else if lower.contains("permissions violation for subscription to") {
        subject().map(Violation::Subscribe)
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn server_error(text: &str) -> Event {
        Event::ServerError(ServerError::Other(text.into()))
    }

    #[test]
    fn publish_violation_wakes_only_that_subject() {
        let d = Arc::new(Denials::default());
        let mut a = d.watch("mesh.echo.echo");
        let mut b = d.watch("mesh.echo.other");
        d.on_event(&server_error(
            r#"Permissions Violation for Publish to "mesh.echo.echo""#,
        ));
        assert_eq!(a.rx.try_recv().unwrap(), Denial::Publish);
        assert!(b.rx.try_recv().is_err());
    }

    #[test]
    fn inbox_violation_wakes_everyone() {
        let d = Arc::new(Denials::default());
        let mut a = d.watch("mesh.x.y");
        d.on_event(&server_error(
            r#"Permissions Violation for Subscription to "_INBOX.bob.*""#,
        ));
        assert_eq!(
            a.rx.try_recv().unwrap(),
            Denial::Inbox("_INBOX.bob.*".into())
        );
    }

    #[test]
    fn a_progress_subscription_denied_ends_no_call() {
        let d = Arc::new(Denials::default());
        let mut a = d.watch("mesh.x.y");
        d.on_event(&server_error(
            r#"Permissions Violation for Subscription to "mesh-progress.x.bob.k1""#,
        ));
        assert!(a.rx.try_recv().is_err());
    }

    #[test]
    fn disconnection_ends_every_call() {
        let d = Arc::new(Denials::default());
        let mut a = d.watch("mesh.x.y");
        let mut b = d.watch("mesh.x.z");
        d.on_event(&Event::Disconnected);
        assert_eq!(a.rx.try_recv().unwrap(), Denial::Lost);
        assert_eq!(b.rx.try_recv().unwrap(), Denial::Lost);
        assert!(d.lock().is_empty());
    }

    #[test]
    fn finished_calls_unregister() {
        let d = Arc::new(Denials::default());
        drop(d.watch("mesh.x.y"));
        assert!(d.lock().is_empty());
    }
}
