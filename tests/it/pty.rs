//! A pseudo-terminal for tests: a command run as a person's terminal runs it, its stdin,
//! stdout and stderr on the terminal side of a pty of a given size, in a session of its own
//! with the pty as its controlling terminal; everything it writes read back from the other
//! side.

use std::io::Read;
use std::os::fd::{FromRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};

/// What a command did on a terminal: its exit code and everything it wrote there.
pub struct OnTerminal {
    pub code: i32,
    pub output: String,
}

/// Runs `cmd` on a new pty `cols` wide and `rows` high, until it exits and the terminal
/// has nothing more to read.
pub fn run(cmd: &mut Command, cols: u16, rows: u16) -> OnTerminal {
    run_typing(cmd, cols, rows, "")
}

/// As [`run`], with `typed` typed at the terminal once the command starts (the terminal
/// keeps it, line by line, until the command reads).
pub fn run_typing(cmd: &mut Command, cols: u16, rows: u16, typed: &str) -> OnTerminal {
    run_typing_after(cmd, cols, rows, typed, std::time::Duration::ZERO)
}

/// As [`run_typing`], typed `after` the command started: `"\x03"` is Ctrl-C, which the
/// terminal turns into SIGINT for the command's whole process group.
pub fn run_typing_after(
    cmd: &mut Command,
    cols: u16,
    rows: u16,
    typed: &str,
    after: std::time::Duration,
) -> OnTerminal {
    let (mut master, mut slave) = (-1, -1);
    let size = libc::winsize {
        ws_row: rows,
        ws_col: cols,
        ws_xpixel: 0,
        ws_ypixel: 0,
    };
    // SAFETY: openpty writes two descriptors it opened; the names and termios may be null.
    let r = unsafe {
        libc::openpty(
            &mut master,
            &mut slave,
            std::ptr::null_mut(),
            std::ptr::null(),
            &size,
        )
    };
    assert_eq!(r, 0, "openpty: {}", std::io::Error::last_os_error());
    // SAFETY: both descriptors are open and owned from here on.
    let (master, slave) = unsafe { (OwnedFd::from_raw_fd(master), OwnedFd::from_raw_fd(slave)) };
    let io = |fd: &OwnedFd| Stdio::from(fd.try_clone().expect("dup the pty"));
    cmd.stdin(io(&slave)).stdout(io(&slave)).stderr(io(&slave));
    // SAFETY: only async-signal-safe calls between fork and exec.
    unsafe {
        cmd.pre_exec(|| {
            if libc::setsid() < 0 || libc::ioctl(0, libc::TIOCSCTTY as _, 0) < 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let mut child = cmd.spawn().expect("the command starts on the pty");
    // The command keeps its copies of the terminal side until told otherwise: while any is
    // open here, the read below never ends.
    cmd.stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    drop(slave);
    // A generous bound that only catches a hang: the command is killed after a minute.
    let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let watchdog = {
        let (done, pid) = (done.clone(), child.id() as libc::pid_t);
        std::thread::spawn(move || {
            for _ in 0..600 {
                if done.load(std::sync::atomic::Ordering::SeqCst) {
                    return;
                }
                std::thread::sleep(std::time::Duration::from_millis(100));
            }
            // SAFETY: a signal to the child's process group (it leads its own session).
            unsafe { libc::kill(-pid, libc::SIGKILL) };
        })
    };
    // Read until the last holder of the terminal side closes it (EIO on Linux).
    let mut file = std::fs::File::from(master);
    if !typed.is_empty() {
        use std::io::Write;
        let mut keys = file.try_clone().expect("the terminal's other side");
        let typed = typed.to_owned();
        std::thread::spawn(move || {
            std::thread::sleep(after);
            let _ = keys.write_all(typed.as_bytes());
        });
    }
    let mut bytes = Vec::new();
    let mut buf = [0u8; 8192];
    loop {
        match file.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => bytes.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(_) => break,
        }
    }
    let status = child.wait().expect("the command ends");
    done.store(true, std::sync::atomic::Ordering::SeqCst);
    let _ = watchdog.join();
    OnTerminal {
        code: status.code().unwrap_or(-1),
        // A terminal turns each \n into \r\n.
        output: String::from_utf8_lossy(&bytes).replace("\r\n", "\n"),
    }
}
