//! `mesh run <module>`: one built-in module served against any bus until Ctrl-C or SIGTERM.

use std::ffi::OsString;

use anyhow::{Context, bail};

use super::args::{ConnectArgs, RunArgs};
use super::external;
use crate::builtin::{BUILTIN, EXTERNAL, builtin};
use mesh_core::client::{Client, Exit};
use mesh_core::runtime::{self, ServeOptions, Stop};
use mesh_core::subjects;

/// How long `mesh run` waits for the server to say what its credential may subscribe to.
const RULES_WITHIN: std::time::Duration = std::time::Duration::from_secs(2);

/// `mesh run --mcp <name> -- <command>` (or `--url`): the MCP server as module `name`, until
/// Ctrl-C or SIGTERM.
async fn run_mcp(connect: &ConnectArgs, name: &str, args: &RunArgs) -> anyhow::Result<Exit> {
    subjects::check_module(name)?;
    let target = match (&args.url, args.command.split_first()) {
        (Some(url), _) => mesh_bridge::Target::Url {
            url: url.clone(),
            headers: mesh_bridge::headers::read(args.headers.as_deref())?,
        },
        (None, Some((program, rest))) => mesh_bridge::Target::Command {
            program: program.clone(),
            args: rest.to_vec(),
            env: Vec::new(),
        },
        (None, None) => {
            bail!("mesh run --mcp {name} needs the server: its command after -- (stdio), or --url")
        }
    };
    let stop = Stop::listen().context("cannot listen for Ctrl-C and SIGTERM")?;
    let client = Client::connect(&connect.config(&format!("mesh run --mcp {name}"), true))
        .await
        .context("cannot connect to the bus")?;
    let options = ServeOptions {
        layout: args.layout,
        max_in_flight: args.max_in_flight,
        ..ServeOptions::default()
    };
    let sharing = if args.per_person {
        mesh_bridge::Sharing::PerPerson {
            max: args.max_processes,
            idle: args.idle,
            helper: args.credential_helper.clone(),
        }
    } else {
        mesh_bridge::Sharing::Shared
    };
    let stopping = stop.then_at_once("mesh");
    mesh_bridge::serve(
        name,
        target,
        sharing,
        client.nats().clone(),
        options,
        stopping,
    )
    .await?;
    Ok(Exit::Ok)
}

/// `mesh run <module>` for a module in a binary of its own: `mesh-<module> run` with the
/// same connection flags and settings.
fn run_external(connect: &ConnectArgs, module: &str, args: &RunArgs) -> Exit {
    let mut argv: Vec<OsString> = vec!["run".into()];
    argv.extend(connect.to_args());
    argv.extend([
        "--layout".into(),
        args.layout.to_string().into(),
        "--max-in-flight".into(),
        args.max_in_flight.to_string().into(),
    ]);
    external::exec(module, argv)
}

pub async fn run(connect: &ConnectArgs, args: RunArgs) -> anyhow::Result<Exit> {
    if let Some(name) = &args.mcp {
        return run_mcp(connect, name, &args).await;
    }
    let module = args.module.clone().unwrap_or_default();
    if EXTERNAL.contains(&module.as_str()) {
        return Ok(run_external(connect, &module, &args));
    }
    if !BUILTIN.contains(&module.as_str()) {
        bail!(
            "no module named {:?} (known: {}; an MCP server: mesh run --mcp NAME -- COMMAND)",
            module,
            BUILTIN
                .iter()
                .chain(&EXTERNAL)
                .copied()
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    // Signals first: a stop asked for while the module starts (on a bus not up yet, it
    // waits) is a stop, not the signal's default action.
    let stop = Stop::listen().context("cannot listen for Ctrl-C and SIGTERM")?;
    let client = Client::connect(&connect.config(&format!("mesh run {module}"), true))
        .await
        .context("cannot connect to the bus")?;
    let state = crate::state::default_dir();
    // The stores, keys and token under it are the owner's alone, as under `mesh up`.
    runtime::private_dir(&state).with_context(|| {
        format!(
            "cannot make the state directory {} (private)",
            state.display()
        )
    })?;
    let module = builtin(&module, &client, &state).await?;
    // A credential that may not subscribe to the module's subjects (a person's context) would
    // start and be denied at every subscription: refuse, naming what is missing. A server
    // that cannot say lets it try.
    if let Ok((_, subscribe)) = client.rules(RULES_WITHIN).await {
        let reply = module.tools_reply();
        let mut subjects = vec![subjects::tools_subject(&reply.module)];
        subjects.extend(
            reply
                .tools
                .iter()
                .map(|t| subjects::tool_subject(&reply.module, &t.name)),
        );
        let missing: Vec<&String> = subjects.iter().filter(|s| !subscribe.permits(s)).collect();
        if !missing.is_empty() {
            bail!(
                "this credential may not serve {}: it may not subscribe to {} (a person's context? \
                 a module runs with its own credential: `mesh up` writes the context {}-{} for it, \
                 `mesh run {} --context {}-{}`)",
                reply.module,
                missing
                    .iter()
                    .map(|s| s.as_str())
                    .collect::<Vec<_>>()
                    .join(", "),
                mesh_bus::statedir::CONTEXT,
                reply.module,
                reply.module,
                mesh_bus::statedir::CONTEXT,
                reply.module,
            );
        }
    }
    let options = ServeOptions {
        layout: args.layout,
        max_in_flight: args.max_in_flight,
        ..ServeOptions::default()
    };
    let stopping = stop.then_at_once("mesh");
    runtime::serve(module, client.nats().clone(), options, stopping).await?;
    Ok(Exit::Ok)
}
