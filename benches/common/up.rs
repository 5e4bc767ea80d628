//! `mesh up` in a home of its own, as README's first command runs it, for the benchmarks that
//! measure the mesh as deployed: started, its nats-server's pid and console read from what it
//! prints, stopped as Ctrl-C stops it.

use std::time::Duration;

/// `mesh up` in a home of its own under `dir`, as README's first command runs it (with a
/// grants file of `grants` when given, else the one it writes); stopped as Ctrl-C stops it.
pub struct Up {
    child: std::process::Child,
    pub home: std::path::PathBuf,
    pub pid: u32,
    pub server_pid: Option<u32>,
    #[allow(dead_code)] // not every benchmark opens the console
    pub console: String,
}

impl Up {
    pub fn start(dir: &std::path::Path, grants: Option<&str>) -> Up {
        Up::start_with(dir, grants, &[])
    }

    /// As [`Up::start`], with more arguments for `mesh up` (`--auth operator`, `--idp …`).
    pub fn start_with(dir: &std::path::Path, grants: Option<&str>, more: &[&str]) -> Up {
        use std::os::unix::process::CommandExt as _;
        let home = dir.join("home");
        let state = home.join("state");
        std::fs::create_dir_all(&state).expect("home");
        if let Some(grants) = grants {
            std::fs::write(state.join("grants.conf"), grants).expect("grants");
        }
        let mut up = std::process::Command::new(env!("CARGO_BIN_EXE_mesh"))
            .args(["up", "--as", "bench", "--dir"])
            .arg(&state)
            .args(more)
            .env("HOME", &home)
            .env("XDG_CONFIG_HOME", home.join("config"))
            .env("XDG_CACHE_HOME", home.join("cache"))
            .env("XDG_STATE_HOME", home.join("state-home"))
            .env_remove("NATS_URL")
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .process_group(0)
            .spawn()
            .expect("mesh up starts");
        let (mut server_pid, mut console) = (None, String::new());
        let mut lines =
            std::io::BufRead::lines(std::io::BufReader::new(up.stdout.take().expect("stdout")));
        for line in lines.by_ref() {
            let line = line.expect("mesh up's output");
            if server_pid.is_none()
                && let Some(rest) = line.split("(pid ").nth(1)
            {
                server_pid = rest.split(')').next().and_then(|p| p.parse::<u32>().ok());
            }
            if let Some(url) = line.trim().strip_prefix("console:") {
                console = url.split_whitespace().next().unwrap_or_default().to_owned();
            }
            if line.starts_with("Ctrl-C stops everything") {
                break;
            }
        }
        // Keep reading so that mesh up never blocks on a full pipe.
        std::thread::spawn(move || for _ in lines {});
        Up {
            pid: up.id(),
            child: up,
            home,
            server_pid,
            console,
        }
    }
}

impl Drop for Up {
    fn drop(&mut self) {
        // Ctrl-C to its process group: the modules and servers it started end with it.
        // SAFETY: signalling our own child's process group.
        unsafe { libc::kill(-(self.pid as libc::pid_t), libc::SIGINT) };
        // Bounded: past 60 s, the whole group is killed (a run never hangs on its end).
        for _ in 0..600 {
            if !matches!(self.child.try_wait(), Ok(None)) {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        // SAFETY: as above.
        unsafe { libc::kill(-(self.pid as libc::pid_t), libc::SIGKILL) };
        let _ = self.child.wait();
    }
}
