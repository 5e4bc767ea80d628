//! mesh-ontology: OBO ontologies read as a stream (`obo`) and imported into a searchable
//! SQLite index (`index`) that avu and decide both read.

pub mod index;
pub mod obo;
