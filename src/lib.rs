//! mesh: the `mesh` command's library — the command line, the MCP relay (`mesh mcp`,
//! `mesh serve`, the console client), the audit, the accounts layout and `mesh up`. It is
//! built on `mesh-core` (the contract, runtime and client) and serves the modules that need
//! nothing heavy (catalog, echo, avu) itself; decide is a binary of its own.
//!
//! Read `docs/ARCHITECTURE.md` for the map; `subjects/` holds the wire contract.

pub mod audit;
pub mod builtin;
pub mod calllog;
pub mod cli;
pub mod cluster;
pub mod console;
#[doc(hidden)]
pub mod fuzzing;
pub mod grants;
pub mod layout;
pub mod learned;
pub mod mcp;
pub mod natsconf;
pub mod natsd;
pub mod process;
pub mod state;
