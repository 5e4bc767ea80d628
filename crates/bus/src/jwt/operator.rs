//! An operator's claims: the keys it signs accounts with and its system account.

use serde::{Deserialize, Serialize};

use super::{Generic, Kind};

/// The root of trust nats-server is configured with.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Operator {
    /// Keys (besides the operator's own) that may sign its accounts.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub signing_keys: Vec<String>,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub system_account: String,
    /// Only signing keys may sign accounts (nsc's `--require-signing-keys`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub strict_signing_key_usage: bool,
    #[serde(flatten)]
    pub generic: Generic,
}

impl Kind for Operator {
    const TYPE: &'static str = "operator";
}

impl Default for Operator {
    fn default() -> Operator {
        Operator {
            signing_keys: Vec::new(),
            system_account: String::new(),
            strict_signing_key_usage: false,
            generic: Generic::of::<Operator>(),
        }
    }
}
