//! Child processes the `mesh` command starts (nats-server, modules in binaries of their own):
//! finding their binaries, and tying their lives to ours.

use std::path::{Path, PathBuf};

use tokio::process::Command;

/// The first executable file `name` in a directory of `PATH`, as a shell finds a command.
pub fn on_path(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(name))
        .find(|p| executable(p))
}

/// Whether `path` is a file someone may execute.
pub fn executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    path.metadata()
        .map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        .unwrap_or(false)
}

/// Asks the kernel to send the child SIGTERM when the thread that started it ends — when
/// this process dies without stopping it (SIGKILL, a crash), so that nothing it started
/// outlives it (a bus on its port, a module holding its files).
pub fn dies_with_parent(command: &mut Command) {
    // SAFETY: prctl(2) is async-signal-safe and sets only the child's parent-death signal.
    unsafe {
        command.pre_exec(|| {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
}
