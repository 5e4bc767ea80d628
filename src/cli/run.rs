//! `mesh run <module>`: one built-in module served against any bus until Ctrl-C or SIGTERM.

use anyhow::{Context, bail};

use super::args::{ConnectArgs, RunArgs};
use super::exit::Exit;
use crate::client::Client;
use crate::modules;
use crate::runtime::{self, Module, ServeOptions};

/// The built-in modules by name.
pub fn builtin(name: &str) -> Option<Module> {
    match name {
        "echo" => Some(modules::echo::module()),
        _ => None,
    }
}

pub async fn run(connect: &ConnectArgs, args: RunArgs) -> anyhow::Result<Exit> {
    let Some(module) = builtin(&args.module) else {
        bail!("no built-in module named {:?} (known: echo)", args.module);
    };
    let client = Client::connect(&connect.config(&format!("mesh run {}", args.module), true))
        .await
        .context("cannot connect to the bus")?;
    let options = ServeOptions {
        layout: args.layout,
        max_in_flight: args.max_in_flight,
        ..ServeOptions::default()
    };
    runtime::serve(module, client.nats().clone(), options, shutdown_signal()).await?;
    Ok(Exit::Ok)
}

/// Completes on Ctrl-C or SIGTERM.
pub async fn shutdown_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
            .expect("SIGTERM handler installs");
        tokio::select! {
            _ = ctrl_c => {},
            _ = term.recv() => {},
        }
    }
    #[cfg(not(unix))]
    let _ = ctrl_c.await;
}
