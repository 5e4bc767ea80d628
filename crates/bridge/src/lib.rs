//! An MCP server as a module: the bridge starts a server people already run (stdio) or
//! reaches one over streamable HTTP, lists
//! its tools and serves each on `mesh.<module>.<tool>` through the mesh-core runtime, so the
//! bus's permissions, the catalogue, the relays and the audit treat it as any module. The
//! server is started again when it exits; when its tools change (or a new start lists
//! others) the module is served again with the new listing.

mod call;
pub mod headers;
mod module;
pub mod names;
mod server;

use std::future::Future;
use std::time::Duration;

use mesh_core::runtime::{self, ServeError, ServeOptions};
use mesh_core::subjects::{self, NameError};

pub use call::{CALLER_META, caller_meta};
pub use names::MCP_NAME_META;
use server::Server;
pub use server::Target;

/// Why a bridge stopped.
#[derive(Debug, thiserror::Error)]
pub enum BridgeError {
    #[error(transparent)]
    Name(#[from] NameError),
    #[error(transparent)]
    Serve(#[from] ServeError),
}

/// How long to wait before listing again when a listing failed.
const LIST_AGAIN: Duration = Duration::from_secs(1);

/// Serves the MCP server at `target` as module `name` on `nats` until `shutdown`.
pub async fn serve(
    name: &str,
    target: Target,
    nats: async_nats::Client,
    options: ServeOptions,
    shutdown: impl Future<Output = ()>,
) -> Result<(), BridgeError> {
    subjects::check_module(name)?;
    let server = Server::start(name, target);
    tokio::pin!(shutdown);
    loop {
        let connected = tokio::select! {
            c = server.connected() => c,
            () = &mut shutdown => return Ok(()),
        };
        let seen = server.changes_seen();
        let listed = tokio::select! {
            l = connected.peer.list_all_tools() => l,
            () = &mut shutdown => return Ok(()),
        };
        let tools = match listed {
            Ok(t) => t,
            Err(e) => {
                tracing::warn!(module = %name, "the MCP server did not list its tools: {e}");
                tokio::select! {
                    () = tokio::time::sleep(LIST_AGAIN) => continue,
                    () = &mut shutdown => return Ok(()),
                }
            }
        };
        let module = module::build(name, &connected, tools, &server);
        tracing::info!(module = %name, tools = module.tools.len(), "serving the MCP server's tools");
        let mut stopped = false;
        let until = async {
            tokio::select! {
                () = &mut shutdown => stopped = true,
                () = server.outdated(connected.start, seen) => {}
            }
        };
        runtime::serve(module, nats.clone(), options.clone(), until).await?;
        if stopped {
            return Ok(());
        }
    }
}
