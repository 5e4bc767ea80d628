//! mesh-core: what a module author depends on — the wire contract (`subjects`), who is
//! calling (`actor`), serving tools (`runtime`) and calling them (`client`).
//!
//! Its dependency tree holds no SQLite, DuckDB, MCP or HTTP; the surfaces and the modules
//! are crates built on it (see `docs/ARCHITECTURE.md`).

pub mod actor;
pub mod canonical;
pub mod client;
#[doc(hidden)]
pub mod fuzzing;
#[cfg(feature = "log")]
pub mod log;
pub mod permission;
#[cfg(feature = "postgres")]
pub mod postgres;
pub mod runtime;
pub mod subjects;
#[cfg(feature = "table")]
pub mod table;
pub mod telemetry;
