//! decide's store: every SQL statement decide runs on its sidecar, one file per table it
//! writes, over the modules' one SQL layer (`mesh-store`: a SQLite file, or PostgreSQL
//! shared by every instance). The handlers above it (graph, feedback, apply, the tools)
//! say what to read or write; none of them holds SQL.

pub use mesh_store::*;

pub mod answers;
pub mod decisions;
pub mod groups;
pub mod journal;
pub mod links;
pub mod mirror_lock;
pub mod runs;
pub mod sidecar;

pub use journal::{Journal, Sink};

/// Rows as JSON objects keyed by their columns' names: what `decide_explain` shows.
pub fn as_json(names: &[String], rows: &[Row]) -> Vec<serde_json::Value> {
    use serde_json::{Value as Json, json};
    rows.iter()
        .map(|r| {
            let o = names.iter().zip(r.values()).map(|(n, v)| {
                let v = match v {
                    Value::Null => Json::Null,
                    Value::Int(n) => json!(n),
                    Value::Real(f) => json!(f),
                    Value::Text(t) => json!(t),
                    // No column explain reads holds bytes; shown by their length if one did.
                    Value::Bytes(b) => json!(format!("<{} bytes>", b.len())),
                };
                (n.clone(), v)
            });
            Json::Object(o.collect())
        })
        .collect()
}

/// A statement's rows as JSON objects.
pub(crate) fn named(db: &Db, sql: &str, params: &[&dyn Param]) -> DbResult<Vec<serde_json::Value>> {
    let (names, rows) = db.query_named(sql, params)?;
    Ok(as_json(&names, &rows))
}
