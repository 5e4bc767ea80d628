//! Modules whose commands live in binaries of their own, as git and cargo find theirs:
//! `mesh decide …` runs `mesh-decide …`, found beside `mesh`, then on `PATH`.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use mesh_core::client::Exit;

/// The binary that serves `module` or runs its commands: `mesh-<module>`.
pub fn binary_name(module: &str) -> String {
    format!("mesh-{module}")
}

/// Where `mesh-<module>` is: beside this `mesh` first (an install puts them together, and a
/// test's build does), then the first on `PATH`.
pub fn find(module: &str) -> Option<PathBuf> {
    let name = binary_name(module);
    let beside = std::env::current_exe()
        .ok()
        .and_then(|exe| exe.parent().map(|d| d.join(&name)));
    let on_path = std::env::var_os("PATH")
        .into_iter()
        .flat_map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .map(|d| d.join(&name));
    beside.into_iter().chain(on_path).find(|p| executable(p))
}

fn executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    path.metadata()
        .map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        .unwrap_or(false)
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
}

/// Where and as whom a module process connects.
pub struct Launch<'a> {
    pub url: &'a str,
    pub password: &'a str,
    /// The mesh's state directory: the module keeps its files in `<state>/<name>`.
    pub state: &'a Path,
}

impl ModuleProcess {
    /// Starts `mesh-<name> run --layout accounts`, connected as the module's own user. The
    /// credential goes in its environment (`NATS_URL`, `NATS_USER`, `NATS_PASSWORD`: the
    /// owner's to read, unlike arguments), the state directory as `MESH_STATE_DIR`. It gets a
    /// process group of its own, so that it hears one stop (ours), and SIGTERM should this
    /// process die without stopping it.
    pub fn spawn(name: &str, binary: &Path, launch: &Launch<'_>) -> std::io::Result<Self> {
        let mut command = tokio::process::Command::new(binary);
        command
            .args(["run", "--layout", "accounts"])
            .stdin(std::process::Stdio::null());
        for inherited in [
            "NATS_CONTEXT",
            "NATS_CREDS",
            "NATS_NKEY",
            "NATS_TOKEN",
            "NATS_URL",
            "NATS_USER",
            "NATS_PASSWORD",
        ] {
            command.env_remove(inherited);
        }
        command
            .env("NATS_URL", launch.url)
            .env("NATS_USER", name)
            .env("NATS_PASSWORD", launch.password)
            .env(mesh_core::runtime::STATE_DIR_ENV, launch.state)
            .process_group(0);
        crate::natsd::dies_with_parent(&mut command);
        let mut child = command.spawn()?;
        let pid = child.id();
        let module = name.to_owned();
        let waiting = tokio::spawn(async move {
            match child.wait().await {
                Ok(status) if status.success() => {}
                Ok(status) => eprintln!("mesh: module {module} stopped: {status}"),
                Err(e) => eprintln!("mesh: module {module}: cannot wait for its process: {e}"),
            }
        });
        Ok(ModuleProcess {
            name: name.to_owned(),
            pid,
            waiting,
        })
    }

    /// SIGTERM, then up to `grace` for it to unregister and end; SIGKILL after that.
    pub async fn stop(mut self, grace: std::time::Duration) {
        if self.waiting.is_finished() {
            return;
        }
        if let Some(pid) = self.pid {
            // SAFETY: kill(2) on our own, not yet reaped, child's pid.
            unsafe { libc::kill(pid as libc::pid_t, libc::SIGTERM) };
        }
        if tokio::time::timeout(grace, &mut self.waiting)
            .await
            .is_err()
        {
            eprintln!(
                "mesh: module {} did not stop within {grace:?}; killing it",
                self.name
            );
            if let Some(pid) = self.pid {
                // SAFETY: as above; it has not been reaped (its waiter is still waiting).
                unsafe { libc::kill(pid as libc::pid_t, libc::SIGKILL) };
            }
            let _ = self.waiting.await;
        }
    }

    /// Waits until the module answers its `tools` verb on `client`'s bus, so that "up" means
    /// answering; an error when its process ends first or `bound` passes.
    pub async fn ready(
        &self,
        client: &mesh_core::client::Client,
        bound: std::time::Duration,
    ) -> Result<(), String> {
        let started = std::time::Instant::now();
        loop {
            if self.waiting.is_finished() {
                return Err(format!("module {} ended before it answered", self.name));
            }
            if client
                .tools(&self.name, std::time::Duration::from_secs(1))
                .await
                .is_ok()
            {
                return Ok(());
            }
            if started.elapsed() > bound {
                return Err(format!(
                    "module {} did not answer within {bound:?}",
                    self.name
                ));
            }
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
    }

    /// Its pid, for a stop at once.
    pub fn pid(&self) -> Option<u32> {
        self.pid
    }
}
