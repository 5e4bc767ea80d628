//! The `mesh` binary: parses arguments, sets up logging to stderr, runs, exits with the code.

use std::process::ExitCode;

use clap::Parser;
use mesh::cli::{self, Args, Command};

// glibc's allocator contends on its arena locks when calls allocate on one tokio worker
// and free on another; under load that showed as futex waits in the relay benchmark.
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    let args = Args::parse();
    // HTTP clients (the console's relay, `--jwks URL`) take rustls's process-wide provider:
    // ring, as async-nats's own, so that none is left to choose at the first connection.
    let _ = rustls::crypto::ring::default_provider().install_default();
    // A one-shot command, like other Unix tools: a closed pipe (`mesh tools | head`) ends it
    // quietly. Not the long-running ones: with SIGPIPE's default, a write to any socket whose
    // peer has gone (an HTTP client that hung up, a bus that went away while mesh up stops)
    // would kill the process without a word; they see the write fail instead.
    #[cfg(unix)]
    if !matches!(
        args.command,
        Command::Serve(_) | Command::Up(_) | Command::Run(_) | Command::Mcp(_)
    ) {
        // SAFETY: restores the default disposition of one signal; nothing else is touched.
        unsafe {
            libc::signal(libc::SIGPIPE, libc::SIG_DFL);
        }
    }
    // A module host's spans name the module it serves, not `mesh`.
    let _logging = match &args.command {
        Command::Run(run) => match run.mcp.as_deref().or(run.module.as_deref()) {
            Some(module) => mesh_core::log::to_stderr_as(args.verbose, module),
            None => mesh_core::log::to_stderr(args.verbose),
        },
        _ => mesh_core::log::to_stderr(args.verbose),
    };
    // The servers (`mesh serve`, `mesh up`, `mesh run`) get a thread per core. Everything
    // else — `mesh mcp` answering one client over stdio, a one-shot command — runs on one
    // thread: it starts soonest (no workers to start and stop) and has no wake-ups across
    // threads; what blocks goes to the blocking pool.
    let mut runtime = match args.command {
        Command::Serve(_) | Command::Up(_) | Command::Run(_) => {
            tokio::runtime::Builder::new_multi_thread()
        }
        _ => tokio::runtime::Builder::new_current_thread(),
    };
    match runtime.enable_all().build() {
        Ok(runtime) => {
            let exit = runtime.block_on(cli::main(args));
            // Whatever is left (a reconnect to a bus that is gone, a blocking look-up) does
            // not hold the exit up: a stop is bounded to the end.
            runtime.shutdown_timeout(std::time::Duration::from_secs(2));
            exit.into()
        }
        Err(e) => {
            eprintln!("mesh: cannot start the async runtime: {e}");
            cli::Exit::Usage.into()
        }
    }
}
