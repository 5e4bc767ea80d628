//! A module's state, one SQL layer: one SQLite file, or PostgreSQL shared by every instance
//! of the module. The SQL is written once, with SQLite's `?N` marks (sent to PostgreSQL as
//! `$N`); values cross as five kinds (null, integer, real, text, bytes) on both. decide's
//! sidecar and avu's store keep their state through it, with one way to spend a sealed
//! state once and one way to make a shared schema ([`spend_state`], [`Schema`]).

use std::cell::RefCell;
use std::collections::HashMap;
use std::ops::Deref;

use postgres::types::{ToSql, Type};

/// A value in a statement or a row.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    Null,
    Int(i64),
    Real(f64),
    Text(String),
    Bytes(Vec<u8>),
}

/// What a statement gives.
pub type DbResult<T> = Result<T, DbError>;

/// Why a statement failed.
#[derive(Debug, thiserror::Error)]
pub enum DbError {
    #[error("{0}")]
    Sqlite(#[from] rusqlite::Error),
    #[error("{}", said(.0))]
    Postgres(#[from] postgres::Error),
    #[error("{0}")]
    Connect(mesh_core::postgres::PgConnectError),
    #[error("column {index} is {found}, not {wanted}")]
    Column {
        index: usize,
        wanted: &'static str,
        found: String,
    },
    #[error("parameter {index} ({value:?}) cannot be sent as {ty}")]
    Param {
        index: usize,
        value: Value,
        ty: String,
    },
    #[error("the query returned no rows")]
    NoRow,
}

/// The server's own errors stay `Postgres` (worded by `said`, a certificate not trusted
/// naming `database_ca`); the rest of connecting is `Connect`.
impl From<mesh_core::postgres::PgConnectError> for DbError {
    fn from(e: mesh_core::postgres::PgConnectError) -> Self {
        match e {
            mesh_core::postgres::PgConnectError::Postgres(e) => DbError::Postgres(e),
            other => DbError::Connect(other),
        }
    }
}

/// The server's words when it refused something; where to look when it could not be reached.
fn said(e: &postgres::Error) -> String {
    mesh_core::postgres::said(e, "the module's config.json")
}

/// What a statement takes as a parameter.
pub trait Param {
    fn value(&self) -> Value;
}

impl<T: Param + ?Sized> Param for &T {
    fn value(&self) -> Value {
        (**self).value()
    }
}
impl Param for str {
    fn value(&self) -> Value {
        Value::Text(self.to_owned())
    }
}
impl Param for String {
    fn value(&self) -> Value {
        Value::Text(self.clone())
    }
}
impl Param for i64 {
    fn value(&self) -> Value {
        Value::Int(*self)
    }
}
impl Param for i32 {
    fn value(&self) -> Value {
        Value::Int(i64::from(*self))
    }
}
impl Param for u32 {
    fn value(&self) -> Value {
        Value::Int(i64::from(*self))
    }
}
impl Param for usize {
    fn value(&self) -> Value {
        Value::Int(*self as i64)
    }
}
impl Param for u64 {
    fn value(&self) -> Value {
        Value::Int(*self as i64)
    }
}
impl Param for f64 {
    fn value(&self) -> Value {
        Value::Real(*self)
    }
}
impl Param for bool {
    fn value(&self) -> Value {
        Value::Int(i64::from(*self))
    }
}
impl Param for [u8] {
    fn value(&self) -> Value {
        Value::Bytes(self.to_vec())
    }
}
impl Param for Vec<u8> {
    fn value(&self) -> Value {
        Value::Bytes(self.clone())
    }
}
impl<const N: usize> Param for [u8; N] {
    fn value(&self) -> Value {
        Value::Bytes(self.to_vec())
    }
}
impl Param for Value {
    fn value(&self) -> Value {
        self.clone()
    }
}
impl<T: Param> Param for Option<T> {
    fn value(&self) -> Value {
        self.as_ref().map_or(Value::Null, Param::value)
    }
}

/// The parameters of a statement: `params![a, b]`.
#[macro_export]
macro_rules! params {
    () => { &[] as &[&dyn $crate::Param] };
    ($($p:expr),+ $(,)?) => { &[$(&$p as &dyn $crate::Param),+] as &[&dyn $crate::Param] };
}

/// What a row's column reads as.
pub trait FromValue: Sized {
    fn from_value(index: usize, v: &Value) -> Result<Self, DbError>;
}

fn wrong(index: usize, wanted: &'static str, v: &Value) -> DbError {
    DbError::Column {
        index,
        wanted,
        found: format!("{v:?}"),
    }
}

impl FromValue for Value {
    fn from_value(_: usize, v: &Value) -> Result<Self, DbError> {
        Ok(v.clone())
    }
}
impl FromValue for String {
    fn from_value(index: usize, v: &Value) -> Result<Self, DbError> {
        match v {
            Value::Text(s) => Ok(s.clone()),
            _ => Err(wrong(index, "text", v)),
        }
    }
}
impl FromValue for Vec<u8> {
    fn from_value(index: usize, v: &Value) -> Result<Self, DbError> {
        match v {
            Value::Bytes(b) => Ok(b.clone()),
            _ => Err(wrong(index, "bytes", v)),
        }
    }
}
impl FromValue for i64 {
    fn from_value(index: usize, v: &Value) -> Result<Self, DbError> {
        match v {
            Value::Int(n) => Ok(*n),
            _ => Err(wrong(index, "an integer", v)),
        }
    }
}
impl FromValue for usize {
    fn from_value(index: usize, v: &Value) -> Result<Self, DbError> {
        match v {
            Value::Int(n) if *n >= 0 => Ok(*n as usize),
            _ => Err(wrong(index, "a count", v)),
        }
    }
}
impl FromValue for f64 {
    fn from_value(index: usize, v: &Value) -> Result<Self, DbError> {
        match v {
            Value::Real(f) => Ok(*f),
            Value::Int(n) => Ok(*n as f64),
            _ => Err(wrong(index, "a number", v)),
        }
    }
}
impl FromValue for bool {
    fn from_value(index: usize, v: &Value) -> Result<Self, DbError> {
        match v {
            Value::Int(n) => Ok(*n != 0),
            _ => Err(wrong(index, "a truth value", v)),
        }
    }
}
impl<T: FromValue> FromValue for Option<T> {
    fn from_value(index: usize, v: &Value) -> Result<Self, DbError> {
        match v {
            Value::Null => Ok(None),
            v => T::from_value(index, v).map(Some),
        }
    }
}

/// One row of a result.
#[derive(Debug)]
pub struct Row(Vec<Value>);

impl Row {
    pub fn get<T: FromValue>(&self, index: usize) -> Result<T, DbError> {
        let v = self.0.get(index).ok_or(DbError::Column {
            index,
            wanted: "a column",
            found: format!("a row of {}", self.0.len()),
        })?;
        T::from_value(index, v)
    }

    pub fn values(&self) -> &[Value] {
        &self.0
    }
}

/// A connection to a module's store.
pub enum Db {
    Sqlite(rusqlite::Connection),
    Postgres(Box<Pg>),
}

/// A PostgreSQL connection, made again when the server closed it, and its prepared
/// statements.
pub struct Pg {
    connector: mesh_core::postgres::Connector,
    client: RefCell<mesh_core::postgres::Parting>,
    statements: RefCell<HashMap<String, postgres::Statement>>,
    /// Inside a transaction: a lost connection is then the transaction's failure, not
    /// something to retry on a new one.
    in_transaction: std::cell::Cell<bool>,
}

impl Pg {
    /// Connects to `url` (over TLS as its sslmode says, the server checked against
    /// `authority` or the system's authorities).
    pub fn connect(url: &str, authority: Option<&std::path::Path>) -> Result<Pg, DbError> {
        Pg::made_by(mesh_core::postgres::Connector::new(url, authority)?)
    }

    /// A new connection made by `connector`.
    fn made_by(connector: mesh_core::postgres::Connector) -> Result<Pg, DbError> {
        let client = session(&connector)?;
        Ok(Pg {
            connector,
            client: RefCell::new(mesh_core::postgres::Parting::new(client)),
            statements: RefCell::new(HashMap::new()),
            in_transaction: std::cell::Cell::new(false),
        })
    }
}

/// How long a statement waits for another session's lock, and how long a session may sit
/// in an open transaction: another instance frozen or cut off mid-transaction holds up this
/// one (and, in decide, every call waiting on its sidecar) this long at most, not until the
/// server notices. A session that must wait longer says so itself (the lake's mirror lock).
const SESSION_BOUNDS: &str =
    "SET lock_timeout = '30s'; SET idle_in_transaction_session_timeout = '60s'";

/// A new connection, its waits bounded ([`SESSION_BOUNDS`]).
fn session(connector: &mesh_core::postgres::Connector) -> Result<postgres::Client, DbError> {
    let mut client = connector.connect()?;
    client.batch_execute(SESSION_BOUNDS)?;
    Ok(client)
}

/// How to open a session of its own to a shared store's server ([`Db::opener`]): a new
/// connection made as the first was.
pub struct Opener(mesh_core::postgres::Connector);

impl Opener {
    /// A new session (one that may wait on a lock without holding another up).
    pub fn open(&self) -> Result<Db, DbError> {
        Ok(Db::Postgres(Box::new(Pg::made_by(self.0.clone())?)))
    }
}

impl Pg {
    /// The connection, made again if the last one closed (the server restarted) and no
    /// transaction was open on it.
    fn ready(&self) -> Result<(), DbError> {
        if self.client().is_closed() && !self.in_transaction.get() {
            *self.client.borrow_mut() =
                mesh_core::postgres::Parting::new(session(&self.connector)?);
            self.statements.borrow_mut().clear();
        }
        Ok(())
    }

    /// Runs `f`; if it failed because the connection had gone (the server restarted since the
    /// last call), once more on a new one. Only for what may be asked twice — a read, a
    /// BEGIN — and never inside a transaction, which went with the connection.
    fn again_if_gone<T>(&self, f: impl Fn() -> Result<T, DbError>) -> Result<T, DbError> {
        match f() {
            Err(_) if !self.in_transaction.get() && self.client().is_closed() => {
                self.ready()?;
                f()
            }
            done => done,
        }
    }

    fn statement(&self, sql: &str) -> Result<postgres::Statement, DbError> {
        self.ready()?;
        if let Some(s) = self.statements.borrow().get(sql) {
            return Ok(s.clone());
        }
        let s = self.client().prepare(&dollars(sql))?;
        self.statements
            .borrow_mut()
            .insert(sql.to_owned(), s.clone());
        Ok(s)
    }

    pub fn client(&self) -> std::cell::RefMut<'_, postgres::Client> {
        std::cell::RefMut::map(self.client.borrow_mut(), |c| &mut **c)
    }
}

/// SQLite's `?N` (and bare `?`: one more than the largest before it, as SQLite counts) marks
/// as PostgreSQL's `$N`; text in quotes ('…', "…") and comments (`--`, `/* */`) is left as
/// it is. The modules' SQL is all constants; this only has to read it right.
pub fn dollars(sql: &str) -> String {
    let mut out = String::with_capacity(sql.len() + 8);
    let mut largest = 0u32;
    let mut chars = sql.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\'' | '"' => {
                // To the closing quote; a doubled one ('it''s') closes and opens again. In an
                // E'…' string a backslash escapes the next character.
                let escapes = c == '\'' && matches!(out.chars().last(), Some('E' | 'e'));
                out.push(c);
                while let Some(d) = chars.next() {
                    out.push(d);
                    if escapes && d == '\\' {
                        if let Some(e) = chars.next() {
                            out.push(e);
                        }
                    } else if d == c {
                        break;
                    }
                }
            }
            '-' if chars.peek() == Some(&'-') => {
                out.push(c);
                for d in chars.by_ref() {
                    out.push(d);
                    if d == '\n' {
                        break;
                    }
                }
            }
            '/' if chars.peek() == Some(&'*') => {
                out.push(c);
                out.push(chars.next().unwrap_or('*'));
                let mut star = false;
                for d in chars.by_ref() {
                    out.push(d);
                    if star && d == '/' {
                        break;
                    }
                    star = d == '*';
                }
            }
            '?' => {
                let mut digits = String::new();
                while let Some(d) = chars.next_if(char::is_ascii_digit) {
                    digits.push(d);
                }
                let n = digits.parse::<u32>().unwrap_or(largest + 1);
                largest = largest.max(n);
                out.push('$');
                out.push_str(&n.to_string());
            }
            c => out.push(c),
        }
    }
    out
}

/// A value as the Rust type PostgreSQL wants for a parameter of type `ty`.
fn to_pg(index: usize, v: Value, ty: &Type) -> Result<Box<dyn ToSql + Sync>, DbError> {
    let refused = |v: Value| DbError::Param {
        index,
        value: v,
        ty: ty.name().to_owned(),
    };
    Ok(match (v, ty) {
        (Value::Null, t) if *t == Type::INT8 => Box::new(None::<i64>),
        (Value::Null, t) if *t == Type::INT4 => Box::new(None::<i32>),
        (Value::Null, t) if *t == Type::FLOAT8 => Box::new(None::<f64>),
        (Value::Null, t) if *t == Type::BOOL => Box::new(None::<bool>),
        (Value::Null, t) if *t == Type::BYTEA => Box::new(None::<Vec<u8>>),
        (Value::Null, _) => Box::new(None::<String>),
        (Value::Int(n), t) if *t == Type::INT8 => Box::new(n),
        (Value::Int(n), t) if *t == Type::INT4 => match i32::try_from(n) {
            Ok(n) => Box::new(n),
            Err(_) => return Err(refused(Value::Int(n))),
        },
        (Value::Int(n), t) if *t == Type::FLOAT8 => Box::new(n as f64),
        (Value::Int(n), t) if *t == Type::BOOL => Box::new(n != 0),
        (Value::Int(n), t) if *t == Type::TEXT || *t == Type::VARCHAR => Box::new(n.to_string()),
        (Value::Bytes(b), t) if *t == Type::BYTEA => Box::new(b),
        (Value::Real(f), t) if *t == Type::FLOAT8 => Box::new(f),
        (Value::Real(f), t) if *t == Type::FLOAT4 => Box::new(f as f32),
        (Value::Text(s), t)
            if *t == Type::TEXT
                || *t == Type::VARCHAR
                || *t == Type::BPCHAR
                || *t == Type::NAME =>
        {
            Box::new(s)
        }
        (v, _) => return Err(refused(v)),
    })
}

/// A column of a PostgreSQL row as one of the four kinds.
fn from_pg(row: &postgres::Row, i: usize) -> Result<Value, DbError> {
    let ty = row.columns()[i].type_();
    let v = if *ty == Type::INT8 {
        row.try_get::<_, Option<i64>>(i)?.map(Value::Int)
    } else if *ty == Type::INT4 {
        row.try_get::<_, Option<i32>>(i)?
            .map(|n| Value::Int(n.into()))
    } else if *ty == Type::INT2 {
        row.try_get::<_, Option<i16>>(i)?
            .map(|n| Value::Int(n.into()))
    } else if *ty == Type::BOOL {
        row.try_get::<_, Option<bool>>(i)?
            .map(|b| Value::Int(b.into()))
    } else if *ty == Type::FLOAT8 {
        row.try_get::<_, Option<f64>>(i)?.map(Value::Real)
    } else if *ty == Type::FLOAT4 {
        row.try_get::<_, Option<f32>>(i)?
            .map(|f| Value::Real(f.into()))
    } else if *ty == Type::TEXT || *ty == Type::VARCHAR || *ty == Type::BPCHAR || *ty == Type::NAME
    {
        row.try_get::<_, Option<String>>(i)?.map(Value::Text)
    } else if *ty == Type::BYTEA {
        row.try_get::<_, Option<Vec<u8>>>(i)?.map(Value::Bytes)
    } else {
        return Err(DbError::Column {
            index: i,
            wanted: "bigint, double precision, boolean, text or bytea (cast it)",
            found: ty.name().to_owned(),
        });
    };
    Ok(v.unwrap_or(Value::Null))
}

fn from_sqlite(v: rusqlite::types::ValueRef<'_>, _index: usize) -> Result<Value, DbError> {
    use rusqlite::types::ValueRef;
    Ok(match v {
        ValueRef::Null => Value::Null,
        ValueRef::Integer(n) => Value::Int(n),
        ValueRef::Real(f) => Value::Real(f),
        ValueRef::Text(t) => Value::Text(String::from_utf8_lossy(t).into_owned()),
        ValueRef::Blob(b) => Value::Bytes(b.to_vec()),
    })
}

fn to_sqlite(v: Value) -> rusqlite::types::Value {
    match v {
        Value::Null => rusqlite::types::Value::Null,
        Value::Int(n) => rusqlite::types::Value::Integer(n),
        Value::Real(f) => rusqlite::types::Value::Real(f),
        Value::Text(s) => rusqlite::types::Value::Text(s),
        Value::Bytes(b) => rusqlite::types::Value::Blob(b),
    }
}

impl Db {
    /// Whether this is the store shared by every instance.
    pub fn is_shared(&self) -> bool {
        matches!(self, Db::Postgres(_))
    }

    /// For the shared store, how to open a session of its own to the same server,
    /// taken so that the connecting happens after whatever lock guards
    /// this connection is let go; `None` for SQLite, which one process alone opens.
    pub fn opener(&self) -> Option<Opener> {
        match self {
            Db::Sqlite(_) => None,
            Db::Postgres(pg) => Some(Opener(pg.connector.clone())),
        }
    }

    /// Whether this is a PostgreSQL connection the server has closed. Asked before a
    /// statement that must run on this session and no other (a session-level lock is held
    /// by it): the statements themselves connect again when the connection is gone.
    pub fn is_gone(&self) -> bool {
        match self {
            Db::Sqlite(_) => false,
            Db::Postgres(pg) => pg.client().is_closed(),
        }
    }

    /// Whether `e` is PostgreSQL giving up on a lock it waited for (`lock_timeout`).
    pub fn is_lock_timeout(e: &DbError) -> bool {
        matches!(e, DbError::Postgres(p) if p.code() == Some(&postgres::error::SqlState::LOCK_NOT_AVAILABLE))
    }

    /// Runs one statement; how many rows it changed.
    pub fn execute(&self, sql: &str, params: &[&dyn Param]) -> Result<u64, DbError> {
        match self {
            Db::Sqlite(db) => {
                let values = params.iter().map(|p| to_sqlite(p.value()));
                Ok(db
                    .prepare_cached(sql)?
                    .execute(rusqlite::params_from_iter(values))? as u64)
            }
            Db::Postgres(pg) => {
                let statement = pg.statement(sql)?;
                let args = pg_args(&statement, params)?;
                let refs: Vec<&(dyn ToSql + Sync)> = args.iter().map(|b| b.as_ref()).collect();
                Ok(pg.client().execute(&statement, &refs)?)
            }
        }
    }

    /// Runs statements without parameters, one after the other.
    pub fn execute_batch(&self, sql: &str) -> Result<(), DbError> {
        match self {
            Db::Sqlite(db) => Ok(db.execute_batch(sql)?),
            Db::Postgres(pg) => {
                pg.ready()?;
                Ok(pg.client().batch_execute(sql)?)
            }
        }
    }

    /// Every row of a query.
    pub fn query(&self, sql: &str, params: &[&dyn Param]) -> Result<Vec<Row>, DbError> {
        self.rows(sql, params, false).map(|(_, rows)| rows)
    }

    /// Every row of a query, and the names of its columns.
    pub fn query_named(
        &self,
        sql: &str,
        params: &[&dyn Param],
    ) -> Result<(Vec<String>, Vec<Row>), DbError> {
        self.rows(sql, params, true)
    }

    /// Every row of a query, with the names of its columns when `named` (none made
    /// otherwise: most queries are read by position).
    fn rows(
        &self,
        sql: &str,
        params: &[&dyn Param],
        named: bool,
    ) -> Result<(Vec<String>, Vec<Row>), DbError> {
        let names_of = |names: &mut dyn Iterator<Item = &str>| -> Vec<String> {
            if named {
                names.map(str::to_owned).collect()
            } else {
                Vec::new()
            }
        };
        match self {
            Db::Sqlite(db) => {
                let mut statement = db.prepare_cached(sql)?;
                let names = names_of(&mut statement.column_names());
                let width = statement.column_count();
                let values = params.iter().map(|p| to_sqlite(p.value()));
                let mut rows = statement.query(rusqlite::params_from_iter(values))?;
                let mut out = Vec::new();
                while let Some(row) = rows.next()? {
                    let row = (0..width)
                        .map(|i| from_sqlite(row.get_ref(i)?, i))
                        .collect::<Result<_, DbError>>()?;
                    out.push(Row(row));
                }
                Ok((names, out))
            }
            Db::Postgres(pg) => pg.again_if_gone(|| {
                let statement = pg.statement(sql)?;
                let names = names_of(&mut statement.columns().iter().map(|c| c.name()));
                let args = pg_args(&statement, params)?;
                let refs: Vec<&(dyn ToSql + Sync)> = args.iter().map(|b| b.as_ref()).collect();
                let rows = pg.client().query(&statement, &refs)?;
                let rows = rows
                    .iter()
                    .map(|r| {
                        (0..r.len())
                            .map(|i| from_pg(r, i))
                            .collect::<Result<_, _>>()
                            .map(Row)
                    })
                    .collect::<Result<_, _>>()?;
                Ok((names, rows))
            }),
        }
    }

    /// Every row of a query, each made into a `T`.
    pub fn query_map<T>(
        &self,
        sql: &str,
        params: &[&dyn Param],
        f: impl FnMut(&Row) -> Result<T, DbError>,
    ) -> Result<Vec<T>, DbError> {
        self.query(sql, params)?.iter().map(f).collect()
    }

    /// The first row of a query, if there is one.
    pub fn query_opt<T>(
        &self,
        sql: &str,
        params: &[&dyn Param],
        f: impl FnOnce(&Row) -> Result<T, DbError>,
    ) -> Result<Option<T>, DbError> {
        self.query(sql, params)?.first().map(f).transpose()
    }

    /// The first row of a query, which must be there.
    pub fn query_row<T>(
        &self,
        sql: &str,
        params: &[&dyn Param],
        f: impl FnOnce(&Row) -> Result<T, DbError>,
    ) -> Result<T, DbError> {
        self.query_opt(sql, params, f)?.ok_or(DbError::NoRow)
    }

    /// Begins a transaction: committed by `commit`, rolled back when dropped without.
    pub fn transaction(&self) -> Result<Tx<'_>, DbError> {
        match self {
            Db::Sqlite(db) => db.execute_batch("BEGIN")?,
            Db::Postgres(pg) => {
                pg.again_if_gone(|| {
                    pg.ready()?;
                    Ok(pg.client().batch_execute("BEGIN")?)
                })?;
                pg.in_transaction.set(true);
            }
        }
        Ok(Tx {
            db: self,
            open: true,
        })
    }

    fn end(&self, how: &str) -> Result<(), DbError> {
        match self {
            Db::Sqlite(db) => Ok(db.execute_batch(how)?),
            Db::Postgres(pg) => {
                pg.in_transaction.set(false);
                Ok(pg.client().batch_execute(how)?)
            }
        }
    }
}

fn pg_args(
    statement: &postgres::Statement,
    params: &[&dyn Param],
) -> Result<Vec<Box<dyn ToSql + Sync>>, DbError> {
    params
        .iter()
        .zip(statement.params())
        .enumerate()
        .map(|(i, (p, ty))| to_pg(i + 1, p.value(), ty))
        .collect()
}

/// An open transaction; statements run on it through `Deref`.
pub struct Tx<'a> {
    db: &'a Db,
    open: bool,
}

impl Tx<'_> {
    /// Commits; a COMMIT that failed leaves the transaction to be rolled back on drop (in
    /// SQLite it would otherwise stay open on the connection).
    pub fn commit(mut self) -> Result<(), DbError> {
        self.db.end("COMMIT")?;
        self.open = false;
        Ok(())
    }

    pub fn rollback(mut self) -> Result<(), DbError> {
        self.open = false;
        self.db.end("ROLLBACK")
    }
}

impl Deref for Tx<'_> {
    type Target = Db;
    fn deref(&self) -> &Db {
        self.db
    }
}

impl Drop for Tx<'_> {
    fn drop(&mut self) {
        if self.open {
            let _ = self.db.end("ROLLBACK");
        }
    }
}

/// How long past its expiry a spent state is kept (clock differences between instances).
const FORGET_AFTER_MS: u64 = 10 * 60 * 1000;

/// The table of states already answered, as every module that seals `requestState` keeps
/// it (in SQLite, a migration step: `mesh_sqlite::SPENT_STATES`), and the key the module's
/// instances seal with: made with every module's [`Schema`].
const SPENT_STATES_PG: &str = "
CREATE TABLE IF NOT EXISTS spent_states (
    id TEXT PRIMARY KEY,
    expires_ms BIGINT NOT NULL
);
CREATE TABLE IF NOT EXISTS state_key (
    one BOOLEAN PRIMARY KEY DEFAULT TRUE CHECK (one),
    key BYTEA NOT NULL
);
";

/// Why a shared store's sealing key could not be had.
#[derive(Debug, thiserror::Error)]
pub enum KeyError {
    #[error(transparent)]
    Db(#[from] DbError),
    #[error(
        "its sealing key (table state_key) is {0} bytes, not 32: restore it, or delete the row to make a new one (questions asked before are then refused)"
    )]
    BadLength(usize),
}

/// The key every instance of a module seals its questions with, kept in its shared store
/// (made with its [`Schema`]): the first instance's, `fresh` when none is there yet.
pub fn shared_key(db: &Db, fresh: [u8; 32]) -> Result<[u8; 32], KeyError> {
    db.execute(
        "INSERT INTO state_key (key) VALUES (?1) ON CONFLICT DO NOTHING",
        params![fresh],
    )?;
    let key: Vec<u8> = db.query_row("SELECT key FROM state_key", params![], |r| r.get(0))?;
    let found = key.len();
    key.try_into().map_err(|_| KeyError::BadLength(found))
}

/// Marks a sealed state's id used, inside the caller's transaction so that the state is
/// spent exactly when what it answered is written. `false`: it was used already. States are
/// forgotten a while after their expiry (the seal refuses them anyway; the while covers
/// clocks that differ between instances).
pub fn spend_state(tx: &Db, id: &str, expires_ms: u64) -> Result<bool, DbError> {
    let now = mesh_core::subjects::catalog::now_ms();
    tx.execute(
        "DELETE FROM spent_states WHERE expires_ms < ?1",
        params![now.saturating_sub(FORGET_AFTER_MS) as i64],
    )?;
    let inserted = tx.execute(
        "INSERT INTO spent_states (id, expires_ms) VALUES (?1, ?2) ON CONFLICT DO NOTHING",
        params![id, expires_ms as i64],
    )?;
    Ok(inserted == 1)
}

/// A module's tables in PostgreSQL: made by the first instance to start (under an advisory
/// lock, so that instances starting together make them once), with the version recorded;
/// one from a newer module refused, not altered.
pub struct Schema {
    /// The advisory lock taken while the schema is made: one per module.
    pub lock: i64,
    /// The statements, each idempotent (`IF NOT EXISTS`, `OR REPLACE`): run on every start
    /// that finds an older version; the spent states' and the sealing key's tables are made
    /// with them.
    pub sql: &'static str,
    /// The table holding the version (`one BOOLEAN PRIMARY KEY`, `version BIGINT`).
    pub version_table: &'static str,
    pub version: i64,
}

/// Why a shared schema could not be made.
#[derive(Debug, thiserror::Error)]
pub enum SchemaError {
    #[error(transparent)]
    Db(#[from] DbError),
    #[error("schema version {found}, newer than this mesh knows ({known}); use a newer mesh")]
    TooNew { found: i64, known: i64 },
}

impl Schema {
    /// The version recorded, if any; one newer than [`Schema::version`] refused.
    pub fn recorded(&self, db: &Db) -> Result<Option<i64>, SchemaError> {
        let there: bool = db.query_row(
            "SELECT to_regclass(?1) IS NOT NULL",
            params![self.version_table],
            |r| r.get(0),
        )?;
        if !there {
            return Ok(None);
        }
        let found: Option<i64> = db.query_opt(
            &format!("SELECT version FROM {}", self.version_table),
            params![],
            |r| r.get(0),
        )?;
        match found {
            Some(v) if v > self.version => Err(SchemaError::TooNew {
                found: v,
                known: self.version,
            }),
            found => Ok(found),
        }
    }

    /// Makes the tables where this version's are not there yet (nothing when they are: no
    /// statement then waits on, or holds up, the other instances).
    pub fn make(&self, db: &Db) -> Result<(), SchemaError> {
        if self.recorded(db)? == Some(self.version) {
            return Ok(());
        }
        let tx = db.transaction()?;
        tx.execute("SELECT pg_advisory_xact_lock(?1)", params![self.lock])?;
        tx.execute_batch(&format!(
            "CREATE TABLE IF NOT EXISTS {} (
                one BOOLEAN PRIMARY KEY DEFAULT TRUE CHECK (one),
                version BIGINT NOT NULL
            );",
            self.version_table
        ))?;
        tx.execute_batch(self.sql)?;
        tx.execute_batch(SPENT_STATES_PG)?;
        match self.recorded(&tx)? {
            None => {
                tx.execute(
                    &format!("INSERT INTO {} (version) VALUES (?1)", self.version_table),
                    params![self.version],
                )?;
            }
            Some(v) if v < self.version => {
                tx.execute(
                    &format!("UPDATE {} SET version = ?1", self.version_table),
                    params![self.version],
                )?;
            }
            Some(_) => {}
        }
        tx.commit()?;
        Ok(())
    }
}

/// The tables and columns of a store, as the schema made them: `(table, column)` in order,
/// for tests that hold a module's two dialects to one schema.
pub fn columns(db: &Db) -> Result<Vec<(String, String)>, DbError> {
    let mut out = Vec::new();
    match db {
        Db::Sqlite(_) => {
            let tables: Vec<String> = db.query_map(
                "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'
                 ORDER BY name",
                params![],
                |r| r.get(0),
            )?;
            for t in tables {
                let cols: Vec<String> = db.query_map(
                    "SELECT name FROM pragma_table_info(?1) ORDER BY name",
                    params![t],
                    |r| r.get(0),
                )?;
                out.extend(cols.into_iter().map(|c| (t.clone(), c)));
            }
        }
        Db::Postgres(_) => {
            out = db.query_map(
                "SELECT table_name::TEXT, column_name::TEXT FROM information_schema.columns
                 WHERE table_schema = current_schema() ORDER BY table_name, column_name",
                params![],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )?;
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn marks_become_dollars_outside_quotes_and_comments() {
        assert_eq!(
            dollars("SELECT ?1, '?', ? FROM t WHERE a = ?2 AND b = 'it''s ?3'"),
            "SELECT $1, '?', $2 FROM t WHERE a = $2 AND b = 'it''s ?3'"
        );
        assert_eq!(
            dollars("SELECT 1 AS \"a?\" -- it's ?1\n/* ?2 it's */ WHERE x = ?1"),
            "SELECT 1 AS \"a?\" -- it's ?1\n/* ?2 it's */ WHERE x = $1"
        );
        assert_eq!(dollars("SELECT ?2, ?"), "SELECT $2, $3");
        assert_eq!(
            dollars("SELECT E'it\\'s ?1' WHERE a = ?1"),
            "SELECT E'it\\'s ?1' WHERE a = $1"
        );
    }

    #[test]
    fn bytes_cross_and_a_state_is_spent_once() {
        let db = Db::Sqlite(rusqlite::Connection::open_in_memory().unwrap());
        db.execute_batch(
            "CREATE TABLE k (key BLOB NOT NULL);
             CREATE TABLE spent_states (id TEXT PRIMARY KEY, expires_ms INTEGER NOT NULL);",
        )
        .unwrap();
        let key = [7u8; 32];
        db.execute("INSERT INTO k (key) VALUES (?1)", params![key])
            .unwrap();
        let back: Vec<u8> = db
            .query_row("SELECT key FROM k", params![], |r| r.get(0))
            .unwrap();
        assert_eq!(back, key);
        let e = db
            .query_row("SELECT key FROM k", params![], |r| r.get::<String>(0))
            .unwrap_err();
        assert!(e.to_string().contains("not text"), "{e}");
        let far = u64::MAX / 2;
        let tx = db.transaction().unwrap();
        assert!(spend_state(&tx, "s1", far).unwrap());
        assert!(!spend_state(&tx, "s1", far).unwrap(), "spent once");
        tx.commit().unwrap();
        // An expired state is forgotten on the way: the seal refuses it anyway.
        let tx = db.transaction().unwrap();
        assert!(spend_state(&tx, "old", 1).unwrap());
        assert!(spend_state(&tx, "other", far).unwrap());
        let left: i64 = tx
            .query_row(
                "SELECT count(*) FROM spent_states WHERE id = 'old'",
                params![],
                |r| r.get(0),
            )
            .unwrap();
        assert_eq!(left, 0);
        // One expired a minute ago is kept (an instance whose clock is behind may still
        // take it as live): spent, it stays spent.
        let minute_ago = mesh_core::subjects::catalog::now_ms() - 60_000;
        assert!(spend_state(&tx, "recent", minute_ago).unwrap());
        assert!(spend_state(&tx, "another", far).unwrap());
        assert!(
            !spend_state(&tx, "recent", minute_ago).unwrap(),
            "still spent within the grace"
        );
    }

    #[test]
    fn sqlite_rows_and_transactions() {
        let db = Db::Sqlite(rusqlite::Connection::open_in_memory().unwrap());
        db.execute_batch("CREATE TABLE t (a TEXT, n INTEGER, p REAL)")
            .unwrap();
        let tx = db.transaction().unwrap();
        tx.execute(
            "INSERT INTO t VALUES (?1, ?2, ?3)",
            params!["x", 2i64, None::<f64>],
        )
        .unwrap();
        drop(tx);
        assert_eq!(
            db.query_row("SELECT count(*) FROM t", params![], |r| r.get::<i64>(0))
                .unwrap(),
            0,
            "dropped without commit: rolled back"
        );
        let tx = db.transaction().unwrap();
        tx.execute("INSERT INTO t VALUES (?1, ?2, ?3)", params!["x", 2i64, 0.5])
            .unwrap();
        tx.commit().unwrap();
        let (a, n, p): (String, i64, Option<f64>) = db
            .query_row("SELECT a, n, p FROM t", params![], |r| {
                Ok((r.get(0)?, r.get(1)?, r.get(2)?))
            })
            .unwrap();
        assert_eq!((a.as_str(), n, p), ("x", 2, Some(0.5)));
        assert!(matches!(
            db.query_row("SELECT a FROM t WHERE n = ?1", params![9i64], |r| r
                .get::<String>(0)),
            Err(DbError::NoRow)
        ));
    }
}
