//! The `nats` CLI's connection flags as clap arguments (feature `clap`), so every binary
//! on the mesh — `mesh`, a module's own — is pointed at a bus the same way.

use std::path::PathBuf;

use super::ConnectConfig;

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
            isolated: false,
        }
    }
}
