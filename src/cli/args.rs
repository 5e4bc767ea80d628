//! Command-line arguments as clap parses them.

use std::path::PathBuf;

use clap::{Parser, Subcommand};

use super::exit::EXIT_CODES_HELP;
use crate::actor::Layout;
use crate::client::ConnectConfig;

/// A mesh of modules on a NATS bus.
#[derive(Debug, Parser)]
#[command(name = "mesh", version, about, after_help = EXIT_CODES_HELP)]
pub struct Args {
    #[command(flatten)]
    pub connect: ConnectArgs,
    /// Log to stderr (-v info, -vv debug, -vvv trace).
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    pub verbose: u8,
    #[command(subcommand)]
    pub command: Command,
}

/// Connection settings, named as the `nats` CLI names them.
#[derive(Debug, Clone, clap::Args)]
pub struct ConnectArgs {
    /// NATS server URL(s), comma separated [env: NATS_URL]
    #[arg(short, long, global = true)]
    pub server: Option<String>,
    /// nats CLI context name or file [env: NATS_CONTEXT]
    #[arg(long, global = true)]
    pub context: Option<String>,
    /// Credentials file [env: NATS_CREDS]
    #[arg(long, global = true)]
    pub creds: Option<PathBuf>,
    /// Nkey seed file [env: NATS_NKEY]
    #[arg(long, global = true)]
    pub nkey: Option<PathBuf>,
    /// User name [env: NATS_USER]
    #[arg(long, global = true)]
    pub user: Option<String>,
    /// Password [env: NATS_PASSWORD]
    #[arg(long, global = true)]
    pub password: Option<String>,
    /// Token [env: NATS_TOKEN]
    #[arg(long, global = true)]
    pub token: Option<String>,
    /// Prefix for reply subjects (default _INBOX.<user>)
    #[arg(long, global = true)]
    pub inbox_prefix: Option<String>,
}

impl ConnectArgs {
    pub fn config(&self, name: &str, retry_initial: bool) -> ConnectConfig {
        ConnectConfig {
            server: self.server.clone(),
            context: self.context.clone(),
            creds: self.creds.clone(),
            nkey: self.nkey.clone(),
            user: self.user.clone(),
            password: self.password.clone(),
            token: self.token.clone(),
            inbox_prefix: self.inbox_prefix.clone(),
            name: Some(name.to_owned()),
            retry_initial,
        }
    }
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run one built-in module against a bus until Ctrl-C
    Run(RunArgs),
}

#[derive(Debug, clap::Args)]
pub struct RunArgs {
    /// The built-in module to run (echo)
    pub module: String,
    /// Which identity headers to trust: local (one account, none) or two-account
    #[arg(long, default_value = "local", value_parser = parse_layout)]
    pub layout: Layout,
    /// Calls handled at once
    #[arg(long, default_value_t = 256)]
    pub max_in_flight: usize,
}

fn parse_layout(s: &str) -> Result<Layout, String> {
    s.parse()
}
