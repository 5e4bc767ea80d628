//! What decide's tools share: its configuration, the state every call reads (sidecar, index,
//! key, lake, bundles, backend) and why it could not start. Each tool is a file of its own
//! (`tools/`, `apply.rs`, `feedback.rs`, `choose.rs`) that reads this and no other tool.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use super::backend::{Backend, Embedded};
use super::embed::{EmbedError, Embedder};
use super::lake::LakeAt;
use super::learn::bundle::{self, Bundle};
use super::openai::OpenAi;
use super::policy::Policy;
use super::questions;
use super::store::sidecar::SidecarError;
use mesh_core::client::Client;
use mesh_core::runtime::request_state::{KeyError, StateKey};
use mesh_ontology::index::IndexError;

use super::store::sidecar::Sidecar;
use mesh_ontology::index::Index;

/// Where decide keeps its files and how it decides.
pub struct Config {
    /// Holds `sidecar.sqlite`, `ontology.sqlite`, `state.key`, `cards/` and `lake/`; or a
    /// `config.json` naming the database that holds the sidecar, key and lake catalog of
    /// every instance (`sidecar::Shared`).
    pub dir: PathBuf,
    pub backend: Arc<dyn Backend>,
    pub policy: Policy,
    /// The connection `decide_apply` reaches the avu module through.
    pub bus: Option<Client>,
    /// How long a person has to answer a question of `decide_apply`.
    pub state_lifetime: std::time::Duration,
    /// The clock that lifetime is measured by (the system's; a test's own).
    pub clock: mesh_core::runtime::request_state::Clock,
    /// Rank with sentence embeddings as well (`MESH_DECIDE_EMBED=1`): all-MiniLM-L6-v2 over
    /// each column against the term vectors an import with `--vectors` stored. Off by
    /// default: on the gold set it costs about 1 s a card on two cores for no gain at L0
    /// (docs/benchmarks.md, "embeddings in the ranking").
    pub embed: bool,
}

impl Config {
    /// The committed policy in `dir`, with the embedded backend unless the environment
    /// names an OpenAI-compatible server: `MESH_DECIDE_OPENAI_URL` (its API base, e.g.
    /// `http://127.0.0.1:8000/v1`), `MESH_DECIDE_OPENAI_MODEL`, and optionally
    /// `MESH_DECIDE_OPENAI_KEY`.
    pub fn in_dir(dir: &Path) -> Config {
        let env = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
        let backend: Arc<dyn Backend> = match env("MESH_DECIDE_OPENAI_URL") {
            Some(url) => Arc::new(OpenAi {
                url,
                model: env("MESH_DECIDE_OPENAI_MODEL").unwrap_or_else(|| "default".into()),
                api_key: env("MESH_DECIDE_OPENAI_KEY"),
                timeout: std::time::Duration::from_secs(30),
                client: Default::default(),
            }),
            None => Arc::new(Embedded),
        };
        Config {
            dir: dir.to_owned(),
            backend,
            policy: Policy::defaults(),
            bus: None,
            state_lifetime: mesh_core::runtime::request_state::DEFAULT_LIFETIME,
            clock: mesh_core::runtime::request_state::system_clock(),
            embed: env("MESH_DECIDE_EMBED")
                .is_some_and(|v| matches!(v.as_str(), "1" | "true" | "yes")),
        }
    }

    /// The same, reaching avu through `bus`.
    pub fn with_bus(mut self, bus: Client) -> Config {
        self.bus = Some(bus);
        self
    }
}

pub(crate) struct Decide {
    pub(crate) sidecar: Mutex<Sidecar>,
    pub(crate) index: Mutex<Index>,
    pub(crate) cards: PathBuf,
    pub(crate) backend: Arc<dyn Backend>,
    pub(crate) policy: Policy,
    pub(crate) key: StateKey,
    pub(crate) bus: Option<Client>,
    /// Where the lake is; one mirror at a time in this process (the lake's own file lock
    /// keeps other processes out while one mirrors).
    pub(crate) lake: Mutex<LakeAt>,
    /// Where learned bundles are, and the one in use.
    pub(crate) bundles: PathBuf,
    pub(crate) loaded: Mutex<Loaded>,
    /// The sentence-embedding model, when asked for and loaded; else why not.
    pub(crate) embedder: Result<Embedder, EmbedderOff>,
}

/// The bundle in use, and the last one refused.
#[derive(Default)]
pub(crate) struct Loaded {
    pub(crate) bundle: Option<Arc<Bundle>>,
    /// (version, why) of the last promoted bundle that could not be used.
    pub(crate) refused: Option<(String, String)>,
}

impl Decide {
    /// The promoted bundle, picked up when a new one is promoted (read on every call: one
    /// small file). A bundle fitted on another backend or questions lock is refused and the
    /// one in use kept; health says why.
    pub(crate) fn bundle(&self) -> Option<Arc<Bundle>> {
        let mut loaded = locked(&self.loaded);
        let Some(current) = bundle::current(&self.bundles) else {
            return loaded.bundle.clone();
        };
        let known = loaded
            .bundle
            .as_ref()
            .is_some_and(|b| b.version() == current)
            || loaded.refused.as_ref().is_some_and(|(v, _)| *v == current);
        if !known {
            let name = self.backend.name();
            match bundle::load(&self.bundles, &current)
                .and_then(|b| b.check(&name, &questions::lock_id()).map(|()| b))
            {
                Ok(b) => {
                    tracing::info!("decide: bundle {current} in use");
                    loaded.bundle = Some(Arc::new(b));
                    loaded.refused = None;
                }
                Err(e) => {
                    tracing::warn!("decide: bundle {current} refused: {e}");
                    loaded.refused = Some((current, e.to_string()));
                }
            }
        }
        loaded.bundle.clone()
    }
}

/// Why decide could not start: a file of its own that does not open.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error(transparent)]
    Sidecar(#[from] SidecarError),
    #[error(transparent)]
    Index(#[from] IndexError),
    #[error(transparent)]
    Key(#[from] KeyError),
}

/// Why the sentence-embedding model is not in the ranking.
#[derive(Debug, thiserror::Error)]
pub enum EmbedderOff {
    #[error(
        "not asked for (MESH_DECIDE_EMBED=1 ranks with it; off by default: docs/benchmarks.md)"
    )]
    NotAsked,
    #[error("asked for (MESH_DECIDE_EMBED) but not loaded: {0}")]
    NotLoaded(#[source] EmbedError),
}

pub(crate) fn locked<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}
