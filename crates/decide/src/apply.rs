//! `decide_apply`: writes a run's accepted AVUs to a path through the avu module, on behalf of
//! the caller, then mirrors them into the lake; with `accept="proposed"` it first asks about
//! each open candidate group, one group per round trip. A dry run (the default) changes
//! nothing stored: its answers live in its requestState only, and what it reports is read
//! in a transaction that applies them and is rolled back.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

use super::feedback::{self, FeedbackError};
use super::lake::{Event, Lake, LakeAt, LakeError};
use super::shown::count;
use super::state::{Decide, locked};
use crate::store::links::{self, Pending};
use crate::store::mirror_lock::MirrorLock;
use crate::store::sidecar::Sidecar;
use crate::store::{Db, DbResult, groups, spend_state};
use mesh_avu::path::normalise;
use mesh_core::runtime::request_state::StateError;
use mesh_core::runtime::{Call, Tool, off_runtime};
use mesh_core::subjects::{FullName, ToolResult};

const TOOL: &str = "decide_apply";

/// The prefix of the one input request of a round trip: `term_choice:<group_id>`.
const TERM_CHOICE: &str = "term_choice:";

/// How long avu gets to write.
const AVU_DEADLINE: Duration = Duration::from_secs(30);

/// How long a mirror waits for another process or instance holding the lake, when its
/// caller waits longer (`mesh decide lake recover`, the tests).
pub const LAKE_WAIT: Duration = Duration::from_secs(30);

/// What an apply keeps of its caller's deadline for answering, after a mirror's wait.
const ANSWER_MARGIN: Duration = Duration::from_secs(2);

/// How long an apply whose caller named no deadline waits for the lake: the AVUs are
/// written already, and a link not mirrored now is mirrored by the next apply.
const APPLY_LAKE_WAIT: Duration = Duration::from_secs(5);

// The arguments of decide_apply. (Plain comments on the argument types: a doc comment would
// become the schema's description.)
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct Apply {
    /// a run of decide_annotate
    #[schemars(length(min = 1))]
    run_id: String,
    /// an absolute object path under your home or a shared root
    path: String,
    /// auto: write what is accepted already; proposed: ask about each open group first
    #[serde(default)]
    accept: Accept,
    /// true (the default): report what dry_run=false would write and change nothing stored, answers to questions included; false: record the answers and write
    #[serde(default = "dry_run_unless_told")]
    dry_run: bool,
}

// What an apply writes: what is accepted already, or first what the person accepts.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
#[schemars(inline)]
enum Accept {
    #[default]
    Auto,
    Proposed,
}

/// An apply only reports unless told to write.
fn dry_run_unless_told() -> bool {
    true
}

pub(super) fn tool(decide: Arc<Decide>) -> Tool {
    Tool::typed(
        "apply",
        "Writes a run's accepted AVUs to a path through the avu module and mirrors them into the lake. dry_run (the default) changes nothing stored: it reports what dry_run=false would write; with accept=proposed it asks about each open candidate group as the real run does, but keeps none of the answers, so the real run asks again. accept=proposed asks you about each open group first, one per round trip; with dry_run=false each answer is recorded as decide_feedback records it, and what you accept is written",
        move |args: Apply, call: Call| run(decide.clone(), args, call),
    )
    .output_schema(json!({
        "type": "object",
        "required": ["run_id", "path", "dry_run", "written", "open_groups"],
        "properties": {
            "run_id": {"type": "string"},
            "path": {"type": "string"},
            "dry_run": {"type": "boolean", "description": "true: nothing was written or recorded, answers included"},
            "written": {
                "type": "array",
                "description": "AVUs written now, or that a real apply would write (in a dry run, with the answers given in it)",
                "items": {
                    "type": "object",
                    "required": ["attribute", "value", "unit"],
                    "properties": {"attribute": {"type": "string"}, "value": {"type": "string"}, "unit": {"type": "string"}}
                }
            },
            "already_written": {"type": "integer"},
            "snapshot": {"type": ["integer", "null"]},
            "mirror": {"type": "string"},
            "open_groups": {"type": "integer", "description": "candidate groups left open (in a dry run: that the real run with the same answers would leave open)"},
            "open": {
                "type": "array",
                "description": "those groups: id, column, whether you declined it in this apply, or before",
                "items": {
                    "type": "object",
                    "properties": {"group_id": {"type": "string"}, "column": {"type": "string"}, "declined": {"type": "boolean"}, "declined_before": {"type": "boolean"}}
                }
            }
        }
    }))
    .annotations(json!({"readOnlyHint": false, "destructiveHint": false, "idempotentHint": true, "openWorldHint": false}))
    // Its writes go to avu as the person calling: with the ticket their call carries.
    .acts_for_people()
    // A large card's apply may outlive its caller's wait: a task, when the caller offers one.
    .task_support(mesh_core::subjects::task::TaskSupport::Optional)
}

async fn run(decide: Arc<Decide>, args: Apply, call: Call) -> ToolResult {
    match apply(decide, args, call).await {
        Ok(r) => r,
        // A state refused is the request's fault: a relay answers it as invalid params.
        Err(e @ ApplyError::State(_)) => ToolResult::refused_state(&e),
        Err(e) => ToolResult::error(e.to_string()),
    }
}

/// Why an apply stopped, each case in words that say what to do; the tool answers with it
/// as its error (nothing is written where it says so).
#[derive(Debug, thiserror::Error)]
pub enum ApplyError {
    /// The request cannot be taken as it came: a run written elsewhere, an answer for a
    /// group this apply did not ask, a state that does not fit.
    #[error("{0}")]
    Refused(String),
    #[error(transparent)]
    Path(#[from] mesh_avu::path::PathError),
    #[error(transparent)]
    State(#[from] StateError),
    #[error(transparent)]
    Feedback(#[from] FeedbackError),
    #[error(transparent)]
    Sidecar(#[from] crate::store::DbError),
    #[error(transparent)]
    Blocking(#[from] mesh_core::runtime::BlockingError),
    /// avu was not reached, or refused the write: nothing was written.
    #[error("{0}")]
    Avu(String),
    /// avu wrote the AVUs; the sidecar could not record it. The next apply writes them
    /// again, which avu keeps once.
    #[error(
        "the AVUs are written to avu, but decide could not record it ({0}): apply the run again to record them (avu keeps each AVU once)"
    )]
    Unrecorded(#[source] crate::store::DbError),
    #[error(transparent)]
    Lake(#[from] LakeError),
}

/// Why a batch of written links was not mirrored into the lake now (its links stay to be
/// mirrored at the next apply). Cloned: one failure to open the lake is every batch's.
#[derive(Debug, Clone, thiserror::Error)]
pub enum MirrorError {
    #[error("{0}")]
    Lake(Arc<LakeError>),
    #[error("cannot take the lake's lock: {0}")]
    Lock(Arc<crate::store::DbError>),
    #[error("another instance of decide was mirroring for all the time this one could wait")]
    Busy,
    #[error("cannot read the links to mirror: {0}")]
    Sidecar(Arc<crate::store::DbError>),
    #[error("the lake's lock was lost with the database connection; mirrored later")]
    LockLost,
    #[error("the lake took no events and holds none of them")]
    NothingHeld,
}

fn avu_json(p: &Pending) -> Value {
    json!({"attribute": p.attribute, "value": p.value, "unit": p.unit})
}

/// A candidate group left open.
#[derive(Debug, Clone)]
struct Open {
    group_id: String,
    column: String,
    /// Declined in this apply.
    declined: bool,
    /// Declined in an earlier call (and not in this apply).
    declined_before: bool,
}

/// What a real apply of a run writes, and what it leaves.
struct Plan {
    /// Accepted links not written yet.
    pending: Vec<Pending>,
    /// Links written before.
    already: i64,
    /// Candidate groups still open.
    open: Vec<Open>,
}

/// The answers an apply was given over its round trips. A real apply records each as it
/// comes; a dry run keeps them in its requestState only, and applies them to a transaction
/// it rolls back.
#[derive(Debug, Default, Clone, PartialEq, Serialize, Deserialize)]
struct Answers {
    /// (group, candidate's decision id), in a dry run.
    #[serde(default)]
    picked: Vec<(String, String)>,
    /// Groups declined.
    #[serde(default)]
    declined: Vec<String>,
}

impl Answers {
    fn answered(&self, group: &str) -> bool {
        self.declined.iter().any(|g| g == group) || self.picked.iter().any(|(g, _)| g == group)
    }

    fn count(&self) -> usize {
        self.picked.len() + self.declined.len()
    }
}

/// What the first step of an apply comes to: a question for the person, or the answers
/// given, to go on with.
enum Step {
    Ask(ToolResult),
    Go(Answers),
}

// Sidecar and lake work runs off the runtime's threads (`off_runtime`), the avu call on it.
async fn apply(decide: Arc<Decide>, args: Apply, call: Call) -> Result<ToolResult, ApplyError> {
    let run_id = args.run_id;
    let path = normalise(&args.path)?;
    let who = call.caller.id();
    let dry_run = args.dry_run;

    let step = {
        let (d, call, run_id, who) = (decide.clone(), call.clone(), run_id.clone(), who.clone());
        let proposed = args.accept == Accept::Proposed;
        off_runtime(TOOL, move || {
            answer_and_ask(&d, &call, &run_id, proposed, dry_run, who.as_deref())
        })
        .await??
    };
    let answers = match step {
        Step::Ask(question) => return Ok(question),
        Step::Go(answers) => answers,
    };

    let plan = {
        let (d, run_id, path, answers, who) = (
            decide.clone(),
            run_id.clone(),
            path.clone(),
            answers.clone(),
            who.clone(),
        );
        off_runtime(TOOL, move || {
            let mut sidecar = locked(&d.sidecar);
            if dry_run {
                plan_with(&mut sidecar, &run_id, &path, &answers, who.as_deref())
            } else {
                plan(&sidecar.db, &run_id, &path, &answers)
            }
        })
        .await??
    };
    if dry_run {
        return Ok(dry_run_result(&run_id, &path, &plan, &answers));
    }
    if !plan.pending.is_empty() {
        write_through_avu(&decide, &call, &run_id, &path, &plan.pending).await?;
        let ids: Vec<String> = plan.pending.iter().map(|p| p.link_id.clone()).collect();
        let (d, path, who) = (decide.clone(), path.clone(), who.unwrap_or_default());
        off_runtime(TOOL, move || {
            mark_written(&mut locked(&d.sidecar), &ids, &path, &who)
        })
        .await?
        .map_err(ApplyError::Unrecorded)?;
    }
    // The AVUs are written: the lake is waited for only as long as the caller still waits
    // for the answer that says so.
    let wait = match call.deadline {
        Some(d) => d
            .duration_since(SystemTime::now())
            .unwrap_or_default()
            .saturating_sub(ANSWER_MARGIN)
            .min(LAKE_WAIT),
        None => APPLY_LAKE_WAIT,
    };
    let (snapshot, mirror) = mirror(&decide, &run_id, &path, wait).await?;
    Ok(applied_result(&run_id, &path, &plan, snapshot, &mirror))
}

/// At most a few columns by name, then how many more.
fn columns(open: &[&Open]) -> String {
    const NAMED: usize = 8;
    let mut names: Vec<String> = open
        .iter()
        .take(NAMED)
        .map(|o| feedback::one_line(&o.column, 40))
        .collect();
    if open.len() > NAMED {
        names.push(format!("and {} more", open.len() - NAMED));
    }
    names.join(", ")
}

/// The AVUs a plan writes, how many were written before, and the groups it leaves open:
/// those declined in this apply, and the others.
fn plan_text(text: &mut String, plan: &Plan) {
    for p in &plan.pending {
        text.push_str(&format!("\n  + {} = {} [{}]", p.attribute, p.value, p.unit));
    }
    if plan.already > 0 {
        text.push_str(&format!(
            "\n{} written before",
            count(plan.already as usize, "AVU", "AVUs")
        ));
    }
}

/// The groups a plan leaves open (`would` in a dry run): those declined in this apply,
/// those declined before, and those nobody answered.
fn open_text(text: &mut String, plan: &Plan, dry_run: bool) {
    let now: Vec<&Open> = plan.open.iter().filter(|o| o.declined).collect();
    let before: Vec<&Open> = plan.open.iter().filter(|o| o.declined_before).collect();
    let never: Vec<&Open> = plan
        .open
        .iter()
        .filter(|o| !o.declined && !o.declined_before)
        .collect();
    let groups = |n: usize| count(n, "candidate group", "candidate groups");
    let stay = |n: usize| match (dry_run, n) {
        (true, _) => "would stay",
        (false, 1) => "stays",
        (false, _) => "stay",
    };
    let them = |n: usize| if n == 1 { "it" } else { "each" };
    if !now.is_empty() {
        text.push_str(&format!(
            "\n{} you declined {} open and unwritten: {}",
            groups(now.len()),
            stay(now.len()),
            columns(&now)
        ));
    }
    if !before.is_empty() {
        text.push_str(&format!(
            "\n{} declined before {} open and unwritten: {}\n  accept=proposed asks about {} again",
            groups(before.len()),
            stay(before.len()),
            columns(&before),
            them(before.len())
        ));
    }
    if !never.is_empty() {
        text.push_str(&format!(
            "\n{} open, not answered yet: {}\n  accept=proposed asks about {}, or answer with decide_feedback",
            count(never.len(), "candidate group is", "candidate groups are"),
            columns(&never),
            them(never.len())
        ));
    }
}

fn open_json(plan: &Plan) -> Vec<Value> {
    plan.open
        .iter()
        .map(|o| {
            json!({"group_id": o.group_id, "column": o.column, "declined": o.declined,
                   "declined_before": o.declined_before})
        })
        .collect()
}

/// What a dry run reports: what a real apply would write, with the answers given in it,
/// and that nothing was kept.
fn dry_run_result(run_id: &str, path: &str, plan: &Plan, answers: &Answers) -> ToolResult {
    let (pending, already) = (&plan.pending, plan.already);
    let mut text = if pending.is_empty() {
        format!("dry run, nothing changed: dry_run=false would write no AVU to {path}")
    } else {
        format!(
            "dry run, nothing changed: dry_run=false would write {} to {path}",
            count(pending.len(), "AVU", "AVUs")
        )
    };
    plan_text(&mut text, plan);
    open_text(&mut text, plan, true);
    if answers.count() > 0 {
        text.push_str(&format!(
            "\nyour {} in this dry run {} not kept (a dry run changes nothing stored):\n  accept=proposed dry_run=false asks about every open group again, then writes",
            count(answers.count(), "answer", "answers"),
            if answers.count() == 1 { "was" } else { "were" }
        ));
    }
    ToolResult {
        structured_content: Some(json!({
            "run_id": run_id, "path": path, "dry_run": true,
            "written": pending.iter().map(avu_json).collect::<Vec<_>>(),
            "already_written": already, "open_groups": plan.open.len(),
            "open": open_json(plan),
        })),
        ..ToolResult::text(text)
    }
}

/// Writes `pending` to `path` through avu, on behalf of the caller.
async fn write_through_avu(
    decide: &Decide,
    call: &Call,
    run_id: &str,
    path: &str,
    pending: &[Pending],
) -> Result<(), ApplyError> {
    let Some(ticket) = &call.ticket else {
        return Err(ApplyError::Refused(
            "decide_apply was called without an identity: a write goes to avu on behalf of the person calling, with the ticket of their call"
                .into(),
        ));
    };
    let bus = decide.bus.as_ref().ok_or_else(|| {
        ApplyError::Refused("decide has no bus connection to reach the avu module".into())
    })?;
    let args = json!({
        "path": path,
        "avus": pending.iter().map(avu_json).collect::<Vec<_>>(),
        "source": format!("decide run {run_id}"),
    });
    let tool = FullName::parse("avu_add").expect("a valid name");
    let result = bus
        .for_person(ticket)
        .call(&tool, &args, AVU_DEADLINE)
        .await
        .map_err(|e| ApplyError::Avu(format!("nothing written: {e}")))?;
    if result.is_error {
        return Err(ApplyError::Avu(format!(
            "avu refused the write: {}",
            result.text_content()
        )));
    }
    Ok(())
}

/// Mirrors this write and anything an earlier failure left behind: the snapshot that holds
/// the run's links on `path`, and what became of the mirror.
async fn mirror(
    decide: &Arc<Decide>,
    run_id: &str,
    path: &str,
    wait: Duration,
) -> Result<(Option<i64>, String), ApplyError> {
    let d = decide.clone();
    let mirrored = off_runtime(TOOL, move || {
        // Nothing to mirror: the lake (another apply's, perhaps waiting) is not waited for.
        if matches!(links::any_to_mirror(&locked(&d.sidecar).db), Ok(false)) {
            return Ok(Vec::new());
        }
        let lake = locked(&d.lake);
        mirror_pending_reporting(&d.sidecar, &lake, wait, &mut |_, _| {})
    })
    .await?;
    let mirrored = match mirrored {
        Ok(m) => m,
        Err(e) => {
            return Ok((
                None,
                format!(
                    "not mirrored now ({e}); the links are written and wait to be mirrored: `mesh decide lake recover` or the next apply mirrors them"
                ),
            ));
        }
    };
    let here = mirrored
        .iter()
        .find(|m| m.run_id == run_id && m.path == path);
    Ok(match here {
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
    })
}

/// What a real apply reports.
fn applied_result(
    run_id: &str,
    path: &str,
    plan: &Plan,
    snapshot: Option<i64>,
    mirror: &str,
) -> ToolResult {
    let (pending, already) = (&plan.pending, plan.already);
    let mut text = if pending.is_empty() {
        format!("no AVU written to {path}: nothing accepted is left unwritten")
    } else {
        format!("{} written to {path}", count(pending.len(), "AVU", "AVUs"))
    };
    plan_text(&mut text, plan);
    text.push_str(&match snapshot {
        Some(s) => format!("\nlake snapshot {s}"),
        None => format!("\nlake: {mirror}"),
    });
    open_text(&mut text, plan, false);
    ToolResult {
        structured_content: Some(json!({
            "run_id": run_id, "path": path, "dry_run": false,
            "written": pending.iter().map(avu_json).collect::<Vec<_>>(),
            "already_written": already, "snapshot": snapshot, "mirror": mirror,
            "open_groups": plan.open.len(), "open": open_json(plan),
        })),
        ..ToolResult::text(text)
    }
}

/// Takes the answer a repeated call carries (after checking its state), then, for
/// `accept="proposed"`, asks about the next open group not answered in this apply. A real
/// apply records the answer now; a dry run only checks it and carries it on in its state.
fn answer_and_ask(
    d: &Decide,
    call: &Call,
    run_id: &str,
    proposed: bool,
    dry_run: bool,
    who: Option<&str>,
) -> Result<Step, ApplyError> {
    let sidecar = locked(&d.sidecar);
    feedback::check_owner(&sidecar.db, run_id, who)?;
    let mut answers = Answers::default();
    if let Some(c) = &call.continuation {
        let state = c.request_state.as_deref().ok_or_else(|| ApplyError::Refused("the answer came without its requestState: call decide_apply again without inputResponses".into()))?;
        let opened = d.key.open(state, TOOL, who)?;
        let ids = &opened.ids;
        let (Some(state_run), Some(group)) = (ids["run"].as_str(), ids["group"].as_str()) else {
            return Err(ApplyError::Refused(
                "requestState names no run and group: call decide_apply again without it".into(),
            ));
        };
        if state_run != run_id {
            return Err(ApplyError::Refused(format!(
                "requestState is from another run ({state_run}), not {run_id}: call decide_apply again without it"
            )));
        }
        // A dry run's answers are never recorded, a real run's always: an answer given in
        // one is not taken by the other.
        if ids["dry_run"].as_bool() != Some(dry_run) {
            let (was, is) = if dry_run {
                ("a real apply", "a dry run")
            } else {
                ("a dry run", "a real apply (dry_run=false)")
            };
            return Err(ApplyError::Refused(format!(
                "requestState is from {was}, and this call is {is}: call decide_apply again without it"
            )));
        }
        answers = serde_json::from_value(ids["answers"].clone()).unwrap_or_default();
        let key = format!("{TERM_CHOICE}{group}");
        let responses = c.input_responses.clone().unwrap_or_default();
        let Some(answer) = responses.get(&key) else {
            let given: Vec<&String> = responses.keys().collect();
            return Err(ApplyError::Refused(format!(
                "the answer is not for the group asked: expected {key}, got {given:?}"
            )));
        };
        let action = match answer.get("action").and_then(Value::as_str) {
            Some("accept") => Some(
                answer
                    .pointer("/content/candidate")
                    .and_then(Value::as_str)
                    .ok_or_else(|| {
                        ApplyError::Refused(format!("the answer to {key} carries no candidate"))
                    })?,
            ),
            Some("decline") | Some("cancel") => None,
            _ => {
                return Err(ApplyError::Refused(format!(
                    "the answer to {key} has no valid action (accept, decline or cancel)"
                )));
            }
        };
        if dry_run {
            // Checked as a real apply would check it; nothing stored, its state not spent.
            let view = feedback::ensure_open(&sidecar.db, group)?;
            match action {
                Some(chosen) => {
                    let picked = view.candidate(chosen)?;
                    answers
                        .picked
                        .push((group.to_owned(), picked.decision_id.clone()));
                }
                None => answers.declined.push(group.to_owned()),
            }
        } else {
            let tx = sidecar.db.transaction()?;
            // Spent with the answer it carries, so a replay finds it used.
            if !spend_state(&tx, &opened.id, opened.expires_ms)? {
                return Err(ApplyError::State(StateError::Used));
            }
            match action {
                Some(chosen) => {
                    feedback::pick(&tx, group, chosen, who)?;
                }
                None => {
                    feedback::decline(&tx, group, who)?;
                    answers.declined.push(group.to_owned());
                }
            }
            tx.commit()?;
        }
    }
    if !proposed {
        return Ok(Step::Go(answers));
    }
    let open = groups::open_of_run(&sidecar.db, run_id)?;
    let remaining: Vec<&String> = open.iter().filter(|g| !answers.answered(g)).collect();
    let Some(next) = remaining.first() else {
        return Ok(Step::Go(answers));
    };
    let view = feedback::group(&sidecar.db, next)?;
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
    let left = count(remaining.len(), "open group", "open groups");
    let message = format!(
        "Which {} term describes column {}? ({}{left} left; decline to leave it unwritten: an empty answer at a terminal, `--decline` with mesh call, or your client's decline)",
        view.ontology,
        view.column,
        if dry_run {
            "dry run: this answer is not kept; "
        } else {
            ""
        }
    );
    let mut requests = Map::new();
    requests.insert(
        format!("{TERM_CHOICE}{}", view.group_id),
        ToolResult::elicitation(message, schema),
    );
    let state = d.key.seal(
        TOOL,
        who,
        json!({"run": run_id, "group": view.group_id, "dry_run": dry_run, "answers": answers}),
    );
    Ok(Step::Ask(ToolResult::input_required(requests, state)))
}

/// What a dry run with `answers` would write: its picks applied in a transaction that is
/// rolled back, the plan read inside it.
fn plan_with(
    sidecar: &mut Sidecar,
    run_id: &str,
    path: &str,
    answers: &Answers,
    who: Option<&str>,
) -> Result<Plan, ApplyError> {
    let tx = sidecar.db.transaction()?;
    for (group, chosen) in &answers.picked {
        feedback::pick(&tx, group, chosen, who)?;
    }
    let plan = plan(&tx, run_id, path, answers);
    tx.rollback()?;
    plan
}

/// What a real apply writes (accepted links not yet written), how many were written before,
/// and which groups are open. A run goes to one path.
fn plan(db: &Db, run_id: &str, path: &str, answers: &Answers) -> Result<Plan, ApplyError> {
    if let Some(other) = links::written_elsewhere(db, run_id, path)? {
        return Err(ApplyError::Refused(format!(
            "run {run_id} was written to {other}; a run is applied to one path (annotate the card again for another)"
        )));
    }
    let pending = links::accepted(db, run_id)?;
    let already = links::written(db, run_id)?;
    let open = open_of(db, run_id, answers)?;
    Ok(Plan {
        pending,
        already,
        open,
    })
}

/// A run's open groups with their columns, those declined in this apply marked.
fn open_of(db: &Db, run_id: &str, answers: &Answers) -> DbResult<Vec<Open>> {
    Ok(groups::open_with_columns(db, run_id)?
        .into_iter()
        .map(|g| {
            let declined = answers.declined.contains(&g.group_id);
            Open {
                declined,
                declined_before: !declined && g.declined,
                column: g.column,
                group_id: g.group_id,
            }
        })
        .collect())
}

fn mark_written(sidecar: &mut Sidecar, ids: &[String], path: &str, who: &str) -> DbResult<()> {
    let tx = sidecar.db.transaction()?;
    for id in ids {
        links::mark_written(&tx, id, path, who)?;
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
/// The caller holds the lake's lock in this process; a shared lake is held across instances
/// here (`MirrorLock`). Waits at most [`LAKE_WAIT`] for another holding the lake.
pub fn mirror_pending(
    sidecar: &std::sync::Mutex<Sidecar>,
    lake_at: &LakeAt,
) -> Result<Vec<Mirrored>, MirrorError> {
    mirror_pending_reporting(sidecar, lake_at, LAKE_WAIT, &mut |_, _| {})
}

/// [`mirror_pending`], waiting at most `wait` for another process or instance holding the
/// lake, and telling `batch_done` after each (run, path): how many are done, of how many.
/// An error when nothing could be tried (the lake held all that time, the links unread);
/// a batch that failed is said in its [`Mirrored`].
pub fn mirror_pending_reporting(
    sidecar: &std::sync::Mutex<Sidecar>,
    lake_at: &LakeAt,
    wait: Duration,
    batch_done: &mut dyn FnMut(usize, usize),
) -> Result<Vec<Mirrored>, MirrorError> {
    // Nothing to mirror (every apply asks): no session opened, no lock taken.
    let pending = links::any_to_mirror(&locked(sidecar).db);
    if matches!(pending, Ok(false)) {
        return Ok(Vec::new());
    }
    // Another instance mirroring the same links: wait for it, then find them done.
    // The sidecar is held only to read how to connect; the connecting is done after.
    let opener = locked(sidecar).db.opener();
    let held = MirrorLock::take(opener, wait).map_err(|e| {
        if Db::is_lock_timeout(&e) {
            MirrorError::Busy
        } else {
            MirrorError::Lock(Arc::new(e))
        }
    })?;
    // Another process of decide holding a local lake (`mesh decide lake recover`): waited for
    // in the kernel; the links read after, so that what the other recorded meanwhile is not
    // mirrored again.
    let mut lake = Lake::open_waiting(lake_at, wait).map_err(|e| MirrorError::Lake(Arc::new(e)));
    let rows: Vec<(String, String, Event)> = {
        let sidecar = locked(sidecar);
        let read = || -> DbResult<Vec<(String, String, Event)>> {
            Ok(links::to_mirror(&sidecar.db)?
                .into_iter()
                .map(|l| {
                    (
                        l.run_id.clone(),
                        l.path.clone(),
                        Event {
                            link_id: l.link_id,
                            path: l.path,
                            attribute: l.attribute,
                            value: l.value,
                            unit: l.unit,
                            op: "add".into(),
                            actor: l.written_by,
                            source: "decide".into(),
                            run_id: l.run_id,
                            at_ms: l.at_ms,
                        },
                    )
                })
                .collect())
        };
        read().map_err(|e| MirrorError::Sidecar(Arc::new(e)))?
    };
    if rows.is_empty() {
        return Ok(Vec::new());
    }
    let mut batches: BTreeMap<(String, String), Vec<Event>> = BTreeMap::new();
    for (run, path, event) in rows {
        batches.entry((run, path)).or_default().push(event);
    }
    let mut done = Vec::new();
    let of = batches.len();
    for (n, ((run_id, path), events)) in batches.into_iter().enumerate() {
        batch_done(n, of);
        let outcome = match &mut lake {
            // The lock went with a lost connection: another instance may be mirroring.
            Ok(_) if !held.still_held() => Err(MirrorError::LockLost),
            Ok(lake) => mirror_one(lake, &events),
            Err(e) => Err(e.clone()),
        };
        let ids: Vec<&str> = events.iter().map(|e| e.link_id.as_str()).collect();
        let recorded = {
            let mut sidecar = locked(sidecar);
            record_mirror(&mut sidecar, &ids, &outcome)
        };
        let error = match (&outcome, recorded) {
            (Err(e), _) => Some(e.to_string()),
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
    batch_done(of, of);
    Ok(done)
}

/// The snapshot holding a batch, and per link the snapshot to record.
type Batch = (i64, Vec<(String, i64)>);

/// One batch: new events in one snapshot; links the lake held already keep theirs.
fn mirror_one(lake: &mut Lake, events: &[Event]) -> Result<Batch, MirrorError> {
    let appended = lake
        .append(events)
        .map_err(|e| MirrorError::Lake(Arc::new(e)))?;
    let snapshot = appended
        .made
        .or_else(|| appended.snapshots.values().copied().max())
        .ok_or(MirrorError::NothingHeld)?;
    Ok((snapshot, appended.snapshots.into_iter().collect()))
}

fn record_mirror(
    sidecar: &mut Sidecar,
    ids: &[&str],
    outcome: &Result<Batch, MirrorError>,
) -> DbResult<()> {
    let tx = sidecar.db.transaction()?;
    match outcome {
        Ok((_, per_link)) => {
            for (id, snapshot) in per_link {
                links::mirrored(&tx, id, *snapshot)?;
            }
        }
        Err(_) => {
            for id in ids {
                links::mirror_failed(&tx, id)?;
            }
        }
    }
    tx.commit()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tools::tests::accepts;

    #[test]
    fn apply_takes_a_run_a_path_and_how() {
        let path = "/mesh/home/ann/x";
        accepts::<Apply>(
            &[
                json!({"run_id": "r", "path": path}),
                json!({"run_id": "r", "path": path, "accept": "proposed", "dry_run": false}),
                json!({"run_id": "r", "path": path, "accept": "auto", "dry_run": true}),
            ],
            &[
                json!({"run_id": "r"}),
                json!({"path": path}),
                json!({"run_id": "", "path": path}),
                json!({"run_id": "r", "path": path, "accept": "all"}),
                json!({"run_id": "r", "path": path, "accept": null}),
                json!({"run_id": "r", "path": path, "dry_run": "no"}),
                json!({"run_id": "r", "path": path, "colour": "red"}),
            ],
        );
        // Left out, an apply only reports, and writes what is accepted already.
        let args: Apply = serde_json::from_value(json!({"run_id": "r", "path": path})).unwrap();
        assert!(args.dry_run);
        assert_eq!(args.accept, Accept::Auto);
    }
}
