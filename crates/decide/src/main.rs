//! The `mesh-decide` binary (also `mesh decide …`): parses arguments, logs to stderr, runs,
//! exits with the code.

mod cli;

use std::process::ExitCode;

use clap::Parser;
use cli::args::{Args, DecideCommand};
use mesh_core::client::Exit;

fn main() -> ExitCode {
    let args = Args::parse();
    // A local command, like other Unix tools: a closed pipe (`mesh decide lake show | head`)
    // ends it quietly. Not the module serving (`run`): with SIGPIPE's default, a write to a
    // socket whose peer had gone would kill it without a word (as `mesh` does for its own).
    if !matches!(args.command, DecideCommand::Run(_)) {
        // SAFETY: restores the default disposition of one signal; nothing else is touched.
        unsafe {
            libc::signal(libc::SIGPIPE, libc::SIG_DFL);
        }
    }
    // Serving, its spans name the module; its local commands name the binary.
    let _logging = match args.command {
        DecideCommand::Run(_) => mesh_core::log::to_stderr_as(args.verbose, "decide"),
        _ => mesh_core::log::to_stderr(args.verbose),
    };
    let result = match args.command {
        // Serving needs the async runtime; the local commands are plain blocking work.
        DecideCommand::Run(run) => match tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()
        {
            Ok(runtime) => {
                let result = runtime.block_on(cli::serve(run));
                runtime.shutdown_timeout(std::time::Duration::from_secs(2));
                result
            }
            Err(e) => Err(anyhow::anyhow!("cannot start the async runtime: {e}")),
        },
        DecideCommand::Ontology(c) => cli::ontology(c),
        DecideCommand::Lake(c) => cli::lake(c),
        DecideCommand::Learn(c) => cli::learn(c),
    };
    match result {
        Ok(exit) => exit.into(),
        Err(e) => {
            eprintln!("mesh decide: {}", mesh_core::client::said(e.as_ref()));
            Exit::Usage.into()
        }
    }
}
