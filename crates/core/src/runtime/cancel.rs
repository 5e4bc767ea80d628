//! Calls their callers gave up on: a call that names itself (`Mesh-Call: <id>`) is cancelled
//! by a message to the same subject with `Mesh-Cancel: <id>` and no reply subject, taken
//! only from the caller nats-server stamped on the call. A call is registered only if it is
//! still running after its first poll (most end there: nothing to cancel, nothing paid);
//! a running one cancelled has its handler's future dropped (nothing is answered: nobody
//! waits), and one waiting its turn whose deadline passed is never run.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use tokio::sync::Notify;

use crate::actor::Caller;

/// One call's cancellation, shared by the registry and the call.
#[derive(Default)]
struct Flag {
    cancelled: AtomicBool,
    notify: Notify,
}

/// The calls in flight that named themselves, by a keyed hash of their stamped caller and
/// id (SipHash with this process's random keys: no caller can make a key collide with
/// another's call).
#[derive(Default)]
pub(crate) struct Cancels {
    keys: std::collections::hash_map::RandomState,
    calls: Mutex<HashMap<u64, Arc<Flag>>>,
}

/// A call's hold on its entry: cancelled when its caller says so; the entry goes with it.
pub(crate) struct Cancellable {
    registry: Arc<Cancels>,
    key: u64,
    flag: Arc<Flag>,
}

impl Cancels {
    /// The key of call `id` of `caller`.
    pub fn key(&self, caller: &Caller, id: &str) -> u64 {
        use std::hash::BuildHasher;
        self.keys.hash_one((caller, id))
    }

    /// Registers the call of `key`. A second call of a key already in flight is not
    /// registered (its cancel would be ambiguous): it runs uncancellable.
    pub fn register(self: &Arc<Self>, key: u64) -> Option<Cancellable> {
        let mut calls = self.calls.lock().unwrap_or_else(|p| p.into_inner());
        if calls.contains_key(&key) {
            return None;
        }
        let flag = Arc::new(Flag::default());
        calls.insert(key, flag.clone());
        Some(Cancellable {
            registry: self.clone(),
            key,
            flag,
        })
    }

    /// The caller of `key` gives its call up; whether such a call was in flight.
    pub fn cancel(&self, key: u64) -> bool {
        let calls = self.calls.lock().unwrap_or_else(|p| p.into_inner());
        match calls.get(&key) {
            Some(flag) => {
                flag.cancelled.store(true, Ordering::SeqCst);
                flag.notify.notify_waiters();
                true
            }
            None => false,
        }
    }
}

impl Cancellable {
    pub fn is_cancelled(&self) -> bool {
        self.flag.cancelled.load(Ordering::SeqCst)
    }

    /// Resolves once the call is cancelled.
    pub async fn cancelled(&self) {
        loop {
            let notified = self.flag.notify.notified();
            if self.is_cancelled() {
                return;
            }
            notified.await;
        }
    }
}

impl Drop for Cancellable {
    fn drop(&mut self) {
        let mut calls = self
            .registry
            .calls
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        if calls
            .get(&self.key)
            .is_some_and(|f| Arc::ptr_eq(f, &self.flag))
        {
            calls.remove(&self.key);
        }
    }
}

/// A call id as a caller may give it: 1 to 64 of `[A-Za-z0-9_-]`.
pub(crate) fn valid_id(id: &str) -> bool {
    (1..=64).contains(&id.len())
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_call_is_cancelled_by_its_caller_only_and_leaves_with_its_call() {
        use crate::actor::Actor;
        let cancels = Arc::new(Cancels::default());
        let ann = Caller::Person(Actor::new("ann", "PEOPLE"));
        let bob = Caller::Person(Actor::new("bob", "PEOPLE"));
        let key = cancels.key(&ann, "c1");
        let call = cancels.register(key).unwrap();
        assert!(cancels.register(key).is_none(), "one of an id");
        assert!(!cancels.cancel(cancels.key(&bob, "c1")), "not bob's");
        assert!(!call.is_cancelled());
        assert!(cancels.cancel(cancels.key(&ann, "c1")));
        call.cancelled().await;
        drop(call);
        assert!(!cancels.cancel(key), "gone with its call");
        assert!(valid_id("a-Z_9"));
        for bad in ["", "a b", "a.b", &"x".repeat(65), "é"] {
            assert!(!valid_id(bad), "{bad:?}");
        }
    }
}
