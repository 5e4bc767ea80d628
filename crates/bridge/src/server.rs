//! The MCP server behind a bridge, spoken to as an MCP client: a child process on its stdio
//! (started again with backoff whenever it exits; its stderr goes to the log, line by line),
//! or a streamable HTTP endpoint (connected again with backoff whenever its session ends).

use std::collections::HashMap;
use std::ffi::OsString;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use http::{HeaderName, HeaderValue};
use mesh_core::runtime::request_state::StateKey;
use mesh_core::runtime::{Reporter, ResourceUpdates};
use rmcp::model::{
    ClientCapabilities, ClientConfig, Implementation, ProgressNotificationParam, ProgressToken,
};
use rmcp::model::{ElicitRequestParams, ElicitResult, ResourceUpdatedNotificationParam};
use rmcp::model::{ProtocolVersion, ServerNotification, SubscriptionFilter};
use rmcp::service::RequestContext;
use rmcp::service::{ClientLifecycleMode, ClientServiceExt, NotificationContext, RunningService};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::{ClientHandler, ErrorData, Peer, RoleClient};

use crate::ask::Asking;
use crate::lines::{Lines, MAX_LINE};
use tokio::io::{AsyncBufReadExt, AsyncRead, BufReader};
use tokio::sync::watch;

/// Where the bridge's server is.
#[derive(Debug, Clone)]
pub enum Target {
    /// A process the bridge starts and speaks to on its stdio, with `env` besides its own.
    Command {
        program: OsString,
        args: Vec<OsString>,
        env: Vec<(String, String)>,
    },
    /// A streamable HTTP endpoint, sent `headers` with every request.
    Url {
        url: String,
        headers: Vec<(HeaderName, HeaderValue)>,
    },
}

/// The first wait before starting a server that exited again, doubled on each exit up to
/// [`MAX_BACKOFF`]; back to the first once it ran [`STABLE`].
const MIN_BACKOFF: Duration = Duration::from_millis(200);
const MAX_BACKOFF: Duration = Duration::from_secs(30);
const STABLE: Duration = Duration::from_secs(60);

/// How long a server has to answer `initialize`.
const INITIALIZE_WITHIN: Duration = Duration::from_secs(30);

/// The longest stderr line logged; the rest of a longer one is dropped.
const MAX_LOG_LINE: usize = 4096;

/// Why a listing is no longer the server's.
pub enum Outdated {
    /// The server it came from exited (or a new start of it runs).
    Restarted,
    /// The server said its tools changed.
    Changed,
}

/// A server that answered `initialize`: its peer, and which start of the server it is.
#[derive(Clone)]
pub struct Connected {
    pub peer: Peer<RoleClient>,
    pub start: u64,
}

/// The server as the bridge's tools reach it: whichever start is running, if one is.
#[derive(Clone)]
pub struct Server {
    /// Seals the server's `requestState` to the caller and tool it was issued for.
    pub key: Arc<StateKey>,
    /// The calls open at the server, where its questions go.
    pub asking: Arc<Asking>,
    current: watch::Receiver<Option<Connected>>,
    /// Bumped whenever the server says its tools changed.
    changes: watch::Receiver<u64>,
    /// Why the server will never start (its program is not there, or not to be run), if so.
    given_up: watch::Receiver<Option<String>>,
    listener: Listener,
}

/// What the server sends the bridge unasked: progress of a call, a changed tool list.
#[derive(Clone)]
struct Listener {
    name: String,
    asking: Arc<Asking>,
    progress: Arc<Mutex<HashMap<ProgressToken, Reporter>>>,
    changes: Arc<watch::Sender<u64>>,
    /// Where the server's word that a resource changed goes: the module's updates subject.
    updates: ResourceUpdates,
}

impl Listener {
    fn progress(&self) -> std::sync::MutexGuard<'_, HashMap<ProgressToken, Reporter>> {
        self.progress.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl ClientHandler for Listener {
    async fn on_progress(
        &self,
        params: ProgressNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        // A token no call of ours holds (a server's mistake, or a flood) is dropped here.
        if let Some(reporter) = self.progress().get(&params.progress_token) {
            reporter.report(params.progress, params.total, params.message.as_deref());
        }
    }

    /// A resource the bridge subscribed to at the server changed: said as the module's, for
    /// the relays whose sessions watch it.
    async fn on_resource_updated(
        &self,
        params: ResourceUpdatedNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        if let Err(e) = self.updates.updated(&params.uri).await {
            tracing::warn!(module = %self.name, uri = %params.uri, "a resource update was not passed on: {e}");
        }
    }

    async fn on_tool_list_changed(&self, _context: NotificationContext<RoleClient>) {
        tracing::info!(module = %self.name, "the MCP server's tools changed");
        self.changes.send_modify(|n| *n += 1);
    }

    async fn create_elicitation(
        &self,
        request: ElicitRequestParams,
        _context: RequestContext<RoleClient>,
    ) -> Result<ElicitResult, ErrorData> {
        let params = serde_json::to_value(&request)
            .map_err(|e| ErrorData::internal_error(e.to_string(), None))?;
        self.asking.ask(params).await
    }

    fn get_info(&self) -> ClientConfig {
        ClientConfig::new(
            capabilities(),
            Implementation::new("mesh-bridge", env!("CARGO_PKG_VERSION")),
        )
    }
}

/// What the bridge declares to a server: questions in forms, which the mesh asks its
/// callers; no sampling, no roots, no URL elicitation (a server that would is told it
/// cannot). A request that makes a task declares the tasks extension beside (task.rs).
pub(crate) fn capabilities() -> ClientCapabilities {
    serde_json::from_value(serde_json::json!({"elicitation": {"form": {}}})).unwrap_or_default()
}

/// A call's hold on its progress token: reports reach the call's reporter until dropped.
pub struct Listening {
    token: ProgressToken,
    listener: Listener,
}

impl Drop for Listening {
    fn drop(&mut self) {
        self.listener.progress().remove(&self.token);
    }
}

impl Server {
    /// Starts `command` as module `name`'s server, and keeps it running (started again
    /// after each exit) until the last clone of the returned handle is dropped.
    pub fn start(name: &str, target: Target, updates: ResourceUpdates) -> Server {
        let (current_tx, current) = watch::channel(None);
        let (changes_tx, changes) = watch::channel(0);
        let (given_up_tx, given_up) = watch::channel(None);
        let asking = Arc::new(Asking::default());
        let listener = Listener {
            name: name.to_owned(),
            asking: asking.clone(),
            progress: Arc::default(),
            changes: Arc::new(changes_tx),
            updates,
        };
        tokio::spawn(supervise(target, current_tx, given_up_tx, listener.clone()));
        Server {
            key: Arc::new(StateKey::generate()),
            asking,
            current,
            changes,
            given_up,
            listener,
        }
    }

    /// Completes, with why, if the server will never start: its program could not be run
    /// at the first start (not found, not executable). Pending otherwise.
    pub async fn given_up(&self) -> String {
        let mut given_up = self.given_up.clone();
        match given_up.wait_for(Option::is_some).await {
            Ok(why) => why.clone().unwrap_or_default(),
            Err(_) => std::future::pending().await,
        }
    }

    /// The running server, if one is.
    pub fn current(&self) -> Option<Connected> {
        self.current.borrow().clone()
    }

    /// The running server, once one is.
    pub async fn connected(&self) -> Connected {
        let mut current = self.current.clone();
        loop {
            if let Some(c) = current.borrow_and_update().clone() {
                return c;
            }
            if current.changed().await.is_err() {
                // The supervisor is gone: nothing will ever connect.
                std::future::pending::<()>().await;
            }
        }
    }

    /// Resolves when `start` is no longer the running server, or its tools changed since
    /// `seen` (a count of [`Server::changes_seen`]), saying which.
    pub async fn outdated(&self, start: u64, seen: u64) -> Outdated {
        let mut current = self.current.clone();
        let mut changes = self.changes.clone();
        loop {
            let same = current
                .borrow_and_update()
                .as_ref()
                .is_some_and(|c| c.start == start);
            if !same {
                return Outdated::Restarted;
            }
            if *changes.borrow_and_update() != seen {
                return Outdated::Changed;
            }
            tokio::select! {
                r = current.changed() => if r.is_err() { return Outdated::Restarted },
                r = changes.changed() => if r.is_err() { return Outdated::Restarted },
            }
        }
    }

    /// How many tool-list changes the server has announced so far.
    pub fn changes_seen(&self) -> u64 {
        *self.changes.borrow()
    }

    /// Routes the server's progress reports under `token` to `reporter` while the returned
    /// hold lives.
    pub fn listen(&self, token: ProgressToken, reporter: Reporter) -> Listening {
        self.listener.progress().insert(token.clone(), reporter);
        Listening {
            token,
            listener: self.listener.clone(),
        }
    }
}

/// Keeps the server running: start, serve until it exits, wait, start again.
async fn supervise(
    target: Target,
    current: watch::Sender<Option<Connected>>,
    given_up: watch::Sender<Option<String>>,
    listener: Listener,
) {
    let name = listener.name.clone();
    let mut backoff = MIN_BACKOFF;
    let mut start = 0u64;
    loop {
        start += 1;
        let began = Instant::now();
        match connect(&target, &listener).await {
            Ok((service, mut child)) => {
                tracing::info!(module = %name, start, "the MCP server is up");
                listen_for_changes(service.peer().clone(), &listener);
                current.send_replace(Some(Connected {
                    peer: service.peer().clone(),
                    start,
                }));
                tokio::select! {
                    quit = service.waiting() => {
                        tracing::debug!(module = %name, ?quit, "the MCP server's session ended");
                    }
                    () = current.closed() => {
                        if let Some(process) = child.as_mut() {
                            process.kill().await;
                        }
                        return;
                    }
                }
                current.send_replace(None);
                match child.as_mut() {
                    Some(process) => {
                        // Its stdout is closed: it is gone, or soon will be.
                        let status =
                            tokio::time::timeout(Duration::from_secs(5), process.child.wait())
                                .await;
                        // What is left of its group (a wrapper's children) goes with it.
                        process.kill().await;
                        tracing::warn!(
                            module = %name,
                            status = ?status.ok().and_then(Result::ok),
                            "the MCP server exited; starting it again in {backoff:?}"
                        );
                    }
                    None => tracing::warn!(
                        module = %name,
                        "the MCP server's session ended; connecting again in {backoff:?}"
                    ),
                }
            }
            // A program that is not there (or may not be run) at the first start will not
            // be there in 6.4 s either: said once, and given up. Later, it is a fault of the
            // moment (an upgrade replacing it), and tried again.
            Err(StartError::Spawn { program, source })
                if start == 1
                    && matches!(
                        source.kind(),
                        std::io::ErrorKind::NotFound | std::io::ErrorKind::PermissionDenied
                    ) =>
            {
                let why = format!(
                    "cannot run {program:?}: {source}; check the command after `--` (on PATH? installed? in the virtualenv it needs?)"
                );
                tracing::error!(module = %name, "the MCP server cannot start: {why}");
                given_up.send_replace(Some(why));
                return;
            }
            Err(e) => {
                tracing::warn!(module = %name, "the MCP server did not start: {e}; trying again in {backoff:?}");
            }
        }
        if began.elapsed() >= STABLE {
            backoff = MIN_BACKOFF;
        }
        tokio::select! {
            () = tokio::time::sleep(backoff) => {}
            () = current.closed() => return,
        }
        backoff = (backoff * 2).min(MAX_BACKOFF);
    }
}

/// Under 2026-07-28 a server says its tools changed only on a `subscriptions/listen`
/// stream the client opens (older versions send the notification unasked, to
/// [`ClientHandler::on_tool_list_changed`]): opened here for a server that declares
/// `tools.listChanged`, for as long as its session lasts.
fn listen_for_changes(peer: Peer<RoleClient>, listener: &Listener) {
    let Some(info) = peer.peer_info() else { return };
    let declares = info
        .capabilities
        .tools
        .as_ref()
        .is_some_and(|t| t.list_changed == Some(true));
    if info.protocol_version < ProtocolVersion::V_2026_07_28 || !declares {
        return;
    }
    let (changes, name) = (listener.changes.clone(), listener.name.clone());
    tokio::spawn(async move {
        let filter = SubscriptionFilter::builder().tools_list_changed().build();
        let mut subscription = match peer.listen(filter).await {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!(module = %name, "the MCP server refused to tell of tool changes: {e}");
                return;
            }
        };
        while let Ok(Some(notification)) = subscription.next().await {
            if matches!(
                notification,
                ServerNotification::ToolListChangedNotification(_)
            ) {
                tracing::info!(module = %name, "the MCP server's tools changed");
                changes.send_modify(|n| *n += 1);
            }
        }
    });
}

/// Why a server did not start.
#[derive(Debug, thiserror::Error)]
enum StartError {
    #[error("cannot run {program:?}: {source}")]
    Spawn {
        program: OsString,
        source: std::io::Error,
    },
    #[error("it did not answer initialize: {0}")]
    Initialize(String),
    #[error("it did not answer initialize within {0:?}")]
    Slow(Duration),
    /// Its process said why on stderr (the last lines it wrote): the reason a person needs.
    #[error("{failed}; it said on stderr: {said}")]
    Said {
        #[source]
        failed: Box<StartError>,
        said: String,
    },
}

/// The stderr lines kept of a server that fails to start, said with the failure.
const TAIL_LINES: usize = 6;

/// A session with the server, and its process if the bridge started one.
type Session = (RunningService<RoleClient, Listener>, Option<Process>);

/// Reaches the server (starting its process, or over HTTP) and speaks MCP's `initialize`.
async fn connect(target: &Target, listener: &Listener) -> Result<Session, StartError> {
    match target {
        Target::Command { program, args, env } => {
            let (service, process) = start(program, args, env, listener).await?;
            Ok((service, Some(process)))
        }
        Target::Url { url, headers } => {
            let mut config = StreamableHttpClientTransportConfig::with_uri(url.clone())
                .custom_headers(headers.iter().cloned().collect::<HashMap<_, _>>());
            // As long as a line of a server's stdout (`MAX_LINE`, why there).
            config.max_json_response_size = MAX_LINE;
            config.max_sse_event_size = MAX_LINE;
            let transport = StreamableHttpClientTransport::from_config(config);
            let service = initialize(
                listener
                    .clone()
                    .serve_with_lifecycle(transport, lifecycle()),
            )
            .await?;
            Ok((service, None))
        }
    }
}

/// The newest protocol where the server speaks it (2026-07-28: `server/discover`, and a
/// tool's `input_required` the bridge relays), else the server's own by `initialize`.
fn lifecycle() -> ClientLifecycleMode {
    ClientLifecycleMode::Auto {
        preferred_versions: vec![ProtocolVersion::V_2026_07_28],
        legacy_version: None,
    }
}

/// `initialize` within [`INITIALIZE_WITHIN`].
async fn initialize<E: std::fmt::Display>(
    serving: impl std::future::Future<Output = Result<RunningService<RoleClient, Listener>, E>>,
) -> Result<RunningService<RoleClient, Listener>, StartError> {
    tokio::time::timeout(INITIALIZE_WITHIN, serving)
        .await
        .map_err(|_| StartError::Slow(INITIALIZE_WITHIN))?
        .map_err(|e| StartError::Initialize(e.to_string()))
}

/// Starts the process and speaks MCP's `initialize` to it.
async fn start(
    program: &OsString,
    args: &[OsString],
    env: &[(String, String)],
    listener: &Listener,
) -> Result<(RunningService<RoleClient, Listener>, Process), StartError> {
    let mut command = tokio::process::Command::new(program);
    command
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        // A process group of its own, which the bridge kills whole (a wrapper's children
        // too: `npx`, `uvx`, `sh -c`) whenever the server is done with.
        .process_group(0)
        .kill_on_drop(true);
    // Nothing of the bridge's own: not its bus credential (a server that had it could
    // subscribe beside the bridge and read every call), not the mesh's settings.
    for (key, _) in std::env::vars_os() {
        let ours = key
            .to_str()
            .is_some_and(|k| k.starts_with("NATS_") || k.starts_with("MESH_"));
        if ours {
            command.env_remove(key);
        }
    }
    // A caller's own credential, from the helper (per person).
    command.envs(env.iter().map(|(k, v)| (k, v)));
    let mut child = command.spawn().map_err(|source| StartError::Spawn {
        program: program.clone(),
        source,
    })?;
    let group = Group(child.id());
    let tail = Arc::new(std::sync::Mutex::new(std::collections::VecDeque::new()));
    let logging = child
        .stderr
        .take()
        .map(|stderr| tokio::spawn(log_lines(listener.name.clone(), stderr, tail.clone())));
    let io = Lines::new(
        child.stdout.take().expect("stdout is piped"),
        child.stdin.take().expect("stdin is piped"),
    );
    match initialize(listener.clone().serve_with_lifecycle(io, lifecycle())).await {
        Ok(service) => Ok((service, Process { child, group })),
        Err(failed) => {
            // What it wrote before it went: read to its end (briefly: a server that hangs
            // on keeps its stderr open), then said with the failure.
            if let Some(logging) = logging {
                let _ = tokio::time::timeout(Duration::from_millis(500), logging).await;
            }
            let said: Vec<String> = tail
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .iter()
                .cloned()
                .collect();
            if said.is_empty() {
                Err(failed)
            } else {
                Err(StartError::Said {
                    failed: Box::new(failed),
                    said: said.join(" | "),
                })
            }
        }
    }
}

/// A server process and its group, killed whole when dropped.
pub(crate) struct Process {
    child: tokio::process::Child,
    group: Group,
}

impl Process {
    async fn kill(&mut self) {
        self.group.kill();
        let _ = self.child.kill().await;
    }
}

/// A process group the bridge started, killed when dropped.
struct Group(Option<u32>);

impl Group {
    fn kill(&self) {
        if let Some(pid) = self.0.and_then(|p| i32::try_from(p).ok()) {
            // SAFETY: a signal to the group of a child we started (its own leader).
            unsafe { libc::kill(-pid, libc::SIGKILL) };
        }
    }
}

impl Drop for Group {
    fn drop(&mut self) {
        self.kill();
    }
}

/// The server's stderr into the log, a line at a time, each cut at [`MAX_LOG_LINE`]; the
/// last [`TAIL_LINES`] kept in `tail` too.
async fn log_lines(
    name: String,
    stderr: impl AsyncRead + Unpin,
    tail: Arc<std::sync::Mutex<std::collections::VecDeque<String>>>,
) {
    let keep = |text: &str| {
        let mut tail = tail.lock().unwrap_or_else(|p| p.into_inner());
        if tail.len() == TAIL_LINES {
            tail.pop_front();
        }
        tail.push_back(text.to_owned());
    };
    let mut reader = BufReader::new(stderr);
    let mut line = Vec::new();
    loop {
        let buf = match reader.fill_buf().await {
            Ok([]) | Err(_) => break,
            Ok(b) => b,
        };
        let (take, ended) = match buf.iter().position(|b| *b == b'\n') {
            Some(at) => (at + 1, true),
            None => (buf.len(), false),
        };
        let room = MAX_LOG_LINE.saturating_sub(line.len());
        line.extend_from_slice(&buf[..take.min(room)]);
        reader.consume(take);
        if ended {
            let text = String::from_utf8_lossy(&line);
            let text = text.trim_end();
            tracing::info!(module = %name, "{text}");
            if !text.is_empty() {
                keep(text);
            }
            line.clear();
        }
    }
    if !line.is_empty() {
        let text = String::from_utf8_lossy(&line);
        tracing::info!(module = %name, "{}", text.trim_end());
        keep(text.trim_end());
    }
}

impl Target {
    /// This target with a caller's credential: its environment for a process, its headers
    /// for an HTTP server.
    pub fn with(&self, credential: &crate::credential::Credential) -> Target {
        let mut target = self.clone();
        match &mut target {
            Target::Command { env, .. } => env.extend(credential.env.iter().cloned()),
            Target::Url { headers, .. } => headers.extend(credential.headers.iter().cloned()),
        }
        target
    }
}
