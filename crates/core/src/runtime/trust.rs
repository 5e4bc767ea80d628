//! Checking tickets where they arrive: the keys the mesh signs them with (pinned, or asked of
//! the catalogue once and again only when a ticket names a key not seen), the rules that
//! bind a ticket to the call carrying it, and whether the call it was issued for still runs
//! (asked of the issuer each time a module acts on it; an ended one is remembered).

use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant, SystemTime};

use async_nats::{Client, HeaderMap};

use crate::actor::{Actor, Caller, values};
use crate::subjects::ticket::{
    self, CURRENT_SUBJECT, Current, Ended, HEADER_TICKET, KEYS_SUBJECT, KeysReply, Ticket,
    TicketError,
};

/// How long the catalogue may take to say its keys.
const ASK_WITHIN: Duration = Duration::from_secs(2);

/// How often, at most, an unknown key makes the runtime ask the catalogue again: forged
/// tickets naming made-up keys must not turn into a flood of requests.
const ASK_AGAIN_AFTER: Duration = Duration::from_secs(10);

/// The keys a module trusts to sign tickets.
pub(crate) struct Trust {
    client: Client,
    /// Keys given at start (`ServeOptions::ticket_keys`): never asked of the bus.
    pinned: bool,
    keys: RwLock<Arc<Vec<String>>>,
    asked: tokio::sync::Mutex<Option<Instant>>,
    /// Tickets whose calls the issuer said ended (an ended call stays ended): not asked again.
    ended: std::sync::Mutex<std::collections::HashSet<String>>,
}

/// The most ended tickets remembered; past it, they are asked of the issuer again.
const ENDED_REMEMBERED: usize = 4096;

impl Trust {
    pub fn new(client: Client, pinned: Option<Vec<String>>) -> Trust {
        Trust {
            client,
            pinned: pinned.is_some(),
            keys: RwLock::new(Arc::new(pinned.unwrap_or_default())),
            asked: tokio::sync::Mutex::new(None),
            ended: std::sync::Mutex::default(),
        }
    }

    /// Refuses `ticket` once the call it was issued for has ended, as the issuer says; a
    /// silent issuer leaves it unchecked, and the call is refused (never acted on unchecked).
    async fn still_current(&self, ticket: &Ticket) -> Result<(), TicketError> {
        let call = &ticket.claims.call;
        let ended = || self.ended.lock().unwrap_or_else(|p| p.into_inner());
        if ended().contains(call) {
            return Err(TicketError::Ended);
        }
        let question = serde_json::to_vec(&Current {
            call: call.clone(),
            ended: None,
            error: None,
        })
        .expect("a question serialises");
        let reply = tokio::time::timeout(
            ASK_WITHIN,
            self.client.request(CURRENT_SUBJECT, question.into()),
        )
        .await;
        let answer = match reply {
            Ok(Ok(msg)) if crate::subjects::limits::retry_after(msg.headers.as_ref()).is_some() => {
                Err(format!(
                    "the issuer has more of this module's questions waiting than it keeps ({CURRENT_SUBJECT} answered busy); the caller may try again in a moment"
                ))
            }
            Ok(Ok(msg)) => serde_json::from_slice::<Current>(&msg.payload)
                .map_err(|e| format!("the issuer's answer on {CURRENT_SUBJECT} is not one ({e})")),
            Ok(Err(e)) => Err(format!("asking the issuer ({CURRENT_SUBJECT}) failed: {e}")),
            Err(_) => Err(format!(
                "the issuer did not answer on {CURRENT_SUBJECT} in time"
            )),
        };
        match answer {
            Ok(Current {
                ended: Some(false), ..
            }) => Ok(()),
            Ok(Current {
                ended: Some(true), ..
            }) => {
                let mut ended = ended();
                if ended.len() >= ENDED_REMEMBERED {
                    ended.clear();
                }
                ended.insert(call.clone());
                Err(TicketError::Ended)
            }
            Ok(Current { error, .. }) => Err(TicketError::Unchecked(
                error.unwrap_or_else(|| "the issuer said neither".into()),
            )),
            Err(why) => Err(TicketError::Unchecked(why)),
        }
    }

    /// Tells the issuer that the call `raw` was issued for has ended here (its handler
    /// returned or was dropped): from then on no module acts on it. Not waited for.
    pub fn end(&self, raw: &str) {
        let body = serde_json::to_vec(&Ended {
            ticket: raw.to_owned(),
        })
        .expect("an end serialises");
        let client = self.client.clone();
        // Said from a drop too (a call cancelled): only where a runtime still runs.
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move { ticket::say_ended(&client, body.into()).await });
        }
    }

    fn current(&self) -> Arc<Vec<String>> {
        self.keys.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Checks a ticket's signature and lifetime (who it names and for what is the caller's).
    pub async fn check(&self, raw: &str) -> Result<Ticket, TicketError> {
        let issuer = ticket::issuer_of(raw)?;
        let keys = self.keys_with(&issuer).await?;
        ticket::verify(raw, &keys, SystemTime::now())
    }

    /// The keys, asked of the catalogue when `issuer` is not among them (at most once per
    /// [`ASK_AGAIN_AFTER`]).
    async fn keys_with(&self, issuer: &str) -> Result<Arc<Vec<String>>, TicketError> {
        let keys = self.current();
        if self.pinned || keys.iter().any(|k| k == issuer) {
            return Ok(keys);
        }
        let mut asked = self.asked.lock().await;
        // Another call may have asked while this one waited for the lock.
        let keys = self.current();
        if keys.iter().any(|k| k == issuer)
            || asked.is_some_and(|at| at.elapsed() < ASK_AGAIN_AFTER)
        {
            return Ok(keys);
        }
        *asked = Some(Instant::now());
        let reply = tokio::time::timeout(
            ASK_WITHIN,
            self.client.request(KEYS_SUBJECT, bytes::Bytes::new()),
        )
        .await;
        let why = match reply {
            Ok(Ok(msg)) => match serde_json::from_slice::<KeysReply>(&msg.payload) {
                Ok(reply) => {
                    let fresh = Arc::new(reply.keys);
                    *self.keys.write().unwrap_or_else(|p| p.into_inner()) = fresh.clone();
                    return Ok(fresh);
                }
                Err(e) => format!("the catalogue's answer on {KEYS_SUBJECT} is not its keys: {e}"),
            },
            Ok(Err(e)) => format!("asking the catalogue for its keys ({KEYS_SUBJECT}) failed: {e}"),
            Err(_) => format!("the catalogue did not say its keys ({KEYS_SUBJECT}) in time"),
        };
        if keys.is_empty() {
            return Err(TicketError::NoKeys(why));
        }
        tracing::warn!("{why}; keeping the keys known");
        Ok(keys)
    }
}

/// Says a ticket's call ended when dropped: the handler it was given to returned, or was
/// dropped with its call.
pub(crate) struct Ending<'a> {
    pub trust: &'a Trust,
    pub raw: String,
}

impl Drop for Ending<'_> {
    fn drop(&mut self) {
        self.trust.end(&self.raw);
    }
}

/// The one ticket a request carries, if any; more than one is refused.
fn one(headers: Option<&HeaderMap>) -> Result<Option<&str>, TicketError> {
    // In any letter case, as for the identity headers.
    match values(headers, HEADER_TICKET).as_slice() {
        [] => Ok(None),
        [t] => Ok(Some(t)),
        many => Err(TicketError::Duplicated(many.len())),
    }
}

fn same_person(ticket: &Ticket, actor: &Actor) -> Result<(), TicketError> {
    if ticket.person.user == actor.user && ticket.person.account == actor.account {
        Ok(())
    } else {
        Err(TicketError::OtherPerson {
            ticket: ticket.person.to_string(),
            claimed: actor.to_string(),
        })
    }
}

impl Trust {
    /// A call of a tool that acts for its caller: a person calling it directly must send a
    /// ticket issued to them, for this module and this tool. Anyone else (a module calling
    /// as itself, a call through another module) needs none and gets none.
    pub async fn for_delegating_call(
        &self,
        headers: Option<&HeaderMap>,
        caller: &Caller,
        module: &str,
        tool: &str,
    ) -> Result<Option<Ticket>, TicketError> {
        let Caller::Person(actor) = caller else {
            return Ok(None);
        };
        if actor.via.is_some() {
            return Ok(None);
        }
        let raw = one(headers)?.ok_or_else(|| TicketError::Required {
            tool: tool.to_owned(),
        })?;
        let ticket = self.check(raw).await?;
        same_person(&ticket, actor)?;
        if ticket.claims.aud != module {
            return Err(TicketError::OtherAudience {
                ticket: ticket.claims.aud,
                caller: module.to_owned(),
            });
        }
        if ticket.claims.tool != tool {
            return Err(TicketError::OtherTool {
                ticket: ticket.claims.tool,
                called: tool.to_owned(),
            });
        }
        Ok(Some(ticket))
    }

    /// A call of `called` on a `mesh-obo` subject, from module `via` for `actor` (as
    /// `Mesh-On-Behalf-Of` says): it must carry the ticket that person's call gave that
    /// module, and the grant it carries must name `called`.
    pub async fn for_obo_call(
        &self,
        headers: Option<&HeaderMap>,
        actor: &Actor,
        via: &str,
        called: &str,
    ) -> Result<Ticket, TicketError> {
        let raw = one(headers)?.ok_or(TicketError::Missing)?;
        let ticket = self.check(raw).await?;
        if ticket.claims.aud != via {
            return Err(TicketError::OtherAudience {
                ticket: ticket.claims.aud,
                caller: via.to_owned(),
            });
        }
        same_person(&ticket, actor)?;
        let lets =
            crate::subjects::FullName::parse(called).is_ok_and(|c| ticket.claims.lets_call(&c));
        if !lets {
            return Err(TicketError::NotGranted {
                tool: ticket.claims.tool,
                called: called.to_owned(),
                may: ticket.claims.may.unwrap_or_default().join(", "),
            });
        }
        // Last: only a ticket that would otherwise do costs the issuer a question.
        self.still_current(&ticket).await?;
        Ok(ticket)
    }
}
