//! Resource updates for one session of a relay: the uris it subscribed to, each routed to its
//! module as a read is, and one NATS subscription per module on
//! `mesh-resources.<module>.updated`, made on the person's own connection, so nats-server's
//! subscribe permissions decide who hears what (a module whose resources they may not read
//! is refused here first, and a subscription the server denies hears nothing).
//!
//! Bounded: at most [`MAX_WATCHED`] uris a session, each at most `features::MAX_URI` bytes;
//! updates of the same uri coalesce until the session takes them, so a module saying one uri
//! changed a million times a second costs the session one notification per turn.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::StreamExt;
use serde_json::json;
use tokio::sync::Notify;

use super::features::FeatureCallError;
use super::{CallError, Client};
use crate::subjects::features::{self, Updated};

/// The most uris one session watches at once: past it, a subscription is refused until it
/// unsubscribes one.
pub const MAX_WATCHED: usize = 64;

/// Why a subscription was refused.
#[derive(Debug, thiserror::Error)]
pub enum WatchError {
    #[error(
        "this session already watches {max} resources, the most it may; unsubscribe from one first"
    )]
    TooMany { max: usize },
    #[error("a uri of {len} bytes is longer than the {max} a subscription may name")]
    TooLong { len: usize, max: usize },
    /// No module has the uri, the credential may not read it, or the bus failed.
    #[error(transparent)]
    Feature(#[from] FeatureCallError),
    #[error("cannot listen on {subject}: {source}")]
    Subscribe {
        subject: String,
        source: async_nats::SubscribeError,
    },
}

/// One session's subscriptions; dropping it unsubscribes everything.
pub struct Watch {
    client: Client,
    inner: Arc<Mutex<Inner>>,
    woken: Arc<Notify>,
}

#[derive(Default)]
struct Inner {
    /// Each watched uri and the module it goes to.
    uris: HashMap<String, String>,
    /// The task reading each module's updates (it holds the NATS subscription).
    modules: HashMap<String, tokio::task::JoinHandle<()>>,
    /// Watched uris updated since the session last took them.
    pending: BTreeSet<String>,
}

impl Watch {
    pub fn new(client: &Client) -> Watch {
        Watch {
            client: client.clone(),
            inner: Arc::default(),
            woken: Arc::default(),
        }
    }

    fn inner(&self) -> std::sync::MutexGuard<'_, Inner> {
        lock(&self.inner)
    }

    /// How many uris it watches.
    pub fn len(&self) -> usize {
        self.inner().uris.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Watches `uri`: routed to its module (learning the listings if need be), refused where
    /// the credential may not read that module's resources, told to the module (the bridge
    /// subscribes at its server), and heard from then on.
    pub async fn subscribe(&self, uri: &str, deadline: Duration) -> Result<(), WatchError> {
        if uri.len() > features::MAX_URI {
            return Err(WatchError::TooLong {
                len: uri.len(),
                max: features::MAX_URI,
            });
        }
        {
            let inner = self.inner();
            if inner.uris.contains_key(uri) {
                return Ok(());
            }
            if inner.uris.len() >= MAX_WATCHED {
                return Err(WatchError::TooMany { max: MAX_WATCHED });
            }
        }
        let module = self.client.readable_module(uri, deadline).await?;
        // Listening first, the module told after, on the same connection: nats-server takes
        // a connection's messages in order, so by the time the module's answer (or the
        // server's word that nobody serves it) comes back, the server has made the
        // subscription — and, in the accounts layout, the interest across the module's
        // stream export — and an update said once this returns is heard. (A flush would
        // only say the subscription was written to the socket, not that the server has it.)
        let listening = self.inner().modules.contains_key(&module);
        let task = if listening {
            None
        } else {
            let subject = features::resource_updated_subject(&module);
            let mut updates = self
                .client
                .nats()
                .subscribe(subject.clone())
                .await
                .map_err(|source| WatchError::Subscribe {
                    subject: subject.clone(),
                    source,
                })?;
            let (inner, woken, from) = (self.inner.clone(), self.woken.clone(), module.clone());
            Some(tokio::spawn(async move {
                while let Some(msg) = updates.next().await {
                    // Only an update of exactly its shape, of a uri this session watches
                    // from that module: anyone can make a reply land on this subject.
                    let Some(Updated { uri }) = Updated::read(&msg.payload) else {
                        continue;
                    };
                    let mut inner = lock(&inner);
                    if inner.uris.get(&uri) == Some(&from) {
                        inner.pending.insert(uri);
                        drop(inner);
                        woken.notify_one();
                    }
                }
            }))
        };
        // The module hears of it (a joined server is asked to say when it changes); one that
        // refuses (no such resource, its server cannot) refuses the subscription. One that
        // cannot be asked now is listened to all the same: it says so when it serves again.
        match self
            .client
            .feature_request_to(
                &features::resource_subscribe_subject(&module),
                json!({ "uri": uri }),
                deadline,
            )
            .await
        {
            Ok(_) => {}
            Err(e @ FeatureCallError::Refused { .. }) => {
                if let Some(t) = task {
                    t.abort();
                }
                return Err(e.into());
            }
            Err(e) => {
                tracing::debug!(%module, %uri, "the module was not told of the subscription: {e}")
            }
        }
        let mut inner = self.inner();
        if inner.uris.len() >= MAX_WATCHED {
            // Others subscribed meanwhile; the bound holds.
            if let Some(t) = task {
                t.abort();
            }
            return Err(WatchError::TooMany { max: MAX_WATCHED });
        }
        if let Some(t) = task {
            // Two subscriptions raced for one module: the first listener stays.
            if let Some(other) = inner.modules.insert(module.clone(), t) {
                other.abort();
            }
        }
        inner.uris.insert(uri.to_owned(), module);
        Ok(())
    }

    /// Stops watching `uri`; whether it was watched. The last uri of a module stops its
    /// subscription.
    pub fn unsubscribe(&self, uri: &str) -> bool {
        let mut inner = self.inner();
        let Some(module) = inner.uris.remove(uri) else {
            return false;
        };
        inner.pending.remove(uri);
        if !inner.uris.values().any(|m| *m == module)
            && let Some(task) = inner.modules.remove(&module)
        {
            task.abort();
        }
        true
    }

    /// The watched uris updated since the last call, once at least one was (each once,
    /// however often it was said).
    pub async fn updated(&self) -> Vec<String> {
        loop {
            let woken = self.woken.notified();
            let taken = std::mem::take(&mut self.inner().pending);
            if !taken.is_empty() {
                return taken.into_iter().collect();
            }
            woken.await;
        }
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        for (_, task) in self.inner().modules.drain() {
            task.abort();
        }
    }
}

fn lock(inner: &Mutex<Inner>) -> std::sync::MutexGuard<'_, Inner> {
    inner.lock().unwrap_or_else(|p| p.into_inner())
}

impl From<CallError> for WatchError {
    fn from(e: CallError) -> Self {
        WatchError::Feature(e.into())
    }
}
