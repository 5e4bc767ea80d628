//! How a tool's calls run: polled on its endpoint's loop, the fast way (no spawn, no
//! cross-thread wake: about a tenth of the bus's throughput, docs/benchmarks.md), or each on
//! a thread of tokio's blocking pool, the safe way. Safe because a handler that blocks a
//! runtime worker holds up more than its own call: the calls polled after it on that worker
//! and, with the other workers parked, the I/O driver itself — every call of the module.
//! Spawning a task per call is not enough for that (measured: a quick call waited the whole
//! of a blocked one's 1.5 s), a thread of its own is.
//!
//! Calls start on the loop. A poll on the runtime's workers that takes long (a handler that
//! blocked, or computed long) sends the tool to threads of its own at once, with a warning;
//! once a run of its calls has ended with every poll quick, the loop takes them again. So a
//! handler that blocks holds up its tool's other calls once, not again.
//!
//! (Starting every tool on threads, and moving it to the loop once proven quick, kept even
//! that first stall away; under load it made the bridge's cancelled-call test flaky, one run
//! in five, for a reason not yet found: see the issue 32 note.)

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

/// A poll that finished within this is quick.
const QUICK: Duration = Duration::from_micros(250);
/// A poll on a runtime worker that took this long held up what was behind it.
const HELD_UP: Duration = Duration::from_millis(10);
/// How many calls in a row with only quick polls before the loop polls calls itself.
const QUICK_RUN: u32 = 256;

/// One endpoint's way of running calls, learnt from how its calls' polls went.
#[derive(Debug)]
pub(crate) struct Pace {
    /// The tool's full name, for the warning.
    what: Arc<str>,
    on_loop: AtomicBool,
    quick_run: AtomicU32,
}

impl Pace {
    pub(crate) fn new(what: &str) -> Pace {
        Pace {
            what: Arc::from(what),
            on_loop: AtomicBool::new(true),
            quick_run: AtomicU32::new(0),
        }
    }

    /// Whether the endpoint's loop polls its calls (else each runs on a thread of its own).
    pub(crate) fn on_loop(&self) -> bool {
        self.on_loop.load(Ordering::Relaxed)
    }

    /// A call ended whose longest poll took `longest`.
    fn ended(&self, longest: Duration) {
        if longest < QUICK {
            let run = self.quick_run.fetch_add(1, Ordering::Relaxed) + 1;
            if run >= QUICK_RUN {
                self.on_loop.store(true, Ordering::Relaxed);
            }
        } else {
            self.quick_run.store(0, Ordering::Relaxed);
        }
    }

    /// One poll of a call took `took`; on a runtime worker (`on_worker`), a long one sends
    /// the tool's calls back to threads of their own. Whether it did.
    fn polled(&self, took: Duration, on_worker: bool) -> bool {
        if !on_worker || took < HELD_UP {
            return false;
        }
        self.quick_run.store(0, Ordering::Relaxed);
        self.on_loop.swap(false, Ordering::Relaxed)
    }
}

/// A call whose polls are timed for its endpoint's [`Pace`].
pub(crate) struct Timed {
    call: Pin<Box<dyn Future<Output = ()> + Send>>,
    pace: Arc<Pace>,
    longest: Duration,
    /// Polled on a runtime worker (the loop, or a task), not a blocking-pool thread.
    on_worker: bool,
}

impl Timed {
    pub(crate) fn new(
        call: Pin<Box<dyn Future<Output = ()> + Send>>,
        pace: Arc<Pace>,
        on_worker: bool,
    ) -> Timed {
        Timed {
            call,
            pace,
            longest: Duration::ZERO,
            on_worker,
        }
    }
}

impl Future for Timed {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let start = Instant::now();
        let polled = self.call.as_mut().poll(cx);
        let took = start.elapsed();
        self.longest = self.longest.max(took);
        if self.pace.polled(took, self.on_worker) {
            tracing::warn!(
                tool = %self.pace.what,
                took_ms = took.as_millis() as u64,
                "a call of this tool held up a runtime worker (its handler blocked or computed long without waiting), and with it other calls: the tool's calls run on threads of their own again; blocking work belongs in Tool::typed_blocking or off_runtime"
            );
        }
        if polled.is_ready() {
            self.pace.ended(self.longest);
        }
        polled
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_poll_that_holds_a_worker_moves_calls_to_threads_and_quick_calls_move_them_back() {
        let pace = Pace::new("t_t");
        let quick = Duration::from_micros(10);
        assert!(pace.on_loop(), "calls start on the loop");
        assert!(!pace.polled(Duration::from_micros(100), true));
        assert!(
            !pace.polled(Duration::from_millis(50), false),
            "not on a worker"
        );
        assert!(pace.on_loop());
        assert!(pace.polled(Duration::from_millis(50), true));
        assert!(
            !pace.on_loop(),
            "a poll that held a worker sends calls to threads"
        );
        assert!(!pace.polled(Duration::from_millis(50), true), "said once");
        for _ in 0..QUICK_RUN - 1 {
            pace.ended(quick);
        }
        assert!(!pace.on_loop());
        // A call with one long poll breaks the run.
        pace.ended(Duration::from_millis(1));
        for _ in 0..QUICK_RUN - 1 {
            pace.ended(quick);
        }
        assert!(!pace.on_loop());
        pace.ended(quick);
        assert!(pace.on_loop(), "a whole run of quick calls moves them back");
    }
}
