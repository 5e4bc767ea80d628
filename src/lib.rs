//! mesh: modules serving tools on a NATS bus, reached by a command line and by MCP.
//!
//! Read `docs/ARCHITECTURE.md` for the map; `subjects/` holds the wire contract.

pub mod actor;
pub mod audit;
pub mod cli;
pub mod client;
#[doc(hidden)]
pub mod fuzzing;
pub mod grants;
pub mod layout;
pub mod mcp;
pub mod modules;
pub mod natsd;
pub mod runtime;
pub mod state;
pub mod subjects;
