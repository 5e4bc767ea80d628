//! The `mesh-conformance` binary: serves the modules `test` and `json` (the conformance
//! suite's tools) on a bus until Ctrl-C or SIGTERM, connecting as every module binary does.

use std::process::ExitCode;

use anyhow::Context as _;
use clap::Parser;
use mesh_core::actor::Layout;
use mesh_core::client::{Client, ConnectArgs, EXIT_CODES_HELP, Exit};
use mesh_core::runtime::{self, ServeOptions, Stop};

/// The MCP conformance suite's tools as modules `test` and `json`: run it beside a mesh and
/// point the suite at `mesh mcp` or the console.
#[derive(Debug, Parser)]
#[command(name = "mesh-conformance", version, about, after_help = EXIT_CODES_HELP)]
struct Args {
    /// Log to stderr (-v info, -vv debug, -vvv trace).
    #[arg(short, long, action = clap::ArgAction::Count)]
    verbose: u8,
    #[command(flatten)]
    connect: ConnectArgs,
    /// How the bus is laid out: local (one account, nobody is identified) or accounts (an
    /// account per module, people stamped by the server; see subjects/README.md)
    #[arg(long, default_value = "local", value_parser = parse_layout)]
    layout: Layout,
    /// Which to serve: in the accounts layout each module is a user of its own, so each runs
    /// in a process of its own, with its own `--context` (`tasks`: the modules of the tasks
    /// scenarios' tools, `greet`, `slow`, `failing`, `protocol`, `confirm` and `multi`, on one
    /// connection — the local layout only; each may also be named alone)
    #[arg(long, value_delimiter = ',', default_value = "test,json,tasks", value_parser = ["test", "json", "tasks", "greet", "slow", "failing", "protocol", "confirm", "multi"])]
    modules: Vec<String>,
    /// How often each module refreshes its registration with the catalogue, in seconds (1
    /// to 30): an instance that stops refreshing (it crashed) is taken for gone after three
    /// missed, and the tasks it runs fail then
    #[arg(long, default_value_t = mesh_core::subjects::catalog::REFRESH_SECS, value_parser = clap::value_parser!(u64).range(1..=30))]
    refresh_secs: u64,
}

fn parse_layout(s: &str) -> Result<Layout, mesh_core::actor::UnknownLayout> {
    s.parse()
}

fn main() -> ExitCode {
    let args = Args::parse();
    let _logging = mesh_core::log::to_stderr_as(args.verbose, "test");
    let result = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")
        .and_then(|rt| rt.block_on(serve(args)));
    match result {
        Ok(exit) => exit.into(),
        Err(e) => {
            eprintln!("mesh-conformance: {}", mesh_core::client::said(e.as_ref()));
            Exit::Usage.into()
        }
    }
}

/// Serves the modules asked for on one connection until a stop.
async fn serve(args: Args) -> anyhow::Result<Exit> {
    let stop = Stop::listen().context("cannot listen for Ctrl-C and SIGTERM")?;
    let client = Client::connect(&args.connect.config("mesh-conformance", true))
        .await
        .context("cannot connect to the bus")?;
    let (stopped_tx, stopped) = tokio::sync::watch::channel(false);
    let nats = client.nats().clone();
    let mut serving = tokio::task::JoinSet::new();
    let options = ServeOptions {
        layout: args.layout,
        register_every: Some(std::time::Duration::from_secs(args.refresh_secs)),
        ..ServeOptions::default()
    };
    for name in &args.modules {
        let modules = match name.as_str() {
            "test" => {
                // Served again with a tool more at each test_trigger_tool_change.
                let mut stopped = stopped.clone();
                let when_stopped = async move {
                    let _ = stopped.wait_for(|s| *s).await;
                };
                serving.spawn(mesh_conformance::serve_test(
                    nats.clone(),
                    options.clone(),
                    when_stopped,
                ));
                continue;
            }
            "json" => vec![mesh_conformance::json_module()],
            "tasks" => mesh_conformance::task_modules(),
            one => mesh_conformance::task_modules()
                .into_iter()
                .filter(|m| m.name == one)
                .collect(),
        };
        for module in modules {
            let options = options.clone();
            let mut stopped = stopped.clone();
            let when_stopped = async move {
                let _ = stopped.wait_for(|s| *s).await;
            };
            serving.spawn(runtime::serve(module, nats.clone(), options, when_stopped));
        }
    }
    let signal = tokio::spawn(async move {
        stop.then_at_once("mesh-conformance").await;
        let _ = stopped_tx.send(true);
    });
    while let Some(served) = serving.join_next().await {
        served.context("a module's task failed")??;
    }
    signal.abort();
    Ok(Exit::Ok)
}
