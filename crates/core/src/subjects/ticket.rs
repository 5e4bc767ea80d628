//! Tickets, both sides of their wire: the proof that a person asked a module to act for them
//! on one call. The mesh's issuer (served by the catalogue) signs one for a person whose
//! request nats-server stamped; the person's client sends it with the call (`Mesh-Ticket`);
//! the module forwards it on the `mesh-obo` twin of the tool it reaches for the person; the
//! runtime on the far side checks it. A module cannot make one: it never holds the key.
//!
//! A ticket is `base64url(claims).base64url(ed25519 signature of the first part)`, the key
//! an nkey (as nats-server writes ed25519 keys), the claims:
//!
//! ```json
//! {"v":1,"iss":"O…","sub":"ann@PEOPLE","aud":"decide","tool":"decide_apply",
//!  "call":"…","iat":1764500000000,"exp":1764500010000,"may":["avu_add","avu_list"]}
//! ```
//!
//! `may`, where the issuer knows the grants file, is what the grant lets the audience call
//! for the person from that tool (modules or full tool names): the far side refuses the
//! ticket for any other tool. Without it, the bus's permissions alone bound the audience.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde::{Deserialize, Serialize};

use crate::actor::{Actor, module_of_account};

/// The header a ticket travels in: from the person to the module they call, and from that
/// module to the one it reaches for them.
pub const HEADER_TICKET: &str = "Mesh-Ticket";

/// The key of a tool's `_meta` saying it acts for the person calling it (so needs a ticket).
pub const ACTS_FOR_PEOPLE_META: &str = "mesh/actsForPeople";

/// Where a person asks for a ticket (a verb of the catalogue, not a tool).
pub const ISSUE_SUBJECT: &str = "mesh.catalog.ticket";

/// Where a module learns the keys tickets are signed with.
pub const KEYS_SUBJECT: &str = "mesh.catalog.keys";

/// Where the call a ticket was issued for is said to have ended ([`Ended`]): by the person it
/// names (their client, when the call's answer came or it was given up) or by the module it
/// was issued to (its runtime, when the handler ended). From then on the ticket acts for
/// nobody, on every instance of every module.
pub const ENDED_SUBJECT: &str = "mesh.catalog.ended";

/// Where a module asks whether a ticket's call ended ([`Current`]), before acting on it.
pub const CURRENT_SUBJECT: &str = "mesh.catalog.current";

/// The longest a ticket lives: a call may run an hour (the exports' response threshold).
pub const LONGEST: Duration = Duration::from_secs(3600);

/// The largest ticket read; one the issuer writes is a few hundred bytes.
pub const MAX_LEN: usize = 2048;

/// The largest request to the issuer read.
pub const MAX_REQUEST: usize = 1024;

/// How far a verifier's clock may be behind the issuer's before a fresh ticket looks issued
/// in the future, and ahead before a live one looks expired. deploy.md: keep clocks in step.
pub const SKEW: Duration = Duration::from_secs(5);

/// The code a module answers a call with when the tool acts for its caller toward other
/// modules and the call carries no ticket: the client then asks for one and calls again
/// (the tool has not run).
pub const CODE_TICKET_REQUIRED: usize = 401;

/// A person's request for a ticket.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct IssueRequest {
    /// The module the person calls, which may act for them during the call.
    pub audience: String,
    /// The tool called, by full name (`decide_apply`).
    pub tool: String,
    /// When the call's caller stops waiting (milliseconds since the epoch): the ticket's end,
    /// at most [`LONGEST`] from now.
    pub expires_ms: u64,
}

/// The issuer's answer: a ticket, or why not.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct IssueReply {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ticket: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// A ticket's call ended: the ticket as it travelled.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct Ended {
    pub ticket: String,
}

/// The issuer's answer to an end: the call id it took, or why not, and whether saying it
/// again later may do (its sayer past their rate, the bucket not answering).
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct EndedReply {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ended: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub again: bool,
}

/// How many times an end is said before it is given up (the ticket then acts until its
/// call's deadline at most).
const END_TRIES: u32 = 5;

/// Says that the call of the ticket in `body` (an [`Ended`]) has ended, until the issuer
/// takes it: again after a busy answer, silence or a passing refusal, a few times with a
/// growing pause. The sayer's side of `mesh.catalog.ended`.
pub async fn say_ended(nats: &async_nats::Client, body: bytes::Bytes) {
    let mut pause = Duration::from_millis(200);
    for _ in 0..END_TRIES {
        let asked = tokio::time::timeout(
            Duration::from_secs(2),
            nats.request(ENDED_SUBJECT, body.clone()),
        )
        .await;
        let wait = match asked {
            Ok(Ok(msg)) => match super::limits::retry_after(msg.headers.as_ref()) {
                Some(after) => after.min(Duration::from_secs(2)),
                None => match serde_json::from_slice::<EndedReply>(&msg.payload) {
                    Ok(r) if r.again => pause,
                    Ok(r) => {
                        if let Some(why) = r.error {
                            tracing::debug!("a ticket's end was not taken: {why}");
                        }
                        return;
                    }
                    Err(e) => {
                        tracing::debug!("the issuer's answer to an end does not read: {e}");
                        return;
                    }
                },
            },
            Ok(Err(e)) => {
                tracing::debug!("a ticket's end was not heard: {e}");
                pause
            }
            Err(_) => pause,
        };
        tokio::time::sleep(wait).await;
        pause = (pause * 2).min(Duration::from_secs(2));
    }
    tracing::warn!(
        "the issuer did not take a ticket's end after {END_TRIES} tries: the ticket acts until its call's deadline at most"
    );
}

/// Whether the call of ticket `call` (its claims' id) still runs: the request, and the
/// issuer's answer (`ended`, or why it cannot say).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct Current {
    pub call: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ended: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// The keys tickets are signed with (nkey public keys).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct KeysReply {
    pub keys: Vec<String>,
}

/// What a ticket says.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct Claims {
    pub v: u32,
    /// The issuer's public key.
    pub iss: String,
    /// The person, `user@ACCOUNT`, as nats-server stamped their request to the issuer.
    pub sub: String,
    /// The module that may act for them.
    pub aud: String,
    /// The tool they call on it, by full name.
    pub tool: String,
    /// This ticket's id: every call gets a ticket of its own.
    pub call: String,
    pub iat: u64,
    pub exp: u64,
    /// What the grant lets the audience call for the person from `tool`: modules or full
    /// tool names. None: what the bus lets it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub may: Option<Vec<String>>,
}

impl Claims {
    /// Whether the grant this ticket carries lets its audience call `called` with it. An
    /// entry reads as in a grants file's `calls`: a bare name is a whole module, one with a
    /// `_` a tool (`echo_echo` is echo's eponymous tool, `echo` all of echo).
    pub fn lets_call(&self, called: &crate::subjects::FullName) -> bool {
        self.may.as_ref().is_none_or(|may| {
            may.iter().any(|t| {
                if t.contains('_') {
                    crate::subjects::FullName::parse(t).is_ok_and(|n| n == *called)
                } else {
                    t == called.module()
                }
            })
        })
    }
}

/// Who may call what, as the issuer reads it (`<state>/catalog/people.json`, written by
/// `mesh up` from the grants file at each start and reload).
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct MayCallTable {
    /// Each person's subjects to call tools, by id (`"ann@PEOPLE": ["mesh.echo.>"]`).
    pub people: std::collections::BTreeMap<String, Vec<String>>,
    /// What each module may call for people, by its tool ([`ANY_TOOL`] for all of them):
    /// `"decide": {"apply": ["avu_add"], "*": ["avu_list"]}`.
    pub acting: std::collections::BTreeMap<String, std::collections::BTreeMap<String, Vec<String>>>,
}

/// The key in [`MayCallTable::acting`] for every tool of a module.
pub const ANY_TOOL: &str = "*";

impl MayCallTable {
    /// What module `module`'s tool `tool` (its short name) may call for people: its own
    /// grant, else its module's; none when the grants file gives it nothing.
    pub fn acting_for(&self, module: &str, tool: &str) -> Option<&Vec<String>> {
        let by_tool = self.acting.get(module)?;
        by_tool.get(tool).or_else(|| by_tool.get(ANY_TOOL))
    }
}

/// A ticket whose signature, issuer and lifetime were checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ticket {
    pub claims: Claims,
    /// The person it names.
    pub person: Actor,
    /// The ticket as it travels, to forward unchanged.
    pub raw: String,
}

impl Ticket {
    /// What a ticket says, its signature not checked: to forward a ticket one holds, never to
    /// trust one (a handler gets a checked one in `Call::ticket`).
    pub fn unchecked(raw: &str) -> Result<Ticket, TicketError> {
        let (claims, _, _) = decode(raw)?;
        let person = claims
            .sub
            .parse()
            .map_err(|_| TicketError::Malformed("its subject is not user@ACCOUNT"))?;
        Ok(Ticket {
            person,
            claims,
            raw: raw.to_owned(),
        })
    }

    pub fn expires(&self) -> SystemTime {
        UNIX_EPOCH + Duration::from_millis(self.claims.exp)
    }
}

/// Why a ticket is refused. The call is answered with this (code 403), before the tool runs.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TicketError {
    #[error(
        "{tool} acts for you toward other modules and the call carries no {HEADER_TICKET}: ask the catalogue for one ({ISSUE_SUBJECT}) and call again with it (mesh's own clients do)"
    )]
    Required { tool: String },
    #[error(
        "refused: a call for a person on a mesh-obo subject carries no {HEADER_TICKET}: a module may act for a person only with the ticket that person's call gave it"
    )]
    Missing,
    #[error("refused: the request carries {0} {HEADER_TICKET} headers; send exactly one")]
    Duplicated(usize),
    #[error("refused: the {HEADER_TICKET} is not a ticket ({0})")]
    Malformed(&'static str),
    #[error("refused: the ticket is signed by {0}, a key the mesh does not issue tickets with")]
    UnknownIssuer(String),
    #[error("refused: the ticket's signature does not hold (it was altered or forged)")]
    BadSignature,
    #[error("refused: the ticket expired {0} ms ago; a ticket lives only as long as its call")]
    Expired(u64),
    #[error(
        "refused: the call this ticket was issued for has ended; a ticket acts only while its call runs"
    )]
    Ended,
    #[error("cannot check whether the ticket's call still runs: {0}")]
    Unchecked(String),
    #[error(
        "refused: the ticket is issued in the future by the verifier's clock; keep clocks in step"
    )]
    NotYetValid,
    #[error("refused: the ticket was issued to module {ticket}, not to {caller}")]
    OtherAudience { ticket: String, caller: String },
    #[error("refused: the ticket was issued for a call of {ticket}, not of {called}")]
    OtherTool { ticket: String, called: String },
    #[error(
        "refused: the ticket lets {tool} act for its person toward {may} only, not {called} (the grants file's calls_for_people)"
    )]
    NotGranted {
        tool: String,
        called: String,
        may: String,
    },
    #[error("refused: the ticket names {ticket}, but {claimed} is claimed")]
    OtherPerson { ticket: String, claimed: String },
    #[error("refused: the ticket names {0}, which is not a person")]
    NotAPerson(String),
    #[error("cannot check the ticket: {0}")]
    NoKeys(String),
}

impl TicketError {
    /// The error code of the answer: a missing ticket asks for one (401), keys that cannot be
    /// had are an outage (503), the rest are refusals (403).
    pub fn code(&self) -> usize {
        match self {
            TicketError::Required { .. } => CODE_TICKET_REQUIRED,
            // The module cannot check now (the catalogue is silent): not a refusal.
            TicketError::NoKeys(_) | TicketError::Unchecked(_) => 503,
            _ => 403,
        }
    }
}

/// Whether a reply says its tool needs a ticket (`Nats-Service-Error-Code: 401`).
pub fn asks_for_ticket(headers: Option<&async_nats::HeaderMap>) -> bool {
    headers
        .and_then(|h| h.get(super::HEADER_SERVICE_ERROR_CODE))
        .is_some_and(|code| code.as_str() == "401")
}

/// Milliseconds since the epoch.
pub fn ms(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// Signs `claims` with the issuer's key (a seed-holding nkey). Only the issuer calls this.
pub fn sign(claims: &Claims, key: &nkeys::KeyPair) -> Result<String, nkeys::error::Error> {
    let body = URL_SAFE_NO_PAD.encode(serde_json::to_vec(claims).expect("claims serialise"));
    let signature = key.sign(body.as_bytes())?;
    Ok(format!("{body}.{}", URL_SAFE_NO_PAD.encode(signature)))
}

/// The issuer a ticket names, read without checking anything (to find its key).
pub fn issuer_of(raw: &str) -> Result<String, TicketError> {
    Ok(decode(raw)?.0.iss)
}

/// Splits and decodes a ticket: its claims, the signed part, the signature.
fn decode(raw: &str) -> Result<(Claims, &str, Vec<u8>), TicketError> {
    if raw.len() > MAX_LEN {
        return Err(TicketError::Malformed("longer than a ticket"));
    }
    let (body, signature) = raw
        .split_once('.')
        .ok_or(TicketError::Malformed("no signature"))?;
    let json = URL_SAFE_NO_PAD
        .decode(body)
        .map_err(|_| TicketError::Malformed("not base64url"))?;
    let signature = URL_SAFE_NO_PAD
        .decode(signature)
        .map_err(|_| TicketError::Malformed("not base64url"))?;
    let claims: Claims =
        serde_json::from_slice(&json).map_err(|_| TicketError::Malformed("not its claims"))?;
    if claims.v != 1 {
        return Err(TicketError::Malformed("an unknown version"));
    }
    Ok((claims, body, signature))
}

/// Checks a ticket: signed by one of `keys` (nkey public keys), within its lifetime at
/// `now`, naming a person. Who it was issued to and for which tool the caller checks.
pub fn verify(raw: &str, keys: &[String], now: SystemTime) -> Result<Ticket, TicketError> {
    let (claims, body, signature) = decode(raw)?;
    if !keys.contains(&claims.iss) {
        return Err(TicketError::UnknownIssuer(claims.iss));
    }
    let key = nkeys::KeyPair::from_public_key(&claims.iss)
        .map_err(|_| TicketError::Malformed("its issuer is not a public key"))?;
    key.verify(body.as_bytes(), &signature)
        .map_err(|_| TicketError::BadSignature)?;
    let now = ms(now);
    let skew = SKEW.as_millis() as u64;
    if claims.iat > now + skew {
        return Err(TicketError::NotYetValid);
    }
    if claims.exp.saturating_add(skew) < now {
        return Err(TicketError::Expired(now - claims.exp));
    }
    let person: Actor = claims
        .sub
        .parse()
        .map_err(|_| TicketError::Malformed("its subject is not user@ACCOUNT"))?;
    if module_of_account(&person.account).is_some() {
        return Err(TicketError::NotAPerson(claims.sub));
    }
    Ok(Ticket {
        person,
        claims,
        raw: raw.to_owned(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn claims(key: &nkeys::KeyPair, exp: u64) -> Claims {
        Claims {
            v: 1,
            iss: key.public_key(),
            sub: "ann@PEOPLE".into(),
            aud: "decide".into(),
            tool: "decide_apply".into(),
            call: "c1".into(),
            iat: ms(SystemTime::now()),
            exp,
            may: None,
        }
    }

    #[test]
    fn a_signed_ticket_holds_and_any_change_breaks_it() {
        let key = nkeys::KeyPair::new_operator();
        let keys = vec![key.public_key()];
        let later = ms(SystemTime::now()) + 60_000;
        let raw = sign(&claims(&key, later), &key).unwrap();
        let t = verify(&raw, &keys, SystemTime::now()).unwrap();
        assert_eq!(t.person.to_string(), "ann@PEOPLE");
        assert_eq!(issuer_of(&raw).unwrap(), key.public_key());

        // Another person written into the same signature.
        let mut other = claims(&key, later);
        other.sub = "bob@PEOPLE".into();
        let body = URL_SAFE_NO_PAD.encode(serde_json::to_vec(&other).unwrap());
        let forged = format!("{body}.{}", raw.split_once('.').unwrap().1);
        assert_eq!(
            verify(&forged, &keys, SystemTime::now()),
            Err(TicketError::BadSignature)
        );
        // Signed by a key of its own, naming the real issuer.
        let mallory = nkeys::KeyPair::new_operator();
        let mut lying = claims(&key, later);
        lying.sub = "mallory@PEOPLE".into();
        let body = URL_SAFE_NO_PAD.encode(serde_json::to_vec(&lying).unwrap());
        let sig = URL_SAFE_NO_PAD.encode(mallory.sign(body.as_bytes()).unwrap());
        assert_eq!(
            verify(&format!("{body}.{sig}"), &keys, SystemTime::now()),
            Err(TicketError::BadSignature)
        );
        // Signed by a key of its own, naming itself.
        let own = sign(&claims(&mallory, later), &mallory).unwrap();
        assert!(matches!(
            verify(&own, &keys, SystemTime::now()),
            Err(TicketError::UnknownIssuer(_))
        ));
    }

    #[test]
    fn may_reads_a_bare_name_as_a_module_and_a_long_one_as_a_tool() {
        let key = nkeys::KeyPair::new_operator();
        let mut c = claims(&key, 0);
        let name = |n: &str| crate::subjects::FullName::parse(n).unwrap();
        c.may = Some(vec!["echo_echo".into()]);
        assert!(c.lets_call(&name("echo")));
        assert!(!c.lets_call(&name("echo_whoami")));
        c.may = Some(vec!["echo".into()]);
        assert!(c.lets_call(&name("echo")));
        assert!(c.lets_call(&name("echo_whoami")));
        c.may = Some(vec!["avu_add".into()]);
        assert!(c.lets_call(&name("avu_add")));
        assert!(!c.lets_call(&name("avu_list")));
    }

    #[test]
    fn a_ticket_lives_until_its_end_only() {
        let key = nkeys::KeyPair::new_operator();
        let keys = vec![key.public_key()];
        let now = ms(SystemTime::now());
        let raw = sign(&claims(&key, now - 10_000), &key).unwrap();
        assert!(matches!(
            verify(&raw, &keys, SystemTime::now()),
            Err(TicketError::Expired(_))
        ));
        let mut early = claims(&key, now + 120_000);
        early.iat = now + 60_000;
        let raw = sign(&early, &key).unwrap();
        assert_eq!(
            verify(&raw, &keys, SystemTime::now()),
            Err(TicketError::NotYetValid)
        );
    }

    #[test]
    fn what_is_not_a_ticket_is_refused_without_a_panic() {
        let key = nkeys::KeyPair::new_operator();
        let keys = vec![key.public_key()];
        let mut module = claims(&key, ms(SystemTime::now()) + 60_000);
        module.sub = "avu@MODULE_avu".into();
        let raw = sign(&module, &key).unwrap();
        assert!(matches!(
            verify(&raw, &keys, SystemTime::now()),
            Err(TicketError::NotAPerson(_))
        ));
        for bad in [
            "",
            ".",
            "a.b",
            "x",
            "e30.AAAA",
            &"a".repeat(MAX_LEN + 1),
            "!!!.!!!",
        ] {
            assert!(
                matches!(
                    verify(bad, &keys, SystemTime::now()),
                    Err(TicketError::Malformed(_))
                ),
                "{bad:?}"
            );
        }
    }
}
