//! The one integration-test binary: every test talks to a real nats-server it starts itself.

mod apply;
mod audit;
mod avu;
mod bus;
mod catalog;
mod cli;
mod console_fast;
mod crates_hostile;
mod decide;
mod deps;
mod faults;
mod fuzz_corpus;
mod hostile;
mod hostile_relay;
mod identity;
mod learn;
mod list_changed;
mod listing;
mod mcp;
mod outcomes;
mod plain;
mod raw;
mod runtime;
mod security;
mod services;
mod up;
