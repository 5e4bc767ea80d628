//! The decide module on the bus: `decide_annotate`, `decide_explain`, `decide_health` here;
//! `decide_apply`, `decide_feedback` and `decide_choose` in files of their own.

use std::convert::Infallible;
use std::path::{Component, Path, PathBuf};
use std::sync::{Arc, Mutex};

use crate::db::{DbResult, Value as SqlValue};
use crate::params;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};

use super::apply;
use super::backend::{Backend, Embedded};
use super::calibrated::Calibrated;
use super::card;
use super::choose;
use super::embed::Embedder;
use super::feedback::{self, GroupView};
use super::graph::{self, Run};
use super::lake::LakeAt;
use super::learn::bundle::{self, Bundle};
use super::openai::OpenAi;
use super::policy::Policy;
use super::questions;
use super::semantic::Semantic;
use super::sidecar::{Sidecar, SidecarError};
use mesh_core::client::Client;
use mesh_core::runtime::request_state::{KeyError, StateKey};
use mesh_core::runtime::{Call, Module, NoArgs, Tool, WithText};
use mesh_core::subjects::ToolResult;
use mesh_ontology::index::{Index, IndexError};

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

pub(super) struct Decide {
    pub(super) sidecar: Mutex<Sidecar>,
    pub(super) index: Mutex<Index>,
    pub(super) cards: PathBuf,
    pub(super) backend: Arc<dyn Backend>,
    pub(super) policy: Policy,
    pub(super) key: StateKey,
    pub(super) bus: Option<Client>,
    /// Where the lake is; one mirror at a time in this process (the lake's own file lock
    /// keeps other processes out while one mirrors).
    pub(super) lake: Mutex<LakeAt>,
    /// Where learned bundles are, and the one in use.
    pub(super) bundles: PathBuf,
    pub(super) loaded: Mutex<Loaded>,
    /// The sentence-embedding model, when asked for and loaded; else why not.
    pub(super) embedder: Result<Embedder, String>,
}

/// The bundle in use, and the last one refused.
#[derive(Default)]
pub(super) struct Loaded {
    pub(super) bundle: Option<Arc<Bundle>>,
    /// (version, why) of the last promoted bundle that could not be used.
    pub(super) refused: Option<(String, String)>,
}

impl Decide {
    /// The promoted bundle, picked up when a new one is promoted (read on every call: one
    /// small file). A bundle fitted on another backend or questions lock is refused and the
    /// one in use kept; health says why.
    pub(super) fn bundle(&self) -> Option<Arc<Bundle>> {
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
            format!("asked for (MESH_DECIDE_EMBED) but not loaded: {e}")
        })
    } else {
        Err(
            "not asked for (MESH_DECIDE_EMBED=1 ranks with it; off by default: docs/benchmarks.md)"
                .to_owned(),
        )
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
    .tool(
        Tool::typed_blocking(
            "annotate",
            "Decides, column by column, which ontology terms describe a dataset card, records every decision, and proposes AVUs (it writes none)",
            decide.clone(),
            annotate,
        )
        .output_schema(json!({
            "type": "object",
            "required": ["run_id", "card"],
            "properties": {
                "run_id": {"type": "string"},
                "card": {"type": "object"},
                "groups": {"type": "array"},
                "proposed": {"type": "array"},
                "truncated": {"type": "boolean", "description": "the run was too large for one reply: read it with decide_explain run_id column"},
                "columns": {"type": "array", "items": {"type": "string"}},
                "groups_count": {"type": "integer"},
                "proposed_count": {"type": "integer"}
            },
            "oneOf": [
                {"required": ["groups", "proposed"]},
                {"required": ["truncated", "columns"]}
            ]
        }))
        .annotations(json!({"readOnlyHint": false, "destructiveHint": false, "idempotentHint": false, "openWorldHint": false})),
    )
    .tool(apply::tool(decide.clone()))
    .tool(feedback::tool(decide.clone()))
    .tool(choose::tool(decide.clone()))
    .tool(
        Tool::typed_blocking(
            "explain",
            "Lists a run's decisions with level, calibration and probability (each naming its term), its candidate groups with their candidates (label, CURIE, p, level), winner and outcome, its AVU links with their status and its open groups; or, given a path, the decisions behind the AVUs on it",
            decide.clone(),
            explain,
        )
        .output_schema(json!({"type": "object"}))
        .annotations(json!({"readOnlyHint": true, "idempotentHint": true, "openWorldHint": false})),
    )
    .tool(
        Tool::typed_blocking(
            "health",
            "Reports the questions lock, the sidecar, the backend, the promoted bundle and the ontologies indexed",
            decide,
            health,
        )
        .output_schema(json!({"type": "object"}))
        .annotations(json!({"readOnlyHint": true, "idempotentHint": true, "openWorldHint": false})),
    ))
}

// The arguments of decide_annotate: the card itself, or a file under the cards directory.
// (Plain comments on the argument types: a doc comment would become the schema's
// description.)
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(extend("oneOf" = [{"required": ["card_text"]}, {"required": ["card_path"]}]))]
pub(super) struct Annotate {
    /// the card itself (see docs/cards.md)
    card_text: Option<String>,
    /// a card file under decide's cards directory
    card_path: Option<String>,
}

// The arguments of decide_explain: a run (optionally one column of it), or a path.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(extend("oneOf" = [{"required": ["run_id"]}, {"required": ["path"]}]))]
pub(super) struct Explain {
    run_id: Option<String>,
    /// with run_id: only this column's decisions, links and groups (a wide run is read column by column)
    column: Option<String>,
    path: Option<String>,
    /// with path: at most this many links in this answer (500 unless said)
    #[schemars(range(min = 1, max = 1000))]
    limit: Option<usize>,
    /// with path: where the previous answer stopped (its `next`)
    cursor: Option<String>,
}

/// The most AVU links one answer of `decide_explain path=…` lists.
const LINKS_PAGE: usize = 500;

pub(super) fn locked<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// A card path inside `cards`, refusing any path that leaves it.
fn card_file(cards: &Path, given: &str) -> Result<PathBuf, String> {
    let relative = Path::new(given);
    if relative.is_absolute()
        || relative
            .components()
            .any(|c| !matches!(c, Component::Normal(_) | Component::CurDir))
    {
        return Err(format!(
            "card_path {given:?} must name a file inside decide's cards directory ({}), without ..",
            cards.display()
        ));
    }
    Ok(cards.join(relative))
}

fn annotate(decide: &Decide, args: Annotate, call: Call) -> ToolResult {
    annotated(decide, args, &call).unwrap_or_else(ToolResult::error)
}

/// The card an annotate call names: given, or read from the cards directory.
fn card_text(decide: &Decide, args: Annotate) -> Result<String, String> {
    match (args.card_text, args.card_path) {
        (Some(t), _) => Ok(t),
        (_, Some(p)) => {
            let file = card_file(&decide.cards, &p)?;
            std::fs::read_to_string(&file).map_err(|e| format!("cannot read card {p}: {e}"))
        }
        (None, None) => Err("give card_text or card_path".into()),
    }
}

fn annotated(decide: &Decide, args: Annotate, call: &Call) -> Result<ToolResult, String> {
    let text = card_text(decide, args)?;
    let card = card::parse(&text).map_err(|e| e.to_string())?;
    let actor = call.caller.id();
    let bundle = decide.bundle();
    let backend = Calibrated {
        inner: decide.backend.as_ref(),
        bundle: bundle.as_deref(),
    };
    // The index is locked for each lookup only, the sidecar only to write what was decided:
    // a backend that waits on a server holds up no other call.
    let terms = Semantic::new(&decide.index, decide.embedder.as_ref().ok());
    let (run, journal) = graph::annotate_reporting(
        &card,
        &terms,
        &backend,
        &decide.policy,
        actor.as_deref(),
        bundle.as_deref().map(Bundle::version),
        &mut |done, of, column| {
            call.progress.report(
                done as f64,
                Some(of as f64),
                Some(&format!("column {column}")),
            )
        },
    )
    .map_err(|e| format!("annotate failed: {e}"))?;
    let views = {
        let mut sidecar = locked(&decide.sidecar);
        journal
            .write(&mut sidecar)
            .map_err(|e| format!("annotate failed: decide sidecar: {e}"))?;
        // The groups as a person sees them, read back as stored (with each candidate's level).
        feedback::groups_of_run(&sidecar.db, &run.run_id, None)
            .map_err(|e| format!("annotate recorded run {}, but: {e}", run.run_id))?
    };
    let whole = ToolResult {
        structured_content: Some(json!({
            "run_id": run.run_id,
            "card": {"id": run.card_id, "name": run.card_name},
            "groups": run.groups,
            "proposed": run.proposed,
        })),
        ..ToolResult::text(run_text(&run, &views))
    };
    let size = serde_json::to_vec(&whole)
        .map(|v| v.len())
        .unwrap_or(usize::MAX);
    if size <= RESULT_BUDGET {
        return Ok(whole);
    }
    // Recorded, but more than one reply carries: the run id and the way to read it in parts.
    let columns: Vec<&str> = card.columns.iter().map(|c| c.name.as_str()).collect();
    Ok(ToolResult {
        structured_content: Some(json!({
            "run_id": run.run_id,
            "card": {"id": run.card_id, "name": run.card_name},
            "groups_count": run.groups.len(),
            "proposed_count": run.proposed.len(),
            "columns": columns,
            "truncated": true,
        })),
        ..ToolResult::text(format!(
            "run {} on {}: {} groups, {} AVUs proposed. The whole result is {size} bytes, more than one reply carries: read it column by column with decide_explain run_id={} column=<name> (the columns are listed in structuredContent)",
            run.run_id,
            run.card_name,
            run.groups.len(),
            run.proposed.len(),
            run.run_id
        ))
    })
}

/// A run for people: a line for the run, then each group as a table of its candidates
/// with the AVU proposed for it, then how to answer a group and how to write.
fn run_text(run: &Run, views: &[GroupView]) -> String {
    let mut lines = vec![
        format!(
            "run {} on {}",
            run.run_id,
            feedback::one_line(&run.card_name, 60)
        ),
        format!(
            "{}, {} proposed; nothing written",
            count(run.groups.len(), "candidate group", "candidate groups"),
            count(run.proposed.len(), "AVU", "AVUs"),
        ),
    ];
    for view in views {
        lines.push(String::new());
        lines.extend(view.lines());
        for l in run.proposed.iter().filter(|l| l.group_id == view.group_id) {
            lines.push(format!(
                "  AVU {}: {}",
                avu_text(&l.attribute, &l.value, &l.unit),
                l.status
            ));
        }
    }
    lines.push(String::new());
    if views.is_empty() {
        lines.push(
            "no column found candidate terms: decide_explain run_id=… says why, column by column"
                .into(),
        );
        return lines.join("\n");
    }
    lines.push(feedback::how_to_answer(example(views)));
    lines.push(write_hint(&run.run_id));
    lines.join("\n")
}

/// How to write a run's accepted AVUs.
fn write_hint(run_id: &str) -> String {
    [
        "to write what is accepted (accept=proposed asks you about each open group first):"
            .to_owned(),
        format!("  mesh call decide_apply run_id={run_id} path=<path> dry_run=false"),
    ]
    .join("\n")
}

/// `n` things, the noun in the singular for one: `1 AVU`, `2 AVUs`.
pub(super) fn count(n: usize, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

/// An AVU on one line: `attribute = value [unit]`, a long value cut short.
fn avu_text(attribute: &str, value: &str, unit: &str) -> String {
    format!(
        "{} = {} [{}]",
        feedback::one_line(attribute, 40),
        feedback::one_line(value, 40),
        unit
    )
}

/// A group to show `decide_feedback` with: the first open one, and its winner's CURIE (its
/// best candidate's when it has no winner).
fn example(views: &[GroupView]) -> Option<(&str, &str)> {
    let view = views.iter().find(|v| v.is_open())?;
    let winner = view
        .winner
        .as_deref()
        .and_then(|w| view.candidates.iter().find(|c| c.decision_id == w))
        .or(view.candidates.first())?;
    Some((view.group_id.as_str(), winner.curie.as_str()))
}

/// The most an annotate result may take before it is given in parts (the bus carries 1 MiB
/// by default; the rest is for the envelope and the headers).
const RESULT_BUDGET: usize = 512 << 10;

fn explain(decide: &Decide, args: Explain, call: Call) -> Result<WithText<Value>, String> {
    let sidecar = locked(&decide.sidecar);
    let db = &sidecar.db;
    // Only one column's part of a run, when asked: a wide run is read in parts.
    let column = args.column.as_deref();
    let query = |sql: &str, key: &str| -> DbResult<Vec<Value>> {
        let (names, rows) = db.query_named(sql, params![key, column])?;
        Ok(as_json(&names, &rows))
    };
    let who = call.caller.id();
    if let Some(run_id) = &args.run_id {
        match feedback::check_owner(db, run_id, who.as_deref()) {
            Ok(()) => {}
            Err(e @ feedback::FeedbackError::NotYours { .. }) => {
                return Err(format!("{e}; `decide_explain path=…` shows what it wrote"));
            }
            Err(feedback::FeedbackError::NoRun(_)) => {
                return Err(format!(
                    "no run {} in the sidecar: give a run_id as decide_annotate showed it",
                    feedback::cut(run_id)
                ));
            }
            Err(e) => return Err(format!("cannot read the sidecar: {e}")),
        }
        let read = || -> Result<(Value, Vec<GroupView>), feedback::FeedbackError> {
            let card: (String, String) = db.query_row(
                "SELECT card_id, card_name FROM runs WHERE id = ?1",
                params![run_id],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )?;
            let views = feedback::groups_of_run(db, run_id, column)?;
            let mut groups = Vec::with_capacity(views.len());
            for view in &views {
                let mut g = serde_json::to_value(view).unwrap_or(Value::Null);
                g["open"] = json!(view.is_open());
                g["links"] = json!(feedback::group_links(db, &view.group_id)?);
                // The evidence that carried the winner: each part of its fit, what it adds.
                if let Some(winner) = &view.winner {
                    let state: Option<(String, String)> = db.query_opt(
                        "SELECT question_key, state_json FROM decisions WHERE id = ?1",
                        params![winner],
                        |r| Ok((r.get(0)?, r.get(1)?)),
                    )?;
                    if let Some((key, state)) = state {
                        let kind = key.split('@').next().unwrap_or_default();
                        let state: Value = serde_json::from_str(&state).unwrap_or(Value::Null);
                        g["carried_by"] = crate::backend::carried_by(kind, &state)
                            .into_iter()
                            .map(|(why, adds)| json!({"why": why, "adds": (adds * 100.0).round() / 100.0}))
                            .collect();
                    }
                }
                groups.push(g);
            }
            let v = json!({
                "run_id": run_id,
                "card": {"id": card.0, "name": card.1},
                // Each decision names the term it is about: a candidate's (term.fits), or the
                // winner's (avu.value_kind, avu.keep); a rule names its reason.
                "decisions": query("SELECT id, parent_id, question_key, subject, answer, level, calibration, p, margin, outcome, coalesce(json_extract(state_json, '$.candidate.curie'), json_extract(state_json, '$.winner.curie')) AS curie, coalesce(json_extract(state_json, '$.candidate.label'), json_extract(state_json, '$.winner.label')) AS label, json_extract(state_json, '$.rule') AS rule FROM decisions WHERE run_id = ?1 AND (CAST(?2 AS TEXT) IS NULL OR json_extract(subject, '$.column') = ?2) ORDER BY created_ms, rowid", run_id)?,
                "links": query("SELECT l.id, l.group_id, l.attribute, l.value, l.unit, l.status, l.path, l.snapshot_id FROM avu_links l JOIN candidate_groups g ON g.id = l.group_id WHERE l.run_id = ?1 AND (CAST(?2 AS TEXT) IS NULL OR json_extract(g.subject, '$.column') = ?2) ORDER BY l.rowid", run_id)?,
                "open_groups": query(&format!("SELECT g.id AS group_id, g.subject, g.ontology, g.top_p, g.margin, g.outcome FROM candidate_groups g WHERE g.run_id = ?1 AND (CAST(?2 AS TEXT) IS NULL OR json_extract(g.subject, '$.column') = ?2) AND {} ORDER BY g.rowid", feedback::IS_OPEN), run_id)?,
                "groups": groups,
            });
            Ok((v, views))
        };
        let (v, views) = read().map_err(|e| format!("cannot read the sidecar: {e}"))?;
        let text = run_explained(&v, &views, column);
        return Ok(WithText { text, output: v });
    }
    let Some(given) = &args.path else {
        return Err("give run_id or path".into());
    };
    let path = mesh_avu::path::normalise(given).map_err(|e| e.to_string())?;
    let path = &path;
    // A path's links grow with every run written there: a page at a time, after the link
    // the cursor names (the sidecar's own order).
    let after: i64 = match &args.cursor {
        None => 0,
        Some(c) => c.parse().map_err(|_| {
            format!("cursor {c:?} is not one decide_explain gave: pass a previous answer's next as it came")
        })?,
    };
    let limit = args.limit.unwrap_or(LINKS_PAGE).clamp(1, LINKS_PAGE);
    let mut next = None;
    let mut read = || -> DbResult<Value> {
        // The caller's own runs in full; another's only as far as avu shows it to anyone
        // (the AVUs written on the path), with nothing that would let them act on it.
        let (names, rows) = db.query_named(
            "SELECT l.rowid AS link_row, l.id, l.run_id, l.attribute, l.value, l.unit, l.status, l.snapshot_id, l.written_by, d.question_key, d.answer, d.level, d.calibration, d.p, r.actor AS owner FROM avu_links l JOIN decisions d ON d.id = l.decision_id JOIN runs r ON r.id = l.run_id WHERE l.path = ?1 AND (CAST(?2 AS TEXT) IS NULL OR json_extract(d.subject, '$.column') = ?2) AND l.rowid > ?3 ORDER BY l.rowid LIMIT ?4",
            params![path, column, after, (limit + 1) as i64],
        )?;
        let mut links = as_json(&names, &rows);
        if links.len() > limit {
            links.truncate(limit);
            next = links
                .last()
                .and_then(|l| l["link_row"].as_i64())
                .map(|r| r.to_string());
        }
        let links: Vec<Value> = links
            .into_iter()
            .filter_map(|mut l| {
                l.as_object_mut()?.remove("link_row");
                let owner = l.as_object_mut()?.remove("owner").unwrap_or(Value::Null);
                if owner.as_str() == who.as_deref() {
                    return Some(l);
                }
                (l["status"] == "written").then(|| {
                    json!({"attribute": l["attribute"], "value": l["value"], "unit": l["unit"],
                           "status": l["status"], "yours": false})
                })
            })
            .collect();
        Ok(json!({"path": path, "links": links}))
    };
    let mut v = read().map_err(|e| format!("cannot read the sidecar: {e}"))?;
    let mut text = path_explained(&v);
    if let Some(n) = next {
        text.push_str("\nmore follow: call again with cursor = next");
        v["next"] = json!(n);
    }
    Ok(WithText { text, output: v })
}

/// Rows as JSON objects keyed by their columns' names.
fn as_json(names: &[String], rows: &[crate::db::Row]) -> Vec<Value> {
    rows.iter()
        .map(|r| {
            let o = names.iter().zip(r.values()).map(|(n, v)| {
                let v = match v {
                    SqlValue::Null => Value::Null,
                    SqlValue::Int(n) => json!(n),
                    SqlValue::Real(f) => json!(f),
                    SqlValue::Text(t) => json!(t),
                };
                (n.clone(), v)
            });
            Value::Object(o.collect())
        })
        .collect()
}

/// The widest a line of text output gets before a list is wrapped.
const WIDTH: usize = 96;

/// `head` then `items` joined with `, `, wrapped before `WIDTH` onto lines indented by
/// `indent` spaces.
fn wrapped(head: String, items: &[String], indent: usize) -> Vec<String> {
    let mut lines = vec![head];
    for (i, item) in items.iter().enumerate() {
        let sep = if i + 1 < items.len() { "," } else { "" };
        let last = lines.last_mut().expect("one line at least");
        if i > 0 && last.chars().count() + 1 + item.chars().count() + sep.len() > WIDTH {
            lines.push(format!("{}{item}{sep}", " ".repeat(indent)));
        } else {
            last.push_str(&format!(" {item}{sep}"));
        }
    }
    lines
}

/// Rows as aligned columns two spaces apart, those numbered in `right` aligned right; each
/// cell on one line and cut at 40 characters.
fn table(head: &[&str], rows: &[Vec<String>], right: &[usize]) -> Vec<String> {
    let cells: Vec<Vec<String>> = std::iter::once(head.iter().map(|h| h.to_string()).collect())
        .chain(rows.iter().map(|r| {
            r.iter()
                .map(|c| feedback::one_line(c, 40))
                .collect::<Vec<_>>()
        }))
        .collect();
    let widths: Vec<usize> = (0..head.len())
        .map(|i| {
            cells
                .iter()
                .map(|r| r.get(i).map_or(0, |c| c.chars().count()))
                .max()
                .unwrap_or(0)
        })
        .collect();
    cells
        .iter()
        .map(|r| {
            let line: Vec<String> = r
                .iter()
                .enumerate()
                .map(|(i, c)| {
                    if right.contains(&i) {
                        format!("{c:>w$}", w = widths[i])
                    } else {
                        format!("{c:w$}", w = widths[i])
                    }
                })
                .collect();
            format!("  {}", line.join("  ").trim_end())
        })
        .collect()
}

/// A decision in a few words: `aspect quality (0.71 L0)`, its outcome when it is not
/// `proposed`.
fn decided(d: &Value) -> String {
    let key = d["question_key"].as_str().unwrap_or_default();
    let kind = key.split('@').next().unwrap_or(key);
    let kind = kind.strip_prefix("column.").unwrap_or(kind);
    let answer = d["answer"].as_str().unwrap_or_default();
    let outcome = d["outcome"].as_str().unwrap_or_default();
    let how = match (d["p"].as_f64(), d["level"].as_str().unwrap_or_default()) {
        // Nothing fitted it on labels: said so, not only its level.
        (Some(p), "L0") => format!("{p:.2} uncalibrated"),
        (Some(p), level) => format!("{p:.2} {level}"),
        (None, _) => "rule".to_owned(),
    };
    if outcome == "proposed" {
        format!("{kind} {answer} ({how})")
    } else {
        format!("{kind} {answer} ({how}, {outcome})")
    }
}

/// A run explained for people: a line for the run, then column by column what was asked
/// about it, its group as a table of candidates and its AVU links with their status; then
/// how to answer an open group.
fn run_explained(v: &Value, views: &[GroupView], only: Option<&str>) -> String {
    let empty = Vec::new();
    let decisions = v["decisions"].as_array().unwrap_or(&empty);
    let links = v["links"].as_array().unwrap_or(&empty);
    let open = views.iter().filter(|g| g.is_open()).count();
    let mut lines = vec![
        format!(
            "run {} on {}",
            v["run_id"].as_str().unwrap_or_default(),
            feedback::one_line(v["card"]["name"].as_str().unwrap_or_default(), 60),
        ),
        format!(
            "{}{}, {} ({open} open), {}",
            only.map(|c| format!("column {}: ", feedback::one_line(c, 40)))
                .unwrap_or_default(),
            count(decisions.len(), "decision", "decisions"),
            count(views.len(), "candidate group", "candidate groups"),
            count(links.len(), "AVU link", "AVU links"),
        ),
    ];
    // The columns in the order they were decided.
    let column_of = |d: &Value| -> String {
        let subject = d["subject"].as_str().unwrap_or_default();
        serde_json::from_str::<Value>(subject)
            .ok()
            .and_then(|s| s["column"].as_str().map(str::to_owned))
            .unwrap_or_else(|| subject.to_owned())
    };
    let mut columns: Vec<String> = Vec::new();
    for d in decisions {
        let c = column_of(d);
        if !columns.contains(&c) {
            columns.push(c);
        }
    }
    let mut single = false;
    for column in &columns {
        let asked: Vec<&Value> = decisions
            .iter()
            .filter(|d| {
                column_of(d) == *column
                    && d["question_key"]
                        .as_str()
                        .is_some_and(|k| k.starts_with("column."))
            })
            .collect();
        let summary: Vec<String> = asked.iter().map(|d| decided(d)).collect();
        let shown = feedback::one_line(column, 48);
        let groups: Vec<&GroupView> = views.iter().filter(|g| g.column == *column).collect();
        if groups.is_empty() {
            let (line, items) = match asked.first() {
                Some(d) if d["level"] == "rule" => (
                    format!(
                        "column {shown}: not annotated, set aside by rule ({})",
                        d["rule"].as_str().unwrap_or("a rule")
                    ),
                    Vec::new(),
                ),
                Some(d) if d["outcome"] != "proposed" => (
                    format!("column {shown}: not annotated: {}", decided(d)),
                    Vec::new(),
                ),
                _ => (
                    format!("column {shown}: no candidate terms found; asked:"),
                    summary,
                ),
            };
            // Columns without a group one line each, together.
            if !single {
                lines.push(String::new());
            }
            single = true;
            lines.extend(wrapped(line, &items, 4));
            continue;
        }
        single = false;
        for g in groups {
            lines.push(String::new());
            let mut block = g.lines();
            let asked = wrapped("  asked:".to_owned(), &summary, 4);
            block.splice(2..2, asked);
            lines.extend(block);
            let carried: Vec<String> = v["groups"]
                .as_array()
                .into_iter()
                .flatten()
                .filter(|j| j["group_id"] == json!(g.group_id))
                .flat_map(|j| j["carried_by"].as_array().cloned().unwrap_or_default())
                .filter_map(|c| {
                    Some(format!(
                        "{} ({:+.1})",
                        c["why"].as_str()?,
                        c["adds"].as_f64()?
                    ))
                })
                .collect();
            if !carried.is_empty() {
                lines.extend(wrapped("  the winner, carried by:".to_owned(), &carried, 4));
            }
            for l in links.iter().filter(|l| l["group_id"] == json!(g.group_id)) {
                lines.push(format!(
                    "  AVU {}: {}",
                    avu_text(
                        l["attribute"].as_str().unwrap_or_default(),
                        l["value"].as_str().unwrap_or_default(),
                        l["unit"].as_str().unwrap_or_default()
                    ),
                    l["status"].as_str().unwrap_or_default()
                ));
            }
        }
    }
    lines.push(String::new());
    if example(views).is_some() {
        lines.push(feedback::how_to_answer(example(views)));
    } else if !views.is_empty() {
        lines.push("every candidate group is answered".to_owned());
    }
    lines.push(write_hint(v["run_id"].as_str().unwrap_or_default()));
    lines.push(format!(
        "every decision, with its calibration and margin:\n  mesh call decide_explain run_id={} --json",
        v["run_id"].as_str().unwrap_or_default()
    ));
    lines.join("\n")
}

/// The links on a path for people: a table of attribute, value, unit, status and the
/// decision behind each (another's run shows only what avu shows anyone).
fn path_explained(v: &Value) -> String {
    let empty = Vec::new();
    let links = v["links"].as_array().unwrap_or(&empty);
    let path = v["path"].as_str().unwrap_or_default();
    let mut lines = vec![format!(
        "{} decide recorded on {path}",
        count(links.len(), "AVU link", "AVU links")
    )];
    if links.is_empty() {
        return lines.join("\n");
    }
    let text = |l: &Value, k: &str| l[k].as_str().unwrap_or("-").to_owned();
    let rows: Vec<Vec<String>> = links
        .iter()
        .map(|l| {
            let (p, level) = if l["yours"] == false {
                ("-".to_owned(), "another's run".to_owned())
            } else if l["calibration"] == "human" {
                ("-".to_owned(), "your pick".to_owned())
            } else {
                (
                    l["p"]
                        .as_f64()
                        .map(|p| format!("{p:.2}"))
                        .unwrap_or_else(|| "-".into()),
                    text(l, "level"),
                )
            };
            vec![
                text(l, "attribute"),
                text(l, "value"),
                text(l, "unit"),
                text(l, "status"),
                p,
                level,
            ]
        })
        .collect();
    lines.extend(table(
        &["attribute", "value", "unit", "status", "p", "level"],
        &rows,
        &[4],
    ));
    lines.join("\n")
}

fn health(decide: &Decide, _args: NoArgs, _call: Call) -> Result<WithText<Value>, Infallible> {
    let in_use = decide.bundle();
    let refused = locked(&decide.loaded).refused.clone();
    let sidecar = locked(&decide.sidecar);
    let runs: i64 = sidecar
        .db
        .query_row("SELECT count(*) FROM runs", params![], |r| r.get(0))
        .unwrap_or(-1);
    let ontologies: Vec<Value> = locked(&decide.index)
        .ontologies()
        .unwrap_or_default()
        .into_iter()
        .map(|(name, version, terms)| json!({"ontology": name, "version": version, "terms": terms}))
        .collect();
    let lock_ok = questions::LOCK == questions::lock_text();
    let bundle = in_use.as_ref().map(|b| {
        json!({
            "version": b.version(),
            "backend": b.manifest.backend,
            "questions": b.manifest.questions,
        })
    });
    // The sentence-embedding model: whether the ranking uses it, where it is, and why not
    // (off unless asked for: the figures in docs/benchmarks.md do not defend it on two cores).
    let model = match &decide.embedder {
        Ok(e) => Ok(e.dir().to_owned()),
        Err(_) => crate::embed::model_dir(),
    };
    let embedder = json!({
        "loaded": decide.embedder.is_ok(),
        "model": model.as_ref().ok().map(|d| d.display().to_string()),
        "why": match (&decide.embedder, &model) {
            (Ok(_), _) => "loaded: the ranking weighs each column's similarity to its candidates".to_owned(),
            (Err(why), Ok(_)) => format!("installed; {why}"),
            (Err(why), Err(e)) => format!("{why}; {e}"),
        },
    });
    // Question by question: calibrated (and on what), or not, and why not.
    let calibration: serde_json::Map<String, Value> = questions::ALL
        .iter()
        .map(|q| {
            let key = q.key();
            let fitted = in_use
                .as_ref()
                .and_then(|b| b.manifest.questions.get(&key).map(|f| (b, f)));
            let said = match fitted {
                _ if q.kind == questions::VALUE_KIND.kind => json!({
                    "calibration": "rule",
                    "why": "the embedded backend cannot answer it: the convention (the column's name) is recorded as a rule",
                }),
                Some((b, f)) => json!({
                    "calibration": f.level.name(),
                    "bundle": b.version(),
                    "labels": f.labels,
                    "cards": f.cards,
                    "held_out_ece": b.chosen(&key).map(|m| m.ece),
                }),
                None if q.options != ["yes", "no"] => json!({
                    "calibration": "none",
                    "why": "not a yes/no question: its probabilities are the backend's softmax over the options, never fitted on labels",
                }),
                None => json!({
                    "calibration": "none",
                    "why": match &in_use {
                        Some(b) => format!("bundle {} fits nothing for it (no labels, or too few)", b.version()),
                        None => "no bundle promoted: the backend's scores, uncalibrated".to_owned(),
                    },
                }),
            };
            (key, said)
        })
        .collect();
    // The winner's p: the head that says how likely a column's best candidate is right.
    let mut calibration = calibration;
    calibration.insert(
        "winner".into(),
        match decide.backend.winner_head() {
            Some(head) => json!({
                "calibration": "winner head",
                "origin": "shipped with decide (crates/decide/src/winner.json)",
                "cards": head.fitted_on.cards,
                "winners": head.fitted_on.winners,
                "held_out_ece": head.fitted_on.held_out.ece,
                "ece_of_a_calibrated_p": head.fitted_on.ece_floor.0,
                "gold_sha256": head.fitted_on.gold_sha256,
                "command": head.fitted_on.command,
            }),
            None => json!({
                "calibration": "none",
                "why": format!("backend {} has no winner head: a winner's p is its p(fits)", decide.backend.name()),
            }),
        },
    );
    let calibrated = calibration
        .values()
        .filter(|c| matches!(c["calibration"].as_str(), Some("L1" | "L2" | "winner head")))
        .count();
    let v = json!({
        "calibration": calibration,
        "embedder": embedder,
        "questions_lock": {
            "matches": lock_ok,
            "id": questions::lock_id(),
            "keys": questions::ALL.iter().map(|q| q.key()).collect::<Vec<_>>(),
        },
        "sidecar": {"path": sidecar.path, "version": sidecar.version().ok(), "runs": runs},
        "backend": decide.backend.name(),
        "bundle": bundle,
        "bundle_refused": refused.as_ref().map(|(v, why)| json!({"version": v, "why": why})),
        "ontologies": ontologies,
    });
    let bundle_text = match (&in_use, &refused) {
        (Some(b), _) => format!("bundle {}", b.version()),
        (None, Some((v, _))) => format!("bundle {v} refused (see bundle_refused)"),
        (None, None) => "no bundle promoted".into(),
    };
    let text = format!(
        "questions lock {}; sidecar {} ({} runs); backend {}; {}; {} of {} questions and the winner calibrated (see calibration); {} ontologies indexed; embedding model {}",
        if lock_ok { "matches" } else { "DOES NOT MATCH" },
        sidecar.path,
        runs,
        decide.backend.name(),
        bundle_text,
        calibrated,
        questions::ALL.len(),
        v["ontologies"].as_array().map(Vec::len).unwrap_or(0),
        match (&decide.embedder, &model) {
            (Ok(_), _) => "loaded, in the ranking",
            (Err(_), Ok(_)) => "not loaded (installed, unused)",
            (Err(_), Err(_)) => "not loaded (not installed)",
        }
    );
    Ok(WithText { text, output: v })
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    #[test]
    fn a_decision_nothing_calibrated_says_so() {
        let d = |p: Value, level: &str, outcome: &str| {
            decided(
                &json!({"question_key": "column.aspect@abc", "answer": "quality",
                "p": p, "level": level, "outcome": outcome}),
            )
        };
        assert_eq!(
            d(json!(0.71), "L0", "proposed"),
            "aspect quality (0.71 uncalibrated)"
        );
        assert_eq!(d(json!(0.71), "L1", "proposed"), "aspect quality (0.71 L1)");
        assert_eq!(
            d(Value::Null, "rule", "rule"),
            "aspect quality (rule, rule)"
        );
    }

    #[test]
    fn card_paths_stay_inside_the_cards_directory() {
        let cards = Path::new("/srv/decide/cards");
        assert_eq!(card_file(cards, "a/b.md").unwrap(), cards.join("a/b.md"));
        for bad in ["../secret", "/etc/passwd", "a/../../x"] {
            assert!(card_file(cards, bad).is_err(), "{bad}");
        }
    }

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

    #[test]
    fn annotate_takes_a_card_or_a_card_path() {
        accepts::<Annotate>(
            &[
                json!({"card_text": "# a card"}),
                json!({"card_path": "a/b.md"}),
                json!({"card_text": ""}),
            ],
            &[
                json!({}),
                json!({"card_text": "# a card", "card_path": "a/b.md"}),
                json!({"card_text": null}),
                json!({"card_text": 7}),
                json!({"card_text": "# a card", "colour": "red"}),
            ],
        );
    }

    #[test]
    fn explain_takes_a_run_or_a_path() {
        accepts::<Explain>(
            &[
                json!({"run_id": "r"}),
                json!({"run_id": "r", "column": "c"}),
                json!({"path": "/mesh/home/ann/x"}),
                json!({"path": "/mesh/home/ann/x", "column": "c"}),
            ],
            &[
                json!({}),
                json!({"column": "c"}),
                json!({"run_id": "r", "path": "/mesh/home/ann/x"}),
                json!({"run_id": null}),
                json!({"run_id": "r", "colour": "red"}),
            ],
        );
    }

    #[test]
    fn health_takes_nothing() {
        accepts::<NoArgs>(&[json!({})], &[json!({"verbose": true}), json!([])]);
    }
}
