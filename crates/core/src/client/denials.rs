//! Matches nats-server's asynchronous permission violations to the calls waiting on them.
//!
//! A denied publish is not answered: the server sends `-ERR 'Permissions Violation for
//! Publish to "<subject>"'` on the connection and drops the message. Every call pending on
//! that subject from this connection is denied alike, so they are all told at once.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use async_nats::{Event, ServerError};
use tokio::sync::oneshot;

/// What the server refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Denial {
    /// Publishing the request itself.
    Publish,
    /// Subscribing to the reply inbox: no reply can ever come back.
    Inbox(String),
}

type Waiters = HashMap<String, Vec<(u64, oneshot::Sender<Denial>)>>;

/// Calls in flight, by subject.
#[derive(Default)]
pub(crate) struct Denials {
    pending: Mutex<Waiters>,
    next: AtomicU64,
}

/// A registration that removes itself when the call ends.
pub(crate) struct Watch {
    denials: Arc<Denials>,
    subject: String,
    id: u64,
    pub rx: oneshot::Receiver<Denial>,
}

impl Denials {
    /// Registers a call on `subject` before its request is published.
    pub fn watch(self: &Arc<Self>, subject: &str) -> Watch {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = oneshot::channel();
        self.lock()
            .entry(subject.to_owned())
            .or_default()
            .push((id, tx));
        Watch {
            denials: self.clone(),
            subject: subject.to_owned(),
            id,
            rx,
        }
    }

    /// Reads a connection event; permission violations wake the calls they concern.
    pub fn on_event(&self, event: &Event) {
        match event {
            Event::ServerError(ServerError::Other(text)) => match parse_violation(text) {
                Some(Violation::Publish(subject)) => {
                    let waiters = self.lock().remove(subject).unwrap_or_default();
                    for (_, tx) in waiters {
                        let _ = tx.send(Denial::Publish);
                    }
                }
                Some(Violation::Subscribe(subject)) => {
                    // Replies to every pending call come through the inbox subscription.
                    let all = std::mem::take(&mut *self.lock());
                    for (_, tx) in all.into_values().flatten() {
                        let _ = tx.send(Denial::Inbox(subject.to_owned()));
                    }
                }
                None => tracing::warn!("server error: {text}"),
            },
            other => tracing::debug!("connection event: {other}"),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Waiters> {
        self.pending.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        let mut pending = self.denials.lock();
        if let Some(list) = pending.get_mut(&self.subject) {
            list.retain(|(id, _)| *id != self.id);
            if list.is_empty() {
                pending.remove(&self.subject);
            }
        }
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
    fn finished_calls_unregister() {
        let d = Arc::new(Denials::default());
        drop(d.watch("mesh.x.y"));
        assert!(d.lock().is_empty());
    }
}
