//! PostgreSQL for a module's shared state (feature `postgres`): over TLS as the URL's
//! `sslmode` says, libpq's way (`prefer`, the default: TLS when the server offers it;
//! `require`: TLS or nothing; `disable`: never), the server's certificate always checked —
//! against the authority given, else the system's — where libpq's `prefer` and `require`
//! would take any.

use std::path::{Path, PathBuf};
use std::sync::Arc;

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
        let config: postgres::Config = url.parse()?;
        let tls = match config.get_ssl_mode() {
            SslMode::Disable => None,
            _ => Some(tokio_postgres_rustls::MakeRustlsConnect::new(
                client_config(authority)?,
            )),
        };
        Ok(Connector { config, tls })
    }

    /// A new connection. Blocking, on a thread of its own: the client runs a runtime of its
    /// own, which cannot start on a thread already inside one.
    pub fn connect(&self) -> Result<postgres::Client, postgres::Error> {
        std::thread::scope(|s| {
            s.spawn(|| match &self.tls {
                Some(tls) => self.config.connect(tls.clone()),
                None => self.config.connect(postgres::NoTls),
            })
            .join()
            .expect("connecting does not panic")
        })
    }
}

/// Connects to `url` once: [`Connector::new`] then [`Connector::connect`].
pub fn connect(url: &str, authority: Option<&Path>) -> Result<postgres::Client, PgConnectError> {
    Ok(Connector::new(url, authority)?.connect()?)
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
