//! Who is calling: read from the identity nats-server stamped on a request, and from nothing a
//! caller could have written itself.

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;
use std::sync::{Arc, RwLock};

use async_nats::HeaderMap;

use crate::subjects::calllog::ClientInfo;
use crate::subjects::{HEADER_ON_BEHALF_OF, HEADER_REQUEST_INFO, MODULE_ACCOUNT_PREFIX};

/// A person on the bus, `user@ACCOUNT`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Actor {
    pub user: String,
    pub account: String,
    /// The module that acts for this person on this call (`Mesh-On-Behalf-Of` over the
    /// module's `mesh-obo` grant), if the person did not call themselves.
    pub via: Option<String>,
}

impl Actor {
    pub fn new(user: impl Into<String>, account: impl Into<String>) -> Actor {
        Actor {
            user: user.into(),
            account: account.into(),
            via: None,
        }
    }
}

impl fmt::Display for Actor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}@{}", self.user, self.account)
    }
}

/// The longest `user@ACCOUNT` read.
pub const MAX_ACTOR_LEN: usize = 256;

/// A `user@ACCOUNT` string that does not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0:?} is not an actor: expected user@ACCOUNT")]
pub struct ActorParseError(String);

impl FromStr for Actor {
    type Err = ActorParseError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        // A NATS user and account name are short; a longer claim is nobody.
        if s.len() > MAX_ACTOR_LEN {
            return Err(ActorParseError(
                s.chars().take(64).collect::<String>() + "…",
            ));
        }
        let (user, account) = s
            .rsplit_once('@')
            .filter(|(u, a)| {
                !u.is_empty()
                    && !a.is_empty()
                    && !u.chars().any(char::is_control)
                    && !a.contains(|c: char| c.is_whitespace() || c.is_control())
            })
            .ok_or_else(|| ActorParseError(s.to_owned()))?;
        Ok(Actor::new(user, account))
    }
}

/// How the bus the module runs on is laid out, which decides whether identity can be known.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Layout {
    /// One account for everybody: nothing stamps identity and anyone could forge a header,
    /// so no caller is ever named.
    #[default]
    Local,
    /// Every module in an account of its own (`MODULE_<name>`), people in theirs; every call
    /// crosses a `share: true` import, so nats-server stamps `Nats-Request-Info` on each.
    Accounts,
}

/// A layout's name that is none of them.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("layout {0:?} is unknown: expected local or accounts")]
pub struct UnknownLayout(pub String);

impl FromStr for Layout {
    type Err = UnknownLayout;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "local" => Ok(Layout::Local),
            "accounts" => Ok(Layout::Accounts),
            other => Err(UnknownLayout(other.to_owned())),
        }
    }
}

impl fmt::Display for Layout {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Layout::Local => "local",
            Layout::Accounts => "accounts",
        })
    }
}

/// How a call reached the module: on the tool's own subject, or on its `mesh-obo` twin,
/// which only modules granted to act for people toward it can reach.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Route {
    Direct,
    OnBehalf,
}

/// Who sent a call.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Caller {
    /// Local mode: nobody vouches for anyone.
    Unknown,
    /// A person: calling themselves, or through a module (`Actor::via`).
    Person(Actor),
    /// A module calling on its own account.
    Module(String),
}

impl Caller {
    /// The person the call is for, if any.
    pub fn actor(&self) -> Option<&Actor> {
        match self {
            Caller::Person(a) => Some(a),
            _ => None,
        }
    }

    /// Who is answerable for the call, as one string: `user@ACCOUNT` for a person (through a
    /// module or not), `<module>@MODULE_<module>` for a module calling as itself; `None`
    /// when nobody is known (local mode). What a tool records as the owner of what it keeps.
    pub fn id(&self) -> Option<String> {
        match self {
            Caller::Person(a) => Some(a.to_string()),
            Caller::Module(m) => Some(format!("{m}@{}", crate::subjects::module_account(m))),
            Caller::Unknown => None,
        }
    }

    /// The module whose credential sent the call: calling itself, or acting for a person.
    pub fn module(&self) -> Option<&str> {
        match self {
            Caller::Module(m) => Some(m),
            Caller::Person(a) => a.via.as_deref(),
            Caller::Unknown => None,
        }
    }
}

/// Why a call's identity is refused. The call is answered with this as a tool error.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IdentityError {
    #[error(
        "refused: the request carries {0} Nats-Request-Info headers; only nats-server sets it, once — send the call without one"
    )]
    Duplicated(usize),
    #[error(
        "refused: the request carries no Nats-Request-Info, so nats-server vouched for nobody; call the tool through an account that imports it"
    )]
    Unstamped,
    #[error("refused: the Nats-Request-Info header is not nats-server's ({0})")]
    Malformed(&'static str),
    #[error(
        "refused: {0} appears inside another header of the request (a folded or unterminated header line hid the server's stamp); send a plain header block"
    )]
    Hidden(&'static str),
    #[error(
        "refused: {subject} is for modules acting for a person, and the caller is in account {account}, not a module's"
    )]
    NotAModule { subject: String, account: String },
    #[error(
        "refused: module {module} called for a person without exactly one {HEADER_ON_BEHALF_OF}: user@ACCOUNT header ({why})"
    )]
    OnBehalf { module: String, why: String },
    #[error(
        "refused: the caller's account {0} is not in the mesh's accounts (operator mode): give the module the accounts.json `mesh accounts --auth operator` wrote ({ACCOUNTS_ENV})"
    )]
    UnknownAccount(String),
}

/// The name in the auth callout's sentinel credential (everyone signs in with it beside
/// their ID token): never a person's, whose names are `[A-Za-z0-9_-]`.
pub const CALLOUT_SENTINEL: &str = "@sentinel";

/// Where a module in operator mode finds which account each key is (`accounts.json`).
pub const ACCOUNTS_ENV: &str = "MESH_ACCOUNTS";

/// Which mesh account each account key is, in operator mode: nats-server stamps an
/// account's public key where a configuration file's accounts are stamped by name. One per
/// process, as the bus it serves is.
static DIRECTORY: RwLock<Option<Arc<BTreeMap<String, String>>>> = RwLock::new(None);

/// Learns the accounts' names by key (`mesh accounts --auth operator`'s `accounts.json`),
/// beside those known already: a key names one account for good.
pub fn learn_accounts(names: BTreeMap<String, String>) {
    let mut known = DIRECTORY.write().unwrap_or_else(|e| e.into_inner());
    let mut all = known.as_deref().cloned().unwrap_or_default();
    for (key, name) in names {
        // A key known already keeps its name: a file read later cannot rename it.
        all.entry(key).or_insert(name);
    }
    *known = Some(Arc::new(all));
}

/// Forgets the accounts of `keys` (one removed from the mesh): their callers name nobody.
pub fn forget_accounts<'k>(keys: impl IntoIterator<Item = &'k String>) {
    let mut known = DIRECTORY.write().unwrap_or_else(|e| e.into_inner());
    let mut all = known.as_deref().cloned().unwrap_or_default();
    for k in keys {
        all.remove(k);
    }
    *known = Some(Arc::new(all));
}

/// Learns the accounts from the file [`ACCOUNTS_ENV`] names, if it names one.
pub fn learn_accounts_from_env() -> Result<(), String> {
    let Some(path) = std::env::var_os(ACCOUNTS_ENV).filter(|p| !p.is_empty()) else {
        return Ok(());
    };
    let path = std::path::PathBuf::from(path);
    let text = std::fs::read_to_string(&path)
        .map_err(|e| format!("cannot read {} ({ACCOUNTS_ENV}): {e}", path.display()))?;
    let names = serde_json::from_str(&text).map_err(|e| {
        format!(
            "{} ({ACCOUNTS_ENV}) is not a map of account keys to names: {e}",
            path.display()
        )
    })?;
    learn_accounts(names);
    Ok(())
}

/// Learns the accounts from [`ACCOUNTS_ENV`], else from the `accounts.json` beside the
/// folder of credential file `creds` (where `mesh up --auth operator` and `mesh accounts
/// --auth operator` write both), unless this process knows them already.
pub fn learn_accounts_for(creds: Option<&std::path::Path>) {
    if DIRECTORY
        .read()
        .unwrap_or_else(|e| e.into_inner())
        .is_some()
    {
        return;
    }
    if std::env::var_os(ACCOUNTS_ENV).is_some_and(|p| !p.is_empty()) {
        if let Err(e) = learn_accounts_from_env() {
            tracing::warn!("{e}");
        }
        return;
    }
    let Some(beside) = creds
        .and_then(|c| c.parent())
        .and_then(|d| d.parent())
        .map(|d| d.join("accounts.json"))
    else {
        return;
    };
    // Only a file its owner alone could have written: else another user of the machine
    // could name the accounts (a person as a module) by planting one.
    if !private_to_us(&beside) || !beside.parent().is_some_and(private_to_us) {
        return;
    }
    if let Ok(text) = std::fs::read_to_string(&beside)
        && let Ok(names) = serde_json::from_str(&text)
    {
        learn_accounts(names);
    }
}

/// Whether `path` belongs to this process's user (or root) and no one else may write it.
fn private_to_us(path: &std::path::Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    let Ok(meta) = std::fs::metadata(path) else {
        return false;
    };
    // This process's user: the owner of its /proc entry.
    let Ok(me) = std::fs::metadata("/proc/self").map(|m| m.uid()) else {
        return false;
    };
    (meta.uid() == me || meta.uid() == 0) && meta.mode() & 0o022 == 0
}

/// The stamp as the file layout names it where the mesh's accounts are known, else as
/// stamped: what the call log's reader shows of a caller it may not be able to name.
pub fn as_named(info: ClientInfo) -> ClientInfo {
    named(info.clone()).unwrap_or(info)
}

/// The name of `account` where it is a key this process knows (operator mode: nats-server
/// says keys where a configuration file's accounts are said by name), else `account` as is.
pub fn account_named(account: &str) -> String {
    DIRECTORY
        .read()
        .unwrap_or_else(|e| e.into_inner())
        .as_ref()
        .and_then(|d| d.get(account).cloned())
        .unwrap_or_else(|| account.to_owned())
}

/// Whether `account` is an account's public key (operator mode) rather than a name.
fn is_account_key(account: &str) -> bool {
    account.len() == 56
        && account.starts_with('A')
        && nkeys::KeyPair::from_public_key(account).is_ok()
}

/// The stamp named as the file layout names it: in operator mode the account by the
/// directory and the user by their JWT's name.
fn named(mut info: ClientInfo) -> Result<ClientInfo, IdentityError> {
    // Every call in operator mode comes here: the directory is asked first, and a key is
    // decoded only to tell an unknown account from a layout's name.
    let known = DIRECTORY
        .read()
        .unwrap_or_else(|e| e.into_inner())
        .as_ref()
        .and_then(|d| d.get(&info.acc).cloned());
    let name = match known {
        Some(name) => name,
        None if is_account_key(&info.acc) => {
            return Err(IdentityError::UnknownAccount(info.acc.clone()));
        }
        None => return Ok(info),
    };
    // Who the person is. A user signed by their account's key: the name in their JWT
    // (`name_tag`; `user` is their key, or whatever their CONNECT said). One the auth
    // callout let in: the name the callout gave them, which nats-server puts in `user` over
    // whatever the client said; their `name_tag` is then the sentinel's, a name no person
    // can have. The callout places people in `PEOPLE` only: a sentinel anywhere else (one
    // that slipped past the callout stays in its own account) names nobody.
    if info.name_tag == CALLOUT_SENTINEL && name != crate::subjects::PEOPLE_ACCOUNT {
        return Err(IdentityError::Malformed(
            "the sign-in's sentinel outside PEOPLE",
        ));
    }
    let person = if info.name_tag == CALLOUT_SENTINEL {
        std::mem::take(&mut info.user)
    } else {
        std::mem::take(&mut info.name_tag)
    };
    if person.is_empty() {
        return Err(IdentityError::Malformed("a JWT user without a name"));
    }
    info.name_tag.clear();
    info.acc = name;
    info.user = person;
    Ok(info)
}

/// Every value of a header whose name matches `name` in any letter case. nats-server's own
/// header handling and clients differ on case, so a variant counts as the same header.
pub(crate) fn values<'a>(headers: Option<&'a HeaderMap>, name: &str) -> Vec<&'a str> {
    let Some(headers) = headers else {
        return Vec::new();
    };
    headers
        .iter()
        .filter(|(k, _)| AsRef::<str>::as_ref(*k).eq_ignore_ascii_case(name))
        .flat_map(|(_, vs)| vs.iter().map(|v| v.as_str()))
        .collect()
}

/// Whether `name` appears, in any letter case, inside the value of a header not named
/// `name`, or in the status line's description. nats-server appends its stamp after
/// whatever the caller's block ended with: after a line holding only a space the stamp is
/// folded into the header before it, after a block without its final CRLF it is glued onto
/// the last value. Either way its text is still there, where no stamp belongs.
fn hidden(headers: Option<&HeaderMap>, description: Option<&str>, name: &str) -> bool {
    // Runs on every request, over the stamp's few hundred bytes: compare in place, and only
    // where the first letter matches, rather than lower-casing copies or every window.
    let (n, first) = (name.as_bytes(), name.as_bytes()[0].to_ascii_lowercase());
    let holds = |v: &str| {
        let v = v.as_bytes();
        v.len() >= n.len()
            && (0..=v.len() - n.len()).any(|i| {
                v[i].to_ascii_lowercase() == first && v[i..i + n.len()].eq_ignore_ascii_case(n)
            })
    };
    if description.is_some_and(holds) {
        return true;
    }
    let Some(headers) = headers else {
        return false;
    };
    headers
        .iter()
        .filter(|(k, _)| !AsRef::<str>::as_ref(*k).eq_ignore_ascii_case(name))
        .any(|(_, vs)| vs.iter().any(|v| holds(v.as_str())))
}

/// The module an account belongs to, by the layout's naming (`MODULE_<name>`).
pub fn module_of_account(account: &str) -> Option<&str> {
    account
        .strip_prefix(MODULE_ACCOUNT_PREFIX)
        .filter(|m| crate::subjects::check_module(m).is_ok())
}

/// Who sent a request. Only the module runtime calls this; `description` is the text after
/// the status in the header block's first line, if any.
///
/// In the `Accounts` layout exactly one `Nats-Request-Info` must be present: nats-server
/// stamps one on every request crossing a `share: true` import, and a caller can put lines
/// of its own in front of it (after a bare LF the server does not remove them), so a second
/// one, in any letter case, means someone tried — and so does the stamp's text inside any
/// other header (the caller's block ended so that the real stamp was folded or glued into
/// it). A direct call names its stamped sender; a call on the `mesh-obo` twin must come from
/// a module account and name the person in one `Mesh-On-Behalf-Of`.
pub fn identify(
    headers: Option<&HeaderMap>,
    description: Option<&str>,
    layout: Layout,
    route: Route,
    subject: &str,
) -> Result<Caller, IdentityError> {
    identify_stamped(headers, description, layout, route, subject).map(|(caller, _)| caller)
}

/// [`identify`], with the stamp as read (none in the local layout): the module's word on
/// the call names the caller by it, without reading it twice.
pub fn identify_stamped(
    headers: Option<&HeaderMap>,
    description: Option<&str>,
    layout: Layout,
    route: Route,
    subject: &str,
) -> Result<(Caller, Option<ClientInfo>), IdentityError> {
    if layout == Layout::Local {
        return Ok((Caller::Unknown, None));
    }
    // The client delivers a block it could not parse without its headers (patched
    // async-nats): nothing in it can be read, so nobody can be named.
    if description.is_some_and(|d| d.starts_with(async_nats::connection::MALFORMED_HEADERS)) {
        return Err(IdentityError::Malformed(
            "the header block does not parse; send a plain NATS/1.0 header block",
        ));
    }
    for name in [HEADER_REQUEST_INFO, HEADER_ON_BEHALF_OF] {
        if hidden(headers, description, name) {
            return Err(IdentityError::Hidden(name));
        }
    }
    let stamped = match values(headers, HEADER_REQUEST_INFO).as_slice() {
        [] => return Err(IdentityError::Unstamped),
        [one] => *one,
        many => return Err(IdentityError::Duplicated(many.len())),
    };
    let info: ClientInfo =
        serde_json::from_str(stamped).map_err(|_| IdentityError::Malformed("not its JSON"))?;
    if info.user.is_empty() || info.acc.is_empty() {
        return Err(IdentityError::Malformed("no user or account"));
    }
    let info = named(info)?;
    let module = module_of_account(&info.acc);
    let caller = match (route, module) {
        (Route::Direct, Some(m)) => Caller::Module(m.to_owned()),
        (Route::Direct, None) => Caller::Person(Actor::new(info.user.clone(), info.acc.clone())),
        (Route::OnBehalf, None) => {
            return Err(IdentityError::NotAModule {
                subject: subject.to_owned(),
                account: info.acc,
            });
        }
        (Route::OnBehalf, Some(m)) => {
            let refuse = |why: String| IdentityError::OnBehalf {
                module: m.to_owned(),
                why,
            };
            let person = match values(headers, HEADER_ON_BEHALF_OF).as_slice() {
                [one] => *one,
                [] => return Err(refuse("none".into())),
                many => return Err(refuse(format!("{} of them", many.len()))),
            };
            let mut actor: Actor = person.parse().map_err(|e| refuse(format!("{e}")))?;
            if module_of_account(&actor.account).is_some() {
                return Err(refuse(format!("{actor} is a module, not a person")));
            }
            actor.via = Some(m.to_owned());
            Caller::Person(actor)
        }
    };
    Ok((caller, Some(info)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(*k, *v);
        }
        h
    }

    const ALICE: &str = r#"{"acc":"PEOPLE","user":"alice","rtt":1,"kind":"Client"}"#;
    const DECIDE: &str = r#"{"acc":"MODULE_decide","user":"decide"}"#;

    fn direct(h: &HeaderMap) -> Result<Caller, IdentityError> {
        identify(
            Some(h),
            None,
            Layout::Accounts,
            Route::Direct,
            "mesh.echo.whoami",
        )
    }

    fn obo(h: &HeaderMap) -> Result<Caller, IdentityError> {
        identify(
            Some(h),
            None,
            Layout::Accounts,
            Route::OnBehalf,
            "mesh-obo.avu.add",
        )
    }

    #[test]
    fn a_stamped_person_or_module_is_named() {
        let c = direct(&headers(&[(HEADER_REQUEST_INFO, ALICE)])).unwrap();
        assert_eq!(c.actor().unwrap().to_string(), "alice@PEOPLE");
        assert_eq!(c.module(), None);
        let c = direct(&headers(&[(HEADER_REQUEST_INFO, DECIDE)])).unwrap();
        assert_eq!(c, Caller::Module("decide".into()));
        assert_eq!(c.actor(), None);
    }

    #[test]
    fn on_behalf_of_counts_only_on_the_obo_route_from_a_module() {
        // Directly, a person's Mesh-On-Behalf-Of is ignored.
        let h = headers(&[
            (HEADER_REQUEST_INFO, ALICE),
            (HEADER_ON_BEHALF_OF, "bob@PEOPLE"),
        ]);
        assert_eq!(
            direct(&h).unwrap().actor().unwrap().to_string(),
            "alice@PEOPLE"
        );
        // On the obo route a person is refused.
        assert!(matches!(obo(&h), Err(IdentityError::NotAModule { .. })));
        let h = headers(&[
            (HEADER_REQUEST_INFO, DECIDE),
            (HEADER_ON_BEHALF_OF, "bob@PEOPLE"),
        ]);
        let c = obo(&h).unwrap();
        assert_eq!(c.actor().unwrap().to_string(), "bob@PEOPLE");
        assert_eq!(c.module(), Some("decide"));
        for bad in [
            vec![(HEADER_REQUEST_INFO, DECIDE)],
            vec![
                (HEADER_REQUEST_INFO, DECIDE),
                (HEADER_ON_BEHALF_OF, "bob@PEOPLE"),
                ("mesh-on-behalf-of", "carol@PEOPLE"),
            ],
            vec![
                (HEADER_REQUEST_INFO, DECIDE),
                (HEADER_ON_BEHALF_OF, "avu@MODULE_avu"),
            ],
            vec![
                (HEADER_REQUEST_INFO, DECIDE),
                (HEADER_ON_BEHALF_OF, "nobody"),
            ],
            vec![
                (HEADER_REQUEST_INFO, DECIDE),
                (
                    HEADER_ON_BEHALF_OF,
                    &*format!("{}@PEOPLE", "a".repeat(300)).leak(),
                ),
            ],
        ] {
            assert!(
                matches!(obo(&headers(&bad)), Err(IdentityError::OnBehalf { .. })),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn more_than_one_stamp_in_any_case_or_none_is_refused() {
        let forged = r#"{"acc":"PEOPLE","user":"me"}"#;
        for (name, n) in [
            (HEADER_REQUEST_INFO, 2),
            ("nats-request-info", 2),
            ("NATS-REQUEST-INFO", 2),
        ] {
            let h = headers(&[(name, forged), (HEADER_REQUEST_INFO, ALICE)]);
            assert_eq!(direct(&h), Err(IdentityError::Duplicated(n)), "{name}");
        }
        assert_eq!(direct(&headers(&[])), Err(IdentityError::Unstamped));
        assert_eq!(
            identify(None, None, Layout::Accounts, Route::Direct, "s"),
            Err(IdentityError::Unstamped)
        );
        // The server's stamp folded or glued into another header: refused, whatever else.
        for (k, v) in [
            (
                "X",
                "a Nats-Request-Info: {\"acc\":\"PEOPLE\",\"user\":\"bob\"}",
            ),
            ("X", "aNATS-REQUEST-INFO: {}"),
        ] {
            let h = headers(&[(HEADER_REQUEST_INFO, ALICE), (k, v)]);
            assert_eq!(direct(&h), Err(IdentityError::Hidden(HEADER_REQUEST_INFO)));
        }
        let h = headers(&[(HEADER_REQUEST_INFO, ALICE)]);
        assert_eq!(
            identify(
                Some(&h),
                Some("x Nats-Request-Info: {}"),
                Layout::Accounts,
                Route::Direct,
                "s"
            ),
            Err(IdentityError::Hidden(HEADER_REQUEST_INFO))
        );
        assert!(matches!(
            direct(&headers(&[(HEADER_REQUEST_INFO, "not json")])),
            Err(IdentityError::Malformed(_))
        ));
        assert!(matches!(
            direct(&headers(&[(HEADER_REQUEST_INFO, r#"{"acc":"PEOPLE"}"#)])),
            Err(IdentityError::Malformed(_))
        ));
    }

    #[test]
    fn local_layout_names_nobody() {
        let h = headers(&[
            (HEADER_REQUEST_INFO, ALICE),
            (HEADER_ON_BEHALF_OF, "bob@PEOPLE"),
        ]);
        for route in [Route::Direct, Route::OnBehalf] {
            assert_eq!(
                identify(Some(&h), None, Layout::Local, route, "s"),
                Ok(Caller::Unknown)
            );
        }
    }

    #[test]
    fn module_accounts_follow_the_grammar() {
        assert_eq!(module_of_account("MODULE_decide"), Some("decide"));
        assert_eq!(module_of_account("MODULE_"), None);
        assert_eq!(module_of_account("MODULE_Bad"), None);
        assert_eq!(module_of_account("PEOPLE"), None);
    }
}
