//! The `nats` CLI's connection flags as clap arguments (feature `clap`), so every binary
//! on the mesh — `mesh`, a module's own — is pointed at a bus the same way.

use std::path::PathBuf;

use super::ConnectConfig;

/// Connection settings, named as the `nats` CLI names them.
#[derive(Debug, Clone, clap::Args)]
pub struct ConnectArgs {
    /// NATS server URL(s), comma separated [env: NATS_URL]
    #[arg(short, long)]
    pub server: Option<String>,
    /// nats CLI context name or file [env: NATS_CONTEXT]
    #[arg(long)]
    pub context: Option<String>,
    /// Credentials file [env: NATS_CREDS]
    #[arg(long)]
    pub creds: Option<PathBuf>,
    /// Nkey seed file [env: NATS_NKEY]
    #[arg(long)]
    pub nkey: Option<PathBuf>,
    /// User name [env: NATS_USER]
    #[arg(long)]
    pub user: Option<String>,
    /// Password [env: NATS_PASSWORD]
    #[arg(long)]
    pub password: Option<String>,
    /// Token [env: NATS_TOKEN]
    #[arg(long)]
    pub token: Option<String>,
    /// Sign in with your identity provider: a file holding your OIDC ID token, sent beside
    /// the credential (the mesh's sentinel) [env: MESH_ID_TOKEN holds the token itself]
    #[arg(long, value_name = "FILE")]
    pub id_token: Option<PathBuf>,
    /// Prefix for reply subjects (default _INBOX.<user>)
    #[arg(long)]
    pub inbox_prefix: Option<String>,
    /// TLS client certificate file [env: NATS_CERT]
    #[arg(long)]
    pub tlscert: Option<PathBuf>,
    /// TLS client key file [env: NATS_KEY]
    #[arg(long)]
    pub tlskey: Option<PathBuf>,
    /// TLS certificate authority to check the server against; connects over TLS [env: NATS_CA]
    #[arg(long)]
    pub tlsca: Option<PathBuf>,
}

impl ConnectArgs {
    /// These flags, each taken from `outer` where not given here: a command's own flags
    /// (`mesh tools --server X`) before the ones given ahead of it (`mesh --server X tools`).
    pub fn or(self, outer: &ConnectArgs) -> ConnectArgs {
        ConnectArgs {
            server: self.server.or_else(|| outer.server.clone()),
            context: self.context.or_else(|| outer.context.clone()),
            creds: self.creds.or_else(|| outer.creds.clone()),
            nkey: self.nkey.or_else(|| outer.nkey.clone()),
            user: self.user.or_else(|| outer.user.clone()),
            password: self.password.or_else(|| outer.password.clone()),
            token: self.token.or_else(|| outer.token.clone()),
            id_token: self.id_token.or_else(|| outer.id_token.clone()),
            inbox_prefix: self.inbox_prefix.or_else(|| outer.inbox_prefix.clone()),
            tlscert: self.tlscert.or_else(|| outer.tlscert.clone()),
            tlskey: self.tlskey.or_else(|| outer.tlskey.clone()),
            tlsca: self.tlsca.or_else(|| outer.tlsca.clone()),
        }
    }

    pub fn config(&self, name: &str, retry_initial: bool) -> ConnectConfig {
        ConnectConfig {
            server: self.server.clone(),
            context: self.context.clone(),
            creds: self.creds.clone(),
            nkey: self.nkey.clone(),
            user: self.user.clone(),
            password: self.password.clone(),
            token: self.token.clone(),
            id_token: self.id_token.clone(),
            inbox_prefix: self.inbox_prefix.clone(),
            tls_cert: self.tlscert.clone(),
            tls_key: self.tlskey.clone(),
            tls_ca: self.tlsca.clone(),
            name: Some(name.to_owned()),
            retry_initial,
            isolated: false,
        }
    }

    /// These flags again as a command line gives them, for another binary on the mesh that
    /// takes the same (`mesh run decide` runs `mesh-decide run` with them).
    pub fn to_args(&self) -> Vec<std::ffi::OsString> {
        let paths = [
            ("--creds", &self.creds),
            ("--nkey", &self.nkey),
            ("--id-token", &self.id_token),
            ("--tlscert", &self.tlscert),
            ("--tlskey", &self.tlskey),
            ("--tlsca", &self.tlsca),
        ];
        let texts = [
            ("--server", &self.server),
            ("--context", &self.context),
            ("--user", &self.user),
            ("--password", &self.password),
            ("--token", &self.token),
            ("--inbox-prefix", &self.inbox_prefix),
        ];
        let mut argv = Vec::new();
        for (flag, value) in paths {
            if let Some(v) = value {
                argv.extend([flag.into(), v.clone().into_os_string()]);
            }
        }
        for (flag, value) in texts {
            if let Some(v) = value {
                argv.extend([flag.into(), v.into()]);
            }
        }
        argv
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        connect: ConnectArgs,
    }

    /// What `to_args` writes parses back to the same flags: every one of them.
    #[test]
    fn flags_written_again_parse_to_the_same() {
        let given = [
            "x",
            "--server",
            "nats://a:1",
            "--context",
            "c",
            "--creds",
            "/k.creds",
            "--nkey",
            "/k.nk",
            "--user",
            "u",
            "--password",
            "p w",
            "--token",
            "t",
            "--inbox-prefix",
            "_I.u",
        ];
        let first = Cli::parse_from(given).connect;
        let again = Cli::parse_from(std::iter::once("x".into()).chain(first.to_args())).connect;
        assert_eq!(format!("{first:?}"), format!("{again:?}"));
        assert_eq!(first.to_args().len(), given.len() - 1);
        assert!(Cli::parse_from(["x"]).connect.to_args().is_empty());
    }
}
