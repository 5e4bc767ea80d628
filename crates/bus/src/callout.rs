//! People from an identity provider: nats-server's auth callout, answered by the mesh. A
//! person connects with the sentinel credential (it may do nothing) and their OIDC ID token;
//! nats-server asks the callout, which checks the token (signed by the provider's JWKS, its
//! issuer, audience, expiry and not-before) and answers with a user JWT for that person in
//! `PEOPLE` — their permissions as the grants give them, valid no longer than the token —
//! or with why not. The keys are a JWKS file, or fetched (by a [`Fetch`] the caller gives)
//! at start, hourly, and when a token names a key not among them, at most once a minute.
//! The callout's credential, the key it signs with and the curve key that
//! seals its answers stay with whoever runs it.

use std::collections::BTreeMap;
use std::sync::{Arc, RwLock};

use futures_util::StreamExt;
use jsonwebtoken::jwk::JwkSet;
use nkeys::{KeyPair, XKey};

use crate::jwt::{
    Account, Authorization, AuthorizationRequest, AuthorizationResponse, Claims, Kind, Permission,
    PermissionLimits, Permissions, User,
};
use crate::operator::{KeyRing, OperatorError, Signed, SignedAccount, SignedUser};

/// Where nats-server asks the callout.
pub const SUBJECT: &str = "$SYS.REQ.USER.AUTH";
/// The header that carries the server's curve key when the request is sealed.
const XKEY_HEADER: &str = "Nats-Server-Xkey";
/// The account people connect to before the callout places them in `PEOPLE`.
pub const ACCOUNT: &str = "AUTH";
/// The callout service's user, in [`ACCOUNT`].
pub const SERVICE_USER: &str = "callout";
/// The credential everyone connects with besides their token: it may do nothing itself.
pub const SENTINEL_USER: &str = "sentinel";
/// The ring's name for the signing key `PEOPLE` lists for the callout: the callout holds
/// it, never `PEOPLE`'s own key.
pub const PEOPLE_SIGNER: &str = "signing.PEOPLE.callout";
/// The folder `mesh accounts --idp --out DIR` writes inside DIR for `mesh callout`: its
/// keys, its credential and `PEOPLE`'s public key, and nothing else of the site's — DIR's
/// own `keys/` holds every account's key, which would let whoever runs the callout sign any
/// module's users.
pub const SERVICE_DIR: &str = "callout";
/// The file in [`SERVICE_DIR`] naming `PEOPLE`'s public key: the issuing account of every
/// user the callout signs (its seed is not the callout's to hold).
pub const PEOPLE_KEY_FILE: &str = "PEOPLE.pub";
/// The ring's names of the keys the callout holds: its account's (signs its answers), the
/// signing key `PEOPLE` lists for it, and the curve key that seals its answers.
pub const SERVICE_KEYS: [&str; 3] = ["account.AUTH", PEOPLE_SIGNER, "xkey.callout"];
/// The claim that names the person unless the site says another.
pub const DEFAULT_CLAIM: &str = "preferred_username";
/// Clocks may differ this much between the provider and the mesh.
const LEEWAY_SECS: u64 = 30;

/// Why the callout cannot start.
#[derive(Debug, thiserror::Error)]
pub enum CalloutError {
    #[error("the identity provider's keys (JWKS) do not read")]
    Jwks(#[source] serde_json::Error),
    #[error("the identity provider's keys (JWKS) hold no key")]
    NoKeys,
    #[error("cannot fetch the identity provider's keys (JWKS): {0}")]
    Fetch(String),
    #[error("cannot sign the callout's account")]
    Sign(#[source] OperatorError),
    #[error("cannot listen for the server's questions on {SUBJECT}")]
    Subscribe(#[source] async_nats::SubscribeError),
    #[error("cannot write the subscription to {SUBJECT} to the server")]
    Flush(#[source] async_nats::client::FlushError),
    #[error(
        "PEOPLE does not list the callout's signing key: sign the layout after `callout::delegate`"
    )]
    NotDelegated,
    #[error("cannot write {}", path.display())]
    Write {
        path: std::path::PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// Fetches the identity provider's keys (its JWKS, as text) from where it publishes them:
/// given by whoever runs the callout (mesh-bus has no HTTP client of its own).
pub type Fetch =
    Arc<dyn Fn() -> futures_util::future::BoxFuture<'static, Result<String, String>> + Send + Sync>;

/// A token naming a key not in the set has the keys fetched again at most this often, so
/// that made-up key ids cannot have the callout hammer the provider.
pub const REFETCH_AT_MOST_EVERY: std::time::Duration = std::time::Duration::from_secs(60);
/// The keys are fetched again this often whatever the tokens name (a key withdrawn).
pub const REFETCH_EVERY: std::time::Duration = std::time::Duration::from_secs(3600);

/// The provider's keys: read once (a file), or fetched — at start, every
/// [`REFETCH_EVERY`], and when a token names a key not among them (at most once every
/// [`REFETCH_AT_MOST_EVERY`]).
#[derive(Clone)]
struct Keys {
    set: Arc<RwLock<JwkSet>>,
    fetch: Option<Fetch>,
    /// When a token's unknown key last had the keys fetched.
    asked: Arc<tokio::sync::Mutex<Option<std::time::Instant>>>,
}

impl std::fmt::Debug for Keys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Keys")
            .field(
                "keys",
                &self
                    .set
                    .read()
                    .unwrap_or_else(|e| e.into_inner())
                    .keys
                    .len(),
            )
            .field("fetched", &self.fetch.is_some())
            .finish()
    }
}

/// `jwks` read as a provider publishes it (`{"keys": [...]}`), holding a key at least.
fn jwk_set(jwks: &str) -> Result<JwkSet, CalloutError> {
    let keys: JwkSet = serde_json::from_str(jwks).map_err(CalloutError::Jwks)?;
    if keys.keys.is_empty() {
        return Err(CalloutError::NoKeys);
    }
    Ok(keys)
}

impl Keys {
    /// Fetches the keys again and takes them if they read (else keeps those it has).
    async fn refetch(&self, why: &str) {
        let Some(fetch) = &self.fetch else {
            return;
        };
        match fetch()
            .await
            .map_err(CalloutError::Fetch)
            .and_then(|t| jwk_set(&t))
        {
            Ok(set) => {
                tracing::info!(
                    keys = set.keys.len(),
                    "fetched the identity provider's keys ({why})"
                );
                *self.set.write().unwrap_or_else(|e| e.into_inner()) = set;
            }
            Err(e) => tracing::warn!(
                "kept the identity provider's keys: fetching them again ({why}) failed: {e}"
            ),
        }
    }

    fn knows(&self, kid: &str) -> bool {
        self.set
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .find(kid)
            .is_some()
    }
}

/// Who may sign people in: an OpenID provider's issuer, the audience its tokens must name,
/// the claim that names the person, and its keys.
#[derive(Debug, Clone)]
pub struct Provider {
    pub issuer: String,
    pub audience: String,
    pub claim: String,
    keys: Keys,
}

impl Provider {
    /// `jwks` as the provider publishes it (`{"keys": [...]}`).
    pub fn new(
        issuer: impl Into<String>,
        audience: impl Into<String>,
        claim: Option<String>,
        jwks: &str,
    ) -> Result<Provider, CalloutError> {
        Ok(Provider {
            issuer: issuer.into(),
            audience: audience.into(),
            claim: claim.unwrap_or_else(|| DEFAULT_CLAIM.to_owned()),
            keys: Keys {
                set: Arc::new(RwLock::new(jwk_set(jwks)?)),
                fetch: None,
                asked: Default::default(),
            },
        })
    }

    /// The provider whose keys `fetch` fetches: once now (an error if they cannot be had),
    /// then again as [`Keys`] says.
    pub async fn fetching(
        issuer: impl Into<String>,
        audience: impl Into<String>,
        claim: Option<String>,
        fetch: Fetch,
    ) -> Result<Provider, CalloutError> {
        let text = fetch().await.map_err(CalloutError::Fetch)?;
        let mut provider = Provider::new(issuer, audience, claim, &text)?;
        provider.keys.fetch = Some(fetch);
        Ok(provider)
    }

    /// Before `token` is checked: if it names a key the set does not hold, the keys are
    /// fetched again (a rotation at the provider), unless a token did so within the last
    /// [`REFETCH_AT_MOST_EVERY`].
    pub async fn refresh_for(&self, token: &str) {
        if !self.names_unknown_key(token) {
            return;
        }
        // A fetch under way is not waited for: the token is checked against the keys held.
        let Ok(mut asked) = self.keys.asked.try_lock() else {
            return;
        };
        if asked.is_some_and(|at| at.elapsed() < REFETCH_AT_MOST_EVERY) {
            return;
        }
        *asked = Some(std::time::Instant::now());
        self.keys
            .refetch("a token names a key not among them")
            .await;
    }

    /// Whether `token` names a key the (fetched) set does not hold: checking it may wait for
    /// the keys to be fetched again.
    fn names_unknown_key(&self, token: &str) -> bool {
        self.keys.fetch.is_some()
            && jsonwebtoken::decode_header(token)
                .ok()
                .and_then(|h| h.kid)
                .is_some_and(|kid| !self.keys.knows(&kid))
    }

    /// Fetches the keys again every [`REFETCH_EVERY`] while the returned task runs (none for
    /// keys read from a file).
    pub fn keep_fresh(&self) -> Option<tokio::task::JoinHandle<()>> {
        self.keys.fetch.as_ref()?;
        let keys = self.keys.clone();
        Some(tokio::spawn(async move {
            let mut every = tokio::time::interval(REFETCH_EVERY);
            every.tick().await;
            loop {
                every.tick().await;
                keys.refetch("every hour").await;
            }
        }))
    }

    /// The person ID token `token` names and when it expires (seconds since the epoch), or
    /// the sentence that says why not.
    pub fn person(&self, token: &str) -> Result<(String, i64), String> {
        use jsonwebtoken::errors::ErrorKind;
        let header = jsonwebtoken::decode_header(token).map_err(|_| {
            "the ID token is not a JWT: sign in again and give the token it issues".to_owned()
        })?;
        let keys = self
            .keys
            .set
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        let jwk = match &header.kid {
            Some(kid) => keys.find(kid),
            None if keys.keys.len() == 1 => keys.keys.first(),
            None => None,
        }
        .ok_or_else(|| "the ID token is not signed by a key of the identity provider".to_owned())?;
        let key = jsonwebtoken::DecodingKey::from_jwk(jwk)
            .map_err(|_| "the identity provider's key for the token cannot check it".to_owned())?;
        // The algorithm the key is for, never the one the token claims alone (`none`, HS*).
        let algorithm = match jwk.common.key_algorithm {
            Some(a) => a.to_string().parse().unwrap_or(header.alg),
            None => header.alg,
        };
        if !matches!(
            algorithm,
            jsonwebtoken::Algorithm::RS256
                | jsonwebtoken::Algorithm::RS384
                | jsonwebtoken::Algorithm::RS512
                | jsonwebtoken::Algorithm::PS256
                | jsonwebtoken::Algorithm::PS384
                | jsonwebtoken::Algorithm::PS512
                | jsonwebtoken::Algorithm::ES256
                | jsonwebtoken::Algorithm::ES384
                | jsonwebtoken::Algorithm::EdDSA
        ) || algorithm != header.alg
        {
            return Err("the ID token is not signed with the identity provider's algorithm".into());
        }
        let mut check = jsonwebtoken::Validation::new(algorithm);
        check.set_issuer(&[&self.issuer]);
        check.set_audience(&[&self.audience]);
        check.set_required_spec_claims(&["exp", "iss", "aud"]);
        check.validate_nbf = true;
        check.leeway = LEEWAY_SECS;
        let claims = jsonwebtoken::decode::<serde_json::Value>(token, &key, &check)
            .map_err(|e| match e.kind() {
                ErrorKind::ExpiredSignature => "the ID token has expired: sign in again".to_owned(),
                ErrorKind::ImmatureSignature => "the ID token is not valid yet (nbf)".to_owned(),
                ErrorKind::InvalidAudience => format!(
                    "the ID token is for another audience, not {}",
                    self.audience
                ),
                ErrorKind::InvalidIssuer => {
                    format!("the ID token was not issued by {}", self.issuer)
                }
                ErrorKind::InvalidSignature => {
                    "the ID token is not signed by the identity provider's key".to_owned()
                }
                ErrorKind::MissingRequiredClaim(c) => format!("the ID token has no {c}"),
                _ => format!("the ID token does not check: {e}"),
            })?
            .claims;
        let person = claims[self.claim.as_str()]
            .as_str()
            .filter(|p| !p.is_empty())
            .ok_or_else(|| format!("the ID token names nobody in its {} claim", self.claim))?;
        // Whole seconds (a provider may write a fraction); none, or none to speak of, is no
        // sign-in: the user JWT must end when the token does.
        let exp = claims["exp"]
            .as_f64()
            .map(|e| e.floor() as i64)
            .filter(|e| *e > 0)
            .ok_or_else(|| "the ID token has no expiry (exp)".to_owned())?;
        Ok((person.to_owned(), exp))
    }
}

/// The file beside operator mode's keys that says how the callout names people (for the
/// audit; nothing signs with it).
pub const MAPPING_FILE: &str = "idp.json";

/// How the callout maps an ID token to a person: the issuer it trusts, the audience the
/// token must name, and the claim that names the person in the grants file.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Mapping {
    pub issuer: String,
    pub audience: String,
    pub claim: String,
}

impl Provider {
    /// How this provider's tokens name people.
    pub fn mapping(&self) -> Mapping {
        Mapping {
            issuer: self.issuer.clone(),
            audience: self.audience.clone(),
            claim: self.claim.clone(),
        }
    }
}

/// The mapping kept in operator folder `dir` ([`MAPPING_FILE`]), if one is.
pub fn read_mapping(dir: &std::path::Path) -> Option<Mapping> {
    serde_json::from_str(&std::fs::read_to_string(dir.join(MAPPING_FILE)).ok()?).ok()
}

/// What each person may do, by name (their user claims in the signed layout): shared, so
/// that a reload's grants reach the running callout.
pub type Grants = Arc<RwLock<BTreeMap<String, User>>>;

/// Each person's user claims in `signed`, as the callout gives them.
pub fn people_of(signed: &Signed) -> BTreeMap<String, User> {
    signed
        .users
        .iter()
        .filter(|u| u.account == crate::layout::PEOPLE_ACCOUNT)
        .map(|u| (u.name.clone(), u.claims.clone()))
        .collect()
}

/// The callout: what it signs with and whom it may let in.
pub struct Callout {
    provider: Provider,
    /// The callout account's key: signs the answers.
    account: KeyPair,
    /// A signing key of `PEOPLE`'s (listed in its JWT), never its own key: signs the people
    /// let in, and only them.
    people: KeyPair,
    /// `PEOPLE`'s public key, named as the issuing account of every user signed.
    people_account: String,
    /// Opens the server's sealed questions and seals the answers.
    xkey: XKey,
    grants: Grants,
}

/// Has `PEOPLE` list the callout's signing key when `ring` next signs the layout: call it
/// before [`crate::operator::sign`], then [`add_to`].
pub fn delegate(ring: &mut KeyRing) {
    ring.delegate(crate::layout::PEOPLE_ACCOUNT, PEOPLE_SIGNER);
}

/// The callout's account and users added to a signed layout (signed after [`delegate`]),
/// and the callout that answers for it with `grants`.
pub fn add_to(
    signed: &mut Signed,
    ring: &mut KeyRing,
    provider: Provider,
    grants: Grants,
) -> Result<Callout, CalloutError> {
    add_accounts(signed, ring)?;
    let people_account = ring
        .key(
            &format!("account.{}", crate::layout::PEOPLE_ACCOUNT),
            KeyPair::new_account,
        )
        .map_err(CalloutError::Sign)?
        .public_key();
    Callout::with_keys(ring, people_account, provider, grants)
}

/// `PEOPLE`'s public key as [`write_service_dir`] wrote it in the callout's folder `dir`;
/// none if it is missing or not an account's public key.
pub fn people_key(dir: &std::path::Path) -> Option<String> {
    let text = std::fs::read_to_string(dir.join(PEOPLE_KEY_FILE)).ok()?;
    let key = KeyPair::from_public_key(text.trim()).ok()?;
    (key.key_pair_type() == nkeys::KeyPairType::Account).then(|| key.public_key())
}

/// Writes [`SERVICE_DIR`] in `out`: all `mesh callout` needs (its keys, as [`KeyRing::open`]
/// reads them, its credential, `PEOPLE`'s public key) and nothing more; its path.
pub fn write_service_dir(
    out: &std::path::Path,
    signed: &Signed,
    ring: &mut KeyRing,
) -> Result<std::path::PathBuf, CalloutError> {
    let dir = out.join(SERVICE_DIR);
    let written = |path: &std::path::Path| {
        let path = path.to_owned();
        move |source| CalloutError::Write { path, source }
    };
    let keys = dir.join("keys");
    let creds = dir.join("creds");
    for d in [&dir, &keys, &creds] {
        mesh_core::runtime::private_dir(d).map_err(written(d))?;
    }
    let [account, signer, xkey] = SERVICE_KEYS;
    for name in [account, signer] {
        let seed = ring
            .key(name, KeyPair::new_account)
            .map_err(CalloutError::Sign)?
            .seed()
            .expect("a kept key has its seed");
        let path = keys.join(format!("{name}.nk"));
        crate::operator::write_private(&path, seed.as_bytes()).map_err(written(&path))?;
    }
    let seed = ring
        .xkey(xkey)
        .map_err(CalloutError::Sign)?
        .seed()
        .expect("a kept key has its seed");
    let path = keys.join(format!("{xkey}.nk"));
    crate::operator::write_private(&path, seed.as_bytes()).map_err(written(&path))?;
    let service = signed
        .user(ACCOUNT, SERVICE_USER)
        .expect("add_accounts signed the callout's service user");
    let path = creds.join(format!("{ACCOUNT}.{SERVICE_USER}.creds"));
    crate::operator::write_private(&path, service.creds.as_bytes()).map_err(written(&path))?;
    let people = ring
        .key(
            &format!("account.{}", crate::layout::PEOPLE_ACCOUNT),
            KeyPair::new_account,
        )
        .map_err(CalloutError::Sign)?
        .public_key();
    let path = dir.join(PEOPLE_KEY_FILE);
    std::fs::write(&path, format!("{people}\n")).map_err(written(&path))?;
    Ok(dir)
}

/// The callout's account (`AUTH`, answered by its service user, placing people in
/// `PEOPLE`) and its users (the service, the sentinel) added to a signed layout, signed after
/// [`delegate`]: what the servers need, written by `mesh up` and `mesh accounts --idp`.
pub fn add_accounts(signed: &mut Signed, ring: &mut KeyRing) -> Result<(), CalloutError> {
    let sign = |e| CalloutError::Sign(e);
    let account = ring
        .key_owned(&format!("account.{ACCOUNT}"), KeyPair::new_account)
        .map_err(sign)?;
    let people_account = ring
        .key(
            &format!("account.{}", crate::layout::PEOPLE_ACCOUNT),
            KeyPair::new_account,
        )
        .map_err(sign)?
        .public_key();
    let people = ring
        .key(PEOPLE_SIGNER, KeyPair::new_account)
        .map_err(sign)?
        .public_key();
    // Users it signs are let in only if PEOPLE, as signed, lists it.
    let listed = signed
        .account(crate::layout::PEOPLE_ACCOUNT)
        .and_then(|a| Claims::<Account>::verify(&a.jwt).ok())
        .is_some_and(|c| c.nats.signing_key(&people).is_some());
    if !listed {
        return Err(CalloutError::NotDelegated);
    }
    let xkey = ring.xkey("xkey.callout").map_err(sign)?;
    let service = ring
        .key_owned(&format!("user.{ACCOUNT}.{SERVICE_USER}"), KeyPair::new_user)
        .map_err(sign)?;
    let claims = Account {
        authorization: Some(Authorization {
            auth_users: vec![service.public_key()],
            allowed_accounts: vec![people_account.clone()],
            xkey: xkey.public_key(),
        }),
        ..Account::default()
    };
    let operator = ring.signer().map_err(sign)?;
    let jwt = Claims::new(account.public_key(), ACCOUNT, claims)
        .sign(operator)
        .map_err(|source| {
            sign(OperatorError::Sign {
                what: "the callout's account".into(),
                source,
            })
        })?;
    signed.accounts.push(SignedAccount {
        name: ACCOUNT.to_owned(),
        key: account.public_key(),
        jwt,
    });
    let nothing = Permissions {
        r#pub: Permission {
            allow: Vec::new(),
            deny: vec![">".into()],
        },
        sub: Permission {
            allow: Vec::new(),
            deny: vec![">".into()],
        },
        resp: None,
    };
    for (name, claims) in [
        (SERVICE_USER, User::default()),
        (
            SENTINEL_USER,
            User {
                limits: PermissionLimits {
                    bearer_token: true,
                    permissions: nothing,
                    ..PermissionLimits::default()
                },
                ..User::default()
            },
        ),
    ] {
        let user = ring
            .key_owned(&format!("user.{ACCOUNT}.{name}"), KeyPair::new_user)
            .map_err(sign)?;
        // The sentinel's name is one no person has: what the runtime tells callout users by.
        let jwt_name = if name == SENTINEL_USER {
            mesh_core::actor::CALLOUT_SENTINEL
        } else {
            name
        };
        let jwt = Claims::new(user.public_key(), jwt_name, claims.clone())
            .sign(&account)
            .map_err(|source| {
                sign(OperatorError::Sign {
                    what: format!("the callout's user {name}"),
                    source,
                })
            })?;
        signed.users.push(SignedUser {
            account: ACCOUNT.to_owned(),
            name: name.to_owned(),
            key: user.public_key(),
            creds: crate::jwt::creds(&jwt, &user.seed().expect("a made key has its seed")),
            claims,
        });
    }
    Ok(())
}

impl Callout {
    /// The callout with the keys `ring` keeps (made by [`add_accounts`]): answering for the
    /// people `grants` names, with `provider`'s tokens, as users of `people_account`
    /// (`PEOPLE`'s public key: its seed is not the callout's).
    pub fn with_keys(
        ring: &mut KeyRing,
        people_account: String,
        provider: Provider,
        grants: Grants,
    ) -> Result<Callout, CalloutError> {
        let sign = |e| CalloutError::Sign(e);
        Ok(Callout {
            provider,
            account: ring
                .key_owned(&format!("account.{ACCOUNT}"), KeyPair::new_account)
                .map_err(sign)?,
            people: ring
                .key_owned(PEOPLE_SIGNER, KeyPair::new_account)
                .map_err(sign)?,
            people_account,
            xkey: ring.xkey("xkey.callout").map_err(sign)?,
            grants,
        })
    }

    /// The answer to one question of the server: `body` as it came, sealed for our curve
    /// key when `server_xkey` (the header) names the server's.
    pub fn answer(&self, body: &[u8], server_xkey: Option<&str>) -> Vec<u8> {
        match self.open(body, server_xkey) {
            Some((server, request)) => self.respond(server.as_ref(), &request),
            None => Vec::new(),
        }
    }

    /// The server's question, opened and checked (none if it is not one for us), and the
    /// server's curve key to seal the answer for.
    fn open(
        &self,
        body: &[u8],
        server_xkey: Option<&str>,
    ) -> Option<(Option<XKey>, Claims<AuthorizationRequest>)> {
        let server = server_xkey.and_then(|k| XKey::from_public_key(k).ok());
        let opened = match &server {
            // Not for us: nothing can be answered that the server would open.
            Some(server) => self.xkey.open(body, server).ok()?,
            None => body.to_vec(),
        };
        let text = std::str::from_utf8(&opened).ok()?;
        let request = Claims::<AuthorizationRequest>::verify(text).ok()?;
        (request.nats.generic.kind == AuthorizationRequest::TYPE).then_some((server, request))
    }

    /// The answer to question `request`, sealed for `server` if it sealed the question.
    fn respond(&self, server: Option<&XKey>, request: &Claims<AuthorizationRequest>) -> Vec<u8> {
        let asked = &request.nats;
        let response = match self.user_for(asked) {
            Ok(jwt) => AuthorizationResponse::user(jwt),
            Err(why) => {
                tracing::info!(name = ?asked.connect_opts.name, "refused a sign-in: {why}");
                AuthorizationResponse::refused(why)
            }
        };
        let mut claims = Claims::new(asked.user_nkey.clone(), "", response);
        claims.aud = asked.server_id.id.clone();
        let Ok(signed) = claims.sign(&self.account) else {
            return Vec::new();
        };
        match server {
            Some(server) => self
                .xkey
                .seal(signed.as_bytes(), server)
                .unwrap_or_default(),
            None => signed.into_bytes(),
        }
    }

    /// The user JWT for the person the request's token names, or why not.
    fn user_for(&self, asked: &AuthorizationRequest) -> Result<String, String> {
        let token = &asked.connect_opts.auth_token;
        if token.is_empty() {
            return Err(
                "no ID token was given: connect with `mesh --id-token FILE` (or MESH_ID_TOKEN)"
                    .into(),
            );
        }
        let (person, exp) = self.provider.person(token)?;
        let grant = self
            .grants
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(&person)
            .cloned();
        let Some(grant) = grant else {
            return Err(format!(
                "{person} is not a person in the grants file: ask whoever keeps it to add them"
            ));
        };
        let mut claims = Claims::new(asked.user_nkey.clone(), person.clone(), grant);
        // Never longer than the identity provider vouches for them.
        claims.exp = exp;
        claims.nats.issuer_account = self.people_account.clone();
        claims
            .sign(&self.people)
            .map_err(|e| format!("the callout cannot sign for {person}: {e}"))
    }

    /// Listens for the server's questions on `client` (the callout service's connection):
    /// when it returns, the subscription is written to the connection (so a service may say
    /// it answers), and [`Listening::serve`] answers them until the connection closes. A
    /// connection that went away meanwhile is not waited for past [`WRITTEN_WITHIN`]: the
    /// subscription is kept, and async-nats makes it again when the connection comes back.
    pub async fn listen(self, client: async_nats::Client) -> Result<Listening, CalloutError> {
        let asked = client
            .subscribe(SUBJECT)
            .await
            .map_err(CalloutError::Subscribe)?;
        match tokio::time::timeout(WRITTEN_WITHIN, client.flush()).await {
            Ok(written) => written.map_err(CalloutError::Flush)?,
            Err(_) => tracing::warn!(
                "the callout's subscription to {SUBJECT} is not written yet (the server is away); it is made when the connection comes back"
            ),
        }
        Ok(Listening {
            callout: Arc::new(self),
            client,
            asked,
        })
    }
}

/// The longest [`Callout::listen`] waits for its subscription to be written: a connection
/// that is there writes it at once; one that went away writes it when it comes back.
const WRITTEN_WITHIN: std::time::Duration = std::time::Duration::from_secs(5);

/// The callout listening for the server's questions ([`Callout::listen`]).
pub struct Listening {
    callout: Arc<Callout>,
    client: async_nats::Client,
    asked: async_nats::Subscriber,
}

impl Listening {
    /// Answers the server's questions until the connection closes.
    pub async fn serve(self) -> Result<(), CalloutError> {
        let Listening {
            callout,
            client,
            mut asked,
        } = self;
        // Fetched keys kept fresh for as long as the callout answers.
        struct Abort(Option<tokio::task::JoinHandle<()>>);
        impl Drop for Abort {
            fn drop(&mut self) {
                if let Some(task) = &self.0 {
                    task.abort();
                }
            }
        }
        let _fresh = Abort(callout.provider.keep_fresh());
        while let Some(msg) = asked.next().await {
            let Some(reply) = msg.reply.clone() else {
                continue;
            };
            let server = msg
                .headers
                .as_ref()
                .and_then(|h| h.get(XKEY_HEADER))
                .map(|v| v.as_str().to_owned());
            let Some((server, request)) = callout.open(&msg.payload, server.as_deref()) else {
                answer(&client, reply, Vec::new()).await;
                continue;
            };
            let token = &request.nats.connect_opts.auth_token;
            if callout.provider.names_unknown_key(token) {
                // A key the provider rotated in is fetched before the token is checked: in a
                // task of its own, so a slow provider (or a made-up key id) holds up no one
                // else's sign-in; at most one fetch a minute, and none waited on.
                let (callout, client) = (callout.clone(), client.clone());
                tokio::spawn(async move {
                    callout
                        .provider
                        .refresh_for(&request.nats.connect_opts.auth_token)
                        .await;
                    let said = callout.respond(server.as_ref(), &request);
                    answer(&client, reply, said).await;
                });
                continue;
            }
            let said = callout.respond(server.as_ref(), &request);
            answer(&client, reply, said).await;
        }
        Ok(())
    }
}

/// Sends the callout's answer to the server's question.
async fn answer(client: &async_nats::Client, reply: async_nats::Subject, answer: Vec<u8>) {
    if let Err(e) = client.publish(reply, answer.into()).await {
        tracing::warn!("the callout's answer was not sent: {e}");
    }
}

/// Why the sessions of people whose grants changed could not all be closed.
#[derive(Debug, thiserror::Error)]
pub enum SignOutError {
    #[error("cannot listen for the servers' answers")]
    Subscribe(#[source] async_nats::SubscribeError),
    #[error("cannot ask the servers")]
    Publish(#[source] async_nats::PublishError),
    #[error("cannot close connection {cid} on server {server}")]
    Kick {
        server: String,
        cid: u64,
        #[source]
        source: async_nats::RequestError,
    },
}

/// How long the servers are listened to for their connections: they answer a ping at once,
/// and a cluster's servers each answer apart.
const CONNZ_WITHIN: std::time::Duration = std::time::Duration::from_millis(500);
/// The most connections of `PEOPLE` one server lists in one answer: a page well within a
/// message the bus carries (about 600 bytes a connection); more are asked page by page.
const CONNZ_PAGE: usize = 512;

/// Closes every connection the callout let into `PEOPLE` (`account`, its key) for one of
/// `people`, on every server that `system` (the system account's user) reaches: a person whose
/// grants changed signs in again and gets what the grants now give — or, gone from them, is
/// refused. Without it a session keeps the grants it signed in with until its token expires.
/// One question to every server, however many people changed. Returns how many connections
/// were closed.
pub async fn sign_out(
    system: &async_nats::Client,
    account: &str,
    people: &[String],
) -> Result<usize, SignOutError> {
    let inbox = system.new_inbox();
    let mut answers = system
        .subscribe(inbox.clone())
        .await
        .map_err(SignOutError::Subscribe)?;
    let mut sessions = Vec::new();
    // Page by page, every server at once, until no server has a full page left.
    for offset in (0..).step_by(CONNZ_PAGE) {
        let ask = serde_json::json!({
            "acc": account, "auth": true, "offset": offset, "limit": CONNZ_PAGE,
        });
        system
            .publish_with_reply(
                "$SYS.REQ.SERVER.PING.CONNZ",
                inbox.clone(),
                serde_json::to_vec(&ask).expect("json").into(),
            )
            .await
            .map_err(SignOutError::Publish)?;
        let mut more = false;
        while let Ok(Some(answer)) = tokio::time::timeout(CONNZ_WITHIN, answers.next()).await {
            let Ok(said) = serde_json::from_slice::<serde_json::Value>(&answer.payload) else {
                continue;
            };
            let server = said["server"]["id"].as_str().unwrap_or_default().to_owned();
            let listed = said["data"]["connections"].as_array();
            more |= listed.is_some_and(|l| l.len() >= CONNZ_PAGE);
            for c in listed.into_iter().flatten() {
                // Only sessions the callout made: it names them by the person (nats-server's
                // `authorized_user`), where a credential file's user is named by its key.
                let person = c["authorized_user"].as_str().unwrap_or_default();
                if let (Some(cid), true) = (c["cid"].as_u64(), people.iter().any(|p| p == person)) {
                    sessions.push((server.clone(), cid));
                }
            }
        }
        if !more {
            break;
        }
    }
    for (server, cid) in &sessions {
        system
            .request(
                format!("$SYS.REQ.SERVER.{server}.KICK"),
                serde_json::to_vec(&serde_json::json!({ "cid": cid }))
                    .expect("json")
                    .into(),
            )
            .await
            .map_err(|source| SignOutError::Kick {
                server: server.clone(),
                cid: *cid,
                source,
            })?;
    }
    Ok(sessions.len())
}

/// The people of `before` whose grants differ in `now`, or who are gone from it.
pub fn changed(before: &BTreeMap<String, User>, now: &BTreeMap<String, User>) -> Vec<String> {
    before
        .iter()
        .filter(|(name, claims)| {
            now.get(*name)
                .is_none_or(|c| c.limits.permissions != claims.limits.permissions)
        })
        .map(|(name, _)| name.clone())
        .collect()
}
