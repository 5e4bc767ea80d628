//! The relay's tool list, kept in memory and current: built from discovery, built again when
//! the catalogue says what a module serves changed (`mesh.catalog.changed`), when a call finds
//! nobody serving a listed tool, and now and then for modules that died without a word; each
//! change is announced to the clients that asked to hear it.
//!
//! The list is never more than the relay's credential may call: a tool the server's report
//! of its publish permissions leaves out is not listed (where the server cannot say, every
//! tool is, and the bus still refuses what is not the credential's), nor one outside the
//! relay's selection (`--tools`, `--profile`).

use std::sync::{Arc, RwLock, Weak};
use std::time::Duration;

use futures_util::{FutureExt as _, StreamExt};
use rmcp::model::Tool;
use serde_json::{Map, Value};
use tokio::sync::{Mutex, Notify, watch};

use rmcp::RoleServer;
use rmcp::service::Peer;

use mesh_core::client::{Access, Client, Discovery, Selection, YOURS_META};
use mesh_core::subjects::catalog::{CHANGED_SUBJECT, Changed};

/// How long the relay waits for more change events before building the list again: a module
/// starting says it once per instance, a restart twice.
const SETTLE: Duration = Duration::from_millis(25);

/// The least time between two builds that events asked for: a module registering over and
/// over cannot keep every relay building.
const BETWEEN_BUILDS: Duration = Duration::from_millis(250);

/// How often the list is built again without being told: a module that was killed says
/// nothing, and the catalogue counts its instance for up to 90 s.
pub const RECHECK: Duration = Duration::from_secs(15);

/// The list as the relay serves it.
#[derive(Debug, Clone, PartialEq)]
pub struct Tools {
    pub tools: Vec<Tool>,
}

/// Shared by every session of one relay.
#[derive(Default)]
pub struct Live {
    /// The current list; `None` until built (and always, for a relay that does not follow
    /// the catalogue: it lists afresh each time).
    current: RwLock<Option<Arc<Tools>>>,
    /// Whether a watch keeps `current` up to date.
    following: std::sync::atomic::AtomicBool,
    /// One build at a time.
    building: Mutex<()>,
    /// Bumped on every change of the list; sessions that asked to hear changes wait on it.
    changes: watch::Sender<u64>,
    /// Asks the watch to build the list again now.
    recheck: Notify,
    /// Sessions before 2026-07-28, told of changes on the session itself; a closed one is
    /// let go at the next session or change (a task per session would live until the next
    /// change, and a console's sessions come and go).
    sessions: std::sync::Mutex<Vec<Peer<RoleServer>>>,
    /// The tools listed, of those found; `None`: all.
    selection: Option<Selection>,
}

impl Live {
    /// A list of only the tools `selection` selects (all, for `None`).
    pub fn selecting(selection: Option<Selection>) -> Live {
        Live {
            selection,
            ..Live::default()
        }
    }

    pub fn selection(&self) -> Option<&Selection> {
        self.selection.as_ref()
    }

    /// The list from memory, or built now (and kept, when a watch keeps it current).
    pub async fn tools<A: Access>(
        &self,
        client: &A,
        within: Duration,
    ) -> Result<Arc<Tools>, String> {
        if let Some(tools) = self.cached() {
            return Ok(tools);
        }
        let _one = self.building.lock().await;
        if let Some(tools) = self.cached() {
            return Ok(tools);
        }
        let tools = Arc::new(build(client, within, self.selection()).await?);
        if self.is_following() {
            *self.current.write().unwrap_or_else(|p| p.into_inner()) = Some(tools.clone());
        }
        Ok(tools)
    }

    /// A tool of the list in memory, if one is kept: what the HTTP layer checks a call's
    /// `Mcp-Param-*` headers against (SEP-2243), without waiting on the bus.
    pub fn kept(&self, name: &str) -> Option<Tool> {
        let tools = self.cached()?;
        tools.tools.iter().find(|t| t.name == name).cloned()
    }

    fn cached(&self) -> Option<Arc<Tools>> {
        self.current
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    fn is_following(&self) -> bool {
        self.following.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// A change the relay noticed itself (a listed tool nobody serves): build again soon.
    pub fn suspect(&self) {
        if self.is_following() {
            self.recheck.notify_one();
        }
    }

    /// Waits for the next change of the list; `false` when no change can come any more.
    pub async fn changed(&self, seen: &mut watch::Receiver<u64>) -> bool {
        seen.changed().await.is_ok()
    }

    /// A receiver of changes from now on.
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.changes.subscribe()
    }

    /// A session (before 2026-07-28) to tell of changes.
    pub fn tell(&self, peer: Peer<RoleServer>) {
        let mut sessions = self.sessions.lock().unwrap_or_else(|p| p.into_inner());
        sessions.retain(|p| !p.is_transport_closed());
        sessions.push(peer);
    }

    /// Tells every open session the list changed.
    fn announce(&self) {
        self.changes.send_modify(|n| *n += 1);
        let open: Vec<Peer<RoleServer>> = {
            let mut sessions = self.sessions.lock().unwrap_or_else(|p| p.into_inner());
            sessions.retain(|p| !p.is_transport_closed());
            sessions.clone()
        };
        if open.is_empty() {
            return;
        }
        tokio::spawn(async move {
            for peer in open {
                // A session that closed meanwhile is let go at the next change.
                let _ = peer.notify_tool_list_changed().await;
            }
        });
    }

    /// Builds the list again; if it differs from the one served, serves the new one and
    /// announces it.
    async fn rebuild<A: Access>(&self, client: &A, within: Duration) {
        let _one = self.building.lock().await;
        let fresh = match build(client, within, self.selection()).await {
            Ok(t) => Arc::new(t),
            Err(e) => {
                tracing::warn!("the tool list could not be built again: {e}");
                return;
            }
        };
        let mut current = self.current.write().unwrap_or_else(|p| p.into_inner());
        let same = current.as_deref() == Some(&*fresh);
        let first = current.is_none();
        *current = Some(fresh);
        drop(current);
        if !same && !first {
            self.announce();
        }
    }
}

/// Keeps `live` current for a relay on the bus: follows the catalogue's change events and
/// builds again every [`RECHECK`], until every session of the relay is gone.
pub fn follow(live: &Arc<Live>, client: Client, within: Duration) {
    live.following
        .store(true, std::sync::atomic::Ordering::Relaxed);
    tokio::spawn(keep_current(Arc::downgrade(live), client, within));
}

async fn keep_current(live: Weak<Live>, client: Client, within: Duration) {
    // A credential that may not hear change events still gets the periodic check.
    let mut events = match client.nats().subscribe(CHANGED_SUBJECT).await {
        Ok(s) => Some(s),
        Err(e) => {
            tracing::warn!("cannot follow {CHANGED_SUBJECT}: {e}; checking every {RECHECK:?}");
            None
        }
    };
    let mut every = tokio::time::interval(RECHECK);
    loop {
        let Some(l) = live.upgrade() else { return };
        tokio::select! {
            _ = every.tick() => {}
            () = l.recheck.notified() => {}
            event = async {
                match events.as_mut() {
                    Some(e) => e.next().await,
                    None => std::future::pending().await,
                }
            } => {
                let Some(event) = event else {
                    events = None;
                    continue;
                };
                // Only the catalogue's event: a module's answer sent there by someone who
                // named the subject as their reply makes no relay discover again.
                if Changed::read(&event.payload).is_none() {
                    tracing::debug!("ignored a message on {CHANGED_SUBJECT} that is not a change event");
                    drop(l);
                    continue;
                }
                // A burst of events (instances, a restart) is one change.
                tokio::time::sleep(SETTLE).await;
                if let Some(e) = events.as_mut() {
                    while let Some(Some(_)) = e.next().now_or_never() {}
                }
            }
        }
        l.rebuild(&client, within).await;
        drop(l);
        tokio::time::sleep(BETWEEN_BUILDS).await;
    }
}

/// The relay's list from one discovery: every tool of every module that answers, named
/// `<module>_<tool>`, that `selection` selects and the relay's credential may call.
pub async fn build<A: Access>(
    client: &A,
    within: Duration,
    selection: Option<&Selection>,
) -> Result<Tools, String> {
    let found = client
        .discover(None, within)
        .await
        .map_err(|e| format!("discovery failed: {e}"))?;
    Ok(tools_of(found, selection))
}

fn tools_of(found: Discovery, selection: Option<&Selection>) -> Tools {
    let mut tools = Vec::new();
    let yours = match found.yours {
        Ok(yours) => Some(yours),
        Err(why) => {
            // Listed all, as before nats-server said whose they are: the bus still refuses
            // each call that is not the credential's, and says so. Said once, not at every
            // build.
            static SAID: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
            if !SAID.swap(true, std::sync::atomic::Ordering::Relaxed) {
                tracing::warn!(
                    "every tool is listed, also those not this credential's: the server cannot say which are ({why})"
                );
            }
            None
        }
    };
    for module in found.modules {
        let Ok(listing) = module.tools else { continue };
        for listed in listing.tools.iter() {
            let full = mesh_core::subjects::full_name(&listing.module, &listed.name);
            // What an agent sees is never more than its person may call, nor than it was given.
            if yours.as_ref().is_some_and(|y| !y.contains(&full))
                || selection.is_some_and(|s| !s.selects(&full))
            {
                continue;
            }
            let mut tool = match serde_json::from_str::<Tool>(listed.raw().get()) {
                Ok(t) => t,
                Err(e) => {
                    tracing::warn!(tool = %full, "left out of tools/list: {e}");
                    continue;
                }
            };
            tool.name = full.clone().into();
            // Which tools the console's credential may call, for `mesh tools --console`: the
            // relay's word only, never a module's (its own `_meta` may say anything).
            if let Some(meta) = tool.meta.as_mut() {
                meta.0.remove(YOURS_META);
            }
            if let Some(yours) = &yours {
                let mut meta = tool.meta.take().map(|m| m.0).unwrap_or_else(Map::new);
                meta.insert(YOURS_META.into(), Value::Bool(yours.contains(&full)));
                tool.meta = Some(rmcp::model::MetaObject(meta));
            }
            tools.push(tool);
        }
    }
    Tools { tools }
}

#[cfg(test)]
mod tests {
    use super::*;
    use mesh_core::client::Found;
    use mesh_core::subjects::catalog::ModuleEntry;
    use mesh_core::subjects::{ListedTool, Listing};

    /// A module's own `_meta` cannot say a tool is the console credential's: the key is
    /// the relay's, kept only when the relay knows, and always its own word.
    #[test]
    fn a_modules_meta_cannot_claim_a_tool_is_yours() {
        let forged = serde_json::value::to_raw_value(&serde_json::json!({
            "name": "t", "inputSchema": {"type": "object"},
            "_meta": {"mesh/yours": true, "other": 1}
        }))
        .unwrap();
        let found = |yours| Discovery {
            yours,
            modules: vec![Found {
                entry: ModuleEntry {
                    module: "m".into(),
                    version: "1.0.0".into(),
                    description: String::new(),
                    tools: vec!["t".into()],
                    instances: 1,
                    last_seen_ms: 0,
                },
                tools: Ok(Listing {
                    module: "m".into(),
                    version: "1.0.0".into(),
                    description: String::new(),
                    tools: vec![ListedTool::from_raw(forged.clone()).unwrap()].into(),
                }),
            }],
        };
        let unknown = tools_of(found(Err("cannot say".into())), None);
        let meta = unknown.tools[0].meta.as_ref().unwrap();
        assert_eq!(meta.0.get(YOURS_META), None);
        assert_eq!(meta.0.get("other"), Some(&Value::from(1)));
        let yours = tools_of(found(Ok(["m_t".to_owned()].into())), None);
        let meta = yours.tools[0].meta.as_ref().unwrap();
        assert_eq!(meta.0.get(YOURS_META), Some(&Value::Bool(true)));
        // Not the credential's: not listed at all, whatever the module's `_meta` says.
        assert!(
            tools_of(found(Ok(Default::default())), None)
                .tools
                .is_empty()
        );
        // Outside the selection: not listed either.
        let elsewhere = Selection::parse(["x_*"]).unwrap();
        let selected = tools_of(found(Ok(["m_t".to_owned()].into())), Some(&elsewhere));
        assert!(selected.tools.is_empty());
    }
}
