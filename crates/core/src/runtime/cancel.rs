//! Calls their callers gave up on: a call that names itself (`Mesh-Call: <id>`) is cancelled
//! by a message to the same subject with `Mesh-Cancel: <id>` and no reply subject, taken
//! only from the caller nats-server stamped on the call. A waiting call is then never run; a
//! running one has its handler's future dropped (nothing is answered: nobody waits).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use tokio::sync::Notify;

/// One call's cancellation, shared by the registry and the call.
#[derive(Default)]
struct Flag {
    cancelled: AtomicBool,
    notify: Notify,
}

/// The calls in flight (or waiting their turn) that named themselves, by caller and id.
#[derive(Default)]
pub(crate) struct Cancels {
    calls: Mutex<HashMap<(String, String), Arc<Flag>>>,
}

/// A call's hold on its entry: cancelled when its caller says so; the entry goes with it.
pub(crate) struct Cancellable {
    registry: Arc<Cancels>,
    key: (String, String),
    flag: Arc<Flag>,
}

impl Cancels {
    /// Registers call `id` of `caller`. A second call of the caller with an id already in
    /// flight is not registered (its cancel would be ambiguous): it runs uncancellable.
    pub fn register(self: &Arc<Self>, caller: &str, id: &str) -> Option<Cancellable> {
        let key = (caller.to_owned(), id.to_owned());
        let mut calls = self.calls.lock().unwrap_or_else(|p| p.into_inner());
        if calls.contains_key(&key) {
            return None;
        }
        let flag = Arc::new(Flag::default());
        calls.insert(key.clone(), flag.clone());
        Some(Cancellable {
            registry: self.clone(),
            key,
            flag,
        })
    }

    /// `caller` gives up on its call `id`; whether such a call was in flight.
    pub fn cancel(&self, caller: &str, id: &str) -> bool {
        let calls = self.calls.lock().unwrap_or_else(|p| p.into_inner());
        match calls.get(&(caller.to_owned(), id.to_owned())) {
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
        let cancels = Arc::new(Cancels::default());
        let call = cancels.register("ann@PEOPLE", "c1").unwrap();
        assert!(
            cancels.register("ann@PEOPLE", "c1").is_none(),
            "one of an id"
        );
        assert!(!cancels.cancel("bob@PEOPLE", "c1"), "not bob's");
        assert!(!call.is_cancelled());
        assert!(cancels.cancel("ann@PEOPLE", "c1"));
        call.cancelled().await;
        drop(call);
        assert!(!cancels.cancel("ann@PEOPLE", "c1"), "gone with its call");
        assert!(valid_id("a-Z_9"));
        for bad in ["", "a b", "a.b", &"x".repeat(65), "é"] {
            assert!(!valid_id(bad), "{bad:?}");
        }
    }
}
