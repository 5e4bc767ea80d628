//! `decide_apply`: writes a run's accepted AVUs to a path through the avu module, on behalf of
//! the caller, then mirrors them into the lake; with `accept="proposed"` it first asks about
//! each open candidate group, one group per round trip.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use rusqlite::{OptionalExtension, params};
use serde_json::{Map, Value, json};

use super::feedback::{self, FeedbackError};
use super::lake::{Event, Lake};
use super::sidecar::Sidecar;
use super::tools::{Decide, locked};
use mesh_avu::path::normalise;
use mesh_core::runtime::request_state::StateError;
use mesh_core::runtime::{Call, Tool};
use mesh_core::subjects::catalog::now_ms;
use mesh_core::subjects::{FullName, ToolResult};
use mesh_sqlite::spend_state;

const TOOL: &str = "decide_apply";

/// The prefix of the one input request of a round trip: `term_choice:<group_id>`.
const TERM_CHOICE: &str = "term_choice:";

/// How long avu gets to write.
const AVU_DEADLINE: Duration = Duration::from_secs(30);

pub(super) fn tool<F, Fut>(handler: F) -> Tool
where
    F: Fn(Call) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = ToolResult> + Send + 'static,
{
    Tool::new(
        "apply",
        "Writes a run's accepted AVUs to a path through the avu module and mirrors them into the lake; dry_run (the default) only reports. accept=proposed first asks you about each open candidate group, one per round trip",
        json!({
            "type": "object",
            "properties": {
                "run_id": {"type": "string", "minLength": 1, "description": "a run of decide_annotate"},
                "path": {"type": "string", "description": "an absolute object path under your home or a shared root"},
                "accept": {"type": "string", "enum": ["auto", "proposed"], "default": "auto",
                    "description": "auto: write what is accepted already; proposed: ask about each open group first"},
                "dry_run": {"type": "boolean", "default": true, "description": "report what would be written and write nothing (answers to questions are kept)"}
            },
            "required": ["run_id", "path"],
            "additionalProperties": false
        }),
        handler,
    )
    .output_schema(json!({
        "type": "object",
        "required": ["run_id", "path", "dry_run", "written", "open_groups"],
        "properties": {
            "run_id": {"type": "string"},
            "path": {"type": "string"},
            "dry_run": {"type": "boolean"},
            "written": {
                "type": "array",
                "description": "AVUs written now, or that a real apply would write",
                "items": {
                    "type": "object",
                    "required": ["attribute", "value", "unit"],
                    "properties": {"attribute": {"type": "string"}, "value": {"type": "string"}, "unit": {"type": "string"}}
                }
            },
            "already_written": {"type": "integer"},
            "snapshot": {"type": ["integer", "null"]},
            "mirror": {"type": "string"},
            "open_groups": {"type": "integer"}
        }
    }))
    .annotations(json!({"readOnlyHint": false, "destructiveHint": false, "idempotentHint": true, "openWorldHint": false}))
}

pub(super) async fn run(decide: Arc<Decide>, call: Call) -> ToolResult {
    match apply(decide, call).await {
        Ok(r) => r,
        Err(e) => ToolResult::error(e),
    }
}

/// Runs sidecar and lake work off the runtime's threads.
async fn blocking<T: Send + 'static>(
    decide: &Arc<Decide>,
    f: impl FnOnce(&Decide) -> Result<T, String> + Send + 'static,
) -> Result<T, String> {
    let decide = decide.clone();
    mesh_core::runtime::off_runtime("decide_apply", move || f(&decide)).await?
}

/// One accepted link as it is written.
#[derive(Debug, Clone)]
struct Pending {
    link_id: String,
    attribute: String,
    value: String,
    unit: String,
}

fn avu_json(p: &Pending) -> Value {
    json!({"attribute": p.attribute, "value": p.value, "unit": p.unit})
}

async fn apply(decide: Arc<Decide>, call: Call) -> Result<ToolResult, String> {
    let arg = |k: &str| call.args.get(k).and_then(Value::as_str).unwrap_or_default();
    let run_id = arg("run_id").to_owned();
    let path = normalise(arg("path")).map_err(|e| e.to_string())?;
    let proposed = arg("accept") == "proposed";
    let dry_run = call
        .args
        .get("dry_run")
        .and_then(Value::as_bool)
        .unwrap_or(true);
    let who = call.caller.id();

    let asked = {
        let (call, run_id, who) = (call.clone(), run_id.clone(), who.clone());
        blocking(&decide, move |d| {
            answer_and_ask(d, &call, &run_id, proposed, who.as_deref())
        })
        .await?
    };
    if let Some(question) = asked {
        return Ok(question);
    }

    let (pending, already, open) = {
        let (run_id, path) = (run_id.clone(), path.clone());
        blocking(&decide, move |d| plan(&locked(&d.sidecar), &run_id, &path)).await?
    };
    if dry_run {
        let mut text = format!("dry run: {} AVUs would be written to {path}", pending.len());
        for p in &pending {
            text.push_str(&format!("\n  + {} = {} [{}]", p.attribute, p.value, p.unit));
        }
        if already > 0 {
            text.push_str(&format!("\n{already} written before"));
        }
        if open > 0 {
            text.push_str(&format!(
                "\n{open} candidate groups still open (accept=proposed asks about them)"
            ));
        }
        return Ok(ToolResult {
            structured_content: Some(json!({
                "run_id": run_id, "path": path, "dry_run": true,
                "written": pending.iter().map(avu_json).collect::<Vec<_>>(),
                "already_written": already, "open_groups": open,
            })),
            ..ToolResult::text(text)
        });
    }

    if !pending.is_empty() {
        let Some(actor) = call.actor() else {
            return Err(
                "decide_apply was called without an identity: a write goes to avu on behalf of the person calling"
                    .into(),
            );
        };
        let bus = decide
            .bus
            .as_ref()
            .ok_or("decide has no bus connection to reach the avu module")?;
        let args = json!({
            "path": path,
            "avus": pending.iter().map(avu_json).collect::<Vec<_>>(),
            "source": format!("decide run {run_id}"),
        });
        let tool = FullName::parse("avu_add").expect("a valid name");
        let result = bus
            .on_behalf_of(actor)
            .call(&tool, &args, AVU_DEADLINE)
            .await
            .map_err(|e| format!("nothing written: {e}"))?;
        if result.is_error {
            return Err(format!("avu refused the write: {}", result.text_content()));
        }
        let ids: Vec<String> = pending.iter().map(|p| p.link_id.clone()).collect();
        let (path, who) = (path.clone(), who.clone().unwrap_or_default());
        blocking(&decide, move |d| {
            mark_written(&mut locked(&d.sidecar), &ids, &path, &who).map_err(|e| e.to_string())
        })
        .await?;
    }

    // Mirrors this write and anything an earlier failure left behind.
    let mirrored = blocking(&decide, |d| {
        let lake = locked(&d.lake);
        Ok(mirror_pending(&d.sidecar, &lake))
    })
    .await?;
    let here = mirrored
        .iter()
        .find(|m| m.run_id == run_id && m.path == path);
    let (snapshot, mirror) = match here {
        Some(m) => (
            m.snapshot,
            match &m.error {
                None => "mirrored".to_owned(),
                Some(e) => format!(
                    "mirror failed ({e}); the links say mirror_failed: `mesh decide lake recover` or the next apply mirrors them"
                ),
            },
        ),
        None => (None, "nothing to mirror".to_owned()),
    };
    let mut text = format!("{} AVUs written to {path}", pending.len());
    for p in &pending {
        text.push_str(&format!("\n  + {} = {} [{}]", p.attribute, p.value, p.unit));
    }
    if already > 0 {
        text.push_str(&format!("\n{already} written before"));
    }
    text.push_str(&match snapshot {
        Some(s) => format!("\nlake snapshot {s}"),
        None => format!("\nlake: {mirror}"),
    });
    if open > 0 {
        text.push_str(&format!("\n{open} candidate groups still open"));
    }
    Ok(ToolResult {
        structured_content: Some(json!({
            "run_id": run_id, "path": path, "dry_run": false,
            "written": pending.iter().map(avu_json).collect::<Vec<_>>(),
            "already_written": already, "snapshot": snapshot, "mirror": mirror,
            "open_groups": open,
        })),
        ..ToolResult::text(text)
    })
}

/// Takes the answer a repeated call carries (after checking its state), then, for
/// `accept="proposed"`, asks about the next open group not declined in this apply.
fn answer_and_ask(
    d: &Decide,
    call: &Call,
    run_id: &str,
    proposed: bool,
    who: Option<&str>,
) -> Result<Option<ToolResult>, String> {
    let mut sidecar = locked(&d.sidecar);
    feedback::check_owner(&sidecar.db, run_id, who).map_err(|e| e.to_string())?;
    let mut declined: Vec<String> = Vec::new();
    if let Some(c) = &call.continuation {
        let state = c.request_state.as_deref().ok_or(
            "the answer came without its requestState: call decide_apply again without inputResponses",
        )?;
        let opened = d.key.open(state, TOOL, who).map_err(|e| e.to_string())?;
        let ids = &opened.ids;
        let (Some(state_run), Some(group)) = (ids["run"].as_str(), ids["group"].as_str()) else {
            return Err(
                "requestState names no run and group: call decide_apply again without it".into(),
            );
        };
        if state_run != run_id {
            return Err(format!(
                "requestState is from another run ({state_run}), not {run_id}: call decide_apply again without it"
            ));
        }
        declined = serde_json::from_value(ids["declined"].clone()).unwrap_or_default();
        let key = format!("{TERM_CHOICE}{group}");
        let responses = c.input_responses.clone().unwrap_or_default();
        let Some(answer) = responses.get(&key) else {
            let given: Vec<&String> = responses.keys().collect();
            return Err(format!(
                "the answer is not for the group asked: expected {key}, got {given:?}"
            ));
        };
        let tx = sidecar.db.transaction().map_err(|e| e.to_string())?;
        // Spent with the answer it carries, so a replay finds it used.
        if !spend_state(&tx, &opened.id, opened.expires_ms).map_err(|e| e.to_string())? {
            return Err(StateError::Used.to_string());
        }
        match answer.get("action").and_then(Value::as_str) {
            Some("accept") => {
                let chosen = answer
                    .pointer("/content/candidate")
                    .and_then(Value::as_str)
                    .ok_or(format!("the answer to {key} carries no candidate"))?;
                feedback::pick(&tx, d.backend.as_ref(), &d.policy, group, chosen, who)
                    .map_err(|e| e.to_string())?;
            }
            Some("decline") | Some("cancel") => {
                feedback::decline(&tx, group, who).map_err(|e| e.to_string())?;
                declined.push(group.to_owned());
            }
            _ => {
                return Err(format!(
                    "the answer to {key} has no valid action (accept, decline or cancel)"
                ));
            }
        }
        tx.commit().map_err(|e| e.to_string())?;
    }
    if !proposed {
        return Ok(None);
    }
    let open = feedback::open_groups(&sidecar.db, run_id).map_err(|e| e.to_string())?;
    let remaining: Vec<&String> = open.iter().filter(|g| !declined.contains(g)).collect();
    let Some(next) = remaining.first() else {
        return Ok(None);
    };
    let view = feedback::group(&sidecar.db, next).map_err(|e: FeedbackError| e.to_string())?;
    let options: Vec<Value> = view
        .candidates
        .iter()
        .map(|c| json!({"const": c.decision_id, "title": c.display()}))
        .collect();
    let schema = json!({
        "type": "object",
        "properties": {"candidate": {"type": "string", "title": "Term", "oneOf": options}},
        "required": ["candidate"]
    });
    let mut requests = Map::new();
    requests.insert(
        format!("{TERM_CHOICE}{}", view.group_id),
        ToolResult::elicitation(
            format!(
                "Which {} term describes column {}? ({} open group{} left; decline to leave it unwritten)",
                view.ontology,
                view.column,
                remaining.len(),
                if remaining.len() == 1 { "" } else { "s" }
            ),
            schema,
        ),
    );
    let state = d.key.seal(
        TOOL,
        who,
        json!({"run": run_id, "group": view.group_id, "declined": declined}),
    );
    Ok(Some(ToolResult::input_required(requests, state)))
}

/// What a real apply writes (accepted links not yet written), how many were written before,
/// and how many groups are open. A run goes to one path.
fn plan(sidecar: &Sidecar, run_id: &str, path: &str) -> Result<(Vec<Pending>, i64, usize), String> {
    let db = &sidecar.db;
    let elsewhere: Option<String> = db
        .query_row(
            "SELECT path FROM avu_links WHERE run_id = ?1 AND path IS NOT NULL AND path != ?2 LIMIT 1",
            params![run_id, path],
            |r| r.get(0),
        )
        .optional()
        .map_err(|e| e.to_string())?;
    if let Some(other) = elsewhere {
        return Err(format!(
            "run {run_id} was written to {other}; a run is applied to one path (annotate the card again for another)"
        ));
    }
    let mut q = db
        .prepare(
            "SELECT id, attribute, value, unit FROM avu_links
             WHERE run_id = ?1 AND status = 'accepted' ORDER BY rowid",
        )
        .map_err(|e| e.to_string())?;
    let pending = q
        .query_map([run_id], |r| {
            Ok(Pending {
                link_id: r.get(0)?,
                attribute: r.get(1)?,
                value: r.get(2)?,
                unit: r.get::<_, Option<String>>(3)?.unwrap_or_default(),
            })
        })
        .and_then(|rows| rows.collect::<Result<Vec<_>, _>>())
        .map_err(|e| e.to_string())?;
    let already: i64 = db
        .query_row(
            "SELECT count(*) FROM avu_links WHERE run_id = ?1 AND status IN ('written', 'mirror_failed')",
            [run_id],
            |r| r.get(0),
        )
        .map_err(|e| e.to_string())?;
    let open = feedback::open_groups(db, run_id)
        .map_err(|e| e.to_string())?
        .len();
    Ok((pending, already, open))
}

fn mark_written(
    sidecar: &mut Sidecar,
    ids: &[String],
    path: &str,
    who: &str,
) -> rusqlite::Result<()> {
    let tx = sidecar.db.transaction()?;
    let now = now_ms() as i64;
    for id in ids {
        tx.execute(
            "UPDATE avu_links SET status = 'written', path = ?2, written_by = ?3, written_ms = ?4,
               updated_ms = ?4
             WHERE id = ?1 AND status = 'accepted'",
            params![id, path, who, now],
        )?;
    }
    tx.commit()
}

/// One (run, path) the mirror went through.
#[derive(Debug, Clone, PartialEq)]
pub struct Mirrored {
    pub run_id: String,
    pub path: String,
    pub links: usize,
    /// The snapshot that holds them (made now, or by an earlier mirror that was not recorded).
    pub snapshot: Option<i64>,
    pub error: Option<String>,
}

/// Mirrors every written link the lake does not hold yet: one snapshot per (run, path),
/// links already in the lake (a mirror whose recording was lost) are not written again.
/// The caller holds the lake's lock; `lake_dir` is where the lake is.
pub fn mirror_pending(
    sidecar: &std::sync::Mutex<Sidecar>,
    lake_dir: &std::path::Path,
) -> Vec<Mirrored> {
    let rows: Vec<(String, String, Event)> = {
        let sidecar = locked(sidecar);
        let read = || -> rusqlite::Result<Vec<(String, String, Event)>> {
            let mut q = sidecar.db.prepare(
                "SELECT id, run_id, path, attribute, value, coalesce(unit, ''),
                        coalesce(written_by, ''), coalesce(written_ms, updated_ms)
                 FROM avu_links
                 WHERE status IN ('written', 'mirror_failed') AND snapshot_id IS NULL
                 ORDER BY rowid",
            )?;
            q.query_map([], |r| {
                let (run_id, path): (String, String) = (r.get(1)?, r.get(2)?);
                Ok((
                    run_id.clone(),
                    path.clone(),
                    Event {
                        link_id: r.get(0)?,
                        path,
                        attribute: r.get(3)?,
                        value: r.get(4)?,
                        unit: r.get(5)?,
                        op: "add".into(),
                        actor: r.get(6)?,
                        source: "decide".into(),
                        run_id,
                        at_ms: r.get(7)?,
                    },
                ))
            })?
            .collect()
        };
        match read() {
            Ok(rows) => rows,
            Err(e) => {
                tracing::warn!("cannot read the links to mirror: {e}");
                return Vec::new();
            }
        }
    };
    if rows.is_empty() {
        return Vec::new();
    }
    let mut batches: BTreeMap<(String, String), Vec<Event>> = BTreeMap::new();
    for (run, path, event) in rows {
        batches.entry((run, path)).or_default().push(event);
    }
    let mut lake = open_lake(lake_dir);
    let mut done = Vec::new();
    for ((run_id, path), events) in batches {
        let outcome = match &mut lake {
            Ok(lake) => mirror_one(lake, &events),
            Err(e) => Err(e.clone()),
        };
        let ids: Vec<&str> = events.iter().map(|e| e.link_id.as_str()).collect();
        let recorded = {
            let mut sidecar = locked(sidecar);
            record_mirror(&mut sidecar, &ids, &outcome)
        };
        let error = match (&outcome, recorded) {
            (Err(e), _) => Some(e.clone()),
            (Ok(_), Err(e)) => Some(format!(
                "mirrored, but the sidecar could not record it: {e}"
            )),
            _ => None,
        };
        if let Some(e) = &error {
            tracing::warn!("lake mirror of run {run_id} on {path} failed: {e}");
        }
        done.push(Mirrored {
            run_id,
            path,
            links: events.len(),
            snapshot: outcome.ok().map(|(s, _)| s),
            error,
        });
    }
    done
}

/// Opens the lake, waiting a little if another process holds it.
fn open_lake(dir: &std::path::Path) -> Result<Lake, String> {
    let mut last = String::new();
    for attempt in 0..10 {
        match Lake::open(dir) {
            Ok(lake) => return Ok(lake),
            Err(e) => {
                last = e.to_string();
                if !last.contains("lock") {
                    break;
                }
                std::thread::sleep(Duration::from_millis(50 << attempt.min(4)));
            }
        }
    }
    Err(last)
}

/// The snapshot holding a batch, and per link the snapshot to record.
type Batch = (i64, Vec<(String, i64)>);

/// One batch: new events in one snapshot; links the lake held already keep theirs.
fn mirror_one(lake: &mut Lake, events: &[Event]) -> Result<Batch, String> {
    let appended = lake.append(events).map_err(|e| e.to_string())?;
    let snapshot = appended
        .made
        .or_else(|| appended.snapshots.values().copied().max())
        .ok_or("the lake took no events and holds none of them")?;
    Ok((snapshot, appended.snapshots.into_iter().collect()))
}

fn record_mirror(
    sidecar: &mut Sidecar,
    ids: &[&str],
    outcome: &Result<Batch, String>,
) -> rusqlite::Result<()> {
    let tx = sidecar.db.transaction()?;
    let now = now_ms() as i64;
    match outcome {
        Ok((_, per_link)) => {
            for (id, snapshot) in per_link {
                tx.execute(
                    "UPDATE avu_links SET status = 'written', snapshot_id = ?2, updated_ms = ?3 WHERE id = ?1",
                    params![id, snapshot, now],
                )?;
            }
        }
        Err(_) => {
            for id in ids {
                tx.execute(
                    "UPDATE avu_links SET status = 'mirror_failed', updated_ms = ?2 WHERE id = ?1",
                    params![id, now],
                )?;
            }
        }
    }
    tx.commit()
}
