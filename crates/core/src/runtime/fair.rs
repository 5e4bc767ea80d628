//! A module's capacity shared fairly among its callers (the identity nats-server stamped):
//! each caller active now (something of theirs running or waiting) may run capacity ÷ active
//! callers at once, and a reserve of slots is kept for callers with nothing running, so a
//! newcomer's first call starts at once even while others hold every slot of their share
//! with long calls. A slot that frees goes to a caller under their share, in turn — never to
//! one over it — so a newcomer is served ahead of anyone over their share. Beyond their share
//! running and as many again waiting, a caller is answered "busy" at once, with when to try
//! again — never left to find the module slow. Memory: one entry per caller with something
//! running, waiting or a minute to remember; waiting requests bounded in count and bytes.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use tokio::sync::Notify;

use crate::subjects::limits::{Busy, Limits, LimitsTable};

/// The most bytes of requests a module holds waiting (a request is at most the bus's
/// message size; waiting ones must not add up to more memory than this).
const QUEUE_BYTES: usize = 64 * 1024 * 1024;

/// What admitting a call decided.
pub(crate) enum Admit<T> {
    /// Run it now: a slot is taken for it.
    Run(T),
    /// Kept until the caller's turn; `Fair::release` hands it back to be run.
    Waiting,
    /// Refused for load: answer it busy.
    Busy(Busy, T),
    /// Kept, and to make room another caller's newest waiting call was taken out: answer
    /// that one busy.
    WaitingEvicted(Busy, T),
}

/// A token bucket: `per_minute` calls a minute, up to that many at once.
struct Bucket {
    tokens: f64,
    full: f64,
    at: Instant,
}

struct Caller<T> {
    in_flight: usize,
    /// The most of its calls it may run at once whatever the load: the limits table's
    /// `in_flight`, else every slot.
    limit: usize,
    /// Its calls waiting, each with its size.
    waiting: VecDeque<(T, usize)>,
    bucket: Option<Bucket>,
}

impl<T> Caller<T> {
    fn active(&self) -> bool {
        self.in_flight > 0 || !self.waiting.is_empty()
    }
}

struct State<T> {
    used: usize,
    waiting: usize,
    waiting_bytes: usize,
    /// Callers with something running or waiting.
    active: usize,
    callers: HashMap<Arc<str>, Caller<T>>,
    /// Callers with calls waiting, in turn.
    turns: VecDeque<Arc<str>>,
}

/// The module's slots, by caller.
pub(crate) struct Fair<T> {
    max: usize,
    /// Slots only a caller with nothing running may take: room for a newcomer while the
    /// others' calls hold the rest (an eighth; none on a module of fewer than eight).
    reserve: usize,
    /// Calls all callers may have waiting together.
    queue_total: usize,
    /// Bytes of requests all callers may have waiting together.
    queue_bytes: usize,
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
        Fair {
            max,
            reserve: if named { max / 8 } else { 0 },
            // Waiting is cheap (a message held), so even a small module lets a burst wait.
            queue_total: 4 * max.max(64),
            queue_bytes: QUEUE_BYTES,
            named,
            limits: RwLock::new(Arc::default()),
            state: Mutex::new(State {
                used: 0,
                waiting: 0,
                waiting_bytes: 0,
                active: 0,
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

    /// A caller's share while `active` callers use the module: the slots outside the
    /// reserve, divided among them, within the caller's own `limit`.
    fn share(&self, active: usize, limit: usize) -> usize {
        ((self.max - self.reserve) / active.max(1))
            .max(1)
            .min(limit)
    }

    /// The calls a caller may have waiting beside those running: as many as its share, and
    /// at least a burst's worth; in local mode, everyone being one caller, the whole queue.
    fn queue_of(&self, share: usize) -> usize {
        if self.named {
            share.max(64)
        } else {
            self.queue_total
        }
    }

    /// Whether `c` may start a call now, with `used` slots taken among `active` callers:
    /// under its share, and outside the reserve unless nothing of its own runs.
    fn may_start(&self, c: &Caller<T>, used: usize, active: usize) -> bool {
        c.in_flight < self.share(active, c.limit)
            && (used + self.reserve < self.max || (c.in_flight == 0 && used < self.max))
    }

    /// Admits one call of `caller` (its stamped id; "" when nobody is named) of `size` bytes.
    pub fn admit(&self, caller: &str, work: T, size: usize) -> Admit<T> {
        let limits = self.limits_of(caller);
        let limit = if self.named {
            limits
                .in_flight
                .map(|n| n as usize)
                .unwrap_or(self.max)
                .clamp(1, self.max)
        } else {
            self.max
        };
        let mut state = self.lock();
        let State {
            used,
            waiting,
            waiting_bytes,
            active,
            callers,
            turns,
        } = &mut *state;
        if !callers.contains_key(caller) {
            callers.insert(
                Arc::from(caller),
                Caller {
                    in_flight: 0,
                    limit,
                    waiting: VecDeque::new(),
                    bucket: None,
                },
            );
        }
        let entry = callers.get_mut(caller).expect("just made");
        entry.limit = limit;
        // A minute's calls: checked first, spent only on a call that runs or waits.
        let mut spend = None;
        if let Some(per_minute) = limits.per_minute {
            let full = f64::from(per_minute.max(1));
            let rate = full / 60.0;
            let now = Instant::now();
            let bucket = entry.bucket.get_or_insert(Bucket {
                tokens: full,
                full,
                at: now,
            });
            bucket.full = full;
            bucket.tokens =
                (bucket.tokens + now.duration_since(bucket.at).as_secs_f64() * rate).min(full);
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
            spend = Some(());
        } else {
            entry.bucket = None;
        }
        let take = |entry: &mut Caller<T>| {
            if spend.is_some()
                && let Some(b) = entry.bucket.as_mut()
            {
                b.tokens -= 1.0;
            }
        };
        let newcomer = !entry.active();
        // The callers active with this one among them.
        let among = *active + usize::from(newcomer);
        if entry.waiting.is_empty() && self.may_start(entry, *used, among) {
            take(entry);
            entry.in_flight += 1;
            *used += 1;
            *active = among;
            return Admit::Run(work);
        }
        let mine = entry.waiting.len();
        let share = self.share(among, entry.limit);
        let busy = |why: String, work: T| {
            Admit::Busy(
                Busy {
                    retry_after: Duration::from_secs(1),
                    why,
                },
                work,
            )
        };
        // Forgotten when refused with nothing of theirs to remember.
        let forget = |callers: &mut HashMap<Arc<str>, Caller<T>>| {
            if callers
                .get(caller)
                .is_some_and(|c| !c.active() && c.bucket.is_none())
            {
                callers.remove(caller);
            }
        };
        if mine >= self.queue_of(share) {
            let why = format!(
                "{} of your calls running and {mine} waiting; while {among} callers use this module, {share} at once are yours",
                entry.in_flight
            );
            forget(callers);
            return busy(why, work);
        }
        // The module's queue is full (in calls or bytes): room is made by the caller waiting
        // the most, never by a newcomer with fewer waiting — so no few callers can fill the
        // queue and shut everyone else out.
        let mut evicted = None;
        if *waiting >= self.queue_total || *waiting_bytes + size > self.queue_bytes {
            let longest = turns
                .iter()
                .filter(|k| k.as_ref() != caller)
                .max_by_key(|k| callers.get(k.as_ref()).map_or(0, |c| c.waiting.len()))
                .cloned();
            match longest {
                Some(k) if callers.get(k.as_ref()).map_or(0, |c| c.waiting.len()) > mine + 1 => {
                    let c = callers.get_mut(k.as_ref()).expect("in turns");
                    let (w, bytes) = c.waiting.pop_back().expect("longest waits");
                    *waiting -= 1;
                    *waiting_bytes -= bytes;
                    if c.waiting.is_empty() {
                        turns.retain(|t| *t != k);
                        if !c.active() {
                            *active -= 1;
                        }
                    }
                    evicted = Some(w);
                }
                _ => {
                    let entry = callers.get(caller).expect("just made");
                    let why = format!(
                        "the module's queue is full; {} of your calls running and {mine} waiting",
                        entry.in_flight
                    );
                    forget(callers);
                    return busy(why, work);
                }
            }
        }
        let entry = callers.get_mut(caller).expect("just made");
        take(entry);
        if !entry.active() {
            *active += 1;
        }
        if entry.waiting.is_empty() {
            let key = callers
                .get_key_value(caller)
                .map(|(k, _)| k.clone())
                .expect("just made");
            turns.push_back(key);
        }
        callers
            .get_mut(caller)
            .expect("just made")
            .waiting
            .push_back((work, size));
        *waiting += 1;
        *waiting_bytes += size;
        match evicted {
            Some(w) => Admit::WaitingEvicted(
                Busy {
                    retry_after: Duration::from_secs(1),
                    why: "the module's queue is full, and you had the most calls waiting".into(),
                },
                w,
            ),
            None => Admit::Waiting,
        }
    }

    /// A call of `caller` ended: its slot goes to a caller under their share, in turn.
    /// Returns the waiting calls to run now, each with its caller (their slots taken).
    pub fn release(&self, caller: &str) -> Vec<(Arc<str>, T)> {
        let mut start = Vec::new();
        {
            let mut state = self.lock();
            let State {
                used,
                waiting,
                waiting_bytes,
                active,
                callers,
                turns,
            } = &mut *state;
            *used = used.saturating_sub(1);
            if let Some(c) = callers.get_mut(caller) {
                let was = c.active();
                c.in_flight = c.in_flight.saturating_sub(1);
                if was && !c.active() {
                    *active = active.saturating_sub(1);
                }
                // Forgotten when nothing of theirs runs or waits and their minute is whole
                // again: the map holds only callers with something to remember.
                let whole = c.bucket.as_ref().is_none_or(|b| {
                    b.tokens + b.at.elapsed().as_secs_f64() * b.full / 60.0 >= b.full
                });
                if !c.active() && whole {
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
                if self.may_start(c, *used, *active)
                    && let Some((work, bytes)) = c.waiting.pop_front()
                {
                    c.in_flight += 1;
                    *used += 1;
                    *waiting -= 1;
                    *waiting_bytes -= bytes;
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

    fn started<T>(v: Vec<(Arc<str>, T)>) -> Vec<T> {
        v.into_iter().map(|(_, w)| w).collect()
    }

    #[test]
    fn a_flood_waits_behind_its_own_and_a_newcomer_goes_first() {
        // 16 slots, 2 of them kept for callers with nothing running.
        let fair: Fair<u32> = Fair::new(16, true);
        // Alone, ann may run all but the reserve.
        for n in 0..14 {
            assert!(matches!(fair.admit("ann", n, 1), Admit::Run(_)), "{n}");
        }
        assert!(matches!(fair.admit("ann", 14, 1), Admit::Waiting));
        // bob is not behind ann: his first call takes a reserved slot.
        assert!(matches!(fair.admit("bob", 100, 1), Admit::Run(_)));
        // His second waits (the reserve is for first calls), but ahead of ann, who is
        // over her share of two callers: once the reserve is whole again, the slots ann's
        // calls free go to bob.
        assert!(matches!(fair.admit("bob", 101, 1), Admit::Waiting));
        assert!(started(fair.release("ann")).is_empty());
        assert_eq!(started(fair.release("ann")), vec![101]);
        // Once ann is under her share (7 of 16 − 2), her waiting call runs.
        for _ in 0..5 {
            assert!(started(fair.release("ann")).is_empty());
        }
        assert_eq!(started(fair.release("ann")), vec![14]);
    }

    #[test]
    fn four_flooders_leave_a_fifth_room_and_hear_busy_past_their_share() {
        let fair: Fair<u32> = Fair::new(256, true);
        let mut busy = [0; 4];
        for (i, who) in ["f1", "f2", "f3", "f4"].iter().enumerate() {
            for n in 0..130 {
                if let Admit::Busy(b, _) = fair.admit(who, n, 1) {
                    assert!(b.why.contains("are yours"), "{}", b.why);
                    busy[i] += 1;
                }
            }
        }
        // The first came alone and ran everything; later ones arrived to smaller shares.
        assert_eq!(busy[0], 0);
        assert!(busy[3] > 0, "{busy:?}");
        // The fifth runs at once, and so do a few more newcomers.
        for who in ["vic", "v2", "v3"] {
            assert!(matches!(fair.admit(who, 7, 1), Admit::Run(7)), "{who}");
        }
        assert!(matches!(fair.admit("vic", 8, 1), Admit::Waiting));
        // f1 holds far more than its share of eight: the slots its calls free go to the
        // callers under theirs — vic first of all — never to f1 or f2.
        let mut after: Vec<u32> = Vec::new();
        for _ in 0..40 {
            after.extend(started(fair.release("f1")));
        }
        assert!(after.contains(&8), "vic's second call never ran");
        let s = fair.lock();
        assert!(
            s.callers["f2"].in_flight <= 94,
            "f2 gained slots over its share"
        );
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
        assert!(matches!(fair.admit("ann", "a0", 1), Admit::Run(_)));
        assert!(matches!(fair.admit("ann", "a1", 1), Admit::Run(_)));
        for w in ["a2", "a3"] {
            assert!(matches!(fair.admit("ann", w, 1), Admit::Waiting));
        }
        for w in ["b0", "b1"] {
            assert!(matches!(fair.admit("bob", w, 1), Admit::Waiting));
        }
        // Two callers: one slot each. bob, under his share, goes first.
        assert_eq!(started(fair.release("ann")), vec!["b0"]);
        assert_eq!(started(fair.release("ann")), vec!["a2"]);
        assert_eq!(started(fair.release("bob")), vec!["b1"]);
        assert_eq!(started(fair.release("ann")), vec!["a3"]);
    }

    #[test]
    fn past_the_queue_or_the_rate_is_busy_with_when_to_come_back() {
        let fair: Fair<u32> = Fair::new(4, true);
        for n in 0..4 {
            assert!(matches!(fair.admit("ann", n, 1), Admit::Run(_)));
        }
        for n in 4..68 {
            assert!(matches!(fair.admit("ann", n, 1), Admit::Waiting));
        }
        let Admit::Busy(busy, 68) = fair.admit("ann", 68, 1) else {
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
        assert!(matches!(fair.admit("ann", 0, 1), Admit::Run(_)));
        assert!(matches!(fair.admit("ann", 1, 1), Admit::Run(_)));
        let Admit::Busy(busy, _) = fair.admit("ann", 2, 1) else {
            panic!("a third call in a minute is not busy")
        };
        assert!(busy.retry_after > Duration::from_secs(20), "{busy:?}");
        assert!(matches!(fair.admit("bob", 0, 1), Admit::Run(_)));
    }

    #[test]
    fn a_full_queue_makes_room_from_the_longest_never_from_a_newcomer() {
        let fair: Fair<u32> = Fair::new(4, true);
        // Four callers, each with as many waiting as they may: the module's whole queue.
        for who in ["a", "b", "c", "d"] {
            let mut waiting = 0;
            let mut n = 0;
            while waiting < 64 {
                match fair.admit(who, n, 1) {
                    Admit::Run(_) => {}
                    Admit::Waiting => waiting += 1,
                    _ => panic!("{who} {n} refused"),
                }
                n += 1;
            }
        }
        // A fifth caller still gets in line: the newest call of a longest queue makes room
        // (all four are as long; the last of them in turn, d, whose newest is its 64th).
        let Admit::WaitingEvicted(busy, 63) = fair.admit("eve", 100, 1) else {
            panic!("the newcomer was refused, or another than the newest call was evicted")
        };
        assert!(busy.why.contains("most calls waiting"), "{}", busy.why);
        // The flooders themselves, at the full queue, are refused.
        assert!(matches!(fair.admit("a", 999, 1), Admit::Busy(..)));
    }

    #[test]
    fn waiting_bytes_are_bounded_too() {
        let fair: Fair<u32> = Fair::new(1, true);
        assert!(matches!(fair.admit("a", 0, 1), Admit::Run(_)));
        assert!(matches!(fair.admit("a", 1, QUEUE_BYTES), Admit::Waiting));
        assert!(matches!(fair.admit("a", 2, 1), Admit::Busy(..)));
    }

    #[test]
    fn memory_holds_only_callers_with_something_to_remember() {
        let fair: Fair<u32> = Fair::new(8, true);
        for n in 0..10_000u32 {
            let who = format!("p{n}");
            assert!(matches!(fair.admit(&who, n, 1), Admit::Run(_)));
            fair.release(&who);
        }
        let s = fair.lock();
        assert_eq!((s.callers.len(), s.active, s.used), (0, 0, 0));
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
            assert!(matches!(fair.admit("", n, 1), Admit::Run(_)));
        }
        assert!(matches!(fair.admit("", 3, 1), Admit::Waiting));
    }
}
