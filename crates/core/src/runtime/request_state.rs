//! `requestState` a module can trust: ids sealed with an HMAC under the module's own key,
//! bound to the actor and the tool, with a lifetime and an id of its own so that it is
//! answered once. The caller holds it; it is attacker input.

use std::io::Write;
use std::path::Path;
use std::time::Duration;

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use hmac::Mac;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::subjects::catalog::now_ms;

type HmacSha256 = hmac::Hmac<sha2::Sha256>;

/// How long a person has to answer before the state expires.
pub const DEFAULT_LIFETIME: Duration = Duration::from_secs(30 * 60);

/// Why a `requestState` is refused. Every message tells the person to start the call again.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StateError {
    #[error("requestState is malformed ({0}): call the tool again without it")]
    Malformed(&'static str),
    #[error(
        "requestState does not carry this module's signature (altered, or from another module): call the tool again without it"
    )]
    Tampered,
    #[error("requestState expired: call the tool again without it")]
    Expired,
    #[error("requestState was issued for tool {issued}, not {called}")]
    OtherTool { issued: String, called: String },
    #[error("requestState was issued to another caller ({issued}), not {called}")]
    OtherActor { issued: String, called: String },
    #[error(
        "requestState was already used: it answers one question once; call the tool again without it"
    )]
    Used,
}

/// Why the key could not be loaded or made.
#[derive(Debug, thiserror::Error)]
#[error("request-state key {path}: {source}")]
pub struct KeyError {
    path: String,
    source: std::io::Error,
}

/// What the signature covers.
#[derive(Serialize, Deserialize)]
struct Sealed {
    /// This state's own id, spent when it is answered.
    id: String,
    tool: String,
    /// `user@ACCOUNT`, or empty when the call had no actor.
    actor: String,
    expires_ms: u64,
    ids: Value,
}

/// A state that passed every check: what it carries, and what spending it needs.
#[derive(Debug, Clone, PartialEq)]
pub struct Opened {
    pub ids: Value,
    /// Spend this (once) where the answer's effect is written: `mesh_store::spend_state`
    /// in the same transaction, or [`SpentStates`].
    pub id: String,
    pub expires_ms: u64,
}

/// States already answered, for a module with no store of its own: kept in memory until
/// they expire (a restart forgets them, so use it only where a replay writes nothing).
#[derive(Debug, Default)]
pub struct SpentStates {
    spent: std::sync::Mutex<std::collections::HashMap<String, u64>>,
}

impl SpentStates {
    /// Marks `opened` used; `Err(Used)` when it was already.
    pub fn spend(&self, opened: &Opened) -> Result<(), StateError> {
        let now = now_ms();
        let mut spent = self.spent.lock().unwrap_or_else(|p| p.into_inner());
        spent.retain(|_, expires| *expires >= now);
        if spent.insert(opened.id.clone(), opened.expires_ms).is_some() {
            return Err(StateError::Used);
        }
        Ok(())
    }
}

/// Creates `path` holding `bytes`, readable by its owner only, unless it exists: written whole
/// under another name, then linked into place, so that whoever reads it at the same moment
/// sees no file or the whole file, never an empty one. `Ok(false)`: it existed already.
pub fn create_once(path: &Path, bytes: &[u8]) -> std::io::Result<bool> {
    let tmp = path.with_extension(format!("{}.tmp", uuid::Uuid::new_v4().simple()));
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    let written = options.open(&tmp).and_then(|mut f| {
        f.write_all(bytes)?;
        f.sync_all()
    });
    let linked = written.and_then(|()| std::fs::hard_link(&tmp, path));
    let _ = std::fs::remove_file(&tmp);
    match linked {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(false),
        Err(e) => Err(e),
    }
}

/// A module's signing key.
#[derive(Clone)]
pub struct StateKey {
    key: [u8; 32],
    lifetime: Duration,
    clock: Clock,
}

/// Unix milliseconds now, by whatever clock a key is given (the system's; a test's own, so
/// that a lifetime runs out without waiting for it).
pub type Clock = std::sync::Arc<dyn Fn() -> u64 + Send + Sync>;

/// The system's clock.
pub fn system_clock() -> Clock {
    std::sync::Arc::new(now_ms)
}

impl std::fmt::Debug for StateKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StateKey").finish_non_exhaustive()
    }
}

impl StateKey {
    /// Reads the key in `path`, making one (readable by the owner only) on first use, so
    /// states survive a restart and every instance sharing the directory accepts them.
    pub fn load_or_create(path: &Path) -> Result<StateKey, KeyError> {
        let wrap = |source| KeyError {
            path: path.display().to_string(),
            source,
        };
        match std::fs::read(path) {
            Ok(bytes) => {
                let key: [u8; 32] = bytes.try_into().map_err(|b: Vec<u8>| {
                    wrap(std::io::Error::other(format!(
                        "holds {} bytes, not 32: remove it to make a new key (pending questions are then refused)",
                        b.len()
                    )))
                })?;
                Ok(StateKey::from_bytes(key))
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                if let Some(dir) = path.parent() {
                    std::fs::create_dir_all(dir).map_err(wrap)?;
                }
                let key = Self::random();
                match create_once(path, &key) {
                    Ok(true) => Ok(StateKey::from_bytes(key)),
                    // Another instance made it first: use theirs.
                    Ok(false) => Self::load_or_create(path),
                    Err(e) => Err(wrap(e)),
                }
            }
            Err(e) => Err(wrap(e)),
        }
    }

    pub fn from_bytes(key: [u8; 32]) -> StateKey {
        StateKey {
            key,
            lifetime: DEFAULT_LIFETIME,
            clock: system_clock(),
        }
    }

    /// A fresh random key, held in memory only: states it seals die with the process.
    pub fn generate() -> StateKey {
        StateKey::from_bytes(Self::random())
    }

    /// The same key reading time from `clock`.
    pub fn with_clock(mut self, clock: Clock) -> StateKey {
        self.clock = clock;
        self
    }

    /// 32 bytes from the OS's random source (two v4 UUIDs carry 244 random bits): a key to
    /// keep somewhere of one's own (a module's shared store).
    pub fn random() -> [u8; 32] {
        let mut key = [0u8; 32];
        key[..16].copy_from_slice(uuid::Uuid::new_v4().as_bytes());
        key[16..].copy_from_slice(uuid::Uuid::new_v4().as_bytes());
        key
    }

    pub fn with_lifetime(mut self, lifetime: Duration) -> StateKey {
        self.lifetime = lifetime;
        self
    }

    fn mac(&self) -> HmacSha256 {
        <HmacSha256 as Mac>::new_from_slice(&self.key).expect("HMAC takes any key length")
    }

    /// Seals `ids` for one tool and actor: `base64url(json).base64url(hmac)`.
    pub fn seal(&self, tool: &str, actor: Option<&str>, ids: Value) -> String {
        let body = serde_json::to_vec(&Sealed {
            id: uuid::Uuid::new_v4().simple().to_string(),
            tool: tool.to_owned(),
            actor: actor.unwrap_or_default().to_owned(),
            expires_ms: (self.clock)() + self.lifetime.as_millis() as u64,
            ids,
        })
        .expect("a state serialises");
        let mut mac = self.mac();
        mac.update(&body);
        let tag = mac.finalize().into_bytes();
        format!(
            "{}.{}",
            URL_SAFE_NO_PAD.encode(&body),
            URL_SAFE_NO_PAD.encode(tag)
        )
    }

    /// Checks the signature first (nothing unsigned is read), then tool, actor and lifetime,
    /// and hands back the ids. Whether it was used already is the caller's to check, where it
    /// writes ([`Opened::id`]).
    pub fn open(&self, state: &str, tool: &str, actor: Option<&str>) -> Result<Opened, StateError> {
        let (body, tag) = state
            .split_once('.')
            .ok_or(StateError::Malformed("no signature part"))?;
        let body = URL_SAFE_NO_PAD
            .decode(body)
            .map_err(|_| StateError::Malformed("not base64url"))?;
        let tag = URL_SAFE_NO_PAD
            .decode(tag)
            .map_err(|_| StateError::Malformed("not base64url"))?;
        let mut mac = self.mac();
        mac.update(&body);
        mac.verify_slice(&tag).map_err(|_| StateError::Tampered)?;
        let sealed: Sealed =
            serde_json::from_slice(&body).map_err(|_| StateError::Malformed("not a state"))?;
        if sealed.tool != tool {
            return Err(StateError::OtherTool {
                issued: sealed.tool,
                called: tool.to_owned(),
            });
        }
        let actor = actor.unwrap_or_default();
        if sealed.actor != actor {
            let name = |a: &str| {
                if a.is_empty() {
                    "no identity".to_owned()
                } else {
                    a.to_owned()
                }
            };
            return Err(StateError::OtherActor {
                issued: name(&sealed.actor),
                called: name(actor),
            });
        }
        if (self.clock)() > sealed.expires_ms {
            return Err(StateError::Expired);
        }
        Ok(Opened {
            ids: sealed.ids,
            id: sealed.id,
            expires_ms: sealed.expires_ms,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn round_trip_and_every_refusal() {
        let key = StateKey::from_bytes([7; 32]);
        let s = key.seal("decide_apply", Some("ann@PEOPLE"), json!({"run": "r1"}));
        let opened = key.open(&s, "decide_apply", Some("ann@PEOPLE")).unwrap();
        assert_eq!(opened.ids, json!({"run": "r1"}));
        // Spent once; a second state for the same ids is another state.
        let spent = SpentStates::default();
        assert_eq!(spent.spend(&opened), Ok(()));
        assert_eq!(spent.spend(&opened), Err(StateError::Used));
        let again = key.seal("decide_apply", Some("ann@PEOPLE"), json!({"run": "r1"}));
        let again = key
            .open(&again, "decide_apply", Some("ann@PEOPLE"))
            .unwrap();
        assert_ne!(again.id, opened.id);
        assert_eq!(spent.spend(&again), Ok(()));
        assert!(matches!(
            key.open(&s, "decide_apply", Some("bob@PEOPLE")),
            Err(StateError::OtherActor { .. })
        ));
        assert!(matches!(
            key.open(&s, "decide_apply", None),
            Err(StateError::OtherActor { .. })
        ));
        assert!(matches!(
            key.open(&s, "avu_apply_term", Some("ann@PEOPLE")),
            Err(StateError::OtherTool { .. })
        ));
        // One byte altered anywhere: refused.
        for i in 0..s.len() {
            let mut bytes = s.clone().into_bytes();
            bytes[i] = if bytes[i] == b'A' { b'B' } else { b'A' };
            let altered = String::from_utf8(bytes).unwrap();
            if altered == s {
                continue;
            }
            let e = key.open(&altered, "decide_apply", Some("ann@PEOPLE"));
            assert!(
                matches!(e, Err(StateError::Tampered | StateError::Malformed(_))),
                "byte {i}: {e:?}"
            );
        }
        // Another module's key.
        let other = StateKey::from_bytes([8; 32]);
        assert_eq!(
            other.open(&s, "decide_apply", Some("ann@PEOPLE")),
            Err(StateError::Tampered)
        );
        assert!(matches!(
            key.open("garbage", "t", None),
            Err(StateError::Malformed(_))
        ));
        // A clock of its own: the lifetime runs out when the test says, not after a sleep.
        let now = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(1_000));
        let clock: Clock = {
            let now = now.clone();
            std::sync::Arc::new(move || now.load(std::sync::atomic::Ordering::SeqCst))
        };
        let timed = key
            .clone()
            .with_clock(clock)
            .with_lifetime(Duration::from_secs(60));
        let sealed = timed.seal("t", None, json!(1));
        now.store(61_000, std::sync::atomic::Ordering::SeqCst);
        assert!(timed.open(&sealed, "t", None).is_ok(), "not yet expired");
        now.store(61_001, std::sync::atomic::Ordering::SeqCst);
        assert_eq!(timed.open(&sealed, "t", None), Err(StateError::Expired));
    }

    #[test]
    fn instances_starting_together_share_one_whole_key() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.key");
        let keys: Vec<StateKey> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..16)
                .map(|_| s.spawn(|| StateKey::load_or_create(&path).unwrap()))
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        let sealed = keys[0].seal("t", None, json!(1));
        for k in &keys {
            assert_eq!(k.open(&sealed, "t", None).unwrap().ids, json!(1));
        }
        let leftovers = std::fs::read_dir(dir.path()).unwrap().count();
        assert_eq!(leftovers, 1, "temporary key files left behind");
    }

    #[test]
    fn the_key_file_is_made_once_and_kept() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sub/state.key");
        let a = StateKey::load_or_create(&path).unwrap();
        let b = StateKey::load_or_create(&path).unwrap();
        let s = a.seal("t", None, json!([1]));
        assert_eq!(b.open(&s, "t", None).unwrap().ids, json!([1]));
        std::fs::write(&path, b"short").unwrap();
        let e = StateKey::load_or_create(&path).unwrap_err().to_string();
        assert!(e.contains("holds 5 bytes, not 32"), "{e}");
    }
}
