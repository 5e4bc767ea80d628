//! PostgreSQL for a module's shared state (feature `postgres`): over TLS as the URL's
//! `sslmode` says, libpq's way (`prefer`, the default: TLS when the server offers it;
//! `require`: TLS or nothing; `disable`: never), the server's certificate always checked —
//! against the authority given, else the system's — where libpq's `prefer` and `require`
//! would take any.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use async_nats::rustls;
use postgres::config::SslMode;

/// Why PostgreSQL could not be reached.
#[derive(Debug, thiserror::Error)]
pub enum PgConnectError {
    #[error("{0}")]
    Postgres(#[from] postgres::Error),
    #[error("the database's TLS authority {path}: {why}")]
    Authority { path: PathBuf, why: String },
    #[error("TLS cannot be set up: {0}")]
    Roots(String),
    #[error(
        "the database did not finish connecting within {0:?} (it takes the connection but says nothing); check that it runs and is not overloaded"
    )]
    Silent(Duration),
}

impl PgConnectError {
    /// The server's refusal, when it refused something (as opposed to not being reached).
    pub fn as_db_error(&self) -> Option<&postgres::error::DbError> {
        match self {
            PgConnectError::Postgres(e) => e.as_db_error(),
            _ => None,
        }
    }
}

/// What went wrong with the database, for a person: in the server's words when it refused
/// something; else what failed and where to look (`config` names the file that holds the
/// URL, e.g. "decide's config.json").
pub fn said(e: &postgres::Error, config: &str) -> String {
    if let Some(db) = e.as_db_error() {
        return format!("the database refused it: {}", db.message());
    }
    let why = crate::client::innermost(e);
    if why.contains("certificate") {
        format!(
            "{why}; the database's TLS certificate is not trusted: name the authority that signed it (database_ca in {config})"
        )
    } else {
        format!("{why}; check that the database runs and the URL in {config}")
    }
}

/// How long a connection may take, handshake included: the client's own connect timeout
/// bounds the TCP connect only, and a server that takes the connection and says nothing
/// would hold a module's start (or the first call after a restart) for ever.
const CONNECT_WITHIN: Duration = Duration::from_secs(15);

/// How long sent bytes may go unacknowledged, and how soon an idle connection is probed:
/// a database whose host went away without a word (no reset) is noticed within a minute, not
/// after the system's quarter of an hour. A URL that sets them keeps its own.
const UNACKNOWLEDGED: Duration = Duration::from_secs(30);
const PROBE_IDLE_AFTER: Duration = Duration::from_secs(30);

/// How to reach one database: its settings and, unless the URL says `sslmode=disable`, the
/// TLS it is reached with. Made once (the authority read then); each `connect` after that
/// fails only as the server or the network does.
#[derive(Clone)]
pub struct Connector {
    config: postgres::Config,
    tls: Option<tokio_postgres_rustls::MakeRustlsConnect>,
}

impl Connector {
    /// For `url` (a URL or libpq keywords), checking a TLS server against `authority` (PEM)
    /// or, without one, the system's authorities.
    pub fn new(url: &str, authority: Option<&Path>) -> Result<Connector, PgConnectError> {
        let mut config: postgres::Config = url.parse()?;
        if config.get_tcp_user_timeout().is_none() {
            config.tcp_user_timeout(UNACKNOWLEDGED);
        }
        if config.get_keepalives() && config.get_keepalives_idle() > PROBE_IDLE_AFTER {
            config.keepalives_idle(PROBE_IDLE_AFTER);
        }
        let tls = match config.get_ssl_mode() {
            SslMode::Disable => None,
            _ => Some(tokio_postgres_rustls::MakeRustlsConnect::new(
                client_config(authority)?,
            )),
        };
        Ok(Connector { config, tls })
    }

    /// A new connection, within `CONNECT_WITHIN`. Made on a thread of its own: the client
    /// runs a runtime of its own, which cannot start on a thread already inside one; a
    /// connection still not made at the bound is left to that thread, which drops it.
    pub fn connect(&self) -> Result<postgres::Client, PgConnectError> {
        let (config, tls) = (self.config.clone(), self.tls.clone());
        let (sent, made) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let client = match tls {
                Some(tls) => config.connect(tls),
                None => config.connect(postgres::NoTls),
            };
            // Nobody waits any more: the client is dropped here, off any runtime.
            let _ = sent.send(client);
        });
        match made.recv_timeout(CONNECT_WITHIN) {
            Ok(client) => Ok(client?),
            Err(_) => Err(PgConnectError::Silent(CONNECT_WITHIN)),
        }
    }
}

/// A client whose goodbye to the server is said on a thread of its own, not waited for: the
/// sync client blocks on a runtime of its own to close (which panics on a thread that drives
/// another: a module dropped on its runtime), and on a database that went away without a word
/// closing could wait as long as the network does.
pub struct Parting(Option<postgres::Client>);

impl Parting {
    pub fn new(client: postgres::Client) -> Parting {
        Parting(Some(client))
    }
}

impl std::ops::Deref for Parting {
    type Target = postgres::Client;
    fn deref(&self) -> &postgres::Client {
        self.0.as_ref().expect("the client is there until dropped")
    }
}

impl std::ops::DerefMut for Parting {
    fn deref_mut(&mut self) -> &mut postgres::Client {
        self.0.as_mut().expect("the client is there until dropped")
    }
}

impl Drop for Parting {
    fn drop(&mut self) {
        if let Some(client) = self.0.take() {
            std::thread::spawn(move || drop(client));
        }
    }
}

/// Connects to `url` once: [`Connector::new`] then [`Connector::connect`].
pub fn connect(url: &str, authority: Option<&Path>) -> Result<postgres::Client, PgConnectError> {
    Connector::new(url, authority)?.connect()
}

/// rustls with ring (the provider async-nats uses), trusting `authority` or the system's.
fn client_config(authority: Option<&Path>) -> Result<rustls::ClientConfig, PgConnectError> {
    use rustls::pki_types::CertificateDer;
    use rustls::pki_types::pem::PemObject;
    let mut roots = rustls::RootCertStore::empty();
    match authority {
        Some(path) => {
            let failed = |why: String| PgConnectError::Authority {
                path: path.to_owned(),
                why,
            };
            let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(path)
                .map_err(|e| failed(format!("cannot be read: {e}")))?
                .collect::<Result<_, _>>()
                .map_err(|e| failed(format!("is not PEM: {e}")))?;
            if certs.is_empty() {
                return Err(failed("holds no PEM CERTIFICATE block".into()));
            }
            for cert in certs {
                roots
                    .add(cert)
                    .map_err(|e| failed(format!("holds a certificate rustls refuses: {e}")))?;
            }
        }
        // The system's, however many: none at all leaves every TLS server refused (with a
        // message naming database_ca), while a server without TLS under `prefer` is still
        // reached as libpq would.
        None => {
            let _ = roots.add_parsable_certificates(rustls_native_certs::load_native_certs().certs);
        }
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    Ok(rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| PgConnectError::Roots(e.to_string()))?
        .with_root_certificates(roots)
        .with_no_client_auth())
}
