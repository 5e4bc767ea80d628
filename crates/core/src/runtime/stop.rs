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
