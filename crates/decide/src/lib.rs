//! `decide`: proposes ontology-term metadata for dataset cards with calibrated
//! probabilities and records every decision (see DESIGN: The decide module).

/// The parameters of a statement (`mesh_store::params!`).
pub use mesh_store::params;

pub mod apply;
pub mod backend;
pub mod calibrated;
pub mod card;
pub mod choose;
pub mod elements;
pub mod embed;
pub mod evidence;
pub mod feedback;
#[doc(hidden)]
pub mod fuzzing;
pub mod graph;
pub mod lake;
pub mod learn;
pub mod openai;
pub mod policy;
pub mod questions;
pub mod semantic;
mod shown;
pub mod state;
pub mod store;
pub mod tools;
