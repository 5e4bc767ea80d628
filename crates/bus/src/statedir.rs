//! The state directory `mesh up` keeps: the grants file (written on the first start, never
//! after), every user's credentials, the people's limits where the catalogue reads them,
//! and a `nats` context for each module and person.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use mesh_core::client::{ConnectConfig, Context, write_private};
use mesh_core::subjects::calllog;

use crate::cluster::Slot;
use crate::grants::{Grants, Rendered};
use crate::layout;
use crate::natsconf::ConfError;

/// The context written for the person, selected so commands work without flags.
pub const CONTEXT: &str = "mesh";
/// A second person who may call only `echo`: the tour's way to see "denied".
pub const GUEST: &str = "guest";
/// The context of the mesh's owner, who reads the call log (no person's name has a dot).
pub const OWNER_CONTEXT: &str = "mesh.owner";
/// The grants file in the state directory: written on the first start, never after.
pub const GRANTS_FILE: &str = "grants.conf";
/// Every credential `mesh up` generated, by user, reused on every start (mode 0600).
pub const CREDENTIALS_FILE: &str = "credentials.json";
/// A file per module (`<module>.json`, a `nats` context: the bus and that module's user and
/// password, mode 0600) in this folder of the state directory (mode 0700).
pub const CREDENTIALS_DIR: &str = "credentials";
/// The callers' limits the catalogue publishes, under `<state>/catalog` (written from the
/// grants file at each start and reload).
pub const LIMITS_FILE: &str = "limits.json";
/// Who may call what, for the ticket issuer, under `<state>/catalog` (written beside the
/// limits): each person's subjects as the grants file's roles give them.
pub const PEOPLE_FILE: &str = "people.json";

/// What keeping the state directory can fail on; each names the file and what to do.
#[derive(Debug, thiserror::Error)]
pub enum StateError {
    #[error("cannot write {}", path.display())]
    Write {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot read {}", path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(
        "{} is not a JSON object of user → password; fix or remove it (everyone then gets a new password)",
        path.display()
    )]
    Credentials {
        path: PathBuf,
        #[source]
        source: serde_json::Error,
    },
    #[error("cannot read the grants")]
    Grants(#[source] ConfError),
    #[error("cannot write the nats context {name}")]
    Context {
        name: String,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot sign the accounts for operator mode")]
    Operator(#[source] crate::operator::OperatorError),
    #[error("cannot set up people's sign-in with their identity provider")]
    Callout(#[source] crate::callout::CalloutError),
}

/// Where operator mode keeps its keys, JWTs, credential files and `accounts.json`.
pub const OPERATOR_DIR: &str = "operator";

/// How the users `mesh up` makes log in: a password each, kept in [`CREDENTIALS_FILE`] (the
/// file layout), or a credential file each, signed under [`OPERATOR_DIR`] (operator mode: no
/// password is kept anywhere).
#[derive(Debug, Clone)]
pub struct Logins {
    /// Each user's password, by user (the owner as `owner@MESH`); in operator mode made for
    /// the rendering the JWTs are signed from, and kept nowhere.
    pub passwords: BTreeMap<String, String>,
    /// Operator mode: the folder of its files.
    pub operator: Option<PathBuf>,
    /// Which account each user is in.
    accounts: BTreeMap<String, String>,
    /// Operator mode with people from an identity provider: the provider, and what each
    /// person may do as the running callout reads it.
    idp: Option<(crate::callout::Provider, crate::callout::Grants)>,
    /// Each person's grants as last pushed: whom a push changes is signed out.
    pushed: crate::callout::Grants,
}

impl Logins {
    /// The logins of the grants' users in state directory `dir`.
    pub fn new(dir: &Path, grants: &Grants, operator: bool) -> Result<Logins, StateError> {
        let passwords = if operator {
            grants
                .render_with(-1, &dir.join("jetstream"), &BTreeMap::new())
                .passwords
        } else {
            credentials(dir, grants)?
        };
        let mut accounts: BTreeMap<String, String> = grants
            .people
            .iter()
            .map(|p| (p.user.clone(), layout::PEOPLE_ACCOUNT.to_owned()))
            .collect();
        accounts.extend(
            grants
                .modules
                .iter()
                .map(|m| (m.name.clone(), mesh_core::subjects::module_account(&m.name))),
        );
        accounts.insert(calllog::OWNER.to_owned(), calllog::ACCOUNT.to_owned());
        Ok(Logins {
            passwords,
            operator: operator.then(|| dir.join(OPERATOR_DIR)),
            accounts,
            idp: None,
            pushed: Default::default(),
        })
    }

    /// People may also sign in with `provider`'s ID tokens (operator mode).
    pub fn with_idp(mut self, provider: crate::callout::Provider) -> Logins {
        self.idp = Some((provider, Default::default()));
        self
    }

    /// Keeps the people's sign-in of `before` (the running callout reads its grants).
    pub fn keeping_idp(mut self, before: &Logins) -> Logins {
        self.idp.clone_from(&before.idp);
        self.pushed = before.pushed.clone();
        self
    }

    /// The credential everyone signing in with an ID token connects with (operator mode with
    /// an identity provider).
    pub fn sentinel(&self) -> Option<PathBuf> {
        self.idp.as_ref()?;
        let dir = self.operator.as_ref()?;
        Some(dir.join("creds").join(format!(
            "{}.{}.creds",
            crate::callout::ACCOUNT,
            crate::callout::SENTINEL_USER
        )))
    }

    /// The callout that lets people in with their ID tokens, and how it connects: `None`
    /// without an identity provider.
    pub fn callout(
        &self,
        url: &str,
        grants: &Grants,
    ) -> Result<Option<(crate::callout::Callout, ConnectConfig)>, StateError> {
        let Some(dir) = &self.operator else {
            return Ok(None);
        };
        let Some((_, Some(callout))) = self.sign_all(grants)? else {
            return Ok(None);
        };
        let connect = ConnectConfig {
            server: Some(url.to_owned()),
            creds: Some(dir.join("creds").join(format!(
                "{}.{}.creds",
                crate::callout::ACCOUNT,
                crate::callout::SERVICE_USER
            ))),
            name: Some("mesh up: people's sign-in".into()),
            isolated: true,
            ..Default::default()
        };
        Ok(Some((callout, connect)))
    }

    /// `user`'s password (the file layout's).
    pub fn password(&self, user: &str) -> Option<&str> {
        let key = if user == calllog::OWNER {
            calllog::OWNER_CREDENTIAL
        } else {
            user
        };
        self.passwords.get(key).map(String::as_str)
    }

    /// `user`'s credential file (operator mode's).
    pub fn creds(&self, user: &str) -> Option<PathBuf> {
        let dir = self.operator.as_ref()?;
        let account = self.accounts.get(user)?;
        Some(dir.join("creds").join(format!("{account}.{user}.creds")))
    }

    /// Which account each key is (operator mode), for the modules (`MESH_ACCOUNTS`).
    pub fn accounts_file(&self) -> Option<PathBuf> {
        self.operator.as_ref().map(|d| d.join("accounts.json"))
    }

    /// How to connect as `user` on `url`: that user alone, nothing of the environment.
    pub fn connect(&self, url: &str, user: &str, what: &str) -> ConnectConfig {
        let creds = self.creds(user);
        ConnectConfig {
            server: Some(url.to_owned()),
            user: creds.is_none().then(|| user.to_owned()),
            password: creds
                .is_none()
                .then(|| self.password(user).map(str::to_owned))
                .flatten(),
            creds,
            inbox_prefix: Some(layout::inbox_prefix(user)),
            name: Some(format!("mesh up: {what}")),
            isolated: true,
            ..Default::default()
        }
    }

    /// Operator mode: the grants' layout signed, every JWT and credential file written under
    /// [`OPERATOR_DIR`] (the keys kept there); `None` in the file layout.
    pub fn sign(&self, grants: &Grants) -> Result<Option<crate::operator::Signed>, StateError> {
        Ok(self.sign_all(grants)?.map(|(signed, _)| signed))
    }

    /// As [`Logins::sign`], and the callout that answers for the layout signed (with an
    /// identity provider): one signing for both.
    fn sign_all(
        &self,
        grants: &Grants,
    ) -> Result<Option<(crate::operator::Signed, Option<crate::callout::Callout>)>, StateError>
    {
        let Some(dir) = &self.operator else {
            return Ok(None);
        };
        let rendered = grants
            .render_with(-1, &dir.join("jetstream"), &self.passwords)
            .config;
        let root = crate::natsconf::parse_str(&rendered, Path::new("accounts.conf"))
            .map_err(StateError::Grants)?;
        let mut ring =
            crate::operator::KeyRing::open(&dir.join("keys")).map_err(StateError::Operator)?;
        if self.idp.is_some() {
            // PEOPLE lists the callout's signing key: the callout never holds PEOPLE's own.
            crate::callout::delegate(&mut ring);
        }
        let mut signed = crate::operator::sign(&root, &mut ring).map_err(StateError::Operator)?;
        let mut callout = None;
        if let Some((provider, shared)) = &self.idp {
            // The people the callout lets in, as the grants say now.
            *shared.write().unwrap_or_else(|e| e.into_inner()) = crate::callout::people_of(&signed);
            callout = Some(
                crate::callout::add_to(&mut signed, &mut ring, provider.clone(), shared.clone())
                    .map_err(StateError::Callout)?,
            );
        }
        let creds = dir.join("creds");
        mesh_core::runtime::private_dir(&creds).map_err(write_error(&creds))?;
        for u in &signed.users {
            let path = creds.join(format!("{}.{}.creds", u.account, u.name));
            write_private(&path, &u.creds).map_err(write_error(&path))?;
        }
        let names = dir.join("accounts.json");
        std::fs::write(&names, pretty(&signed.names())).map_err(write_error(&names))?;
        // How the callout names people, for `mesh audit` (none kept without a provider).
        let mapping = dir.join(crate::callout::MAPPING_FILE);
        match &self.idp {
            Some((provider, _)) => std::fs::write(&mapping, pretty(&provider.mapping()))
                .map_err(write_error(&mapping))?,
            None => {
                let _ = std::fs::remove_file(&mapping);
            }
        }
        // This process's own modules and relays name callers by them too.
        mesh_core::actor::learn_accounts(signed.names());
        mesh_core::actor::forget_accounts(&signed.removed);
        Ok(Some((signed, callout)))
    }

    /// Operator mode: sends the grants' accounts, signed, to the servers' resolver at `url`
    /// as the system account's user, so that a change reaches every server without a reload.
    pub async fn push(&self, url: &str, grants: &Grants) -> Result<(), PushError> {
        let Some(dir) = &self.operator else {
            return Ok(());
        };
        let signed = self.sign(grants).map_err(PushError::Sign)?;
        let signed = signed.expect("operator mode signs");
        let creds = dir.join("creds").join(format!(
            "{}.{}.creds",
            crate::operator::SYSTEM_ACCOUNT,
            crate::operator::SYSTEM_USER
        ));
        let client = async_nats::ConnectOptions::with_credentials_file(&creds)
            .await
            .map_err(|source| PushError::Creds {
                path: creds.clone(),
                source,
            })?
            .name("mesh up: the accounts")
            .connect(url)
            .await
            .map_err(PushError::Connect)?;
        let refused: Vec<String> = crate::operator::push(&client, &signed)
            .await
            .into_iter()
            .filter_map(|p| p.outcome.err().map(|why| format!("{}: {why}", p.name)))
            .collect();
        if !refused.is_empty() {
            return Err(PushError::Refused(refused.join("; ")));
        }
        // A person signed in through the callout keeps the grants they signed in with for as
        // long as the connection lasts: whoever's changed is signed out, to sign in again.
        if let (Some((_, shared)), Some(people)) =
            (&self.idp, signed.account(layout::PEOPLE_ACCOUNT))
        {
            let now = shared.read().unwrap_or_else(|e| e.into_inner()).clone();
            let before = std::mem::replace(
                &mut *self.pushed.write().unwrap_or_else(|e| e.into_inner()),
                now.clone(),
            );
            let changed = crate::callout::changed(&before, &now);
            // The accounts are pushed by now: a sign-out that fails is said, not a failed push.
            if !changed.is_empty() {
                match crate::callout::sign_out(&client, &people.key, &changed).await {
                    Ok(closed) => tracing::info!(
                        people = ?changed,
                        closed,
                        "signed out the people whose grants changed"
                    ),
                    Err(e) => tracing::warn!(
                        people = ?changed,
                        "the people whose grants changed keep their sessions until their tokens expire: {}",
                        mesh_core::client::said(&e)
                    ),
                }
            }
        }
        Ok(())
    }
}

/// Why operator mode's accounts did not reach the servers.
#[derive(Debug, thiserror::Error)]
pub enum PushError {
    #[error(transparent)]
    Sign(StateError),
    #[error("cannot read the system account's credential file {}", path.display())]
    Creds {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot reach the servers as the system account's user")]
    Connect(#[source] async_nats::ConnectError),
    #[error("the resolver did not take every account: {0}")]
    Refused(String),
}

fn write_error(path: &Path) -> impl FnOnce(std::io::Error) -> StateError + '_ {
    move |source| StateError::Write {
        path: path.to_owned(),
        source,
    }
}

/// The grants file `mesh up` writes on its first start.
pub fn default_grants(person: &str) -> String {
    format!(
        r#"# Who may call what on this mesh. `mesh up` wrote this file on its first start and
# never overwrites it: edit it, then run `mesh up --reload` (or send mesh up SIGHUP).
# The syntax is nats-server's; see subjects/README.md, "Grants files".

modules {{
  catalog {{}}
  echo {{}}
  avu {{}}
  # decide writes AVUs through avu as the person who called decide_apply.
  decide {{ calls_for_people: [avu] }}
  # A module of your own (see README, "Add your own module"): the Python example,
  # units {{}}
  # and one that may call echo as itself:
  # weather {{ calls: [echo_echo] }}
}}

roles {{
  everything {{ all: true }}
  # A share of each module: calls in flight (more wait their turn) and calls a minute (more
  # are answered busy). Without limits a person runs a fair share: the module's capacity
  # divided among the callers using it at the time.
  guest {{ tools: [echo], limits: {{ in_flight: 8, per_minute: 600 }} }}
}}

people {{
  {person} {{ roles: [everything] }}
  {GUEST} {{ roles: [guest] }}
}}

# The call log nats-server keeps of every call (`mesh audit calls`): who besides the mesh's
# owner may read it, and how long and how much of it is kept.
log {{ auditors: [{person}], max_age: "30d", max_bytes: "1GB" }}
"#
    )
}

/// The grants in the state directory, writing the default file first if there is none.
pub fn grants(dir: &Path, person: &str) -> Result<(PathBuf, Grants), StateError> {
    let path = dir.join(GRANTS_FILE);
    if !path.exists() {
        std::fs::write(&path, default_grants(person)).map_err(write_error(&path))?;
    }
    let grants = Grants::read_file(&path).map_err(StateError::Grants)?;
    Ok((path, grants))
}

fn read_credentials(dir: &Path) -> Result<BTreeMap<String, String>, StateError> {
    let path = dir.join(CREDENTIALS_FILE);
    match std::fs::read_to_string(&path) {
        Ok(text) => {
            serde_json::from_str(&text).map_err(|source| StateError::Credentials { path, source })
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(BTreeMap::new()),
        Err(source) => Err(StateError::Read { path, source }),
    }
}

/// Every user's password: kept ones, and new ones made for users new in the grants; all of
/// them written back to the credentials file (those of users no longer in the grants too:
/// put back, they work again). Returns the grants' users' passwords.
pub fn credentials(dir: &Path, grants: &Grants) -> Result<BTreeMap<String, String>, StateError> {
    let known = read_credentials(dir)?;
    let Rendered { passwords, .. } = grants.render_with(-1, &dir.join("jetstream"), &known);
    let mut kept = known;
    kept.extend(passwords.clone());
    let creds = dir.join(CREDENTIALS_FILE);
    write_private(&creds, &pretty(&kept)).map_err(write_error(&creds))?;
    Ok(passwords)
}

/// The people's limits where the catalogue reads them (it publishes them to every module,
/// which asks again at each refresh: a reload reaches them within 30 s), and who may call
/// what beside them (the ticket issuer reads it at each ticket).
pub fn write_limits(dir: &Path, grants: &Grants) -> Result<(), StateError> {
    let catalog = dir.join(mesh_core::subjects::catalog::MODULE);
    mesh_core::runtime::private_dir(&catalog).map_err(write_error(&catalog))?;
    write_catalog_files(&catalog.join(LIMITS_FILE), grants).map(|_| ())
}

/// Writes the people's limits to `limits` and who may call what beside it ([`PEOPLE_FILE`]),
/// each its owner's alone (they name every person and their grants); the second's path.
pub fn write_catalog_files(limits: &Path, grants: &Grants) -> Result<PathBuf, StateError> {
    write_private(limits, &pretty(&grants.limits_table())).map_err(write_error(limits))?;
    let people = limits.with_file_name(PEOPLE_FILE);
    write_private(&people, &pretty(&grants.may_call_table())).map_err(write_error(&people))?;
    Ok(people)
}

/// What every server's configuration says besides its place in a cluster: the accounts
/// layout from the grants, with these logins — in operator mode signed (once, here), each
/// server trusting the operator through a resolver of its own beside its JetStream.
pub fn accounts<'a>(
    grants: &'a Grants,
    logins: &'a Logins,
) -> Result<impl Fn(&Slot) -> String + 'a, StateError> {
    let signed = logins.sign(grants)?;
    Ok(move |slot: &Slot| {
        let port = slot.config_port();
        let config = grants
            .render_with(port, slot.store_dir, &logins.passwords)
            .config;
        match &signed {
            None => config,
            Some(signed) => format!(
                "{}\n{}",
                crate::operator::without_accounts(&config),
                signed.server_block(&slot.store_dir.join("resolver"))
            ),
        }
    })
}

/// Writes a `nats` context `mesh-<name>` for every module and person in the grants, and
/// `mesh` (selected) for you. Returns the path of yours and the context selected before.
pub fn write_contexts(
    dir: &Path,
    url: &str,
    grants: &Grants,
    logins: &Logins,
    person: &str,
) -> Result<(PathBuf, Option<String>), StateError> {
    let context_error = |name: String| move |source| StateError::Context { name, source };
    let context_for = |user: &str| {
        let creds = logins.creds(user);
        Context {
            description: format!("mesh up in {}", dir.display()),
            url: url.to_owned(),
            user: if creds.is_some() {
                String::new()
            } else {
                user.to_owned()
            },
            password: match creds {
                Some(_) => String::new(),
                None => logins.password(user).unwrap_or_default().to_owned(),
            },
            creds: creds.map(|c| c.display().to_string()).unwrap_or_default(),
            inbox_prefix: layout::inbox_prefix(user),
            ..Default::default()
        }
    };
    let users = grants
        .modules
        .iter()
        .map(|m| m.name.as_str())
        .chain(grants.people.iter().map(|p| p.user.as_str()));
    for user in users {
        context_for(user)
            .write(&format!("{CONTEXT}-{user}"), false)
            .map_err(context_error(format!("{CONTEXT}-{user}")))?;
    }
    // The mesh's owner, who reads (and could manage) the call log's streams.
    Context {
        description: format!("mesh up in {}: the call log's owner", dir.display()),
        inbox_prefix: String::new(),
        ..context_for(calllog::OWNER)
    }
    .write(OWNER_CONTEXT, false)
    .map_err(context_error(OWNER_CONTEXT.to_owned()))?;
    // One file per module holding its credential and nothing else: what to hand a module
    // run as an OS user of its own (systemd's LoadCredential=, docs/deploy.md).
    let own = dir.join(CREDENTIALS_DIR);
    mesh_core::runtime::private_dir(&own).map_err(write_error(&own))?;
    for m in &grants.modules {
        let path = own.join(format!("{}.json", m.name));
        write_private(&path, &pretty(&context_for(&m.name))).map_err(write_error(&path))?;
    }
    context_for(person)
        .write(CONTEXT, true)
        .map_err(context_error(CONTEXT.to_owned()))
}

/// A map or record as pretty JSON: these serialise without fail (string keys, no floats).
fn pretty<T: serde::Serialize>(value: &T) -> String {
    serde_json::to_string_pretty(value).expect("string-keyed JSON always serialises")
}
