//! The module runtime: declare a module's tools, serve them on the bus, answer `tools` and `$SRV`.

mod arguments;
mod module;
mod serve;
mod services;

pub use module::{Call, Continuation, HandlerFuture, Module, ModuleError, Tool};
pub use serve::{ServeError, ServeOptions, Serving, serve};
