//! The accounts layout in operator mode: the accounts `layout.rs` writes for a configuration
//! file, signed as JWTs instead (an operator, a system account, an account per module,
//! `PEOPLE` and `MESH`), their users as credential files, and the server block that trusts
//! them through a full resolver. Read from the rendered configuration, so both modes are the
//! one layout.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use nkeys::KeyPair;
use sha2::Digest as _;

use crate::jwt::{
    self, Account, Activation, Claims, Export, ExportType, Import, JetStreamLimits, Operator,
    Permission, PermissionLimits, Permissions, ResponseType, ServiceLatency, SigningKey, User,
    UserScope,
};
use crate::natsconf::{Node, Value};
use crate::site::Site;

/// The system account's name in the keys kept and in its JWT.
pub const SYSTEM_ACCOUNT: &str = "SYS";
/// The system account's user (it pushes account JWTs to a full resolver).
pub const SYSTEM_USER: &str = "sys";
/// The operator's signing key in the ring: what signs every account, so that the
/// operator's own key signs only the operator (and can be kept offline, as nsc advises).
const SIGNER: &str = "operator.signing";

/// Why the layout could not be signed.
#[derive(Debug, thiserror::Error)]
pub enum OperatorError {
    #[error("{at}: {what}")]
    Layout { at: String, what: String },
    #[error("cannot keep key {name} in {}: {source}", dir.display())]
    Keep {
        name: String,
        dir: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("key {name} in {} is not an nkey seed of its kind", dir.display())]
    Seed { name: String, dir: PathBuf },
    #[error("cannot sign {what}")]
    Sign {
        what: String,
        #[source]
        source: jwt::JwtError,
    },
    #[error(
        "key {key} is not one of operator {operator}'s signing keys: add it with `nsc edit operator --sk {key}`, push the operator to its servers, and run again"
    )]
    NotSigner { key: String, operator: String },
    #[error("no key to sign the accounts with: give the operator's signing key (--signing-key)")]
    NoSigner,
}

/// The keys the layout is signed with, made once and kept (seeds, mode 0600, one file each)
/// so that a module's credential file stays good across a reload.
pub struct KeyRing {
    dir: Option<PathBuf>,
    keys: BTreeMap<String, KeyPair>,
    /// A site's own operator, used as it is instead of one the ring signs.
    site: Option<Site>,
    /// Account name → names of the ring's keys the account lists as its signing keys.
    delegated: BTreeMap<String, Vec<String>>,
}

impl KeyRing {
    /// Keys made as asked and kept nowhere (a test's, or a layout written once).
    pub fn in_memory() -> KeyRing {
        KeyRing {
            dir: None,
            keys: BTreeMap::new(),
            site: None,
            delegated: BTreeMap::new(),
        }
    }

    /// The keys kept in `dir` (made with mode 0700 if missing).
    pub fn open(dir: &Path) -> Result<KeyRing, OperatorError> {
        let keep = |source| OperatorError::Keep {
            name: String::new(),
            dir: dir.to_owned(),
            source,
        };
        std::fs::create_dir_all(dir).map_err(keep)?;
        set_mode(dir, 0o700).map_err(keep)?;
        Ok(KeyRing {
            dir: Some(dir.to_owned()),
            keys: BTreeMap::new(),
            site: None,
            delegated: BTreeMap::new(),
        })
    }

    /// Key `name`, read from the ring's directory or made by `make` (and kept there).
    pub fn key(&mut self, name: &str, make: fn() -> KeyPair) -> Result<&KeyPair, OperatorError> {
        if !self.keys.contains_key(name) {
            let key = match &self.dir {
                None => make(),
                Some(dir) => Self::kept(dir, name, make)?,
            };
            self.keys.insert(name.to_owned(), key);
        }
        Ok(&self.keys[name])
    }

    /// The users last issued in `account` (kept with the keys; none for a ring in memory).
    fn issued(&self, account: &str) -> BTreeMap<String, Issued> {
        self.kept_json::<BTreeMap<String, Issued>>(&format!("issued.{account}.json"))
            .unwrap_or_default()
    }

    /// The accounts whose users this ring issued (kept with the keys).
    fn issued_accounts(&self) -> Vec<String> {
        let Some(dir) = &self.dir else {
            return Vec::new();
        };
        std::fs::read_dir(dir)
            .into_iter()
            .flatten()
            .flatten()
            .filter_map(|e| {
                e.file_name()
                    .to_str()?
                    .strip_prefix("issued.")?
                    .strip_suffix(".json")
                    .map(str::to_owned)
            })
            .collect()
    }

    /// The user keys of `account` revoked, and up to when.
    fn revoked(&self, account: &str) -> BTreeMap<String, i64> {
        self.kept_json(&format!("revoked.{account}.json"))
            .unwrap_or_default()
    }

    fn kept_json<T: serde::de::DeserializeOwned>(&self, file: &str) -> Option<T> {
        let dir = self.dir.as_ref()?;
        serde_json::from_str(&std::fs::read_to_string(dir.join(file)).ok()?).ok()
    }

    /// Keeps what `account`'s users were issued and which keys are revoked, for next time.
    fn keep_issued(
        &self,
        account: &str,
        issued: &BTreeMap<String, Issued>,
        revoked: &BTreeMap<String, i64>,
    ) -> Result<(), OperatorError> {
        let Some(dir) = &self.dir else {
            return Ok(());
        };
        for (file, text) in [
            (
                format!("issued.{account}.json"),
                serde_json::to_string_pretty(issued).expect("issued serialises"),
            ),
            (
                format!("revoked.{account}.json"),
                serde_json::to_string_pretty(revoked).expect("revoked serialises"),
            ),
        ] {
            write_private(&dir.join(&file), text.as_bytes()).map_err(|source| {
                OperatorError::Keep {
                    name: file.clone(),
                    dir: dir.clone(),
                    source,
                }
            })?;
        }
        Ok(())
    }

    /// As [`KeyRing::key`], a copy of its own (for what keeps signing after the ring is gone).
    pub fn key_owned(
        &mut self,
        name: &str,
        make: fn() -> KeyPair,
    ) -> Result<KeyPair, OperatorError> {
        let seed = self
            .key(name, make)?
            .seed()
            .expect("a kept key has its seed");
        Ok(KeyPair::from_seed(&seed).expect("a seed read back"))
    }

    /// Uses `key` as `name` (a site's own operator or signing key) instead of making one.
    pub fn insert(&mut self, name: &str, key: KeyPair) {
        self.keys.insert(name.to_owned(), key);
    }

    /// The public keys account `account` lists as its signing keys (made and kept).
    fn delegated_keys(&mut self, account: &str) -> Result<Vec<String>, OperatorError> {
        let names = self.delegated.get(account).cloned().unwrap_or_default();
        names
            .iter()
            .map(|n| Ok(self.key(n, KeyPair::new_account)?.public_key()))
            .collect()
    }

    /// Curve key `name` (sealing), read from the ring's directory or made (and kept there).
    pub fn xkey(&mut self, name: &str) -> Result<nkeys::XKey, OperatorError> {
        let Some(dir) = &self.dir else {
            return Ok(nkeys::XKey::new());
        };
        let path = dir.join(format!("{name}.nk"));
        let keep = |source| OperatorError::Keep {
            name: name.to_owned(),
            dir: dir.clone(),
            source,
        };
        match std::fs::read_to_string(&path) {
            Ok(seed) => nkeys::XKey::from_seed(seed.trim()).map_err(|_| OperatorError::Seed {
                name: name.to_owned(),
                dir: dir.clone(),
            }),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                let key = nkeys::XKey::new();
                let seed = key.seed().expect("a made key has its seed");
                write_private(&path, seed.as_bytes()).map_err(keep)?;
                Ok(key)
            }
            Err(e) => Err(keep(e)),
        }
    }

    /// Signs with the operator key in `text` (its seed, alone or among the comment lines nsc
    /// writes around it) instead of one of the ring's own.
    pub fn use_operator(&mut self, text: &str) -> Result<(), OperatorError> {
        let key = operator_seed(text, "operator")?;
        self.insert("operator", key);
        Ok(())
    }

    /// Signs the accounts with the operator's signing key in `text` (as [`use_operator`]
    /// reads it): the operator's JWT lists it, or — a site's operator — already does.
    ///
    /// [`use_operator`]: KeyRing::use_operator
    pub fn use_signing_key(&mut self, text: &str) -> Result<(), OperatorError> {
        let key = operator_seed(text, "signing key")?;
        self.insert(SIGNER, key);
        Ok(())
    }

    /// Joins the site's own operator `site` (its JWT used as it is, its system account and
    /// user): the ring signs only accounts, with `signer` — or with one given by
    /// [`use_signing_key`](KeyRing::use_signing_key).
    pub fn use_site(&mut self, site: Site, signer: Option<KeyPair>) {
        if let Some(key) = signer {
            self.keys.entry(SIGNER.to_owned()).or_insert(key);
        }
        self.site = Some(site);
    }

    /// Account `account` lists the ring's key `name` (made and kept as an account key) as
    /// a signing key of its own: what holds it signs the account's users and nothing else.
    pub fn delegate(&mut self, account: &str, name: &str) {
        let names = self.delegated.entry(account.to_owned()).or_default();
        if !names.iter().any(|n| n == name) {
            names.push(name.to_owned());
        }
    }

    /// The key that signs every account: the operator's signing key (made and kept if the
    /// ring has none and no site's operator is used).
    pub fn signer(&mut self) -> Result<&KeyPair, OperatorError> {
        if self.site.is_some() && !self.keys.contains_key(SIGNER) {
            return Err(OperatorError::NoSigner);
        }
        self.key(SIGNER, KeyPair::new_operator)
    }

    /// The operator's public key: the site's, or the ring's own.
    fn operator_key(&mut self) -> Result<String, OperatorError> {
        match &self.site {
            Some(site) => Ok(site.operator.sub.clone()),
            None => Ok(self.key("operator", KeyPair::new_operator)?.public_key()),
        }
    }

    fn kept(dir: &Path, name: &str, make: fn() -> KeyPair) -> Result<KeyPair, OperatorError> {
        let path = dir.join(format!("{name}.nk"));
        let keep = |source| OperatorError::Keep {
            name: name.to_owned(),
            dir: dir.to_owned(),
            source,
        };
        match std::fs::read_to_string(&path) {
            Ok(seed) => {
                let key = KeyPair::from_seed(seed.trim()).map_err(|_| OperatorError::Seed {
                    name: name.to_owned(),
                    dir: dir.to_owned(),
                })?;
                // A seed of another kind (a user's where an account's belongs) is refused.
                if key.key_pair_type() != make().key_pair_type() {
                    return Err(OperatorError::Seed {
                        name: name.to_owned(),
                        dir: dir.to_owned(),
                    });
                }
                Ok(key)
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                let key = make();
                let seed = key.seed().expect("a made key has its seed");
                write_private(&path, seed.as_bytes()).map_err(keep)?;
                Ok(key)
            }
            Err(e) => Err(keep(e)),
        }
    }
}

/// A user as last issued: their key, when, and the claims (to tell a change).
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
struct Issued {
    key: String,
    iat: i64,
    claims: serde_json::Value,
}

/// An account signed: its name in the layout, its public key and its JWT.
#[derive(Debug, Clone)]
pub struct SignedAccount {
    pub name: String,
    pub key: String,
    pub jwt: String,
}

/// A user signed: their account's name, their name, their credential file's text, and
/// what they may do (their JWT's own claims, or their scope's template filled in for them).
#[derive(Debug, Clone)]
pub struct SignedUser {
    pub account: String,
    pub name: String,
    pub key: String,
    pub creds: String,
    pub claims: User,
}

/// The layout signed.
#[derive(Debug, Clone)]
pub struct Signed {
    pub operator: String,
    pub system_account: String,
    /// Every account, the system account first.
    pub accounts: Vec<SignedAccount>,
    /// Every user, the system account's own first.
    pub users: Vec<SignedUser>,
    /// The keys of accounts the layout no longer has (sent again empty): they name nobody.
    pub removed: Vec<String>,
}

impl Signed {
    pub fn account(&self, name: &str) -> Option<&SignedAccount> {
        self.accounts.iter().find(|a| a.name == name)
    }

    pub fn user(&self, account: &str, name: &str) -> Option<&SignedUser> {
        self.users
            .iter()
            .find(|u| u.account == account && u.name == name)
    }

    /// Which layout account each public key is: what nats-server stamps on a request (`acc`)
    /// is the key, and the mesh names accounts.
    pub fn names(&self) -> BTreeMap<String, String> {
        self.accounts
            .iter()
            .filter(|a| !self.removed.contains(&a.key))
            .map(|a| (a.key.clone(), a.name.clone()))
            .collect()
    }

    /// The server's trust: the operator, its system account, and a full resolver in
    /// `resolver_dir` preloaded with every account (accounts pushed later are kept there).
    pub fn server_block(&self, resolver_dir: &Path) -> String {
        let mut preload = String::new();
        for a in &self.accounts {
            preload.push_str(&format!("  {}: {}\n", a.key, quote(&a.jwt)));
        }
        format!(
            "operator: {}\nsystem_account: {}\nresolver {{\n  type: full\n  dir: {}\n  allow_delete: false\n  interval: \"2m\"\n}}\nresolver_preload {{\n{preload}}}\n",
            quote(&self.operator),
            self.system_account,
            quote(&resolver_dir.display().to_string()),
        )
    }
}

/// Signs the accounts of configuration `root` (the accounts layout as rendered): every
/// account and user it names, their exports (those for named accounts only with an
/// activation each importer carries), imports, JetStream and permissions.
pub fn sign(root: &Node, ring: &mut KeyRing) -> Result<Signed, OperatorError> {
    sign_at(root, ring, jwt::now())
}

/// [`sign`] with the clock at `now` (seconds since the epoch): users are issued then, or
/// after whatever voided them before.
pub fn sign_at(root: &Node, ring: &mut KeyRing, now: i64) -> Result<Signed, OperatorError> {
    let operator = ring.operator_key()?;
    let signer = ring.signer()?.public_key();
    if let Some(site) = &ring.site
        && !site.signs(&signer)
    {
        return Err(OperatorError::NotSigner {
            key: signer,
            operator: site.operator.name.clone(),
        });
    }
    let system = match &ring.site {
        Some(site) => site.system.key.clone(),
        None => ring
            .key(&account_key_name(SYSTEM_ACCOUNT), KeyPair::new_account)?
            .public_key(),
    };
    let blocks: Vec<(String, Node)> = root
        .get("accounts")
        .map(|a| a.entries().to_vec())
        .unwrap_or_default();
    // Every account's key first: imports and activations name them.
    let mut keys = BTreeMap::new();
    keys.insert(SYSTEM_ACCOUNT.to_owned(), system.clone());
    for (name, _) in &blocks {
        let key = ring.key(&account_key_name(name), KeyPair::new_account)?;
        keys.insert(name.clone(), key.public_key());
    }
    let key_of = |name: &str, at: &Node| {
        keys.get(name)
            .cloned()
            .ok_or_else(|| OperatorError::Layout {
                at: at.pos.to_string(),
                what: format!("account {name} is imported from but not in the layout"),
            })
    };
    // Which exports ask for an activation: exporter → subject.
    let mut private: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for (name, body) in &blocks {
        for e in items(body.get("exports")) {
            if e.get("accounts").is_some() {
                let (subject, _) = export_subject(e)?;
                private.entry(name.clone()).or_default().push(subject);
            }
        }
    }
    let mut accounts = Vec::new();
    let mut users = Vec::new();
    // An account's signing keys: those delegated (the callout's), then its scopes.
    let sign_with = |ring: &mut KeyRing, what: &str, mut claims: Claims<Account>| {
        let scopes = std::mem::take(&mut claims.nats.signing_keys);
        claims.nats.signing_keys = ring
            .delegated_keys(&claims.name)?
            .into_iter()
            .map(SigningKey::Bare)
            .chain(scopes)
            .collect();
        let key = ring.signer()?;
        claims.sign(key).map_err(|source| OperatorError::Sign {
            what: what.to_owned(),
            source,
        })
    };
    // The system account: no exports of ours, one user to push accounts with — a site's
    // own as the site keeps them.
    match ring.site.clone() {
        Some(site) => {
            accounts.push(SignedAccount {
                name: SYSTEM_ACCOUNT.to_owned(),
                key: system.clone(),
                jwt: site.system.jwt.clone(),
            });
            if let Some(creds) = site.system_user
                && let Ok((token, _)) = jwt::read_creds(&creds)
                && let Ok(claims) = Claims::<User>::verify(&token)
            {
                users.push(SignedUser {
                    account: SYSTEM_ACCOUNT.to_owned(),
                    name: SYSTEM_USER.to_owned(),
                    key: claims.sub,
                    creds,
                    claims: claims.nats,
                });
            }
        }
        None => {
            let system_jwt = sign_with(
                ring,
                "the system account",
                Claims::new(&system, SYSTEM_ACCOUNT, Account::default()),
            )?;
            accounts.push(SignedAccount {
                name: SYSTEM_ACCOUNT.to_owned(),
                key: system.clone(),
                jwt: system_jwt,
            });
            users.push(sign_user(
                ring,
                SYSTEM_ACCOUNT,
                SYSTEM_USER,
                User::default(),
                now,
            )?);
        }
    }
    for (name, body) in &blocks {
        let mut account = Account::default();
        if body.get("jetstream").is_some_and(|j| {
            matches!(&j.value, Value::Str(s) if s == "enabled")
                || matches!(j.value, Value::Bool(true))
                || matches!(j.value, Value::Map(_))
        }) {
            account.limits.jetstream = JetStreamLimits::unlimited();
        }
        for e in items(body.get("exports")) {
            account.exports.push(export(e)?);
        }
        // A JWT may not export a subject another of its exports covers (nats-server refuses
        // the account): the wider export stands for both, as the file layout's imports of
        // the narrower one still fall under it.
        let all = account.exports.clone();
        account.exports.retain(|e| {
            !all.iter().any(|o| {
                o.kind == e.kind
                    && o.subject != e.subject
                    && mesh_core::permission::covers(&o.subject, &e.subject)
            })
        });
        for i in items(body.get("imports")) {
            let (kind, from) = match (i.get("service"), i.get("stream")) {
                (Some(s), None) => (ExportType::Service, s),
                (None, Some(s)) => (ExportType::Stream, s),
                _ => return Err(bad(i, "an import is one of service or stream")),
            };
            let exporter = str_of(from, "account")?;
            let subject = str_of(from, "subject")?;
            let exporter_key = key_of(&exporter, i)?;
            let importer_key = keys[name].clone();
            let token = if private.get(&exporter).is_some_and(|subjects| {
                subjects
                    .iter()
                    .any(|s| mesh_core::permission::covers(s, &subject))
            }) {
                let claims = Claims::new(&importer_key, "", Activation::new(&subject, kind));
                let signer = ring.key(&account_key_name(&exporter), KeyPair::new_account)?;
                claims.sign(signer).map_err(|source| OperatorError::Sign {
                    what: format!("{name}'s activation for {subject} of {exporter}"),
                    source,
                })?
            } else {
                String::new()
            };
            account.imports.push(Import {
                name: String::new(),
                subject,
                account: exporter_key,
                token,
                local_subject: i
                    .get("to")
                    .and_then(Node::as_str)
                    .unwrap_or_default()
                    .to_owned(),
                kind,
                share: matches!(i.get("share").map(|s| &s.value), Some(Value::Bool(true))),
                allow_trace: false,
            });
        }
        // Its users first: a user whose claims changed, or who is gone, has every JWT issued
        // before voided in the account's revocations (a credential file handed out before a
        // grant was cut must not keep it).
        let mut issued = ring.issued(name);
        let mut revoked = ring.revoked(name);
        let mut now_users = BTreeMap::new();
        let mut scopes = Scopes::default();
        for u in items(body.get("users")) {
            let user = str_of(u, "user")?;
            let mut claims = User::default();
            if let Some(p) = u.get("permissions") {
                claims.limits.permissions = Permissions {
                    r#pub: permission(p.get("publish"))?,
                    sub: permission(p.get("subscribe"))?,
                    resp: None,
                };
            }
            claims.limits.allowed_connection_types = strings(u.get("allowed_connection_types"))?;
            let written = serde_json::to_value(&claims).expect("claims serialise");
            let before = issued.remove(&user);
            let mut at = now;
            if let Some(b) = before.as_ref().filter(|b| b.claims != written) {
                let t = revoked.entry(b.key.clone()).or_default();
                *t = (*t).max(b.iat);
                // Issued after what it voids.
                at = at.max(b.iat + 1);
            }
            // After whatever voided this user's key before (removed, then granted again within
            // the second: the new JWT must not fall under the old revocation).
            let user_key = ring
                .key(&user_key_name(name, &user), KeyPair::new_user)?
                .public_key();
            if let Some(until) = revoked.get(&user_key) {
                at = at.max(until + 1);
            }
            let signed_user = scopes.sign(ring, name, &keys[name], &user, claims, at)?;
            // The newest issued: a later change voids it and every one before it.
            now_users.insert(
                user.clone(),
                Issued {
                    key: signed_user.key.clone(),
                    iat: at,
                    claims: written,
                },
            );
            users.push(signed_user);
        }
        for (_, gone) in issued {
            let t = revoked.entry(gone.key).or_default();
            *t = (*t).max(gone.iat);
        }
        ring.keep_issued(name, &now_users, &revoked)?;
        account.revocations = revoked;
        (account.signing_keys, account.description) = scopes.into_signing_keys();
        let jwt = sign_with(
            ring,
            &format!("account {name}"),
            Claims::new(&keys[name], name, account),
        )?;
        accounts.push(SignedAccount {
            name: name.clone(),
            key: keys[name].clone(),
            jwt,
        });
    }
    // An account the layout no longer has (a module removed) is not left as it was in the
    // resolver, which keeps what it was sent: it is sent again empty — no connection, no
    // import, every user revoked.
    let mut removed = Vec::new();
    for gone in ring.issued_accounts() {
        if gone == SYSTEM_ACCOUNT || keys.contains_key(&gone) {
            continue;
        }
        let mut revoked = ring.revoked(&gone);
        for (_, user) in ring.issued(&gone) {
            let t = revoked.entry(user.key).or_default();
            *t = (*t).max(user.iat);
        }
        ring.keep_issued(&gone, &BTreeMap::new(), &revoked)?;
        let mut account = Account {
            revocations: revoked,
            ..Account::default()
        };
        account.limits.conn = 0;
        account.limits.leaf = 0;
        let key = ring
            .key(&account_key_name(&gone), KeyPair::new_account)?
            .public_key();
        let jwt = sign_with(
            ring,
            &format!("account {gone} (removed)"),
            Claims::new(&key, &gone, account),
        )?;
        removed.push(key.clone());
        accounts.push(SignedAccount {
            name: gone,
            key,
            jwt,
        });
    }
    let operator_jwt = match &ring.site {
        // The site's servers trust its operator as nsc wrote it.
        Some(site) => site.operator_jwt.clone(),
        None => Claims::new(
            &operator,
            "mesh",
            Operator {
                system_account: system.clone(),
                signing_keys: if signer == operator {
                    Vec::new()
                } else {
                    vec![signer.clone()]
                },
                ..Operator::default()
            },
        )
        .sign(ring.key("operator", KeyPair::new_operator)?)
        .map_err(|source| OperatorError::Sign {
            what: "the operator".into(),
            source,
        })?,
    };
    Ok(Signed {
        operator: operator_jwt,
        system_account: system,
        accounts,
        users,
        removed,
    })
}

/// What a full resolver said of one account sent to it.
#[derive(Debug, Clone)]
pub struct Pushed {
    pub name: String,
    pub key: String,
    /// Taken and read back the same, or why not.
    pub outcome: Result<(), String>,
}

/// Sends every account of `signed` but the system account to the full resolver `client`
/// reaches (as the system account's user), and reads each back: the servers of a cluster
/// share what one of them takes, with no configuration reload.
pub async fn push(client: &async_nats::Client, signed: &Signed) -> Vec<Pushed> {
    const WITHIN: std::time::Duration = std::time::Duration::from_secs(10);
    let mut out = Vec::new();
    for a in signed.accounts.iter().filter(|a| a.name != SYSTEM_ACCOUNT) {
        let outcome = async {
            let said = tokio::time::timeout(
                WITHIN,
                client.request("$SYS.REQ.CLAIMS.UPDATE", a.jwt.clone().into()),
            )
            .await
            .map_err(|_| "the resolver did not answer within 10 s".to_owned())?
            .map_err(|e| format!("the resolver cannot be asked: {e}"))?;
            let said: serde_json::Value = serde_json::from_slice(&said.payload)
                .map_err(|e| format!("the resolver's answer does not read: {e}"))?;
            if let Some(e) = said.get("error") {
                return Err(format!(
                    "the resolver refused it: {}",
                    e["description"].as_str().unwrap_or("no reason given")
                ));
            }
            let read = tokio::time::timeout(
                WITHIN,
                client.request(
                    format!("$SYS.REQ.ACCOUNT.{}.CLAIMS.LOOKUP", a.key),
                    "".into(),
                ),
            )
            .await
            .map_err(|_| "the resolver did not say within 10 s what it keeps".to_owned())?
            .map_err(|e| format!("the resolver cannot be asked what it keeps: {e}"))?;
            if read.payload.as_ref() != a.jwt.as_bytes() {
                return Err("the resolver keeps another JWT for it (a newer one, or none)".into());
            }
            Ok(())
        }
        .await;
        out.push(Pushed {
            name: a.name.clone(),
            key: a.key.clone(),
            outcome,
        });
    }
    out
}

/// Why a full resolver's accounts could not be read.
#[derive(Debug, thiserror::Error)]
pub enum PackError {
    #[error("cannot listen for the resolver's answer")]
    Subscribe(#[source] async_nats::SubscribeError),
    #[error("cannot ask the resolver")]
    Publish(#[source] async_nats::PublishError),
    #[error(
        "no full resolver answers $SYS.REQ.CLAIMS.PACK: connect as the system account's user to a server with `resolver {{ type: full }}`"
    )]
    NoResolver,
    #[error("the resolver did not finish its answer within {0:?}")]
    Timeout(std::time::Duration),
}

/// Every account JWT the full resolver `client` reaches keeps (`client` is the system
/// account's user): `$SYS.REQ.CLAIMS.PACK` asked with a hash no store has, answered by one
/// server with a message per JWT (`<key>|<jwt>`) and an empty one at the end. Returns the
/// messages' texts.
pub async fn pack(
    client: &async_nats::Client,
    within: std::time::Duration,
) -> Result<Vec<String>, PackError> {
    use futures_util::StreamExt;
    let inbox = client.new_inbox();
    let mut answers = client
        .subscribe(inbox.clone())
        .await
        .map_err(PackError::Subscribe)?;
    client
        .publish_with_reply("$SYS.REQ.CLAIMS.PACK", inbox, bytes::Bytes::new())
        .await
        .map_err(PackError::Publish)?;
    let mut out = Vec::new();
    loop {
        let next = tokio::time::timeout(within, answers.next())
            .await
            .map_err(|_| PackError::Timeout(within))?;
        let Some(msg) = next else {
            return Err(PackError::Timeout(within));
        };
        if msg
            .status
            .is_some_and(|s| s == async_nats::StatusCode::NO_RESPONDERS)
        {
            return Err(PackError::NoResolver);
        }
        if msg.payload.is_empty() {
            return Ok(out);
        }
        out.push(String::from_utf8_lossy(&msg.payload).into_owned());
    }
}

/// Configuration `rendered` (the layout as `layout.rs` writes it) without its `accounts`
/// block: what is left (listen, JetStream, cluster, TLS) goes beside [`Signed::server_block`].
pub fn without_accounts(rendered: &str) -> String {
    let mut out = String::with_capacity(rendered.len());
    let mut lines = rendered.lines();
    while let Some(line) = lines.next() {
        let head = line.trim_start();
        if line.len() == head.len()
            && (head.starts_with("accounts {") || head.starts_with("accounts: {"))
        {
            // Skip to the brace that closes it, minding quoted text and comments.
            let mut depth = 0i64;
            let mut rest = line.to_owned();
            loop {
                depth += braces(&rest);
                if depth <= 0 {
                    break;
                }
                match lines.next() {
                    Some(next) => rest = next.to_owned(),
                    None => break,
                }
            }
            continue;
        }
        out.push_str(line);
        out.push('\n');
    }
    out
}

/// Opening braces less closing ones on `line`, outside quotes and comments.
fn braces(line: &str) -> i64 {
    let mut n = 0;
    let mut quoted: Option<char> = None;
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        match (quoted, c) {
            (Some('"'), '\\') => {
                chars.next();
            }
            (Some(q), c) if c == q => quoted = None,
            (Some(_), _) => {}
            (None, '"' | '\'') => quoted = Some(c),
            (None, '#') => break,
            (None, '/') if chars.peek() == Some(&'/') => break,
            (None, '{') => n += 1,
            (None, '}') => n -= 1,
            _ => {}
        }
    }
    n
}

fn account_key_name(account: &str) -> String {
    format!("account.{account}")
}

/// The name user `name` of `account`'s key is kept under.
fn user_key_name(account: &str, name: &str) -> String {
    format!("user.{account}.{name}")
}

/// The operator key whose seed `text` holds (alone or among the comment lines nsc writes
/// around it); `what` names it in the error.
fn operator_seed(text: &str, what: &str) -> Result<KeyPair, OperatorError> {
    let seed = text
        .lines()
        .map(str::trim)
        .find(|l| l.starts_with("SO"))
        .unwrap_or_default();
    match KeyPair::from_seed(seed) {
        Ok(key) if key.key_pair_type() == nkeys::KeyPairType::Operator => Ok(key),
        _ => Err(OperatorError::Seed {
            name: what.into(),
            dir: PathBuf::from("the file given"),
        }),
    }
}

/// User `name` of `account` signed by the account's own key, their JWT saying `claims`.
fn sign_user(
    ring: &mut KeyRing,
    account: &str,
    name: &str,
    claims: User,
    at: i64,
) -> Result<SignedUser, OperatorError> {
    let signer = account_key_name(account);
    sign_user_with(ring, &signer, account, name, claims.clone(), claims, at)
}

/// User `name` of `account` signed by the ring's key `signer`, their JWT saying `said`, what
/// they may do being `claims`.
fn sign_user_with(
    ring: &mut KeyRing,
    signer: &str,
    account: &str,
    name: &str,
    said: User,
    claims: User,
    at: i64,
) -> Result<SignedUser, OperatorError> {
    let user = ring.key(&user_key_name(account, name), KeyPair::new_user)?;
    let key = user.public_key();
    let seed = user.seed().expect("a user key has its seed");
    let signer = ring.key(signer, KeyPair::new_account)?;
    let jwt = Claims::new(&key, name, said)
        .sign_at(signer, at)
        .map_err(|source| OperatorError::Sign {
            what: format!("user {name} of {account}"),
            source,
        })?;
    Ok(SignedUser {
        account: account.to_owned(),
        name: name.to_owned(),
        key,
        creds: jwt::creds(&jwt, &seed),
        claims,
    })
}

/// What every scope says of itself: the same whoever has it (see
/// [`Scopes::into_signing_keys`]).
const SCOPE_DESCRIPTION: &str = "the grants some users share: whom, the account's description says";

/// An account's scoped signing keys, one per template its users' permissions make: a user's
/// JWT then names only its scope, and nats-server, which stamps a caller's whole JWT on every
/// shared request and latency event, carries a few hundred bytes where it carried every
/// subject the user may publish.
#[derive(Default)]
struct Scopes {
    /// Template digest → the scope, and who it signed.
    by_digest: BTreeMap<String, (UserScope, Vec<String>)>,
}

impl Scopes {
    /// Signs user `name` of account `account` (key `account_key`) with the scope of
    /// `claims`' template, made on first use; a user whose permissions make no template
    /// (a subject that reads as one already) is signed with its claims by the account's key.
    fn sign(
        &mut self,
        ring: &mut KeyRing,
        account: &str,
        account_key: &str,
        name: &str,
        claims: User,
        at: i64,
    ) -> Result<SignedUser, OperatorError> {
        let Some(template) = template_of(&claims.limits, name, account, account_key) else {
            return sign_user(ring, account, name, claims, at);
        };
        let text = serde_json::to_string(&template).expect("a template serialises");
        let digest: String = sha2::Sha256::digest(text.as_bytes())[..8]
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        // Named by what it grants: a key never changes its template, so a credential file
        // signed under one keeps exactly what it was handed (a grants change makes a new
        // key, and the old one, no longer listed, signs in nobody).
        let scope_name = format!("scope.{account}.{digest}");
        let scope_key = ring.key(&scope_name, KeyPair::new_account)?.public_key();
        let (_, names) = self.by_digest.entry(digest.clone()).or_insert_with(|| {
            (
                UserScope::new(&scope_key, format!("grants-{digest}"), template),
                Vec::new(),
            )
        });
        names.push(name.to_owned());
        let said = User::scoped(account_key);
        sign_user_with(ring, &scope_name, account, name, said, claims, at)
    }

    /// The scopes, for the account's JWT, and whom each was made for, for the account's
    /// description. A scope says nothing of who has it: nats-server closes every connection
    /// a scope signed when the scope changes at all (its description too), so a scope naming
    /// its people would cut off all who share it each time someone joins or leaves it.
    fn into_signing_keys(self) -> (Vec<SigningKey>, Option<String>) {
        let mut who = Vec::new();
        let mut keys: Vec<SigningKey> = self
            .by_digest
            .into_values()
            .map(|(mut scope, names)| {
                scope.description = SCOPE_DESCRIPTION.to_owned();
                who.push(format!("{}: {}", scope.role, names.join(", ")));
                SigningKey::Scoped(Box::new(scope))
            })
            .collect();
        keys.sort_by(|a, b| a.key().cmp(b.key()));
        let described = (!who.is_empty()).then(|| format!("users by grants: {}", who.join("; ")));
        (keys, described)
    }
}

/// `limits` as a template people with the same grants share: each subject token that is the
/// user's `name` becomes `{{name()}}`. None when the template would not fill back in to
/// exactly `limits` (a subject that holds `{{`, a name no subject token can be).
fn template_of(
    limits: &PermissionLimits,
    name: &str,
    account: &str,
    account_key: &str,
) -> Option<PermissionLimits> {
    let token = !name.is_empty()
        && name != "*"
        && name != ">"
        && !name.contains(['.', ' ', '\t', '\n', '\r', '\x0c', '{', '}']);
    let templated = |list: &[String]| -> Vec<String> {
        list.iter()
            .map(|subject| {
                if !token {
                    return subject.clone();
                }
                subject
                    .split('.')
                    .map(|t| if t == name { "{{name()}}" } else { t })
                    .collect::<Vec<_>>()
                    .join(".")
            })
            .collect()
    };
    let mut template = limits.clone();
    for (from, to) in [
        (&limits.permissions.r#pub, &mut template.permissions.r#pub),
        (&limits.permissions.sub, &mut template.permissions.sub),
    ] {
        to.allow = templated(&from.allow);
        to.deny = templated(&from.deny);
    }
    // The user's key is not known to the template: `{{subject()}}` never appears in it.
    let user = jwt::Who {
        name,
        key: "",
        tags: &[],
    };
    let of = jwt::Who {
        name: account,
        key: account_key,
        tags: &[],
    };
    let back = template.filled(user, of).ok()?;
    (back == *limits).then_some(template)
}

fn export(e: &Node) -> Result<Export, OperatorError> {
    let (subject, kind) = export_subject(e)?;
    let response_type = match e.get("response").and_then(Node::as_str) {
        None => None,
        Some(r) if r.eq_ignore_ascii_case("singleton") => Some(ResponseType::Singleton),
        Some(r) if r.eq_ignore_ascii_case("stream") => Some(ResponseType::Stream),
        Some(r) if r.eq_ignore_ascii_case("chunked") => Some(ResponseType::Chunked),
        Some(r) => {
            return Err(bad(
                e,
                &format!("response {r:?} is none of singleton, stream, chunked"),
            ));
        }
    };
    let response_threshold = match e.get("threshold") {
        None => None,
        Some(t) => {
            let text = t
                .as_str()
                .ok_or_else(|| bad(t, "a threshold is a duration"))?;
            let d = crate::duration::parse_duration(text).map_err(|why| bad(t, &why))?;
            Some(d.as_nanos() as i64)
        }
    };
    let service_latency = match e.get("latency") {
        None => None,
        Some(l) => {
            let sampling = match l.get("sampling").map(|s| &s.value) {
                Some(Value::Int(n)) => *n,
                Some(Value::Str(s)) => s.trim_end_matches('%').parse().unwrap_or(0),
                _ => 100,
            };
            if !(1..=100).contains(&sampling) {
                return Err(bad(l, "latency sampling is a share from 1% to 100%"));
            }
            Some(ServiceLatency {
                sampling: sampling as u8,
                results: str_of(l, "subject")?,
            })
        }
    };
    Ok(Export {
        name: String::new(),
        subject,
        kind,
        token_req: e.get("accounts").is_some(),
        response_type,
        response_threshold,
        service_latency,
        allow_trace: matches!(
            e.get("allow_trace").map(|a| &a.value),
            Some(Value::Bool(true))
        ),
    })
}

fn export_subject(e: &Node) -> Result<(String, ExportType), OperatorError> {
    match (e.get("service"), e.get("stream")) {
        (Some(s), None) => Ok((text(s)?, ExportType::Service)),
        (None, Some(s)) => Ok((text(s)?, ExportType::Stream)),
        _ => Err(bad(e, "an export is one of service or stream")),
    }
}

fn permission(node: Option<&Node>) -> Result<Permission, OperatorError> {
    let Some(node) = node else {
        return Ok(Permission::default());
    };
    match &node.value {
        // A bare list is what may be done.
        Value::Array(_) | Value::Str(_) => Ok(Permission {
            allow: strings(Some(node))?,
            deny: Vec::new(),
        }),
        Value::Map(_) => Ok(Permission {
            allow: strings(node.get("allow"))?,
            deny: strings(node.get("deny"))?,
        }),
        _ => Err(bad(node, "a permission is a list or allow/deny")),
    }
}

fn strings(node: Option<&Node>) -> Result<Vec<String>, OperatorError> {
    match node.map(|n| (&n.value, n)) {
        None => Ok(Vec::new()),
        Some((Value::Str(s), _)) => Ok(vec![s.clone()]),
        Some((Value::Array(items), _)) => items.iter().map(text).collect(),
        Some((_, n)) => Err(bad(n, "expected a list of subjects")),
    }
}

fn items(node: Option<&Node>) -> &[Node] {
    match node.map(|n| &n.value) {
        Some(Value::Array(items)) => items,
        _ => &[],
    }
}

fn text(node: &Node) -> Result<String, OperatorError> {
    node.as_str()
        .map(str::to_owned)
        .ok_or_else(|| bad(node, "expected a string"))
}

fn str_of(node: &Node, key: &str) -> Result<String, OperatorError> {
    node.get(key)
        .ok_or_else(|| bad(node, &format!("{key} is missing")))
        .and_then(text)
}

fn bad(node: &Node, what: &str) -> OperatorError {
    OperatorError::Layout {
        at: node.pos.to_string(),
        what: what.to_owned(),
    }
}

fn quote(s: &str) -> String {
    serde_json::to_string(s).expect("a string serialises")
}

fn set_mode(path: &Path, mode: u32) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
}

/// Writes `bytes` to a new file only its owner reads.
pub fn write_private(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)?;
    set_mode(path, 0o600)?;
    file.write_all(bytes)
}
