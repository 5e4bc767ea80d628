//! The mesh's ticket issuer, served by the catalogue: a person asks (`mesh.catalog.ticket`) for
//! a ticket that lets the module they are about to call act for them during that call; the
//! issuer names them as nats-server stamped their request, never as the request says.
//! Modules learn the key it signs with on `mesh.catalog.keys`.
//!
//! A ticket acts only while its call runs: the person's client and the module's runtime each
//! say when the call ended (`mesh.catalog.ended`), the issuer keeps that in a bucket of its
//! own (shared by every instance of the catalogue, kept as long as a ticket can live), and a
//! module asks (`mesh.catalog.current`) before acting on a ticket.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use async_nats::jetstream::{self, kv};
use async_nats::{Client, Message, Subscriber};
use futures_util::StreamExt;

use mesh_core::actor::{Caller, Layout, Route, identify};
use mesh_core::permission;
use mesh_core::runtime::turns::{PER_CALLER, PER_MODULE, answer_in_turn, caller_key};

use crate::watched::Watched;
use mesh_core::subjects::ticket::{
    self, CURRENT_SUBJECT, Claims, Current, ENDED_SUBJECT, Ended, EndedReply, ISSUE_SUBJECT,
    IssueReply, IssueRequest, KEYS_SUBJECT, KeysReply, LONGEST, MAX_LEN, MAX_REQUEST, MayCallTable,
    SKEW,
};
use mesh_core::subjects::{FullName, catalog, check_module};

/// Why the issuer's key cannot be had.
#[derive(Debug, thiserror::Error)]
pub enum IssuerError {
    #[error("cannot read the ticket key {path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("the ticket key {path} is not an nkey seed ({why}); remove it to make a new one")]
    Seed { path: String, why: String },
    #[error("cannot write the ticket key {path}: {source}")]
    Write {
        path: String,
        source: std::io::Error,
    },
    #[error("cannot subscribe to {subject}: {why}")]
    Subscribe { subject: &'static str, why: String },
    #[error("cannot open the bucket of ended tickets {ENDED_BUCKET}: {why}")]
    Bucket { why: String },
}

/// The ids of tickets whose calls ended, each kept as long as a ticket can live.
pub const ENDED_BUCKET: &str = "mesh_tickets_ended";

/// Opens (or makes) the bucket of ended tickets, with `replicas` copies.
pub(crate) async fn open_ended(client: Client, replicas: usize) -> Result<kv::Store, IssuerError> {
    let js = jetstream::new(client);
    if let Ok(store) = js.get_key_value(ENDED_BUCKET).await {
        return Ok(store);
    }
    let config = kv::Config {
        bucket: ENDED_BUCKET.to_owned(),
        description: "mesh catalogue: tickets whose calls ended".to_owned(),
        history: 1,
        max_age: LONGEST + 2 * SKEW,
        // Ends are rate-bounded per caller; the bucket is bounded whatever they add up to.
        max_bytes: 64 * 1024 * 1024,
        num_replicas: replicas,
        ..Default::default()
    };
    match js.create_key_value(config).await {
        Ok(store) => Ok(store),
        // Another catalogue instance may have made it meanwhile.
        Err(create) => js
            .get_key_value(ENDED_BUCKET)
            .await
            .map_err(|_| IssuerError::Bucket {
                why: create.to_string(),
            }),
    }
}

/// The key tickets are signed with.
pub struct Issuer {
    key: nkeys::KeyPair,
    /// Tickets lately issued, by person: one person asking without end would hold up
    /// everyone else's (the issuer answers one request at a time).
    lately: std::sync::Mutex<HashMap<String, (Instant, u32)>>,
    /// Ends lately said, by sayer (as nats-server stamped them).
    ends_lately: std::sync::Mutex<HashMap<String, (Instant, u32)>>,
    /// Who may call what (`people.json`, from the grants file): a ticket is signed only for
    /// a tool the bus lets its person call. None: the bus's permissions are not known here
    /// (a one-off bus), and only the catalogue's listing is checked.
    people: Option<Watched<MayCallTable>>,
}

/// Tickets one person may have in a second: far more than any client calling tools needs.
const TICKETS_A_SECOND: u32 = 200;

impl Issuer {
    /// A key that dies with the process: tickets it signed are worth nothing after.
    pub fn ephemeral() -> Issuer {
        Issuer::of(nkeys::KeyPair::new_operator())
    }

    /// The key whose seed is `seed` (an nkey seed, `S…`).
    pub fn from_seed(seed: &str) -> Result<Issuer, IssuerError> {
        let key = nkeys::KeyPair::from_seed(seed.trim()).map_err(|e| IssuerError::Seed {
            path: "(given)".into(),
            why: e.to_string(),
        })?;
        Ok(Issuer::of(key))
    }

    fn of(key: nkeys::KeyPair) -> Issuer {
        Issuer {
            key,
            lately: std::sync::Mutex::new(HashMap::new()),
            ends_lately: std::sync::Mutex::new(HashMap::new()),
            people: None,
        }
    }

    /// Signs only for tools the bus lets the person call, as `path` says (`people.json`).
    pub fn knowing_who_may_call(mut self, path: std::path::PathBuf) -> Issuer {
        self.people = Some(Watched::new(path));
        self
    }

    /// Whether the bus lets `person` call `tool`, as the grants file says, and what the
    /// grant lets `tool`'s module call for them from it (none: the grants file is not known
    /// here, and the bus's permissions alone bound it).
    fn may_call(&self, person: &str, tool: &FullName) -> Result<Option<Vec<String>>, String> {
        let Some(people) = &self.people else {
            return Ok(None);
        };
        let table = people.get().map_err(|e| {
            format!("cannot tell whether {person} may call {tool} ({e}): no ticket")
        })?;
        let subject = tool.subject();
        if !table
            .people
            .get(person)
            .is_some_and(|may| may.iter().any(|p| permission::matches(p, subject)))
        {
            return Err(format!(
                "{person} may not call {tool} (no role of theirs in the grants file names it): no ticket"
            ));
        }
        match table.acting_for(tool.module(), tool.tool()) {
            Some(may) => Ok(Some(may.clone())),
            None => Err(format!(
                "{tool} may call nothing for people (the grants file gives module {} no calls_for_people for it): no ticket",
                tool.module()
            )),
        }
    }

    /// Whether `person` may have another ticket this second.
    fn within_rate(&self, person: &str) -> bool {
        self.within(&self.lately, person)
    }

    /// Whether `who` may have one more of what `lately` counts this second.
    fn within(
        &self,
        lately: &std::sync::Mutex<HashMap<String, (Instant, u32)>>,
        who: &str,
    ) -> bool {
        let mut lately = lately.lock().unwrap_or_else(|p| p.into_inner());
        let now = Instant::now();
        // Those of past seconds are forgotten, so the map holds this second's askers only.
        if lately.len() > 1024 {
            lately.retain(|_, (at, _)| now.duration_since(*at) < Duration::from_secs(1));
        }
        let (at, n) = lately.entry(who.to_owned()).or_insert((now, 0));
        if now.duration_since(*at) >= Duration::from_secs(1) {
            *at = now;
            *n = 0;
        }
        *n += 1;
        *n <= TICKETS_A_SECOND
    }

    /// The key kept in `path` (its seed, mode 0600), made on first use. Every instance of
    /// the catalogue of one mesh must use the same one.
    pub fn load_or_create(path: &Path) -> Result<Issuer, IssuerError> {
        let shown = path.display().to_string();
        match std::fs::read_to_string(path) {
            Ok(seed) => {
                let key =
                    nkeys::KeyPair::from_seed(seed.trim()).map_err(|e| IssuerError::Seed {
                        path: shown,
                        why: e.to_string(),
                    })?;
                Ok(Issuer::of(key))
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                let key = nkeys::KeyPair::new_operator();
                let seed = key.seed().expect("a new key has its seed");
                let issuer = Issuer::of(key);
                if let Some(dir) = path.parent() {
                    mesh_core::runtime::private_dir(dir).map_err(|source| IssuerError::Write {
                        path: shown.clone(),
                        source,
                    })?;
                }
                mesh_core::client::write_private(path, &seed).map_err(|source| {
                    IssuerError::Write {
                        path: shown,
                        source,
                    }
                })?;
                Ok(issuer)
            }
            Err(source) => Err(IssuerError::Read {
                path: shown,
                source,
            }),
        }
    }

    /// A ticket's call ended, as its person or its module says (`msg` stamped by the bus):
    /// the ticket's id, to keep as ended; or why the saying does not count.
    /// The call an end is for, or why it is not taken (and whether saying it again later
    /// may do).
    fn ended(&self, msg: &Message, now: SystemTime) -> Result<String, (String, bool)> {
        if msg.payload.len() > MAX_LEN + 64 {
            return Err((format!("an end is at most {} bytes", MAX_LEN + 64), false));
        }
        // Who says it first, and within their rate, before any signature is checked: a flood
        // of ends spends its sayer's budget, not the issuer's time.
        let caller = stamped(msg).map_err(|e| (e, false))?;
        if !self.within(&self.ends_lately, &caller.id().unwrap_or_default()) {
            return Err((
                format!(
                    "more than {TICKETS_A_SECOND} ends this second from one caller; say it again in a second"
                ),
                true,
            ));
        }
        self.ended_by(&caller, msg, now).map_err(|e| (e, false))
    }

    /// [`Issuer::ended`] past its rate: the ticket checked, and its sayer its person or
    /// its module.
    fn ended_by(&self, caller: &Caller, msg: &Message, now: SystemTime) -> Result<String, String> {
        let said: Ended = serde_json::from_slice(&msg.payload)
            .map_err(|e| format!("not an end ({e}): send {{\"ticket\": \"<the ticket>\"}}"))?;
        // Its own tickets only, and only while they live (later they act for nobody anyway).
        let ticket =
            ticket::verify(&said.ticket, &[self.public_key()], now).map_err(|e| e.to_string())?;
        let may = match caller {
            Caller::Person(p) => p.user == ticket.person.user && p.account == ticket.person.account,
            Caller::Module(m) => *m == ticket.claims.aud,
            Caller::Unknown => false,
        };
        if !may {
            return Err(format!(
                "{} may not end a ticket of {} for module {}",
                caller.id().unwrap_or_default(),
                ticket.person,
                ticket.claims.aud
            ));
        }
        Ok(ticket.claims.call)
    }

    /// Takes one end: checked, kept in the bucket (once: an end said again costs nothing),
    /// within its sayer's rate; the answer says which.
    async fn end(&self, msg: &Message, bucket: &kv::Store, known: &Known) -> EndedReply {
        let call = match self.ended(msg, SystemTime::now()) {
            Ok(call) => call,
            Err((why, again)) => {
                tracing::debug!("an end not taken: {why}");
                return EndedReply {
                    error: Some(why),
                    again,
                    ..Default::default()
                };
            }
        };
        let took = |call: String| EndedReply {
            ended: Some(call),
            ..Default::default()
        };
        if known.contains(&call) {
            return took(call);
        }
        // Kept before it is answered: once the sayer hears back, every instance of every
        // module refuses the ticket (this one at once, the others as the bucket tells them).
        let put =
            tokio::time::timeout(Duration::from_secs(2), bucket.put(&call, vec![b'1'].into()))
                .await;
        match put {
            Ok(Ok(_)) => {
                known.insert(call.clone());
                took(call)
            }
            Ok(Err(e)) => {
                tracing::warn!("a ticket's end was not kept: {e}");
                EndedReply {
                    error: Some(format!("not kept: {e}")),
                    again: true,
                    ..Default::default()
                }
            }
            Err(_) => EndedReply {
                error: Some("not kept: the bucket did not answer in 2 s".into()),
                again: true,
                ..Default::default()
            },
        }
    }

    /// Its public key, as modules check tickets against it.
    pub fn public_key(&self) -> String {
        self.key.public_key()
    }

    /// The answer to one request for a ticket, from its stamped sender: signed only for a
    /// tool `catalog` lists as acting for the people calling it.
    async fn issue(
        &self,
        msg: &Message,
        now: SystemTime,
        catalog: &std::sync::Weak<crate::Catalog>,
    ) -> Result<String, String> {
        let caller = stamped(msg)?;
        let person = match caller {
            Caller::Person(p) => p,
            Caller::Module(m) => {
                return Err(format!(
                    "module {m} asked for a ticket: tickets are for people, to let a module act for them during their own call"
                ));
            }
            Caller::Unknown => return Err("nobody is named on this bus".into()),
        };
        if !self.within_rate(&person.to_string()) {
            return Err(format!(
                "{person} asked for more than {TICKETS_A_SECOND} tickets this second; try again in a second"
            ));
        }
        if msg.payload.len() > MAX_REQUEST {
            return Err(format!(
                "a ticket request is at most {MAX_REQUEST} bytes: {{\"audience\", \"tool\", \"expires_ms\"}}"
            ));
        }
        let request: IssueRequest = serde_json::from_slice(&msg.payload).map_err(|e| {
            format!(
                "not a ticket request ({e}): send {{\"audience\": \"<module>\", \"tool\": \"<module>_<tool>\", \"expires_ms\": <when the call ends>}}"
            )
        })?;
        check_module(&request.audience).map_err(|e| e.to_string())?;
        let tool = FullName::parse(&request.tool).map_err(|e| e.to_string())?;
        if tool.module() != request.audience {
            return Err(format!(
                "tool {tool} is not module {}'s: a ticket is for a tool of its audience",
                request.audience
            ));
        }
        let may = self.may_call(&person.to_string(), &tool)?;
        let catalog = catalog
            .upgrade()
            .ok_or_else(|| "the catalogue is stopping".to_owned())?;
        catalog.acts_for_people(&tool).await?;
        let now_ms = ticket::ms(now);
        if request.expires_ms <= now_ms {
            return Err("the call it is for has already ended (expires_ms is past)".into());
        }
        let claims = Claims {
            v: 1,
            iss: self.public_key(),
            sub: person.to_string(),
            aud: request.audience,
            tool: tool.to_string(),
            call: uuid::Uuid::new_v4().simple().to_string(),
            iat: now_ms,
            exp: request.expires_ms.min(ticket::ms(now + LONGEST)),
            may,
        };
        ticket::sign(&claims, &self.key).map_err(|e| format!("cannot sign: {e}"))
    }
}

/// Who sent `msg`, as nats-server stamped them; or why nobody can be named.
fn stamped(msg: &Message) -> Result<Caller, String> {
    identify(
        msg.headers.as_ref(),
        msg.description.as_deref(),
        Layout::Accounts,
        Route::Direct,
        &msg.subject,
    )
    .map_err(|e| e.to_string())
}

/// The issuer's verbs' subscriptions.
pub(crate) struct Verbs {
    issue: Subscriber,
    keys: Subscriber,
    ended: Subscriber,
    current: Subscriber,
}

/// Subscribes the issuer's verbs (before the catalogue says it serves).
pub(crate) async fn subscribe(client: &Client) -> Result<Verbs, IssuerError> {
    let sub = |subject: &'static str| async move {
        client
            .queue_subscribe(subject, catalog::MODULE.to_owned())
            .await
            .map_err(|e| IssuerError::Subscribe {
                subject,
                why: e.to_string(),
            })
    };
    Ok(Verbs {
        issue: sub(ISSUE_SUBJECT).await?,
        keys: sub(KEYS_SUBJECT).await?,
        ended: sub(ENDED_SUBJECT).await?,
        current: sub(CURRENT_SUBJECT).await?,
    })
}

/// The ids of ended tickets this instance knows (its own ends, and every instance's through
/// the bucket's watch), each with when it was learnt: `current` is answered from here, so a
/// flood of questions costs no read of the bucket.
#[derive(Default)]
struct Known {
    ids: std::sync::Mutex<HashMap<String, Instant>>,
    /// Whether the bucket's history has been read: before, this instance cannot say that a
    /// ticket's call still runs (a fresh instance would otherwise answer "not ended" of every
    /// end another instance kept).
    caught_up: std::sync::atomic::AtomicBool,
}

impl Known {
    fn contains(&self, call: &str) -> bool {
        self.ids
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .contains_key(call)
    }

    fn insert(&self, call: String) {
        let mut known = self.ids.lock().unwrap_or_else(|p| p.into_inner());
        // Those no ticket can outlive go first: what is kept is an hour's ends at most.
        if known.len() >= 65_536 {
            let now = Instant::now();
            known.retain(|_, at| now.duration_since(*at) < LONGEST + 2 * SKEW);
        }
        known.insert(call, Instant::now());
    }
}

/// Whether ticket `call` ended, as this instance knows.
fn current(known: &Known, request: &[u8]) -> Current {
    let refuse = |call: String, why: String| Current {
        call,
        ended: None,
        error: Some(why),
    };
    let asked = (request.len() <= 256)
        .then(|| serde_json::from_slice::<Current>(request).ok())
        .flatten();
    let Some(asked) = asked else {
        return refuse(
            String::new(),
            "not a question: send {\"call\": \"<the ticket's call id>\"}".into(),
        );
    };
    // A ticket's id is a uuid (the issuer writes its 32 hex digits); only such text is
    // a key of the bucket.
    if asked.call.is_empty()
        || asked.call.len() > 64
        || !asked
            .call
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-')
    {
        return refuse(asked.call, "not a ticket's call id".into());
    }
    if known.contains(&asked.call) {
        return Current {
            ended: Some(true),
            call: asked.call,
            error: None,
        };
    }
    if !known.caught_up.load(std::sync::atomic::Ordering::Acquire) {
        return refuse(
            asked.call,
            format!("the issuer has not read its {ENDED_BUCKET} yet; ask again in a moment"),
        );
    }
    Current {
        ended: Some(false),
        call: asked.call,
        error: None,
    }
}

/// Learns every instance's ends from the bucket, its history first.
async fn watch_ended(ended: kv::Store, known: Arc<Known>) {
    let mut watch = match ended.watch_with_history(">").await {
        Ok(w) => w,
        Err(e) => {
            tracing::warn!("cannot watch the ended tickets ({ENDED_BUCKET}): {e}");
            return;
        }
    };
    let caught_up = || {
        known
            .caught_up
            .store(true, std::sync::atomic::Ordering::Release)
    };
    // An empty bucket has no history to wait for; otherwise the last of it says so.
    if ended.status().await.is_ok_and(|s| s.values() == 0) {
        caught_up();
    }
    while let Some(entry) = watch.next().await {
        match entry {
            Ok(e) => {
                if e.operation == kv::Operation::Put {
                    known.insert(e.key);
                }
                if e.delta == 0 {
                    caught_up();
                }
            }
            Err(e) => tracing::debug!("the ended tickets' watch: {e}"),
        }
    }
}

/// Answers the issuer's verbs until the subscriptions end, each verb on a task of its own
/// (a flood of one holds up none of the others) and each in turn by caller (a flood of one
/// caller's holds up nobody else's).
pub(crate) async fn serve(
    issuer: Arc<Issuer>,
    client: Client,
    verbs: Verbs,
    ended: kv::Store,
    catalog: std::sync::Weak<crate::Catalog>,
) {
    let Verbs {
        issue,
        keys,
        ended: ends,
        current: asks,
    } = verbs;
    let known = Arc::new(Known::default());
    let watching = tokio::spawn(watch_ended(ended.clone(), known.clone()));
    let questions = {
        let known = known.clone();
        in_turn(
            client.clone(),
            "the ticket verb current",
            PER_MODULE,
            asks,
            move |msg| {
                let body = serde_json::to_vec(&current(&known, &msg.payload))
                    .expect("an answer serialises");
                async move { (msg, body) }
            },
        )
    };
    let endings = {
        let (issuer, known) = (issuer.clone(), known.clone());
        in_turn(
            client.clone(),
            "the ticket verb ended",
            PER_MODULE,
            ends,
            move |msg| {
                let (issuer, known, ended) = (issuer.clone(), known.clone(), ended.clone());
                async move {
                    let said = issuer.end(&msg, &ended, &known).await;
                    (
                        msg,
                        serde_json::to_vec(&said).expect("an answer serialises"),
                    )
                }
            },
        )
    };
    let keys_reply = serde_json::to_vec(&KeysReply {
        keys: vec![issuer.public_key()],
    })
    .expect("keys serialise");
    let keys = in_turn(
        client.clone(),
        "the ticket verb keys",
        PER_CALLER,
        keys,
        move |msg| {
            let body = keys_reply.clone();
            async move { (msg, body) }
        },
    );
    let issuing = in_turn(
        client,
        "the ticket verb issue",
        PER_CALLER,
        issue,
        move |msg| {
            let (issuer, catalog) = (issuer.clone(), catalog.clone());
            async move {
                let reply = match issuer.issue(&msg, SystemTime::now(), &catalog).await {
                    Ok(t) => IssueReply {
                        ticket: Some(t),
                        error: None,
                    },
                    Err(why) => {
                        tracing::info!(subject = %msg.subject, "no ticket: {why}");
                        IssueReply {
                            ticket: None,
                            error: Some(why),
                        }
                    }
                };
                (msg, serde_json::to_vec(&reply).expect("a reply serialises"))
            }
        },
    );
    let _ = issuing.await;
    for task in [watching, questions, endings, keys] {
        task.abort();
    }
}

/// Answers one verb's requests with what `answer` makes of each, in turn by caller, on a
/// task of its own (the tickets' verbs and the tasks').
pub(crate) fn in_turn<A, F>(
    client: Client,
    what: &'static str,
    per_caller: usize,
    requests: Subscriber,
    mut answer: A,
) -> tokio::task::JoinHandle<()>
where
    A: FnMut(Message) -> F + Send + 'static,
    F: std::future::Future<Output = (Message, Vec<u8>)> + Send,
{
    tokio::spawn(async move {
        let publisher = client.clone();
        answer_in_turn(
            client,
            what,
            per_caller,
            requests,
            |msg| caller_key(msg, Layout::Accounts),
            |msg| {
                let made = answer(msg);
                let client = publisher.clone();
                async move {
                    let (msg, body) = made.await;
                    let Some(reply) = msg.reply else { return };
                    if let Err(e) = client.publish(reply, body.into()).await {
                        tracing::warn!("cannot answer on {}: {e}", msg.subject);
                    }
                }
            },
        )
        .await
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_kept_key_is_the_same_key() {
        let dir = std::env::temp_dir().join(format!("mesh-issuer-{}", std::process::id()));
        let path = dir.join("tickets.nk");
        let a = Issuer::load_or_create(&path).unwrap();
        let b = Issuer::load_or_create(&path).unwrap();
        assert_eq!(a.public_key(), b.public_key());
        std::fs::write(&path, "not a seed").unwrap();
        assert!(matches!(
            Issuer::load_or_create(&path),
            Err(IssuerError::Seed { .. })
        ));
        let _ = std::fs::remove_dir_all(dir);
    }
}
