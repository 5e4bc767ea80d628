//! Who is calling: the actor a tool handler is handed, read from bus headers only the runtime trusts.

use std::fmt;
use std::str::FromStr;

use async_nats::HeaderMap;
use serde::Deserialize;

use crate::subjects::{HEADER_ON_BEHALF_OF, HEADER_REQUEST_INFO};

/// A person on the bus, `user@ACCOUNT`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Actor {
    pub user: String,
    pub account: String,
    /// True when a module relayed the call for this person (`Mesh-On-Behalf-Of`).
    pub relayed: bool,
}

impl fmt::Display for Actor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}@{}", self.user, self.account)
    }
}

/// A `user@ACCOUNT` string that does not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0:?} is not an actor: expected user@ACCOUNT")]
pub struct ActorParseError(String);

impl FromStr for Actor {
    type Err = ActorParseError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let (user, account) = s
            .rsplit_once('@')
            .filter(|(u, a)| !u.is_empty() && !a.is_empty() && !a.contains(char::is_whitespace))
            .ok_or_else(|| ActorParseError(s.to_owned()))?;
        Ok(Actor {
            user: user.to_owned(),
            account: account.to_owned(),
            relayed: false,
        })
    }
}

/// How the bus the module runs on is laid out, which decides which headers can be trusted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Layout {
    /// One account for everybody: nothing stamps identity and anyone could forge a header,
    /// so no actor is ever handed over.
    #[default]
    Local,
    /// Modules alone in their account, people importing `mesh.>` with `share: true`:
    /// nats-server stamps (and overwrites) `Nats-Request-Info` on people's requests.
    TwoAccount,
}

impl FromStr for Layout {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "local" => Ok(Layout::Local),
            "two-account" => Ok(Layout::TwoAccount),
            other => Err(format!(
                "layout {other:?} is unknown: expected local or two-account"
            )),
        }
    }
}

/// The part of nats-server's `Nats-Request-Info` the mesh uses.
#[derive(Deserialize)]
struct RequestInfo {
    acc: String,
    #[serde(default)]
    user: String,
}

/// Reads the actor of a request. Only the module runtime calls this.
///
/// - `Nats-Request-Info` present: the server stamped it crossing the people's import, so it
///   is the caller.
/// - absent: the request came from inside the module account, i.e. from a module, which
///   may name the person it acts for in `Mesh-On-Behalf-Of`.
/// - local layout: nothing is trusted and there is no actor.
pub fn actor_of(headers: Option<&HeaderMap>, layout: Layout) -> Option<Actor> {
    if layout == Layout::Local {
        return None;
    }
    let headers = headers?;
    if let Some(info) = headers.get(HEADER_REQUEST_INFO) {
        let info: RequestInfo = serde_json::from_str(info.as_str()).ok()?;
        if info.user.is_empty() {
            return None;
        }
        return Some(Actor {
            user: info.user,
            account: info.acc,
            relayed: false,
        });
    }
    let mut actor: Actor = headers.get(HEADER_ON_BEHALF_OF)?.as_str().parse().ok()?;
    actor.relayed = true;
    Some(actor)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.insert(*k, *v);
        }
        h
    }

    const INFO: &str = r#"{"acc":"PEOPLE","user":"alice","rtt":1,"kind":"Client"}"#;

    #[test]
    fn request_info_wins_over_on_behalf_of() {
        let h = headers(&[
            (HEADER_REQUEST_INFO, INFO),
            (HEADER_ON_BEHALF_OF, "bob@PEOPLE"),
        ]);
        let a = actor_of(Some(&h), Layout::TwoAccount).unwrap();
        assert_eq!(a.to_string(), "alice@PEOPLE");
        assert!(!a.relayed);
    }

    #[test]
    fn on_behalf_of_only_without_request_info() {
        let h = headers(&[(HEADER_ON_BEHALF_OF, "bob@PEOPLE")]);
        let a = actor_of(Some(&h), Layout::TwoAccount).unwrap();
        assert_eq!(a.to_string(), "bob@PEOPLE");
        assert!(a.relayed);
    }

    #[test]
    fn local_layout_trusts_nothing() {
        let h = headers(&[
            (HEADER_REQUEST_INFO, INFO),
            (HEADER_ON_BEHALF_OF, "bob@PEOPLE"),
        ]);
        assert_eq!(actor_of(Some(&h), Layout::Local), None);
        assert_eq!(actor_of(None, Layout::TwoAccount), None);
    }

    #[test]
    fn malformed_headers_give_no_actor() {
        for h in [
            headers(&[(HEADER_REQUEST_INFO, "not json")]),
            headers(&[(HEADER_ON_BEHALF_OF, "nobody")]),
            headers(&[(HEADER_ON_BEHALF_OF, "@PEOPLE")]),
        ] {
            assert_eq!(actor_of(Some(&h), Layout::TwoAccount), None);
        }
    }
}
