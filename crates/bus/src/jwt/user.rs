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
    /// Set, the user may publish to the reply subject of each request it receives, whatever
    /// its publish permissions say.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resp: Option<ResponsePermission>,
}

/// How many answers to a request, and for how long, a user allowed to answer may send.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ResponsePermission {
    #[serde(default)]
    pub max: i64,
    /// Nanoseconds.
    #[serde(default)]
    pub ttl: i64,
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
    /// The addresses (CIDRs) the user may connect from, and the times of day it may: the
    /// mesh writes none, a site's own may; kept so a scope's user that says them is known
    /// to say something.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub src: Option<serde_json::Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub times: Option<serde_json::Value>,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub times_location: String,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub proxy_required: bool,
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
            src: None,
            times: None,
            times_location: String::new(),
            proxy_required: false,
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

    /// This template filled in for `user` of `account` as nats-server fills it when the user
    /// connects (`processUserPermissionsTemplate`): `{{name()}}`, `{{subject()}}` by the
    /// user's name and key, `{{account-name()}}`, `{{account-subject()}}` by its account's,
    /// `{{tag(x)}}` and `{{account-tag(x)}}` by each value of the user's or account's tags
    /// `x:<value>` (one subject per value, and per combination of values). A list with no
    /// template in it is left as it is; in one with, a subject that comes out invalid is
    /// left out of an allow list (and an allow list left empty denies everything) and an
    /// error in a deny list, as is an operation nats-server does not know.
    pub fn filled(
        &self,
        user: Who<'_>,
        account: Who<'_>,
    ) -> Result<PermissionLimits, TemplateError> {
        let mut out = self.clone();
        for (from, to) in [
            (&self.permissions.r#pub, &mut out.permissions.r#pub),
            (&self.permissions.sub, &mut out.permissions.sub),
        ] {
            to.allow = fill_list(&from.allow, false, user, account)?;
            to.deny = fill_list(&from.deny, true, user, account)?;
            if !from.allow.is_empty() && to.allow.is_empty() && !to.deny.iter().any(|d| d == ">") {
                to.deny.push(">".to_owned());
            }
        }
        Ok(out)
    }
}

/// Whom a template is filled in for: a user, or its account.
#[derive(Debug, Clone, Copy)]
pub struct Who<'a> {
    pub name: &'a str,
    /// The public key.
    pub key: &'a str,
    pub tags: &'a [String],
}

/// The most subjects nats-server lets one template list make (its tags' combinations).
const MAX_EXPANSIONS: usize = 4096;

/// Each `{{…}}` of `subject` as nats-server's template pattern (`{{[^}]+}}`) finds them.
fn mustaches(subject: &str) -> Vec<&str> {
    let b = subject.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i + 1 < b.len() {
        if b[i] == b'{' && b[i + 1] == b'{' {
            let mut j = i + 2;
            while j < b.len() && b[j] != b'}' {
                j += 1;
            }
            if j > i + 2 && j + 1 < b.len() && b[j + 1] == b'}' {
                out.push(&subject[i..j + 2]);
                i = j + 2;
                continue;
            }
        }
        i += 1;
    }
    out
}

/// Whether `op` is `name` but for case, as Go's `strings.EqualFold` has it (which takes `ſ`
/// for `s` and the Kelvin sign for `k`, the only letters beyond ASCII folding to one in it).
fn folds_to(op: &str, name: &str) -> bool {
    let fold = |c: char| match c {
        '\u{17f}' => 's',
        '\u{212a}' => 'k',
        c => c.to_ascii_lowercase(),
    };
    op.chars().map(fold).eq(name.chars().map(fold))
}

/// `tag(x)` → (false, `x`), `account-tag(x)` → (true, `x`), as nats-server reads them (the
/// name case-blind, its prefix taken off as written).
fn tag_of(op: &str) -> Option<(bool, &str)> {
    let is = |name: &str| {
        op.len() >= name.len()
            && op.is_char_boundary(name.len())
            && op[..name.len()].eq_ignore_ascii_case(name)
            && op.ends_with(')')
    };
    let inner = |name: &'static str| {
        let v = op.strip_prefix(name).unwrap_or(op);
        v.strip_suffix(')').unwrap_or(v)
    };
    if is("tag(") {
        Some((false, inner("tag(")))
    } else if is("account-tag(") {
        Some((true, inner("account-tag(")))
    } else {
        None
    }
}

/// One list of a template filled in (nats-server's `applyTemplate`).
fn fill_list(
    list: &[String],
    strict: bool,
    user: Who<'_>,
    account: Who<'_>,
) -> Result<Vec<String>, TemplateError> {
    if list.iter().all(|s| mustaches(s).is_empty()) {
        return Ok(list.to_vec());
    }
    let error = |subject: &str, why: String| TemplateError {
        subject: subject.to_owned(),
        why,
    };
    let mut out = Vec::new();
    for subject in list {
        let tokens = mustaches(subject);
        let mut values: Vec<Vec<String>> = Vec::new();
        let mut has_tags = false;
        for token in &tokens {
            let op = token[2..token.len() - 2].trim();
            let value = if folds_to(op, "name()") {
                vec![user.name.to_owned()]
            } else if folds_to(op, "subject()") {
                vec![user.key.to_owned()]
            } else if folds_to(op, "account-name()") {
                vec![account.name.to_owned()]
            } else if folds_to(op, "account-subject()") {
                vec![account.key.to_owned()]
            } else if let Some((of_account, name)) = tag_of(op) {
                has_tags = true;
                let tags = if of_account { account.tags } else { user.tags };
                let prefix = format!("{}:", name.to_lowercase());
                let found: Vec<String> = tags
                    .iter()
                    .filter_map(|t| t.strip_prefix(&prefix).map(str::to_owned))
                    .collect();
                if !found.is_empty() {
                    found
                } else if strict {
                    return Err(error(subject, format!("its tag {name:?} is not defined")));
                } else {
                    vec![" ".to_owned()]
                }
            } else {
                return Err(error(
                    subject,
                    format!("{op:?} is no template operation nats-server knows"),
                ));
            };
            values.push(value);
        }
        let mut made = Vec::new();
        if !has_tags {
            let mut s = subject.clone();
            for (token, v) in tokens.iter().zip(&values) {
                s = s.replace(token, &v[0]);
            }
            made.push(s);
        } else {
            let mut count = 1usize;
            for v in &values {
                if count > MAX_EXPANSIONS / v.len() {
                    return Err(error(subject, "its tags make too many subjects".into()));
                }
                count *= v.len();
            }
            if out.len() > MAX_EXPANSIONS - count {
                return Err(error(subject, "its tags make too many subjects".into()));
            }
            let mut at = vec![0usize; values.len()];
            for _ in 0..count {
                let mut s = subject.clone();
                for (j, token) in tokens.iter().enumerate() {
                    s = s.replace(token, &values[j][at[j]]);
                }
                made.push(s);
                for j in (0..at.len()).rev() {
                    at[j] += 1;
                    if at[j] < values[j].len() {
                        break;
                    }
                    at[j] = 0;
                }
            }
        }
        for s in made {
            if is_valid_subject(&s) {
                out.push(s);
            } else if strict {
                return Err(error(subject, format!("it makes {s:?}, not a subject")));
            }
        }
    }
    Ok(out)
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

    fn who<'a>(name: &'a str, key: &'a str) -> Who<'a> {
        Who {
            name,
            key,
            tags: &[],
        }
    }

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
        let f = t.filled(who("ann", "UKEY"), who("PEOPLE", "AKEY")).unwrap();
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
        let f = t.filled(who("a b", "U"), who("P", "A")).unwrap();
        assert!(f.permissions.sub.allow.is_empty());
        assert_eq!(f.permissions.sub.deny, [">"]);
        // In a deny list it is an error, as is an unknown operation or a tag.
        assert!(
            limits(&[], &["x.{{name()}}"])
                .filled(who("a b", "U"), who("P", "A"))
                .is_err()
        );
        assert!(
            limits(&["x.{{nope()}}"], &[])
                .filled(who("a", "U"), who("P", "A"))
                .is_err()
        );
        let tagged = limits(&["x.{{tag(team)}}", "y"], &[]).filled(who("a", "U"), who("P", "A"));
        assert_eq!(tagged.unwrap().permissions.sub.allow, ["y"]);
    }

    #[test]
    fn tags_fill_in_a_subject_per_value_and_a_list_without_a_template_is_left_alone() {
        let tags = [
            "team:red".to_owned(),
            "team:blue".to_owned(),
            "x:y".to_owned(),
        ];
        let zone = ["zone:eu".to_owned()];
        let f = limits(
            &["a.{{tag(team)}}.{{account-tag(zone)}}"],
            &["d.{{tag(team)}}"],
        )
        .filled(
            Who {
                name: "a",
                key: "U",
                tags: &tags,
            },
            Who {
                name: "P",
                key: "A",
                tags: &zone,
            },
        )
        .unwrap();
        assert_eq!(f.permissions.sub.allow, ["a.red.eu", "a.blue.eu"]);
        assert_eq!(f.permissions.sub.deny, ["d.red", "d.blue"]);
        // No template in the list: nats-server takes it as written (a queue's too).
        let f = limits(&["q.> workers"], &[])
            .filled(who("a", "U"), who("P", "A"))
            .unwrap();
        assert_eq!(f.permissions.sub.allow, ["q.> workers"]);
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
