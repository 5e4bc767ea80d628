//! The module runtime: declare a module's tools, serve them on the bus, answer `tools` and `$SRV`.

#[doc(hidden)]
pub mod arguments;
mod cancel;
mod claims;
mod fair;
mod features;
mod module;
mod pace;
mod progress;
mod registration;
pub mod request_state;
mod serve;
mod services;
mod stop;
mod task;
mod trust;
pub mod turns;
mod typed;
mod words;

pub use features::{
    Completing, Declared, FeatureFuture, Offering, Prompt, PromptCall, Read, ReadAnswer, Resource,
    ResourceTemplate, ResourceUpdates, UpdateError, blob_contents, page_of, prompt_input_required,
    prompt_result, text_contents,
};
pub use module::{
    BlockingError, Call, Continuation, HandlerFuture, Module, ModuleError, Tool, is_semver,
    off_runtime,
};
pub use progress::{Reporter, paced};
pub use registration::{BucketError, bucket_replicas, open_bucket, open_bucket_with};
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
    state_dir_in(&|k| std::env::var_os(k))
}

/// `default_state_dir` with the environment given.
fn state_dir_in(env: &dyn Fn(&str) -> Option<std::ffi::OsString>) -> std::path::PathBuf {
    use std::path::PathBuf;
    let absolute = |k: &str| env(k).map(PathBuf::from).filter(|v| v.is_absolute());
    absolute(STATE_DIR_ENV)
        .or_else(|| absolute("XDG_STATE_HOME").map(|d| d.join("mesh")))
        .or_else(|| absolute("HOME").map(|h| h.join(".local/state/mesh")))
        .unwrap_or_else(|| PathBuf::from(".mesh"))
}

/// A header's first value, by its exact name.
///
/// Found by walking the few headers a call has rather than by `HeaderMap::get`, which copies
/// and checks the name and hashes it on every call; the match is the same (exact bytes, the
/// first value).
pub(crate) fn header<'a>(
    headers: Option<&'a async_nats::HeaderMap>,
    name: &str,
) -> Option<&'a str> {
    let (_, values) = headers?
        .iter()
        .find(|(n, _)| AsRef::<str>::as_ref(*n) == name)?;
    Some(values.first()?.as_str())
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::*;

    fn dir(vars: &[(&str, &str)]) -> PathBuf {
        let vars: Vec<(String, String)> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        state_dir_in(&|k| vars.iter().find(|(n, _)| n == k).map(|(_, v)| v.into()))
    }

    /// The state directory never moves with the working directory: a relative or empty
    /// value is passed over, as XDG says of its variables.
    #[test]
    fn the_state_directory_is_absolute_or_the_last_resort() {
        let home = ("HOME", "/home/ann");
        assert_eq!(dir(&[home]), PathBuf::from("/home/ann/.local/state/mesh"));
        assert_eq!(
            dir(&[home, ("XDG_STATE_HOME", "/x")]),
            PathBuf::from("/x/mesh")
        );
        assert_eq!(
            dir(&[home, ("XDG_STATE_HOME", "/x"), (STATE_DIR_ENV, "/m")]),
            PathBuf::from("/m")
        );
        for relative in ["", ".", "state", "../elsewhere"] {
            assert_eq!(
                dir(&[
                    home,
                    ("XDG_STATE_HOME", relative),
                    (STATE_DIR_ENV, relative)
                ]),
                PathBuf::from("/home/ann/.local/state/mesh"),
                "{relative:?}"
            );
        }
        assert_eq!(dir(&[]), PathBuf::from(".mesh"));
    }
}
