//! The avu module: attribute–value–unit metadata on path-addressed objects
//! (`/<zone>/home/<user>/…`), every write checked against the actor the runtime hands over.

mod add;
mod apply_term;
mod list;
pub mod path;
mod remove;
pub mod store;

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use mesh_core::actor::Actor;
use mesh_core::runtime::request_state::StateKey;
use mesh_core::runtime::{Call, Module};
use mesh_ontology::index::Index;
use path::Access;
use store::{Avu, Store, Writer};

pub use apply_term::TERM_CHOICE;

/// Longest attribute, value or unit accepted, in bytes.
const MAX_FIELD: usize = 2700;

/// What `<dir>/config.json` may say; every field optional.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ConfigFile {
    zone: Option<String>,
    #[serde(default)]
    shared_roots: Vec<String>,
    /// A PostgreSQL URL: the store every instance of avu shares, instead of `avu.sqlite`.
    #[serde(default)]
    database: Option<String>,
    /// The authority (PEM) the database's TLS certificate is checked against.
    #[serde(default)]
    database_ca: Option<PathBuf>,
}

/// Where avu keeps its files and who may write where.
pub struct Config {
    /// Holds `avu.sqlite` and `state.key`.
    pub dir: PathBuf,
    /// The ontology index `avu_apply_term` searches (decide's).
    pub index: PathBuf,
    pub access: Access,
    /// The shared store (PostgreSQL URL) when avu runs as more than one instance; else its
    /// own `avu.sqlite`. Over TLS as its `sslmode` says.
    pub database: Option<String>,
    /// The authority (PEM) the database's TLS certificate is checked against; without it,
    /// the system's.
    pub database_ca: Option<PathBuf>,
}

/// Why avu's configuration file cannot be used; each names the file.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("avu config {file}: {source}")]
    Read {
        file: String,
        source: std::io::Error,
    },
    #[error("avu config {file}: {source}")]
    Parse {
        file: String,
        source: serde_json::Error,
    },
    #[error("avu config {file}: zone {zone:?} must be one path segment")]
    Zone { file: String, zone: String },
    #[error("avu config {file}: shared root: {source}")]
    SharedRoot {
        file: String,
        source: path::PathError,
    },
    #[error("avu config {file}: shared root {root:?} is the whole tree")]
    WholeTree { file: String, root: String },
}

/// Why avu cannot start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error(transparent)]
    Store(#[from] store::StoreError),
    #[error(transparent)]
    Index(#[from] mesh_ontology::index::IndexError),
    #[error(transparent)]
    Key(#[from] mesh_core::runtime::request_state::KeyError),
}

impl Config {
    /// Reads `<dir>/config.json` (`{"zone": "mesh", "shared_roots": ["/mesh/projects"],
    /// "database": "postgresql://…"}`), if there is one; without it the zone is `mesh`, there
    /// are no shared roots, and the store is `<dir>/avu.sqlite`.
    pub fn in_dir(dir: &Path, index: &Path) -> Result<Config, ConfigError> {
        let file = dir.join("config.json");
        let name = || file.display().to_string();
        let parsed = match std::fs::read_to_string(&file) {
            Ok(text) => {
                serde_json::from_str::<ConfigFile>(&text).map_err(|source| ConfigError::Parse {
                    file: name(),
                    source,
                })?
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => ConfigFile {
                zone: None,
                shared_roots: Vec::new(),
                database: None,
                database_ca: None,
            },
            Err(source) => {
                return Err(ConfigError::Read {
                    file: name(),
                    source,
                });
            }
        };
        let zone = parsed.zone.unwrap_or_else(|| "mesh".into());
        if zone.is_empty() || zone.contains('/') || zone == "." || zone == ".." {
            return Err(ConfigError::Zone { file: name(), zone });
        }
        let mut shared_roots = Vec::new();
        for root in parsed.shared_roots {
            let normal = path::normalise(&root).map_err(|source| ConfigError::SharedRoot {
                file: name(),
                source,
            })?;
            if normal == "/" {
                return Err(ConfigError::WholeTree { file: name(), root });
            }
            shared_roots.push(normal);
        }
        Ok(Config {
            dir: dir.to_owned(),
            index: index.to_owned(),
            access: Access { zone, shared_roots },
            database: parsed.database,
            database_ca: parsed.database_ca,
        })
    }
}

struct Avus {
    store: Mutex<Store>,
    index: Mutex<Index>,
    access: Access,
    key: StateKey,
}

fn locked<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Opens the store and the index and declares the module.
pub fn module(config: Config) -> Result<Module, StartError> {
    let store = match &config.database {
        Some(url) => Store::connect(url, config.database_ca.as_deref())?,
        None => Store::open(&config.dir.join("avu.sqlite"))?,
    };
    let index = Index::open(&config.index)?;
    // Every instance seals questions with the shared store's key, so any opens any other's.
    let key = match store.shared_key() {
        Some(key) => StateKey::from_bytes(key),
        None => StateKey::load_or_create(&config.dir.join("state.key"))?,
    };
    let avus = Arc::new(Avus {
        store: Mutex::new(store),
        index: Mutex::new(index),
        access: config.access,
        key,
    });
    // SQLite work blocks: each tool runs off the runtime's threads (`typed_blocking`).
    Ok(Module::new(
        "avu",
        env!("CARGO_PKG_VERSION"),
        "Attribute-value-unit metadata on path-addressed objects; people write under their home and shared roots",
    )
    .tool(list::tool(avus.clone()))
    .tool(add::tool(avus.clone()))
    .tool(remove::tool(avus.clone()))
    .tool(apply_term::tool(avus)))
}

/// One AVU as a change names it.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct AvuArg {
    #[schemars(length(min = 1))]
    attribute: String,
    #[schemars(length(min = 1))]
    value: String,
    #[serde(default)]
    unit: String,
}

/// What add and remove take: one AVU by its fields, or several in `avus`.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(extend("oneOf" = [{"required": ["attribute", "value"]}, {"required": ["avus"]}]))]
pub struct Change {
    /// an absolute object path, e.g. /mesh/home/ann/data.csv
    path: String,
    #[schemars(length(min = 1))]
    attribute: Option<String>,
    #[schemars(length(min = 1))]
    value: Option<String>,
    unit: Option<String>,
    #[schemars(length(min = 1, max = 1000))]
    avus: Option<Vec<AvuArg>>,
    /// what the change comes from, kept in the history
    source: Option<String>,
}

/// An AVU in an answer (the unit always there, empty when there is none).
#[derive(Serialize, JsonSchema)]
pub struct AvuOut {
    attribute: String,
    value: String,
    unit: String,
}

impl From<&Avu> for AvuOut {
    fn from(a: &Avu) -> Self {
        AvuOut {
            attribute: a.attribute.clone(),
            value: a.value.clone(),
            unit: a.unit.clone(),
        }
    }
}

/// One AVU field, named `at` in the message: not blank when `required`, not too long, no
/// control characters.
fn check_field(at: &str, field: &str, required: bool) -> Result<(), String> {
    if required && field.trim().is_empty() {
        return Err(format!("{at} is empty"));
    }
    if field.len() > MAX_FIELD {
        return Err(format!(
            "{at} is {} bytes long, more than the {MAX_FIELD} allowed",
            field.len()
        ));
    }
    if field.chars().any(char::is_control) {
        return Err(format!("{at} holds a control character"));
    }
    Ok(())
}

/// The AVUs a change names, each field checked.
fn avus_of(args: &Change) -> Result<Vec<Avu>, String> {
    let avus: Vec<Avu> = match &args.avus {
        Some(list) => list
            .iter()
            .map(|a| Avu {
                attribute: a.attribute.clone(),
                value: a.value.clone(),
                unit: a.unit.clone(),
            })
            .collect(),
        None => vec![Avu {
            attribute: args.attribute.clone().unwrap_or_default(),
            value: args.value.clone().unwrap_or_default(),
            unit: args.unit.clone().unwrap_or_default(),
        }],
    };
    for (i, avu) in avus.iter().enumerate() {
        for (name, field) in [
            ("attribute", &avu.attribute),
            ("value", &avu.value),
            ("unit", &avu.unit),
        ] {
            let at = if avus.len() > 1 {
                format!("avus[{i}].{name}")
            } else {
                name.to_owned()
            };
            check_field(&at, field, name != "unit")?;
        }
    }
    Ok(avus)
}

/// The normalised path a write may go to, and who writes: refuses a call without an
/// identity and a path outside the actor's home and the shared roots.
fn writable(avus: &Avus, call: &Call, given: &str, tool: &str) -> Result<(String, Actor), String> {
    let Some(actor) = call.actor().cloned() else {
        return Err(format!(
            "{tool} was called without an identity: writes need a person (a call through the \
             people's account, or a module acting on someone's behalf)"
        ));
    };
    let normal = path::normalise(given).map_err(|e| e.to_string())?;
    if !avus.access.may_write(&actor.user, &normal) {
        let mut where_ = vec![avus.access.home(&actor.user)];
        where_.extend(avus.access.shared_roots.iter().cloned());
        return Err(format!(
            "{actor} may not write on {normal}: writes go under {}",
            where_.join(" or ")
        ));
    }
    Ok((normal, actor))
}

fn writer<'a>(actor: &'a str, via: Option<&'a str>, source: Option<&'a str>) -> Writer<'a> {
    Writer {
        actor,
        via,
        answers: None,
        source,
    }
}

/// Which way a change goes, and how its result names the two outcomes.
#[derive(Clone, Copy)]
enum Op {
    Add,
    Remove,
}

impl Op {
    fn tool(self) -> &'static str {
        match self {
            Op::Add => "avu_add",
            Op::Remove => "avu_remove",
        }
    }

    /// The verb, the word for what was already as asked, and the line mark.
    fn words(self) -> (&'static str, &'static str, &'static str) {
        match self {
            Op::Add => ("added to", "present", "+"),
            Op::Remove => ("removed from", "absent", "-"),
        }
    }
}

/// What a change did: the AVUs changed and those already as asked, and a text for people.
struct Done {
    path: String,
    changed: Vec<AvuOut>,
    unchanged: Vec<AvuOut>,
    text: String,
}

/// `avu_add` and `avu_remove`: the AVUs checked, the write gate passed, one transaction.
fn change(avus: &Avus, args: Change, call: &Call, op: Op) -> Result<Done, String> {
    let list = avus_of(&args)?;
    let (path, actor) = writable(avus, call, &args.path, op.tool())?;
    let who = actor.to_string();
    let by = writer(&who, actor.via.as_deref(), args.source.as_deref());
    let changed = {
        let mut store = locked(&avus.store);
        match op {
            Op::Add => store.add(&path, &list, &by),
            Op::Remove => store.remove(&path, &list, &by),
        }
    }
    .map_err(|e| e.to_string())?;
    let (did, not): (Vec<_>, Vec<_>) = list.into_iter().zip(changed).partition(|(_, c)| *c);
    let did: Vec<Avu> = did.into_iter().map(|(a, _)| a).collect();
    let not: Vec<Avu> = not.into_iter().map(|(a, _)| a).collect();
    let (verb, unchanged_key, mark) = op.words();
    let mut text = format!("{} {verb} {path}", did.len());
    for a in &did {
        text.push_str(&format!("\n  {mark} {}", avu_text(a)));
    }
    if !not.is_empty() {
        text.push_str(&format!("\n{} {unchanged_key}, unchanged", not.len()));
    }
    Ok(Done {
        path,
        changed: did.iter().map(AvuOut::from).collect(),
        unchanged: not.iter().map(AvuOut::from).collect(),
        text,
    })
}

/// `<ontology>.<label in snake case>`: `hind foot length` in PATO → `pato.hind_foot_length`.
pub fn term_attribute(ontology: &str, label: &str) -> String {
    let snake = label
        .split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
        .map(str::to_lowercase)
        .collect::<Vec<_>>()
        .join("_");
    format!("{}.{snake}", ontology.to_lowercase())
}

fn avu_text(a: &Avu) -> String {
    if a.unit.is_empty() {
        format!("{} = {}", a.attribute, a.value)
    } else {
        format!("{} = {} [{}]", a.attribute, a.value, a.unit)
    }
}

#[cfg(test)]
mod schema_tests {
    use super::*;
    use serde_json::json;

    /// The derived schema says what the hand-written one said: one AVU by its fields or a
    /// list of them, no blank names, no nulls, no keys beyond these.
    #[test]
    fn a_change_names_one_avu_or_a_list() {
        let schema = mesh_core::runtime::input_schema_of::<Change>();
        let v = jsonschema::validator_for(&schema).unwrap();
        let path = "/mesh/home/ann/x";
        assert!(v.is_valid(&json!({"path": path, "attribute": "a", "value": "1"})));
        assert!(v.is_valid(&json!({"path": path, "avus": [{"attribute": "a", "value": "1"}]})));
        for bad in [
            json!({"path": path}),
            json!({"path": path, "attribute": "a"}),
            json!({"path": path, "attribute": "", "value": "1"}),
            json!({"path": path, "attribute": null, "value": "1"}),
            json!({"path": path, "avus": []}),
            json!({"path": path, "avus": [{"attribute": "a", "value": "1", "x": 1}]}),
            json!({"path": path, "attribute": "a", "value": "1", "avus": [{"attribute": "a", "value": "1"}]}),
            json!({"path": path, "attribute": "a", "value": "1", "colour": "red"}),
        ] {
            assert!(!v.is_valid(&bad), "accepted {bad}");
        }
    }
}
