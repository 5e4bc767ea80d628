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

use serde::Deserialize;
use serde_json::{Value, json};

use mesh_core::actor::Actor;
use mesh_core::runtime::request_state::StateKey;
use mesh_core::runtime::{Call, Module};
use mesh_core::subjects::ToolResult;
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
}

/// Where avu keeps its files and who may write where.
pub struct Config {
    /// Holds `avu.sqlite` and `state.key`.
    pub dir: PathBuf,
    /// The ontology index `avu_apply_term` searches (decide's).
    pub index: PathBuf,
    pub access: Access,
}

impl Config {
    /// Reads `<dir>/config.json` (`{"zone": "mesh", "shared_roots": ["/mesh/projects"]}`),
    /// if there is one; without it the zone is `mesh` and there are no shared roots.
    pub fn in_dir(dir: &Path, index: &Path) -> Result<Config, String> {
        let file = dir.join("config.json");
        let parsed = match std::fs::read_to_string(&file) {
            Ok(text) => serde_json::from_str::<ConfigFile>(&text)
                .map_err(|e| format!("avu config {}: {e}", file.display()))?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => ConfigFile {
                zone: None,
                shared_roots: Vec::new(),
            },
            Err(e) => return Err(format!("avu config {}: {e}", file.display())),
        };
        let zone = parsed.zone.unwrap_or_else(|| "mesh".into());
        if zone.is_empty() || zone.contains('/') || zone == "." || zone == ".." {
            return Err(format!(
                "avu config {}: zone {zone:?} must be one path segment",
                file.display()
            ));
        }
        let mut shared_roots = Vec::new();
        for root in parsed.shared_roots {
            let normal = path::normalise(&root)
                .map_err(|e| format!("avu config {}: shared root: {e}", file.display()))?;
            if normal == "/" {
                return Err(format!(
                    "avu config {}: shared root {root:?} is the whole tree",
                    file.display()
                ));
            }
            shared_roots.push(normal);
        }
        Ok(Config {
            dir: dir.to_owned(),
            index: index.to_owned(),
            access: Access { zone, shared_roots },
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
pub fn module(config: Config) -> Result<Module, String> {
    let store = Store::open(&config.dir.join("avu.sqlite")).map_err(|e| e.to_string())?;
    let index = Index::open(&config.index).map_err(|e| e.to_string())?;
    let key = StateKey::load_or_create(&config.dir.join("state.key")).map_err(|e| e.to_string())?;
    let avus = Arc::new(Avus {
        store: Mutex::new(store),
        index: Mutex::new(index),
        access: config.access,
        key,
    });
    // SQLite work blocks: each tool runs off the runtime's threads.
    let with =
        |f: fn(&Avus, Call) -> ToolResult| mesh_core::runtime::blocking("avu", avus.clone(), f);
    Ok(Module::new(
        "avu",
        env!("CARGO_PKG_VERSION"),
        "Attribute-value-unit metadata on path-addressed objects; people write under their home and shared roots",
    )
    .tool(list::tool(with(list::run)))
    .tool(add::tool(with(|a, c| change(a, c, Op::Add))))
    .tool(remove::tool(with(|a, c| change(a, c, Op::Remove))))
    .tool(apply_term::tool(with(apply_term::run))))
}

/// The JSON Schema of one AVU.
fn avu_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "attribute": {"type": "string", "minLength": 1},
            "value": {"type": "string", "minLength": 1},
            "unit": {"type": "string"}
        },
        "required": ["attribute", "value"],
        "additionalProperties": false
    })
}

/// The input schema shared by add and remove: one AVU by its fields, or several in `avus`.
fn change_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "path": {"type": "string", "description": "an absolute object path, e.g. /mesh/home/ann/data.csv"},
            "attribute": {"type": "string", "minLength": 1},
            "value": {"type": "string", "minLength": 1},
            "unit": {"type": "string"},
            "avus": {"type": "array", "items": avu_schema(), "minItems": 1, "maxItems": 1000},
            "source": {"type": "string", "description": "what the change comes from, kept in the history"}
        },
        "required": ["path"],
        "oneOf": [{"required": ["attribute", "value"]}, {"required": ["avus"]}],
        "additionalProperties": false
    })
}

fn str_arg<'a>(call: &'a Call, key: &str) -> Option<&'a str> {
    call.args.get(key).and_then(Value::as_str)
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
fn avus_of(call: &Call) -> Result<Vec<Avu>, String> {
    let avus: Vec<Avu> = match call.args.get("avus") {
        Some(list) => serde_json::from_value(list.clone()).map_err(|e| format!("avus: {e}"))?,
        None => vec![Avu {
            attribute: str_arg(call, "attribute").unwrap_or_default().to_owned(),
            value: str_arg(call, "value").unwrap_or_default().to_owned(),
            unit: str_arg(call, "unit").unwrap_or_default().to_owned(),
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
fn writable(avus: &Avus, call: &Call, tool: &str) -> Result<(String, Actor), String> {
    let Some(actor) = call.actor().cloned() else {
        return Err(format!(
            "{tool} was called without an identity: writes need a person (a call through the \
             people's account, or a module acting on someone's behalf)"
        ));
    };
    let given = str_arg(call, "path").unwrap_or_default();
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

fn writer<'a>(actor: &'a str, via: Option<&'a str>, call: &'a Call) -> Writer<'a> {
    Writer {
        actor,
        via,
        answers: None,
        source: str_arg(call, "source"),
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

    /// (changed, unchanged) keys of the result, the verb and the line mark.
    fn words(self) -> (&'static str, &'static str, &'static str, &'static str) {
        match self {
            Op::Add => ("added", "present", "added to", "+"),
            Op::Remove => ("removed", "absent", "removed from", "-"),
        }
    }
}

/// `avu_add` and `avu_remove`: the AVUs checked, the write gate passed, one transaction.
fn change(avus: &Avus, call: Call, op: Op) -> ToolResult {
    let (list, (path, actor)) =
        match avus_of(&call).and_then(|l| Ok((l, writable(avus, &call, op.tool())?))) {
            Ok(x) => x,
            Err(e) => return ToolResult::error(e),
        };
    let who = actor.to_string();
    let by = writer(&who, actor.via.as_deref(), &call);
    let done = {
        let mut store = locked(&avus.store);
        match op {
            Op::Add => store.add(&path, &list, &by),
            Op::Remove => store.remove(&path, &list, &by),
        }
    };
    let changed = match done {
        Ok(c) => c,
        Err(e) => return ToolResult::error(e.to_string()),
    };
    let (did, not): (Vec<_>, Vec<_>) = list.into_iter().zip(changed).partition(|(_, c)| *c);
    let did: Vec<Avu> = did.into_iter().map(|(a, _)| a).collect();
    let not: Vec<Avu> = not.into_iter().map(|(a, _)| a).collect();
    let (changed_key, unchanged_key, verb, mark) = op.words();
    let mut text = format!("{} {verb} {path}", did.len());
    for a in &did {
        text.push_str(&format!("\n  {mark} {}", avu_text(a)));
    }
    if !not.is_empty() {
        text.push_str(&format!("\n{} {unchanged_key}, unchanged", not.len()));
    }
    let mut out = serde_json::Map::new();
    out.insert("path".into(), json!(path));
    out.insert(changed_key.into(), avus_json(&did));
    out.insert(unchanged_key.into(), avus_json(&not));
    ToolResult {
        structured_content: Some(Value::Object(out)),
        ..ToolResult::text(text)
    }
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

fn avus_json(avus: &[Avu]) -> Value {
    Value::Array(
        avus.iter()
            .map(|a| json!({"attribute": a.attribute, "value": a.value, "unit": a.unit}))
            .collect(),
    )
}

fn avu_text(a: &Avu) -> String {
    if a.unit.is_empty() {
        format!("{} = {}", a.attribute, a.value)
    } else {
        format!("{} = {} [{}]", a.attribute, a.value, a.unit)
    }
}
