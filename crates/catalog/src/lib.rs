//! `catalog`: lists every module that registered, running or not, and forgets one on request.
//!
//! Registrations live in a JetStream key-value bucket (`subjects::catalog`); each catalogue
//! instance keeps a view of it up to date by watching the bucket, so any number of them can
//! serve and a restart loses nothing. Besides its tools it answers the listing verb
//! (`mesh.catalog.listing`: every module with the tools it registered, written from the JSON
//! the modules sent) and says on `mesh.catalog.changed` when what a module serves changed.
//! It is also the mesh's ticket issuer (`tickets.rs`): a person's ticket lets the module they
//! call act for them during that call, and nothing else can make one. And it keeps tasks
//! (`tasks.rs`): calls that outlive their request, their state in a bucket of its own.

mod limits;
mod tasks;
mod tickets;
mod watched;

pub use tickets::{Issuer, IssuerError};

use std::collections::{BTreeMap, HashMap, HashSet};
use std::ops::Bound;
use std::sync::{Arc, RwLock, Weak};
use std::time::Duration;

use async_nats::jetstream::kv::{self, Operation};
use futures_util::StreamExt;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::json;
use tokio::sync::watch;

use mesh_core::actor::Caller;
use mesh_core::runtime::{
    BucketError, Call, Module, RegisterError, Registry, RegistryFuture, Tool, WithText, open_bucket,
};
use mesh_core::subjects;
use mesh_core::subjects::ListedTool;
use mesh_core::subjects::catalog::{
    self, Changed, InstanceRecord, ListingRequest, ModuleEntry, ModuleRecord, REFRESH_SECS,
    Registration, Unregistration,
};

/// How long a call waits for a catalogue that has just started to read the bucket.
const CATCH_UP: Duration = Duration::from_secs(5);

/// Instances one module may have registered at once: a module cannot fill the bucket.
pub const MAX_INSTANCES: usize = 256;
/// Tools one registration may list.
pub use catalog::MAX_TOOLS;

#[derive(Default)]
struct View {
    modules: BTreeMap<String, ModuleRecord>,
    /// Module → the digest of the tools it registered in full ([`subjects::tools_digest`]).
    digests: HashMap<String, String>,
    /// (module, instance id) → record.
    instances: BTreeMap<(String, String), InstanceRecord>,
    /// Instances removed while they still refreshed (a module forgotten, an instance
    /// unregistered by another of its module's) → when, and how long a registered one may go
    /// unseen: alive, they register again within that, so their tasks are not failed sooner.
    removed_fresh: HashMap<(String, String), (u64, u64)>,
}

/// The most instances [`View::removed_fresh`] keeps: past it, the oldest judgement holds
/// (absent is gone after [`ABSENT_GRACE_MS`]).
const REMOVED_FRESH_KEPT: usize = 4096;

impl View {
    fn apply(&mut self, key: &str, op: Operation, value: &[u8]) {
        let removed = !matches!(op, Operation::Put);
        if let Some(name) = key.strip_prefix("modules.") {
            if removed {
                self.modules.remove(name);
                self.digests.remove(name);
            } else if let Ok(r) = serde_json::from_slice::<ModuleRecord>(value) {
                match &r.specs {
                    Some(specs) => {
                        self.digests
                            .insert(name.to_owned(), subjects::tools_digest(specs));
                    }
                    None => {
                        self.digests.remove(name);
                    }
                }
                self.modules.insert(name.to_owned(), r);
            }
        } else if let Some(rest) = key.strip_prefix("instances.")
            && let Some((module, id)) = rest.split_once('.')
        {
            let k = (module.to_owned(), id.to_owned());
            if removed {
                if let Some(i) = self.instances.remove(&k) {
                    self.removed(k, &i, catalog::now_ms());
                }
            } else if let Ok(r) = serde_json::from_slice::<InstanceRecord>(value) {
                self.removed_fresh.remove(&k);
                self.instances.insert(k, r);
            }
        }
    }

    /// Notes `i` removed at `now_ms` if it still refreshed then; forgets those whose time to
    /// register again is past.
    fn removed(&mut self, k: (String, String), i: &InstanceRecord, now_ms: u64) {
        let fresh = i.fresh_for_ms();
        if now_ms.saturating_sub(i.last_seen_ms) > fresh {
            return;
        }
        if self.removed_fresh.len() >= REMOVED_FRESH_KEPT {
            self.removed_fresh
                .retain(|_, (at, fresh)| now_ms.saturating_sub(*at) <= *fresh);
        }
        if self.removed_fresh.len() < REMOVED_FRESH_KEPT {
            self.removed_fresh.insert(k, (now_ms, fresh));
        }
    }

    /// A module's instances that refreshed recently, and when any of them (or the record)
    /// was last written.
    fn liveness(&self, m: &ModuleRecord, now_ms: u64) -> (usize, u64) {
        self.instances
            .range((m.module.clone(), String::new())..)
            .take_while(|((module, _), _)| *module == m.module)
            .fold((0, m.last_seen_ms), |(live, seen), (_, i)| {
                let fresh = now_ms.saturating_sub(i.last_seen_ms) <= i.fresh_for_ms();
                (live + usize::from(fresh), seen.max(i.last_seen_ms))
            })
    }

    fn entries(&self, only: Option<&str>, now_ms: u64) -> Vec<ModuleEntry> {
        self.modules
            .values()
            .filter(|m| only.is_none_or(|o| o == m.module))
            .map(|m| {
                let (instances, last_seen_ms) = self.liveness(m, now_ms);
                ModuleEntry {
                    module: m.module.clone(),
                    version: m.version.clone(),
                    description: m.description.clone(),
                    tools: m.tools.clone(),
                    instances,
                    last_seen_ms,
                }
            })
            .collect()
    }

    /// One page of the listing verb's reply, at most `budget` bytes: the modules after
    /// `after`, each with the digest of its tools and the tools it registered, copied as the
    /// JSON it sent — unless the reader said it `known`s that digest. A module too large for
    /// a page of its own is listed without its tools (discovery then asks it).
    fn page(
        &self,
        after: Option<&str>,
        known: &HashSet<&str>,
        now_ms: u64,
        budget: usize,
    ) -> Vec<u8> {
        /// Room kept for the page's closing and its `next`.
        const TAIL: usize = PAGE_FRAME;
        let from = after.map_or(Bound::Unbounded, Bound::Excluded);
        let mut out = Vec::with_capacity(budget.min(1 << 20));
        out.extend_from_slice(PAGE_OPEN);
        let mut last: Option<&str> = None;
        let mut next = None;
        for m in self
            .modules
            .range::<str, _>((from, Bound::Unbounded))
            .map(|(_, m)| m)
        {
            let (instances, last_seen_ms) = self.liveness(m, now_ms);
            let digest = self.digests.get(&m.module).map(String::as_str);
            let mut entry = PageEntry {
                module: &m.module,
                version: &m.version,
                description: &m.description,
                tools: &m.tools,
                instances,
                last_seen_ms,
                digest,
                specs: m
                    .specs
                    .as_deref()
                    .filter(|_| !digest.is_some_and(|d| known.contains(d))),
            };
            let mark = out.len();
            let fits = loop {
                if last.is_some() {
                    out.push(b',');
                }
                serde_json::to_writer(&mut out, &entry).expect("an entry serialises");
                // Alone on its page and too large, a module is listed without its tools, and
                // then (a record kept from before registrations were held to a page) without
                // its description: the names alone were checked to fit at registration.
                let alone_bare =
                    last.is_none() && entry.specs.is_none() && entry.description.is_empty();
                if out.len() + TAIL <= budget || alone_bare {
                    break true;
                }
                out.truncate(mark);
                if last.is_some() {
                    break false;
                }
                if entry.specs.is_some() {
                    entry.specs = None;
                } else {
                    entry.description = "";
                }
            };
            if !fits {
                next = last;
                break;
            }
            last = Some(&m.module);
        }
        out.push(b']');
        if let Some(next) = next {
            out.extend_from_slice(b",\"next\":");
            serde_json::to_writer(&mut out, &next).expect("a name serialises");
        }
        out.push(b'}');
        out
    }
}

/// What one page of the listing may hold on a bus whose messages are at most `max_payload`
/// bytes: room is kept for the headers and framing.
fn page_budget(max_payload: usize) -> usize {
    max_payload.saturating_sub(4096).max(4096)
}

/// How a page opens.
const PAGE_OPEN: &[u8] = b"{\"modules\":[";

/// Room a page keeps after its entries: `]`, `,"next":"<module>"`, `}`.
const PAGE_FRAME: usize = 128;

/// A module as one page of the listing writes it.
#[derive(Serialize)]
struct PageEntry<'a> {
    module: &'a str,
    version: &'a str,
    description: &'a str,
    tools: &'a [String],
    instances: usize,
    last_seen_ms: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    digest: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    specs: Option<&'a [ListedTool]>,
}

/// Shared by the tools; aborts the bucket watch when the module is dropped.
struct Catalog {
    client: async_nats::Client,
    store: kv::Store,
    view: RwLock<View>,
    /// Registrations one at a time: the instance bound is checked and written as one step.
    writing: tokio::sync::Mutex<()>,
    ready: watch::Receiver<bool>,
    /// Since when the view has been caught up with the bucket (0: it is not): an instance is
    /// judged by refreshes missed only once this catalogue could have seen them.
    ready_since_ms: std::sync::atomic::AtomicU64,
    /// The bucket watch and the listing verb's server.
    tasks: std::sync::Mutex<Vec<tokio::task::JoinHandle<()>>>,
}

/// Says whether a module instance is gone, from a catalogue's view (the task verbs ask it of
/// the instance that took a task).
#[derive(Clone)]
pub(crate) struct Liveness(std::sync::Weak<Catalog>);

impl Liveness {
    /// Whether instance `id` of `module` is gone as far as the catalogue can tell, at
    /// `now_ms`: not among the instances it keeps (swept) though `since_ms` is some seconds
    /// past (a registration just made may not be in the view yet), or not seen for longer
    /// than it said it refreshes in, three times over — counted from its removal where it was
    /// removed while still refreshing (forgotten: a live one is back at its next refresh, and
    /// nobody's forget fails the tasks it runs). Nothing
    /// is judged until the view has been caught up that long: a catalogue that just started,
    /// or was away, has not had the chance to see the refreshes.
    pub(crate) fn gone(&self, module: &str, id: &str, since_ms: u64, now_ms: u64) -> bool {
        let Some(c) = self.0.upgrade() else {
            return false;
        };
        let ready_since = c.ready_since_ms.load(std::sync::atomic::Ordering::Acquire);
        if ready_since == 0 {
            return false;
        }
        let view = c.read();
        let k = (module.to_owned(), id.to_owned());
        match view.instances.get(&k) {
            None => match view.removed_fresh.get(&k) {
                // Removed while it still refreshed: forgotten, or unregistered by another of
                // its module's instances. Alive, it registers again within its refresh.
                Some((at, fresh)) => now_ms.saturating_sub(*at) > *fresh,
                None => {
                    now_ms.saturating_sub(since_ms) > ABSENT_GRACE_MS
                        && now_ms.saturating_sub(ready_since) > ABSENT_GRACE_MS
                }
            },
            Some(i) => {
                let fresh = i.fresh_for_ms();
                now_ms.saturating_sub(i.last_seen_ms) > fresh
                    && now_ms.saturating_sub(ready_since) > fresh
            }
        }
    }
}

/// How long an instance named by a task may be missing from the view before it is taken for
/// gone: its registration, written before it serves, reaches every catalogue's view well
/// within it.
const ABSENT_GRACE_MS: u64 = 5_000;

/// Says the view caught up (or not), and since when.
fn mark_ready(c: &Catalog, ready_tx: &watch::Sender<bool>, ready: bool) {
    use std::sync::atomic::Ordering;
    if ready {
        let _ = c.ready_since_ms.compare_exchange(
            0,
            catalog::now_ms(),
            Ordering::AcqRel,
            Ordering::Acquire,
        );
    } else {
        c.ready_since_ms.store(0, Ordering::Release);
    }
    let _ = ready_tx.send(ready);
}

impl Drop for Catalog {
    fn drop(&mut self) {
        if let Ok(mut tasks) = self.tasks.lock() {
            tasks.drain(..).for_each(|t| t.abort());
        }
    }
}

impl Catalog {
    async fn caught_up(&self) -> Result<(), String> {
        let mut ready = self.ready.clone();
        match tokio::time::timeout(CATCH_UP, ready.wait_for(|r| *r)).await {
            Ok(Ok(_)) => Ok(()),
            _ => Err(format!(
                "the catalogue has not finished reading its bucket {} yet; try again",
                catalog::BUCKET
            )),
        }
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, View> {
        self.view.read().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether the catalogue lists `tool` as acting for the people calling it (its module
    /// registered its spec with `mesh/actsForPeople`): the issuer signs tickets only for such
    /// tools, so no ticket names a tool that does not exist or needs none.
    async fn acts_for_people(&self, tool: &subjects::FullName) -> Result<(), String> {
        let key = format!("modules.{}", tool.module());
        let seen = self.read().modules.get(tool.module()).cloned();
        // What the view has not caught up with yet (a module registered a moment ago) is read
        // from the bucket itself.
        let record = match seen {
            Some(r) if r.tools.iter().any(|t| t == tool.tool()) => Some(r),
            _ => match self.store.get(&key).await {
                Ok(Some(bytes)) => serde_json::from_slice::<ModuleRecord>(&bytes).ok(),
                Ok(None) => None,
                Err(e) => return Err(format!("the catalogue cannot read its bucket: {e}")),
            },
        };
        let Some(record) = record else {
            return Err(format!(
                "module {} is not in the catalogue: no ticket for its tools",
                tool.module()
            ));
        };
        let Some(specs) = &record.specs else {
            return Err(format!(
                "module {} registered its tools' names only: no ticket, as nothing says {tool} acts for people",
                tool.module()
            ));
        };
        let acts = specs
            .iter()
            .find(|t| t.name == tool.tool())
            .ok_or_else(|| format!("module {} has no tool {tool}", tool.module()))?
            .to_spec()
            .ok()
            .and_then(|s| s.meta)
            .and_then(|m| m.get(subjects::ticket::ACTS_FOR_PEOPLE_META).cloned())
            .and_then(|v| v.as_bool())
            == Some(true);
        if acts {
            Ok(())
        } else {
            Err(format!(
                "{tool} does not act for the people calling it: it needs no ticket, and gets none"
            ))
        }
    }

    /// The listing verb's answer to one request: a page, or why there is none.
    async fn listing(&self, request: &[u8]) -> Vec<u8> {
        let refuse = |why: String| {
            serde_json::to_vec(&catalog::ListingPage {
                modules: Vec::new(),
                next: None,
                error: Some(why),
            })
            .expect("a page serialises")
        };
        if request.len() > MAX_LISTING_REQUEST {
            return refuse(format!(
                "a listing request is at most {MAX_LISTING_REQUEST} bytes: {{}} or {{\"after\": \"<module>\"}}"
            ));
        }
        let first = request.iter().find(|b| !b.is_ascii_whitespace());
        let request = if first.is_none() {
            ListingRequest::default()
        } else if first != Some(&b'{') {
            return refuse(
                "a listing request is a JSON object: {} or {\"after\": \"<module>\"}".into(),
            );
        } else {
            match serde_json::from_slice::<ListingRequest>(request) {
                Ok(r) => r,
                Err(e) => {
                    return refuse(format!(
                        "not a listing request ({e}): send {{}} or {{\"after\": \"<module>\"}}"
                    ));
                }
            }
        };
        if let Err(why) = self.caught_up().await {
            return refuse(why);
        }
        if let Some(after) = &request.after
            && subjects::check_module(after).is_err()
        {
            return refuse(format!(
                "a listing request's after is a module's name, not {:?}",
                after.chars().take(40).collect::<String>()
            ));
        }
        if let Some(bad) = request.known.iter().find(|d| !catalog::is_digest(d)) {
            return refuse(format!(
                "a listing request's known digests are 32 lower-case hex digits each, not {:?}",
                bad.chars().take(40).collect::<String>()
            ));
        }
        if request.known.len() > catalog::MAX_KNOWN {
            return refuse(format!(
                "a listing request names at most {} known digests, not {}",
                catalog::MAX_KNOWN,
                request.known.len()
            ));
        }
        let known: HashSet<&str> = request.known.iter().map(String::as_str).collect();
        let budget = self.page_budget();
        self.read()
            .page(request.after.as_deref(), &known, catalog::now_ms(), budget)
    }

    /// The most bytes one page of the listing holds on this bus: what fits in one message,
    /// less room for the headers and framing.
    fn page_budget(&self) -> usize {
        page_budget(self.client.server_info().max_payload)
    }

    /// A module is listed at least by name: its entry without its tools in full must fit a
    /// page of its own, or no page that lists it could be sent (the listing would stop there
    /// for everyone).
    fn check_fits_a_page(&self, r: &Registration) -> Result<(), RegisterError> {
        let bare = PageEntry {
            module: &r.module,
            version: &r.version,
            description: &r.description,
            tools: &r.tools,
            instances: MAX_INSTANCES,
            last_seen_ms: u64::MAX,
            digest: Some(DIGEST_ROOM),
            specs: None,
        };
        let size = serde_json::to_vec(&bare)
            .expect("an entry serialises")
            .len();
        let budget = self.page_budget();
        if PAGE_OPEN.len() + size + PAGE_FRAME > budget {
            return Err(RegisterError::Refused(format!(
                "module {}: its names, version and description take {size} bytes, more than one page of the listing holds on this bus ({budget} bytes); shorten the description or the tool names",
                r.module
            )));
        }
        Ok(())
    }

    /// Says that what `module` serves changed, for relays that keep a listing.
    async fn changed(&self, module: &str) {
        let event = serde_json::to_vec(&Changed {
            module: module.to_owned(),
        })
        .expect("an event serialises");
        if let Err(e) = self
            .client
            .publish(catalog::CHANGED_SUBJECT, event.into())
            .await
        {
            tracing::warn!("cannot say that {module} changed: {e}");
        }
    }
}

/// How long an instance may go without refreshing before the catalogue removes it: a crashed
/// instance never says it stopped.
const SWEEP_AFTER_MS: u64 = 10 * REFRESH_SECS * 1000;

/// Keeps the view in step with the bucket: reads every key, follows every change, and when
/// the watch ends (the bus went away, the stream was recreated) says it is not ready and
/// starts again from scratch. Between changes it removes instances that stopped refreshing.
async fn keep_watching(
    catalog: std::sync::Weak<Catalog>,
    store: kv::Store,
    first: kv::Watch,
    ready_tx: watch::Sender<bool>,
) {
    let mut updates = Some(first);
    let mut backoff = Duration::from_millis(100);
    loop {
        let mut watch = match updates.take() {
            Some(w) => w,
            None => match store.watch_with_history(">").await {
                Ok(w) => w,
                Err(e) => {
                    tracing::warn!("cannot watch the catalogue bucket again: {e}");
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(Duration::from_secs(5));
                    continue;
                }
            },
        };
        // A fresh watch replays every key: the view starts over with it.
        match catalog.upgrade() {
            Some(c) => *c.view.write().unwrap_or_else(|p| p.into_inner()) = View::default(),
            None => return,
        }
        if let Ok(status) = store.status().await
            && status.values() == 0
        {
            let Some(c) = catalog.upgrade() else { return };
            mark_ready(&c, &ready_tx, true);
        }
        // The first sweep soon after the bucket is read, then one per refresh period.
        let mut sweep = tokio::time::interval_at(
            tokio::time::Instant::now() + Duration::from_secs(1),
            Duration::from_secs(REFRESH_SECS),
        );
        loop {
            tokio::select! {
                update = watch.next() => {
                    let Some(update) = update else { break };
                    let Some(c) = catalog.upgrade() else { return };
                    match update {
                        Ok(entry) => {
                            c.view
                                .write()
                                .unwrap_or_else(|p| p.into_inner())
                                .apply(&entry.key, entry.operation, &entry.value);
                            if entry.delta == 0 {
                                mark_ready(&c, &ready_tx, true);
                                backoff = Duration::from_millis(100);
                            }
                        }
                        Err(e) => tracing::warn!("catalogue watch: {e}"),
                    }
                }
                _ = sweep.tick() => {
                    let Some(c) = catalog.upgrade() else { return };
                    c.sweep().await;
                }
            }
        }
        tracing::warn!("catalogue watch ended; reading the bucket again");
        match catalog.upgrade() {
            Some(c) => mark_ready(&c, &ready_tx, false),
            None => return,
        }
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(Duration::from_secs(5));
    }
}

/// Opens (or creates) the bucket, starts watching it, and declares the module.
/// Why the catalogue cannot start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error(transparent)]
    Bucket(#[from] BucketError),
    #[error("cannot watch the catalogue bucket: {0}")]
    Watch(#[from] kv::WatchError),
    #[error("{0}")]
    Listing(String),
    #[error(transparent)]
    Issuer(#[from] IssuerError),
    #[error(transparent)]
    Tasks(#[from] tasks::TasksError),
}

/// How long a write keeps trying while the bucket cannot take it: on a cluster that lost a
/// server, until JetStream has chosen a new leader for the bucket's stream (seconds). Less
/// than a registering module waits for its answer, so it hears why and tries again.
const WRITE_WITHIN: Duration = Duration::from_secs(4);

/// Writes `key`, trying again for up to `WRITE_WITHIN` while the bucket refuses.
async fn put_riding_out(
    store: &async_nats::jetstream::kv::Store,
    key: String,
    bytes: Vec<u8>,
) -> Result<(), RegisterError> {
    let started = std::time::Instant::now();
    let mut wait = Duration::from_millis(50);
    loop {
        match store.put(key.clone(), bytes.clone().into()).await {
            Ok(_) => return Ok(()),
            Err(e) if started.elapsed() < WRITE_WITHIN => {
                tracing::debug!("cannot write {key} yet: {e}; trying again");
                tokio::time::sleep(wait).await;
                wait = (wait * 2).min(Duration::from_secs(1));
            }
            Err(e) => return Err(RegisterError::Other(format!("cannot write {key}: {e}"))),
        }
    }
}

/// The largest listing request read: `{"after": "<module>"}` is far smaller.
const MAX_LISTING_REQUEST: usize = 1024 + catalog::MAX_KNOWN * 40;

/// A digest's room in a page (what [`subjects::tools_digest`] writes).
const DIGEST_ROOM: &str = "00000000000000000000000000000000";

/// Answers the listing verb, in turn by caller, until the catalogue is dropped.
async fn serve_listing(
    client: async_nats::Client,
    catalog: Weak<Catalog>,
    requests: async_nats::Subscriber,
) {
    use mesh_core::runtime::turns::{answer_in_turn, caller_key};
    answer_in_turn(
        client,
        "the catalogue's listing",
        mesh_core::runtime::turns::PER_CALLER,
        requests,
        |msg| caller_key(msg, mesh_core::actor::Layout::Accounts),
        |msg| {
            let catalog = catalog.clone();
            async move {
                let Some(reply) = msg.reply else { return };
                let Some(c) = catalog.upgrade() else { return };
                let body = c.listing(&msg.payload).await;
                if let Err(e) = c.client.publish(reply, body.into()).await {
                    tracing::warn!("cannot answer a listing request: {e}");
                }
            }
        },
    )
    .await
}

/// What the catalogue says beside its modules: the mesh's trust and limits.
pub struct Options {
    /// The key it signs tickets with (every instance of one mesh the same).
    pub issuer: Issuer,
    /// The callers' limits (`limits.json`, written from the grants file); none: no limits.
    pub limits: Option<std::path::PathBuf>,
    /// Who may call what (`people.json`, written from the grants file): tickets only for a
    /// tool the bus lets the person call. None: only the listing is checked.
    pub people: Option<std::path::PathBuf>,
}

/// The catalogue, issuing tickets with a key that dies with it and naming no limits (tests,
/// a one-off bus).
pub async fn module(client: async_nats::Client) -> Result<Module, StartError> {
    module_with(
        client,
        Options {
            issuer: Issuer::ephemeral(),
            limits: None,
            people: None,
        },
    )
    .await
}

/// How long the first watch is asked again while the bucket's stream is not known yet.
const FIRST_WATCH_WITHIN: Duration = Duration::from_secs(30);

/// The catalogue's first watch. On a new cluster the bucket just made may be unknown for a
/// moment to the server asked (its stream's placement still travelling between the servers:
/// "stream not found"), so it is asked again then; any other error is the bus's answer.
async fn first_watch(store: &kv::Store) -> Result<kv::Watch, kv::WatchError> {
    let started = tokio::time::Instant::now();
    let mut wait = Duration::from_millis(50);
    loop {
        match store.watch_with_history(">").await {
            Err(e) if started.elapsed() < FIRST_WATCH_WITHIN && stream_not_found(&e) => {
                tracing::debug!(
                    "the catalogue bucket's stream is not known yet: {e}; asking again"
                );
                tokio::time::sleep(wait).await;
                wait = (wait * 2).min(Duration::from_secs(1));
            }
            watched => return watched,
        }
    }
}

/// Whether a watch failed because JetStream did not know the bucket's stream (10059).
fn stream_not_found(e: &kv::WatchError) -> bool {
    let mut at: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(e) = at {
        if e.to_string().contains("stream not found") {
            return true;
        }
        at = e.source();
    }
    false
}

/// The catalogue with its key and limits.
pub async fn module_with(
    client: async_nats::Client,
    options: Options,
) -> Result<Module, StartError> {
    let store = open_bucket(client.clone()).await?;
    let (ready_tx, ready) = watch::channel(false);
    let catalog = Arc::new(Catalog {
        client: client.clone(),
        store: store.clone(),
        view: RwLock::new(View::default()),
        writing: tokio::sync::Mutex::new(()),
        ready,
        ready_since_ms: std::sync::atomic::AtomicU64::new(0),
        tasks: std::sync::Mutex::new(Vec::new()),
    });
    // The last value of every key first, then every change as it happens; the first watch
    // is made here so a bus without JetStream is reported at start.
    let first = first_watch(&store).await?;
    let listing = client
        .queue_subscribe(catalog::LISTING_SUBJECT, catalog::MODULE.to_owned())
        .await
        .map_err(|e| {
            StartError::Listing(format!("cannot subscribe to mesh.catalog.listing: {e}"))
        })?;
    let verbs = tickets::subscribe(&client).await?;
    let ended = tickets::open_ended(
        client.clone(),
        mesh_core::runtime::bucket_replicas(&client.server_info()),
    )
    .await?;
    let task_verbs = tasks::subscribe(&client).await?;
    let task_bucket = tasks::open(client.clone()).await?;
    let limit_requests = limits::subscribe(&client)
        .await
        .map_err(StartError::Listing)?;
    let weak = Arc::downgrade(&catalog);
    let tasks = [
        tokio::spawn(keep_watching(weak.clone(), store, first, ready_tx)),
        tokio::spawn(serve_listing(client.clone(), weak.clone(), listing)),
        tokio::spawn(tickets::serve(
            Arc::new(match options.people {
                Some(path) => options.issuer.knowing_who_may_call(path),
                None => options.issuer,
            }),
            client.clone(),
            verbs,
            ended,
            weak.clone(),
        )),
        tokio::spawn(tasks::serve(
            client.clone(),
            task_verbs,
            task_bucket,
            Liveness(weak.clone()),
        )),
        tokio::spawn(limits::serve(
            limits::LimitsFile::new(options.limits),
            client.clone(),
            limit_requests,
        )),
    ];
    catalog
        .tasks
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .extend(tasks);

    // Each tool's handler holds the shared view.
    let (c1, c2, c3) = (catalog.clone(), catalog.clone(), catalog.clone());
    let c4 = catalog.clone();
    Ok(Module::new(
        "catalog",
        env!("CARGO_PKG_VERSION"),
        "The catalogue: every module that registered on this bus, running or not",
    )
    .tool(
        Tool::typed(
            "modules",
            "Lists registered modules: name, version, description, tool names, running instances and when last seen",
            move |args: ModulesArgs, _| {
                let c = c1.clone();
                async move { list_modules(&c, args).await }
            },
        )
        .annotations(json!({"readOnlyHint": true, "idempotentHint": true, "openWorldHint": false})),
    )
    .tool(
        Tool::typed(
            "forget",
            "Removes a module from the catalogue (a module still running is back at its next refresh, within about 30 s; one that is not comes back when it next starts)",
            move |args: Forget, _| {
                let c = c2.clone();
                async move { forget_module(&c, args).await }
            },
        )
        .annotations(json!({"destructiveHint": true, "idempotentHint": true, "openWorldHint": false})),
    )
    .tool(
        Tool::typed(
            "register",
            "A module registers one of its running instances (modules only: the caller must be the module it names)",
            move |args: Registration, call: Call| {
                let c = c3.clone();
                async move { register_call(&c, args, call).await }
            },
        )
        .annotations(json!({"idempotentHint": true, "openWorldHint": false})),
    )
    .tool(
        Tool::typed(
            "unregister",
            "A module says one of its instances stopped (modules only: the caller must be the module it names)",
            move |args: Unregistration, call: Call| {
                let c = c4.clone();
                async move { unregister_call(&c, args, call).await }
            },
        )
        .annotations(json!({"idempotentHint": true, "openWorldHint": false})),
    )
    .registers_with(catalog))
}

/// Only a module registers, and only itself: the name it registers must be the one
/// nats-server stamped (in local mode nothing is stamped, and nothing is checked).
fn check_registrant(caller: &Caller, module: &str) -> Result<(), String> {
    subjects::check_module(module).map_err(|e| e.to_string())?;
    match caller {
        Caller::Unknown => Ok(()),
        Caller::Module(m) if m == module => Ok(()),
        Caller::Module(m) => Err(format!(
            "refused: module {m} cannot register or unregister module {module}; a module registers itself only"
        )),
        Caller::Person(p) => Err(format!(
            "refused: {p} is a person; only a module registers itself (mesh.catalog.register is called by a module's runtime)"
        )),
    }
}

/// A registration's tools in full must be the tools it names, in that order, each input
/// schema an object.
fn check_specs(tools: &[String], specs: &[ListedTool]) -> Result<(), RegisterError> {
    let names: Vec<&str> = specs.iter().map(|s| s.name.as_str()).collect();
    if names != tools.iter().map(String::as_str).collect::<Vec<_>>() {
        return Err(RegisterError::Refused(format!(
            "specs name the tools {names:?}, but the registration lists {tools:?}; send the same tools in the same order"
        )));
    }
    for s in specs {
        if !s.schemas_are_objects() {
            return Err(RegisterError::Refused(format!(
                "tool {}: inputSchema and outputSchema must be JSON objects",
                s.name
            )));
        }
    }
    Ok(())
}

/// An instance id is one subject token of `[A-Za-z0-9_-]{1,64}`.
fn check_instance(id: &str) -> Result<(), RegisterError> {
    let valid = !id.is_empty()
        && id.len() <= 64
        && id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
    if valid {
        Ok(())
    } else {
        Err(RegisterError::Refused(format!(
            "instance id {id:?} is not [A-Za-z0-9_-]{{1,64}}"
        )))
    }
}

impl Catalog {
    /// Removes the instances that have not refreshed for [`SWEEP_AFTER_MS`].
    async fn sweep(&self) {
        let now = catalog::now_ms();
        let stale: Vec<String> = self
            .read()
            .instances
            .iter()
            .filter(|(_, i)| now.saturating_sub(i.last_seen_ms) > SWEEP_AFTER_MS)
            .map(|((m, id), _)| catalog::instance_key(m, id))
            .collect();
        for key in stale {
            match self.store.purge(&key).await {
                Ok(_) => {
                    tracing::info!("removed {key}: it stopped refreshing");
                    if let Some((module, _)) = key
                        .strip_prefix("instances.")
                        .and_then(|k| k.split_once('.'))
                    {
                        self.changed(module).await;
                    }
                    self.view.write().unwrap_or_else(|p| p.into_inner()).apply(
                        &key,
                        Operation::Purge,
                        &[],
                    );
                    self.drop_marker_later(key);
                }
                Err(e) => tracing::warn!("cannot remove {key}: {e}"),
            }
        }
    }

    /// Writes a registration, stamped with the catalogue's own clock.
    async fn write(&self, r: &Registration) -> Result<(), RegisterError> {
        for t in &r.tools {
            subjects::check_tool(t).map_err(|e| RegisterError::Refused(e.to_string()))?;
        }
        if r.tools.len() > MAX_TOOLS {
            return Err(RegisterError::Refused(format!(
                "a module registers at most {MAX_TOOLS} tools"
            )));
        }
        if let Some(specs) = &r.specs {
            check_specs(&r.tools, specs)?;
        }
        self.check_fits_a_page(r)?;
        let valid_instance = !r.instance.is_empty()
            && r.instance.len() <= 64
            && r.instance
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
        if !valid_instance {
            return Err(RegisterError::Refused(format!(
                "instance id {:?} is not [A-Za-z0-9_-]{{1,64}}",
                r.instance
            )));
        }
        let _one_at_a_time = self.writing.lock().await;
        let now = catalog::now_ms();
        // Instances that stopped refreshing (crashed) make room: they are removed when the
        // bound is reached, so only live ones count against it.
        let (present, live, stale) = {
            let view = self.read();
            let mut present = false;
            let (mut live, mut stale) = (0, Vec::new());
            for ((_, id), i) in view
                .instances
                .range((r.module.clone(), String::new())..)
                .take_while(|((m, _), _)| *m == r.module)
            {
                present |= *id == r.instance;
                if now.saturating_sub(i.last_seen_ms) <= i.fresh_for_ms() {
                    live += 1;
                } else {
                    stale.push(catalog::instance_key(&r.module, id));
                }
            }
            (present, live, stale)
        };
        if !present && live + stale.len() >= MAX_INSTANCES {
            for key in &stale {
                if self.store.purge(key).await.is_ok() {
                    self.view.write().unwrap_or_else(|p| p.into_inner()).apply(
                        key,
                        Operation::Purge,
                        &[],
                    );
                    self.drop_marker_later(key.clone());
                }
            }
            if live >= MAX_INSTANCES {
                return Err(RegisterError::Refused(format!(
                    "module {} already has {MAX_INSTANCES} running instances registered; stop some, or forget the module",
                    r.module
                )));
            }
        }
        // The record is rewritten only when the module says something new; a refresh that
        // changes nothing touches its instance alone (and builds no record).
        let changed = self.read().modules.get(&r.module).is_none_or(|m| {
            (&m.version, &m.description, &m.tools, &m.specs)
                != (&r.version, &r.description, &r.tools, &r.specs)
        });
        let put = |key: String, bytes: Vec<u8>| {
            let store = self.store.clone();
            async move { put_riding_out(&store, key, bytes).await }
        };
        let module_key = catalog::module_key(&r.module);
        let module_bytes = changed.then(|| {
            serde_json::to_vec(&ModuleRecord {
                module: r.module.clone(),
                version: r.version.clone(),
                description: r.description.clone(),
                tools: r.tools.clone(),
                specs: r.specs.clone(),
                last_seen_ms: now,
            })
            .expect("a record serialises")
        });
        if let Some(bytes) = &module_bytes {
            put(module_key.clone(), bytes.clone()).await?;
        }
        let instance = InstanceRecord {
            module: r.module.clone(),
            id: r.instance.clone(),
            version: r.version.clone(),
            started_ms: r.started_ms,
            last_seen_ms: now,
            refresh_ms: r.refresh_ms.map(|ms| ms.clamp(1000, REFRESH_SECS * 1000)),
        };
        let instance_key = catalog::instance_key(&instance.module, &instance.id);
        let instance_bytes = serde_json::to_vec(&instance).expect("a record serialises");
        put(instance_key.clone(), instance_bytes.clone()).await?;
        // Seen at once by this instance's view (the watch brings the same again), so the
        // instance bound holds however fast registrations come.
        {
            let mut view = self.view.write().unwrap_or_else(|p| p.into_inner());
            if let Some(bytes) = &module_bytes {
                view.apply(&module_key, Operation::Put, bytes);
            }
            view.apply(&instance_key, Operation::Put, &instance_bytes);
        }
        if changed || !present {
            self.changed(&r.module).await;
        }
        Ok(())
    }

    async fn remove(&self, u: &Unregistration) -> Result<(), RegisterError> {
        check_instance(&u.instance)?;
        let key = catalog::instance_key(&u.module, &u.instance);
        // One at a time with registrations, so an instance registered just now is seen.
        let _one_at_a_time = self.writing.lock().await;
        // An instance that is not there is left alone: a purge of a key the bucket does not
        // hold would stay in it as a marker for ever (a module naming new ids would grow the
        // bucket without bound), and nothing changed to tell anyone.
        let present = self
            .store
            .get(&key)
            .await
            .map_err(|e| RegisterError::Other(format!("cannot read {key}: {e}")))?
            .is_some();
        if !present {
            return Ok(());
        }
        self.store
            .purge(&key)
            .await
            .map_err(|e| RegisterError::Other(format!("cannot remove {key}: {e}")))?;
        self.view
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .apply(&key, Operation::Purge, &[]);
        self.drop_marker_later(key);
        // A module that stopped cleanly was last seen now, not at its last registration.
        let record = self.read().modules.get(&u.module).cloned();
        if let Some(mut record) = record {
            record.last_seen_ms = catalog::now_ms();
            let module_key = catalog::module_key(&u.module);
            let bytes = serde_json::to_vec(&record).expect("a record serialises");
            // The instance is gone already: a last-seen time that cannot be written is a
            // detail lost, never an unregistration reported failed after it happened.
            match put_riding_out(&self.store, module_key.clone(), bytes.clone()).await {
                Ok(()) => self.view.write().unwrap_or_else(|p| p.into_inner()).apply(
                    &module_key,
                    Operation::Put,
                    &bytes,
                ),
                Err(e) => tracing::warn!(module = %u.module, "its last-seen time not kept: {e}"),
            }
        }
        self.changed(&u.module).await;
        Ok(())
    }

    /// Removes a removed instance's purge marker from the bucket's stream once every
    /// catalogue watching it has had time to see the removal: each marker would otherwise
    /// stay for ever, and a module that starts and stops (a new instance id each time) would
    /// grow the bucket without bound.
    fn drop_marker_later(&self, key: String) {
        let store = self.store.clone();
        tokio::spawn(async move {
            tokio::time::sleep(MARKER_LINGERS).await;
            // A new instance has a new id; an id registered again meanwhile is left alone.
            if !matches!(store.get(&key).await, Ok(None)) {
                return;
            }
            let subject = format!("{}{key}", store.prefix);
            if let Err(e) = store.stream.purge().filter(subject).await {
                tracing::warn!("cannot drop the marker of {key}: {e}");
            }
        });
    }
}

/// How long a removed instance's purge marker stays in the bucket.
const MARKER_LINGERS: Duration = Duration::from_secs(5);

impl Registry for Catalog {
    fn register<'a>(&'a self, registration: &'a Registration) -> RegistryFuture<'a> {
        Box::pin(self.write(registration))
    }

    fn unregister<'a>(&'a self, unregistration: &'a Unregistration) -> RegistryFuture<'a> {
        Box::pin(self.remove(unregistration))
    }
}

async fn register_call(catalog: &Catalog, r: Registration, call: Call) -> Result<String, String> {
    check_registrant(&call.caller, &r.module)?;
    catalog.caught_up().await?;
    match catalog.write(&r).await {
        Ok(()) => Ok(format!("registered {} instance {}", r.module, r.instance)),
        Err(RegisterError::Refused(why)) => Err(format!("refused: {why}")),
        Err(e) => Err(e.to_string()),
    }
}

async fn unregister_call(
    catalog: &Catalog,
    u: Unregistration,
    call: Call,
) -> Result<String, String> {
    check_registrant(&call.caller, &u.module)?;
    match catalog.remove(&u).await {
        Ok(()) => Ok(format!("unregistered {} instance {}", u.module, u.instance)),
        Err(RegisterError::Refused(why)) => Err(format!("refused: {why}")),
        Err(e) => Err(e.to_string()),
    }
}

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct ModulesArgs {
    /// only this module
    module: Option<String>,
    /// at most this many modules in this answer (500 unless said)
    #[schemars(range(min = 1, max = 500))]
    limit: Option<usize>,
    /// where the previous answer stopped: its `next` (the modules after it, by name)
    cursor: Option<String>,
}

/// The registered modules.
#[derive(Serialize, JsonSchema)]
struct Modules {
    modules: Vec<ModuleEntry>,
    /// more follow: call again with this as `cursor`
    #[serde(skip_serializing_if = "Option::is_none")]
    next: Option<String>,
}

/// The most modules one answer of `catalog_modules` lists.
const MODULES_PAGE: usize = 500;

async fn list_modules(catalog: &Catalog, args: ModulesArgs) -> Result<WithText<Modules>, String> {
    catalog.caught_up().await?;
    let only = args.module.as_deref();
    let now = catalog::now_ms();
    let limit = args.limit.unwrap_or(MODULES_PAGE).clamp(1, MODULES_PAGE);
    // In name order (the view is a sorted map): those after the cursor, one more than asked
    // to know whether more follow.
    let mut entries: Vec<ModuleEntry> = catalog
        .read()
        .entries(only, now)
        .into_iter()
        .filter(|e| args.cursor.as_deref().is_none_or(|c| e.module.as_str() > c))
        .take(limit + 1)
        .collect();
    let more = entries.len() > limit;
    entries.truncate(limit);
    let next = more.then(|| entries.last().expect("a page before more").module.clone());
    let text = if entries.is_empty() {
        match only {
            Some(m) => format!("no module named {m} is registered"),
            None => "no module is registered".to_owned(),
        }
    } else {
        entries
            .iter()
            .map(|e| {
                format!(
                    "{} {}: {} tool{}, {} running, last seen {} ago",
                    e.module,
                    e.version,
                    e.tools.len(),
                    if e.tools.len() == 1 { "" } else { "s" },
                    e.instances,
                    ago(now, e.last_seen_ms)
                )
            })
            .collect::<Vec<_>>()
            .join("\n")
    };
    let text = match &next {
        Some(_) => format!("{text}\nmore follow: call again with cursor = next"),
        None => text,
    };
    Ok(WithText {
        text,
        output: Modules {
            modules: entries,
            next,
        },
    })
}

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct Forget {
    /// the module to remove
    module: String,
}

async fn forget_module(catalog: &Catalog, args: Forget) -> Result<String, String> {
    catalog.caught_up().await?;
    let module = args.module.as_str();
    let keys: Vec<String> = {
        let view = catalog.read();
        if !view.modules.contains_key(module) {
            return Err(format!("no module named {module} is registered"));
        }
        let mut keys = vec![catalog::module_key(module)];
        keys.extend(
            view.instances
                .keys()
                .filter(|(m, _)| m == module)
                .map(|(m, id)| catalog::instance_key(m, id)),
        );
        keys
    };
    for key in &keys {
        catalog
            .store
            .purge(key)
            .await
            .map_err(|e| format!("cannot remove {key} from the catalogue: {e}"))?;
    }
    catalog.changed(module).await;
    Ok(format!(
        "forgot module {module}; if it is still running it is back at its next refresh (within about {REFRESH_SECS} s), else when it next starts"
    ))
}

/// `12s`, `5m`, `3h`, `2d`: how long ago, for a person.
pub fn ago(now_ms: u64, then_ms: u64) -> String {
    let s = now_ms.saturating_sub(then_ms) / 1000;
    match s {
        0..60 => format!("{s}s"),
        60..3600 => format!("{}m", s / 60),
        3600..86400 => format!("{}h", s / 3600),
        _ => format!("{}d", s / 86400),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use mesh_core::actor::Actor;

    /// The catalogue's own word, behind the bus's (which denies people the subject): a
    /// person never registers, a module only itself.
    #[test]
    fn only_a_module_registers_and_only_itself() {
        let person = Caller::Person(Actor::new("ann", "PEOPLE"));
        for module in ["ann", "echo"] {
            let e = check_registrant(&person, module).unwrap_err();
            assert!(e.contains("ann@PEOPLE is a person"), "{e}");
        }
        let weather = Caller::Module("weather".into());
        assert!(check_registrant(&weather, "weather").is_ok());
        let e = check_registrant(&weather, "echo").unwrap_err();
        assert!(e.contains("cannot register"), "{e}");
        assert!(check_registrant(&weather, "we>ther").is_err());
    }
}
