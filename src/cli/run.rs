//! `mesh run <module>`: one built-in module served against any bus until Ctrl-C or SIGTERM.

use anyhow::{Context, bail};

use super::args::{ConnectArgs, RunArgs};
use super::exit::Exit;
use crate::client::Client;
use crate::modules;
use crate::runtime::{self, Module, ServeOptions};

/// The names of the built-in modules.
pub const BUILTIN: [&str; 4] = ["catalog", "echo", "avu", "decide"];

/// A built-in module by name, ready to serve on `client`'s bus; `state` is the mesh's state
/// directory (decide keeps its sidecar, ontology index and lake under `state/decide`, avu its
/// store under `state/avu` and searches decide's index, echo its question key under
/// `state/echo`).
pub async fn builtin(
    name: &str,
    client: &Client,
    state: &std::path::Path,
) -> anyhow::Result<Module> {
    match name {
        "catalog" => modules::catalog::module(client.nats().clone())
            .await
            .map_err(anyhow::Error::msg),
        "echo" => {
            let key = crate::runtime::request_state::StateKey::load_or_create(
                &state.join("echo").join("state.key"),
            )?;
            Ok(modules::echo::module_with_key(key))
        }
        "avu" => modules::avu::Config::in_dir(
            &state.join("avu"),
            &state.join("decide").join("ontology.sqlite"),
        )
        .and_then(modules::avu::module)
        .map_err(anyhow::Error::msg),
        "decide" => modules::decide::tools::module(
            modules::decide::tools::Config::in_dir(&state.join("decide")).with_bus(client.clone()),
        )
        .map_err(anyhow::Error::msg),
        other => bail!(
            "no built-in module named {other:?} (known: {})",
            BUILTIN.join(", ")
        ),
    }
}

pub async fn run(connect: &ConnectArgs, args: RunArgs) -> anyhow::Result<Exit> {
    if !BUILTIN.contains(&args.module.as_str()) {
        bail!(
            "no built-in module named {:?} (known: {})",
            args.module,
            BUILTIN.join(", ")
        );
    }
    // Signals first: a stop asked for while the module starts (on a bus not up yet, it
    // waits) is a stop, not the signal's default action.
    let mut stop = Stop::listen().context("cannot listen for Ctrl-C and SIGTERM")?;
    let client = Client::connect(&connect.config(&format!("mesh run {}", args.module), true))
        .await
        .context("cannot connect to the bus")?;
    let state = super::up::default_dir();
    // The stores, keys and token under it are the owner's alone, as under `mesh up`.
    std::fs::create_dir_all(&state)
        .with_context(|| format!("cannot create the state directory {}", state.display()))?;
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&state, std::fs::Permissions::from_mode(0o700))
            .with_context(|| format!("cannot make {} private", state.display()))?;
    }
    let module = builtin(&args.module, &client, &state).await?;
    let options = ServeOptions {
        layout: args.layout,
        max_in_flight: args.max_in_flight,
        ..ServeOptions::default()
    };
    let stopping = async move {
        stop.next().await;
        // A second signal ends the process at once (a stop is bounded, but need not be waited).
        tokio::spawn(async move {
            stop.next().await;
            eprintln!("mesh: stopping at once");
            std::process::exit(130);
        });
    };
    runtime::serve(module, client.nats().clone(), options, stopping).await?;
    Ok(Exit::Ok)
}

/// Ctrl-C and SIGTERM, listened for from the moment this is made: a signal that comes before
/// anyone waits is kept, not taken by the default action (which ends the process at once).
pub struct Stop {
    interrupt: tokio::signal::unix::Signal,
    terminate: tokio::signal::unix::Signal,
}

impl Stop {
    pub fn listen() -> std::io::Result<Stop> {
        use tokio::signal::unix::{SignalKind, signal};
        Ok(Stop {
            interrupt: signal(SignalKind::interrupt())?,
            terminate: signal(SignalKind::terminate())?,
        })
    }

    /// Completes on the next Ctrl-C or SIGTERM.
    pub async fn next(&mut self) {
        tokio::select! {
            _ = self.interrupt.recv() => {},
            _ = self.terminate.recv() => {},
        }
    }
}
