//! An auth callout's exchange: the request nats-server sends (who connects, with what) and
//! the response it takes back (a user JWT, or why not), as nats-io/jwt v2 writes them.

use serde::{Deserialize, Serialize};

use super::{Generic, Kind};

/// The server asking.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ServerId {
    #[serde(default)]
    pub name: String,
    #[serde(default)]
    pub host: String,
    /// The server's id: the audience the response must name.
    #[serde(default)]
    pub id: String,
    /// The curve key the server seals with, when the account asks for sealing.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub xkey: String,
}

/// What the connecting client sent in its CONNECT.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ConnectOptions {
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub jwt: String,
    /// The token it gave (here: an identity provider's ID token).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub auth_token: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub user: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub name: String,
}

/// A connection nats-server asks the callout about.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AuthorizationRequest {
    pub server_id: ServerId,
    /// The key the user JWT given back must be about (the server made it for this
    /// connection: a response cannot be replayed for another).
    pub user_nkey: String,
    #[serde(default)]
    pub connect_opts: ConnectOptions,
    #[serde(flatten)]
    pub generic: Generic,
}

impl Kind for AuthorizationRequest {
    const TYPE: &'static str = "authorization_request";
}

/// The callout's answer: a user JWT, or why not.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AuthorizationResponse {
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub jwt: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub error: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub issuer_account: String,
    #[serde(flatten)]
    pub generic: Generic,
}

impl Kind for AuthorizationResponse {
    const TYPE: &'static str = "authorization_response";
}

impl AuthorizationResponse {
    pub fn user(jwt: String) -> AuthorizationResponse {
        AuthorizationResponse {
            jwt,
            error: String::new(),
            issuer_account: String::new(),
            generic: Generic::of::<AuthorizationResponse>(),
        }
    }

    pub fn refused(why: impl Into<String>) -> AuthorizationResponse {
        AuthorizationResponse {
            error: why.into(),
            ..AuthorizationResponse::user(String::new())
        }
    }
}
