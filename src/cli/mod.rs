//! The command-line surface: clap arguments, turned into validated settings, and the commands.

mod args;
mod exit;
mod run;

pub use args::{Args, Command, ConnectArgs};
pub use exit::Exit;

/// Runs one parsed command line; the binary only sets up logging and exits with the code.
pub async fn main(args: Args) -> Exit {
    let result = match args.command {
        Command::Run(run) => run::run(&args.connect, run).await,
    };
    match result {
        Ok(exit) => exit,
        Err(e) => {
            eprintln!("mesh: {e:#}");
            Exit::Usage
        }
    }
}
