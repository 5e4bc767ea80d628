//! Connection settings the NATS way: flags, then `NATS_*` environment, then the `nats` CLI's context.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// Where the bus is and who we are on it. Unset fields fall back to the environment
/// (`NATS_URL`, `NATS_USER`, `NATS_PASSWORD`, `NATS_TOKEN`, `NATS_CREDS`, `NATS_NKEY`,
/// `NATS_CONTEXT`), then to the selected `nats` CLI context, then to `nats://127.0.0.1:4222`.
#[derive(Debug, Clone, Default)]
pub struct ConnectConfig {
    /// One URL or several separated by commas.
    pub server: Option<String>,
    /// A `nats` CLI context: a name under `~/.config/nats/context/`, or a path to its JSON.
    pub context: Option<String>,
    pub creds: Option<PathBuf>,
    /// A file holding an nkey seed.
    pub nkey: Option<PathBuf>,
    pub user: Option<String>,
    pub password: Option<String>,
    pub token: Option<String>,
    /// A file holding an identity provider's ID token, to sign in through the mesh's auth
    /// callout (`MESH_ID_TOKEN` holds the token itself; a context's `id_token` names a file).
    pub id_token: Option<PathBuf>,
    /// The prefix replies come back under; defaults to `_INBOX.<user>` when a user is known.
    pub inbox_prefix: Option<String>,
    /// TLS: a client certificate and its key, for a server that asks for one.
    pub tls_cert: Option<PathBuf>,
    pub tls_key: Option<PathBuf>,
    /// TLS: the authority the server's certificate is checked against; given, the
    /// connection must be TLS.
    pub tls_ca: Option<PathBuf>,
    /// The connection's name, as the server's monitoring shows it.
    pub name: Option<String>,
    /// Keep trying when the bus is not up yet (modules), instead of failing at once (CLI).
    pub retry_initial: bool,
    /// Use only the fields given here: no `NATS_*` environment, no `nats` context. For
    /// connections a program makes for itself (`mesh up`'s modules, tests).
    pub isolated: bool,
}

/// The settings after flags, environment and context are merged.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resolved {
    pub servers: Vec<String>,
    pub creds: Option<PathBuf>,
    pub nkey: Option<PathBuf>,
    pub user: Option<String>,
    pub password: Option<String>,
    pub token: Option<String>,
    /// An identity provider's ID token, to sign in with: its file, or the token itself.
    pub id_token: Option<IdToken>,
    pub inbox_prefix: String,
    pub tls_cert: Option<PathBuf>,
    pub tls_key: Option<PathBuf>,
    pub tls_ca: Option<PathBuf>,
    /// What to add when the server cannot be reached: the context came from a `mesh up`.
    pub hint: String,
}

/// Where an ID token comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum IdToken {
    File(PathBuf),
    /// `MESH_ID_TOKEN`'s value.
    Given(String),
}

impl IdToken {
    /// The person the token names (`preferred_username`), read without checking it (the
    /// mesh's sign-in does): what the inbox is called.
    fn person(&self) -> Option<String> {
        let text = match self {
            IdToken::Given(t) => t.clone(),
            IdToken::File(p) => std::fs::read_to_string(p).ok()?,
        };
        let claims = jwt_claims(text.trim())?;
        claims["preferred_username"]
            .as_str()
            .filter(|n| !n.is_empty() && !n.contains(['.', '*', '>', ' ']))
            .map(str::to_owned)
    }
}

/// The login a credential file gives for `nonce` (its user JWT, the nonce signed with its
/// seed) and `token` beside it.
async fn creds_auth(
    path: &Path,
    nonce: &[u8],
    token: Option<String>,
) -> Result<async_nats::Auth, async_nats::AuthError> {
    let text = tokio::fs::read_to_string(path)
        .await
        .map_err(|e| async_nats::AuthError::new(format!("cannot read {}: {e}", path.display())))?;
    let block = |what: &str| {
        let mut lines = text.lines().map(str::trim);
        lines
            .find(|l| l.starts_with("-----BEGIN") && l.contains(what))
            .and_then(|_| lines.find(|l| !l.is_empty()))
            .filter(|l| !l.starts_with("---"))
            .map(str::to_owned)
    };
    let (Some(jwt), Some(seed)) = (block("JWT"), block("SEED")) else {
        return Err(async_nats::AuthError::new(format!(
            "{} is not a credential file (a user JWT and its nkey seed)",
            path.display()
        )));
    };
    let key = nkeys::KeyPair::from_seed(&seed)
        .map_err(|e| async_nats::AuthError::new(format!("{}: {e}", path.display())))?;
    let signature = key
        .sign(nonce)
        .map_err(|e| async_nats::AuthError::new(format!("{}: {e}", path.display())))?;
    let mut auth = async_nats::Auth::new();
    auth.jwt = Some(jwt);
    auth.signature = Some(signature);
    auth.token = token;
    Ok(auth)
}

/// A JWT's claims, read without checking its signature.
fn jwt_claims(token: &str) -> Option<serde_json::Value> {
    use base64::Engine as _;
    let claims = token.split('.').nth(1)?;
    let claims = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(claims)
        .ok()?;
    serde_json::from_slice(&claims).ok()
}

/// The variable that holds an ID token itself.
pub const ID_TOKEN_ENV: &str = "MESH_ID_TOKEN";

/// Why connection settings could not be resolved or used.
#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    #[error("cannot read nats context {path}: {source}")]
    ContextRead {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("nats context {path} is not valid JSON: {source}")]
    ContextParse {
        path: PathBuf,
        source: serde_json::Error,
    },
    #[error("cannot read credentials file {path}: {source}")]
    Creds {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot read nkey seed file {path}: {source}")]
    Nkey {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("--password needs --user")]
    PasswordWithoutUser,
    #[error("cannot read the ID token file {path}: {source}")]
    IdToken {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("the mesh at {servers} did not let you in with your ID token: {why}")]
    SignIn { servers: String, why: String },
    #[error(
        "your ID token was not sent to {servers}: it signs you in as you, so it goes beyond this machine only over TLS, and the server did not speak TLS ({why}): connect to a server with TLS (tls://…, and --tlsca if its authority is your site's own), or ask its operator to enable TLS"
    )]
    IdTokenInTheClear { servers: String, why: String },
    #[error("TLS {what} {path}: {why}")]
    Tls {
        /// Which file, and where it may be given.
        what: &'static str,
        path: PathBuf,
        why: String,
    },
    #[error(
        "a TLS client certificate needs its key and a key its certificate: give both (--tlscert and --tlskey, NATS_CERT and NATS_KEY, or a context's cert and key)"
    )]
    TlsHalf,
    #[error(
        "{server} is a websocket URL, and mesh speaks NATS to it without TLS (it has no websocket client): TLS is required here (an ID token, or a TLS setting), so use the server's client port, tls://host:port"
    )]
    WebsocketNoTls { server: String },
    #[error("cannot connect to {servers}: {why}{hint}")]
    Connect {
        servers: String,
        /// The innermost cause, once ("Connection refused (os error 111)").
        why: String,
        /// Where the server came from and what to do: a `mesh up` context, the default.
        hint: String,
    },
}

/// The fields of a `nats` CLI context file the mesh uses; the rest are ignored on reading.
#[derive(Debug, Default, Deserialize, Serialize)]
pub struct Context {
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub description: String,
    #[serde(default)]
    pub url: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub user: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub password: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub token: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub creds: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub nkey: String,
    /// mesh's own: a file holding an ID token to sign in with (`mesh login`).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub id_token: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub inbox_prefix: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub cert: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub key: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub ca: String,
}

impl Context {
    /// Writes this context as `<name>` where the `nats` CLI looks for it (owner-only, it may
    /// hold a password), and selects it when `select` is set. Returns the file and the name
    /// of the context selected before, if any.
    pub fn write(&self, name: &str, select: bool) -> std::io::Result<(PathBuf, Option<String>)> {
        let env = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
        let dir = nats_config_dir(&env)
            .ok_or_else(|| std::io::Error::other("neither XDG_CONFIG_HOME nor HOME is set"))?;
        std::fs::create_dir_all(dir.join("context"))?;
        let path = dir.join("context").join(format!("{name}.json"));
        let text = serde_json::to_string_pretty(self).map_err(std::io::Error::other)?;
        write_private(&path, &text)?;
        let selected = dir.join("context.txt");
        let before = std::fs::read_to_string(&selected)
            .ok()
            .map(|s| s.trim().to_owned())
            .filter(|s| !s.is_empty());
        if select {
            std::fs::write(&selected, name)?;
        }
        Ok((path, before))
    }
}

/// Selects the `nats` context `name` (as `nats context select` does), or none.
pub fn select_context(name: Option<&str>) -> std::io::Result<()> {
    let env = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
    let dir = nats_config_dir(&env)
        .ok_or_else(|| std::io::Error::other("neither XDG_CONFIG_HOME nor HOME is set"))?;
    let selected = dir.join("context.txt");
    match name {
        Some(n) => std::fs::write(selected, n),
        None => match std::fs::remove_file(selected) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e),
            _ => Ok(()),
        },
    }
}

/// Writes a file only its owner may read.
pub fn write_private(path: &Path, text: &str) -> std::io::Result<()> {
    use std::io::Write;
    // A new file, renamed over the old: a reader never sees half of it, and the mode is
    // ours whatever the old file's was.
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let tmp = path.with_file_name(format!(".{name}.{}.tmp", std::process::id()));
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create(true).truncate(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(0o600);
    }
    let written = options.open(&tmp).and_then(|mut file| {
        file.write_all(text.as_bytes())?;
        file.sync_all()
    });
    if let Err(e) = written.and_then(|()| std::fs::rename(&tmp, path)) {
        let _ = std::fs::remove_file(&tmp);
        return Err(e);
    }
    Ok(())
}

impl ConnectConfig {
    /// Merges flags, environment and context, as the `nats` CLI does.
    pub fn resolve(&self) -> Result<Resolved, ConnectError> {
        if self.isolated {
            return self.resolve_with(&|_| None);
        }
        self.resolve_with(&|k| std::env::var(k).ok().filter(|v| !v.is_empty()))
    }

    fn resolve_with(&self, env: &dyn Fn(&str) -> Option<String>) -> Result<Resolved, ConnectError> {
        let context_name = self.context.clone().or_else(|| env("NATS_CONTEXT"));
        let named_server = self.server.clone().or_else(|| env("NATS_URL"));
        // The selected context (`context.txt`, not one named here) is only a default: a server
        // and a credential given here are a whole setting that takes nothing from it (a
        // module process `mesh up` starts must not carry the person's creds file or token),
        // and with a server given, a selection that no longer loads stops nothing.
        let selected_only = context_name.is_none() && named_server.is_some();
        let given_credential = [
            (self.user.is_some(), "NATS_USER"),
            (self.creds.is_some(), "NATS_CREDS"),
            (self.nkey.is_some(), "NATS_NKEY"),
            (self.token.is_some(), "NATS_TOKEN"),
            (self.id_token.is_some(), ID_TOKEN_ENV),
        ]
        .into_iter()
        .any(|(flag, var)| flag || env(var).is_some());
        let mut ctx = if self.isolated || (selected_only && given_credential) {
            Context::default()
        } else {
            match load_context(context_name.as_deref(), env) {
                Ok(ctx) => ctx,
                Err(_) if selected_only => Context::default(),
                Err(e) => return Err(e),
            }
        };
        // A context's credentials are for its own server: with another named (--server,
        // NATS_URL), none of them is sent there.
        let server_from_context = named_server.is_none();
        if let Some(named) = &named_server
            && !ctx.url.is_empty()
            && !same_servers(named, &ctx.url)
        {
            ctx = Context {
                url: ctx.url,
                ..Context::default()
            };
        }
        let nonempty = |s: &str| (!s.is_empty()).then(|| s.to_owned());
        let pick = |flag: &Option<String>, var: &str, from_ctx: &str| {
            flag.clone()
                .or_else(|| env(var))
                .or_else(|| nonempty(from_ctx))
        };
        let server = pick(&self.server, "NATS_URL", &ctx.url)
            .unwrap_or_else(|| "nats://127.0.0.1:4222".to_owned());
        // A credential of another kind given here (a credential file, an nkey, a token, an
        // ID token) is the whole of it: a user or password left in the environment or a
        // context is not mixed in (a shell's stray NATS_PASSWORD beside --creds is no
        // "--password needs --user" the person never gave).
        let other_kind_given = self.user.is_none()
            && self.password.is_none()
            && (self.creds.is_some()
                || self.nkey.is_some()
                || self.token.is_some()
                || self.id_token.is_some());
        let (user, password) = if other_kind_given {
            (None, None)
        } else {
            (
                pick(&self.user, "NATS_USER", &ctx.user),
                pick(&self.password, "NATS_PASSWORD", &ctx.password),
            )
        };
        if password.is_some() && user.is_none() {
            return Err(ConnectError::PasswordWithoutUser);
        }
        let path = |p: &Option<PathBuf>, var: &str, from_ctx: &str| {
            p.clone()
                .or_else(|| env(var).map(PathBuf::from))
                .or_else(|| nonempty(from_ctx).map(|s| expand_home(&s, env)))
        };
        // The context's inbox prefix belongs to the context's user, not to one given otherwise.
        let user_from_context = self.user.is_none() && env("NATS_USER").is_none();
        let id_token = match (&self.id_token, env(ID_TOKEN_ENV)) {
            (Some(file), _) => Some(IdToken::File(file.clone())),
            (None, Some(token)) => Some(IdToken::Given(token)),
            (None, None) => nonempty(&ctx.id_token).map(|p| IdToken::File(expand_home(&p, env))),
        };
        let inbox_prefix = self
            .inbox_prefix
            .clone()
            .or_else(|| {
                user_from_context
                    .then(|| nonempty(&ctx.inbox_prefix))
                    .flatten()
            })
            .unwrap_or_else(|| match &user {
                Some(u) => crate::subjects::inbox_prefix(u),
                // Signing in with an ID token: the person it names (as the callout names
                // them by default); else a credential file's user, named in its JWT.
                None => id_token
                    .as_ref()
                    .and_then(IdToken::person)
                    .or_else(|| {
                        path(&self.creds, "NATS_CREDS", &ctx.creds).and_then(|p| creds_user(&p))
                    })
                    .map(|u| crate::subjects::inbox_prefix(&u))
                    .unwrap_or_else(|| "_INBOX".to_owned()),
            });
        // A context `mesh up` wrote points at a mesh that may have stopped since; with no
        // server given anywhere, the default is a local mesh that may not be up.
        let hint = match ctx.description.strip_prefix("mesh up in ") {
            Some(dir) if server_from_context => format!(
                "; the context was written by `mesh up` in {dir}: that mesh is not up (start it with `mesh up`, or choose another context)"
            ),
            _ if server_from_context && ctx.url.is_empty() => "; no server was given (--server, NATS_URL) and no nats context names one, so this is the default: is a local mesh up? `mesh up` starts one and selects its context".to_owned(),
            _ if server_from_context => match &context_name {
                Some(name) => format!("; the server is nats context {name}'s: is it running?"),
                None => "; the server is the selected nats context's: is it running?".to_owned(),
            },
            _ => "; is a nats-server running there?".to_owned(),
        };
        Ok(Resolved {
            hint,
            servers: server
                .split(',')
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(String::from)
                .collect(),
            creds: path(&self.creds, "NATS_CREDS", &ctx.creds),
            nkey: path(&self.nkey, "NATS_NKEY", &ctx.nkey),
            user,
            password,
            token: pick(&self.token, "NATS_TOKEN", &ctx.token),
            id_token,
            inbox_prefix,
            tls_cert: path(&self.tls_cert, "NATS_CERT", &ctx.cert),
            tls_key: path(&self.tls_key, "NATS_KEY", &ctx.key),
            tls_ca: path(&self.tls_ca, "NATS_CA", &ctx.ca),
        })
    }
}

/// Whether two server lists name the same servers (scheme `nats://` optional, order ignored).
fn same_servers(a: &str, b: &str) -> bool {
    let set = |s: &str| -> std::collections::BTreeSet<String> {
        s.split(',')
            .map(|u| {
                u.trim()
                    .trim_start_matches("nats://")
                    .trim_end_matches('/')
                    .to_owned()
            })
            .filter(|u| !u.is_empty())
            .collect()
    };
    set(a) == set(b)
}

impl Resolved {
    /// Whether an ID token would be sent to a server beyond this machine: then only over TLS.
    pub fn id_token_needs_tls(&self) -> bool {
        self.id_token.is_some() && !self.servers.iter().all(|s| on_this_machine(s))
    }

    /// The ID token to sign in with, read from its file.
    pub async fn id_token_text(&self) -> Result<Option<String>, ConnectError> {
        match &self.id_token {
            None => Ok(None),
            Some(IdToken::Given(t)) => Ok(Some(t.trim().to_owned())),
            Some(IdToken::File(path)) => tokio::fs::read_to_string(path)
                .await
                .map(|t| Some(t.trim().to_owned()))
                .map_err(|source| ConnectError::IdToken {
                    path: path.clone(),
                    source,
                }),
        }
    }

    /// async-nats options for these settings (credentials read from their files).
    pub async fn options(&self) -> Result<async_nats::ConnectOptions, ConnectError> {
        let id_token = self.id_token_text().await?;
        let mut opts = match &self.creds {
            // Read again at every (re)connect: a credential file rewritten (a grant changed,
            // the JWT before it revoked) is the one the next connection shows.
            Some(path) => {
                creds_auth(path, &[], None)
                    .await
                    .map_err(|e| ConnectError::Creds {
                        path: path.clone(),
                        source: std::io::Error::other(e.to_string()),
                    })?;
                let path = path.clone();
                let token = id_token.clone().or_else(|| self.token.clone());
                async_nats::ConnectOptions::with_auth_callback(move |nonce| {
                    let path = path.clone();
                    let token = token.clone();
                    async move { creds_auth(&path, &nonce, token).await }
                })
            }
            None => async_nats::ConnectOptions::new(),
        }
        .custom_inbox_prefix(&self.inbox_prefix);
        if let Some(path) = &self.nkey {
            let seed =
                tokio::fs::read_to_string(path)
                    .await
                    .map_err(|source| ConnectError::Nkey {
                        path: path.clone(),
                        source,
                    })?;
            opts = opts.nkey(seed.trim().to_owned());
        }
        if let (Some(user), Some(password)) = (&self.user, &self.password) {
            opts = opts.user_and_password(user.clone(), password.clone());
        }
        // With a credential file its callback sends them.
        if self.creds.is_none() {
            if let Some(token) = &self.token {
                opts = opts.token(token.clone());
            }
            if let Some(token) = id_token {
                opts = opts.token(token);
            }
        }
        // Each TLS file read here first, so that a wrong one is named as such (not a server
        // "not trusted", or a module waiting for ever for a bus that is up).
        if let Some(ca) = &self.tls_ca {
            pem(
                ca,
                "authority (--tlsca, NATS_CA, a context's ca)",
                "CERTIFICATE",
            )
            .await?;
            opts = opts.add_root_certificates(ca.clone());
        }
        match (&self.tls_cert, &self.tls_key) {
            (Some(cert), Some(key)) => {
                pem(
                    cert,
                    "certificate (--tlscert, NATS_CERT, a context's cert)",
                    "CERTIFICATE",
                )
                .await?;
                pem(
                    key,
                    "key (--tlskey, NATS_KEY, a context's key)",
                    "PRIVATE KEY",
                )
                .await?;
                opts = opts.add_client_certificate(cert.clone(), key.clone());
            }
            (None, None) => {}
            _ => return Err(ConnectError::TlsHalf),
        }
        // Any TLS setting means TLS or nothing: never a login in the clear. Nor an ID token,
        // which anyone who reads it can sign in with, beyond this machine.
        if self.tls_ca.is_some() || self.tls_cert.is_some() || self.id_token_needs_tls() {
            // async-nats skips the TLS upgrade for a ws:// or wss:// URL, and without its
            // websocket feature speaks plain NATS there: TLS required would not be TLS.
            if let Some(ws) = self
                .servers
                .iter()
                .find(|s| server_addr(s).is_some_and(|a| a.is_websocket()))
            {
                return Err(ConnectError::WebsocketNoTls { server: ws.clone() });
            }
            opts = opts.require_tls(true);
        } else if self.id_token.is_some() {
            // An ID token sent only on this machine stays there: the servers a cluster names
            // in its INFO (connect_urls) may be beyond it, and a reconnect to one of them
            // would carry the token in the clear.
            opts = opts.ignore_discovered_servers();
        }
        Ok(opts)
    }
}

/// Whether server URL `url` names this machine: a loopback address, or `localhost` — read
/// by the parser async-nats connects with, so that what is judged is where it connects
/// (`nats://far.example.org?@127.0.0.1` is `far.example.org`); a URL it cannot read is not.
pub fn on_this_machine(url: &str) -> bool {
    let Some(addr) = server_addr(url) else {
        return false;
    };
    let host = addr.host();
    host.eq_ignore_ascii_case("localhost")
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

/// Server URL `url` as async-nats reads it (the scheme `nats://` when none is given).
fn server_addr(url: &str) -> Option<async_nats::ServerAddr> {
    url.parse().ok()
}

/// Checks that `path` reads and holds a PEM block of `kind` (`CERTIFICATE`, `PRIVATE KEY`).
async fn pem(path: &Path, what: &'static str, kind: &str) -> Result<(), ConnectError> {
    let failed = |why: String| ConnectError::Tls {
        what,
        path: path.to_owned(),
        why,
    };
    let text = tokio::fs::read(path)
        .await
        .map_err(|e| failed(format!("cannot be read: {e}")))?;
    let text = String::from_utf8_lossy(&text);
    let begins = text
        .lines()
        .any(|l| l.starts_with("-----BEGIN ") && l.trim_end().ends_with(&format!("{kind}-----")));
    if begins {
        Ok(())
    } else {
        Err(failed(format!("holds no PEM {kind} block")))
    }
}

/// The directory the `nats` CLI keeps its contexts in.
fn nats_config_dir(env: &dyn Fn(&str) -> Option<String>) -> Option<PathBuf> {
    env("XDG_CONFIG_HOME")
        .map(PathBuf::from)
        .or_else(|| env("HOME").map(|h| Path::new(&h).join(".config")))
        .map(|d| d.join("nats"))
}

/// Loads the named context, or the selected one (`context.txt`) when none is named.
fn load_context(
    name: Option<&str>,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Context, ConnectError> {
    let dir = nats_config_dir(env);
    let path = match name {
        Some(n) if n.ends_with(".json") || n.contains('/') => PathBuf::from(n),
        Some(n) => match &dir {
            Some(d) => d.join("context").join(format!("{n}.json")),
            None => PathBuf::from(format!("{n}.json")),
        },
        None => {
            let Some(d) = &dir else {
                return Ok(Context::default());
            };
            match std::fs::read_to_string(d.join("context.txt")) {
                Ok(selected) if !selected.trim().is_empty() => {
                    d.join("context").join(format!("{}.json", selected.trim()))
                }
                _ => return Ok(Context::default()),
            }
        }
    };
    let text = std::fs::read_to_string(&path).map_err(|source| ConnectError::ContextRead {
        path: path.clone(),
        source,
    })?;
    serde_json::from_str(&text).map_err(|source| ConnectError::ContextParse { path, source })
}

fn expand_home(path: &str, env: &dyn Fn(&str) -> Option<String>) -> PathBuf {
    match (path.strip_prefix("~/"), env("HOME")) {
        (Some(rest), Some(home)) => Path::new(&home).join(rest),
        _ => PathBuf::from(path),
    }
}

/// The name a credential file's user JWT gives its user, read without checking the JWT (the
/// server does, at connect): only what the inbox prefix is called.
fn creds_user(path: &std::path::Path) -> Option<String> {
    let text = std::fs::read_to_string(path).ok()?;
    let mut lines = text.lines().map(str::trim);
    lines.find(|l| l.starts_with("-----BEGIN NATS USER JWT"))?;
    let jwt = lines.find(|l| !l.is_empty())?;
    jwt_claims(jwt)?["name"]
        .as_str()
        .filter(|n| !n.is_empty() && !n.contains(['.', '*', '>', ' ', '@']))
        .map(str::to_owned)
}

/// Why the mesh's callout may have refused `token`, as far as the token itself tells: the
/// server says only "authorization violation" (nats-server's log has the callout's reason).
pub fn sign_in_refusal(token: &str) -> String {
    let claims = jwt_claims(token);
    let Some(claims) = claims else {
        return "what was given is not an ID token (a JWT): give the token your identity provider issued".into();
    };
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or_default();
    match claims["exp"].as_i64() {
        Some(exp) if exp <= now => format!(
            "it expired {} s ago: sign in to your identity provider again and give the new token",
            now - exp
        ),
        _ => "the mesh's sign-in refused it (a token for another audience or from another provider, or a person not in the grants file): ask whoever runs the mesh; its nats-server log says which".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    #[test]
    fn only_loopback_and_localhost_are_this_machine() {
        for url in [
            "nats://127.0.0.1:4222",
            "127.0.0.2:4222",
            "nats://localhost:4222",
            "tls://LOCALHOST",
            "nats://[::1]:4222",
            "nats://ann:secret@127.0.0.1:4222",
        ] {
            assert!(on_this_machine(url), "{url}");
        }
        for url in [
            "nats://192.0.2.2:4222",
            "nats://bus.example.org:4222",
            "nats://[fd00::2]:4222",
            "nats://localhost.example.org:4222",
            "nats://127.0.0.1@evil.example.org:4222",
            // After `?` or `#` is a query or fragment, not userinfo: the host is the first.
            "nats://evil.example.org?@127.0.0.1:4222",
            "nats://evil.example.org#@127.0.0.1:4222",
            "nats://evil.example.org:4222?x=@[::1]",
            "nats://127.0.0.1.evil.example.org:4222",
            "nats://[::ffff:127.0.0.1]:4222",
            "nats://0.0.0.0:4222",
        ] {
            assert!(!on_this_machine(url), "{url}");
        }
    }

    fn env_of(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let map: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |k| map.get(k).cloned()
    }

    #[test]
    fn an_unreachable_server_says_where_it_came_from() {
        let dir = std::env::temp_dir().join(format!("mesh-hint-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(dir.join("nats/context")).unwrap();
        let xdg = dir.to_str().unwrap().to_owned();
        let hint = |config: ConnectConfig, pairs: &[(&str, &str)]| {
            let mut all = vec![("XDG_CONFIG_HOME", xdg.as_str())];
            all.extend_from_slice(pairs);
            config.resolve_with(&env_of(&all)).unwrap().hint
        };
        // Nothing given, nothing selected: the default, and how to get a mesh there.
        let h = hint(ConnectConfig::default(), &[]);
        assert!(
            h.contains("this is the default") && h.contains("`mesh up`"),
            "{h}"
        );
        // Given on the command line: is a server there?
        let given = ConnectConfig {
            server: Some("nats://127.0.0.1:1".into()),
            ..Default::default()
        };
        assert_eq!(hint(given, &[]), "; is a nats-server running there?");
        // A context named: its name.
        std::fs::write(
            dir.join("nats/context/lab.json"),
            r#"{"url":"nats://lab:4222"}"#,
        )
        .unwrap();
        let h = hint(ConnectConfig::default(), &[("NATS_CONTEXT", "lab")]);
        assert_eq!(h, "; the server is nats context lab's: is it running?");
        // One `mesh up` wrote: that mesh is not up.
        std::fs::write(
            dir.join("nats/context/mesh.json"),
            r#"{"url":"nats://127.0.0.1:1","description":"mesh up in /srv/m"}"#,
        )
        .unwrap();
        let h = hint(ConnectConfig::default(), &[("NATS_CONTEXT", "mesh")]);
        assert!(
            h.contains("`mesh up` in /srv/m: that mesh is not up"),
            "{h}"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn flags_beat_environment_beat_context() {
        let dir = std::env::temp_dir().join(format!("mesh-ctx-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(dir.join("nats/context")).unwrap();
        std::fs::write(dir.join("nats/context.txt"), "dev\n").unwrap();
        std::fs::write(
            dir.join("nats/context/dev.json"),
            r#"{"url":"nats://ctx:4222","user":"carol","password":"pw","inbox_prefix":"_INBOX.carol","color_scheme":"x"}"#,
        )
        .unwrap();
        let xdg = dir.to_str().unwrap();

        let r = ConnectConfig::default()
            .resolve_with(&env_of(&[("XDG_CONFIG_HOME", xdg)]))
            .unwrap();
        assert_eq!(r.servers, ["nats://ctx:4222"]);
        assert_eq!(r.user.as_deref(), Some("carol"));
        assert_eq!(r.inbox_prefix, "_INBOX.carol");

        let r = ConnectConfig::default()
            .resolve_with(&env_of(&[
                ("XDG_CONFIG_HOME", xdg),
                ("NATS_URL", "nats://env:1"),
            ]))
            .unwrap();
        assert_eq!(r.servers, ["nats://env:1"]);
        // Another server than the context's: none of the context's credentials go there.
        assert_eq!(r.user, None);
        assert_eq!(r.password, None);
        assert_eq!(r.inbox_prefix, "_INBOX");
        // The context's own server, named again: its credentials apply.
        let r = ConnectConfig {
            server: Some("ctx:4222".into()),
            ..Default::default()
        }
        .resolve_with(&env_of(&[("XDG_CONFIG_HOME", xdg)]))
        .unwrap();
        assert_eq!(r.user.as_deref(), Some("carol"));

        let cfg = ConnectConfig {
            server: Some("nats://a:1, nats://b:2".into()),
            user: Some("dave".into()),
            password: Some("x".into()),
            ..Default::default()
        };
        let r = cfg
            .resolve_with(&env_of(&[
                ("XDG_CONFIG_HOME", xdg),
                ("NATS_URL", "nats://env:1"),
            ]))
            .unwrap();
        assert_eq!(r.servers, ["nats://a:1", "nats://b:2"]);
        assert_eq!(r.user.as_deref(), Some("dave"));
        assert_eq!(
            r.inbox_prefix, "_INBOX.dave",
            "the context's prefix is carol's"
        );

        let isolated = ConnectConfig {
            isolated: true,
            ..Default::default()
        };
        assert_eq!(
            isolated.resolve().unwrap().servers,
            ["nats://127.0.0.1:4222"]
        );
        std::fs::remove_dir_all(dir).unwrap();
    }

    /// A credential file given as a flag is the whole credential: a password (or user) left
    /// in the environment is not sent beside it, nor refused as a password without a user;
    /// a user given as a flag still takes its password from the environment.
    #[test]
    fn a_credential_file_given_takes_no_password_from_the_environment() {
        let env = [
            ("NATS_USER", "stray"),
            ("NATS_PASSWORD", "a-credential-of-the-shell"),
        ];
        let creds = ConnectConfig {
            server: Some("nats://127.0.0.1:4222".into()),
            creds: Some("/m/echo.creds".into()),
            ..Default::default()
        };
        let r = creds.resolve_with(&env_of(&env)).unwrap();
        assert_eq!(r.creds.as_deref(), Some(Path::new("/m/echo.creds")));
        assert_eq!((r.user, r.password), (None, None));
        let r = creds.resolve_with(&env_of(&env[1..])).unwrap();
        assert_eq!(r.password, None);
        // No credential given: a password alone is still the person's mistake.
        let bare = ConnectConfig {
            server: Some("nats://127.0.0.1:4222".into()),
            ..Default::default()
        };
        assert!(matches!(
            bare.resolve_with(&env_of(&env[1..])),
            Err(ConnectError::PasswordWithoutUser)
        ));
        let user = ConnectConfig {
            user: Some("ann".into()),
            ..bare
        };
        let r = user.resolve_with(&env_of(&env[1..])).unwrap();
        assert_eq!(r.password.as_deref(), Some("a-credential-of-the-shell"));
    }

    /// What `mesh up` gives a module process: server and credential in the environment. The
    /// person's selected context is not consulted — not its creds file on the same server,
    /// and not a selection that no longer loads.
    #[test]
    fn a_whole_setting_takes_nothing_from_the_selected_context() {
        let dir = std::env::temp_dir().join(format!("mesh-ctx-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(dir.join("nats/context")).unwrap();
        std::fs::write(dir.join("nats/context.txt"), "me\n").unwrap();
        std::fs::write(
            dir.join("nats/context/me.json"),
            r#"{"url":"nats://127.0.0.1:4222","token":"persons-token","creds":"/home/me/me.creds"}"#,
        )
        .unwrap();
        let xdg = dir.to_str().unwrap();
        let module = [
            ("XDG_CONFIG_HOME", xdg),
            ("NATS_URL", "nats://127.0.0.1:4222"),
            ("NATS_USER", "decide"),
            ("NATS_PASSWORD", "pw-decide"),
        ];
        let r = ConnectConfig::default()
            .resolve_with(&env_of(&module))
            .unwrap();
        assert_eq!(r.user.as_deref(), Some("decide"));
        assert_eq!(r.token, None);
        assert_eq!(r.creds, None);
        assert_eq!(r.inbox_prefix, "_INBOX.decide");
        // A selection that points nowhere, or at a file that does not parse.
        for broken in ["gone", "bad"] {
            std::fs::write(dir.join("nats/context.txt"), broken).unwrap();
            std::fs::write(dir.join("nats/context/bad.json"), "{not json").unwrap();
            let r = ConnectConfig::default()
                .resolve_with(&env_of(&module))
                .unwrap();
            assert_eq!(r.user.as_deref(), Some("decide"));
            // With a server named but no credential, the broken selection is skipped too.
            let r = ConnectConfig::default()
                .resolve_with(&env_of(&[
                    ("XDG_CONFIG_HOME", xdg),
                    ("NATS_URL", "nats://x:1"),
                ]))
                .unwrap();
            assert_eq!(r.servers, ["nats://x:1"]);
            // Named explicitly, a broken context is still an error.
            let named = ConnectConfig {
                context: Some(broken.into()),
                ..Default::default()
            };
            assert!(named.resolve_with(&env_of(&module)).is_err());
        }
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn default_inbox_is_the_users_own() {
        let cfg = ConnectConfig {
            user: Some("alice".into()),
            ..Default::default()
        };
        let r = cfg.resolve_with(&env_of(&[])).unwrap();
        assert_eq!(r.inbox_prefix, "_INBOX.alice");
        assert_eq!(r.servers, ["nats://127.0.0.1:4222"]);
    }

    #[test]
    fn broken_context_names_the_file() {
        let dir = std::env::temp_dir().join(format!("mesh-ctx-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("bad.json");
        std::fs::write(&path, "{").unwrap();
        let cfg = ConnectConfig {
            context: Some(path.to_str().unwrap().into()),
            ..Default::default()
        };
        let err = cfg.resolve_with(&env_of(&[])).unwrap_err().to_string();
        assert!(
            err.contains("bad.json") && err.contains("not valid JSON"),
            "{err}"
        );
        let cfg = ConnectConfig {
            context: Some("missing".into()),
            ..Default::default()
        };
        let err = cfg
            .resolve_with(&env_of(&[("HOME", dir.to_str().unwrap())]))
            .unwrap_err()
            .to_string();
        assert!(err.contains("missing.json"), "{err}");
        std::fs::remove_dir_all(dir).unwrap();
    }
}
