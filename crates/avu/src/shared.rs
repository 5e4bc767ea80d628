//! avu's store on PostgreSQL, for avu run as more than one instance: the same tables and the
//! same one transaction per change as the SQLite store, shared by every instance; the key
//! that seals `avu_apply_term`'s questions kept there too, so any instance opens any other's.

use mesh_core::postgres::Parting;
use postgres::{Client, Transaction};

use mesh_core::subjects::catalog::now_ms;

/// How long the probe before a write waits for the server.
const PROBE_WITHIN: std::time::Duration = std::time::Duration::from_secs(2);

/// How long past its expiry a spent state is kept (clock differences between instances).
const FORGET_AFTER_MS: u64 = 10 * 60 * 1000;

/// Taken while the schema is made: instances starting together make it once.
const SCHEMA_LOCK: i64 = 0x006d_6573_6861_7675; // "meshavu"

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS avus (
    path TEXT NOT NULL,
    attribute TEXT NOT NULL,
    value TEXT NOT NULL,
    unit TEXT NOT NULL,
    -- Unique by a digest of the four (`digest` below): an index entry of the fields
    -- themselves is limited to 2704 bytes, which AVUs within avu's bounds can pass.
    digest BYTEA NOT NULL UNIQUE
);
CREATE INDEX IF NOT EXISTS avus_by_path ON avus (path);
CREATE TABLE IF NOT EXISTS history (
    id BIGSERIAL PRIMARY KEY,
    at_ms BIGINT NOT NULL,
    actor TEXT NOT NULL,
    relayed BOOLEAN NOT NULL,
    op TEXT NOT NULL CHECK (op IN ('add', 'remove')),
    path TEXT NOT NULL,
    attribute TEXT NOT NULL,
    value TEXT NOT NULL,
    unit TEXT NOT NULL,
    source TEXT,
    via TEXT
);
CREATE INDEX IF NOT EXISTS history_by_path ON history (path);
CREATE OR REPLACE FUNCTION avu_history_is_append_only() RETURNS trigger
    LANGUAGE plpgsql AS $$ BEGIN RAISE EXCEPTION 'avu history is append-only'; END $$;
CREATE OR REPLACE TRIGGER history_is_append_only BEFORE UPDATE OR DELETE ON history
    FOR EACH STATEMENT EXECUTE FUNCTION avu_history_is_append_only();
CREATE OR REPLACE TRIGGER history_is_never_truncated BEFORE TRUNCATE ON history
    FOR EACH STATEMENT EXECUTE FUNCTION avu_history_is_append_only();
CREATE TABLE IF NOT EXISTS spent_states (
    id TEXT PRIMARY KEY,
    expires_ms BIGINT NOT NULL
);
CREATE TABLE IF NOT EXISTS state_key (
    one BOOLEAN PRIMARY KEY DEFAULT TRUE CHECK (one),
    key BYTEA NOT NULL
);
";

/// Why the shared store could not be used.
#[derive(Debug, thiserror::Error)]
pub enum SharedError {
    #[error("{}", said(.0))]
    Postgres(#[from] postgres::Error),
    #[error("{0}")]
    Connect(mesh_core::postgres::PgConnectError),
    #[error(
        "its sealing key (table state_key) is {0} bytes, not 32: restore it, or delete the row to make a new one (questions asked before are then refused)"
    )]
    BadKey(usize),
}

/// The server's own errors stay `Postgres` (worded by `said`, a certificate not trusted
/// naming `database_ca`); the rest of connecting is `Connect`.
impl From<mesh_core::postgres::PgConnectError> for SharedError {
    fn from(e: mesh_core::postgres::PgConnectError) -> Self {
        match e {
            mesh_core::postgres::PgConnectError::Postgres(e) => SharedError::Postgres(e),
            other => SharedError::Connect(other),
        }
    }
}

/// What went wrong, in the server's words when it refused something, with where to look
/// when it could not be reached.
fn said(e: &postgres::Error) -> String {
    mesh_core::postgres::said(e, "avu's config.json")
}

/// A connection to the shared store, made again when it was lost (the server restarted).
pub(crate) struct Shared {
    /// How to reach the database again (TLS as its URL says).
    connector: mesh_core::postgres::Connector,
    client: Parting,
    /// The key every instance seals questions with.
    pub key: [u8; 32],
}

impl Shared {
    /// Connects to `url`, makes the schema if it is not there and reads the sealing key
    /// (made by the first instance). Blocking: run on a thread of its own when called from
    /// async code (the client runs a runtime of its own, which cannot start inside another).
    pub fn connect(
        url: &str,
        authority: Option<&std::path::Path>,
        fresh_key: [u8; 32],
    ) -> Result<Shared, SharedError> {
        let connector = mesh_core::postgres::Connector::new(url, authority)?;
        let mut client = connector.connect()?;
        let mut tx = client.transaction()?;
        tx.execute("SELECT pg_advisory_xact_lock($1)", &[&SCHEMA_LOCK])?;
        tx.batch_execute(SCHEMA)?;
        tx.commit()?;
        let key = state_key(&mut client, fresh_key)?;
        Ok(Shared {
            connector,
            client: Parting::new(client),
            key,
        })
    }

    /// The connection, made again if the last one was closed.
    fn client(&mut self) -> Result<&mut Client, SharedError> {
        if self.client.is_closed() {
            self.client = Parting::new(self.connector.connect()?);
        }
        Ok(&mut *self.client)
    }

    /// Runs a read; if the connection turns out to be gone (the server restarted since the
    /// last call), once more on a new one.
    pub fn read<T>(
        &mut self,
        f: impl Fn(&mut Client) -> Result<T, postgres::Error>,
    ) -> Result<T, SharedError> {
        match f(self.client()?) {
            Err(_) if self.client.is_closed() => Ok(f(self.client()?)?),
            done => Ok(done?),
        }
    }

    /// Begins a transaction, on a new connection if the old one is gone (the server
    /// restarted since the last call: asked with an empty query first, so that a write is
    /// never tried twice).
    pub fn begin(&mut self) -> Result<Transaction<'_>, SharedError> {
        if self.client.is_closed() || self.client.is_valid(PROBE_WITHIN).is_err() {
            self.client = Parting::new(self.connector.connect()?);
        }
        Ok(self.client.transaction()?)
    }
}

/// The key every instance seals questions with: the first instance's, made once.
fn state_key(client: &mut Client, fresh: [u8; 32]) -> Result<[u8; 32], SharedError> {
    client.execute(
        "INSERT INTO state_key (key) VALUES ($1) ON CONFLICT DO NOTHING",
        &[&fresh.as_slice()],
    )?;
    let row = client.query_one("SELECT key FROM state_key", &[])?;
    let key: Vec<u8> = row.get(0);
    key.as_slice()
        .try_into()
        .map_err(|_| SharedError::BadKey(key.len()))
}

/// What identifies an AVU on a path in the shared store: SHA-256 of the four fields, each
/// preceded by its length, so that no two AVUs share it.
pub(crate) fn digest(path: &str, attribute: &str, value: &str, unit: &str) -> Vec<u8> {
    use sha2::{Digest, Sha256};
    let mut h = Sha256::new();
    for field in [path, attribute, value, unit] {
        h.update((field.len() as u64).to_be_bytes());
        h.update(field.as_bytes());
    }
    h.finalize().to_vec()
}

/// Marks a sealed state's id used inside `tx`; `false` if it was used already.
pub(crate) fn spend_state(
    tx: &mut Transaction<'_>,
    id: &str,
    expires_ms: u64,
) -> Result<bool, postgres::Error> {
    // Forgotten a while after they expire, not at once: instances' clocks differ, and one
    // ahead must not forget a state another still takes as live.
    tx.execute(
        "DELETE FROM spent_states WHERE expires_ms < $1",
        &[&(now_ms().saturating_sub(FORGET_AFTER_MS) as i64)],
    )?;
    let inserted = tx.execute(
        "INSERT INTO spent_states (id, expires_ms) VALUES ($1, $2) ON CONFLICT DO NOTHING",
        &[&id, &(expires_ms as i64)],
    )?;
    Ok(inserted == 1)
}
