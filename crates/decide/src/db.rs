//! decide's sidecar connection: the modules' one SQL layer (`mesh-store`), a SQLite file or
//! PostgreSQL shared by every instance.

pub use mesh_store::*;
