//! The module runtime: declare a module's tools, serve them on the bus, answer `tools` and `$SRV`.

#[doc(hidden)]
pub mod arguments;
mod module;
mod registration;
pub mod request_state;
mod serve;
mod services;
mod stop;
mod typed;

pub use module::{
    BlockingError, Call, Continuation, HandlerFuture, Module, ModuleError, Tool, off_runtime,
};
pub use registration::{BucketError, open_bucket};
pub use registration::{RegisterError, Registry, RegistryFuture};
pub use serve::{ServeError, ServeOptions, Serving, serve};
pub use stop::{Stop, private_dir};
pub use typed::{NoArgs, Reply, WithText, input_schema_of, schema_of};

/// The environment variable that names the mesh's state directory (`mesh up` sets it for
/// the modules it starts as processes).
pub const STATE_DIR_ENV: &str = "MESH_STATE_DIR";

/// The mesh's state directory, under which each module keeps its own (`<dir>/<module>`):
/// `$MESH_STATE_DIR`, else `$XDG_STATE_HOME/mesh`, else `~/.local/state/mesh`, else `.mesh`.
/// A relative value is ignored, as the XDG specification says of its variables: a state
/// directory that moves with the working directory would scatter keys and credentials.
pub fn default_state_dir() -> std::path::PathBuf {
    use std::path::PathBuf;
    let env = |k: &str| {
        std::env::var_os(k)
            .map(PathBuf::from)
            .filter(|v| v.is_absolute())
    };
    if let Some(dir) = env(STATE_DIR_ENV) {
        return dir;
    }
    env("XDG_STATE_HOME")
        .or_else(|| env("HOME").map(|h| h.join(".local/state")))
        .map(|d| d.join("mesh"))
        .unwrap_or_else(|| PathBuf::from(".mesh"))
}
