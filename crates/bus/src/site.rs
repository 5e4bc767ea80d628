//! A site's own operator, as nsc keeps it: its JWT used as it is (never signed again here),
//! its system account and that account's user, and the operator's key that signs the mesh's
//! accounts — so that the mesh's accounts join a trust the site already runs.
//!
//! nsc's layout (nats-io/nsc, `cmd/store`): a store per operator, `<stores>/<operator>/`
//! holding `.nsc`, `<operator>.jwt` and `accounts/<account>/<account>.jwt` (users under
//! `accounts/<account>/users/<user>.jwt`); seeds apart in the keys folder,
//! `keys/<kind>/<two letters>/<public key>.nk`, and credential files in
//! `creds/<operator>/<account>/<user>.creds`.

use std::path::{Path, PathBuf};

use nkeys::KeyPair;

use crate::jwt::{self, Claims, JwtError, Operator, User};

/// Why a site's operator could not be read.
#[derive(Debug, thiserror::Error)]
pub enum SiteError {
    #[error("cannot read {}", path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{} is not a JWT its issuer signed", path.display())]
    Jwt {
        path: PathBuf,
        #[source]
        source: JwtError,
    },
    #[error(
        "{} is not an operator's own JWT (it must be signed by the operator it names): give nsc's store of the operator (`nsc env` shows it)",
        path.display()
    )]
    NotOperator { path: PathBuf },
    #[error(
        "operator {operator} names no system account: add one with `nsc add account SYS` and `nsc edit operator --system-account SYS`"
    )]
    NoSystemAccount { operator: String },
    #[error(
        "the system account {key} of operator {operator} is not in {} (or its JWT is not the operator's): `nsc describe operator` names it",
        dir.display()
    )]
    SystemAccountMissing {
        operator: String,
        key: String,
        dir: PathBuf,
    },
    #[error(
        "no key of operator {operator} is in {}: give one with --signing-key (an nkey seed file, SO…), or --nsc-keys where nsc keeps them",
        keys.display()
    )]
    NoSigner { operator: String, keys: PathBuf },
}

/// An account of the site's (its system account): its name, public key and JWT.
#[derive(Debug, Clone)]
pub struct SiteAccount {
    pub name: String,
    pub key: String,
    pub jwt: String,
}

/// A site's operator: the trust its servers run, used by the mesh without signing it again.
#[derive(Debug, Clone)]
pub struct Site {
    /// The operator's JWT, as the site's servers have it.
    pub operator_jwt: String,
    pub operator: Claims<Operator>,
    pub system: SiteAccount,
    /// A user of the system account (its credential file's text), to push accounts with;
    /// none when nsc keeps no seed for any.
    pub system_user: Option<String>,
}

impl Site {
    /// Whether `key` may sign the operator's accounts: the operator's own key or one of its
    /// signing keys.
    pub fn signs(&self, key: &str) -> bool {
        (key == self.operator.sub && !self.operator.nats.strict_signing_key_usage)
            || self.operator.nats.signing_keys.iter().any(|k| k == key)
    }

    /// The operator in nsc's store `store` (`<stores>/<operator>`), with the seeds nsc keeps
    /// in `keys`; and the key found there to sign accounts with — a signing key of the
    /// operator's first (what nsc's `--generate-signing-key` makes), else its own key.
    pub fn from_nsc(store: &Path, keys: &Path) -> Result<(Site, Option<KeyPair>), SiteError> {
        let name = store_name(store);
        let operator_path = store.join(format!("{name}.jwt"));
        let operator_jwt = read(&operator_path)?;
        let operator: Claims<Operator> =
            Claims::verify(&operator_jwt).map_err(|source| SiteError::Jwt {
                path: operator_path.clone(),
                source,
            })?;
        if operator.iss != operator.sub || operator.nats.generic.kind != "operator" {
            return Err(SiteError::NotOperator {
                path: operator_path,
            });
        }
        let system_key = operator.nats.system_account.clone();
        if system_key.is_empty() {
            return Err(SiteError::NoSystemAccount {
                operator: operator.name.clone(),
            });
        }
        let accounts = store.join("accounts");
        let missing = || SiteError::SystemAccountMissing {
            operator: operator.name.clone(),
            key: system_key.clone(),
            dir: accounts.clone(),
        };
        let (system_name, system_jwt) = subfolders(&accounts)
            .into_iter()
            .find_map(|account| {
                let text = read(&accounts.join(&account).join(format!("{account}.jwt"))).ok()?;
                let claims: Claims<serde_json::Value> = Claims::verify(&text).ok()?;
                (claims.sub == system_key).then_some((account, text, claims))
            })
            .filter(|(_, _, claims)| {
                claims.iss == operator.sub || operator.nats.signing_keys.contains(&claims.iss)
            })
            .map(|(name, text, _)| (name, text))
            .ok_or_else(missing)?;
        let system_user = system_user(
            keys,
            &name,
            &system_name,
            &system_key,
            &accounts.join(&system_name),
        );
        let site = Site {
            operator_jwt: operator_jwt.trim().to_owned(),
            system: SiteAccount {
                name: system_name,
                key: system_key,
                jwt: system_jwt.trim().to_owned(),
            },
            system_user,
            operator,
        };
        let signer = site
            .operator
            .nats
            .signing_keys
            .iter()
            .chain(std::iter::once(&site.operator.sub))
            .filter(|public| site.signs(public))
            .find_map(|public| seed_of(keys, public));
        Ok((site, signer))
    }
}

/// nsc's folder of seeds: `$NKEYS_PATH`, else `$XDG_DATA_HOME/nats/nsc/keys`, else
/// `~/.local/share/nats/nsc/keys` (where nsc itself looks).
pub fn nsc_keys_dir() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("NKEYS_PATH").filter(|p| !p.is_empty()) {
        return Some(PathBuf::from(p));
    }
    let data = match std::env::var_os("XDG_DATA_HOME").filter(|p| !p.is_empty()) {
        Some(d) => PathBuf::from(d),
        None => PathBuf::from(std::env::var_os("HOME")?).join(".local/share"),
    };
    Some(data.join("nats/nsc/keys"))
}

/// The operator's name in its store: `.nsc`'s `name`, else the folder's own. A name that is
/// not one plain path component (`../OTHER`, `/elsewhere/OTHER`) is not taken: it would have
/// the operator's JWT, and the trust the servers are written with, read from outside the store.
fn store_name(store: &Path) -> String {
    #[derive(serde::Deserialize)]
    struct Info {
        name: String,
    }
    std::fs::read_to_string(store.join(".nsc"))
        .ok()
        .and_then(|t| serde_json::from_str::<Info>(&t).ok())
        .map(|i| i.name)
        .filter(|n| {
            let mut parts = Path::new(n).components();
            matches!(
                (parts.next(), parts.next()),
                (Some(std::path::Component::Normal(_)), None)
            )
        })
        .unwrap_or_else(|| {
            store
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default()
        })
}

/// A credential file of a user of the system account: one nsc wrote, else one made from a
/// user's JWT and the seed nsc keeps for it.
fn system_user(
    keys: &Path,
    operator: &str,
    account: &str,
    account_key: &str,
    account_dir: &Path,
) -> Option<String> {
    let creds_dir = keys.join("creds").join(operator).join(account);
    let mut written: Vec<PathBuf> = std::fs::read_dir(&creds_dir)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "creds"))
        .collect();
    written.sort();
    let of_account = |creds: &str| {
        let (token, _) = jwt::read_creds(creds).ok()?;
        let claims: Claims<User> = Claims::verify(&token).ok()?;
        let issuer = if claims.nats.issuer_account.is_empty() {
            &claims.iss
        } else {
            &claims.nats.issuer_account
        };
        (issuer == account_key).then_some(())
    };
    if let Some(text) = written
        .iter()
        .filter_map(|p| std::fs::read_to_string(p).ok())
        .find(|t| of_account(t).is_some())
    {
        return Some(text);
    }
    let users = account_dir.join("users");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&users)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "jwt"))
        .collect();
    files.sort();
    files.into_iter().find_map(|path| {
        let token = read(&path).ok()?;
        let claims: Claims<User> = Claims::verify(&token).ok()?;
        let seed = seed_of(keys, &claims.sub)?.seed().ok()?;
        let creds = jwt::creds(token.trim(), &seed);
        of_account(&creds).map(|_| creds)
    })
}

/// The key pair whose seed nsc keeps for `public` in `keys` (`keys/<kind>/<two>/<key>.nk`).
fn seed_of(keys: &Path, public: &str) -> Option<KeyPair> {
    let (kind, shard) = (public.get(0..1)?, public.get(1..3)?);
    let path = keys
        .join("keys")
        .join(kind)
        .join(shard)
        .join(format!("{public}.nk"));
    let text = std::fs::read_to_string(path).ok()?;
    let key = KeyPair::from_seed(text.trim()).ok()?;
    (key.public_key() == public).then_some(key)
}

fn subfolders(dir: &Path) -> Vec<String> {
    let mut out: Vec<String> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| e.path().is_dir())
        .filter_map(|e| e.file_name().to_str().map(str::to_owned))
        .collect();
    out.sort();
    out
}

fn read(path: &Path) -> Result<String, SiteError> {
    std::fs::read_to_string(path).map_err(|source| SiteError::Read {
        path: path.to_owned(),
        source,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `.nsc` names the operator, and with it where the operator's JWT is read: only a
    /// plain name inside the store is taken, never a path out of it.
    #[test]
    fn the_operator_s_name_never_leads_out_of_its_store() {
        let dir = tempfile::tempdir().unwrap();
        let store = dir.path().join("ACME");
        std::fs::create_dir_all(&store).unwrap();
        for (written, read) in [
            ("ACME", "ACME"),
            ("Acme Corp", "Acme Corp"),
            ("../OTHER", "ACME"),
            ("/elsewhere/OTHER", "ACME"),
            ("sub/OTHER", "ACME"),
            ("..", "ACME"),
            ("", "ACME"),
        ] {
            std::fs::write(
                store.join(".nsc"),
                serde_json::json!({ "name": written }).to_string(),
            )
            .unwrap();
            assert_eq!(store_name(&store), read, "{written}");
        }
    }
}
