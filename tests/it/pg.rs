//! A PostgreSQL server per test, as the tests start nats-server: Debian's package (bin/deps.sh
//! installs it), `initdb` into a temporary directory, a free port on loopback; stopped when
//! dropped. PostgreSQL refuses to run as root, so under root it runs as the `postgres` user
//! the package made.

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub struct Postgres {
    child: Child,
    pub url: String,
    /// How the server was started, to start it again.
    start: (PathBuf, Vec<String>, Option<(u32, u32)>),
    _dir: tempfile::TempDir,
}

/// Where PostgreSQL's server programs are: `pg_config --bindir`, else Debian's folder.
fn bindir() -> PathBuf {
    let from_config = Command::new("pg_config")
        .arg("--bindir")
        .output()
        .ok()
        .map(|o| PathBuf::from(String::from_utf8_lossy(&o.stdout).trim()))
        .filter(|d| d.join("initdb").is_file());
    let debian = || {
        let mut found: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
            .ok()?
            .flatten()
            .map(|e| e.path().join("bin"))
            .filter(|d| d.join("initdb").is_file())
            .collect();
        found.sort();
        found.pop()
    };
    from_config.or_else(debian).unwrap_or_else(|| {
        panic!("PostgreSQL's server is not installed: run bin/test (bin/deps.sh installs Debian's postgresql)")
    })
}

/// The uid and gid to run as: ours, or the `postgres` user's when we are root.
fn run_as() -> Option<(u32, u32)> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return None;
    }
    let name = std::ffi::CString::new("postgres").unwrap();
    // SAFETY: getpwnam reads a static record; copied out at once.
    let pw = unsafe { libc::getpwnam(name.as_ptr()) };
    assert!(
        !pw.is_null(),
        "running as root and there is no postgres user to run PostgreSQL as (bin/deps.sh installs Debian's postgresql, which makes it)"
    );
    // SAFETY: non-null, as checked.
    Some(unsafe { ((*pw).pw_uid, (*pw).pw_gid) })
}

fn command(program: &Path, user: Option<(u32, u32)>) -> Command {
    let mut c = Command::new(program);
    if let Some((uid, gid)) = user {
        c.uid(uid).gid(gid);
    }
    c.stdin(Stdio::null());
    c
}

impl Postgres {
    pub async fn start() -> Postgres {
        let dir = tempfile::tempdir().unwrap();
        let user = run_as();
        if let Some((uid, gid)) = user {
            std::os::unix::fs::chown(dir.path(), Some(uid), Some(gid)).unwrap();
        }
        let data = dir.path().join("data");
        let bin = bindir();
        let init = command(&bin.join("initdb"), user)
            .args([
                "-D",
                data.to_str().unwrap(),
                "-U",
                "mesh",
                "--auth=trust",
                "-E",
                "UTF8",
            ])
            .arg("--no-sync")
            .output()
            .expect("initdb runs");
        assert!(
            init.status.success(),
            "initdb: {}",
            String::from_utf8_lossy(&init.stderr)
        );
        let port = mesh_bus::cluster::free_ports(1).unwrap()[0];
        let args: Vec<String> = [
            "-D",
            data.to_str().unwrap(),
            "-p",
            &port.to_string(),
            "-k",
            dir.path().to_str().unwrap(),
            "-c",
            "listen_addresses=127.0.0.1",
            "-c",
            "fsync=off",
        ]
        .map(String::from)
        .to_vec();
        let program = bin.join("postgres");
        let child = spawn(&program, &args, user);
        let url = format!("postgresql://mesh@127.0.0.1:{port}/postgres");
        let pg = Postgres {
            child,
            url,
            start: (program, args, user),
            _dir: dir,
        };
        pg.ready().await;
        pg
    }

    /// Kills the server (as a crash would).
    /// Kills the server and every backend it forked (its process group): a backend killed
    /// with only its postmaster lives on until it notices, and answers the next query of a
    /// connection it serves meanwhile.
    pub fn kill(&mut self) {
        // Only while the postmaster has not been reaped: its id names its group until then.
        if matches!(self.child.try_wait(), Ok(None)) {
            // SAFETY: kill(2) on the process group of our own child; no memory effects.
            unsafe {
                libc::kill(-(self.child.id() as libc::pid_t), libc::SIGKILL);
            }
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Starts the killed server again on its port, with its data.
    pub async fn start_again(&mut self) {
        let (program, args, user) = &self.start;
        self.child = spawn(program, args, *user);
        self.ready().await;
    }

    async fn ready(&self) {
        let url = self.url.clone();
        let started = Instant::now();
        loop {
            let try_url = url.clone();
            let up = tokio::task::spawn_blocking(move || {
                postgres::Client::connect(&try_url, postgres::NoTls).is_ok()
            })
            .await
            .unwrap();
            if up {
                break;
            }
            // Only a hang bound: a restart under the whole suite's load on two cores has
            // taken more than 30 s.
            assert!(
                started.elapsed() < Duration::from_secs(120),
                "PostgreSQL did not take connections within 120 s"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

fn spawn(program: &Path, args: &[String], user: Option<(u32, u32)>) -> Child {
    command(program, user)
        // A process group of its own, which `kill` ends whole.
        .process_group(0)
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("postgres starts")
}

impl Drop for Postgres {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Holds a module's two dialects to one schema: every (table, column) of its SQLite store is
/// in its PostgreSQL store and the reverse, but for what `only_shared` says a shared store
/// alone needs.
pub fn one_schema(
    lite: &[(String, String)],
    shared: &[(String, String)],
    only_shared: impl Fn(&str, &str) -> bool,
) {
    let shared: Vec<&(String, String)> =
        shared.iter().filter(|(t, c)| !only_shared(t, c)).collect();
    assert!(lite.len() >= 10, "{lite:?}");
    let missing: Vec<_> = lite.iter().filter(|c| !shared.contains(c)).collect();
    let extra: Vec<_> = shared.iter().filter(|c| !lite.contains(c)).collect();
    assert!(
        missing.is_empty() && extra.is_empty(),
        "only in SQLite: {missing:?}; only in PostgreSQL: {extra:?}"
    );
}
