//! mesh-ontology: OBO ontologies read as a stream (`obo`) and imported into a searchable
//! SQLite index (`index`) that avu and decide both read, with the term vectors decide makes
//! at import (`vectors`); searches ranked by bm25 with what it reads kept (`rank`).

pub mod index;
pub mod obo;
pub mod rank;
pub mod vectors;
