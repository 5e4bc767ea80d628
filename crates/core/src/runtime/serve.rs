//! Serving a module on the bus: a queue subscription per tool and for the `tools` verb,
//! bounded in-flight calls, panics turned into tool errors, and a drain on shutdown.

use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use async_nats::{Client, HeaderMap, Message, Subscriber};
use bytes::Bytes;
use futures_util::{FutureExt, StreamExt};
use tokio::sync::watch;
use tokio::task::JoinSet;

use super::arguments;
use super::cancel::{Cancellable, Cancels, valid_id};
use super::claims::{self, Claims};
use super::fair::{Admit, Fair};
use super::header;
use super::module::{Call, Module, ModuleError, Tool};
use super::pace::{Pace, Timed};
use super::progress::{Reporter, Sending};
use super::registration::{BusRegistry, RegisterError, Registrar};
use super::services::{self, Identity, Stats};
use super::task::{Offer, Ran};
use super::trust::Ending;
use super::trust::Trust;
use super::words::Saying;
use crate::actor::{Caller, IdentityError, Layout, Route, identify, identify_stamped};
use crate::subjects::calllog::{ClientInfo, Said};
use crate::subjects::catalog::{self, Registration};
use crate::subjects::claim;
use crate::subjects::limits::{Busy, CODE_BUSY, LIMITS_SUBJECT, LimitsRequest, LimitsTable};
use crate::subjects::progress::may_report;
use crate::subjects::ticket::{Ticket, TicketError};
use crate::subjects::{
    self, HEADER_CALL, HEADER_CANCEL, HEADER_DEADLINE, HEADER_PROGRESS, HEADER_SERVICE_ERROR,
    HEADER_SERVICE_ERROR_CODE, ToolResult,
};
use crate::telemetry::{self, TraceContext};
use tracing::Instrument;

/// The reply subjects nats-server makes for a request crossing a service import.
const IMPORT_REPLY_PREFIX: &str = "_R_.";

/// How long a stopping instance still gives the large results it keeps to their callers.
const RESULTS_WAIT: Duration = Duration::from_secs(2);

/// The most one stopping step that talks to the bus may take (after the drain).
const STOP_STEP: Duration = Duration::from_secs(2);

/// NATS services error codes the runtime sets (HTTP-like, as the protocol suggests).
const CODE_BAD_ARGUMENTS: usize = 400;
const CODE_IDENTITY: usize = 403;
/// The call was typed by other tools than the module's (`Mesh-Tools`): HTTP's "precondition
/// failed".
const CODE_TOOLS_CHANGED: usize = 412;
const CODE_TOOL_ERROR: usize = 500;
/// A task given up: its state could not be written for long (no catalogue).
const CODE_UNAVAILABLE: usize = 503;

/// How a module serves.
#[derive(Debug, Clone)]
pub struct ServeOptions {
    /// Which identity headers to trust; see [`Layout`].
    pub layout: Layout,
    /// Calls handled at once; further requests wait in the subscription.
    pub max_in_flight: usize,
    /// How long a shutdown waits for calls in flight before giving up on them.
    pub drain_timeout: Duration,
    /// How often to refresh the registration with the catalogue; `None` does not register
    /// at all.
    pub register_every: Option<Duration>,
    /// The keys tickets must be signed with (nkey public keys); `None` asks the catalogue
    /// (`mesh.catalog.keys`) when a ticket first arrives.
    pub ticket_keys: Option<Vec<String>>,
}

impl Default for ServeOptions {
    fn default() -> Self {
        ServeOptions {
            layout: Layout::Local,
            max_in_flight: 256,
            drain_timeout: Duration::from_secs(30),
            register_every: Some(Duration::from_secs(catalog::REFRESH_SECS)),
            ticket_keys: None,
        }
    }
}

/// Why a module could not start serving.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error("module refused to start: {0}")]
    Module(#[from] ModuleError),
    #[error("cannot subscribe to {subject}: {source}")]
    Subscribe {
        subject: String,
        source: async_nats::SubscribeError,
    },
    #[error("cannot reach the bus to confirm the subscriptions: {0}")]
    Flush(#[from] async_nats::client::FlushError),
    #[error("cannot learn the mesh's accounts: {0}")]
    Accounts(String),
}

#[derive(Clone, Copy)]
enum Endpoint {
    Tool(usize, Route),
    ToolsVerb,
    /// `mesh.<module>.result`: chunks of results too large for one message.
    ResultVerb,
    /// `mesh.<module>.cancel` (and its `mesh-obo` twin): callers giving calls up, heard by
    /// every instance.
    CancelVerb(Route),
}

/// Everything a call needs, shared by the endpoint loops and the call tasks.
struct Context {
    module: String,
    tools: Vec<Tool>,
    /// `<module>_<tool>` per tool, for messages.
    full_names: Vec<String>,
    validators: Vec<jsonschema::Validator>,
    tools_reply: Bytes,
    /// The digest of the module's tools, checked against a call's `Mesh-Tools`.
    digest: String,
    layout: Layout,
    client: Client,
    stats: Stats,
    fair: Fair<Waiting>,
    /// Where a slot given back sends the waiting calls whose turn came.
    dispatch: tokio::sync::mpsc::UnboundedSender<(Arc<str>, Waiting)>,
    trust: Trust,
    claims: Claims,
    /// Its instance id, when it registers with the catalogue: a task it takes names it, and
    /// fails when the catalogue takes it for gone.
    registered_as: Option<String>,
    /// By tool: the largest result it has made (in bytes), the room reserved for its calls
    /// from then on.
    largest: Vec<std::sync::atomic::AtomicUsize>,
    /// The calls that named themselves, for their callers to cancel.
    cancels: Arc<Cancels>,
    /// Whether it says its word on each call for the call log (the accounts layout).
    words: bool,
    /// Where its words go: gathered, and each caller's refusals within their budget.
    speaker: Arc<super::words::Speaker>,
    /// By tool: whether its word carries the values of the arguments and result (the
    /// grants file's `log { values }`, as the catalogue says).
    log_values: std::sync::RwLock<Vec<bool>>,
}

/// A call waiting for its caller's turn.
struct Waiting {
    ep: Endpoint,
    msg: Message,
    caller: Caller,
    /// The stamp it was identified by, for its word in the call log.
    stamp: Option<ClientInfo>,
    /// The key its caller cancels it by, if it named itself (`Mesh-Call`).
    cancel: Option<u64>,
}

/// A slot taken for one call of `caller`, given back when the call ends or is dropped: the
/// next caller's waiting call then starts.
struct Slot {
    ctx: Arc<Context>,
    caller: Arc<str>,
}

impl Drop for Slot {
    fn drop(&mut self) {
        // Handed to the module's dispatcher, never spawned here: a task spawned on a runtime
        // that is shutting down is dropped at once, and its slot's drop would spawn the next.
        let mut next = self.ctx.fair.release(&self.caller);
        while let Some(start) = next.pop() {
            if let Err(tokio::sync::mpsc::error::SendError((caller, _))) =
                self.ctx.dispatch.send(start)
            {
                // The dispatcher is gone (the module stopped): nothing more starts.
                next.extend(self.ctx.fair.release(&caller));
            }
        }
    }
}

/// Starts the waiting calls whose turn came, each on a task of its own.
async fn dispatch(
    ctx: Arc<Context>,
    mut turns: tokio::sync::mpsc::UnboundedReceiver<(Arc<str>, Waiting)>,
) {
    while let Some((caller, w)) = turns.recv().await {
        let slot = Slot {
            ctx: ctx.clone(),
            caller,
        };
        tokio::spawn(answer_waiting(slot, w));
    }
}

/// Runs a call that waited for its turn, unless its caller stopped waiting meanwhile.
async fn answer_waiting(slot: Slot, w: Waiting) {
    if deadline(w.msg.headers.as_ref()).is_some_and(|d| d < SystemTime::now()) {
        tracing::debug!(subject = %w.msg.subject, "a call whose caller stopped waiting is not run");
        // Answered all the same, though nobody reads it: nats-server holds the request's
        // reply mapping until its answer (up to the export's hour).
        if let Some(reply) = w.msg.reply {
            let busy = Busy {
                retry_after: Duration::from_secs(1),
                why: "it waited past its caller's deadline and was not run".into(),
            };
            let (headers, body) = busy.reply(&w.msg.subject);
            let _ = slot
                .ctx
                .client
                .publish_with_headers(reply, headers, body)
                .await;
        }
        return;
    }
    answer_unless_cancelled(&slot.ctx, w).await;
}

/// Answers a call, unless its caller cancels it first: then its handler's future is dropped
/// and nothing is answered (nobody waits for it). Registered for cancelling only once its
/// first poll left it pending: a call that ends there costs nothing more.
async fn answer_unless_cancelled(ctx: &Context, w: Waiting) {
    let Waiting {
        ep,
        msg,
        caller,
        stamp,
        cancel,
    } = w;
    let answering = answer(ctx, ep, msg, Some(Ok(caller)), stamp);
    tokio::pin!(answering);
    let Some(key) = cancel else {
        return answering.await;
    };
    if futures_util::poll!(answering.as_mut()).is_ready() {
        return;
    }
    let cancel = ctx.cancels.register(key);
    until_cancelled(ctx, ep, answering, cancel).await
}

/// Answers a call whose cancel was registered before it started (`cancel`), unless its
/// caller cancels it first.
async fn answer_or_cancelled(ctx: &Context, w: Waiting, cancel: Option<Cancellable>) {
    let answering = answer(ctx, w.ep, w.msg, Some(Ok(w.caller)), w.stamp);
    until_cancelled(ctx, w.ep, answering, cancel).await
}

/// Runs `answering` to its end, or until `cancel` fires: then it is dropped, unanswered.
async fn until_cancelled(
    ctx: &Context,
    ep: Endpoint,
    answering: impl Future<Output = ()>,
    cancel: Option<Cancellable>,
) {
    let Some(cancel) = cancel else {
        return answering.await;
    };
    tokio::select! {
        () = answering => {}
        () = cancel.cancelled() => {
            tracing::debug!("a call cancelled by its caller was dropped");
            if let Endpoint::Tool(i, _) = ep {
                ctx.stats.cancelled(i);
            }
        }
    }
}

/// The key a caller's share is kept under: who nats-server stamped — a person calling, a
/// module calling as itself or for a person (the person a module names is checked only once
/// the call is admitted, so it cannot charge another's share), or one key for everybody when
/// nobody is named.
fn share_key(caller: &Caller) -> String {
    match caller {
        Caller::Person(a) if a.via.is_some() => claims::owner(caller),
        other => other.id().unwrap_or_default(),
    }
}

/// A module that is subscribed and ready; [`Serving::run`] answers until shutdown.
pub struct Serving {
    ctx: Arc<Context>,
    turns: tokio::sync::mpsc::UnboundedReceiver<(Arc<str>, Waiting)>,
    subs: Vec<(Endpoint, Subscriber)>,
    srv: futures_util::stream::SelectAll<Subscriber>,
    identity: Identity,
    registrar: Option<Registrar>,
    registered: bool,
    options: ServeOptions,
    /// Its resources and prompts, when it serves any.
    features: Option<super::features::Served>,
}

impl Serving {
    /// Checks the module, subscribes everything and confirms with the server, so a call
    /// made after this returns finds the module (and so it waits for a bus that is not up
    /// yet: [`serve`] races it against its shutdown).
    pub async fn start(
        module: Module,
        client: Client,
        options: ServeOptions,
    ) -> Result<Serving, ServeError> {
        let validators = module.compile()?;
        // Operator mode: callers are stamped with account keys, named by the mesh's file.
        crate::actor::learn_accounts_from_env().map_err(ServeError::Accounts)?;
        let tools_reply: Bytes = serde_json::to_vec(&module.tools_reply())
            .expect("a tools reply always serialises")
            .into();
        let mut endpoints: Vec<(String, String)> = module
            .tools
            .iter()
            .map(|t| {
                let name = t.spec.name.clone();
                let subject = subjects::tool_subject(&module.name, &name);
                (name, subject)
            })
            .collect();
        endpoints.push((
            subjects::TOOLS_VERB.to_owned(),
            subjects::tools_subject(&module.name),
        ));

        // Each tool on its subject, its mesh-obo twin (modules acting for people), and the
        // tools verb.
        let mut wanted: Vec<(Endpoint, String)> = Vec::with_capacity(2 * endpoints.len());
        for (i, t) in module.tools.iter().enumerate() {
            wanted.push((Endpoint::Tool(i, Route::Direct), endpoints[i].1.clone()));
            wanted.push((
                Endpoint::Tool(i, Route::OnBehalf),
                subjects::obo_subject(&module.name, &t.spec.name),
            ));
        }
        wanted.push((Endpoint::ToolsVerb, subjects::tools_subject(&module.name)));
        let mut subs = Vec::with_capacity(wanted.len() + 2);
        for (ep, subject) in wanted {
            let sub = client
                .queue_subscribe(subject.clone(), module.name.clone())
                .await
                .map_err(|source| ServeError::Subscribe {
                    subject: subject.clone(),
                    source,
                })?;
            subs.push((ep, sub));
        }
        // Cancels outside the queue group: whichever instance runs the call hears it.
        for (route, subject) in [
            (Route::Direct, subjects::cancel_subject(&module.name)),
            (Route::OnBehalf, subjects::obo_cancel_subject(&module.name)),
        ] {
            let sub = client
                .subscribe(subject.clone())
                .await
                .map_err(|source| ServeError::Subscribe { subject, source })?;
            subs.push((Endpoint::CancelVerb(route), sub));
        }
        let identity = Identity {
            name: module.name.clone(),
            id: uuid::Uuid::new_v4().simple().to_string(),
            version: module.version.clone(),
            description: module.description.clone(),
            started: async_nats::datetime::now(),
        };
        // Large results are kept where they were made: fetches name this instance.
        let subject = claim::result_subject(&module.name, &identity.id);
        let sub = client
            .subscribe(subject.clone())
            .await
            .map_err(|source| ServeError::Subscribe { subject, source })?;
        subs.push((Endpoint::ResultVerb, sub));
        module.features.updates.bind(&client, &module.name);
        let features = super::features::Served::start(&client, &module)
            .await
            .map_err(|(subject, source)| ServeError::Subscribe { subject, source })?;
        let srv = services::subscribe(&client, &identity)
            .await
            .map_err(|source| ServeError::Subscribe {
                subject: "$SRV.>".into(),
                source,
            })?;
        client.flush().await?;
        tracing::info!(module = %module.name, id = %identity.id, tools = module.tools.len(), "serving");

        let specs: Vec<subjects::ListedTool> = module
            .tools
            .iter()
            .map(|t| subjects::ListedTool::of(&t.spec))
            .collect();
        // Registered once before returning, so a listing right after start shows it.
        let registrar = options.register_every.map(|_| {
            let registration = Registration {
                module: module.name.clone(),
                version: module.version.clone(),
                description: module.description.clone(),
                tools: module.tools.iter().map(|t| t.spec.name.clone()).collect(),
                specs: Some(specs.clone()),
                instance: identity.id.clone(),
                started_ms: catalog::now_ms(),
                // Said only when not the usual: the catalogue takes the instance for gone
                // after three missed, and the tasks it took with it.
                refresh_ms: options
                    .register_every
                    .filter(|e| e.as_secs() != catalog::REFRESH_SECS)
                    .map(|e| (e.as_millis() as u64).clamp(1000, catalog::REFRESH_SECS * 1000)),
            };
            let registry = module.registry.clone().unwrap_or_else(|| {
                Arc::new(BusRegistry {
                    client: client.clone(),
                })
            });
            Registrar::new(registry, registration)
        });
        let mut registered = false;
        if let Some(r) = &registrar {
            match r.refresh().await {
                Ok(()) => registered = true,
                Err(RegisterError::NobodyServes) => tracing::info!(
                    module = %module.name,
                    "no catalogue answers yet; serving unregistered and retrying"
                ),
                Err(e) => {
                    tracing::warn!(module = %module.name, "{e}; serving unregistered and retrying")
                }
            }
        }

        let (dispatch, turns) = tokio::sync::mpsc::unbounded_channel();
        let ctx = Context {
            stats: Stats::new(&endpoints, &module.name),
            full_names: module
                .tools
                .iter()
                .map(|t| subjects::full_name(&module.name, &t.spec.name))
                .collect(),
            module: module.name,
            tools: module.tools,
            validators,
            tools_reply,
            digest: subjects::tools_digest(&specs),
            layout: options.layout,
            trust: Trust::new(client.clone(), options.ticket_keys.clone()),
            claims: Claims::new(identity.id.clone()),
            registered_as: options.register_every.map(|_| identity.id.clone()),
            largest: (0..specs.len())
                .map(|_| std::sync::atomic::AtomicUsize::new(0))
                .collect(),
            cancels: Arc::default(),
            words: options.layout == Layout::Accounts,
            speaker: super::words::Speaker::new(client.clone()),
            log_values: std::sync::RwLock::new(Vec::new()),
            client,
            fair: Fair::new(options.max_in_flight, options.layout == Layout::Accounts),
            dispatch,
        };
        Ok(Serving {
            ctx: Arc::new(ctx),
            turns,
            subs,
            srv,
            identity,
            registrar,
            registered,
            options,
            features,
        })
    }

    /// This instance's id in the NATS services protocol.
    pub fn id(&self) -> &str {
        &self.identity.id
    }

    /// Answers calls until `shutdown` completes, then drains: stops taking calls, finishes
    /// those in flight (up to the drain timeout), and flushes the replies.
    pub async fn run(self, shutdown: impl Future<Output = ()>) {
        let Serving {
            ctx,
            turns,
            subs,
            srv,
            identity,
            registrar,
            registered,
            options,
            features,
        } = self;
        let (stop_tx, stop_rx) = watch::channel(false);
        // The callers' limits, and which tools' values the call log keeps, before the first
        // call is taken (the calls wait in their subscriptions): one taken before would be
        // logged without the values the grants keep and shared by the default limits. The
        // catalogue answers the limits itself, so it takes its own as it goes.
        let limits_first = ctx.layout == Layout::Accounts && ctx.module != catalog::MODULE;
        if limits_first {
            ctx.refresh_limits().await;
        }
        // The result verb stops last: an instance that stops still gives the results it
        // keeps to their callers (who fetch them at once), up to the drain's bound.
        let (results_tx, results_rx) = watch::channel(false);
        let dispatcher = tokio::spawn(dispatch(ctx.clone(), turns));
        let mut loops = JoinSet::new();
        let mut results = JoinSet::new();
        for (ep, sub) in subs {
            if matches!(ep, Endpoint::ResultVerb) {
                results.spawn(endpoint_loop(ctx.clone(), ep, sub, results_rx.clone()));
            } else if matches!(ep, Endpoint::ToolsVerb) {
                loops.spawn(tools_verb(ctx.clone(), sub, stop_rx.clone()));
            } else {
                loops.spawn(endpoint_loop(ctx.clone(), ep, sub, stop_rx.clone()));
            }
        }
        if let Some(features) = features {
            loops.spawn(features.run(ctx.client.clone(), ctx.layout, stop_rx.clone()));
        }
        let srv_task = {
            let ctx = ctx.clone();
            let mut stop = stop_rx.clone();
            tokio::spawn(async move {
                let stopped = async move {
                    let _ = stop.wait_for(|s| *s).await;
                };
                services::answer(
                    ctx.client.clone(),
                    &identity,
                    &ctx.stats,
                    srv,
                    stopped,
                    ctx.layout,
                )
                .await
            })
        };

        // The callers' limits, as the catalogue publishes them from the grants file: asked
        // now and every refresh (a reload changes them); kept when the catalogue is silent.
        let limits_task = (ctx.layout == Layout::Accounts).then(|| {
            let ctx = ctx.clone();
            let every = options
                .register_every
                .unwrap_or(Duration::from_secs(catalog::REFRESH_SECS));
            tokio::spawn(async move {
                if limits_first {
                    tokio::time::sleep(every).await;
                }
                loop {
                    ctx.refresh_limits().await;
                    tokio::time::sleep(every).await;
                }
            })
        });

        let registrar = registrar.map(Arc::new);
        let refresh_task = match (&registrar, options.register_every) {
            (Some(r), Some(every)) => {
                let r = r.clone();
                Some(tokio::spawn(async move {
                    r.keep_fresh(every, registered).await
                }))
            }
            _ => None,
        };

        shutdown.await;
        tracing::info!(module = %ctx.module, "draining");
        if let Some(task) = refresh_task {
            task.abort();
        }
        if let Some(task) = limits_task {
            task.abort();
        }
        let _ = stop_tx.send(true);
        // With the bus gone no reply can leave, so there is nothing to wait for; every step
        // that talks to the bus is bounded, so a stop never hangs on a dead bus.
        let connected = ctx.client.connection_state() == async_nats::connection::State::Connected;
        let drain_for = if connected {
            options.drain_timeout
        } else {
            tracing::warn!(module = %ctx.module, "the bus is gone: calls in flight are dropped");
            Duration::ZERO
        };
        // The bus may also go while draining (a stop and a dead bus often come together: a
        // host shutting down, `mesh up` killed): then no reply can leave either, so the
        // drain ends when the connection does, not at its timeout.
        // Heard from the connection's own state changes, not asked for every few ms.
        let mut states = ctx.client.connection_states();
        let bus_gone = async move {
            let _ = states
                .wait_for(|s| *s != async_nats::connection::State::Connected)
                .await;
        };
        let drained = tokio::time::timeout(drain_for, async {
            tokio::select! {
                () = async {
                    while loops.join_next().await.is_some() {}
                    ctx.fair.all_free().await;
                } => true,
                () = bus_gone => false,
            }
        })
        .await;
        // The results still kept wait a moment for their callers, who fetch them as soon
        // as the answer comes.
        if matches!(drained, Ok(true)) {
            let _ = tokio::time::timeout(RESULTS_WAIT, async {
                while !ctx.claims.is_empty() {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            })
            .await;
        }
        let _ = results_tx.send(true);
        match drained {
            Ok(true) => {}
            Ok(false) => {
                tracing::warn!(module = %ctx.module, "the bus went away while draining: calls in flight are dropped")
            }
            Err(_) if connected => {
                tracing::warn!(module = %ctx.module, "drain timed out; calls still in flight are dropped")
            }
            Err(_) => {}
        }
        loops.abort_all();
        results.abort_all();
        dispatcher.abort();
        let _ = tokio::time::timeout(STOP_STEP, srv_task).await;
        if let Some(r) = registrar
            && ctx.client.connection_state() == async_nats::connection::State::Connected
            && tokio::time::timeout(STOP_STEP, r.remove_instance())
                .await
                .is_err()
        {
            tracing::warn!(module = %ctx.module, "the catalogue did not confirm the instance's removal");
        }
        // The words still gathered go before the last flush.
        ctx.speaker.flush().await;
        match tokio::time::timeout(STOP_STEP, ctx.client.flush()).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => tracing::warn!(module = %ctx.module, "final flush failed: {e}"),
            Err(_) => tracing::warn!(module = %ctx.module, "final flush did not finish"),
        }
        tracing::info!(module = %ctx.module, "stopped");
    }
}

/// Starts a module and serves it until `shutdown`. A shutdown while starting ends the start:
/// on a bus that is not there yet, starting waits for it.
pub async fn serve(
    module: Module,
    client: Client,
    options: ServeOptions,
    shutdown: impl Future<Output = ()>,
) -> Result<(), ServeError> {
    tokio::pin!(shutdown);
    let serving = tokio::select! {
        serving = Serving::start(module, client, options) => serving?,
        () = &mut shutdown => return Ok(()),
    };
    serving.run(shutdown).await;
    Ok(())
}

/// Answers the tools verb in turn by caller (it runs nothing of the module's, and takes no
/// slot), until stop.
async fn tools_verb(ctx: Arc<Context>, sub: Subscriber, mut stop: watch::Receiver<bool>) {
    let stopped = async move {
        let _ = stop.wait_for(|s| *s).await;
    };
    let what = format!("module {}'s tools verb", ctx.module);
    let layout = ctx.layout;
    super::turns::answer_in_turn(
        ctx.client.clone(),
        &what,
        super::turns::PER_CALLER,
        super::turns::until_drained([sub], stopped),
        |msg| super::turns::caller_key(msg, layout),
        |msg| {
            let ctx = ctx.clone();
            async move { answer(&ctx, Endpoint::ToolsVerb, msg, None, None).await }
        },
    )
    .await
}

/// Takes requests from one subscription and answers them, each once a slot is free; on
/// stop, drains the subscription and finishes what it took.
///
/// A call of the module's is polled first here or on a task of its own, as its endpoint's
/// [`Pace`] says: a handler that blocks holds up its own worker thread, and the tool's other
/// calls at most once. What runs none of the module's code (the tools verb, a refusal, a
/// busy answer) is answered here. Handlers should still not block (as everywhere in tokio):
/// a blocked worker is one fewer for everything else; blocking work belongs in
/// `Tool::typed_blocking` or `off_runtime`.
async fn endpoint_loop(
    ctx: Arc<Context>,
    ep: Endpoint,
    sub: Subscriber,
    mut stop: watch::Receiver<bool>,
) {
    // Dropped with this loop (a drain that timed out), it stops the calls still running.
    let mut in_flight = JoinSet::new();
    // Dropped with this loop: the calls running on threads of their own end with it.
    let (held, _) = watch::channel(());
    let pace = Arc::new(Pace::new(match ep {
        Endpoint::Tool(i, _) => ctx.full_names[i].as_str(),
        _ => "the result verb",
    }));
    // On stop, unsubscribed, but what the server already sent still comes.
    let requests = super::turns::until_drained([sub], async move {
        let _ = stop.wait_for(|s| *s).await;
    });
    tokio::pin!(requests);
    loop {
        let msg = tokio::select! {
            biased;
            Some(_) = in_flight.join_next() => continue,
            m = requests.next() => m,
        };
        let Some(msg) = msg else { break };
        let mut call: Pin<Box<dyn Future<Output = ()> + Send>> = match ep {
            // Answered in turn by `tools_verb`, which `run` gives its subscription.
            Endpoint::ToolsVerb => unreachable!("the tools verb is not served by endpoint_loop"),
            // A caller giving up on a call of theirs: nothing is admitted or answered, and
            // it counts only for a call of the caller nats-server stamped on it.
            Endpoint::CancelVerb(route) => {
                let caller = identify(
                    msg.headers.as_ref(),
                    msg.description.as_deref(),
                    ctx.layout,
                    route,
                    &msg.subject,
                );
                if let (Ok(caller), Some(id)) =
                    (caller, header(msg.headers.as_ref(), HEADER_CANCEL))
                    && !ctx.cancels.cancel(ctx.cancels.key(&caller, id))
                {
                    tracing::trace!(subject = %msg.subject, "a cancel of no call of its caller's here");
                }
                // A cancel is said, not asked; one asked all the same gets an empty answer,
                // so nats-server does not hold its reply mapping for the export's hour.
                if let Some(reply) = msg.reply {
                    let _ = ctx.client.publish(reply, Bytes::new()).await;
                }
                continue;
            }
            // In the accounts layout every call crosses the mesh's account, where nats-server
            // witnesses it and gives it a reply subject of its own (`_R_.`). A request with
            // any other reply did not come that way (a JetStream consumer's delivery from a
            // leaf server, say, which no latency event records): it runs nothing.
            Endpoint::Tool(_, _) | Endpoint::ResultVerb
                if ctx.layout == Layout::Accounts
                    && !msg
                        .reply
                        .as_deref()
                        .is_some_and(|r| r.starts_with(IMPORT_REPLY_PREFIX)) =>
            {
                // Not a warning: anyone may send such messages, and a log is no place for them.
                tracing::debug!(
                    subject = %msg.subject,
                    reply = msg.reply.as_deref().unwrap_or("none"),
                    "a request that did not cross the mesh's account (its reply is not nats-server's _R_.) is not run"
                );
                continue;
            }
            // A tool call, or a fetch of a large result (the module's work either way): who
            // is calling decides whose share it takes.
            Endpoint::Tool(_, _) | Endpoint::ResultVerb => {
                let route = match ep {
                    Endpoint::Tool(_, route) => route,
                    _ => Route::Direct,
                };
                let caller = identify_stamped(
                    msg.headers.as_ref(),
                    msg.description.as_deref(),
                    ctx.layout,
                    route,
                    &msg.subject,
                );
                match caller {
                    // A refused identity runs nothing: it is answered at once.
                    Err(e) => {
                        let ctx = ctx.clone();
                        Box::pin(async move { answer(&ctx, ep, msg, Some(Err(e)), None).await })
                    }
                    Ok((caller, stamp)) => {
                        let cancel = header(msg.headers.as_ref(), HEADER_CALL)
                            .filter(|id| valid_id(id))
                            .map(|id| ctx.cancels.key(&caller, id));
                        let key = share_key(&caller);
                        let size = msg.payload.len();
                        let waiting = Waiting {
                            ep,
                            msg,
                            caller,
                            stamp,
                            cancel,
                        };
                        match ctx.fair.admit(&key, waiting, size) {
                            Admit::Run(w) => {
                                let slot = Slot {
                                    ctx: ctx.clone(),
                                    caller: Arc::from(key),
                                };
                                let pace = pace.clone();
                                if pace.on_loop() {
                                    let call: Pin<Box<dyn Future<Output = ()> + Send>> =
                                        Box::pin(async move {
                                            answer_unless_cancelled(&slot.ctx, w).await
                                        });
                                    Box::pin(Timed::new(call, pace, true))
                                } else {
                                    // Registered here, before the thread starts: a cancel
                                    // that came first would find nothing, and the call
                                    // would run on holding its caller's slot.
                                    let cancel = w.cancel.and_then(|k| ctx.cancels.register(k));
                                    let call: Pin<Box<dyn Future<Output = ()> + Send>> =
                                        Box::pin(async move {
                                            answer_or_cancelled(&slot.ctx, w, cancel).await
                                        });
                                    let runtime = tokio::runtime::Handle::current();
                                    let mut held = held.subscribe();
                                    in_flight.spawn_blocking(move || {
                                        runtime.block_on(async move {
                                            // A blocking-pool thread is not aborted with
                                            // the loop: the call ends when the loop is gone.
                                            tokio::select! {
                                                () = Timed::new(call, pace, false) => {}
                                                _ = held.changed() => {}
                                            }
                                        })
                                    });
                                    continue;
                                }
                            }
                            Admit::Waiting => continue,
                            Admit::Busy(busy, w) | Admit::WaitingEvicted(busy, w) => {
                                let ctx = ctx.clone();
                                Box::pin(async move { ctx.answer_busy(w.ep, &w.msg, &busy).await })
                            }
                        }
                    }
                }
            }
        };
        // The mesh's own answers finish in their first poll (the reply is queued at once):
        // polled here, such an answer costs no task; only one still pending gets one.
        if futures_util::poll!(call.as_mut()).is_pending() {
            in_flight.spawn(call);
        }
    }
    while in_flight.join_next().await.is_some() {}
}

/// Answers one request and counts it. `caller` is who nats-server says sent a tool call.
async fn answer(
    ctx: &Context,
    ep: Endpoint,
    msg: Message,
    caller: Option<Result<Caller, IdentityError>>,
    stamp: Option<ClientInfo>,
) {
    let started = Instant::now();
    let Some(reply) = msg.reply.clone() else {
        tracing::debug!(subject = %msg.subject, "request without a reply subject ignored");
        return;
    };
    // Room for a large result, reserved before the tool runs, or nothing runs: the
    // caller hears busy now rather than "ran, but could not be kept" later.
    let _room = match (ep, &caller) {
        (Endpoint::Tool(i, _), Some(Ok(c))) => {
            // A message's worth, or as much as the tool's largest result yet.
            let least = match ctx.client.max_payload() {
                0 => 1024 * 1024,
                max => max,
            }
            .max(ctx.largest[i].load(std::sync::atomic::Ordering::Relaxed))
            .min(claim::MAX_KEPT_PER_OWNER);
            match ctx.claims.reserve(&claims::owner(c), least) {
                Ok(room) => Some(room),
                Err(busy) => {
                    Box::pin(ctx.answer_busy(ep, &msg, &busy)).await;
                    return;
                }
            }
        }
        _ => None,
    };
    // The module's word for the call log on a tool call, said once the reply is sent (or,
    // the call dropped, as cancelled).
    let mut saying = match ep {
        Endpoint::Tool(i, route) if ctx.words => {
            let mut s = Saying::start(
                &ctx.speaker,
                &ctx.tools[i].spec.name,
                route == Route::OnBehalf,
                &msg,
                started,
                stamp,
            );
            if ctx
                .log_values
                .read()
                .unwrap_or_else(|p| p.into_inner())
                .get(i)
                .copied()
                .unwrap_or(false)
            {
                s.keep_values(&msg.payload);
            }
            Some(s)
        }
        // A verb is no call: it has no word, so nobody's flood of them spends the module's
        // part of the log.
        _ => None,
    };
    if let (Some(s), Some(Ok(Caller::Person(a)))) = (&mut saying, &caller)
        && a.via.is_some()
    {
        s.for_person(Some(a.to_string()));
    }
    let (index, body, error, claimed) = match ep {
        // Taken where it arrives: never answered.
        Endpoint::CancelVerb(_) => return,
        Endpoint::ToolsVerb => (ctx.tools.len(), ctx.tools_reply.clone(), None, None),
        Endpoint::ResultVerb => {
            let caller = caller.unwrap_or(Ok(Caller::Unknown));
            // Boxed, as every rare step here: a call's future stays the size of its common
            // path, which is moved whole (into its task, through each wrapper) on every call.
            Box::pin(ctx.claims.answer(&ctx.client, ctx.layout, &msg, caller)).await;
            return;
        }
        Endpoint::Tool(i, route) => {
            let caller = caller.unwrap_or(Ok(Caller::Unknown));
            let owner = caller.as_ref().map(claims::owner).unwrap_or_default();
            // The caller's trace: this call's span a child of it (where spans are exported),
            // else passed on unchanged by the calls the handler makes.
            let remote = TraceContext::from_headers(msg.headers.as_ref());
            // A call offered as a task (`Mesh-Task`) of a tool that may run as one; its
            // caller kept for the rounds after the first (task.rs).
            // The header looked for before anything is made of it: most calls are none.
            let offer = Offer::of(
                &ctx.tools[i],
                &ctx.full_names[i],
                || caller.as_ref().ok().map(claims::owner),
                &msg,
                &ctx.client,
                ctx.registered_as.as_deref(),
            );
            let again = offer.as_ref().and_then(|_| caller.as_ref().ok().cloned());
            // Spans and a trace to pass on only where asked for: boxed, so that a call
            // without them does not carry their wrappers' room.
            let (result, code) = if remote.is_none() && !telemetry::exporting() {
                ctx.call(i, route, &msg, caller, offer.as_deref()).await
            } else {
                Box::pin(ctx.traced_call(i, route, &msg, caller, remote, started, offer.as_deref()))
                    .await
            };
            // Taken as a task: its caller heard so at once; the rest is the catalogue's.
            if let (Some(offer), Some(caller)) = (offer.as_deref().filter(|o| o.taken()), again) {
                let (error, outcome) =
                    Box::pin(ctx.run_task(i, route, &msg, caller, offer, result, code)).await;
                // The ticket the person's call gave it ends with the task.
                if let Some(raw) = offer.kept_ticket() {
                    ctx.trust.end(&raw);
                }
                ctx.stats.record(i, started.elapsed(), error);
                if let Some(s) = saying {
                    s.end(outcome, &offer.taken_body(), started.elapsed());
                }
                return;
            }
            // Only what a handler answered is kept for fetching: the runtime's own refusals
            // (bad arguments, identity, tickets) ran nothing, and are cut instead, so no
            // request can make a module keep its own echo.
            let claimable = code == CODE_TOOL_ERROR;
            let (body, result, claimed) = ctx.encode(i, result, &owner, claimable, false).await;
            let error = result.is_error.then(|| (code, result.text_content()));
            (i, body, error, claimed)
        }
    };
    let said = saying.map(|s| (s, body.clone()));
    // Read once for the statistics, the trace's timing and the word: each read of the clock
    // is a visible part of a call's cost here.
    let took = started.elapsed();
    // A call nats-server traces hears how long it ran here (`mesh call --trace`).
    let timing = header(msg.headers.as_ref(), subjects::HEADER_TRACE_DEST)
        .map(|_| format!("run;dur={:.3}", took.as_secs_f64() * 1000.0));
    // Counted before it is sent: whoever has the reply finds it in `$SRV.STATS`.
    ctx.stats
        .record(index, took, error.as_ref().map(|(code, _)| *code));
    // A call typed by the module's tools hears that they were checked.
    let checked = matches!(ep, Endpoint::Tool(..))
        && header(msg.headers.as_ref(), subjects::HEADER_TOOLS).is_some();
    let sent = if error.is_none() && claimed.is_none() && timing.is_none() && !checked {
        ctx.client.publish(reply, body).await
    } else {
        let mut headers = HeaderMap::new();
        if checked {
            headers.insert(subjects::HEADER_TOOLS, ctx.digest.as_str());
        }
        if let Some(t) = &timing {
            headers.insert(subjects::HEADER_TIMING, t.as_str());
        }
        if let Some((code, text)) = &error {
            headers.insert(HEADER_SERVICE_ERROR, header_safe(text).as_str());
            headers.insert(HEADER_SERVICE_ERROR_CODE, code.to_string().as_str());
        }
        if let Some(id) = &claimed {
            headers.insert(claim::HEADER_CLAIM, id.as_str());
        }
        ctx.client.publish_with_headers(reply, headers, body).await
    };
    if let Err(e) = sent {
        tracing::warn!(module = %ctx.module, "reply not sent: {e}");
    }
    if let Some((saying, body)) = said {
        let outcome = match &error {
            None => Said::Ok,
            Some((CODE_TOOL_ERROR, _)) => Said::ToolError,
            Some(_) => Said::Refused,
        };
        saying.end(outcome, &body, took);
    }
}

impl Context {
    /// Asks the catalogue for the callers' limits; a silent or missing catalogue leaves the
    /// ones known (at first: no bound but the fair share, none a minute).
    async fn refresh_limits(&self) {
        let mut table = LimitsTable::default();
        let mut after: Option<String> = None;
        // Page by page (a table of many people does not fit in one message), each bounded.
        loop {
            let request = serde_json::to_vec(&LimitsRequest {
                after: after.clone(),
            })
            .expect("serialises");
            let asked = tokio::time::timeout(
                STOP_STEP,
                self.client.request(LIMITS_SUBJECT, request.into()),
            )
            .await;
            let page = match asked {
                Ok(Ok(msg)) => match serde_json::from_slice::<LimitsTable>(&msg.payload) {
                    Ok(page) => page,
                    Err(e) => {
                        tracing::warn!(module = %self.module, "the catalogue's limits do not read: {e}");
                        return;
                    }
                },
                Ok(Err(e)) => {
                    tracing::debug!(module = %self.module, "no limits from the catalogue: {e}");
                    return;
                }
                Err(_) => {
                    tracing::debug!(module = %self.module, "the catalogue did not say the limits in time");
                    return;
                }
            };
            table.default = page.default;
            table.callers.extend(page.callers);
            table.log_values.extend(page.log_values);
            match page.next {
                // Pages go forward by name; anything else would loop.
                Some(n) if after.as_ref().is_none_or(|a| n > *a) => after = Some(n),
                _ => break,
            }
        }
        // Of which of this module's tools the call log keeps the values.
        let kept: Vec<bool> = self
            .full_names
            .iter()
            .map(|f| table.log_values.iter().any(|v| v == f))
            .collect();
        *self.log_values.write().unwrap_or_else(|p| p.into_inner()) = kept;
        self.fair.set_limits(table);
    }

    /// Answers a call refused for load: busy, with when to try again.
    async fn answer_busy(&self, ep: Endpoint, msg: &Message, busy: &Busy) {
        let Some(reply) = msg.reply.clone() else {
            return;
        };
        let (i, what) = match ep {
            Endpoint::Tool(i, _) => (Some(i), self.full_names[i].clone()),
            _ => (None, format!("module {}'s large results", self.module)),
        };
        let (headers, body) = busy.reply(&what);
        if let Err(e) = self
            .client
            .publish_with_headers(reply, headers, body.clone())
            .await
        {
            tracing::warn!(module = %self.module, "busy reply not sent: {e}");
        }
        if let Some(i) = i {
            self.stats.record(i, Duration::ZERO, Some(CODE_BUSY));
            if self.words {
                let obo = matches!(ep, Endpoint::Tool(_, Route::OnBehalf));
                let name = &self.tools[i].spec.name;
                Saying::start(&self.speaker, name, obo, msg, Instant::now(), None).end(
                    Said::Busy,
                    &body,
                    Duration::ZERO,
                );
            }
        }
    }

    /// [`Context::call`] in the call's span (where spans are exported), a child of the
    /// caller's trace; else with the caller's trace passed on to the calls the handler makes.
    #[allow(clippy::too_many_arguments)]
    async fn traced_call(
        &self,
        i: usize,
        route: Route,
        msg: &Message,
        caller: Result<Caller, IdentityError>,
        remote: Option<TraceContext>,
        started: Instant,
        offer: Option<&Offer>,
    ) -> (ToolResult, usize) {
        if !telemetry::exporting() {
            return telemetry::passing(remote, self.call(i, route, msg, caller, offer)).await;
        }
        let full = &self.full_names[i];
        let span = tracing::info_span!(
            "tools/call",
            otel.name = %format_args!("tools/call {full}"),
            otel.kind = "server",
            mcp.method.name = "tools/call",
            gen_ai.operation.name = "execute_tool",
            gen_ai.tool.name = %full,
            messaging.system = "nats",
            messaging.operation.type = "process",
            messaging.destination.name = %msg.subject,
            mesh.module = %self.module,
            error.type = tracing::field::Empty,
            otel.status_code = tracing::field::Empty,
        );
        if let Some(r) = &remote {
            telemetry::adopt(&span, r);
        }
        let (result, code) = telemetry::passing(remote, self.call(i, route, msg, caller, offer))
            .instrument(span.clone())
            .await;
        let error = result.is_error.then(|| error_type(code));
        if let Some(e) = &error {
            span.record("error.type", e.as_str());
            span.record("otel.status_code", "error");
        }
        telemetry::served(full, started.elapsed(), error.as_deref());
        (result, code)
    }

    /// Runs tool `i` on a request: caller identified, arguments checked, handler guarded;
    /// as a task, if it was `offer`ed as one and the handler does not end at once.
    async fn call(
        &self,
        i: usize,
        route: Route,
        msg: &Message,
        caller: Result<Caller, IdentityError>,
        offer: Option<&Offer>,
    ) -> (ToolResult, usize) {
        let full = &self.full_names[i];
        let tool = &self.tools[i];
        let headers = msg.headers.as_ref();
        // Before anything else: a call whose identity is refused does nothing.
        let caller = match caller {
            Ok(c) => c,
            Err(e) => {
                tracing::warn!(tool = %full, subject = %msg.subject, "{e}");
                return (ToolResult::error(format!("{full}: {e}")), CODE_IDENTITY);
            }
        };
        // Boxed: only calls for people carry or need a ticket.
        let needs_ticket = self.layout == Layout::Accounts
            && (route == Route::OnBehalf || self.tools[i].acts_for_people);
        let checked = if needs_ticket {
            Box::pin(self.ticket(i, route, headers, &caller)).await
        } else {
            Ok(None)
        };
        let ticket = match checked {
            Ok(t) => t,
            // Asking for a ticket is every client's first step with such a tool: not news.
            Err(e @ TicketError::Required { .. }) => {
                tracing::debug!(tool = %full, "{e}");
                return (ToolResult::error(format!("{full}: {e}")), e.code());
            }
            Err(e) => {
                tracing::warn!(tool = %full, subject = %msg.subject, "{e}");
                return (ToolResult::error(format!("{full}: {e}")), e.code());
            }
        };
        // Typed by other tools than these: refused before the arguments are read.
        if let Some(typed_by) = header(headers, subjects::HEADER_TOOLS)
            && typed_by != self.digest
        {
            return (ToolResult::tools_changed(full), CODE_TOOLS_CHANGED);
        }
        let (args, continuation) = match arguments::parse(full, &msg.payload) {
            Ok(parsed) => parsed,
            Err(e) => return (ToolResult::error(e), CODE_BAD_ARGUMENTS),
        };
        let args = match arguments::check(full, &self.validators[i], args) {
            Ok(args) => args,
            Err(e) => return (ToolResult::error(e), CODE_BAD_ARGUMENTS),
        };
        let (progress, sending) = match self.progress_subject(headers, &caller) {
            Some(subject) => {
                let (reporter, sending) = Sending::start(self.client.clone(), subject);
                (reporter, Some(sending))
            }
            None if offer.is_some() => (Reporter::kept(), None),
            None => (Reporter::default(), None),
        };
        // A task keeps how far it got, for whoever reads it.
        if let (Some(offer), Some(reports)) = (offer, progress.subscribe()) {
            offer.follow(reports);
        }
        // A ticket this call was given (its caller's, for this tool) ends with the handler:
        // no module acts on it after. One forwarded to this call (`mesh-obo`) is the calling
        // module's to end.
        // A call that may become a task keeps it with the task: it ends when the task does
        // (`run_task`), or here when the call is answered as any call.
        let raw = ticket
            .as_ref()
            .filter(|_| route == Route::Direct)
            .map(|t| t.raw.clone());
        let _ending = match (offer, raw) {
            (Some(offer), Some(raw)) => {
                offer.keep_ticket(raw);
                None
            }
            (None, Some(raw)) => Some(Ending {
                trust: &self.trust,
                raw,
            }),
            (_, None) => None,
        };
        let call = Call {
            args,
            caller,
            continuation,
            // A call that may become a task runs as long as a task is kept, when it does.
            deadline: match offer {
                Some(_) => {
                    Some(SystemTime::now() + Duration::from_millis(crate::subjects::task::TTL_MS))
                }
                None => deadline(headers),
            },
            progress,
            ticket,
        };
        // The handler runs inside the guard, so a panic while building its future is caught too.
        let guarded = AssertUnwindSafe(async { (tool.handler)(call).await }).catch_unwind();
        let ended = match offer {
            None => guarded.await,
            Some(offer) => match Box::pin(offer.run(guarded)).await {
                Ran::Ended(ended) => ended,
                Ran::Cancelled => {
                    tracing::debug!(tool = %full, "a task cancelled by its owner was dropped");
                    if let Some(sending) = sending {
                        sending.finish().await;
                    }
                    return (
                        ToolResult::error(format!("{full}: cancelled by its owner")),
                        CODE_TOOL_ERROR,
                    );
                }
                Ran::GivenUp => {
                    tracing::debug!(tool = %full, "a task given up was dropped");
                    if let Some(sending) = sending {
                        sending.finish().await;
                    }
                    return (
                        ToolResult::error(format!(
                            "{full}: the task was given up: its state could not be written to the catalogue"
                        )),
                        CODE_UNAVAILABLE,
                    );
                }
            },
        };
        if let Some(offer) = offer {
            if ended.is_err() {
                offer.panicked();
            }
            if !offer.taken()
                && let Some(raw) = offer.kept_ticket()
            {
                self.trust.end(&raw);
            }
        }
        if let Some(sending) = sending {
            sending.finish().await;
        }
        match ended {
            Ok(result) => (result, CODE_TOOL_ERROR),
            Err(panic) => {
                let what = panic
                    .downcast_ref::<&str>()
                    .map(|s| s.to_string())
                    .or_else(|| panic.downcast_ref::<String>().cloned())
                    .unwrap_or_else(|| "no message".into());
                tracing::error!(tool = %full, "handler panicked: {what}");
                (
                    ToolResult::error(format!("tool {full} failed unexpectedly: {what}")),
                    CODE_TOOL_ERROR,
                )
            }
        }
    }

    /// Runs a call taken as a task to its end: its questions put to its owner through the
    /// catalogue and the tool called again with the answers (as a caller would), its result
    /// (kept as a claim when large, as any call's) or failure written there. How it ended,
    /// as the statistics and the call log count it.
    #[allow(clippy::too_many_arguments)]
    async fn run_task(
        &self,
        i: usize,
        route: Route,
        msg: &Message,
        caller: Caller,
        offer: &Offer,
        mut result: ToolResult,
        mut code: usize,
    ) -> (Option<usize>, Said) {
        let owner = claims::owner(&caller);
        let mut rounds = 0;
        while result.needs_input() && !offer.cancelled() && rounds < subjects::MAX_INPUT_ROUNDS {
            rounds += 1;
            let asks = result.input_requests.take().unwrap_or_default();
            let Some(answers) = offer.ask(asks).await else {
                break;
            };
            // The next round as a caller makes it: the same arguments, the state and answers.
            let mut args = match serde_json::from_slice::<serde_json::Value>(&msg.payload) {
                Ok(serde_json::Value::Object(args)) => args,
                _ => serde_json::Map::new(),
            };
            args.remove(subjects::KEY_REQUEST_STATE);
            args.remove(subjects::KEY_INPUT_RESPONSES);
            if let Some(state) = result.request_state.take() {
                args.insert(subjects::KEY_REQUEST_STATE.into(), state.into());
            }
            args.insert(
                subjects::KEY_INPUT_RESPONSES.into(),
                serde_json::Value::Object(answers),
            );
            let mut next = msg.clone();
            next.payload = serde_json::to_vec(&args)
                .expect("arguments serialise")
                .into();
            (result, code) = self
                .call(i, route, &next, Ok(caller.clone()), Some(offer))
                .await;
        }
        if offer.cancelled() {
            return (None, Said::Cancelled);
        }
        // Its writes failed for long: the failure is written if it can be, and counted.
        if offer.given_up() {
            let why = format!(
                "{}: the task was given up: its state could not be written to the catalogue",
                self.full_names[i]
            );
            offer
                .end(serde_json::Value::Null, Some((-32603, why)))
                .await;
            return (Some(CODE_UNAVAILABLE), Said::ToolError);
        }
        if result.needs_input() {
            result = ToolResult::error(format!(
                "{} still asked for input after {} rounds; stopped",
                self.full_names[i],
                subjects::MAX_INPUT_ROUNDS
            ));
        }
        // The runtime's refusals ran nothing: a protocol error of the task, not its result.
        let refused = match code {
            CODE_TOOL_ERROR => None,
            CODE_BAD_ARGUMENTS => Some((-32602, result.text_content())),
            _ => Some((-32600, result.text_content())),
        };
        // A large result is kept as a claim that may be read again (every `tasks/get`
        // inlines it), for the time a claim is kept.
        let (body, kept, _) = self
            .encode(i, result, &owner, refused.is_none(), true)
            .await;
        let outcome = match (&refused, kept.is_error) {
            (Some(_), _) => (Some(code), Said::Refused),
            (None, true) => (Some(CODE_TOOL_ERROR), Said::ToolError),
            (None, false) => (None, Said::Ok),
        };
        let value = serde_json::from_slice(&body).unwrap_or(serde_json::Value::Null);
        offer.end(value, refused).await;
        outcome
    }

    /// The ticket a call must carry, checked: on a `mesh-obo` subject always (a module acting
    /// for a person shows the ticket that person's call gave it), on a tool that acts for
    /// people when a person calls it. In local mode nobody is named, so nothing is checked.
    async fn ticket(
        &self,
        i: usize,
        route: Route,
        headers: Option<&HeaderMap>,
        caller: &Caller,
    ) -> Result<Option<Ticket>, TicketError> {
        if self.layout == Layout::Local {
            return Ok(None);
        }
        match (route, caller) {
            (Route::OnBehalf, Caller::Person(actor)) => {
                let via = actor.via.as_deref().unwrap_or_default();
                self.trust
                    .for_obo_call(headers, actor, via, &self.full_names[i])
                    .await
                    .map(Some)
            }
            (Route::Direct, _) if self.tools[i].acts_for_people => {
                self.trust
                    .for_delegating_call(headers, caller, &self.module, &self.full_names[i])
                    .await
            }
            _ => Ok(None),
        }
    }

    /// Where the caller asked for reports of this call, if it may have them there: under
    /// this module, in the caller's own name when the caller is known (a person calling
    /// directly; a module calling gets none), anywhere under this module in local mode.
    fn progress_subject(&self, headers: Option<&HeaderMap>, caller: &Caller) -> Option<String> {
        let subject = header(headers, HEADER_PROGRESS)?;
        let user = match (self.layout, caller) {
            (Layout::Local, _) => None,
            (Layout::Accounts, Caller::Person(actor)) if actor.via.is_none() => {
                Some(actor.user.as_str())
            }
            (Layout::Accounts, _) => return None,
        };
        if may_report(subject, &self.module, user) {
            Some(subject.to_owned())
        } else {
            tracing::debug!(module = %self.module, %subject, "progress subject refused");
            None
        }
    }

    /// Serialises a result. One too large for one message on the bus is kept in the module's
    /// object store for `owner` and answered with a claim (and the claim's id); only when it
    /// cannot be kept does it become a tool error — one that says the tool ran.
    async fn encode(
        &self,
        i: usize,
        result: ToolResult,
        owner: &str,
        claimable: bool,
        rereadable: bool,
    ) -> (Bytes, ToolResult, Option<String>) {
        // Room for a small result at once, instead of growing from nothing a few times.
        let mut body = Vec::with_capacity(256);
        serde_json::to_writer(&mut body, &result).expect("a ToolResult always serialises");
        let max = self.client.max_payload();
        // A task's result is kept in the catalogue's record of the task, which is kept small
        // (a few people's tasks must not fill the bucket): only a small one goes inline.
        let inline = if rereadable {
            crate::subjects::task::MAX_INLINE_RESULT.min(max.saturating_sub(8 * 1024))
        } else {
            max.saturating_sub(1024)
        };
        if max == 0 || body.len() <= inline {
            return (body.into(), result, None);
        }
        let full = &self.full_names[i];
        let size = body.len();
        self.largest[i].fetch_max(size, std::sync::atomic::Ordering::Relaxed);
        if !claimable {
            let text = result.text_content();
            let cut: String = text.chars().take(4096).collect();
            let result = ToolResult::error(format!("{cut}… (cut: the refusal was {size} bytes)"));
            let body = serde_json::to_vec(&result).expect("a ToolResult always serialises");
            return (body.into(), result, None);
        }
        match self.claims.put(
            owner,
            Bytes::from(body),
            max.saturating_sub(4096),
            rereadable,
        ) {
            Ok(c) => {
                let mut answer = ToolResult::text(format!(
                    "the result of {full} is {size} bytes, more than one message on this bus carries ({max} bytes): fetch it from {} (subjects/README.md, \"Large results\"); mesh's clients do so by themselves",
                    claim::result_subject(&self.module, &c.instance)
                ));
                answer.is_error = result.is_error;
                let mut meta = serde_json::Map::new();
                meta.insert(
                    claim::CLAIM_META.into(),
                    serde_json::to_value(&c).expect("a claim serialises"),
                );
                answer
                    .extra
                    .insert("_meta".into(), serde_json::Value::Object(meta));
                let body = serde_json::to_vec(&answer).expect("a ToolResult always serialises");
                (body.into(), answer, Some(c.id))
            }
            Err(why) => {
                tracing::warn!(tool = %full, "a large result could not be kept: {why}");
                let result = ToolResult::error(format!(
                    "{full} ran, but its result ({size} bytes, more than the bus's {max} bytes a message) could not be kept for fetching ({why}); what the tool did stands: do not simply call it again"
                ));
                let body = serde_json::to_vec(&result).expect("a ToolResult always serialises");
                (body.into(), result, None)
            }
        }
    }
}

/// A refusal's or tool error's code as a span's and metric's `error.type`: the kind the
/// services protocol's statistics name it by, as one word (`tool_error`, `bad_arguments`).
fn error_type(code: usize) -> String {
    services::error_kind(code).replace(' ', "_")
}

/// The caller's `Mesh-Deadline`, if it sent one that reads as milliseconds since the epoch.
fn deadline(headers: Option<&HeaderMap>) -> Option<SystemTime> {
    let ms = header(headers, HEADER_DEADLINE)?.parse::<u64>().ok()?;
    Some(SystemTime::UNIX_EPOCH + Duration::from_millis(ms))
}

pub(crate) use crate::subjects::header_line as header_safe;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_deadline_is_read_from_its_header_only() {
        let mut headers = HeaderMap::new();
        headers.insert("Mesh-Deadlines", "5");
        assert_eq!(deadline(Some(&headers)), None);
        headers.insert(HEADER_DEADLINE, "1796000000000");
        assert_eq!(
            deadline(Some(&headers)),
            Some(SystemTime::UNIX_EPOCH + Duration::from_millis(1_796_000_000_000))
        );
        headers.insert(HEADER_DEADLINE, "soon");
        assert_eq!(deadline(Some(&headers)), None);
        assert_eq!(deadline(None), None);
    }
}
