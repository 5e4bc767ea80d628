//! CPU time of processes, for benchmarks that report CPU per call beside calls/s (steadier
//! on a machine others share: a busy neighbour slows wall time, not the work a call takes).

use std::time::Duration;

/// User plus system CPU time another process has used so far, from `/proc/<pid>/stat`;
/// zero for a process that is gone.
pub fn of_process(pid: u32) -> Duration {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return Duration::ZERO;
    };
    // The command name (field 2) may hold spaces: count fields after its closing paren;
    // utime and stime are fields 14 and 15.
    let after = stat.rsplit_once(')').map_or("", |(_, rest)| rest);
    let fields: Vec<&str> = after.split_whitespace().collect();
    let ticks: u64 = fields
        .get(11..13)
        .map_or(0, |f| f.iter().filter_map(|t| t.parse::<u64>().ok()).sum());
    // SAFETY: sysconf reads a constant.
    let per_second = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as u64;
    Duration::from_nanos(ticks * 1_000_000_000 / per_second)
}

/// User plus system CPU time this process has used so far.
#[allow(dead_code)] // not every benchmark measures itself
pub fn own() -> Duration {
    rusage(libc::RUSAGE_SELF)
}

/// User plus system CPU time of every child this process has reaped so far.
#[allow(dead_code)] // not every benchmark starts processes
pub fn children() -> Duration {
    rusage(libc::RUSAGE_CHILDREN)
}

fn rusage(who: libc::c_int) -> Duration {
    // SAFETY: getrusage fills the struct it is given.
    let u = unsafe {
        let mut usage: libc::rusage = std::mem::zeroed();
        libc::getrusage(who, &mut usage);
        usage
    };
    let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    tv(u.ru_utime) + tv(u.ru_stime)
}
