//! The state directory `mesh up` keeps: the grants file (written on the first start, never
//! after), every user's credentials, the people's limits where the catalogue reads them,
//! and a `nats` context for each module and person.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use mesh_core::client::{Context, write_private};
use mesh_core::subjects::calllog;

use crate::cluster::Slot;
use crate::grants::{Grants, Rendered};
use crate::layout;
use crate::natsconf::ConfError;

/// The context written for the person, selected so commands work without flags.
pub const CONTEXT: &str = "mesh";
/// A second person who may call only `echo_echo`: the tour's way to see "denied".
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
  # and one that may call echo_echo as itself:
  # weather {{ calls: [echo_echo] }}
}}

roles {{
  everything {{ all: true }}
  # A share of each module: calls in flight (more wait their turn) and calls a minute (more
  # are answered busy). Without limits a person runs a fair share: the module's capacity
  # divided among the callers using it at the time.
  guest {{ tools: [echo_echo], limits: {{ in_flight: 8, per_minute: 600 }} }}
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
/// layout from the grants, with these passwords.
pub fn accounts<'a>(
    grants: &'a Grants,
    passwords: &'a BTreeMap<String, String>,
) -> impl Fn(&Slot) -> String + 'a {
    move |slot| {
        let port = if slot.port == 0 {
            -1
        } else {
            i32::from(slot.port)
        };
        grants.render_with(port, slot.store_dir, passwords).config
    }
}

/// Writes a `nats` context `mesh-<name>` for every module and person in the grants, and
/// `mesh` (selected) for you. Returns the path of yours and the context selected before.
pub fn write_contexts(
    dir: &Path,
    url: &str,
    grants: &Grants,
    passwords: &BTreeMap<String, String>,
    person: &str,
) -> Result<(PathBuf, Option<String>), StateError> {
    let context_error = |name: String| move |source| StateError::Context { name, source };
    let context_for = |user: &str| Context {
        description: format!("mesh up in {}", dir.display()),
        url: url.to_owned(),
        user: user.to_owned(),
        password: passwords.get(user).cloned().unwrap_or_default(),
        inbox_prefix: layout::inbox_prefix(user),
        ..Default::default()
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
        url: url.to_owned(),
        user: calllog::OWNER.to_owned(),
        password: passwords
            .get(calllog::OWNER_CREDENTIAL)
            .cloned()
            .unwrap_or_default(),
        ..Default::default()
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
