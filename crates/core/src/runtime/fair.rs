//! A module's capacity shared fairly between its callers (the identity nats-server stamped):
//! each caller runs at most its share of calls at once, and what waits is taken in turn, one
//! caller after another, so one person's flood queues behind nobody but themselves. A caller
//! past their share's queue or their calls a minute is answered "busy" at once, with when to
//! try again — never left to find the module slow.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use tokio::sync::Notify;

use crate::subjects::limits::{Busy, Limits, LimitsTable};

/// What admitting a call decided.
pub(crate) enum Admit<T> {
    /// Run it now: a slot is taken for it.
    Run(T),
    /// Kept until the caller's turn; `Fair::release` hands it back to be run.
    Waiting,
    /// Refused for load: answer it busy.
    Busy(Busy, T),
}

/// A token bucket: `per_minute` calls a minute, up to that many at once.
struct Bucket {
    tokens: f64,
    at: Instant,
}

struct Caller<T> {
    in_flight: usize,
    /// Its share: calls of its own running at once.
    cap: usize,
    waiting: VecDeque<T>,
    bucket: Option<Bucket>,
}

struct State<T> {
    used: usize,
    waiting: usize,
    callers: HashMap<Arc<str>, Caller<T>>,
    /// Callers with calls waiting, in turn.
    turns: VecDeque<Arc<str>>,
}

/// The module's slots, by caller.
pub(crate) struct Fair<T> {
    max: usize,
    /// A caller's share when the limits table names none: a quarter of the slots.
    default_share: usize,
    /// Calls one caller may have waiting.
    queue_per_caller: usize,
    /// Calls all callers may have waiting together.
    queue_total: usize,
    /// In local mode nobody is named, so everyone is one caller with every slot.
    named: bool,
    limits: RwLock<Arc<LimitsTable>>,
    state: Mutex<State<T>>,
    draining: AtomicBool,
    freed: Notify,
}

impl<T> Fair<T> {
    pub fn new(max: usize, named: bool) -> Fair<T> {
        let max = max.max(1);
        // Waiting is cheap (a message held), so even a small module lets a burst wait.
        let queue_total = 4 * max.max(64);
        Fair {
            max,
            default_share: (max / 4).max(1),
            // When nobody is named, everyone is one caller: the whole queue is theirs.
            queue_per_caller: if named { max.max(64) } else { queue_total },
            queue_total,
            named,
            limits: RwLock::new(Arc::default()),
            state: Mutex::new(State {
                used: 0,
                waiting: 0,
                callers: HashMap::new(),
                turns: VecDeque::new(),
            }),
            draining: AtomicBool::new(false),
            freed: Notify::new(),
        }
    }

    /// The limits from now on (the catalogue's table).
    pub fn set_limits(&self, table: LimitsTable) {
        *self.limits.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(table);
    }

    fn limits_of(&self, caller: &str) -> Limits {
        if !self.named {
            return Limits::default();
        }
        self.limits
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .of(caller)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State<T>> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Admits one call of `caller` (its stamped id; "" when nobody is named).
    pub fn admit(&self, caller: &str, work: T) -> Admit<T> {
        let limits = self.limits_of(caller);
        let cap = if self.named {
            limits
                .in_flight
                .map(|n| n as usize)
                .unwrap_or(self.default_share)
                .clamp(1, self.max)
        } else {
            self.max
        };
        let mut state = self.lock();
        let State {
            used,
            waiting,
            callers,
            turns,
        } = &mut *state;
        let entry = match callers.get_mut(caller) {
            Some(c) => c,
            None => callers.entry(Arc::from(caller)).or_insert(Caller {
                in_flight: 0,
                cap,
                waiting: VecDeque::new(),
                bucket: None,
            }),
        };
        entry.cap = cap;
        if let Some(per_minute) = limits.per_minute {
            let rate = f64::from(per_minute.max(1)) / 60.0;
            let now = Instant::now();
            let bucket = entry.bucket.get_or_insert(Bucket {
                tokens: f64::from(per_minute.max(1)),
                at: now,
            });
            bucket.tokens = (bucket.tokens + now.duration_since(bucket.at).as_secs_f64() * rate)
                .min(f64::from(per_minute.max(1)));
            bucket.at = now;
            if bucket.tokens < 1.0 {
                let wait = (1.0 - bucket.tokens) / rate;
                return Admit::Busy(
                    Busy {
                        retry_after: Duration::from_secs_f64(wait).max(Duration::from_millis(1)),
                        why: format!("{per_minute} calls a minute are yours"),
                    },
                    work,
                );
            }
            bucket.tokens -= 1.0;
        } else {
            entry.bucket = None;
        }
        if entry.in_flight < entry.cap && *used < self.max && entry.waiting.is_empty() {
            entry.in_flight += 1;
            *used += 1;
            return Admit::Run(work);
        }
        if entry.waiting.len() >= self.queue_per_caller || *waiting >= self.queue_total {
            let why = format!(
                "{} of your calls running and {} waiting",
                entry.in_flight,
                entry.waiting.len()
            );
            return Admit::Busy(
                Busy {
                    retry_after: Duration::from_secs(1),
                    why,
                },
                work,
            );
        }
        if entry.waiting.is_empty() {
            let key = callers
                .get_key_value(caller)
                .map(|(k, _)| k.clone())
                .expect("just inserted");
            turns.push_back(key);
        }
        callers
            .get_mut(caller)
            .expect("just inserted")
            .waiting
            .push_back(work);
        *waiting += 1;
        Admit::Waiting
    }

    /// A call of `caller` ended: its slot goes to whoever's turn it is. Returns the waiting
    /// calls to run now, each with its caller (their slots taken).
    pub fn release(&self, caller: &str) -> Vec<(Arc<str>, T)> {
        let mut start = Vec::new();
        {
            let mut state = self.lock();
            let State {
                used,
                waiting,
                callers,
                turns,
            } = &mut *state;
            *used = used.saturating_sub(1);
            if let Some(c) = callers.get_mut(caller) {
                c.in_flight = c.in_flight.saturating_sub(1);
                if c.in_flight == 0 && c.waiting.is_empty() && c.bucket.is_none() {
                    callers.remove(caller);
                }
            }
            // Round the callers with calls waiting: each in turn gets one, skipping those
            // at their share, until the slots are taken or nobody can go.
            let mut without_progress = 0;
            while *used < self.max && without_progress < turns.len() {
                let key = turns.pop_front().expect("not empty");
                let Some(c) = callers.get_mut(&key) else {
                    continue;
                };
                if c.in_flight < c.cap
                    && let Some(work) = c.waiting.pop_front()
                {
                    c.in_flight += 1;
                    *used += 1;
                    *waiting -= 1;
                    start.push((key.clone(), work));
                    without_progress = 0;
                } else {
                    without_progress += 1;
                }
                if !c.waiting.is_empty() {
                    turns.push_back(key);
                }
            }
        }
        if self.draining.load(Ordering::SeqCst) {
            self.freed.notify_waiters();
        }
        start
    }

    /// Calls running and waiting.
    fn busy(&self) -> usize {
        let s = self.lock();
        s.used + s.waiting
    }

    /// Waits until no call runs or waits (the drain).
    pub async fn all_free(&self) {
        self.draining.store(true, Ordering::SeqCst);
        loop {
            let freed = self.freed.notified();
            tokio::pin!(freed);
            freed.as_mut().enable();
            if self.busy() == 0 {
                return;
            }
            freed.await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_flood_waits_behind_its_own_and_others_go_first() {
        let fair: Fair<u32> = Fair::new(4, true);
        // ann's share is one slot of four: her first runs, the rest wait.
        assert!(matches!(fair.admit("ann", 1), Admit::Run(_)));
        for n in 2..=5 {
            assert!(matches!(fair.admit("ann", n), Admit::Waiting));
        }
        // bob is not behind ann.
        assert!(matches!(fair.admit("bob", 10), Admit::Run(_)));
        // ann's call ends: her next runs, not more.
        assert_eq!(
            fair.release("ann")
                .into_iter()
                .map(|(_, w)| w)
                .collect::<Vec<_>>(),
            vec![2]
        );
        assert!(fair.release("bob").is_empty());
    }

    #[test]
    fn turns_alternate_between_callers_waiting() {
        let fair: Fair<&str> = Fair::new(2, true);
        fair.set_limits(LimitsTable {
            default: Limits {
                in_flight: Some(2),
                per_minute: None,
            },
            ..Default::default()
        });
        assert!(matches!(fair.admit("ann", "a0"), Admit::Run(_)));
        assert!(matches!(fair.admit("ann", "a1"), Admit::Run(_)));
        for w in ["a2", "a3"] {
            assert!(matches!(fair.admit("ann", w), Admit::Waiting));
        }
        for w in ["b0", "b1"] {
            assert!(matches!(fair.admit("bob", w), Admit::Waiting));
        }
        fn next(f: &Fair<&'static str>, who: &str) -> Vec<&'static str> {
            f.release(who).into_iter().map(|(_, w)| w).collect()
        }
        assert_eq!(next(&fair, "ann"), vec!["a2"]);
        assert_eq!(next(&fair, "ann"), vec!["b0"]);
        assert_eq!(next(&fair, "ann"), vec!["a3"]);
        assert_eq!(next(&fair, "bob"), vec!["b1"]);
    }

    #[test]
    fn past_the_queue_or_the_rate_is_busy_with_when_to_come_back() {
        let fair: Fair<u32> = Fair::new(4, true);
        assert!(matches!(fair.admit("ann", 0), Admit::Run(_)));
        for n in 1..=64 {
            assert!(matches!(fair.admit("ann", n), Admit::Waiting));
        }
        let Admit::Busy(busy, 65) = fair.admit("ann", 65) else {
            panic!("a 65th waiting call is not busy")
        };
        assert!(busy.why.contains("64 waiting"), "{}", busy.why);

        let fair: Fair<u32> = Fair::new(4, true);
        fair.set_limits(LimitsTable {
            default: Limits {
                in_flight: Some(4),
                per_minute: Some(2),
            },
            ..Default::default()
        });
        assert!(matches!(fair.admit("ann", 0), Admit::Run(_)));
        assert!(matches!(fair.admit("ann", 1), Admit::Run(_)));
        let Admit::Busy(busy, _) = fair.admit("ann", 2) else {
            panic!("a third call in a minute is not busy")
        };
        assert!(busy.retry_after > Duration::from_secs(20), "{busy:?}");
        assert!(matches!(fair.admit("bob", 0), Admit::Run(_)));
    }

    #[test]
    fn nobody_named_shares_every_slot() {
        let fair: Fair<u32> = Fair::new(3, false);
        fair.set_limits(LimitsTable {
            default: Limits {
                in_flight: Some(1),
                per_minute: Some(1),
            },
            ..Default::default()
        });
        for n in 0..3 {
            assert!(matches!(fair.admit("", n), Admit::Run(_)));
        }
        assert!(matches!(fair.admit("", 3), Admit::Waiting));
    }
}
