//! Tasks (MCP's tasks extension), kept by the catalogue: every task's state in the bucket
//! `mesh_tasks`, in its own account's JetStream, so a task outlives the relay that started
//! it and any relay or process its owner runs can read it. The verbs check who asks as
//! nats-server stamped them: a task is created for, read, answered and cancelled by its owner
//! only, and written by the module it names only (`subjects::task`).
//!
//! A task's key holds its owner's part (`t.<owner part>.<id>`), so an id another person sends
//! names no task of theirs; one owner keeps at most [`MAX_PER_OWNER`] at once.

use std::time::Duration;

use async_nats::jetstream::kv;
use async_nats::{Client, Message, Subscriber};
use futures_util::TryStreamExt;
use serde_json::{Map, json};

use crate::tickets::in_turn;
use mesh_core::actor::{Caller, IdentityError, Layout, Route, identify};
use mesh_core::runtime::open_bucket_with;
use mesh_core::runtime::turns::{PER_CALLER, PER_MODULE};
use mesh_core::subjects::task::{
    self, Asked, BUCKET, CANCEL_SUBJECT, CREATE_SUBJECT, Create, GET_SUBJECT, MAX_PER_OWNER,
    MAX_RECORD, MAX_REQUEST, MIN_TTL_MS, Record, Reply, Status, TTL_MS, UPDATE_SUBJECT, Update,
    WRITE_SUBJECT, Write, WriteReply,
};
use mesh_core::subjects::{FullName, catalog};

/// Why the task bucket or verbs cannot be had.
#[derive(Debug, thiserror::Error)]
pub enum TasksError {
    #[error("cannot open the task bucket {BUCKET}: {why}")]
    Bucket { why: String },
    #[error("cannot subscribe to {subject}: {why}")]
    Subscribe { subject: &'static str, why: String },
}

/// How often a write tries again when another changed the task between its read and write.
const RACES: usize = 8;

/// Opens (or makes) the task bucket, with as many copies as the catalogue's own.
pub(crate) async fn open(client: Client) -> Result<kv::Store, TasksError> {
    let config = kv::Config {
        bucket: BUCKET.to_owned(),
        description: "mesh catalogue: tasks, their state and results".to_owned(),
        history: 1,
        // A task is read as gone after its ttl; what is left goes an hour after its last
        // write.
        max_age: Duration::from_millis(TTL_MS),
        max_bytes: 1024 * 1024 * 1024,
        // Records stay small (a large result is a claim): one person's most cannot fill it.
        max_value_size: MAX_RECORD as i32,
        ..Default::default()
    };
    open_bucket_with(client, BUCKET, config)
        .await
        .map_err(|e| TasksError::Bucket { why: e.to_string() })
}

/// The task verbs' subscriptions.
pub(crate) struct Verbs {
    create: Subscriber,
    get: Subscriber,
    update: Subscriber,
    cancel: Subscriber,
    write: Subscriber,
}

/// Subscribes the task verbs (before the catalogue says it serves).
pub(crate) async fn subscribe(client: &Client) -> Result<Verbs, TasksError> {
    let sub = |subject: &'static str| async move {
        client
            .queue_subscribe(subject, catalog::MODULE.to_owned())
            .await
            .map_err(|e| TasksError::Subscribe {
                subject,
                why: e.to_string(),
            })
    };
    Ok(Verbs {
        create: sub(CREATE_SUBJECT).await?,
        get: sub(GET_SUBJECT).await?,
        update: sub(UPDATE_SUBJECT).await?,
        cancel: sub(CANCEL_SUBJECT).await?,
        write: sub(WRITE_SUBJECT).await?,
    })
}

/// Who asks, as nats-server stamped them. A request with no stamp at all reached the
/// catalogue without crossing an import: on a bus without accounts anyone's (nobody is
/// named, and every task is everybody's), in the accounts layout only the catalogue's own
/// account's. A stamp that is forged, doubled or hidden is refused.
fn asker(msg: &Message) -> Result<Caller, String> {
    match identify(
        msg.headers.as_ref(),
        msg.description.as_deref(),
        Layout::Accounts,
        Route::Direct,
        &msg.subject,
    ) {
        Ok(c) => Ok(c),
        Err(IdentityError::Unstamped) => Ok(Caller::Unknown),
        Err(e) => Err(e.to_string()),
    }
}

/// The tasks' bucket and what answers on it.
struct Tasks {
    store: kv::Store,
    /// Whether the instance that took a task is gone (the catalogue's view).
    liveness: crate::Liveness,
}

fn refuse(why: impl Into<String>) -> Reply {
    Reply {
        error: Some(why.into()),
        ..Reply::default()
    }
}

/// A verb's answer: the task as its owner reads it, or why not.
fn answered(record: Result<Record, String>) -> Reply {
    match record {
        Ok(record) => Reply {
            task: Some(shown(record)),
            ..Reply::default()
        },
        Err(why) => refuse(why),
    }
}

fn unknown(id: &str) -> Reply {
    Reply {
        error: Some(format!(
            "no task {id} of yours: none was made, it expired, or it is another's"
        )),
        unknown: true,
        ..Reply::default()
    }
}

/// A request of a person's, read: at most [`MAX_REQUEST`] bytes.
fn read<T: serde::de::DeserializeOwned>(msg: &Message, what: &str) -> Result<T, String> {
    if msg.payload.len() > MAX_REQUEST {
        return Err(format!(
            "a {what} request is at most {MAX_REQUEST} bytes, not {}",
            msg.payload.len()
        ));
    }
    read_any(msg, what)
}

/// A module's write, read whatever its size: a task's result comes whole when it fits a
/// message on the bus (the bus bounds it), else as a claim.
fn read_any<T: serde::de::DeserializeOwned>(msg: &Message, what: &str) -> Result<T, String> {
    serde_json::from_slice(&msg.payload).map_err(|e| format!("not a {what} request ({e})"))
}

impl Tasks {
    /// Task `id` and its revision, if it is there and not expired.
    async fn entry(&self, id: &str) -> Result<Option<(Record, u64)>, String> {
        let Some(key) = task::key_of(id) else {
            return Ok(None);
        };
        let entry = self
            .store
            .entry(key)
            .await
            .map_err(|e| format!("the catalogue cannot read its task bucket: {e}"))?;
        let Some(entry) = entry.filter(|e| e.operation == kv::Operation::Put) else {
            return Ok(None);
        };
        let Ok(record) = serde_json::from_slice::<Record>(&entry.value) else {
            return Ok(None);
        };
        if record.expired(catalog::now_ms()) {
            return Ok(None);
        }
        Ok(Some((record, entry.revision)))
    }

    /// Task `id` if `caller` owns it.
    async fn owned(&self, id: &str, caller: &Caller) -> Result<Option<(Record, u64)>, String> {
        let owner = caller.id().unwrap_or_default();
        if task::key_of(id).is_none() || !id.starts_with(&task::owner_part(&owner)) {
            return Ok(None);
        }
        Ok(self.entry(id).await?.filter(|(r, _)| r.owner == owner))
    }

    /// Changes task `id` with `change` (which may say why not, or that nothing changed:
    /// then nothing is written) and writes it, again on a race.
    async fn change<F>(&self, id: &str, mut change: F) -> Result<Record, Unchanged>
    where
        F: FnMut(&mut Record) -> Result<bool, String>,
    {
        let key = task::key_of(id).ok_or_else(|| format!("{id} is not a task's id"))?;
        for _ in 0..RACES {
            let Some((mut record, revision)) = self.entry(id).await.map_err(Unchanged::again)?
            else {
                return Err(format!("no task {id}: it expired, or none was made").into());
            };
            if !change(&mut record)? {
                return Ok(record);
            }
            record.updated_ms = catalog::now_ms();
            let bytes = serde_json::to_vec(&record).expect("a task serialises");
            match self.store.update(&key, bytes.into(), revision).await {
                Ok(_) => return Ok(record),
                Err(e) if e.kind() == kv::UpdateErrorKind::WrongLastRevision => continue,
                Err(e) => {
                    return Err(Unchanged::again(format!(
                        "the catalogue cannot write task {id}: {e}"
                    )));
                }
            }
        }
        Err(Unchanged::again(format!(
            "task {id} changed {RACES} times while it was written; try again"
        )))
    }

    /// How many tasks `owner` has kept now (up to the bound).
    async fn kept_by(&self, owner: &str) -> Result<usize, String> {
        let filter = format!("$KV.{BUCKET}.t.{}.>", task::owner_part(owner));
        let mut info = self
            .store
            .stream
            .info_with_subjects(filter)
            .await
            .map_err(|e| format!("the catalogue cannot count tasks: {e}"))?;
        let mut kept = 0;
        while let Some((_, n)) = info
            .try_next()
            .await
            .map_err(|e| format!("the catalogue cannot count tasks: {e}"))?
        {
            kept += n;
            if kept >= MAX_PER_OWNER {
                break;
            }
        }
        Ok(kept)
    }

    async fn create(&self, msg: &Message) -> Reply {
        let caller = match asker(msg) {
            Ok(c) => c,
            Err(why) => return refuse(why),
        };
        let asked: Create = match read(msg, "task create") {
            Ok(a) => a,
            Err(why) => return refuse(why),
        };
        let tool = match FullName::parse(&asked.tool) {
            Ok(t) => t,
            Err(e) => return refuse(format!("not a tool's full name ({e})")),
        };
        let owner = caller.id().unwrap_or_default();
        match self.kept_by(&owner).await {
            Ok(n) if n >= MAX_PER_OWNER => {
                return refuse(format!(
                    "you keep {MAX_PER_OWNER} tasks already, the most one caller may: each counts until an hour after it last changed; wait until some expire"
                ));
            }
            Ok(_) => {}
            Err(why) => return refuse(why),
        }
        let now = catalog::now_ms();
        let id = task::new_id(&owner);
        let record = Record {
            id: id.clone(),
            owner,
            module: tool.module().to_owned(),
            tool: tool.to_string(),
            status: Status::Working,
            created_ms: now,
            updated_ms: now,
            ttl_ms: asked.ttl_ms.unwrap_or(TTL_MS).clamp(MIN_TTL_MS, TTL_MS),
            status_message: None,
            progress: None,
            input_requests: None,
            input_responses: None,
            result: None,
            error: None,
            taken: false,
            instance: None,
        };
        let key = task::key_of(&id).expect("a new id has the shape of one");
        let bytes = serde_json::to_vec(&record).expect("a task serialises");
        // Written before it is answered: a `get` right after finds it.
        match self.store.create(&key, bytes.into()).await {
            Ok(_) => Reply {
                task: Some(shown(record)),
                ..Reply::default()
            },
            Err(e) => refuse(format!("the catalogue cannot keep the task: {e}")),
        }
    }

    async fn get(&self, msg: &Message) -> Reply {
        let (caller, asked) = match asker(msg).and_then(|c| Ok((c, read::<Asked>(msg, "task")?))) {
            Ok(a) => a,
            Err(why) => return refuse(why),
        };
        match self.owned(&asked.id, &caller).await {
            Ok(Some((record, _))) if self.orphaned(&record) => {
                answered(self.fail_orphaned(&record).await.map_err(|u| u.why))
            }
            Ok(Some((record, _))) => answered(Ok(record)),
            Ok(None) => unknown(&asked.id),
            Err(why) => refuse(why),
        }
    }

    /// Whether `record` is a task still working whose instance the catalogue takes for gone
    /// (it crashed, or was killed: it never wrote the task's end).
    fn orphaned(&self, record: &Record) -> bool {
        !record.status.is_terminal()
            && record.taken
            && record.instance.as_deref().is_some_and(|i| {
                self.liveness
                    .gone(&record.module, i, record.updated_ms, catalog::now_ms())
            })
    }

    /// Writes an orphaned task failed, saying why; one that changed meanwhile is left as it is.
    async fn fail_orphaned(&self, seen: &Record) -> Result<Record, Unchanged> {
        let instance = seen.instance.clone();
        self.change(&seen.id, |r| {
            if r.status.is_terminal() || r.instance != instance {
                return Ok(false);
            }
            r.status = Status::Failed;
            r.input_requests = None;
            r.error = Some(json!({
                "code": -32603,
                "message": format!(
                    "the instance of module {} running the task stopped answering the catalogue (it crashed or was killed); call the tool again",
                    r.module
                ),
            }));
            Ok(true)
        })
        .await
    }

    async fn cancel(&self, msg: &Message) -> Reply {
        let (caller, asked) = match asker(msg).and_then(|c| Ok((c, read::<Asked>(msg, "task")?))) {
            Ok(a) => a,
            Err(why) => return refuse(why),
        };
        match self.owned(&asked.id, &caller).await {
            Ok(Some(_)) => {}
            Ok(None) => return unknown(&asked.id),
            Err(why) => return refuse(why),
        }
        // Cancelled at once, as its owner sees it; the module learns it at its next write and
        // stops. A task already ended stays as it ended (cancelling it is no error).
        let mut unused = false;
        let changed = self
            .change(&asked.id, |r| {
                if r.status.is_terminal() {
                    return Ok(false);
                }
                unused = !r.taken;
                r.status = Status::Cancelled;
                r.status_message = Some("cancelled by its owner".into());
                r.input_requests = None;
                r.input_responses = None;
                Ok(true)
            })
            .await;
        // One never taken (its call was answered at once, the common case) is gone at once:
        // it would hold one of its owner's tasks for an hour. Written cancelled first, so a
        // take racing this one finds it cancelled; purged, not deleted, so that no marker
        // is left to count.
        if unused && changed.is_ok() {
            self.purge(&asked.id).await;
        }
        answered(changed.map_err(|u| u.why))
    }

    /// Removes task `id` and every trace of it from the bucket.
    async fn purge(&self, id: &str) {
        let Some(key) = task::key_of(id) else {
            return;
        };
        let subject = format!("$KV.{BUCKET}.{key}");
        if let Err(e) = self.store.stream.purge().filter(subject).await {
            tracing::warn!(task = %id, "an unused task was not purged: {e}");
        }
    }

    async fn update(&self, msg: &Message) -> Reply {
        let (caller, asked) =
            match asker(msg).and_then(|c| Ok((c, read::<Update>(msg, "task update")?))) {
                Ok(a) => a,
                Err(why) => return refuse(why),
            };
        match self.owned(&asked.id, &caller).await {
            Ok(Some(_)) => {}
            Ok(None) => return unknown(&asked.id),
            Err(why) => return refuse(why),
        }
        // Each answer to a question still open is kept and the question closed; answers to
        // none are ignored (SEP-2663). With every question answered the task works again, and
        // the module takes the answers at its next write.
        let changed = self
            .change(&asked.id, |r| {
                if r.status != Status::InputRequired {
                    return Ok(false);
                }
                let Some(open) = r.input_requests.as_mut() else {
                    return Ok(false);
                };
                let given = r.input_responses.get_or_insert_with(Map::new);
                let mut changed = false;
                for (key, answer) in &asked.input_responses {
                    if open.remove(key).is_some() {
                        given.insert(key.clone(), answer.clone());
                        changed = true;
                    }
                }
                if open.is_empty() {
                    r.input_requests = None;
                    r.status = Status::Working;
                    r.status_message = None;
                }
                Ok(changed)
            })
            .await;
        answered(changed.map_err(|u| u.why))
    }

    async fn write(&self, msg: &Message) -> WriteReply {
        let refused = |why: String| WriteReply {
            error: Some(why),
            ..WriteReply::default()
        };
        let caller = match asker(msg) {
            Ok(c) => c,
            Err(why) => return refused(why),
        };
        let asked: Write = match read_any(msg, "task write") {
            Ok(a) => a,
            Err(why) => return refused(why),
        };
        // Only the module the task names writes it (on a bus without accounts nobody is
        // named, and anyone may).
        let writer = match &caller {
            Caller::Module(m) => Some(m.clone()),
            Caller::Unknown => None,
            Caller::Person(_) => {
                return refused("only the module running a task writes it".into());
            }
        };
        let mut handed = None;
        let changed = self
            .change(&asked.id, |r| {
                if writer.as_ref().is_some_and(|w| *w != r.module) {
                    return Err(format!(
                        "task {} is module {}'s to write, not yours",
                        asked.id, r.module
                    ));
                }
                if asked.owner.as_ref().is_some_and(|o| *o != r.owner)
                    || asked.tool.as_ref().is_some_and(|t| *t != r.tool)
                {
                    return Err(format!(
                        "task {} was not made for this call: it is another caller's or tool's",
                        asked.id
                    ));
                }
                handed = None;
                // Nothing changes a task that ended (its owner cancelled it, say).
                if r.status.is_terminal() {
                    return Ok(false);
                }
                // The take: the runtime names the call's caller and tool, checked above.
                let take = asked.status == Some(Status::Working)
                    && asked.owner.is_some()
                    && asked.tool.is_some();
                if take && !r.taken {
                    r.taken = true;
                    r.instance = asked.instance.clone().filter(|i| task::valid_id(i));
                    return Ok(true);
                }
                // Only a task taken for its owner's call is the module's to write: a module
                // with its own credentials ends no task that no call of it was offered as.
                if !r.taken {
                    return Err(format!(
                        "task {} was not taken by a call of {}: it is not yours to write yet",
                        asked.id, r.tool
                    ));
                }
                let Some(status) = asked.status else {
                    // Every answer given: handed over at each look until the module says a
                    // status (it has them, and goes on), so that a reply lost on the way
                    // loses none.
                    if r.status == Status::Working {
                        handed.clone_from(&r.input_responses);
                    }
                    // How far it got, said while it works.
                    if r.status == Status::Working
                        && let Some(p) = &asked.progress
                        && r.progress.as_ref() != Some(p)
                    {
                        r.progress = Some(p.clone());
                        r.status_message = p.message.clone();
                        return Ok(true);
                    }
                    return Ok(false);
                };
                // A status: the answers handed over were had.
                let had = r.status == Status::Working && r.input_responses.take().is_some();
                // Taken again, or working on after its answers: the same, nothing more.
                if status == Status::Working
                    && r.status == Status::Working
                    && asked.status_message.is_none()
                {
                    return Ok(had);
                }
                r.status = status;
                r.status_message = asked.status_message.clone();
                match status {
                    Status::InputRequired => {
                        let Some(asks) = asked.input_requests.clone().filter(|a| !a.is_empty())
                        else {
                            return Err("a task that needs input says what it asks".into());
                        };
                        r.input_requests = Some(asks);
                        r.input_responses = None;
                    }
                    Status::Completed => {
                        let Some(result) = asked.result.clone() else {
                            return Err("a completed task carries its result".into());
                        };
                        r.result = Some(result);
                    }
                    Status::Failed => {
                        r.error = Some(asked.error.clone().unwrap_or_else(
                            || json!({"code": -32603, "message": "the task failed"}),
                        ));
                    }
                    Status::Working | Status::Cancelled => {}
                }
                Ok(true)
            })
            .await;
        match changed {
            Ok(record) => WriteReply {
                status: Some(record.status),
                input_responses: handed,
                ..WriteReply::default()
            },
            Err(u) => WriteReply {
                again: u.again,
                ..refused(u.why)
            },
        }
    }
}

/// Why a task was not changed, and whether asking again may change it (the bucket failed
/// or raced, not the asker).
struct Unchanged {
    why: String,
    again: bool,
}

impl Unchanged {
    fn again(why: String) -> Unchanged {
        Unchanged { why, again: true }
    }
}

impl From<String> for Unchanged {
    fn from(why: String) -> Unchanged {
        Unchanged { why, again: false }
    }
}

/// A task as its owner reads it: the answers given so far are the module's to take.
fn shown(mut record: Record) -> Record {
    record.input_responses = None;
    record
}

/// Answers the task verbs until the subscriptions end, each verb on a task of its own and in
/// turn by caller.
pub(crate) async fn serve(
    client: Client,
    verbs: Verbs,
    store: kv::Store,
    liveness: crate::Liveness,
) {
    let tasks = std::sync::Arc::new(Tasks { store, liveness });
    let Verbs {
        create,
        get,
        update,
        cancel,
        write,
    } = verbs;
    let mut running = Vec::new();
    macro_rules! verb {
        ($sub:expr, $what:literal, $per:expr, $method:ident) => {{
            let tasks = tasks.clone();
            running.push(in_turn(client.clone(), $what, $per, $sub, move |msg| {
                let tasks = tasks.clone();
                async move {
                    let body = serde_json::to_vec(&tasks.$method(&msg).await)
                        .expect("an answer serialises");
                    (msg, body)
                }
            }));
        }};
    }
    verb!(create, "the task verb create", PER_CALLER, create);
    verb!(get, "the task verb get", PER_CALLER, get);
    verb!(update, "the task verb update", PER_CALLER, update);
    verb!(cancel, "the task verb cancel", PER_CALLER, cancel);
    // Modules write once per poll of every task they run.
    verb!(write, "the task verb write", PER_MODULE, write);
    for t in running.iter_mut() {
        let _ = t.await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_owner_reads_no_answers_of_its_own_task() {
        let record = Record {
            id: "x".into(),
            owner: String::new(),
            module: "m".into(),
            tool: "m_t".into(),
            status: Status::Working,
            created_ms: 0,
            updated_ms: 0,
            ttl_ms: 1,
            status_message: None,
            progress: None,
            input_requests: None,
            input_responses: Some(Map::from_iter([("k".to_owned(), serde_json::Value::Null)])),
            result: None,
            error: None,
            taken: true,
            instance: None,
        };
        assert!(shown(record).input_responses.is_none());
    }
}
