//! Built-in modules, each in a file of its own.

pub mod avu;
pub mod catalog;
pub mod decide;
pub mod echo;
pub mod sqlite;
