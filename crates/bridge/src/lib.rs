//! An MCP server as a module: the bridge starts a server people already run (stdio) or
//! reaches one over streamable HTTP, lists
//! its tools and serves each on `mesh.<module>.<tool>` through the mesh-core runtime, so the
//! bus's permissions, the catalogue, the relays and the audit treat it as any module. The
//! server is started again when it exits; when its tools change (or a new start lists
//! others) the module is served again with the new listing.

mod ask;
mod call;
pub mod credential;
mod features;
pub mod headers;
mod lines;
mod listing;
mod module;
pub mod names;
mod pool;
mod server;
mod task;

use std::future::Future;
use std::time::Duration;

use mesh_core::runtime::{ServeOptions, Serving};
use mesh_core::subjects::{self, NameError};
use tokio::sync::oneshot;

pub use call::{CALLER_META, caller_meta};
pub use names::MCP_NAME_META;
use pool::Pool;
pub use pool::Sharing;
use server::Outdated;
pub use server::Target;

/// Why a bridge stopped.
#[derive(Debug, thiserror::Error)]
pub enum BridgeError {
    #[error(transparent)]
    Name(#[from] NameError),
    /// The server's program cannot be run at all (not found, not executable).
    #[error("the MCP server cannot start: {0}")]
    CannotStart(String),
}

/// How long to wait before listing again when a listing failed.
const LIST_AGAIN: Duration = Duration::from_secs(1);

/// How long after a change the tools are listed again: a server that says its tools
/// changed a thousand times a second is listed once a second.
const DEBOUNCE: Duration = Duration::from_secs(1);

/// One listing served: its stop, and the task serving it.
struct Running {
    stop: oneshot::Sender<()>,
    task: tokio::task::JoinHandle<()>,
}

impl Running {
    fn spawn(serving: Serving) -> Running {
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(serving.run(async move {
            let _ = stopped.await;
        }));
        Running { stop, task }
    }

    /// Stops serving and waits until the calls in flight are answered.
    async fn stop(self) {
        let _ = self.stop.send(());
        let _ = self.task.await;
    }
}

/// Serves the MCP server at `target` as module `name` on `nats` until `shutdown`.
///
/// A new listing is served before the old one stops, so a change of tools leaves no gap;
/// a server that exits takes its tools with it until it is back (nobody serves them
/// meanwhile). A listing the runtime refuses is logged, never the end of the bridge.
pub async fn serve(
    name: &str,
    target: Target,
    sharing: Sharing,
    nats: async_nats::Client,
    options: ServeOptions,
    shutdown: impl Future<Output = ()>,
) -> Result<(), BridgeError> {
    subjects::check_module(name)?;
    let updates = mesh_core::runtime::ResourceUpdates::publishing(&nats, name);
    let pool = Pool::start(name, target, sharing, updates);
    let server = pool.shared.clone();
    tokio::pin!(shutdown);
    let mut serving: Option<Running> = None;
    // The listing being served, and the start of the server it came from.
    let mut served: Option<(u64, String)> = None;
    loop {
        let connected = tokio::select! {
            c = server.connected() => c,
            why = server.given_up() => return Err(BridgeError::CannotStart(why)),
            () = &mut shutdown => break,
        };
        let seen = server.changes_seen();
        let listed = tokio::select! {
            l = listing::list(&connected.peer) => l,
            () = &mut shutdown => break,
        };
        match listed {
            Err(e) => {
                tracing::warn!(module = %name, "the MCP server's tools could not be listed: {e}");
                tokio::select! {
                    () = tokio::time::sleep(LIST_AGAIN) => continue,
                    () = &mut shutdown => break,
                }
            }
            Ok(tools) => {
                let text = serde_json::to_string(&tools).unwrap_or_default();
                let same = served
                    .as_ref()
                    .is_some_and(|(start, t)| *start == connected.start && *t == text);
                if !same {
                    let module = module::build(name, &connected, tools, &pool);
                    let count = module.tools.len();
                    // Raced against the stop: it waits for a bus that is not up.
                    let started = tokio::select! {
                        s = Serving::start(module, nats.clone(), options.clone()) => s,
                        () = &mut shutdown => break,
                    };
                    match started {
                        Ok(s) => {
                            tracing::info!(module = %name, tools = count, "serving the MCP server's tools");
                            if let Some(old) = serving.replace(Running::spawn(s)) {
                                // It drains behind the new one: no call finds nobody.
                                tokio::spawn(old.stop());
                            }
                            served = Some((connected.start, text));
                        }
                        Err(e @ mesh_core::runtime::ServeError::Module(_)) => {
                            tracing::warn!(module = %name, "the MCP server's tools cannot be served: {e}");
                        }
                        // The bus's trouble, not the listing's: served again in a moment.
                        Err(e) => {
                            tracing::warn!(module = %name, "the MCP server's tools could not be served yet: {e}");
                            tokio::select! {
                                () = tokio::time::sleep(LIST_AGAIN) => continue,
                                () = &mut shutdown => break,
                            }
                        }
                    }
                }
            }
        }
        tokio::select! {
            () = &mut shutdown => break,
            why = server.outdated(connected.start, seen) => match why {
                Outdated::Restarted => {
                    // Served again from the new process's listing; the running one goes on
                    // until then (its calls reach the new process through the pool) and is
                    // drained behind the new one, so no call finds nobody meanwhile.
                    served = None;
                }
                Outdated::Changed => tokio::select! {
                    () = tokio::time::sleep(DEBOUNCE) => {}
                    () = &mut shutdown => break,
                },
            },
        }
    }
    if let Some(running) = serving.take() {
        running.stop().await;
    }
    Ok(())
}
