//! An account's claims (its exports, imports, limits and signing keys) and an import's
//! activation: the JSON fields of nats-io/jwt v2's `Account` and `Activation`.

use serde::{Deserialize, Serialize};

use super::user::PermissionLimits;
use super::{Generic, Kind};

/// No limit, as NATS JWTs write it.
pub const NO_LIMIT: i64 = -1;

/// What an account is and may do.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Account {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub imports: Vec<Import>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub exports: Vec<Export>,
    #[serde(default)]
    pub limits: Limits,
    /// Keys (besides the account's own) that may sign its users, bare or scoped.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub signing_keys: Vec<SigningKey>,
    /// Users whose JWTs issued before the time given are void (user key → seconds).
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub revocations: std::collections::BTreeMap<String, i64>,
    /// An auth callout: the users it is answered by, and the accounts it may place people in.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub authorization: Option<Authorization>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    #[serde(flatten)]
    pub generic: Generic,
}

impl Kind for Account {
    const TYPE: &'static str = "account";
}

impl Account {
    /// Whether `key` is the account's signing key (bare or scoped), and its scope if scoped.
    pub fn signing_key(&self, key: &str) -> Option<&SigningKey> {
        self.signing_keys.iter().find(|k| k.key() == key)
    }
}

/// A key that may sign an account's users: bare (the users' JWTs say what they may do), or
/// scoped (what they may do is the scope's template, and their JWTs must say nothing).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum SigningKey {
    Bare(String),
    Scoped(Box<UserScope>),
}

impl SigningKey {
    pub fn key(&self) -> &str {
        match self {
            SigningKey::Bare(key) => key,
            SigningKey::Scoped(scope) => &scope.key,
        }
    }

    pub fn scope(&self) -> Option<&UserScope> {
        match self {
            SigningKey::Bare(_) => None,
            SigningKey::Scoped(scope) => Some(scope),
        }
    }
}

/// A scoped signing key (nats-io/jwt's `UserScope`): every user it signs gets `template`,
/// its `{{name()}}`, `{{subject()}}`, … filled in from the user's JWT.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct UserScope {
    /// Always `user_scope`.
    pub kind: String,
    pub key: String,
    #[serde(default)]
    pub role: String,
    pub template: PermissionLimits,
    #[serde(default)]
    pub description: String,
}

impl UserScope {
    pub const KIND: &'static str = "user_scope";

    pub fn new(
        key: impl Into<String>,
        role: impl Into<String>,
        template: PermissionLimits,
    ) -> UserScope {
        UserScope {
            kind: UserScope::KIND.to_owned(),
            key: key.into(),
            role: role.into(),
            template,
            description: String::new(),
        }
    }
}

impl Default for Account {
    /// As nats-io/jwt's new account: no limit but JetStream's (off).
    fn default() -> Account {
        Account {
            imports: Vec::new(),
            exports: Vec::new(),
            limits: Limits::default(),
            signing_keys: Vec::new(),
            revocations: Default::default(),
            authorization: None,
            description: None,
            generic: Generic::of::<Account>(),
        }
    }
}

/// An account's limits: connections, subscriptions, data, and JetStream (off at 0).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Limits {
    #[serde(default)]
    pub subs: i64,
    #[serde(default)]
    pub data: i64,
    #[serde(default)]
    pub payload: i64,
    #[serde(default)]
    pub imports: i64,
    #[serde(default)]
    pub exports: i64,
    #[serde(default)]
    pub wildcards: bool,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub disallow_bearer: bool,
    #[serde(default)]
    pub conn: i64,
    #[serde(default)]
    pub leaf: i64,
    #[serde(flatten)]
    pub jetstream: JetStreamLimits,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            subs: NO_LIMIT,
            data: NO_LIMIT,
            payload: NO_LIMIT,
            imports: NO_LIMIT,
            exports: NO_LIMIT,
            wildcards: true,
            disallow_bearer: false,
            conn: NO_LIMIT,
            leaf: NO_LIMIT,
            jetstream: JetStreamLimits::default(),
        }
    }
}

/// JetStream's limits: storage 0 is JetStream off for the account.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct JetStreamLimits {
    #[serde(default, skip_serializing_if = "is_zero")]
    pub mem_storage: i64,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub disk_storage: i64,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub streams: i64,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub consumer: i64,
}

impl JetStreamLimits {
    /// JetStream with no limit.
    pub fn unlimited() -> JetStreamLimits {
        JetStreamLimits {
            mem_storage: NO_LIMIT,
            disk_storage: NO_LIMIT,
            streams: NO_LIMIT,
            consumer: NO_LIMIT,
        }
    }

    pub fn enabled(&self) -> bool {
        self.mem_storage != 0 || self.disk_storage != 0
    }
}

fn is_zero(n: &i64) -> bool {
    *n == 0
}

/// A stream or a service.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ExportType {
    Stream,
    Service,
}

/// How many answers a service's request gets back across the import.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum ResponseType {
    Singleton,
    Stream,
    Chunked,
}

/// Service latency tracking: a share of the requests (1–100), reported on `results`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ServiceLatency {
    pub sampling: u8,
    pub results: String,
}

/// What an account offers others.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Export {
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub name: String,
    pub subject: String,
    #[serde(rename = "type")]
    pub kind: ExportType,
    /// Only an account with an activation this account signed may import it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub token_req: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub response_type: Option<ResponseType>,
    /// Nanoseconds a request's reply may still cross the import.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub response_threshold: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service_latency: Option<ServiceLatency>,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub allow_trace: bool,
}

/// What an account takes from another (`account`, by its public key).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Import {
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub name: String,
    pub subject: String,
    pub account: String,
    /// The exporter's activation, where its export asks for one.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub token: String,
    /// The subject it arrives on here, where not its own (`$1` names the exporter's
    /// wildcards).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub local_subject: String,
    #[serde(rename = "type")]
    pub kind: ExportType,
    /// nats-server stamps the importer's requests with who made them.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub share: bool,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub allow_trace: bool,
}

/// An exporter's word that an account may import one of its exports that asks for it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Activation {
    pub subject: String,
    pub kind: ExportType,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub issuer_account: String,
    #[serde(flatten)]
    pub generic: Generic,
}

impl Kind for Activation {
    const TYPE: &'static str = "activation";
}

impl Activation {
    pub fn new(subject: impl Into<String>, kind: ExportType) -> Activation {
        Activation {
            subject: subject.into(),
            kind,
            issuer_account: String::new(),
            generic: Generic::of::<Activation>(),
        }
    }
}

/// An account's auth callout: the users who answer it, the accounts it may place users in,
/// and the curve key its answers are sealed for.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Authorization {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub auth_users: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub allowed_accounts: Vec<String>,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub xkey: String,
}
