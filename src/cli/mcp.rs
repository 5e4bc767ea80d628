//! `mesh mcp` and `mesh serve`: the MCP relay on stdio or on loopback HTTP, offering the tools
//! `--tools` or `--profile` selects (a profile read from the grants file), listed or through
//! the relay's search.

use std::path::{Path, PathBuf};

use anyhow::Context;

use super::args::{ConnectArgs, McpArgs, OfferArgs, ServeArgs};
use crate::mcp::{self, Relay, RelayOptions, search};
use mesh_bus::grants::Grants;
use mesh_core::client::Client;
use mesh_core::client::Exit;
use mesh_core::client::Selection;
use mesh_core::runtime::Stop;

async fn relay(
    connect: &ConnectArgs,
    name: &str,
    timeout: std::time::Duration,
    offer: &OfferArgs,
) -> anyhow::Result<Relay> {
    // The selection first: a profile that is not there is said before the bus is asked.
    let selection = selection(
        &offer.tools,
        offer.profile.as_deref(),
        offer.grants.as_deref(),
    )?;
    // Retry the first connection: an MCP client may start us before the bus is up.
    let client = Client::connect(&connect.config(name, true)).await?;
    Ok(Relay::following(
        client,
        RelayOptions {
            call_timeout: timeout,
            selection,
            search: search::Mode {
                always: offer.search,
                over: offer.search_over,
            },
            ..RelayOptions::default()
        },
    ))
}

/// The tools `--tools` patterns or `--profile` select; `None` for every tool.
pub(super) fn selection(
    tools: &[String],
    profile: Option<&str>,
    grants: Option<&Path>,
) -> anyhow::Result<Option<Selection>> {
    if let Some(name) = profile {
        let path = grants.map(Path::to_owned).unwrap_or_else(default_grants);
        if grants.is_none() && !path.exists() {
            anyhow::bail!(
                "profile {name} is defined in the mesh's grants file, and there is none at {}: give it with --grants FILE (mesh up keeps it as grants.conf in its state directory)",
                path.display()
            );
        }
        let read = Grants::read_file(&path)
            .map_err(|e| anyhow::anyhow!("cannot read the grants file {}: {e}", path.display()))?;
        return profile_selection(&read, name, &path).map(Some);
    }
    if tools.is_empty() {
        return Ok(None);
    }
    Ok(Some(Selection::parse(tools)?))
}

/// The selection of the profile `name` of `grants` (read from `path`).
pub(super) fn profile_selection(
    grants: &Grants,
    name: &str,
    path: &Path,
) -> anyhow::Result<Selection> {
    let profile = grants
        .profile(name)
        .map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
    Ok(profile.selection(name)?)
}

/// `mesh up`'s grants file, where the person's own mesh keeps it.
fn default_grants() -> PathBuf {
    crate::state::default_dir().join(mesh_bus::statedir::GRANTS_FILE)
}

pub async fn stdio(connect: &ConnectArgs, args: McpArgs) -> anyhow::Result<Exit> {
    let relay = relay(connect, "mesh mcp", args.timeout, &args.offer).await?;
    mcp::stdio::serve(relay).await?;
    Ok(Exit::Ok)
}

pub async fn serve(connect: &ConnectArgs, args: ServeArgs) -> anyhow::Result<Exit> {
    // Signals first: a stop asked for while starting is a stop, not the default action.
    let mut stop = Stop::listen().context("cannot listen for Ctrl-C and SIGTERM")?;
    // Refuse a non-loopback address before touching the bus.
    let listener = mcp::http::bind(&args.host, args.port).await?;
    let relay = relay(connect, "mesh serve", args.timeout, &args.offer).await?;
    let addr = listener.local_addr()?;
    let token = crate::state::console_token().map_err(|e| {
        anyhow::anyhow!(
            "cannot make or read the console's token {}: {e}",
            crate::state::console_token_path().display()
        )
    })?;
    println!("console: http://{addr}{}", mcp::http::PATH);
    // Where the token is, for the person; stdout carries only the address.
    if std::env::var_os(crate::state::CONSOLE_TOKEN_ENV).is_some() {
        eprintln!(
            "mesh: the console's bearer token is ${}",
            crate::state::CONSOLE_TOKEN_ENV
        );
    } else {
        eprintln!(
            "mesh: the console's bearer token is in {} (clients send Authorization: Bearer <token>; mesh --console reads it)",
            crate::state::console_token_path().display()
        );
    }
    if let Some(selection) = relay.selection() {
        eprintln!("mesh: the console offers only {selection}");
    }
    let limits = mcp::http::Limits {
        connections: args.max_connections,
        sessions: args.max_sessions,
        idle: args.idle,
        session_idle: args.session_idle,
    };
    mcp::http::serve(
        relay,
        listener,
        token,
        limits,
        async move { stop.next().await },
    )
    .await?;
    Ok(Exit::Ok)
}
