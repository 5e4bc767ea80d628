//! A user's claims: what they may publish and subscribe, how they may connect, and the
//! account that issued them when a signing key did.

use serde::{Deserialize, Serialize};

use super::{Generic, Kind};

/// Subjects allowed and denied.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Permission {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub allow: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub deny: Vec<String>,
}

impl Permission {
    fn is_empty(&self) -> bool {
        self.allow.is_empty() && self.deny.is_empty()
    }
}

/// What a user may publish and subscribe to.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Permissions {
    #[serde(default, skip_serializing_if = "Permission::is_empty")]
    pub r#pub: Permission,
    #[serde(default, skip_serializing_if = "Permission::is_empty")]
    pub sub: Permission,
}

/// What a user may do (nats-io/jwt's `UserPermissionLimits`): a user's own, or a scoped
/// signing key's template for every user it signs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PermissionLimits {
    #[serde(flatten)]
    pub permissions: Permissions,
    /// No limit at -1; 0 (left out) only in a scoped user's JWT, which must say nothing.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub subs: i64,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub data: i64,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub payload: i64,
    /// The JWT alone logs in (no nonce signed): the auth callout's sentinel user.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub bearer_token: bool,
    /// `STANDARD`, `LEAFNODE`, `WEBSOCKET`, …; empty is any.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub allowed_connection_types: Vec<String>,
}

fn is_zero(n: &i64) -> bool {
    *n == 0
}

impl Default for PermissionLimits {
    /// Anything, without limit (as nats-io/jwt's new user and new scope).
    fn default() -> PermissionLimits {
        PermissionLimits {
            permissions: Permissions::default(),
            subs: super::account::NO_LIMIT,
            data: super::account::NO_LIMIT,
            payload: super::account::NO_LIMIT,
            bearer_token: false,
            allowed_connection_types: Vec::new(),
        }
    }
}

impl PermissionLimits {
    /// Nothing at all: what a scoped user's JWT must say (the scope says the rest).
    pub fn none() -> PermissionLimits {
        PermissionLimits {
            subs: 0,
            data: 0,
            payload: 0,
            ..PermissionLimits::default()
        }
    }

    /// This template with `{{name()}}` and `{{subject()}}` filled in by `user`'s name and
    /// key, and `{{account-name()}}`, `{{account-subject()}}` by its account's, as
    /// nats-server fills them when the user connects: an allow subject that comes out
    /// invalid is left out (and an allow list left empty denies everything), a deny subject
    /// that does is an error, as is an operation nats-server does not know. Tags are not
    /// read here: a subject that names one is treated as the server treats a missing tag.
    pub fn filled(
        &self,
        user_name: &str,
        user_key: &str,
        account_name: &str,
        account_key: &str,
    ) -> Result<PermissionLimits, TemplateError> {
        let fill = |list: &[String], strict: bool| -> Result<Vec<String>, TemplateError> {
            let mut out = Vec::new();
            for subject in list {
                let mut filled = String::new();
                let mut rest = subject.as_str();
                let mut valid = true;
                while let Some(open) = rest.find("{{") {
                    let Some(close) = rest[open..].find("}}") else {
                        break;
                    };
                    filled.push_str(&rest[..open]);
                    let op = rest[open + 2..open + close].trim();
                    let value = match op.to_ascii_lowercase().as_str() {
                        "name()" => user_name,
                        "subject()" => user_key,
                        "account-name()" => account_name,
                        "account-subject()" => account_key,
                        o if o.starts_with("tag(") || o.starts_with("account-tag(") => {
                            valid = false;
                            " "
                        }
                        _ => {
                            return Err(TemplateError {
                                subject: subject.clone(),
                                why: format!("{op:?} is no template operation nats-server knows"),
                            });
                        }
                    };
                    filled.push_str(value);
                    rest = &rest[open + close + 2..];
                }
                filled.push_str(rest);
                if valid && is_valid_subject(&filled) {
                    out.push(filled);
                } else if strict {
                    return Err(TemplateError {
                        subject: subject.clone(),
                        why: format!("it makes {filled:?}, not a subject"),
                    });
                }
            }
            Ok(out)
        };
        let mut out = self.clone();
        for (from, to) in [
            (&self.permissions.r#pub, &mut out.permissions.r#pub),
            (&self.permissions.sub, &mut out.permissions.sub),
        ] {
            to.allow = fill(&from.allow, false)?;
            to.deny = fill(&from.deny, true)?;
            if !from.allow.is_empty() && to.allow.is_empty() {
                to.deny.push(">".to_owned());
            }
        }
        Ok(out)
    }
}

/// A subject as nats-server's `IsValidSubject` takes it: no token empty or holding white
/// space, nothing after a lone `>`.
fn is_valid_subject(subject: &str) -> bool {
    let mut tokens = subject.split('.').peekable();
    !subject.is_empty()
        && std::iter::from_fn(|| tokens.next().map(|t| (t, tokens.peek().is_none()))).all(
            |(t, last)| {
                !t.is_empty() && !t.contains(['\t', '\n', '\x0c', '\r', ' ']) && (t != ">" || last)
            },
        )
}

/// A scope's template that gives a user no subject nats-server would take.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the template subject {subject:?} does not fill in: {why}")]
pub struct TemplateError {
    pub subject: String,
    pub why: String,
}

/// A user of an account.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct User {
    #[serde(flatten)]
    pub limits: PermissionLimits,
    /// The account whose signing key issued the user (its own key leaves it empty).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub issuer_account: String,
    #[serde(flatten)]
    pub generic: Generic,
}

impl Kind for User {
    const TYPE: &'static str = "user";
}

impl Default for User {
    fn default() -> User {
        User {
            limits: PermissionLimits::default(),
            issuer_account: String::new(),
            generic: Generic::of::<User>(),
        }
    }
}

impl User {
    /// A user a scoped signing key of `account` signs: nothing of its own.
    pub fn scoped(account: impl Into<String>) -> User {
        User {
            limits: PermissionLimits::none(),
            issuer_account: account.into(),
            generic: Generic::of::<User>(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits(allow: &[&str], deny: &[&str]) -> PermissionLimits {
        let mut l = PermissionLimits::default();
        l.permissions.sub = Permission {
            allow: allow.iter().map(|s| s.to_string()).collect(),
            deny: deny.iter().map(|s| s.to_string()).collect(),
        };
        l
    }

    #[test]
    fn a_template_fills_in_as_nats_server_does() {
        let t = limits(
            &[
                "_INBOX.{{name()}}.>",
                "k.{{ Subject() }}",
                "a.{{account-name()}}.{{account-subject()}}",
            ],
            &["x.{{name()}}"],
        );
        let f = t.filled("ann", "UKEY", "PEOPLE", "AKEY").unwrap();
        assert_eq!(
            f.permissions.sub.allow,
            ["_INBOX.ann.>", "k.UKEY", "a.PEOPLE.AKEY"]
        );
        assert_eq!(f.permissions.sub.deny, ["x.ann"]);
    }

    #[test]
    fn a_template_that_makes_no_subject_grants_nothing() {
        // A name with a space makes no subject: the allow list comes out empty, which
        // nats-server turns into deny-all rather than allow-all.
        let t = limits(&["_INBOX.{{name()}}.>"], &[]);
        let f = t.filled("a b", "U", "P", "A").unwrap();
        assert!(f.permissions.sub.allow.is_empty());
        assert_eq!(f.permissions.sub.deny, [">"]);
        // In a deny list it is an error, as is an unknown operation or a tag.
        assert!(
            limits(&[], &["x.{{name()}}"])
                .filled("a b", "U", "P", "A")
                .is_err()
        );
        assert!(
            limits(&["x.{{nope()}}"], &[])
                .filled("a", "U", "P", "A")
                .is_err()
        );
        let tagged = limits(&["x.{{tag(team)}}", "y"], &[]).filled("a", "U", "P", "A");
        assert_eq!(tagged.unwrap().permissions.sub.allow, ["y"]);
    }

    #[test]
    fn a_scoped_user_says_nothing_of_its_own() {
        let json = serde_json::to_value(User::scoped("AKEY")).unwrap();
        assert_eq!(
            json,
            serde_json::json!({"issuer_account": "AKEY", "type": "user", "version": 2})
        );
    }
}
