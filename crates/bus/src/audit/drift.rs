//! Whether the accounts a server runs are what the grants file would write: the grants
//! rendered and signed as `mesh up` and `mesh accounts --auth operator` sign them, compared
//! account by account (by name) on their claims' content — exports, imports, limits — never on
//! the JWTs' bytes (each signing has its own `iat`, `jti` and keys).

use std::collections::BTreeMap;
use std::path::Path;

use serde::Serialize;
use serde_json::Value;

use super::jwts::{self, Accounts};
use crate::grants::Grants;
use crate::jwt::{Account, Claims};
use crate::operator::{self, KeyRing, OperatorError, Signed};

/// Why the grants could not be signed to compare.
#[derive(Debug, thiserror::Error)]
pub enum DriftError {
    #[error("cannot read the grants' layout")]
    Layout(#[source] crate::natsconf::ConfError),
    #[error("cannot sign the grants' layout")]
    Sign(#[source] OperatorError),
}

/// One account's verdict.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Drift {
    pub account: String,
    /// `equal`, `differs`, `missing` (the grants write it, the server has none), `extra`
    /// (the server has it, the grants write none), `disabled` (sent again empty: a module
    /// removed), or `not_from_grants` (the system account, an auth callout's).
    pub verdict: &'static str,
    /// What differs: `exports`, `imports`, `limits`, `users` (the scopes that give its users
    /// their permissions, whom each was made for, and any key that signs users as it likes).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub what: Vec<&'static str>,
}

/// The accounts the grants file would write: its layout (with the tools each module is known
/// to list, when `learned` is the state directory that keeps them) signed with keys of its
/// own — only the claims' content is compared.
pub fn expected(grants: &Grants, learned: Option<&Path>) -> Result<Signed, DriftError> {
    let filled = match learned {
        Some(dir) => crate::learned::Learned::read(dir).fill(grants),
        None => grants.clone(),
    };
    let rendered = filled
        .render_with(-1, Path::new("jetstream"), &BTreeMap::new())
        .config;
    let root =
        crate::natsconf::parse_str(&rendered, Path::new("grants")).map_err(DriftError::Layout)?;
    operator::sign(&root, &mut KeyRing::in_memory()).map_err(DriftError::Sign)
}

/// Account `claims`' content with keys named (by `names`), activations left out and signing
/// keys told by what they let sign: what is compared.
fn shape(claims: &Account, names: &BTreeMap<String, String>) -> [Value; 4] {
    let sorted = |mut items: Vec<Value>| {
        items.sort_by_key(|v| v.to_string());
        Value::Array(items)
    };
    let exports = claims
        .exports
        .iter()
        .map(|e| serde_json::to_value(e).expect("an export serialises"))
        .collect();
    let imports = claims
        .imports
        .iter()
        .map(|i| {
            let mut v = serde_json::to_value(i).expect("an import serialises");
            v["account"] = Value::String(names.get(&i.account).cloned().unwrap_or_default());
            // Each signing makes its own; whether one is there is what the grants say.
            v["token"] = Value::Bool(!i.token.is_empty());
            v
        })
        .collect();
    // A scope's key is each signing's own; what it grants, and to whom (the account's
    // description names each scope's users), is the grants'.
    let scopes = claims
        .signing_keys
        .iter()
        .filter_map(|k| k.scope())
        .map(|s| serde_json::to_value(&s.template).expect("a template serialises"))
        .collect();
    // A bare key signs users that say what they may do themselves, whatever it likes: the
    // grants make none but an auth callout's (see `compare`).
    let bare = claims
        .signing_keys
        .iter()
        .filter(|k| k.scope().is_none())
        .count();
    [
        sorted(exports),
        sorted(imports),
        serde_json::to_value(&claims.limits).expect("limits serialise"),
        serde_json::json!({"scopes": sorted(scopes), "for": claims.description, "bare": bare}),
    ]
}

/// Each account of `expected` and of `live`, equal or how not.
pub fn compare(expected: &Signed, live: &Accounts) -> Vec<Drift> {
    let expected_names: BTreeMap<String, String> = expected
        .accounts
        .iter()
        .map(|a| (a.key.clone(), a.name.clone()))
        .collect();
    let live_names = live.names();
    // The accounts an auth callout places people in list its signing key, bare, which the
    // grants signed here (keys of their own, none delegated) do not.
    let placed: Vec<&str> = live
        .trusted
        .iter()
        .filter(|a| jwts::is_callout(a))
        .filter_map(|a| a.claims.nats.authorization.as_ref())
        .flat_map(|z| z.allowed_accounts.iter().map(String::as_str))
        .collect();
    let mut out = Vec::new();
    let mut wanted = BTreeMap::new();
    for a in &expected.accounts {
        if a.name == operator::SYSTEM_ACCOUNT {
            continue;
        }
        let claims: Claims<Account> = Claims::verify(&a.jwt).expect("what was signed reads");
        wanted.insert(a.name.clone(), claims.nats);
    }
    for a in &live.trusted {
        let role = if live.is_system(a) || jwts::is_callout(a) {
            Some("not_from_grants")
        } else if jwts::is_disabled(a) {
            Some("disabled")
        } else {
            None
        };
        if let Some(verdict) = role {
            out.push(Drift {
                account: a.name.clone(),
                verdict,
                what: Vec::new(),
            });
            wanted.remove(&a.name);
            continue;
        }
        let Some(want) = wanted.remove(&a.name) else {
            out.push(Drift {
                account: a.name.clone(),
                verdict: "extra",
                what: Vec::new(),
            });
            continue;
        };
        let have = shape(&a.claims.nats, &live_names);
        let mut want = shape(&want, &expected_names);
        if placed.contains(&a.key.as_str()) {
            want[3]["bare"] = Value::from(1);
        }
        let what: Vec<&'static str> = ["exports", "imports", "limits", "users"]
            .into_iter()
            .zip(have.iter().zip(&want))
            .filter(|(_, (h, w))| h != w)
            .map(|(name, _)| name)
            .collect();
        out.push(Drift {
            account: a.name.clone(),
            verdict: if what.is_empty() { "equal" } else { "differs" },
            what,
        });
    }
    for name in wanted.into_keys() {
        out.push(Drift {
            account: name,
            verdict: "missing",
            what: Vec::new(),
        });
    }
    out.sort_by(|a, b| a.account.cmp(&b.account));
    out
}
