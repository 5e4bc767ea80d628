//! The audit read from NATS JWTs (operator mode): the account JWTs a full resolver keeps (its
//! directory, the configuration's preload, or a running server's `$SYS.REQ.CLAIMS.PACK`),
//! each checked against the operator before it counts, and the user JWTs the mesh issues
//! (credential files) for what each person and module may publish, made into the same
//! [`Model`] a configuration file gives. A JWT the operator did not sign, one changed after
//! signing, an expired one, an import whose activation its exporter did not sign, a revoked
//! user: none of them grants anything; each is said.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use serde::Serialize;

use super::model::{self, Model, Permissions};
use crate::jwt::{
    self, Account, Activation, Claims, ExportType, Operator, PermissionLimits, SigningKey,
    User as UserClaims,
};
use crate::natsconf::{Node, Value};
use mesh_core::permission::{Rule, covers, matches};

/// Why the JWTs could not be read.
#[derive(Debug, thiserror::Error)]
pub enum JwtsError {
    #[error("cannot read the operator's JWT {}", path.display())]
    OperatorFile {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("the operator given is not an operator's JWT")]
    Operator(#[source] jwt::JwtError),
    #[error("the operator given is a JWT of kind {0:?}, not an operator's")]
    NotOperator(String),
    #[error("cannot read the resolver's directory {}", path.display())]
    Dir {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot read the credential files in {}", path.display())]
    Users {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{at}: {what}")]
    Conf { at: String, what: String },
}

/// The operator the accounts are checked against: its key, the keys it signs with, and its
/// system account.
#[derive(Debug, Clone, Serialize)]
pub struct Trust {
    pub operator: String,
    pub name: String,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub signing_keys: Vec<String>,
    pub system_account: String,
}

impl Trust {
    /// The operator of JWT `token` (self-signed, as nsc and the mesh write it).
    pub fn read(token: &str) -> Result<Trust, JwtsError> {
        let claims: Claims<Operator> = Claims::verify(token).map_err(JwtsError::Operator)?;
        if claims.nats.generic.kind != "operator" {
            return Err(JwtsError::NotOperator(claims.nats.generic.kind));
        }
        if claims.iss != claims.sub && !claims.nats.signing_keys.contains(&claims.iss) {
            return Err(JwtsError::Operator(jwt::JwtError::Signature {
                issuer: claims.iss,
            }));
        }
        Ok(Trust {
            operator: claims.sub,
            name: claims.name,
            signing_keys: claims.nats.signing_keys,
            system_account: claims.nats.system_account,
        })
    }

    /// The operator as nats-server's `operator` takes it: the JWT itself, or a file holding
    /// it (alone, or between nsc's armour lines), relative to `base`.
    pub fn from_value(value: &str, base: &Path) -> Result<Trust, JwtsError> {
        let value = value.trim();
        if value.starts_with("eyJ") {
            return Trust::read(value);
        }
        let path = base.join(value);
        let text = std::fs::read_to_string(&path)
            .map_err(|source| JwtsError::OperatorFile { path, source })?;
        let token = text
            .lines()
            .map(str::trim)
            .find(|l| l.starts_with("eyJ"))
            .unwrap_or(text.trim());
        Trust::read(token)
    }

    fn signs_accounts(&self, key: &str) -> bool {
        key == self.operator || self.signing_keys.iter().any(|k| k == key)
    }
}

/// An account JWT as found: the key it is kept under, the token, and where.
#[derive(Debug, Clone)]
pub struct Found {
    pub key: String,
    pub jwt: String,
    pub from: String,
}

/// The account JWTs in a full resolver's directory (`<key>.jwt`, sharded or not; deleted
/// ones, renamed `.jwt.deleted`, left out).
pub fn read_dir(dir: &Path) -> Result<Vec<Found>, JwtsError> {
    let mut out = Vec::new();
    let mut folders = vec![dir.to_owned()];
    while let Some(folder) = folders.pop() {
        let entries = std::fs::read_dir(&folder).map_err(|source| JwtsError::Dir {
            path: folder.clone(),
            source,
        })?;
        for entry in entries.flatten() {
            let path = entry.path();
            if path.is_dir() {
                folders.push(path);
                continue;
            }
            let Some(key) = path
                .file_name()
                .and_then(|n| n.to_str())
                .and_then(|n| n.strip_suffix(".jwt"))
            else {
                continue;
            };
            let text = std::fs::read_to_string(&path).map_err(|source| JwtsError::Dir {
                path: path.clone(),
                source,
            })?;
            if text.trim().is_empty() {
                continue;
            }
            out.push(Found {
                key: key.to_owned(),
                jwt: text.trim().to_owned(),
                from: path.display().to_string(),
            });
        }
    }
    out.sort_by(|a, b| a.key.cmp(&b.key));
    Ok(out)
}

/// The account JWTs of a `$SYS.REQ.CLAIMS.PACK` answer's messages (`<key>|<jwt>` lines).
pub fn read_pack<'a>(messages: impl IntoIterator<Item = &'a str>, from: &str) -> Vec<Found> {
    messages
        .into_iter()
        .flat_map(str::lines)
        .filter_map(|line| line.split_once('|'))
        .map(|(key, token)| Found {
            key: key.trim().to_owned(),
            jwt: token.trim().to_owned(),
            from: from.to_owned(),
        })
        .collect()
}

/// Where an operator-mode configuration keeps its accounts.
#[derive(Debug, Clone)]
pub struct Configured {
    pub trust: Trust,
    /// The full (or cache) resolver's directory, when it has one.
    pub dir: Option<PathBuf>,
    /// The accounts preloaded in the configuration.
    pub preload: Vec<Found>,
}

/// The operator and the resolver configuration `root` names; `None` when it is not in
/// operator mode (no `operator`). Relative paths are taken from `base` (the configuration's
/// folder).
pub fn configured(root: &Node, base: &Path) -> Result<Option<Configured>, JwtsError> {
    let Some(op) = [
        "operator",
        "operators",
        "root_operators",
        "trusted_operators",
    ]
    .iter()
    .find_map(|k| root.get(k)) else {
        return Ok(None);
    };
    let value = match &op.value {
        Value::Str(s) => s.clone(),
        Value::Array(items) if items.len() == 1 => match items[0].as_str() {
            Some(s) => s.to_owned(),
            None => return Err(conf(op, "the operator is a JWT or a file holding one")),
        },
        _ => {
            return Err(conf(
                op,
                "the audit reads one operator: give it as a JWT or a file holding one",
            ));
        }
    };
    let trust = Trust::from_value(&value, base)?;
    let dir = match root
        .get("resolver")
        .or_else(|| root.get("account_resolver"))
    {
        Some(r) => match &r.value {
            Value::Map(_) => r
                .get("dir")
                .and_then(Node::as_str)
                .map(|d| base.join(d))
                .filter(|d| d.exists()),
            _ => None,
        },
        None => None,
    };
    let preload = root
        .get("resolver_preload")
        .map(|p| {
            p.entries()
                .iter()
                .filter_map(|(key, v)| {
                    Some(Found {
                        key: key.clone(),
                        jwt: v.as_str()?.to_owned(),
                        from: format!("{}'s resolver_preload", p.pos.file.display()),
                    })
                })
                .collect()
        })
        .unwrap_or_default();
    Ok(Some(Configured {
        trust,
        dir,
        preload,
    }))
}

fn conf(node: &Node, what: &str) -> JwtsError {
    JwtsError::Conf {
        at: node.pos.to_string(),
        what: what.to_owned(),
    }
}

/// Why a JWT does not count.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Why {
    /// Not a JWT, or its signature is not its issuer's (changed after signing).
    BadSignature,
    /// Signed by a key the operator (or the account) does not sign with.
    Untrusted,
    /// Kept under another key than the one it is about, or of another kind.
    Misplaced,
    Expired,
    /// A user the account revoked.
    Revoked,
    /// A scoped signing key's user that says what it may do itself (nats-server lets a
    /// scope's users say nothing), or whose scope's template fills in to no subject.
    Scope,
}

/// A JWT that does not count, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Refused {
    /// `account`, `user` or `activation`.
    pub what: &'static str,
    /// The key it is about (or the file's key).
    pub key: String,
    /// The name it claims, if it reads.
    pub name: String,
    pub from: String,
    pub why: Why,
    pub detail: String,
}

/// An account JWT the operator signed.
#[derive(Debug, Clone)]
pub struct Trusted {
    pub key: String,
    pub name: String,
    pub claims: Claims<Account>,
    pub from: String,
}

/// The accounts read: those that count, and those that do not.
#[derive(Debug, Clone)]
pub struct Accounts {
    pub trust: Trust,
    pub trusted: Vec<Trusted>,
    pub refused: Vec<Refused>,
}

impl Accounts {
    pub fn by_key(&self, key: &str) -> Option<&Trusted> {
        self.trusted.iter().find(|a| a.key == key)
    }

    /// Each trusted account's key → the name the audit gives it.
    pub fn names(&self) -> BTreeMap<String, String> {
        self.trusted
            .iter()
            .map(|a| (a.key.clone(), a.name.clone()))
            .collect()
    }

    /// The operator's system account.
    pub fn is_system(&self, a: &Trusted) -> bool {
        a.key == self.trust.system_account
    }
}

/// Whether an account answers an auth callout (its users sign people in).
pub fn is_callout(a: &Trusted) -> bool {
    a.claims
        .nats
        .authorization
        .as_ref()
        .is_some_and(|z| !z.auth_users.is_empty())
}

/// Whether an account was sent again empty (a module removed): no connection, nothing
/// exported or imported.
pub fn is_disabled(a: &Trusted) -> bool {
    let n = &a.claims.nats;
    n.limits.conn == 0 && n.limits.leaf == 0 && n.exports.is_empty() && n.imports.is_empty()
}

/// Checks every account JWT `found` against `trust`: signed by the operator (or one of its
/// signing keys), about the key it is kept under, an account's, not expired. Of several for
/// one key, the newest counts (as a resolver keeps the newest).
pub fn verify(trust: &Trust, found: Vec<Found>) -> Accounts {
    let now = jwt::now();
    let mut trusted: BTreeMap<String, Trusted> = BTreeMap::new();
    let mut refused = Vec::new();
    for f in found {
        let refuse = |why: Why, name: &str, detail: String| Refused {
            what: "account",
            key: f.key.clone(),
            name: name.to_owned(),
            from: f.from.clone(),
            why,
            detail,
        };
        let claims: Claims<Account> = match Claims::verify(&f.jwt) {
            Ok(c) => c,
            Err(e) => {
                refused.push(refuse(Why::BadSignature, "", e.to_string()));
                continue;
            }
        };
        if !trust.signs_accounts(&claims.iss) {
            refused.push(refuse(
                Why::Untrusted,
                &claims.name,
                format!(
                    "signed by {}, not by operator {} or its signing keys",
                    claims.iss, trust.operator
                ),
            ));
            continue;
        }
        if claims.nats.generic.kind != "account"
            || claims.sub != f.key
            || !claims.sub.starts_with('A')
        {
            refused.push(refuse(
                Why::Misplaced,
                &claims.name,
                format!(
                    "a JWT of kind {:?} about {}, kept as account {}",
                    claims.nats.generic.kind, claims.sub, f.key
                ),
            ));
            continue;
        }
        if claims.exp != 0 && claims.exp < now {
            refused.push(refuse(
                Why::Expired,
                &claims.name,
                format!("expired at {}", claims.exp),
            ));
            continue;
        }
        let newer = trusted
            .get(&f.key)
            .is_none_or(|held| held.claims.iat < claims.iat);
        if newer {
            trusted.insert(
                f.key.clone(),
                Trusted {
                    key: f.key.clone(),
                    name: claims.name.clone(),
                    claims,
                    from: f.from.clone(),
                },
            );
        }
    }
    let mut trusted: Vec<Trusted> = trusted.into_values().collect();
    // A name two accounts claim names neither: each is called by its key.
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    for a in &trusted {
        *seen.entry(a.name.clone()).or_default() += 1;
    }
    for a in &mut trusted {
        if a.name.is_empty() || seen[&a.name] > 1 {
            a.name = a.key.clone();
        }
    }
    trusted.sort_by(|a, b| a.name.cmp(&b.name));
    Accounts {
        trust: trust.clone(),
        trusted,
        refused,
    }
}

/// A user JWT found: the token and where.
#[derive(Debug, Clone)]
pub struct FoundUser {
    pub jwt: String,
    pub from: String,
}

/// The user JWTs in folder `dir`: each credential file's (`*.creds`, its seed left unread)
/// and each `*.jwt`.
pub fn read_users(dir: &Path) -> Result<Vec<FoundUser>, JwtsError> {
    let users = |source| JwtsError::Users {
        path: dir.to_owned(),
        source,
    };
    let mut out = Vec::new();
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(users)?
        .flatten()
        .map(|e| e.path())
        .collect();
    entries.sort();
    for path in entries {
        let ext = path
            .extension()
            .and_then(|e| e.to_str())
            .unwrap_or_default();
        if !matches!(ext, "creds" | "jwt") {
            continue;
        }
        let text = std::fs::read_to_string(&path).map_err(users)?;
        let token = if ext == "creds" {
            match jwt::read_creds(&text) {
                Ok((token, _seed)) => token,
                Err(_) => continue,
            }
        } else {
            text.trim().to_owned()
        };
        out.push(FoundUser {
            jwt: token,
            from: path.display().to_string(),
        });
    }
    Ok(out)
}

/// A user JWT that counts: issued by a trusted account, not revoked, not expired.
#[derive(Debug, Clone)]
pub struct TrustedUser {
    /// The account's key.
    pub account: String,
    /// Its JWT's claims; a scope's user's with what the scope's template gives them.
    pub claims: Claims<UserClaims>,
    pub from: String,
}

/// Checks each user JWT against the trusted accounts: signed by its account's key (or one of
/// its signing keys, naming it as `issuer_account`), not revoked there, not expired.
pub fn verify_users(
    accounts: &Accounts,
    found: Vec<FoundUser>,
) -> (Vec<TrustedUser>, Vec<Refused>) {
    let now = jwt::now();
    let mut trusted = Vec::new();
    let mut refused = Vec::new();
    for f in found {
        let refuse = |why: Why, key: &str, name: &str, detail: String| Refused {
            what: "user",
            key: key.to_owned(),
            name: name.to_owned(),
            from: f.from.clone(),
            why,
            detail,
        };
        let claims: Claims<UserClaims> = match Claims::verify(&f.jwt) {
            Ok(c) => c,
            Err(e) => {
                refused.push(refuse(Why::BadSignature, "", "", e.to_string()));
                continue;
            }
        };
        if claims.nats.generic.kind != "user" {
            refused.push(refuse(
                Why::Misplaced,
                &claims.sub,
                &claims.name,
                format!("a JWT of kind {:?}", claims.nats.generic.kind),
            ));
            continue;
        }
        let account_key = if claims.nats.issuer_account.is_empty() {
            claims.iss.clone()
        } else {
            claims.nats.issuer_account.clone()
        };
        let account = accounts
            .by_key(&account_key)
            .filter(|a| a.key == claims.iss || a.claims.nats.signing_key(&claims.iss).is_some());
        let Some(account) = account else {
            refused.push(refuse(
                Why::Untrusted,
                &claims.sub,
                &claims.name,
                format!(
                    "signed by {}, which is no trusted account's key or signing key",
                    claims.iss
                ),
            ));
            continue;
        };
        let revocations = &account.claims.nats.revocations;
        let revoked = [claims.sub.as_str(), "*"]
            .iter()
            .filter_map(|k| revocations.get(*k))
            .any(|until| claims.iat <= *until);
        if revoked {
            refused.push(refuse(
                Why::Revoked,
                &claims.sub,
                &claims.name,
                format!("revoked in account {}", account.name),
            ));
            continue;
        }
        if claims.exp != 0 && claims.exp < now {
            refused.push(refuse(
                Why::Expired,
                &claims.sub,
                &claims.name,
                format!("expired at {}", claims.exp),
            ));
            continue;
        }
        // A scope's user may do what its template says, filled in for them, and nothing of
        // its own.
        let mut claims = claims;
        if let Some(scope) = account
            .claims
            .nats
            .signing_key(&claims.iss)
            .and_then(SigningKey::scope)
        {
            if claims.nats.limits != PermissionLimits::none() {
                refused.push(refuse(
                    Why::Scope,
                    &claims.sub,
                    &claims.name,
                    format!(
                        "signed by scope {} of account {}, yet it says what it may do itself",
                        scope.role, account.name
                    ),
                ));
                continue;
            }
            match scope.template.filled(
                jwt::Who {
                    name: &claims.name,
                    key: &claims.sub,
                    tags: &claims.nats.generic.tags,
                },
                jwt::Who {
                    name: &account.claims.name,
                    key: &account.key,
                    tags: &account.claims.nats.generic.tags,
                },
            ) {
                Ok(limits) => claims.nats.limits = limits,
                Err(e) => {
                    refused.push(refuse(
                        Why::Scope,
                        &claims.sub,
                        &claims.name,
                        format!("scope {} of account {}: {e}", scope.role, account.name),
                    ));
                    continue;
                }
            }
        }
        trusted.push(TrustedUser {
            account: account.key.clone(),
            claims,
            from: f.from,
        });
    }
    (trusted, refused)
}

/// Whether activation `token` lets `importer` import `subject` from `exporter`: signed by
/// the exporter's key (or a signing key of its, naming it), about the importer, covering the
/// subject, not expired.
fn activation_holds(token: &str, exporter: &Trusted, importer: &str, subject: &str) -> bool {
    let Ok(claims) = Claims::<Activation>::verify(token) else {
        return false;
    };
    let by_exporter = claims.iss == exporter.key
        || (exporter.claims.nats.signing_key(&claims.iss).is_some()
            && claims.nats.issuer_account == exporter.key);
    by_exporter
        && claims.nats.generic.kind == "activation"
        && claims.sub == importer
        && (claims.nats.subject == subject || covers(&claims.nats.subject, subject))
        && (claims.exp == 0 || claims.exp >= jwt::now())
}

/// A JWT permission as the server applies it: an empty allow list allows everything.
fn rule(p: &jwt::Permission) -> Rule {
    Rule {
        allow: (!p.allow.is_empty()).then(|| p.allow.clone()),
        deny: p.deny.clone(),
    }
}

/// The model the accounts and users give: every trusted account but the system account and
/// an auth callout's (who may call a tool is theirs to say in no way), their service exports
/// and imports, and the users. An import of an export that asks for an activation counts only
/// with one its exporter signed; the refused ones are returned. `base` lends its routes and
/// ports (a configuration's), when there is one.
pub fn model(
    accounts: &Accounts,
    users: &[TrustedUser],
    base: Option<&Model>,
) -> (Model, Vec<Refused>) {
    let names = accounts.names();
    let name_of = |key: &str| names.get(key).cloned().unwrap_or_else(|| key.to_owned());
    let mut refused = Vec::new();
    // Who may import each export asking for an activation: exporter → subject → importers.
    let mut activated: BTreeMap<String, BTreeMap<String, BTreeSet<String>>> = BTreeMap::new();
    let mut imports: BTreeMap<String, Vec<model::Import>> = BTreeMap::new();
    let counted = |a: &&Trusted| !accounts.is_system(a) && !is_callout(a);
    for a in accounts.trusted.iter().filter(counted) {
        for i in &a.claims.nats.imports {
            if i.kind != ExportType::Service {
                continue;
            }
            if let Some(exporter) = accounts.by_key(&i.account) {
                let asks = exporter.claims.nats.exports.iter().find(|e| {
                    e.kind == ExportType::Service
                        && e.token_req
                        && (matches(&e.subject, &i.subject) || covers(&e.subject, &i.subject))
                });
                if let Some(export) = asks {
                    if !activation_holds(&i.token, exporter, &a.key, &i.subject) {
                        refused.push(Refused {
                            what: "activation",
                            key: a.key.clone(),
                            name: a.name.clone(),
                            from: a.from.clone(),
                            why: if i.token.is_empty() {
                                Why::Untrusted
                            } else {
                                Why::BadSignature
                            },
                            detail: format!(
                                "{}'s import of {} from {} carries no activation {} signed",
                                a.name, i.subject, exporter.name, exporter.name
                            ),
                        });
                        continue;
                    }
                    activated
                        .entry(exporter.key.clone())
                        .or_default()
                        .entry(export.subject.clone())
                        .or_default()
                        .insert(a.name.clone());
                }
            }
            imports
                .entry(a.key.clone())
                .or_default()
                .push(model::Import {
                    account: name_of(&i.account),
                    subject: i.subject.clone(),
                    to: (!i.local_subject.is_empty()).then(|| i.local_subject.clone()),
                    share: i.share,
                });
        }
    }
    let mut out = Vec::new();
    for a in accounts.trusted.iter().filter(counted) {
        let exports = a
            .claims
            .nats
            .exports
            .iter()
            .filter(|e| e.kind == ExportType::Service)
            .map(|e| model::Export {
                subject: e.subject.clone(),
                accounts: e.token_req.then(|| {
                    activated
                        .get(&a.key)
                        .and_then(|s| s.get(&e.subject))
                        .map(|s| s.iter().cloned().collect())
                        .unwrap_or_default()
                }),
            })
            .collect();
        let mut account_users: Vec<model::User> = users
            .iter()
            .filter(|u| u.account == a.key)
            .map(|u| model::User {
                name: if u.claims.name.is_empty() {
                    u.claims.sub.clone()
                } else {
                    u.claims.name.clone()
                },
                account: a.name.clone(),
                permissions: Permissions {
                    publish: rule(&u.claims.nats.limits.permissions.r#pub),
                    subscribe: rule(&u.claims.nats.limits.permissions.sub),
                    allow_responses: u.claims.nats.limits.permissions.resp.is_some(),
                },
            })
            .collect();
        account_users.sort_by(|x, y| x.name.cmp(&y.name));
        out.push(model::Account {
            name: a.name.clone(),
            users: account_users,
            exports,
            imports: imports.remove(&a.key).unwrap_or_default(),
        });
    }
    (
        Model {
            accounts: out,
            open_routes: base.and_then(|b| b.open_routes.clone()),
            plaintext: base.map(|b| b.plaintext.clone()).unwrap_or_default(),
        },
        refused,
    )
}

/// One account as the JWTs have it, for the report.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct AccountSummary {
    pub name: String,
    pub key: String,
    /// `system`, `callout`, `disabled` (sent again empty) or `mesh`.
    pub role: &'static str,
    pub users: usize,
    pub exports: usize,
    pub imports: usize,
    /// Connections, subscriptions, bytes in flight and payload; -1 is no limit.
    pub conn: i64,
    pub subs: i64,
    pub data: i64,
    pub payload: i64,
    pub jetstream: bool,
}

/// The accounts for the report, by name.
pub fn summaries(accounts: &Accounts, users: &[TrustedUser]) -> Vec<AccountSummary> {
    accounts
        .trusted
        .iter()
        .map(|a| {
            let n = &a.claims.nats;
            AccountSummary {
                name: a.name.clone(),
                key: a.key.clone(),
                role: if accounts.is_system(a) {
                    "system"
                } else if is_callout(a) {
                    "callout"
                } else if is_disabled(a) {
                    "disabled"
                } else {
                    "mesh"
                },
                users: users.iter().filter(|u| u.account == a.key).count(),
                exports: n.exports.len(),
                imports: n.imports.len(),
                conn: n.limits.conn,
                subs: n.limits.subs,
                data: n.limits.data,
                payload: n.limits.payload,
                jetstream: n.limits.jetstream.enabled(),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use nkeys::KeyPair;

    fn signed(operator: &KeyPair, account: &KeyPair, name: &str) -> Found {
        Found {
            key: account.public_key(),
            jwt: Claims::new(account.public_key(), name, Account::default())
                .sign(operator)
                .unwrap(),
            from: format!("{name}.jwt"),
        }
    }

    fn trust(operator: &KeyPair) -> Trust {
        let token = Claims::new(operator.public_key(), "op", Operator::default())
            .sign(operator)
            .unwrap();
        Trust::read(&token).unwrap()
    }

    #[test]
    fn only_the_operators_accounts_count() {
        let operator = KeyPair::new_operator();
        let ours = KeyPair::new_account();
        let theirs = KeyPair::new_account();
        let moved = KeyPair::new_account();
        let mut misplaced = signed(&operator, &moved, "MOVED");
        misplaced.key = KeyPair::new_account().public_key();
        let mut changed = signed(&operator, &KeyPair::new_account(), "CHANGED");
        // The claims swapped for another account's, the signature kept.
        let other = signed(&operator, &KeyPair::new_account(), "OTHER").jwt;
        let parts: Vec<&str> = changed.jwt.split('.').collect();
        let body = other.split('.').nth(1).unwrap();
        changed.jwt = format!("{}.{body}.{}", parts[0], parts[2]);
        let read = verify(
            &trust(&operator),
            vec![
                signed(&operator, &ours, "OURS"),
                signed(&KeyPair::new_operator(), &theirs, "THEIRS"),
                misplaced,
                changed,
            ],
        );
        let names: Vec<&str> = read.trusted.iter().map(|a| a.name.as_str()).collect();
        assert_eq!(names, ["OURS"]);
        let why: BTreeMap<&str, Why> = read
            .refused
            .iter()
            .map(|r| (r.from.as_str(), r.why))
            .collect();
        assert_eq!(why["THEIRS.jwt"], Why::Untrusted);
        assert_eq!(why["MOVED.jwt"], Why::Misplaced);
        assert_eq!(why["CHANGED.jwt"], Why::BadSignature);
    }

    #[test]
    fn an_import_counts_only_with_the_exporter_s_activation() {
        use crate::jwt::{Export, Import};
        let operator = KeyPair::new_operator();
        let (exporter, forger, good, bad) = (
            KeyPair::new_account(),
            KeyPair::new_account(),
            KeyPair::new_account(),
            KeyPair::new_account(),
        );
        let account = |key: &KeyPair, name: &str, nats: Account| Found {
            key: key.public_key(),
            jwt: Claims::new(key.public_key(), name, nats)
                .sign(&operator)
                .unwrap(),
            from: name.to_owned(),
        };
        let mut e = Account::default();
        e.exports.push(Export {
            name: String::new(),
            subject: "mesh.echo.>".into(),
            kind: ExportType::Service,
            token_req: true,
            response_type: None,
            response_threshold: None,
            service_latency: None,
            allow_trace: false,
        });
        let importing = |who: &KeyPair, signer: &KeyPair| {
            let token = Claims::new(
                who.public_key(),
                "",
                Activation::new("mesh.echo.>", ExportType::Service),
            )
            .sign(signer)
            .unwrap();
            let mut a = Account::default();
            a.imports.push(Import {
                name: String::new(),
                subject: "mesh.echo.>".into(),
                account: exporter.public_key(),
                token,
                local_subject: String::new(),
                kind: ExportType::Service,
                share: true,
                allow_trace: false,
            });
            a
        };
        let accounts = verify(
            &trust(&operator),
            vec![
                account(&exporter, "E", e),
                account(&good, "GOOD", importing(&good, &exporter)),
                // An activation signed by an account that is not the exporter.
                account(&bad, "BAD", importing(&bad, &forger)),
            ],
        );
        let user = |account: &KeyPair, name: &str| TrustedUser {
            account: account.public_key(),
            claims: Claims::new(
                KeyPair::new_user().public_key(),
                name,
                UserClaims::default(),
            ),
            from: String::new(),
        };
        let (model, refused) = model(
            &accounts,
            &[user(&good, "g"), user(&bad, "b"), user(&exporter, "e")],
            None,
        );
        assert!(model.allows("g@GOOD", "mesh.echo.echo"));
        assert!(!model.allows("b@BAD", "mesh.echo.echo"));
        assert_eq!(refused.len(), 1, "{refused:?}");
        assert_eq!(
            (refused[0].what, refused[0].name.as_str()),
            ("activation", "BAD")
        );
    }

    #[test]
    fn a_revoked_user_and_one_another_key_signed_count_not() {
        let operator = KeyPair::new_operator();
        let account = KeyPair::new_account();
        let (kept, revoked) = (KeyPair::new_user(), KeyPair::new_user());
        let mut claims = Account::default();
        claims
            .revocations
            .insert(revoked.public_key(), jwt::now() + 60);
        let accounts = verify(
            &trust(&operator),
            vec![Found {
                key: account.public_key(),
                jwt: Claims::new(account.public_key(), "A", claims)
                    .sign(&operator)
                    .unwrap(),
                from: "A".into(),
            }],
        );
        let user = |key: &KeyPair, name: &str, signer: &KeyPair| FoundUser {
            jwt: Claims::new(key.public_key(), name, UserClaims::default())
                .sign(signer)
                .unwrap(),
            from: name.to_owned(),
        };
        let (trusted, refused) = verify_users(
            &accounts,
            vec![
                user(&kept, "kept", &account),
                user(&revoked, "revoked", &account),
                user(&KeyPair::new_user(), "stranger", &KeyPair::new_account()),
            ],
        );
        let names: Vec<&str> = trusted.iter().map(|u| u.claims.name.as_str()).collect();
        assert_eq!(names, ["kept"]);
        let why: Vec<(&str, Why)> = refused.iter().map(|r| (r.from.as_str(), r.why)).collect();
        assert_eq!(
            why,
            [("revoked", Why::Revoked), ("stranger", Why::Untrusted)]
        );
    }

    /// A scope's user may do what the scope's template says, filled in for them; one that
    /// says what it may do itself is refused, as nats-server refuses it at connect.
    #[test]
    fn a_scope_s_users_do_what_its_template_says() {
        let operator = KeyPair::new_operator();
        let account = KeyPair::new_account();
        let scope_key = KeyPair::new_account();
        let mut template = PermissionLimits::default();
        template.permissions.sub.allow = vec!["_INBOX.{{name()}}.>".into()];
        template.permissions.r#pub.allow = vec!["mesh.echo.>".into()];
        let claims = Account {
            signing_keys: vec![SigningKey::Scoped(Box::new(jwt::UserScope::new(
                scope_key.public_key(),
                "people",
                template,
            )))],
            ..Account::default()
        };
        let accounts = verify(
            &trust(&operator),
            vec![Found {
                key: account.public_key(),
                jwt: Claims::new(account.public_key(), "PEOPLE", claims)
                    .sign(&operator)
                    .unwrap(),
                from: "PEOPLE".into(),
            }],
        );
        let user = |name: &str, nats: UserClaims| FoundUser {
            jwt: Claims::new(KeyPair::new_user().public_key(), name, nats)
                .sign(&scope_key)
                .unwrap(),
            from: name.to_owned(),
        };
        let mut wider = UserClaims::scoped(account.public_key());
        wider.limits.permissions.r#pub.allow = vec![">".into()];
        let (trusted, refused) = verify_users(
            &accounts,
            vec![
                user("ann", UserClaims::scoped(account.public_key())),
                user("mallory", wider),
            ],
        );
        assert_eq!(trusted.len(), 1, "{refused:?}");
        let ann = &trusted[0].claims.nats.limits.permissions;
        assert_eq!(ann.sub.allow, ["_INBOX.ann.>"]);
        assert_eq!(ann.r#pub.allow, ["mesh.echo.>"]);
        let why: Vec<(&str, Why)> = refused.iter().map(|r| (r.from.as_str(), r.why)).collect();
        assert_eq!(why, [("mallory", Why::Scope)]);
    }

    #[test]
    fn a_pack_reads_as_a_directory_does() {
        let found = read_pack(["AAA|x.y.z\nBBB|a.b.c", "", "CCC|d.e.f"], "pack");
        let keys: Vec<&str> = found.iter().map(|f| f.key.as_str()).collect();
        assert_eq!(keys, ["AAA", "BBB", "CCC"]);
        assert_eq!(found[1].jwt, "a.b.c");
    }
}
