//! Modules whose commands live in binaries of their own, as git and cargo find theirs:
//! `mesh decide …` runs `mesh-decide …`, found beside `mesh`, then on `PATH`.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use mesh_bus::process;
use mesh_core::client::Exit;

/// The binary that serves `module` or runs its commands: `mesh-<module>`.
pub fn binary_name(module: &str) -> String {
    format!("mesh-{module}")
}

/// This `mesh` binary's path: where it was started from, even after an upgrade replaced the
/// file (Linux then names the running one "… (deleted)"; the new one at the path is the one
/// a module started later runs).
pub fn own_binary() -> std::io::Result<PathBuf> {
    let exe = std::env::current_exe()?;
    if !exe.exists()
        && let Some(path) = exe.to_str().and_then(|p| p.strip_suffix(" (deleted)"))
    {
        return Ok(PathBuf::from(path));
    }
    Ok(exe)
}

/// Where `mesh-<module>` is: beside this `mesh` first (an install puts them together, and a
/// test's build does), then the first on `PATH`.
pub fn find(module: &str) -> Option<PathBuf> {
    let name = binary_name(module);
    own_binary()
        .ok()
        .and_then(|exe| exe.parent().map(|d| d.join(&name)))
        .filter(|p| process::executable(p))
        .or_else(|| process::on_path(&name))
}

/// Why a module's binary is not there, and what to do about it.
pub fn missing(module: &str) -> String {
    let name = binary_name(module);
    format!(
        "{name} is not installed: neither beside this mesh nor on PATH (install it, e.g. \
         `cargo install --path crates/{module}` from the mesh's source; README says how)"
    )
}

/// Replaces this process with `mesh-<module> args…`: its exit code, output and signals are
/// the command's own, as if it had been started directly.
pub fn exec(module: &str, args: Vec<OsString>) -> Exit {
    use std::os::unix::process::CommandExt;
    let Some(path) = find(module) else {
        eprintln!("mesh: no command {module:?}: {}", missing(module));
        return Exit::Usage;
    };
    let e = std::process::Command::new(&path).args(args).exec();
    eprintln!("mesh: cannot run {}: {e}", path.display());
    Exit::Usage
}

/// `mesh <name> args…`: the external subcommand clap hands over, run as `mesh-<name> args…`.
pub fn command(argv: Vec<OsString>) -> Exit {
    let mut argv = argv.into_iter();
    let Some(name) = argv.next().and_then(|n| n.into_string().ok()) else {
        eprintln!("mesh: a command name must be UTF-8 (see mesh --help)");
        return Exit::Usage;
    };
    // Only a module's name is looked up: no path, no dots, nothing a shell would expand.
    if mesh_core::subjects::check_module(&name).is_err() {
        eprintln!("mesh: no command {name:?} (see mesh --help)");
        return Exit::Usage;
    }
    if find(&name).is_none() {
        eprintln!(
            "mesh: no command {name:?} (see mesh --help); a module's own commands run as {}, \
             which is not installed",
            binary_name(&name)
        );
        return Exit::Usage;
    }
    exec(&name, argv.collect())
}

/// A module served by a process of its own, `mesh-<name> run`, as `mesh up` starts it.
pub struct ModuleProcess {
    pub name: String,
    pid: Option<u32>,
    waiting: tokio::task::JoinHandle<()>,
    /// When it was started: one that ends soon after, again and again, is not started again.
    pub started: std::time::Instant,
}

/// Where and as whom a module process connects.
pub struct Launch<'a> {
    pub url: &'a str,
    pub password: &'a str,
    /// Operator mode: the module's credential file (in place of a password) and which
    /// account each key is (`MESH_ACCOUNTS`).
    pub creds: Option<std::path::PathBuf>,
    pub accounts: Option<std::path::PathBuf>,
    /// The mesh's state directory: the module keeps its files in `<state>/<name>`.
    pub state: &'a Path,
    /// What follows `run --layout accounts`: nothing for `mesh-<name>`; `--mcp <name> --
    /// <command…>` for an MCP server `mesh` bridges.
    pub args: &'a [std::ffi::OsString],
}

impl ModuleProcess {
    /// Starts `mesh-<name> run --layout accounts`, connected as the module's own user. The
    /// credential goes in its environment (`NATS_URL`, `NATS_USER`, `NATS_PASSWORD`: the
    /// owner's to read, unlike arguments), the state directory as `MESH_STATE_DIR`; nothing of
    /// the person's goes with it (no other `NATS_*`, not the console's token). Its stdout
    /// goes to our stderr (our stdout is the banner). It gets a process group of its own, so
    /// that it hears one stop (ours) and a wrapper's children hear it too, and SIGTERM should
    /// this process die without stopping it.
    pub fn spawn(name: &str, binary: &Path, launch: &Launch<'_>) -> std::io::Result<Self> {
        use std::os::fd::AsFd;
        let mut command = tokio::process::Command::new(binary);
        command
            .args(["run", "--layout", "accounts"])
            .args(launch.args)
            .stdin(std::process::Stdio::null())
            .stdout(std::io::stderr().as_fd().try_clone_to_owned()?);
        for (key, _) in std::env::vars_os() {
            let person_s = key.to_str().is_some_and(|k| {
                k.starts_with("NATS_")
                    || k == crate::state::CONSOLE_TOKEN_ENV
                    || k == mesh_core::client::ID_TOKEN_ENV
            });
            if person_s {
                command.env_remove(key);
            }
        }
        command.env("NATS_URL", launch.url);
        match &launch.creds {
            // Its inbox is named after the user its credential file names.
            Some(creds) => command.env("NATS_CREDS", creds),
            None => command
                .env("NATS_USER", name)
                .env("NATS_PASSWORD", launch.password),
        };
        if let Some(accounts) = &launch.accounts {
            command.env(mesh_core::actor::ACCOUNTS_ENV, accounts);
        }
        command
            .env(mesh_core::runtime::STATE_DIR_ENV, launch.state)
            .process_group(0);
        process::dies_with_parent(&mut command);
        let mut child = command.spawn()?;
        let pid = child.id();
        let module = name.to_owned();
        let waiting = tokio::spawn(async move {
            let waited = child.wait().await;
            // Whatever is left of its group (a wrapper's children) goes with it, at once: once
            // the group is empty its id is free, and a later signal to it could reach
            // whichever process is given that id next (ids come round fast under a low
            // pid_max), another `mesh up` included.
            if let Some(group) = pid {
                signal_group(group, libc::SIGKILL);
            }
            match waited {
                Ok(status) if status.success() => {}
                Ok(status) => eprintln!("mesh: module {module} stopped: {status}"),
                Err(e) => eprintln!("mesh: module {module}: cannot wait for its process: {e}"),
            }
        });
        Ok(ModuleProcess {
            name: name.to_owned(),
            pid,
            waiting,
            started: std::time::Instant::now(),
        })
    }

    /// Whether its process has ended.
    pub fn ended(&self) -> bool {
        self.waiting.is_finished()
    }

    /// SIGTERM to its process group, then up to `grace` for it to unregister and end;
    /// SIGKILL to the group after that, so that a wrapper's children (a script that starts
    /// the module rather than exec'ing it) end with it whatever the wrapper did.
    pub async fn stop(mut self, grace: std::time::Duration) {
        let Some(group) = self.pid else {
            return;
        };
        // Ended already: its group went with it, and the id may be another's by now.
        if self.waiting.is_finished() {
            return;
        }
        signal_group(group, libc::SIGTERM);
        if tokio::time::timeout(grace, &mut self.waiting).await.is_ok() {
            // Ended, and what was left of its group went with it (the waiting task).
            return;
        }
        eprintln!(
            "mesh: module {} did not stop within {grace:?}; killing it",
            self.name
        );
        // The module still runs, so the group is still its own.
        signal_group(group, libc::SIGKILL);
        let _ = self.waiting.await;
    }

    /// Waits until the module answers the services protocol's ping (`$SRV.PING.<name>`) on `client`'s bus, so that "up" means
    /// answering; an error when its process ends first or `bound` passes.
    pub async fn ready(
        &self,
        client: &mesh_core::client::Client,
        bound: std::time::Duration,
    ) -> Result<(), NotReady> {
        let started = std::time::Instant::now();
        loop {
            if self.waiting.is_finished() {
                return Err(NotReady::Ended(self.name.clone()));
            }
            // Asked on the services protocol, which is no call: nothing of a start is logged.
            let ping = client
                .nats()
                .request(format!("$SRV.PING.{}", self.name), bytes::Bytes::new());
            if let Ok(Ok(answer)) =
                tokio::time::timeout(std::time::Duration::from_secs(1), ping).await
                && answer.status.is_none()
            {
                return Ok(());
            }
            if started.elapsed() > bound {
                return Err(NotReady::Silent(self.name.clone(), bound));
            }
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
    }

    /// Its process group (its pid), for a stop at once.
    pub fn group(&self) -> Option<u32> {
        // A module that ended took its group with it; its id may be another's by now.
        self.pid.filter(|_| !self.waiting.is_finished())
    }
}

/// Why a module process is not answering.
#[derive(Debug, thiserror::Error)]
pub enum NotReady {
    #[error("module {0} ended before it answered (its messages are above)")]
    Ended(String),
    #[error("module {0} did not answer within {1:?}")]
    Silent(String, std::time::Duration),
}

/// Sends `signal` to every process in group `group` (one `mesh up` made for a module).
pub fn signal_group(group: u32, signal: libc::c_int) {
    // SAFETY: kill(2) with a negative pid signals that process group; no memory effects.
    unsafe { libc::kill(-(group as libc::pid_t), signal) };
}
