//! The mesh client: connect the NATS way, list a module's tools, call a tool and learn which
//! of the outcomes happened — result, tool error, nobody serves, denied, slow, or no bus.

mod access;
#[cfg(feature = "clap")]
mod args;
mod claim;
mod connect;
mod conversation;
mod denials;
mod discovery;
mod exit;
mod features;
mod kept;
mod progress;
mod selection;
mod task;
mod typed;
mod watch;
mod yours;

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use async_nats::client::RequestErrorKind;
use async_nats::connection::State;
use async_nats::header::HeaderName;
use async_nats::{HeaderMap, Message};
use bytes::Bytes;
use serde_json::Value;

pub use access::Access;
#[cfg(feature = "clap")]
pub use args::ConnectArgs;
pub use connect::{
    ConnectConfig, ConnectError, Context, ID_TOKEN_ENV, Resolved, on_this_machine, select_context,
    write_private,
};
pub use conversation::{Asked, Asker, Ended, converse, converse_feature};
use denials::{Denial, Denials};
pub use discovery::{CATALOG_MODULES, Discovery, Found, YOURS_META};
pub use discovery::{
    catalog_args, catalog_entries, catalog_name, catalog_next, catalog_page_args, catalogue_pages,
};
pub use exit::{EXIT_CODES_HELP, Exit, said};
pub use features::{FeatureCallError, Features, ListKind, MODULE_META, Page};
pub use kept::Kept;
pub use selection::{Selection, SelectionError, ranked};
pub use task::{TaskCall, TaskError};
pub use typed::{Listed, NoSuchTool, Typed, TypedCall};
pub use watch::{MAX_WATCHED, Watch, WatchError};
pub use yours::PublishRuleError;

use crate::subjects::calllog;
use crate::subjects::limits;
use crate::subjects::ticket::{self, Ticket};
use crate::subjects::{
    self, FullName, HEADER_DEADLINE, HEADER_ON_BEHALF_OF, HEADER_PROGRESS, ToolResult, ToolsReply,
};
use crate::telemetry;

/// A call that did not end in a result from the tool. A tool error is not one of these: it
/// is a [`ToolResult`] with `is_error` set, since the tool did run.
#[derive(Debug, thiserror::Error)]
pub enum CallError {
    #[error(
        "nobody serves {target}: it is not running or not installed; ask whoever runs the module"
    )]
    NobodyServes { target: String },
    #[error(
        "not yours: this credential may not call {target} (publish to {subject} denied); ask whoever grants permissions"
    )]
    Denied { target: String, subject: String },
    /// Nobody answered a call, but the tool's module answers its tools verb and has the
    /// tool: the bus dropped the call in silence, as it does through a leaf node for a
    /// subject its user may not publish to.
    #[error(
        "not yours: module {module} answers, but no call to {target} reaches it from this connection (through a leaf node, a tool that is not yours to call reads so; or its instances stopped just now); ask whoever grants permissions"
    )]
    Unreached { target: String, module: String },
    #[error(
        "no reply can reach this credential: subscribing to its inbox {inbox} was denied; connect with the inbox prefix it may use (--inbox-prefix, or the context's inbox_prefix)"
    )]
    InboxDenied { inbox: String },
    #[error("{target} is served but did not answer within {}", secs(*after))]
    Slow { target: String, after: Duration },
    /// The module refused the call for load: this caller's share of it is in use, or their
    /// calls a minute are spent. Nothing ran; try again after `retry_after`.
    #[error("{message}")]
    Busy {
        target: String,
        retry_after: Duration,
        message: String,
    },
    #[error("the bus is not reachable: no answer from {target} within {} while the connection is down", secs(*after))]
    Disconnected { target: String, after: Duration },
    #[error(
        "the bus is not reachable: the connection is down, so {target} was not called; check that nats-server runs, or try again when it is back"
    )]
    NotConnected { target: String },
    #[error(
        "the connection to the bus was lost while waiting for {target}: it may or may not have run; call again when the bus is back"
    )]
    ConnectionLost { target: String },
    #[error("the request to {target} is too large for the bus: {why}")]
    TooLarge { target: String, why: String },
    #[error("request to {target} failed: {why}")]
    Connection { target: String, why: String },
    #[error("{target} answered something that is not a valid reply: {why}")]
    BadReply { target: String, why: String },
    /// The tool acts for its caller toward other modules, and the mesh's issuer would not
    /// (or could not: it is not there) give this credential a ticket for the call. The tool
    /// did not run.
    #[error(
        "{target} acts for you toward other modules, and the mesh gave no ticket for the call: {why}"
    )]
    NoTicket { target: String, why: String },
    /// A failure a console reported for the bus behind it, in its words.
    #[error("{message}")]
    Relayed { outcome: Outcome, message: String },
}

/// The outcome classes a surface tells apart (and `mesh call` maps to exit codes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Result,
    ToolError,
    NobodyServes,
    Denied,
    Slow,
    Busy,
    Connection,
}

impl Outcome {
    /// The outcome's name on the wire (the console's `_meta`, `--json` output).
    pub fn name(self) -> &'static str {
        match self {
            Outcome::Result => "result",
            Outcome::ToolError => "tool_error",
            Outcome::NobodyServes => "nobody_serves",
            Outcome::Denied => "denied",
            Outcome::Slow => "slow",
            Outcome::Busy => "busy",
            Outcome::Connection => "connection",
        }
    }

    pub fn from_name(name: &str) -> Option<Outcome> {
        [
            Outcome::Result,
            Outcome::ToolError,
            Outcome::NobodyServes,
            Outcome::Denied,
            Outcome::Slow,
            Outcome::Busy,
            Outcome::Connection,
        ]
        .into_iter()
        .find(|o| o.name() == name)
    }
}

impl CallError {
    pub fn outcome(&self) -> Outcome {
        match self {
            CallError::NobodyServes { .. } => Outcome::NobodyServes,
            CallError::Denied { .. } | CallError::Unreached { .. } => Outcome::Denied,
            CallError::Slow { .. } => Outcome::Slow,
            CallError::Busy { .. } => Outcome::Busy,
            CallError::Relayed { outcome, .. } => *outcome,
            CallError::InboxDenied { .. }
            | CallError::Disconnected { .. }
            | CallError::NotConnected { .. }
            | CallError::ConnectionLost { .. }
            | CallError::TooLarge { .. }
            | CallError::NoTicket { .. }
            | CallError::Connection { .. }
            | CallError::BadReply { .. } => Outcome::Connection,
        }
    }
}

/// The outcome of a finished call.
pub fn outcome(result: &Result<ToolResult, CallError>) -> Outcome {
    match result {
        Ok(r) if r.is_error => Outcome::ToolError,
        Ok(_) => Outcome::Result,
        Err(e) => e.outcome(),
    }
}

/// The deepest cause of an error, once: async-nats (and reqwest) say the I/O error at every
/// level of their chains.
pub fn innermost(e: &(dyn std::error::Error + 'static)) -> String {
    let mut at = e;
    while let Some(next) = at.source() {
        at = next;
    }
    at.to_string()
}

fn secs(d: Duration) -> String {
    format!("{:.1} s", d.as_secs_f64())
}

/// How long a call waits for a connection that is being made before saying the bus is not
/// reachable.
const CONNECT_GRACE: Duration = Duration::from_secs(1);

// Header names made once: a name given as a string is checked and copied on every insert.
const DEADLINE_NAME: HeaderName = HeaderName::from_static(HEADER_DEADLINE);
const ON_BEHALF_OF_NAME: HeaderName = HeaderName::from_static(HEADER_ON_BEHALF_OF);
const PROGRESS_NAME: HeaderName = HeaderName::from_static(HEADER_PROGRESS);
const TICKET_NAME: HeaderName = HeaderName::from_static(ticket::HEADER_TICKET);
const CALL_NAME: HeaderName = HeaderName::from_static(subjects::HEADER_CALL);
const CANCEL_NAME: HeaderName = HeaderName::from_static(subjects::HEADER_CANCEL);

/// The longest a denied call's report waits to learn its own user name (off the call's way).
const REPORT_USER_WITHIN: Duration = Duration::from_secs(1);

/// A call's cancel, sent to its module's cancel verb when dropped armed: the caller gave up
/// before the answer came. It borrows what it needs: a call answered costs it nothing.
struct GiveUp<'a> {
    nats: &'a async_nats::Client,
    /// The call's own subject; the cancel goes beside it.
    subject: &'a str,
    id: String,
    on_behalf: Option<&'a str>,
    armed: bool,
}

/// A call id: this process's random prefix and a count, unique without a system call each.
fn call_id() -> String {
    static PREFIX: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    static COUNT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let prefix = PREFIX.get_or_init(|| uuid::Uuid::new_v4().simple().to_string()[..16].to_owned());
    let n = COUNT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    format!("{prefix}{n:x}")
}

impl Drop for GiveUp<'_> {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        // Sent from a task: a drop cannot wait. Outside a runtime there is nobody to send it.
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        // The module's cancel verb beside the tool: `mesh(-obo).<module>.cancel`.
        let subject = match self.subject.rsplit_once('.') {
            Some((module, _)) => format!("{module}.{}", subjects::CANCEL_VERB),
            None => return,
        };
        let mut headers = HeaderMap::new();
        headers.insert(CANCEL_NAME, self.id.as_str());
        if let Some(person) = self.on_behalf {
            headers.insert(ON_BEHALF_OF_NAME, person);
        }
        let nats = self.nats.clone();
        runtime.spawn(async move {
            let _ = nats
                .publish_with_headers(subject, headers, Bytes::new())
                .await;
        });
    }
}

/// The person a module calls for, and the ticket that person's call gave it.
struct OnBehalf {
    person: String,
    ticket: String,
}

/// Says, when dropped, that the call a ticket was got for has ended (its answer came, or it
/// was given up): the issuer then lets no module act on it.
struct Ending {
    nats: async_nats::Client,
    ticket: String,
}

impl Ending {
    fn new(nats: &async_nats::Client, ticket: &str) -> Ending {
        Ending {
            nats: nats.clone(),
            ticket: ticket.to_owned(),
        }
    }

    fn body(&mut self) -> Vec<u8> {
        serde_json::to_vec(&ticket::Ended {
            ticket: std::mem::take(&mut self.ticket),
        })
        .expect("an end serialises")
    }

    /// Says it until the issuer takes it, waiting a moment for that before the call's answer
    /// is handed on (a command may end right after; if it does not, the saying goes on).
    /// Bounded: a connection that is down (the call failed for it) does not hold the call's
    /// outcome up; the module's runtime says the end too.
    async fn end(mut self) {
        let body = self.body();
        let nats = self.nats.clone();
        let saying = tokio::spawn(async move { ticket::say_ended(&nats, body.into()).await });
        let _ = tokio::time::timeout(Duration::from_millis(500), saying).await;
    }
}

impl Ending {
    /// [`Ending::end`], unless the answer says the call became a task: its module's runtime
    /// says the end when the task ends.
    async fn end_unless_taken(mut self, answer: &Result<Message, CallError>) {
        let taken = answer.as_ref().is_ok_and(|m| {
            m.headers
                .as_ref()
                .is_some_and(|h| h.get(subjects::task::HEADER_TASK).is_some())
        });
        if taken {
            self.ticket.clear();
        } else {
            self.end().await;
        }
    }
}

impl Drop for Ending {
    fn drop(&mut self) {
        if self.ticket.is_empty() {
            return;
        }
        let body = self.body();
        let nats = self.nats.clone();
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move { ticket::say_ended(&nats, body.into()).await });
        }
    }
}

/// The tools that act for their caller, as they said so ("ticket required").
#[derive(Default)]
struct Ticketed(std::sync::RwLock<std::collections::HashSet<String>>);

impl Ticketed {
    fn needs(&self, tool: &FullName) -> bool {
        let known = self.0.read().unwrap_or_else(|p| p.into_inner());
        !known.is_empty() && known.contains(tool.as_str())
    }

    fn learn(&self, tool: &FullName) {
        let mut known = self.0.write().unwrap_or_else(|p| p.into_inner());
        // Bounded: a hostile module answering 401 for tool after tool grows it no further.
        if known.len() < 1024 {
            known.insert(tool.to_string());
        }
    }
}

/// A connection to the bus that calls tools.
#[derive(Clone)]
pub struct Client {
    nats: async_nats::Client,
    /// Calls in flight, woken by a permission violation or by the connection going down
    /// (from the connection's own events: a call learns at once that the bus went away
    /// instead of at its deadline).
    denials: Arc<Denials>,
    /// For whom this client calls, and the ticket that lets it (`for_person`).
    on_behalf: Option<Arc<OnBehalf>>,
    /// The tools that answered "ticket required": calls to them get a ticket first.
    ticketed: Arc<Ticketed>,
    send_deadline: bool,
    /// This connection's user name, once the server has said it (for progress subjects).
    user: Arc<tokio::sync::OnceCell<String>>,
    /// Where nats-server sends its trace of this client's tool calls, if asked.
    traced: Option<Arc<Traced>>,
    /// The tools read, by digest: each module's schemas read once per change.
    kept: Arc<Kept>,
    /// The tools this client's calls are typed by (`Mesh-Tools`), and whether the module
    /// said they are its own.
    typed_by: Option<Arc<TypedBy>>,
    /// Where the resources listed so far go (`features.rs`).
    routes: Arc<features::Routes>,
    /// The task this client's tool calls are offered as (`Mesh-Task`, `task.rs`).
    offered_task: Option<Arc<str>>,
}

/// The digest of the tools a client's calls are typed by, sent on each call as `Mesh-Tools`.
#[derive(Debug)]
pub struct TypedBy {
    digest: String,
    checked: std::sync::atomic::AtomicBool,
    changed: std::sync::atomic::AtomicBool,
}

impl TypedBy {
    /// Whether a module answered a call saying these are its tools.
    pub fn checked(&self) -> bool {
        self.checked.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Whether a module answered a call naming other tools as its own: in its answer's
    /// headers, which the module's runtime writes and no handler can.
    pub fn changed(&self) -> bool {
        self.changed.load(std::sync::atomic::Ordering::Relaxed)
    }

    pub fn digest(&self) -> &str {
        &self.digest
    }
}

/// A client's tool calls traced by nats-server (`Nats-Trace-Dest`, 2.11+): where the trace
/// goes, and what the module said of its own time on the last call (`Mesh-Timing`).
#[derive(Debug)]
pub struct Traced {
    dest: String,
    timing: std::sync::Mutex<Option<String>>,
    took: std::sync::Mutex<Option<Duration>>,
}

impl Traced {
    /// How long the last traced call took, from its request to its answer (or failure).
    pub fn took(&self) -> Option<Duration> {
        *self.took.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The module's `Mesh-Timing` on the last traced call's answer (`run;dur=<ms>`).
    pub fn timing(&self) -> Option<String> {
        self.timing
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }
}

impl Client {
    /// Connects with the given settings, watching for permission violations.
    pub async fn connect(config: &ConnectConfig) -> Result<Client, ConnectError> {
        let resolved = config.resolve()?;
        // Operator mode: callers are stamped by account key, named by the mesh's file.
        crate::actor::learn_accounts_for(resolved.creds.as_deref());
        let denials = Arc::new(Denials::default());
        let watcher = denials.clone();
        let mut opts = resolved.options().await?.event_callback(move |event| {
            watcher.on_event(&event);
            async {}
        });
        if let Some(name) = &config.name {
            opts = opts.name(name);
        }
        if config.retry_initial {
            opts = opts.retry_on_initial_connect();
        }
        let connected = opts.connect(resolved.servers.as_slice()).await;
        let nats = match connected {
            Ok(nats) => nats,
            // Signing in with an ID token: the server says only "authorization violation".
            Err(source)
                if source.kind() == async_nats::ConnectErrorKind::AuthorizationViolation
                    && resolved.id_token.is_some() =>
            {
                let token = resolved.id_token_text().await?.unwrap_or_default();
                return Err(ConnectError::SignIn {
                    servers: resolved.servers.join(","),
                    why: connect::sign_in_refusal(&token),
                });
            }
            // TLS asked for the token's sake, and the server did not speak it.
            Err(source)
                if resolved.id_token_needs_tls()
                    && source.kind() == async_nats::ConnectErrorKind::Tls =>
            {
                return Err(ConnectError::IdTokenInTheClear {
                    servers: resolved.servers.join(","),
                    why: innermost(&source),
                });
            }
            Err(source) => {
                return Err(ConnectError::Connect {
                    servers: resolved.servers.join(","),
                    why: innermost(&source),
                    hint: resolved.hint.clone(),
                });
            }
        };
        // A user name given is the one the server knows the connection by: no need to ask.
        let user = Arc::new(match resolved.user.clone().filter(|u| !u.is_empty()) {
            Some(u) => tokio::sync::OnceCell::new_with(Some(u)),
            None => tokio::sync::OnceCell::new(),
        });
        Ok(Client {
            nats,
            denials,
            on_behalf: None,
            ticketed: Arc::default(),
            send_deadline: true,
            user,
            traced: None,
            kept: Arc::default(),
            typed_by: None,
            routes: Arc::default(),
            offered_task: None,
        })
    }

    /// Resolves to `true` when the server refuses this client's next publish on `subject`
    /// (watched from now: call it before publishing), `false` when the connection is lost.
    pub fn refused(&self, subject: &str) -> impl Future<Output = bool> + Send + 'static {
        let watch = self.denials.watch(subject);
        async move {
            let mut watch = watch;
            matches!((&mut watch.rx).await, Ok(Denial::Publish))
        }
    }

    /// A client that keeps the tools it reads in `kept` (say, on disk for the next
    /// command) instead of its own memory.
    pub fn keeping(self, kept: Arc<Kept>) -> Client {
        Client { kept, ..self }
    }

    /// A client whose calls say they were typed by the tools of `digest` (`Mesh-Tools`): a
    /// module with other tools refuses them unrun ([`ToolResult::tools_changed`]).
    pub fn typed_by(&self, digest: &str) -> (Client, Arc<TypedBy>) {
        let typed_by = Arc::new(TypedBy {
            digest: digest.to_owned(),
            checked: std::sync::atomic::AtomicBool::new(false),
            changed: std::sync::atomic::AtomicBool::new(false),
        });
        let client = Client {
            typed_by: Some(typed_by.clone()),
            ..self.clone()
        };
        (client, typed_by)
    }

    /// What this client keeps of the tools it read.
    pub fn kept(&self) -> &Arc<Kept> {
        &self.kept
    }

    /// The underlying NATS connection (for serving modules and plain requests).
    pub fn nats(&self) -> &async_nats::Client {
        &self.nats
    }

    /// A client whose calls are made for the person `ticket` names, while the call that
    /// gave it is served: on the tools' `mesh-obo` subjects, with `Mesh-On-Behalf-Of` and the
    /// ticket. Only a module whose grant reaches those subjects gets through (else the call
    /// is denied), and only with a ticket issued to that module (else it is refused); see
    /// `subjects/README.md`, "Tickets".
    pub fn for_person(&self, ticket: &Ticket) -> Client {
        Client {
            on_behalf: Some(Arc::new(OnBehalf {
                person: ticket.person.to_string(),
                ticket: ticket.raw.clone(),
            })),
            ..self.clone()
        }
    }

    /// A client whose tool calls nats-server traces to `dest` (a subject this client hears):
    /// every server a call crosses sends its events there.
    pub fn tracing_to(&self, dest: &str) -> (Client, Arc<Traced>) {
        let traced = Arc::new(Traced {
            dest: dest.to_owned(),
            timing: std::sync::Mutex::new(None),
            took: std::sync::Mutex::new(None),
        });
        let client = Client {
            traced: Some(traced.clone()),
            ..self.clone()
        };
        (client, traced)
    }

    /// A client whose calls tell the tool when they stop waiting (`Mesh-Deadline`), so a
    /// long-running tool can give up early. The default.
    pub fn sending_deadline(&self) -> Client {
        Client {
            send_deadline: true,
            ..self.clone()
        }
    }

    /// A client whose calls carry no `Mesh-Deadline` (a message without headers costs the
    /// server and both clients less: for callers that measure the bus itself).
    pub fn without_deadline(&self) -> Client {
        Client {
            send_deadline: false,
            ..self.clone()
        }
    }

    /// Calls a tool and waits at most `deadline` for its result.
    pub async fn call(
        &self,
        tool: &FullName,
        args: &Value,
        deadline: Duration,
    ) -> Result<ToolResult, CallError> {
        self.call_reporting(tool, args, deadline, None).await
    }

    /// A call whose reports, if `progress` names where to send them, go there.
    async fn call_reporting(
        &self,
        tool: &FullName,
        args: &Value,
        deadline: Duration,
        progress: Option<&str>,
    ) -> Result<ToolResult, CallError> {
        // Bytes, so that a call made again with a ticket costs no copy of its body.
        let body = Bytes::from(serde_json::to_vec(args).expect("a JSON value always serialises"));
        let started = std::time::Instant::now();
        let msg = match &self.on_behalf {
            None => self.direct(tool, body, deadline, progress).await?,
            Some(_) => {
                let subject = subjects::obo_subject(tool.module(), tool.tool());
                self.request_with(tool, &subject, body, deadline, None, None, true)
                    .await?
            }
        };
        let mut result: ToolResult =
            serde_json::from_slice(&msg.payload).map_err(|e| CallError::BadReply {
                target: tool.to_string(),
                why: format!("not a CallToolResult: {e}"),
            })?;
        // Larger than one message: the answer is a claim, and the result is fetched.
        if claim::is_claim(&msg) {
            // Boxed, as the other rare steps of a call: a call's future stays the size of its
            // common path (it is moved whole by whoever awaits it).
            result = Box::pin(self.fetch_claimed(tool, &result, started, deadline)).await?;
        }
        // Refused for load: not a tool error (nothing ran), a failure kind of its own.
        if result.is_error
            && let Some(retry_after) = limits::retry_after(msg.headers.as_ref())
        {
            return Err(CallError::Busy {
                target: tool.to_string(),
                retry_after,
                message: result.text_content(),
            });
        }
        Ok(result)
    }

    /// Takes it that `tool` acts for its caller (its spec's `_meta` says so): its calls ask
    /// for a ticket first instead of learning it from the tool's first answer.
    pub fn expect_ticket(&self, tool: &FullName) {
        self.ticketed.learn(tool);
    }

    /// A call on the tool's own subject: with a ticket when the tool's listing says it acts
    /// for its caller (learnt from the listing before the call, or checked there after the
    /// tool's first "ticket required" answer, which comes before the tool runs: the call is
    /// then made again with a ticket). A "ticket required" from a tool whose listing does not
    /// say so gets no ticket: a module cannot collect people's tickets by asking. Every
    /// ticket is said to have ended once its call has (`Ending`).
    async fn direct(
        &self,
        tool: &FullName,
        body: Bytes,
        deadline: Duration,
        progress: Option<&str>,
    ) -> Result<Message, CallError> {
        let started = std::time::Instant::now();
        // A call that may become a task asks a ticket for as long as a task runs; if it does,
        // the module's runtime says when it ended (task.rs), not this client at its answer.
        let lives = match self.offered_task {
            Some(_) => ticket::LONGEST,
            None => deadline,
        };
        let mut ticket = None;
        if self.ticketed.needs(tool) {
            ticket = Some(Box::pin(self.ticket(tool, lives)).await?);
        }
        let ending = ticket.as_ref().map(|t| Ending::new(&self.nats, t));
        let msg = self
            .request_with(
                tool,
                tool.subject(),
                body.clone(),
                deadline,
                progress,
                ticket.as_deref(),
                true,
            )
            .await;
        if let Some(ending) = ending {
            ending.end_unless_taken(&msg).await;
        }
        let msg = msg?;
        if ticket.is_some() || !ticket::asks_for_ticket(msg.headers.as_ref()) {
            return Ok(msg);
        }
        let left = deadline.saturating_sub(started.elapsed());
        if !Box::pin(self.says_it_acts_for_people(tool, left)).await {
            tracing::warn!(%tool, "the tool asked for a ticket, but its listing does not say it acts for people: none given");
            return Ok(msg);
        }
        self.ticketed.learn(tool);
        let left = deadline.saturating_sub(started.elapsed());
        let lives = match self.offered_task {
            Some(_) => ticket::LONGEST,
            None => left,
        };
        let ticket = Box::pin(self.ticket(tool, lives)).await?;
        let ending = Ending::new(&self.nats, &ticket);
        let left = deadline.saturating_sub(started.elapsed());
        let msg = self
            .request_with(
                tool,
                tool.subject(),
                body,
                left,
                progress,
                Some(&ticket),
                true,
            )
            .await;
        ending.end_unless_taken(&msg).await;
        msg
    }

    /// Whether `tool`'s module lists it as acting for its caller (`_meta`), asked within
    /// `within`; a module that does not say is taken not to.
    async fn says_it_acts_for_people(&self, tool: &FullName, within: Duration) -> bool {
        let Ok(listing) = self.listing_of(tool.module(), within).await else {
            return false;
        };
        listing
            .tools
            .iter()
            .find(|t| t.name == tool.tool())
            .and_then(|t| t.to_spec().ok())
            .and_then(|s| s.meta)
            .and_then(|m| {
                m.get(ticket::ACTS_FOR_PEOPLE_META)
                    .and_then(|v| v.as_bool())
            })
            == Some(true)
    }

    /// A ticket for one call of `tool`, from the mesh's issuer, ending with the call.
    async fn ticket(&self, tool: &FullName, deadline: Duration) -> Result<String, CallError> {
        let request = ticket::IssueRequest {
            audience: tool.module().to_owned(),
            tool: tool.to_string(),
            expires_ms: ticket::ms(SystemTime::now() + deadline),
        };
        let body = serde_json::to_vec(&request).expect("a ticket request serialises");
        let target = format!("the ticket issuer ({}) for {tool}", ticket::ISSUE_SUBJECT);
        // The issuer's own failure is not the tool's: whatever it is, the call could not be
        // made (the mesh's service is missing), never "nobody serves" the tool.
        // Busy stays busy: the issuer answers in turn by caller, and says so past a queue.
        let msg = self
            .request(&target, ticket::ISSUE_SUBJECT, body, deadline)
            .await
            .map_err(|e| match e {
                CallError::Busy { .. } => e,
                e => CallError::NoTicket {
                    target: tool.to_string(),
                    why: e.to_string(),
                },
            })?;
        let reply: ticket::IssueReply =
            serde_json::from_slice(&msg.payload).map_err(|e| CallError::BadReply {
                target: target.clone(),
                why: format!("not a ticket reply: {e}"),
            })?;
        match reply {
            ticket::IssueReply {
                ticket: Some(t), ..
            } => Ok(t),
            ticket::IssueReply { error, .. } => Err(CallError::NoTicket {
                target: tool.to_string(),
                why: error.unwrap_or_else(|| "the issuer said nothing".into()),
            }),
        }
    }

    /// Asks a module's `tools` verb for its tools.
    pub async fn tools(&self, module: &str, deadline: Duration) -> Result<ToolsReply, CallError> {
        self.tools_as(module, deadline).await
    }

    /// The module's tools as its `tools` verb answers them, their schemas left as text.
    pub async fn listing_of(
        &self,
        module: &str,
        deadline: Duration,
    ) -> Result<crate::subjects::Listing, CallError> {
        self.tools_as(module, deadline).await
    }

    /// The `tools` verb's reply read as `T`: trees of the schemas ([`ToolsReply`]), or their
    /// text ([`crate::subjects::Listing`], for discovery).
    async fn tools_as<T: serde::de::DeserializeOwned>(
        &self,
        module: &str,
        deadline: Duration,
    ) -> Result<T, CallError> {
        let target = format!("module {module}");
        let subject = subjects::tools_subject(module);
        let msg = self
            .request(&target, &subject, Vec::new(), deadline)
            .await?;
        serde_json::from_slice(&msg.payload).map_err(|e| CallError::BadReply {
            target,
            why: format!("not a tools reply: {e}"),
        })
    }

    /// One request, raced against a permission violation on its subject, the connection
    /// going down, and the deadline.
    /// `target` names what was called in messages; it is formatted only when one is needed.
    async fn request(
        &self,
        target: &(dyn std::fmt::Display + Sync),
        subject: &str,
        body: impl Into<Bytes>,
        deadline: Duration,
    ) -> Result<Message, CallError> {
        let msg = self
            .request_with(target, subject, body, deadline, None, None, false)
            .await?;
        // Refused for load (the verbs answer in turn by caller, and past a caller's queue
        // say busy): its own kind, never a reply that does not parse.
        if let Some(retry_after) = limits::retry_after(msg.headers.as_ref()) {
            let message = serde_json::from_slice::<ToolResult>(&msg.payload)
                .map(|r| r.text_content())
                .unwrap_or_else(|_| String::from_utf8_lossy(&msg.payload).into_owned());
            return Err(CallError::Busy {
                target: target.to_string(),
                retry_after,
                message,
            });
        }
        Ok(msg)
    }

    /// Tells the call log the bus refused this caller's publish on `subject`: nats-server
    /// says so to the caller alone, so the caller's report is all the log can have of it.
    /// Sent at once under a user name the connection was made with; otherwise the name is
    /// asked of the server from a task of its own, so the denial is never held up by it.
    fn report_denied<'a>(
        &'a self,
        subject: &str,
        call: Option<&str>,
    ) -> std::pin::Pin<Box<dyn Future<Output = ()> + Send + 'a>> {
        let report = calllog::Report {
            subject: subject.to_owned(),
            call: call.map(str::to_owned),
            at: calllog::now(),
            outcome: calllog::Said::Denied,
        };
        let body: Bytes = serde_json::to_vec(&report)
            .expect("a report always serialises")
            .into();
        // Boxed: learning the name is a request, whose future would hold this one's type.
        Box::pin(async move {
            if let Some(user) = self.user.get() {
                self.send_report(user, body).await;
                return;
            }
            let me = self.clone();
            tokio::spawn(async move {
                let user = me.own_user(REPORT_USER_WITHIN).await;
                me.send_report(&user, body).await;
            });
        })
    }

    /// Publishes a report under `user`, the one subject of the log its permissions allow.
    async fn send_report(&self, user: &str, body: Bytes) {
        if user == subjects::progress::NO_USER {
            return;
        }
        if let Err(e) = self.nats.publish(calllog::report_subject(user), body).await {
            tracing::debug!("a report for the call log was not sent: {e}");
        }
    }

    /// A request that also names where the callee may report progress (`Mesh-Progress`),
    /// and carries the caller's ticket for it. A `cancellable` one (a tool call) names itself
    /// (`Mesh-Call`) where it carries headers, and a call given up on before its answer
    /// (its deadline passed, or its future dropped: Ctrl-C, an MCP client's cancellation)
    /// tells the module so (`Mesh-Cancel`), which drops the call's handler.
    #[allow(clippy::too_many_arguments)]
    async fn request_with(
        &self,
        target: &(dyn std::fmt::Display + Sync),
        subject: &str,
        body: impl Into<Bytes>,
        deadline: Duration,
        progress: Option<&str>,
        ticket: Option<&str>,
        cancellable: bool,
    ) -> Result<Message, CallError> {
        let target = || target.to_string();
        // A bus that is down is said at once, not at the deadline — after a moment's grace
        // for a connection still being made (a relay that started before its bus).
        if self.nats.connection_state() != State::Connected {
            let grace = deadline.min(CONNECT_GRACE);
            // Woken by the connection's own state changes, not by a timer.
            let mut states = self.nats.connection_states();
            let waited =
                tokio::time::timeout(grace, states.wait_for(|s| *s == State::Connected)).await;
            if !matches!(waited, Ok(Ok(_))) {
                return Err(CallError::NotConnected { target: target() });
            }
        }
        // A tool call's span (where spans are exported) and the trace it carries: its own,
        // or the one the handler it runs in was called with, passed on.
        let span = if cancellable && telemetry::exporting() {
            tracing::info_span!(
                "send",
                otel.name = %format_args!("send {subject}"),
                otel.kind = "client",
                messaging.system = "nats",
                messaging.operation.type = "send",
                messaging.destination.name = %subject,
                error.type = tracing::field::Empty,
                otel.status_code = tracing::field::Empty,
            )
        } else {
            tracing::Span::none()
        };
        let trace = if cancellable {
            telemetry::outgoing(&span)
        } else {
            None
        };
        let started = std::time::Instant::now();
        // Registered before the request is published, so a violation or a disconnection
        // announced after this point wakes it.
        let mut watch = self.denials.watch(subject);
        // Armed until the call is answered (or refused: then nothing runs to cancel).
        let mut giving_up: Option<GiveUp> = None;
        // The whole call, its hand-over to the connection included, is bounded by one timer
        // (async-nats's own would start only once the request is handed over).
        let mut request = async_nats::Request::new()
            .payload(body.into())
            .timeout(None);
        // Headers only when there is something to say: a message with headers costs the
        // server and both clients measurably more than one without.
        let msg_trace = self.traced.as_ref().filter(|_| cancellable);
        let typed_by = self.typed_by.as_ref().filter(|_| cancellable);
        let offered_task = self.offered_task.as_deref().filter(|_| cancellable);
        if self.send_deadline
            || offered_task.is_some()
            || typed_by.is_some()
            || self.on_behalf.is_some()
            || progress.is_some()
            || ticket.is_some()
            || trace.is_some()
            || msg_trace.is_some()
        {
            let mut headers = HeaderMap::new();
            if let Some(t) = msg_trace {
                headers.insert(subjects::HEADER_TRACE_DEST, t.dest.as_str());
            }
            if let Some(t) = typed_by {
                headers.insert(subjects::HEADER_TOOLS, t.digest.as_str());
            }
            if let Some(t) = &trace {
                t.insert_into(&mut headers);
            }
            if self.send_deadline
                && let Ok(ms) =
                    (SystemTime::now() + deadline).duration_since(SystemTime::UNIX_EPOCH)
            {
                headers.insert(DEADLINE_NAME, ms.as_millis().to_string());
            }
            if let Some(on_behalf) = &self.on_behalf {
                headers.insert(ON_BEHALF_OF_NAME, on_behalf.person.as_str());
                headers.insert(TICKET_NAME, on_behalf.ticket.as_str());
            }
            if let Some(ticket) = ticket {
                headers.insert(TICKET_NAME, ticket);
            }
            if let Some(subject) = progress {
                headers.insert(PROGRESS_NAME, subject);
            }
            if let Some(id) = offered_task {
                headers.insert(subjects::task::HEADER_TASK, id);
            }
            if cancellable {
                let id = call_id();
                headers.insert(CALL_NAME, id.as_str());
                giving_up = Some(GiveUp {
                    nats: &self.nats,
                    subject,
                    id,
                    on_behalf: self.on_behalf.as_ref().map(|o| o.person.as_str()),
                    armed: true,
                });
            }
            request = request.headers(headers);
        }
        // A reply that is already there wins over news that came with it (a disconnection
        // right after the reply was read), as it always has; a denied request gets no reply,
        // so the other order never matters.
        let raced = async {
            tokio::select! {
                biased;
                reply = self.nats.send_request(subject.to_owned(), request) => match reply {
                    Ok(msg) => Ok(msg),
                    Err(e) => Err(match e.kind() {
                        RequestErrorKind::NoResponders => CallError::NobodyServes { target: target() },
                        RequestErrorKind::MaxPayloadExceeded => CallError::TooLarge { target: target(), why: e.to_string() },
                        RequestErrorKind::TimedOut => CallError::Slow { target: target(), after: deadline },
                        _ => CallError::Connection { target: target(), why: e.to_string() },
                    }),
                },
                denial = &mut watch.rx => match denial {
                    Ok(Denial::Publish) => Err(CallError::Denied { target: target(), subject: subject.to_owned() }),
                    Ok(Denial::Inbox(inbox)) => Err(CallError::InboxDenied { inbox }),
                    Ok(Denial::Lost) => Err(CallError::ConnectionLost { target: target() }),
                    Err(_) => Err(CallError::Connection { target: target(), why: "denial watch closed".into() }),
                },
            }
        };
        let ended = match tokio::time::timeout(deadline, raced).await {
            Ok(ended) => {
                // Answered, refused or unreachable: nothing of it runs on.
                if !matches!(ended, Err(CallError::Slow { .. }))
                    && let Some(g) = giving_up.as_mut()
                {
                    g.armed = false;
                }
                // A tool call's only: what the report needs (its user name) is a request
                // that may be denied in turn, and must not be reported.
                if cancellable && let Err(CallError::Denied { .. }) = &ended {
                    self.report_denied(subject, giving_up.as_ref().map(|g| g.id.as_str()))
                        .await;
                }
                ended
            }
            Err(_) => Err(match self.nats.connection_state() {
                State::Connected => CallError::Slow {
                    target: target(),
                    after: deadline,
                },
                _ => CallError::Disconnected {
                    target: target(),
                    after: deadline,
                },
            }),
        };
        if let Some(t) = typed_by
            && let Ok(msg) = &ended
            && let Some(said) = msg
                .headers
                .as_ref()
                .and_then(|h| h.get(subjects::HEADER_TOOLS))
        {
            let which = if said.as_str() == t.digest {
                &t.checked
            } else {
                &t.changed
            };
            which.store(true, std::sync::atomic::Ordering::Relaxed);
        }
        if let Some(t) = msg_trace {
            *t.took.lock().unwrap_or_else(|p| p.into_inner()) = Some(started.elapsed());
            *t.timing.lock().unwrap_or_else(|p| p.into_inner()) = ended
                .as_ref()
                .ok()
                .and_then(|msg| msg.headers.as_ref())
                .and_then(|h| h.get(subjects::HEADER_TIMING))
                .map(|v| v.as_str().to_owned());
        }
        if cancellable && telemetry::exporting() {
            let error = match &ended {
                Err(e) => Some(e.outcome().name()),
                Ok(msg)
                    if msg.headers.as_ref().is_some_and(|h| {
                        h.get(crate::subjects::HEADER_SERVICE_ERROR_CODE).is_some()
                    }) =>
                {
                    Some("tool_error")
                }
                Ok(_) => None,
            };
            if let Some(e) = error {
                span.record("error.type", e);
                span.record("otel.status_code", "error");
            }
            telemetry::sent(subject, started.elapsed(), error);
        }
        ended
    }
}
