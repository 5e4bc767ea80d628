//! Stopping a module's process the Unix way: Ctrl-C or SIGTERM, heard from the start.

/// Ctrl-C and SIGTERM, listened for from the moment this is made: a signal that comes before
/// anyone waits is kept, not taken by the default action (which ends the process at once).
pub struct Stop {
    interrupt: tokio::signal::unix::Signal,
    terminate: tokio::signal::unix::Signal,
}

impl Stop {
    pub fn listen() -> std::io::Result<Stop> {
        use tokio::signal::unix::{SignalKind, signal};
        Ok(Stop {
            interrupt: signal(SignalKind::interrupt())?,
            terminate: signal(SignalKind::terminate())?,
        })
    }

    /// Completes on the next Ctrl-C or SIGTERM.
    pub async fn next(&mut self) {
        tokio::select! {
            _ = self.interrupt.recv() => {},
            _ = self.terminate.recv() => {},
        }
    }
}

impl Stop {
    /// The stop of a long-running process: completes on the first Ctrl-C or SIGTERM; a second
    /// one while it stops ends the process at once (exit 130), saying so as `who` — a stop is
    /// bounded, but a person need not wait for it.
    pub async fn then_at_once(mut self, who: &'static str) {
        self.next().await;
        tokio::spawn(async move {
            self.next().await;
            eprintln!("{who}: stopping at once");
            std::process::exit(130);
        });
    }
}

/// Makes `dir` (and its parents) and keeps it its owner's alone (0700): stores, keys and
/// credentials live there.
pub fn private_dir(dir: &std::path::Path) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::create_dir_all(dir)?;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
}
