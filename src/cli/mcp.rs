//! `mesh mcp` and `mesh serve`: the MCP relay on stdio or on loopback HTTP.

use anyhow::Context;

use super::args::{ConnectArgs, McpArgs, ServeArgs};
use crate::mcp::{self, Relay, RelayOptions};
use mesh_core::client::Client;
use mesh_core::client::Exit;
use mesh_core::runtime::Stop;

async fn relay(
    connect: &ConnectArgs,
    name: &str,
    timeout: std::time::Duration,
) -> anyhow::Result<Relay> {
    // Retry the first connection: an MCP client may start us before the bus is up.
    let client = Client::connect(&connect.config(name, true)).await?;
    Ok(Relay::following(
        client,
        RelayOptions {
            call_timeout: timeout,
            ..RelayOptions::default()
        },
    ))
}

pub async fn stdio(connect: &ConnectArgs, args: McpArgs) -> anyhow::Result<Exit> {
    let relay = relay(connect, "mesh mcp", args.timeout).await?;
    mcp::stdio::serve(relay).await?;
    Ok(Exit::Ok)
}

pub async fn serve(connect: &ConnectArgs, args: ServeArgs) -> anyhow::Result<Exit> {
    // Signals first: a stop asked for while starting is a stop, not the default action.
    let mut stop = Stop::listen().context("cannot listen for Ctrl-C and SIGTERM")?;
    // Refuse a non-loopback address before touching the bus.
    let listener = mcp::http::bind(&args.host, args.port).await?;
    let relay = relay(connect, "mesh serve", args.timeout).await?;
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
