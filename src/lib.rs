//! mesh: the `mesh` command's library — the command line, the MCP relays (`mesh mcp`,
//! `mesh serve`, the console client) and `mesh up`. It is built on `mesh-core` (the
//! contract, runtime and client) and `mesh-bus` (grants, layout, call log, audit; the
//! relays never use it), and serves the modules that need nothing heavy (catalog, echo, avu)
//! itself; decide is a binary of its own.
//!
//! Read `docs/ARCHITECTURE.md` for the map; `subjects/` holds the wire contract.

pub mod builtin;
pub mod cli;
pub mod console;
#[doc(hidden)]
pub mod fuzzing;
pub mod mcp;
pub mod state;
