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

/// A user of an account.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct User {
    #[serde(flatten)]
    pub permissions: Permissions,
    /// No limit at -1.
    #[serde(default)]
    pub subs: i64,
    #[serde(default)]
    pub data: i64,
    #[serde(default)]
    pub payload: i64,
    /// The JWT alone logs in (no nonce signed): the auth callout's sentinel user.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub bearer_token: bool,
    /// `STANDARD`, `LEAFNODE`, `WEBSOCKET`, …; empty is any.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub allowed_connection_types: Vec<String>,
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
            permissions: Permissions::default(),
            subs: super::account::NO_LIMIT,
            data: super::account::NO_LIMIT,
            payload: super::account::NO_LIMIT,
            bearer_token: false,
            allowed_connection_types: Vec::new(),
            issuer_account: String::new(),
            generic: Generic::of::<User>(),
        }
    }
}
