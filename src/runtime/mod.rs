//! The module runtime: declare a module's tools, serve them on the bus, answer `tools` and `$SRV`.

pub(crate) mod arguments;
mod module;
mod registration;
pub mod request_state;
mod serve;
mod services;

pub use module::{
    Call, Continuation, HandlerFuture, Module, ModuleError, Tool, blocking, off_runtime,
};
pub(crate) use registration::open_bucket;
pub use registration::{RegisterError, Registry, RegistryFuture};
pub use serve::{ServeError, ServeOptions, Serving, serve};
