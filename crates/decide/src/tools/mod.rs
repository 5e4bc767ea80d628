//! The decide module on the bus: each tool in a file of its own — `annotate`, `explain`,
//! `health` here, `decide_apply`, `decide_feedback` and `decide_choose` beside them
//! (`apply.rs`, `feedback.rs`, `choose.rs`) — over the state they share (`state.rs`).

mod annotate;
mod explain;
mod health;

use std::sync::{Arc, Mutex};

use super::apply;
use super::choose;
use super::embed::Embedder;
use super::feedback;
use super::lake::LakeAt;
pub use super::state::{Config, StartError};
use super::state::{Decide, EmbedderOff, Loaded};
use super::store::sidecar::Sidecar;
use mesh_core::runtime::Module;
use mesh_core::runtime::request_state::StateKey;
use mesh_ontology::index::Index;

/// Opens the sidecar and the index and declares the module.
pub fn module(config: Config) -> Result<Module, StartError> {
    let sidecar = Sidecar::in_dir(&config.dir)?;
    let lake = LakeAt::in_dir(&config.dir)?;
    let index = Index::open(&config.dir.join("ontology.sqlite"))?;
    // Every instance on a shared sidecar seals with the key kept there, so that any of them
    // takes an answer to a question another asked.
    let key = match sidecar.shared_key(StateKey::random())? {
        Some(key) => StateKey::from_bytes(key),
        None => StateKey::load_or_create(&config.dir.join("state.key"))?,
    }
    .with_lifetime(config.state_lifetime)
    .with_clock(config.clock.clone());
    // Loaded once, at start (0.3 s): a model that cannot be loaded leaves the lexical
    // ranking, and health says why.
    let embedder = if config.embed {
        Embedder::load_default().map_err(|e| {
            tracing::warn!(error = %e, "MESH_DECIDE_EMBED is set but the embedding model cannot be loaded; ranking without it");
            EmbedderOff::NotLoaded(e)
        })
    } else {
        Err(EmbedderOff::NotAsked)
    };
    let decide = Arc::new(Decide {
        sidecar: Mutex::new(sidecar),
        index: Mutex::new(index),
        cards: config.dir.join("cards"),
        backend: config.backend,
        policy: config.policy,
        key,
        bus: config.bus,
        lake: Mutex::new(lake),
        bundles: config.dir.join("bundles"),
        loaded: Mutex::new(Loaded::default()),
        embedder,
    });
    Ok(Module::new(
        "decide",
        env!("CARGO_PKG_VERSION"),
        "Proposes ontology-term metadata for dataset cards, with calibrated probabilities, and explains every decision",
    )
    // SQLite work and a backend's answers block: each tool runs off the runtime's threads
    // (`typed_blocking`; apply's steps through `off_runtime`).
    .tool(annotate::tool(decide.clone()))
    .tool(apply::tool(decide.clone()))
    .tool(feedback::tool(decide.clone()))
    .tool(choose::tool(decide.clone()))
    .tool(explain::tool(decide.clone()))
    .tool(health::tool(decide)))
}

#[cfg(test)]
pub(crate) mod tests {
    use serde_json::Value;

    /// The argument objects `T`'s input schema accepts and refuses.
    pub(crate) fn accepts<T: schemars::JsonSchema>(good: &[Value], bad: &[Value]) {
        let schema = mesh_core::runtime::input_schema_of::<T>();
        let v = jsonschema::validator_for(&schema).unwrap();
        for g in good {
            assert!(v.is_valid(g), "refused {g}");
        }
        for b in bad {
            assert!(!v.is_valid(b), "accepted {b}");
        }
    }
}
