//! The mesh's ticket issuer, served by the catalogue: a person asks (`mesh.catalog.ticket`) for
//! a ticket that lets the module they are about to call act for them during that call; the
//! issuer names them as nats-server stamped their request, never as the request says.
//! Modules learn the key it signs with on `mesh.catalog.keys`.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use async_nats::{Client, Message, Subscriber};
use futures_util::StreamExt;

use mesh_core::actor::{Caller, Layout, Route, identify};
use mesh_core::subjects::ticket::{
    self, Claims, ISSUE_SUBJECT, IssueReply, IssueRequest, KEYS_SUBJECT, KeysReply, LONGEST,
    MAX_REQUEST,
};
use mesh_core::subjects::{FullName, catalog, check_module};

/// Why the issuer's key cannot be had.
#[derive(Debug, thiserror::Error)]
pub enum IssuerError {
    #[error("cannot read the ticket key {path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("the ticket key {path} is not an nkey seed ({why}); remove it to make a new one")]
    Seed { path: String, why: String },
    #[error("cannot write the ticket key {path}: {source}")]
    Write {
        path: String,
        source: std::io::Error,
    },
    #[error("cannot subscribe to {subject}: {why}")]
    Subscribe { subject: &'static str, why: String },
}

/// The key tickets are signed with.
pub struct Issuer {
    key: nkeys::KeyPair,
    /// Tickets lately issued, by person: one person asking without end would hold up
    /// everyone else's (the issuer answers one request at a time).
    lately: std::sync::Mutex<HashMap<String, (Instant, u32)>>,
}

/// Tickets one person may have in a second: far more than any client calling tools needs.
const TICKETS_A_SECOND: u32 = 200;

impl Issuer {
    /// A key that dies with the process: tickets it signed are worth nothing after.
    pub fn ephemeral() -> Issuer {
        Issuer::of(nkeys::KeyPair::new_operator())
    }

    /// The key whose seed is `seed` (an nkey seed, `S…`).
    pub fn from_seed(seed: &str) -> Result<Issuer, IssuerError> {
        let key = nkeys::KeyPair::from_seed(seed.trim()).map_err(|e| IssuerError::Seed {
            path: "(given)".into(),
            why: e.to_string(),
        })?;
        Ok(Issuer::of(key))
    }

    fn of(key: nkeys::KeyPair) -> Issuer {
        Issuer {
            key,
            lately: std::sync::Mutex::new(HashMap::new()),
        }
    }

    /// Whether `person` may have another ticket this second.
    fn within_rate(&self, person: &str) -> bool {
        let mut lately = self.lately.lock().unwrap_or_else(|p| p.into_inner());
        let now = Instant::now();
        // Those of past seconds are forgotten, so the map holds this second's askers only.
        if lately.len() > 1024 {
            lately.retain(|_, (at, _)| now.duration_since(*at) < Duration::from_secs(1));
        }
        let (at, n) = lately.entry(person.to_owned()).or_insert((now, 0));
        if now.duration_since(*at) >= Duration::from_secs(1) {
            *at = now;
            *n = 0;
        }
        *n += 1;
        *n <= TICKETS_A_SECOND
    }

    /// The key kept in `path` (its seed, mode 0600), made on first use. Every instance of
    /// the catalogue of one mesh must use the same one.
    pub fn load_or_create(path: &Path) -> Result<Issuer, IssuerError> {
        let shown = path.display().to_string();
        match std::fs::read_to_string(path) {
            Ok(seed) => {
                let key =
                    nkeys::KeyPair::from_seed(seed.trim()).map_err(|e| IssuerError::Seed {
                        path: shown,
                        why: e.to_string(),
                    })?;
                Ok(Issuer::of(key))
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                let key = nkeys::KeyPair::new_operator();
                let seed = key.seed().expect("a new key has its seed");
                let issuer = Issuer::of(key);
                if let Some(dir) = path.parent() {
                    mesh_core::runtime::private_dir(dir).map_err(|source| IssuerError::Write {
                        path: shown.clone(),
                        source,
                    })?;
                }
                mesh_core::client::write_private(path, &seed).map_err(|source| {
                    IssuerError::Write {
                        path: shown,
                        source,
                    }
                })?;
                Ok(issuer)
            }
            Err(source) => Err(IssuerError::Read {
                path: shown,
                source,
            }),
        }
    }

    /// Its public key, as modules check tickets against it.
    pub fn public_key(&self) -> String {
        self.key.public_key()
    }

    /// The answer to one request for a ticket, from its stamped sender.
    fn issue(&self, msg: &Message, now: SystemTime) -> Result<String, String> {
        let caller = identify(
            msg.headers.as_ref(),
            msg.description.as_deref(),
            Layout::Accounts,
            Route::Direct,
            &msg.subject,
        )
        .map_err(|e| e.to_string())?;
        let person = match caller {
            Caller::Person(p) => p,
            Caller::Module(m) => {
                return Err(format!(
                    "module {m} asked for a ticket: tickets are for people, to let a module act for them during their own call"
                ));
            }
            Caller::Unknown => return Err("nobody is named on this bus".into()),
        };
        if !self.within_rate(&person.to_string()) {
            return Err(format!(
                "{person} asked for more than {TICKETS_A_SECOND} tickets this second; try again in a second"
            ));
        }
        if msg.payload.len() > MAX_REQUEST {
            return Err(format!(
                "a ticket request is at most {MAX_REQUEST} bytes: {{\"audience\", \"tool\", \"expires_ms\"}}"
            ));
        }
        let request: IssueRequest = serde_json::from_slice(&msg.payload).map_err(|e| {
            format!(
                "not a ticket request ({e}): send {{\"audience\": \"<module>\", \"tool\": \"<module>_<tool>\", \"expires_ms\": <when the call ends>}}"
            )
        })?;
        check_module(&request.audience).map_err(|e| e.to_string())?;
        let tool = FullName::parse(&request.tool).map_err(|e| e.to_string())?;
        if tool.module() != request.audience {
            return Err(format!(
                "tool {tool} is not module {}'s: a ticket is for a tool of its audience",
                request.audience
            ));
        }
        let now_ms = ticket::ms(now);
        if request.expires_ms <= now_ms {
            return Err("the call it is for has already ended (expires_ms is past)".into());
        }
        let claims = Claims {
            v: 1,
            iss: self.public_key(),
            sub: person.to_string(),
            aud: request.audience,
            tool: tool.to_string(),
            call: uuid::Uuid::new_v4().simple().to_string(),
            iat: now_ms,
            exp: request.expires_ms.min(ticket::ms(now + LONGEST)),
        };
        ticket::sign(&claims, &self.key).map_err(|e| format!("cannot sign: {e}"))
    }
}

/// Subscribes the issuer's two verbs (before the catalogue says it serves).
pub(crate) async fn subscribe(client: &Client) -> Result<(Subscriber, Subscriber), IssuerError> {
    let sub = |subject: &'static str| async move {
        client
            .queue_subscribe(subject, catalog::MODULE.to_owned())
            .await
            .map_err(|e| IssuerError::Subscribe {
                subject,
                why: e.to_string(),
            })
    };
    Ok((sub(ISSUE_SUBJECT).await?, sub(KEYS_SUBJECT).await?))
}

/// Answers requests for tickets and for the keys until the subscriptions end.
pub(crate) async fn serve(
    issuer: Arc<Issuer>,
    client: Client,
    mut issue: Subscriber,
    mut keys: Subscriber,
) {
    let keys_reply = serde_json::to_vec(&KeysReply {
        keys: vec![issuer.public_key()],
    })
    .expect("keys serialise");
    loop {
        let (msg, body) = tokio::select! {
            Some(msg) = issue.next() => {
                let reply = match issuer.issue(&msg, SystemTime::now()) {
                    Ok(t) => IssueReply { ticket: Some(t), error: None },
                    Err(why) => {
                        tracing::info!(subject = %msg.subject, "no ticket: {why}");
                        IssueReply { ticket: None, error: Some(why) }
                    }
                };
                (msg, serde_json::to_vec(&reply).expect("a reply serialises"))
            }
            Some(msg) = keys.next() => (msg, keys_reply.clone()),
            else => return,
        };
        let Some(reply) = msg.reply else { continue };
        if let Err(e) = client.publish(reply, body.into()).await {
            tracing::warn!("cannot answer on {}: {e}", msg.subject);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_kept_key_is_the_same_key() {
        let dir = std::env::temp_dir().join(format!("mesh-issuer-{}", std::process::id()));
        let path = dir.join("tickets.nk");
        let a = Issuer::load_or_create(&path).unwrap();
        let b = Issuer::load_or_create(&path).unwrap();
        assert_eq!(a.public_key(), b.public_key());
        std::fs::write(&path, "not a seed").unwrap();
        assert!(matches!(
            Issuer::load_or_create(&path),
            Err(IssuerError::Seed { .. })
        ));
        let _ = std::fs::remove_dir_all(dir);
    }
}
