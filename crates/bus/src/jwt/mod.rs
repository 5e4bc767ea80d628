//! NATS JWTs (jwt v2, as nats-server reads them): claims signed with an nkey, made and read
//! back. The operator's, an account's, a user's and an import's activation are typed in the
//! files beside this one; what nats-server accepts is the test of each (tests/it/operator.rs).

mod account;
mod authorization;
mod creds;
mod operator;
mod user;

pub use account::{
    Account, Activation, Authorization, Export, ExportType, Import, JetStreamLimits, Limits,
    ResponseType, ServiceLatency, SigningKey, UserScope,
};
pub use authorization::{AuthorizationRequest, AuthorizationResponse, ConnectOptions, ServerId};
pub use creds::{CredsError, creds, read_creds};
pub use operator::Operator;
pub use user::{
    Permission, PermissionLimits, Permissions, ResponsePermission, TemplateError, User, Who,
};

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use nkeys::KeyPair;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use sha2::Digest as _;

/// The header of every NATS JWT this version writes.
const HEADER: &str = r#"{"typ":"JWT","alg":"ed25519-nkey"}"#;
/// The signing algorithm NATS JWTs name: an ed25519 nkey's.
const ALGORITHM: &str = "ed25519-nkey";
/// The claims' version nats-server reads as v2.
const VERSION: u32 = 2;

/// A JWT's registered claims around its NATS part (`nats`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Claims<T> {
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub aud: String,
    /// Seconds since the epoch after which the claims are void; 0 never.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub exp: i64,
    /// The claims' id: base32 of the SHA-512/256 of the claims written without it.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub jti: String,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub iat: i64,
    /// The public key that signed them.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub iss: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub name: String,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub nbf: i64,
    /// The public key they are about (an operator, an account, a user).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub sub: String,
    pub nats: T,
}

fn is_zero(n: &i64) -> bool {
    *n == 0
}

/// Why a JWT could not be made or read.
#[derive(Debug, thiserror::Error)]
pub enum JwtError {
    #[error("the token is not a JWT (header.claims.signature): {0}")]
    Shape(&'static str),
    #[error("the token's {part} is not base64url")]
    Encoding {
        part: &'static str,
        #[source]
        source: base64::DecodeError,
    },
    #[error("the token's {part} does not read as a NATS JWT's")]
    Json {
        part: &'static str,
        #[source]
        source: serde_json::Error,
    },
    #[error("the token is signed with {0}, not an ed25519 nkey: NATS JWTs v2 only are read")]
    Algorithm(String),
    #[error("the token's issuer {issuer} is not a public nkey")]
    Issuer {
        issuer: String,
        #[source]
        source: nkeys::error::Error,
    },
    #[error("the token's signature is not its issuer's ({issuer})")]
    Signature { issuer: String },
    #[error("the key cannot sign: {0}")]
    Key(#[source] nkeys::error::Error),
}

/// The claims' type, the field every NATS part carries (`operator`, `account`, …).
pub trait Kind {
    const TYPE: &'static str;
}

/// The fields every NATS part of a claim has: its type and the claims' version.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Generic {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tags: Vec<String>,
    #[serde(rename = "type", default)]
    pub kind: String,
    #[serde(default)]
    pub version: u32,
}

impl Generic {
    pub fn of<T: Kind>() -> Generic {
        Generic {
            tags: Vec::new(),
            kind: T::TYPE.to_owned(),
            version: VERSION,
        }
    }
}

impl<T: Serialize> Claims<T> {
    /// Claims about `subject` named `name`, with no expiry.
    pub fn new(subject: impl Into<String>, name: impl Into<String>, nats: T) -> Claims<T> {
        Claims {
            aud: String::new(),
            exp: 0,
            jti: String::new(),
            iat: 0,
            iss: String::new(),
            name: name.into(),
            nbf: 0,
            sub: subject.into(),
            nats,
        }
    }

    /// The claims signed by `key`, issued now: the token nats-server reads.
    pub fn sign(self, key: &KeyPair) -> Result<String, JwtError> {
        self.sign_at(key, now())
    }

    /// As [`Claims::sign`], issued at `iat` (seconds since the epoch): after a revocation
    /// of what came before it.
    pub fn sign_at(mut self, key: &KeyPair, iat: i64) -> Result<String, JwtError> {
        self.iss = key.public_key();
        self.iat = iat;
        self.jti = String::new();
        let unnamed = serde_json::to_vec(&self).expect("claims serialise");
        let digest = sha2::Sha512_256::digest(&unnamed);
        self.jti = data_encoding::BASE32_NOPAD.encode(&digest);
        let body = serde_json::to_vec(&self).expect("claims serialise");
        let signed = format!(
            "{}.{}",
            URL_SAFE_NO_PAD.encode(HEADER),
            URL_SAFE_NO_PAD.encode(body)
        );
        let signature = key.sign(signed.as_bytes()).map_err(JwtError::Key)?;
        Ok(format!("{signed}.{}", URL_SAFE_NO_PAD.encode(signature)))
    }
}

impl<T: DeserializeOwned> Claims<T> {
    /// Reads `token`'s claims, checking that its issuer (`iss`) signed it. Whether that issuer
    /// may issue them (the operator an account, an account its users) is the reader's to ask.
    pub fn verify(token: &str) -> Result<Claims<T>, JwtError> {
        let mut parts = token.trim().split('.');
        let (Some(header), Some(body), Some(signature), None) =
            (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return Err(JwtError::Shape("three parts joined by dots"));
        };
        let decode = |part: &'static str, text: &str| {
            URL_SAFE_NO_PAD
                .decode(text)
                .map_err(|source| JwtError::Encoding { part, source })
        };
        let head: serde_json::Value =
            serde_json::from_slice(&decode("header", header)?).map_err(|source| {
                JwtError::Json {
                    part: "header",
                    source,
                }
            })?;
        let alg = head["alg"].as_str().unwrap_or_default();
        if !alg.eq_ignore_ascii_case(ALGORITHM) {
            return Err(JwtError::Algorithm(alg.to_owned()));
        }
        let claims: Claims<T> =
            serde_json::from_slice(&decode("claims", body)?).map_err(|source| JwtError::Json {
                part: "claims",
                source,
            })?;
        let issuer = KeyPair::from_public_key(&claims.iss).map_err(|source| JwtError::Issuer {
            issuer: claims.iss.clone(),
            source,
        })?;
        let signed = &token.trim()[..header.len() + 1 + body.len()];
        issuer
            .verify(signed.as_bytes(), &decode("signature", signature)?)
            .map_err(|_| JwtError::Signature {
                issuer: claims.iss.clone(),
            })?;
        Ok(claims)
    }
}

/// Seconds since the epoch.
pub(crate) fn now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_signed_account_reads_back_and_a_changed_one_does_not() {
        let operator = KeyPair::new_operator();
        let account = KeyPair::new_account();
        let token = Claims::new(account.public_key(), "PEOPLE", Account::default())
            .sign(&operator)
            .unwrap();
        let read: Claims<Account> = Claims::verify(&token).unwrap();
        assert_eq!(read.iss, operator.public_key());
        assert_eq!(read.sub, account.public_key());
        assert_eq!(read.name, "PEOPLE");
        assert_eq!(read.nats.generic.kind, "account");
        assert_eq!(read.jti.len(), 52, "{}", read.jti);
        // Another signer's signature over the same claims is not the issuer's.
        let mut parts: Vec<&str> = token.split('.').collect();
        let forged = KeyPair::new_operator()
            .sign(format!("{}.{}", parts[0], parts[1]).as_bytes())
            .unwrap();
        let forged = URL_SAFE_NO_PAD.encode(forged);
        parts[2] = &forged;
        assert!(matches!(
            Claims::<Account>::verify(&parts.join(".")),
            Err(JwtError::Signature { .. })
        ));
        assert!(matches!(
            Claims::<Account>::verify("a.b"),
            Err(JwtError::Shape(_))
        ));
    }
}
