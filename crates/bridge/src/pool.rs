//! Which server process a call goes to: the one the module runs, or (`--per-person`) one of
//! the caller's own, so that people never share a server's state — started on a caller's
//! first call, at most `max` at once (the least recently used idle one making room), and
//! stopped after `idle` unused.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use mesh_core::actor::Caller;

use crate::credential::HelperError;
use crate::server::{Server, Target};
use mesh_core::runtime::ResourceUpdates;

/// How a bridge shares its server between callers.
#[derive(Debug, Clone)]
pub enum Sharing {
    /// One server for every caller.
    Shared,
    /// A server of each caller's own (by the stamped id: a person, or a module calling as
    /// itself), at most `max` at once, each stopped after `idle` unused; with `helper`, each
    /// started with the caller's credential from it (and again when that expires).
    PerPerson {
        max: usize,
        idle: Duration,
        helper: Option<std::path::PathBuf>,
    },
}

/// Why a call found no server to go to.
#[derive(Debug, thiserror::Error)]
pub enum PoolError {
    #[error("all {0} server processes are busy with other callers' calls; call again in a moment")]
    Full(usize),
    #[error(transparent)]
    Credential(#[from] HelperError),
}

/// The servers of one bridge.
#[derive(Clone)]
pub struct Pool {
    /// The server the module runs: its listing is the module's; without per-person
    /// servers, every call's.
    pub shared: Server,
    own: Option<Arc<Own>>,
    /// Where its servers' resource updates are said.
    pub updates: ResourceUpdates,
}

/// Callers' own servers.
struct Own {
    name: String,
    target: Target,
    max: usize,
    idle: Duration,
    helper: Option<std::path::PathBuf>,
    servers: Mutex<HashMap<String, Entry>>,
    updates: ResourceUpdates,
}

struct Entry {
    server: Server,
    used: Instant,
    /// When the caller's credential runs out: the server is started again after.
    expires: Option<Instant>,
    /// Held by each call in flight: more than one holder means in use.
    busy: Arc<()>,
}

/// A caller's server for one call; the call holds it busy while it lives.
pub struct Lease {
    pub server: Server,
    _busy: Option<Arc<()>>,
}

impl Pool {
    /// The pool of module `name`, whose server is at `target`.
    /// Each server's resource updates are said with `updates`.
    pub fn start(name: &str, target: Target, sharing: Sharing, updates: ResourceUpdates) -> Pool {
        let shared = Server::start(name, target.clone(), updates.clone());
        let said = updates.clone();
        let own = match sharing {
            Sharing::Shared => None,
            Sharing::PerPerson { max, idle, helper } => {
                let own = Arc::new(Own {
                    name: name.to_owned(),
                    target,
                    max: max.max(1),
                    idle,
                    helper,
                    servers: Mutex::default(),
                    updates,
                });
                tokio::spawn(sweep(Arc::downgrade(&own)));
                Some(own)
            }
        };
        Pool {
            shared,
            own,
            updates: said,
        }
    }

    /// The server `caller`'s call goes to.
    pub async fn lease(&self, caller: &Caller) -> Result<Lease, PoolError> {
        let Some(own) = &self.own else {
            return Ok(Lease {
                server: self.shared.clone(),
                _busy: None,
            });
        };
        let who = caller.id().unwrap_or_default();
        if let Some(lease) = own.current(&who) {
            return Ok(lease);
        }
        // The caller's credential first (outside the lock: a helper takes its time).
        let (target, expires) = match &own.helper {
            Some(helper) => {
                let credential = crate::credential::fetch(helper, &own.name, &who).await?;
                (own.target.with(&credential), credential.expires)
            }
            None => (own.target.clone(), None),
        };
        let mut servers = own.servers.lock().unwrap_or_else(|p| p.into_inner());
        if !servers.contains_key(&who) && servers.len() >= own.max {
            let idlest = servers
                .iter()
                .filter(|(_, e)| Arc::strong_count(&e.busy) == 1)
                .min_by_key(|(_, e)| e.used)
                .map(|(k, _)| k.clone());
            match idlest {
                // Dropped here: its process stops once no call holds it.
                Some(k) => {
                    tracing::info!(module = %own.name, "stopping the least recently used caller's server to make room");
                    servers.remove(&k);
                }
                None => return Err(PoolError::Full(own.max)),
            }
        }
        let entry = servers.entry(who.clone()).or_insert_with(|| {
            tracing::info!(module = %own.name, caller = %who, "starting a server of the caller's own");
            Entry {
                server: Server::start(&own.name, target, own.updates.clone()),
                used: Instant::now(),
                expires,
                busy: Arc::new(()),
            }
        });
        entry.used = Instant::now();
        Ok(Lease {
            server: entry.server.clone(),
            _busy: Some(entry.busy.clone()),
        })
    }
}

impl Own {
    /// The caller's server, if one runs and its credential holds.
    fn current(&self, who: &str) -> Option<Lease> {
        let mut servers = self.servers.lock().unwrap_or_else(|p| p.into_inner());
        let expired = servers
            .get(who)
            .is_some_and(|e| e.expires.is_some_and(|x| x <= Instant::now()));
        if expired {
            // Its credential ran out: a fresh one, and a server started with it.
            tracing::info!(module = %self.name, caller = %who, "the caller's credential expired");
            servers.remove(who);
            return None;
        }
        let entry = servers.get_mut(who)?;
        entry.used = Instant::now();
        Some(Lease {
            server: entry.server.clone(),
            _busy: Some(entry.busy.clone()),
        })
    }
}

/// Stops callers' servers unused for their `idle`, until the pool is gone.
async fn sweep(own: std::sync::Weak<Own>) {
    loop {
        let every = match own.upgrade() {
            Some(own) => (own.idle / 4).clamp(Duration::from_millis(100), Duration::from_secs(30)),
            None => return,
        };
        tokio::time::sleep(every).await;
        let Some(own) = own.upgrade() else { return };
        let mut servers = own.servers.lock().unwrap_or_else(|p| p.into_inner());
        servers.retain(|who, e| {
            let keep = Arc::strong_count(&e.busy) > 1 || e.used.elapsed() < own.idle;
            if !keep {
                tracing::info!(module = %own.name, caller = %who, "stopping an idle server of the caller's own");
            }
            keep
        });
    }
}
