//! The command-line surface: clap arguments, turned into validated settings, and one file
//! per command. It relays; every decision about a call is the bus's or the module's.

mod accounts;
mod accounts_operator;
pub(crate) mod args;
mod arguments;
mod audit;
mod audit_calls;
mod audit_features;
mod call;
mod callout;
mod catalog;
mod content;
mod describe;
mod external;
mod input;
mod jwks;
mod login;
mod mcp;
mod progress;
mod resources;
mod run;
mod stats;
mod task;
mod tools;
mod trace;
mod up;

pub use args::{Args, CatalogCommand, Command, ConnectArgs};
pub use mesh_core::client::Exit;

use std::time::Duration;

use serde_json::Value;

use crate::console::Console;
use mesh_core::client::{Access, CallError, Client, Discovery, Kept, Listed, TypedBy};
use mesh_core::subjects::{FullName, Progress, ToolResult, ToolsReply};

/// Runs one parsed command line; the binary only sets up logging and exits with the code.
pub async fn main(args: Args) -> Exit {
    let connect = &args.connect;
    // Connection flags ahead of a command that reaches no bus would do nothing: said, not
    // ignored (`mesh up` starts its own bus; `accounts` writes a file).
    let reaches_no_bus = matches!(
        args.command,
        Command::Up(_)
            | Command::Accounts(_)
            | Command::Callout(_)
            | Command::Login(_)
            | Command::Completions { .. }
            | Command::Man
    );
    if reaches_no_bus && !connect.to_args().is_empty() {
        eprintln!(
            "mesh: connection flags (--server, --context, credentials) do nothing for this command; leave them out"
        );
        return Exit::Usage;
    }
    let result = match args.command {
        Command::Tools(a) => tools::run(&a.connect.clone().or(connect), a).await,
        Command::Describe(a) => describe::run(&a.connect.clone().or(connect), a).await,
        Command::Call(a) => call::run(&a.connect.clone().or(connect), a).await,
        Command::Task(a) => task::run(&a.connect.clone().or(connect), a).await,
        Command::Resources(a) => resources::resources(&a.connect.clone().or(connect), a).await,
        Command::Read(a) => resources::read(&a.connect.clone().or(connect), a).await,
        Command::Prompts(a) => resources::prompts(&a.connect.clone().or(connect), a).await,
        Command::Prompt(a) => resources::prompt(&a.connect.clone().or(connect), a).await,
        Command::Catalog(a) => {
            let CatalogCommand::Forget { connect: own, .. } = &a;
            catalog::run(&own.clone().or(connect), a).await
        }
        Command::Audit(mut a) => match a.what.take() {
            Some(args::AuditCommand::Calls(c)) => {
                let connect = a.connect.clone().or(connect);
                audit_calls::run(&c.connect.clone().or(&connect), c).await
            }
            None => audit::run(&a.connect.clone().or(connect), *a).await,
        },
        Command::Accounts(a) => accounts::run(a).await,
        Command::Mcp(a) => mcp::stdio(&a.connect.clone().or(connect), a).await,
        Command::Serve(a) => mcp::serve(&a.connect.clone().or(connect), a).await,
        Command::Up(a) => up::run(a).await,
        Command::Login(a) => login::run(a).await,
        Command::Callout(a) => callout::run(a).await,
        Command::Run(a) => run::run(&a.connect.clone().or(connect), a).await,
        Command::External(argv) => Ok(external::command(argv)),
        Command::Completions { shell } => {
            let mut cmd = <Args as clap::CommandFactory>::command();
            clap_complete::generate(shell, &mut cmd, "mesh", &mut std::io::stdout());
            Ok(Exit::Ok)
        }
        Command::Man => {
            let cmd = <Args as clap::CommandFactory>::command();
            clap_mangen::Man::new(cmd)
                .render(&mut std::io::stdout())
                .map(|()| Exit::Ok)
                .map_err(anyhow::Error::from)
        }
    };
    match result {
        Ok(exit) => exit,
        Err(e) => {
            eprintln!("mesh: {}", mesh_core::client::said(e.as_ref()));
            Exit::Usage
        }
    }
}

/// Connects as the person at the terminal, failing at once when the bus is not there. The
/// tools it reads are kept on disk for the next command.
async fn connect(args: &ConnectArgs) -> anyhow::Result<Client> {
    let config = args.config("mesh", false);
    let client = Client::connect(&config).await?;
    // The digests modules confirmed are this mesh's (the server reached, and who reached it
    // by what credential): another bus may have a module of the same name with other tools.
    let info = client.nats().server_info();
    let mesh = format!(
        "{}:{}\n{:?}",
        info.host,
        info.port,
        (&config.context, &config.creds, &config.nkey, &config.user)
    );
    Ok(match Kept::default_dir() {
        Some(dir) => client.keeping(std::sync::Arc::new(Kept::on_disk(dir).for_mesh(&mesh))),
        None => client,
    })
}

/// How a command reaches the mesh: on the bus with its own credential, or through a running
/// console with none.
pub enum Reach {
    Bus(Client),
    Console(Console),
}

impl Reach {
    /// After a call was dropped: a moment for its cancel (sent from a task) to be handed to
    /// the connection, then the connection flushed, so it is out before the process ends.
    pub async fn give_up(&self) {
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        if let Reach::Bus(bus) = self {
            let _ =
                tokio::time::timeout(std::time::Duration::from_secs(1), bus.nats().flush()).await;
        }
    }

    /// The console when `--console` names one, else the bus.
    pub async fn new(args: &ConnectArgs, console: Option<&str>) -> Result<Reach, Exit> {
        match console {
            Some(url) => Console::connect(url)
                .await
                .map(Reach::Console)
                .map_err(|e| {
                    eprintln!("mesh: {e}");
                    Exit::Usage
                }),
            None => connect(args).await.map(Reach::Bus).map_err(|e| {
                eprintln!("mesh: {e:#}");
                Exit::Usage
            }),
        }
    }
}

impl Access for Reach {
    async fn discover(
        &self,
        module: Option<&str>,
        deadline: Duration,
    ) -> Result<Discovery, CallError> {
        match self {
            Reach::Bus(c) => Access::discover(c, module, deadline).await,
            Reach::Console(c) => c.discover(module, deadline).await,
        }
    }

    async fn tools(&self, module: &str, deadline: Duration) -> Result<ToolsReply, CallError> {
        match self {
            Reach::Bus(c) => Access::tools(c, module, deadline).await,
            Reach::Console(c) => c.tools(module, deadline).await,
        }
    }

    async fn listing(
        &self,
        module: &str,
        deadline: Duration,
        use_kept: bool,
    ) -> Result<Listed, CallError> {
        match self {
            Reach::Bus(c) => Access::listing(c, module, deadline, use_kept).await,
            Reach::Console(c) => c.listing(module, deadline, use_kept).await,
        }
    }

    fn typed_by(&self, digest: &str) -> Option<(Self, std::sync::Arc<TypedBy>)> {
        match self {
            Reach::Bus(c) => Access::typed_by(c, digest).map(|(c, t)| (Reach::Bus(c), t)),
            Reach::Console(_) => None,
        }
    }

    fn keep_checked(&self, module: &str, typed_by: &TypedBy) {
        if let Reach::Bus(c) = self {
            Access::keep_checked(c, module, typed_by);
        }
    }

    fn expect_ticket(&self, tool: &FullName) {
        if let Reach::Bus(c) = self {
            Access::expect_ticket(c, tool);
        }
    }

    async fn call(
        &self,
        tool: &FullName,
        args: &Value,
        deadline: Duration,
    ) -> Result<ToolResult, CallError> {
        match self {
            Reach::Bus(c) => Access::call(c, tool, args, deadline).await,
            Reach::Console(c) => c.call(tool, args, deadline).await,
        }
    }

    async fn call_watched(
        &self,
        tool: &FullName,
        args: &Value,
        deadline: Duration,
        progress: &tokio::sync::watch::Sender<Option<Progress>>,
    ) -> Result<ToolResult, CallError> {
        match self {
            Reach::Bus(c) => Access::call_watched(c, tool, args, deadline, progress).await,
            Reach::Console(c) => c.call_watched(tool, args, deadline, progress).await,
        }
    }
}

/// Says on stderr why a call failed and picks the exit code for it.
fn failed(e: &CallError) -> Exit {
    eprintln!("mesh: {e}");
    Exit::from(e.outcome())
}
