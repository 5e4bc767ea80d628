//! `mesh up`: a whole local mesh on loopback — nats-server in the accounts layout from a grants
//! file it keeps, the built-in modules, `nats` contexts for everyone — until Ctrl-C; SIGHUP reloads.

use std::collections::BTreeMap;
use std::fs::File;
use std::path::Path;
use std::time::Duration;

use anyhow::{Context as _, bail};
use futures_util::StreamExt;
use serde::{Deserialize, Serialize};
use tokio::sync::watch;
use tokio::task::JoinHandle;

use super::args::{Auth, UpArgs};
use super::external::{self, Launch, ModuleProcess};
use crate::builtin::{BUILTIN, builtin};
use crate::mcp::{self, Relay, RelayOptions};
use crate::state::default_dir;
use mesh_bus::cluster::Cluster;
use mesh_bus::grants::Grants;
use mesh_bus::learned::Learned;
use mesh_bus::natsd::NatsServer;
use mesh_bus::statedir::{
    CONTEXT, GRANTS_FILE, GUEST, Logins, accounts, grants, write_contexts, write_limits,
};
use mesh_core::actor::Layout;
use mesh_core::client::Exit;
use mesh_core::client::{Client, select_context, write_private};
use mesh_core::runtime::Stop;
use mesh_core::runtime::{ServeOptions, Serving};
use mesh_core::subjects::calllog;

/// What a running `mesh up` says about itself in its state directory.
#[derive(Serialize, Deserialize)]
struct UpInfo {
    pid: u32,
    url: String,
    nats_server_pid: Option<u32>,
    /// Every server's, the first's first (a cluster has several).
    #[serde(default)]
    nats_server_pids: Vec<u32>,
    /// Reloads done (by SIGHUP or `mesh up --reload`), and how the last one ended.
    #[serde(default)]
    reloads: u64,
    #[serde(default)]
    last_reload_error: Option<String>,
    /// What the last reload did besides (modules started, stopped), each a sentence:
    /// `mesh up --reload` prints them.
    #[serde(default)]
    last_reload_said: Vec<String>,
}

/// `mesh up --reload`: asks the running `mesh up` to apply its grants file again and says
/// how that went.
async fn reload_running(dir: &Path) -> anyhow::Result<Exit> {
    let read = || {
        std::fs::read_to_string(dir.join("up.json"))
            .ok()
            .and_then(|t| serde_json::from_str::<UpInfo>(&t).ok())
    };
    let Some(before) = read().filter(|_| lock(dir).ok().flatten().is_none()) else {
        eprintln!("mesh: no mesh is up from {}", dir.display());
        return Ok(Exit::Usage);
    };
    // SAFETY: kill(2) has no memory effects; the pid is the running mesh up's own.
    unsafe {
        libc::kill(before.pid as libc::pid_t, libc::SIGHUP);
    }
    let waited = tokio::time::timeout(Duration::from_secs(20), async {
        loop {
            if let Some(now) = read().filter(|n| n.reloads > before.reloads) {
                return now;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await;
    match waited {
        Ok(UpInfo {
            last_reload_error: None,
            last_reload_said,
            ..
        }) => {
            println!(
                "reloaded {} (nats contexts mesh-<name> written for every module and person)",
                dir.join(GRANTS_FILE).display()
            );
            for line in last_reload_said {
                println!("{line}");
            }
            Ok(Exit::Ok)
        }
        Ok(UpInfo {
            last_reload_error: Some(e),
            ..
        }) => {
            eprintln!("mesh: the reload was refused, nothing changed: {e}");
            Ok(Exit::Usage)
        }
        Err(_) => {
            eprintln!(
                "mesh: mesh up (pid {}) did not answer the reload within 20 s",
                before.pid
            );
            Ok(Exit::Usage)
        }
    }
}

pub async fn run(args: UpArgs) -> anyhow::Result<Exit> {
    let dir = args.dir.clone().unwrap_or_else(default_dir);
    if args.reload {
        return reload_running(&dir).await;
    }
    let Some(_lock) = take_dir(&dir)? else {
        return Ok(Exit::Usage);
    };

    // Listening before anything starts: each signal's default would end the process.
    let mut hangup = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup())
        .context("cannot listen for SIGHUP")?;
    let mut signals = Stop::listen().context("cannot listen for Ctrl-C and SIGTERM")?;
    let person = person_name(args.person.as_deref())?;
    let (grants_path, grants) = grants(&dir, &person)?;
    if !grants.people.iter().any(|p| p.user == person) {
        bail!(
            "{person} is not a person in {}: add `{person} {{ roles: [everything] }}` under people, or start as one of them with --as ({})",
            grants_path.display(),
            grants
                .people
                .iter()
                .map(|p| p.user.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    // What the console offers, said before anything starts (a profile not in the file).
    let offered = console_offer(&args, &grants, &grants_path)?;
    let mut logins = Logins::new(&dir, &grants, args.auth == Auth::Operator)?;
    if let Some(provider) = super::jwks::provider(&args.idp).await? {
        if args.auth != Auth::Operator {
            bail!(
                "people sign in with an identity provider in operator mode only: add --auth operator"
            );
        }
        logins = logins.with_idp(provider);
    }
    write_limits(&dir, &grants)?;
    // The tools learned before: routed, each witnessed apart, from the first configuration.
    let mut learned = Learned::read(&dir);

    let binary = match args.nats_server.clone() {
        Some(b) => b,
        None => NatsServer::binary()?,
    };
    // Said in one line, before anything starts: an old server fails on the layout itself.
    mesh_bus::natsd::check_version(&binary)?;
    let mut servers = Cluster::start(
        usize::from(args.cluster),
        &dir,
        binary,
        args.port,
        accounts(&learned.fill(&grants), &logins)?,
    )
    .await?;
    let url = servers.urls();
    if !servers
        .formed(
            &logins.connect(&url, &person, "forming"),
            Duration::from_secs(30),
        )
        .await
    {
        eprintln!("mesh: the servers did not all see each other within 30 s; going on");
    }
    // Each module on a server of its own choosing, in turn; it learns the others from it.
    let each: Vec<String> = servers.servers.iter().map(NatsServer::url).collect();
    ensure_log(&url, &logins, &grants, each.len()).await?;
    // People from the identity provider: the callout answers the servers' questions.
    if let Some((callout, connect)) = logins.callout(&url, &learned.fill(&grants))? {
        let client = Client::connect(&connect).await?;
        // Listening before anyone is told the mesh is up.
        let listening = callout.listen(client.nats().clone()).await?;
        tokio::spawn(listening.serve());
    }

    let mut modules = Modules::start(&grants, &each, &logins, &dir).await?;
    let you = Client::connect(&logins.connect(&url, &person, "console")).await?;
    // "Up" means answering; a stop asked for meanwhile is a stop, not a wait.
    tokio::select! {
        () = modules.ready(&you, ANSWER_WITHIN) => {}
        _ = signals.next() => {
            eprintln!("mesh: stopping before the mesh was up");
            modules.stop(None).await;
            servers.terminate(Duration::from_secs(10)).await;
            return Ok(Exit::Ok);
        }
    }
    // What the catalogue lists of each module now: its tools routed and witnessed each apart,
    // and learned again whenever the catalogue says something changed.
    let mut changed = you
        .nats()
        .subscribe(mesh_core::subjects::catalog::CHANGED_SUBJECT)
        .await
        .context("cannot listen for the catalogue's changes")?;
    let asking = you.clone();
    if let Err(e) = relearn(&dir, &mut servers, &asking, &grants, &logins, &mut learned).await {
        eprintln!("mesh: the tools each module has are not routed apart yet: {e:#}");
    }
    let console = Console::start(&args, you, offered).await?;

    let (path, before) = write_contexts(&dir, &url, &grants, &logins, &person)?;
    // Given back when this mesh stops: `mesh` points at nothing then.
    let restore = before.clone().filter(|b| b != CONTEXT);

    let mut info = UpInfo {
        pid: std::process::id(),
        url: url.clone(),
        nats_server_pid: servers.pids().first().copied(),
        nats_server_pids: servers.pids(),
        reloads: 0,
        last_reload_error: None,
        last_reload_said: Vec::new(),
    };
    std::fs::write(dir.join("up.json"), serde_json::to_string(&info)?)?;

    let banner = Banner {
        servers: &servers,
        modules: &modules,
        person: &person,
        guest: grants.people.iter().any(|p| p.user == GUEST),
        grants_path: &grants_path,
        dir: &dir,
        context_path: &path,
        context_before: before,
        console: &console,
    };
    banner.print()?;
    if let (Some(issuer), Some(_)) = (&args.idp.idp, logins.sentinel()) {
        eprintln!(
            "mesh: people of {issuer} sign in with their ID token: mesh login --id-token FILE --dir {}",
            dir.display()
        );
    }

    // Module processes that ended soon after their start, by name, in a row.
    let mut quick_ends: BTreeMap<String, u32> = BTreeMap::new();
    // The grants and credentials in force: the start's, then each reload's that took (the
    // grants file may say more by now, which is not in force until it is reloaded).
    let mut applied = (grants.clone(), logins.clone());
    let mut watching = tokio::time::interval(MODULE_CHECK);
    let exit = loop {
        tokio::select! {
            _ = signals.next() => break Exit::Ok,
            // A module process that ended by itself (killed, crashed, given up) is started
            // again, as nats-server is; one that keeps ending at once is left stopped, said.
            _ = watching.tick() => {
                for m in modules.answering_now(&asking).await {
                    eprintln!("mesh: module {m} answers now");
                }
                if !modules.processes.iter().any(ModuleProcess::ended) {
                    continue;
                }
                let (grants, logins) = &applied;
                modules.start_again(grants, &each, logins, &dir, &mut quick_ends);
            }
            (index, status) = servers.exited() => {
                let log = servers.config(index).with_extension("log");
                eprintln!(
                    "mesh: nats-server {index} {}; see {}",
                    ended(status),
                    log.display()
                );
                // A cluster goes on without it meanwhile; it is started again on its port.
                if servers.servers.len() == 1 {
                    break Exit::Usage;
                }
                if let Err(e) = servers.servers[index].restart().await {
                    eprintln!("mesh: cannot start nats-server {index} again: {e}");
                    break Exit::Usage;
                }
                eprintln!("mesh: nats-server {index} started again");
                info.nats_server_pids = servers.pids();
                std::fs::write(dir.join("up.json"), serde_json::to_string(&info)?)?;
            }
            Some(event) = changed.next() => {
                // Only the catalogue's event: anyone can land a module's answer on this
                // subject by naming it as their reply.
                if mesh_core::subjects::catalog::Changed::read(&event.payload).is_none() {
                    continue;
                }
                // A burst of changes (modules starting together) is learned once.
                tokio::time::sleep(Duration::from_millis(200)).await;
                while let Ok(Some(_)) =
                    tokio::time::timeout(Duration::ZERO, changed.next()).await
                {}
                // As the last reload left them.
                let (grants, logins) = &applied;
                let relearned =
                    relearn(&dir, &mut servers, &asking, grants, logins, &mut learned).await;
                if let Err(e) = relearned {
                    eprintln!("mesh: the tools the catalogue lists now are not routed: {e:#}");
                }
            }
            _ = hangup.recv() => {
                let outcome =
                    reload(&dir, &mut servers, &applied.1, &person, &url, &modules.served, &learned).await;
                info.reloads += 1;
                info.last_reload_error = outcome.as_ref().err().map(|e| format!("{e:#}"));
                info.last_reload_said.clear();
                match &outcome {
                    Ok(reloaded) => {
                        eprintln!("mesh: reloaded {}", grants_path.display());
                        let mut said = Vec::new();
                        if !reloaded.not_running.is_empty() {
                            said.push(format!(
                                "built-in module(s) {} newly declared: restart mesh up to run them",
                                reloaded.not_running.join(", ")
                            ));
                        }
                        // Modules in processes of their own (a `command:`, a `url:`, a
                        // `mesh-<name>`): those declared no more stopped, those declared
                        // since or started differently now (re)started, with their credentials.
                        applied = (reloaded.grants.clone(), reloaded.logins.clone());
                        let (gone, changed) = modules.stop_changed(&reloaded.grants).await;
                        if !gone.is_empty() {
                            said.push(format!("stopped {} (no longer declared)", gone.join(", ")));
                        }
                        let started =
                            modules.launch_new(&reloaded.grants, &each, &reloaded.logins, &dir, &mut said);
                        let (again, new): (Vec<String>, Vec<String>) =
                            started.into_iter().partition(|m| changed.contains(m));
                        if !again.is_empty() {
                            said.push(format!("started {} again (how it starts changed)", again.join(", ")));
                        }
                        if !new.is_empty() {
                            said.push(format!("started {} (declared since the last start)", new.join(", ")));
                        }
                        for line in &said {
                            eprintln!("mesh: {line}");
                        }
                        info.last_reload_said = said;
                    }
                    Err(e) => eprintln!("mesh: reload refused, the running layout is unchanged: {e:#}"),
                }
                std::fs::write(dir.join("up.json"), serde_json::to_string(&info)?)?;
            }
        }
    };
    eprintln!("mesh: stopping (Ctrl-C again to stop at once)");
    // A second Ctrl-C or SIGTERM ends everything at once, bus included.
    let server_pids = servers.pids();
    let groups: Vec<u32> = modules
        .processes
        .iter()
        .filter_map(ModuleProcess::group)
        .collect();
    let up_json = dir.join("up.json");
    let restore_now = restore.clone();
    tokio::spawn(async move {
        signals.next().await;
        eprintln!("mesh: stopping at once");
        for pid in server_pids {
            // SAFETY: kill(2) on our own child's pid has no memory effects.
            unsafe { libc::kill(pid as libc::pid_t, libc::SIGKILL) };
        }
        for group in groups {
            external::signal_group(group, libc::SIGKILL);
        }
        let _ = std::fs::remove_file(&up_json);
        if let Some(b) = &restore_now {
            let _ = select_context(Some(b));
        }
        std::process::exit(130);
    });
    modules.stop(Some(console)).await;
    servers.terminate(Duration::from_secs(10)).await;
    let _ = std::fs::remove_file(dir.join("up.json"));
    if let Some(b) = &restore {
        match select_context(Some(b)) {
            Ok(()) => eprintln!("mesh: nats context {b} selected again"),
            Err(e) => eprintln!("mesh: cannot select nats context {b} again: {e}"),
        }
    }
    Ok(exit)
}

/// Makes the state directory (the owner's alone: stores, keys and credentials live there)
/// and takes its lock; `None`, having said why, when another `mesh up` holds it.
fn take_dir(dir: &Path) -> anyhow::Result<Option<File>> {
    mesh_core::runtime::private_dir(dir).with_context(|| {
        format!(
            "cannot make the state directory {} (private)",
            dir.display()
        )
    })?;
    let lock = lock(dir)?;
    if lock.is_none() {
        let info = std::fs::read_to_string(dir.join("up.json"))
            .ok()
            .and_then(|t| serde_json::from_str::<UpInfo>(&t).ok());
        match info {
            Some(i) => eprintln!(
                "mesh: a mesh is already up from {} (pid {}, {}); stop it with Ctrl-C there, or `kill {}`",
                dir.display(),
                i.pid,
                i.url,
                i.pid
            ),
            None => eprintln!("mesh: a mesh is already up from {}", dir.display()),
        }
    }
    Ok(lock)
}

/// How often `mesh up` looks for module processes that ended by themselves.
const MODULE_CHECK: Duration = Duration::from_secs(1);
/// A module process that ends this soon after its start, [`QUICK_ENDS`] times in a row, is
/// not started again.
const QUICK_END: Duration = Duration::from_secs(10);
const QUICK_ENDS: u32 = 3;
/// How long `mesh up` waits for its module processes before it says it is up: one slower
/// (a server fetched by `npx`, say) is said to be starting, and said again once it answers.
const ANSWER_WITHIN: Duration = Duration::from_secs(5);
/// How long a module still starting has to answer one ping.
const PING_WITHIN: Duration = Duration::from_millis(250);

/// How a module process was started, from its grant: a reload that changes it starts the
/// module again.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Launched {
    command: Option<Vec<String>>,
    url: Option<String>,
    headers: Option<String>,
    per_person: Option<usize>,
}

impl Launched {
    fn of(grant: &mesh_bus::grants::ModuleGrant) -> Launched {
        Launched {
            command: grant.command.clone(),
            url: grant.url.clone(),
            headers: grant.headers.clone(),
            per_person: grant.per_person,
        }
    }
}

/// The modules `mesh up` runs: served in this process (the built-in ones, the catalogue
/// among them) and processes of their own (`mesh-<name> run`).
struct Modules {
    /// The built-in modules served here.
    served: Vec<&'static str>,
    tasks: Vec<JoinHandle<()>>,
    catalog: Option<JoinHandle<()>>,
    processes: Vec<ModuleProcess>,
    /// Modules the grants name that nothing here can start.
    not_installed: Vec<String>,
    /// Module processes that ended without answering, or were left stopped.
    silent: Vec<String>,
    /// Module processes started that have not answered yet: `mesh up` says when each does.
    starting: Vec<String>,
    /// How each module process was started (its grant's command, URL, headers, processes per
    /// person): a reload that changes it starts the module again.
    launched: BTreeMap<String, Launched>,
    /// The server a module started later (again, or declared since) connects to, in turn.
    next_url: usize,
    stop: watch::Sender<bool>,
    /// The catalogue stops last, so the others can unregister from it.
    stop_catalog: watch::Sender<bool>,
}

impl Modules {
    /// Module `k` (the built-in ones first, then the processes) connects to `urls[k % n]`.
    async fn start(
        grants: &Grants,
        urls: &[String],
        logins: &Logins,
        dir: &Path,
    ) -> anyhow::Result<Modules> {
        let mut turn = urls.iter().cycle();
        let (stop, stop_rx) = watch::channel(false);
        let (stop_catalog, stop_catalog_rx) = watch::channel(false);
        let mut modules = Modules {
            served: BUILTIN
                .into_iter()
                .filter(|m| grants.module(m).is_some())
                .collect(),
            tasks: Vec::new(),
            catalog: None,
            processes: Vec::new(),
            not_installed: Vec::new(),
            silent: Vec::new(),
            starting: Vec::new(),
            launched: BTreeMap::new(),
            next_url: 0,
            stop,
            stop_catalog,
        };
        for m in modules.served.clone() {
            let catalog = m == mesh_core::subjects::catalog::MODULE;
            let stop = if catalog {
                stop_catalog_rx.clone()
            } else {
                stop_rx.clone()
            };
            let url = turn.next().expect("at least one server");
            let task = serve_builtin(m, url, logins, dir, stop).await?;
            if catalog {
                modules.catalog = Some(task);
            } else {
                modules.tasks.push(task);
            }
        }
        // The modules in binaries of their own (decide, and any `mesh-<name>` the grants name).
        for grant in grants
            .modules
            .iter()
            .filter(|m| !BUILTIN.contains(&m.name.as_str()))
        {
            let url = turn.next().expect("at least one server");
            modules.launch(grant, url, logins, dir)?;
        }
        Ok(modules)
    }

    /// Starts module `grant` in a process of its own, connecting to `url`: an MCP server the
    /// grants give a command or URL through this binary (`run --mcp`), else its `mesh-<name>`
    /// binary; one that nothing here can start is kept as not installed.
    fn launch(
        &mut self,
        grant: &mesh_bus::grants::ModuleGrant,
        url: &str,
        logins: &Logins,
        dir: &Path,
    ) -> anyhow::Result<()> {
        let m = grant.name.as_str();
        let bridged = |more: Vec<std::ffi::OsString>| {
            let mut args: Vec<std::ffi::OsString> = vec!["--mcp".into(), m.into()];
            if let Some(max) = grant.per_person {
                args.extend([
                    "--per-person".into(),
                    "--max-processes".into(),
                    max.to_string().into(),
                ]);
            }
            args.extend(more);
            anyhow::Ok((external::own_binary()?, args))
        };
        let (binary, args) = match (&grant.command, &grant.url) {
            (Some(command), _) => {
                let mut more = vec!["--".into()];
                more.extend(command.iter().map(Into::into));
                bridged(more)?
            }
            (None, Some(url)) => {
                let mut more = vec!["--url".into(), url.into()];
                if let Some(headers) = &grant.headers {
                    more.extend(["--headers".into(), headers.into()]);
                }
                bridged(more)?
            }
            (None, None) => match external::find(m) {
                Some(binary) => (binary, Vec::new()),
                None => {
                    self.not_installed.push(m.to_owned());
                    return Ok(());
                }
            },
        };
        let launch = Launch {
            url,
            password: logins.password(m).unwrap_or_default(),
            creds: logins.creds(m),
            accounts: logins.accounts_file(),
            state: dir,
            args: &args,
        };
        let process = ModuleProcess::spawn(m, &binary, &launch)
            .with_context(|| format!("cannot start {}", binary.display()))?;
        self.processes.push(process);
        self.launched.insert(m.to_owned(), Launched::of(grant));
        // Started (again): answering or not is its own to say from here.
        self.silent.retain(|s| s != m);
        if !self.starting.iter().any(|s| s == m) {
            self.starting.push(m.to_owned());
        }
        Ok(())
    }

    /// Stops the module processes a reload's grants no longer declare, and those whose
    /// start changed (command, URL, headers, processes per person), each bounded: the names
    /// stopped for good, and those to start again as the grants say now.
    async fn stop_changed(&mut self, grants: &Grants) -> (Vec<String>, Vec<String>) {
        let (mut gone, mut changed) = (Vec::new(), Vec::new());
        let mut stopping = Vec::new();
        for p in std::mem::take(&mut self.processes) {
            match grants.module(&p.name) {
                None => gone.push(p.name.clone()),
                Some(g) if self.launched.get(&p.name) != Some(&Launched::of(g)) => {
                    changed.push(p.name.clone())
                }
                Some(_) => {
                    self.processes.push(p);
                    continue;
                }
            }
            self.launched.remove(&p.name);
            self.starting.retain(|s| *s != p.name);
            stopping.push(p.stop(Duration::from_secs(10)));
        }
        futures_util::future::join_all(stopping).await;
        let declared = |m: &String| grants.module(m).is_some();
        self.silent.retain(declared);
        self.not_installed.retain(declared);
        (gone, changed)
    }

    /// Asks each module process not yet answering once: the names of those that answer now
    /// (no longer starting).
    async fn answering_now(&mut self, you: &Client) -> Vec<String> {
        let asks = self.starting.iter().map(|m| async move {
            let ping = you
                .nats()
                .request(format!("$SRV.PING.{m}"), bytes::Bytes::new());
            matches!(
                tokio::time::timeout(PING_WITHIN, ping).await,
                Ok(Ok(answer)) if answer.status.is_none()
            )
            .then(|| m.clone())
        });
        let now: Vec<String> = futures_util::future::join_all(asks)
            .await
            .into_iter()
            .flatten()
            .collect();
        self.starting.retain(|m| !now.contains(m));
        now
    }

    /// The server for the next module started later, in turn.
    fn next_url<'u>(&mut self, urls: &'u [String]) -> &'u str {
        let url = &urls[self.next_url % urls.len().max(1)];
        self.next_url += 1;
        url
    }

    /// Starts again, each once, the module processes that ended by themselves (still
    /// declared); a module that ended within [`QUICK_END`] of its start [`QUICK_ENDS`] times
    /// in a row is left stopped, and said so (a reload starts it again).
    fn start_again(
        &mut self,
        grants: &Grants,
        urls: &[String],
        logins: &Logins,
        dir: &Path,
        quick_ends: &mut BTreeMap<String, u32>,
    ) {
        let (ended, running): (Vec<_>, Vec<_>) = std::mem::take(&mut self.processes)
            .into_iter()
            .partition(|p| p.ended());
        self.processes = running;
        for p in ended {
            let Some(grant) = grants.module(&p.name) else {
                continue;
            };
            let quick = p.started.elapsed() < QUICK_END;
            let count = quick_ends.entry(p.name.clone()).or_default();
            *count = if quick { *count + 1 } else { 0 };
            if *count >= QUICK_ENDS {
                eprintln!(
                    "mesh: module {} ended within {QUICK_END:?} of its start {QUICK_ENDS} times in a row; not started again (see its messages above; `mesh up --reload` tries again)",
                    p.name
                );
                quick_ends.remove(&p.name);
                self.starting.retain(|s| *s != p.name);
                self.silent.push(p.name.clone());
                continue;
            }
            eprintln!("mesh: module {} ended by itself; starting it again", p.name);
            let url = self.next_url(urls);
            if let Err(e) = self.launch(grant, url, logins, dir) {
                eprintln!("mesh: module {} not started again: {e:#}", p.name);
            }
        }
    }

    /// Starts the modules the grants declare that run in processes of their own and that
    /// this `mesh up` has not started (declared since): their names (why any could not be
    /// started, added to `not_started`).
    fn launch_new(
        &mut self,
        grants: &Grants,
        urls: &[String],
        logins: &Logins,
        dir: &Path,
        not_started: &mut Vec<String>,
    ) -> Vec<String> {
        let mut started = Vec::new();
        for grant in grants
            .modules
            .iter()
            .filter(|m| !BUILTIN.contains(&m.name.as_str()))
        {
            let known = self.processes.iter().any(|p| p.name == grant.name)
                || self.not_installed.contains(&grant.name);
            if known {
                continue;
            }
            let url = self.next_url(urls);
            match self.launch(grant, url, logins, dir) {
                Ok(()) if self.processes.iter().any(|p| p.name == grant.name) => {
                    started.push(grant.name.clone())
                }
                Ok(()) => {}
                Err(e) => not_started.push(format!("module {} not started: {e:#}", grant.name)),
            }
        }
        started
    }

    /// Waits, all at once and up to `bound`, until every module process answers its ping:
    /// one that ended meanwhile is silent (it said why on stderr), one still running and
    /// not answering is left starting — `mesh up` goes on, and says when it answers.
    async fn ready(&mut self, you: &Client, bound: Duration) {
        let waits = self.processes.iter().map(|p| async move {
            match p.ready(you, bound).await {
                Ok(()) => (p.name.clone(), None),
                Err(e) => (p.name.clone(), Some(e)),
            }
        });
        for (name, outcome) in futures_util::future::join_all(waits).await {
            match outcome {
                None => self.starting.retain(|s| *s != name),
                Some(e @ external::NotReady::Ended(_)) => {
                    eprintln!("mesh: {e}");
                    self.starting.retain(|s| *s != name);
                    self.silent.push(name);
                }
                Some(external::NotReady::Silent(..)) => {}
            }
        }
    }

    /// The names of the modules up and answering, in order.
    fn names(&self) -> Vec<&str> {
        self.served
            .iter()
            .copied()
            .chain(
                self.processes
                    .iter()
                    .map(|p| p.name.as_str())
                    .filter(|n| !self.silent.iter().chain(&self.starting).any(|s| s == n)),
            )
            .collect()
    }

    /// Stops the modules (the catalogue last, while the bus is still there for them to
    /// unregister from: it is in a process group of its own, so the terminal's Ctrl-C did not
    /// reach it), then the console. Each step is bounded.
    async fn stop(self, console: Option<Console>) {
        let _ = self.stop.send(true);
        if let Some(console) = &console {
            let _ = console.stop.send(true);
        }
        let in_process = async {
            for task in self.tasks {
                let _ = task.await;
            }
        };
        let processes = futures_util::future::join_all(
            self.processes
                .into_iter()
                .map(|p| p.stop(Duration::from_secs(10))),
        );
        tokio::join!(in_process, processes);
        let _ = self.stop_catalog.send(true);
        if let Some(task) = self.catalog {
            let _ = task.await;
        }
        if let Some(console) = console
            && tokio::time::timeout(Duration::from_secs(5), console.task)
                .await
                .is_err()
        {
            eprintln!("mesh: the console did not close its connections within 5 s; leaving them");
        }
    }
}

/// Makes the call log's streams, or brings them to the grants' retention, as the owner.
async fn ensure_log(
    url: &str,
    logins: &Logins,
    grants: &Grants,
    servers: usize,
) -> anyhow::Result<()> {
    let client = Client::connect(&logins.connect(url, calllog::OWNER, "the call log")).await?;
    // Every module and person shares the log; a few more, for those the grants gain later.
    let parties = mesh_bus::calllog::Parties {
        modules: grants.modules.len() + 4,
        callers: grants.modules.len() + grants.people.len() + 8,
    };
    mesh_bus::calllog::ensure(client.nats(), grants.log.retention, servers.min(3), parties).await?;
    Ok(())
}

/// Serves built-in module `m` in this process, as its own user, until `stop` says so.
async fn serve_builtin(
    m: &str,
    url: &str,
    logins: &Logins,
    dir: &Path,
    mut stop: watch::Receiver<bool>,
) -> anyhow::Result<JoinHandle<()>> {
    let client = Client::connect(&logins.connect(url, m, m)).await?;
    let module = builtin(m, &client, dir).await?;
    let options = ServeOptions {
        layout: Layout::Accounts,
        ..Default::default()
    };
    let serving = Serving::start(module, client.nats().clone(), options).await?;
    Ok(tokio::spawn(serving.run(async move {
        let _ = stop.wait_for(|s| *s).await;
    })))
}

/// The console: `mesh serve` as part of the mesh, relaying as the person who ran `mesh up`.
struct Console {
    url: String,
    /// The selection it offers, as said to the person; `None`: all of theirs.
    offers: Option<String>,
    task: JoinHandle<anyhow::Result<()>>,
    stop: watch::Sender<bool>,
}

impl Console {
    /// Binds the console's port (the one asked for, else 7411, else a free one) and serves,
    /// relaying as `you` what `offered` says.
    async fn start(args: &UpArgs, you: Client, offered: RelayOptions) -> anyhow::Result<Console> {
        let listener = match mcp::http::bind(
            "127.0.0.1",
            args.console_port.unwrap_or(mcp::http::DEFAULT_PORT),
        )
        .await
        {
            Ok(l) => l,
            Err(_) if args.console_port.is_none() => mcp::http::bind("127.0.0.1", 0).await?,
            Err(e) => return Err(e.context("cannot bind the console")),
        };
        let console_url = format!("http://{}{}", listener.local_addr()?, mcp::http::PATH);
        let offers = offered.selection.as_ref().map(ToString::to_string);
        let relay = Relay::following(you, offered);
        let token = crate::state::console_token().with_context(|| {
            format!(
                "cannot make or read the console's token {}",
                crate::state::console_token_path().display()
            )
        })?;
        let (stop, mut stopped) = watch::channel(false);
        let task = tokio::spawn(mcp::http::serve(
            relay,
            listener,
            token,
            mcp::http::Limits::default(),
            async move {
                let _ = stopped.wait_for(|s| *s).await;
            },
        ));
        Ok(Console {
            url: console_url,
            offers,
            task,
            stop,
        })
    }
}

/// The console's selection (`--console-tools`, `--console-profile` from the mesh's own
/// grants file, read at the start: a profile changed later applies at the next start) and
/// when it offers its search.
fn console_offer(args: &UpArgs, grants: &Grants, path: &Path) -> anyhow::Result<RelayOptions> {
    let selection = match &args.console_profile {
        Some(name) => Some(super::mcp::profile_selection(grants, name, path)?),
        None => super::mcp::selection(&args.console_tools, None, None)?,
    };
    Ok(RelayOptions {
        selection,
        search: mcp::search::Mode {
            always: args.console_search,
            over: args.console_search_over,
        },
        ..RelayOptions::default()
    })
}

/// What `mesh up` says once everything answers: where things are and how to reach them.
struct Banner<'a> {
    servers: &'a Cluster,
    modules: &'a Modules,
    person: &'a str,
    guest: bool,
    grants_path: &'a Path,
    dir: &'a Path,
    context_path: &'a Path,
    context_before: Option<String>,
    console: &'a Console,
}

impl Banner<'_> {
    fn print(&self) -> anyhow::Result<()> {
        let person = self.person;
        println!("mesh is up");
        match self.servers.servers.as_slice() {
            [one] => println!(
                "  nats-server {} (pid {}), an account per module, PEOPLE for people",
                one.url(),
                one.pid().unwrap_or_default()
            ),
            many => {
                println!(
                    "  nats-servers: {} as one cluster (the catalogue kept on {}), an account per module, PEOPLE for people",
                    many.len(),
                    many.len().min(3)
                );
                for s in many {
                    println!(
                        "               {} (pid {})",
                        s.url(),
                        s.pid().unwrap_or_default()
                    );
                }
            }
        }
        println!("  modules:     {}", self.modules.names().join(", "));
        for m in &self.modules.starting {
            println!("  starting:    {m} (not answering yet; mesh up says when it does)");
        }
        for m in &self.modules.silent {
            println!("  not answering: {m} (its process ended; see above)");
        }
        for m in &self.modules.not_installed {
            println!(
                "  not started: {m} ({} is not installed; start the module yourself, or see README)",
                external::binary_name(m)
            );
        }
        println!("  you:         {person}@PEOPLE");
        if self.guest {
            println!(
                "  guest:       {GUEST}@PEOPLE (context {CONTEXT}-{GUEST}; may call echo and, as every person, catalog_modules)"
            );
        }
        println!(
            "  grants:      {} (edit, then `mesh up --reload`)",
            self.grants_path.display()
        );
        println!("  state:       {}", self.dir.display());
        let path = self.context_path.display();
        match self.context_before.as_deref().filter(|b| *b != CONTEXT) {
            Some(b) => println!(
                "  nats context {CONTEXT} selected ({path}); it was {b}: `nats context select {b}` to go back"
            ),
            None => println!("  nats context {CONTEXT} selected ({path})"),
        }
        println!("  contexts:    {CONTEXT}-<name> for every module and person in the grants");
        let console_url = &self.console.url;
        println!("  console:     {console_url} (MCP over streamable HTTP, loopback only)");
        if let Some(offers) = &self.console.offers {
            println!("               offering only {offers}");
        }
        println!(
            "  token:       {} (the console's bearer token; mesh --console reads it)",
            crate::state::console_token_path().display()
        );
        let exe = external::own_binary()
            .map(|p| p.display().to_string())
            .unwrap_or_else(|_| "mesh".into());
        println!();
        println!("MCP client configuration (either entry):");
        // The token itself is never printed (a start's output ends up in logs and
        // scrollback): where it is, and how to put it in.
        let token_path = crate::state::console_token_path();
        let snippet = serde_json::json!({"mcpServers": {
            "mesh": {"command": exe, "args": ["--context", CONTEXT, "mcp"]},
            "mesh-console": {"type": "http", "url": console_url,
                "headers": {"Authorization": format!("Bearer <the token in {}>", token_path.display())}},
        }});
        println!("{}", serde_json::to_string_pretty(&snippet)?);
        println!(
            "A client that cannot send headers: the \"mesh\" entry, or the console with its token in the URL:\n  \"{console_url}?token=$(cat {})\"",
            token_path.display()
        );
        println!();
        println!("From another terminal:");
        println!("  mesh tools");
        println!("  mesh call echo text=hello");
        println!(
            "  nats req mesh.echo.echo '{{\"text\":\"hello\"}}'   # with natscli, if you have it (optional)"
        );
        println!("Ctrl-C stops everything.");
        Ok(())
    }
}

/// What a reload applied: the grants and credentials in force now, and the built-in modules
/// they declare that this `mesh up` did not start.
struct Reloaded {
    grants: Grants,
    logins: Logins,
    not_running: Vec<String>,
}

/// Applies the grants file again: a new configuration for every server (credentials kept),
/// each reloaded without dropping a connection, every context written.
async fn reload(
    dir: &Path,
    servers: &mut Cluster,
    logins: &Logins,
    person: &str,
    url: &str,
    started: &[&str],
    learned: &Learned,
) -> anyhow::Result<Reloaded> {
    let path = dir.join(GRANTS_FILE);
    let grants =
        Grants::read_file(&path).map_err(|e| anyhow::anyhow!("cannot read the grants: {e}"))?;
    if !grants.people.iter().any(|p| p.user == person) {
        bail!(
            "{person} (who this mesh up runs as) is no longer a person in {}",
            path.display()
        );
    }
    let previous: Vec<Option<String>> = (0..servers.servers.len())
        .map(|i| std::fs::read_to_string(servers.config(i)).ok())
        .collect();
    let logins = Logins::new(dir, &grants, logins.operator.is_some())?.keeping_idp(logins);
    write_limits(dir, &grants)?;
    apply(servers, &learned.fill(&grants), &logins, previous).await?;
    ensure_log(url, &logins, &grants, servers.servers.len()).await?;
    write_contexts(dir, url, &grants, &logins, person)?;
    let not_running = BUILTIN
        .into_iter()
        .filter(|m| grants.module(m).is_some() && !started.contains(m))
        .map(String::from)
        .collect();
    Ok(Reloaded {
        grants,
        logins,
        not_running,
    })
}

/// Rewrites every server's configuration for `grants` and reloads each; on a refusal puts
/// `previous` (what runs) back.
async fn apply(
    servers: &mut Cluster,
    grants: &Grants,
    logins: &Logins,
    previous: Vec<Option<String>>,
) -> anyhow::Result<()> {
    servers.rewrite(&accounts(grants, logins)?)?;
    // Operator mode: the accounts go to the resolver, which every server shares; a reload
    // would not change them (and users' permissions are in their credential files).
    if logins.operator.is_some() {
        let url = servers.urls();
        return logins.push(&url, grants).await.map_err(anyhow::Error::new);
    }
    if let Err(e) = servers.reload().await {
        // Put the configurations that run back, so the files say what is in force.
        for (i, p) in previous.iter().enumerate() {
            if let Some(p) = p {
                let _ = write_private(servers.config(i), p);
            }
        }
        let _ = servers.reload().await;
        bail!("nats-server refused the new configuration: {e}");
    }
    // nats-server 2.15 leaves the imports of an account a reload adds unresolved (its calls
    // find no responders) until the next reload of the same file: tried, and so done twice.
    servers
        .reload()
        .await
        .map_err(|e| anyhow::anyhow!("nats-server's second reload failed: {e}"))
}

/// Asks the catalogue which tools each module has; when that is news, keeps it and routes
/// each tool apart (the servers' configurations rewritten and reloaded).
async fn relearn(
    dir: &Path,
    servers: &mut Cluster,
    you: &Client,
    grants: &Grants,
    logins: &Logins,
    learned: &mut Learned,
) -> anyhow::Result<()> {
    let Some(now) = learned.ask(you, grants).await else {
        return Ok(());
    };
    if now == *learned {
        return Ok(());
    }
    now.write(dir).with_context(|| {
        format!(
            "cannot write {}",
            dir.join(mesh_bus::learned::FILE).display()
        )
    })?;
    // Only when what is routed changed, not when a tool was merely listed again.
    if now.routed() == learned.routed() {
        *learned = now;
        return Ok(());
    }
    let previous: Vec<Option<String>> = (0..servers.servers.len())
        .map(|i| std::fs::read_to_string(servers.config(i)).ok())
        .collect();
    apply(servers, &now.fill(grants), logins, previous).await?;
    *learned = now;
    Ok(())
}

/// Takes the state directory's lock; `None` when another `mesh up` holds it. The lock goes
/// with the process, however it ends.
fn lock(dir: &Path) -> anyhow::Result<Option<File>> {
    let path = dir.join("lock");
    let file = File::create(&path).with_context(|| format!("cannot open {}", path.display()))?;
    match file.try_lock() {
        Ok(()) => Ok(Some(file)),
        Err(std::fs::TryLockError::WouldBlock) => Ok(None),
        Err(std::fs::TryLockError::Error(e)) => {
            Err(e).with_context(|| format!("cannot lock {}", path.display()))
        }
    }
}

/// The person's user name: given, else `$USER`, checked to be usable in a subject.
/// The name of the OS account this process runs as, from the password database.
fn os_account() -> Option<String> {
    let mut buf = vec![0u8; 4096];
    // SAFETY: `pwd` and `buf` outlive the call; getpwuid_r writes within `buf`'s length and
    // points `found` at `pwd` or leaves it null; the name is read before `buf` goes.
    unsafe {
        let mut pwd: libc::passwd = std::mem::zeroed();
        let mut found: *mut libc::passwd = std::ptr::null_mut();
        let rc = libc::getpwuid_r(
            libc::geteuid(),
            &mut pwd,
            buf.as_mut_ptr().cast(),
            buf.len(),
            &mut found,
        );
        if rc != 0 || found.is_null() || pwd.pw_name.is_null() {
            return None;
        }
        let name = std::ffi::CStr::from_ptr(pwd.pw_name).to_str().ok()?;
        (!name.is_empty()).then(|| name.to_owned())
    }
}

/// Who you are on the mesh: `--as`, else `$USER`, else the OS account you run as (`$USER`
/// is unset in containers, CI and under `env -i`), else `me`.
fn person_name(given: Option<&str>) -> anyhow::Result<String> {
    let name = match given {
        Some(n) => n.to_owned(),
        None => std::env::var("USER")
            .ok()
            .filter(|u| !u.is_empty())
            .or_else(os_account)
            .unwrap_or_else(|| "me".into()),
    };
    if !mesh_bus::grants::usable_user(&name) {
        bail!(
            "user name {name:?} cannot be used in a subject: give one of [A-Za-z0-9_-] with --as"
        );
    }
    if name == GUEST || BUILTIN.contains(&name.as_str()) {
        bail!("user name {name:?} is taken by mesh up itself: choose another with --as");
    }
    Ok(name)
}

/// How a server's process ended, as a person reads it (`killed by signal 9 (SIGKILL)`, not
/// `Some(ExitStatus(unix_wait_status(9)))`).
fn ended(status: Option<std::process::ExitStatus>) -> String {
    use std::os::unix::process::ExitStatusExt;
    let Some(status) = status else {
        return "stopped (how, the system did not say)".into();
    };
    match (status.code(), status.signal()) {
        (Some(0), _) => "exited by itself (code 0)".into(),
        (Some(code), _) => format!("exited by itself with code {code}"),
        (None, Some(signal)) => {
            let name = match signal {
                libc::SIGKILL => " (SIGKILL)",
                libc::SIGTERM => " (SIGTERM)",
                libc::SIGINT => " (SIGINT)",
                libc::SIGSEGV => " (SIGSEGV)",
                libc::SIGABRT => " (SIGABRT)",
                _ => "",
            };
            format!("was killed by signal {signal}{name}")
        }
        (None, None) => format!("stopped ({status})"),
    }
}

#[cfg(test)]
mod ended_tests {
    use super::ended;
    use std::os::unix::process::ExitStatusExt;

    #[test]
    fn a_servers_end_is_said_in_words() {
        assert_eq!(
            ended(Some(std::process::ExitStatus::from_raw(9))),
            "was killed by signal 9 (SIGKILL)"
        );
        assert_eq!(
            ended(Some(std::process::ExitStatus::from_raw(3 << 8))),
            "exited by itself with code 3"
        );
    }
}
