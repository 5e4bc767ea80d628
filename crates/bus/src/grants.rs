//! A grants file — modules and what they may call, roles, people — turned into the
//! nats-server configuration of the accounts layout. The file is written in nats-server's own
//! syntax:
//!
//! ```text
//! modules {
//!   catalog {}
//!   avu {}
//!   decide { calls_for_people: [avu] }          # acts for the person who called it
//!   weather { calls: [echo_echo] }               # calls as itself
//!   time { command: ["python3", "-m", "mcp_server_time"] }   # an MCP server, bridged
//!   notes { command: ["notes-mcp"], per_person: 8 }          # a process per caller, 8 at most
//! }
//! roles {
//!   curator { tools: [decide_annotate, decide_apply], modules: [catalog] }
//!   admin   { all: true }
//! }
//! people {
//!   alice { roles: [curator], password: "…" }
//!   bob   { roles: [curator, admin] }
//! }
//! profiles {
//!   curation { tools: [decide_*, avu_list] }    # what an agent is offered, not granted
//! }
//! ```
//!
//! Limits share a module fairly: `limits { in_flight: 8, per_minute: 600 }` at the top is
//! every person's, in a role or a person theirs (a person's own wins; of several roles, the
//! most generous). `in_flight` is the calls of theirs one module instance runs at once (more
//! wait their turn, behind their own), `per_minute` the calls a minute (more are busy).
//!
//! `modules: [catalog, echo]` (a list) declares modules with no grants. A module's `calls`
//! and `calls_for_people` name modules (every tool, now and later) or tools by full name;
//! `calls_for_people` may also say it by the module's own tool (`{ apply: [avu_add], "*":
//! [avu_list] }`): the bus grants them all, and a ticket of `decide_apply` acts toward
//! `avu_add` only (the issuer writes the grant into it, the far side checks it). A
//! role grants tools by full name, whole modules, or everything. Every person may also
//! publish the public subjects (`tools` verbs, the catalogue, their own permissions, `$SRV`)
//! and subscribe to their own inbox prefix only.
//!
//! A profile names a selection of tools for an agent: `mesh mcp --profile curation` and the
//! console offer only the tools its patterns match (`*` for any run of characters), of those
//! the person may call. It grants nothing and shapes no permission; `mesh audit` shows it.

use std::collections::BTreeMap;
use std::path::Path;

use crate::layout::{self, ModuleUser, Person, Target};
use crate::natsconf::{ConfError, Node, Value};
use mesh_core::client::{Selection, SelectionError};
use mesh_core::subjects::limits::{Limits, LimitsTable};
use mesh_core::subjects::ticket::{ANY_TOOL, MayCallTable};
use mesh_core::subjects::{self, FullName, calllog, features};

/// What one role may call.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Role {
    /// Full tool names.
    pub tools: Vec<String>,
    /// Modules all of whose tools the role may call.
    pub modules: Vec<String>,
    /// Modules all of whose resources (and their templates' completions) the role may
    /// read (`resources: [files]`); a whole module's grant has them already.
    pub resources: Vec<String>,
    /// Prompts the role may get: a module's all (`everything`), or one by full name
    /// (`everything_simple_prompt`), each with its listing and completions.
    pub prompts: Vec<String>,
    /// Every tool of every module.
    pub all: bool,
    /// A share of each module for the people in the role.
    pub limits: Option<Limits>,
}

/// One person and their roles. Without a password, one is generated when rendering.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PersonGrant {
    pub user: String,
    pub password: Option<String>,
    pub roles: Vec<String>,
    /// This person's share of each module, over their roles'.
    pub limits: Option<Limits>,
}

/// One module and what it may call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModuleGrant {
    pub name: String,
    pub password: Option<String>,
    /// Tools it may call as itself.
    pub calls: Vec<Target>,
    /// Tools it may call for the person who called it (from any of its tools: all the
    /// grants below together).
    pub calls_for_people: Vec<Target>,
    /// What each of its tools may call for people, where the file says so by tool
    /// (`calls_for_people: { apply: [avu_add] }`); empty: every tool, all of the above.
    pub calls_for_people_by_tool: BTreeMap<String, Vec<Target>>,
    /// A JetStream of its own account (the catalogue always has one).
    pub jetstream: bool,
    /// An MCP server's command and arguments (stdio): `mesh up` runs it as this module
    /// through the bridge (`mesh run --mcp`).
    pub command: Option<Vec<String>>,
    /// An MCP server's streamable HTTP endpoint, bridged the same way (`--url`).
    pub url: Option<String>,
    /// The file of headers sent to `url` (`--headers`).
    pub headers: Option<String>,
    /// A server process of each caller's own, at most this many at once (`--per-person
    /// --max-processes`).
    pub per_person: Option<usize>,
    /// Its tools, when the file names them (`tools: [echo, sleep]`) or `mesh up` learned
    /// them from the catalogue: each exported and witnessed apart (the call log names the
    /// tool, and its verbs are not calls); others of its tools are not routed. Unknown, the
    /// module's whole subject space is one export.
    pub tools: Option<std::collections::BTreeSet<String>>,
}

impl ModuleGrant {
    /// A module with no grants.
    pub fn plain(name: impl Into<String>) -> ModuleGrant {
        ModuleGrant {
            name: name.into(),
            password: None,
            calls: Vec::new(),
            calls_for_people: Vec::new(),
            calls_for_people_by_tool: BTreeMap::new(),
            jetstream: false,
            command: None,
            url: None,
            headers: None,
            per_person: None,
            tools: None,
        }
    }
}

/// A named selection of tools for an agent (`profiles { curation { tools: [decide_*] } }`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Profile {
    /// Full tool names and patterns of them.
    pub tools: Vec<String>,
}

impl Profile {
    /// The profile's tools as a relay selects them.
    pub fn selection(&self, name: &str) -> Result<Selection, SelectionError> {
        Selection::parse(&self.tools).map(|s| s.from_origin(format!("profile {name}")))
    }
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Grants {
    pub modules: Vec<ModuleGrant>,
    pub roles: BTreeMap<String, Role>,
    pub people: Vec<PersonGrant>,
    /// Selections of tools for agents, by name.
    pub profiles: BTreeMap<String, Profile>,
    /// Every person's share of each module, unless a role or they say otherwise.
    pub limits: Limits,
    /// The call log: who may read it besides the mesh's owner, and how long it is kept.
    pub log: LogGrant,
}

/// `log { auditors: [...], max_age: "30d", max_bytes: "1GB" }`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LogGrant {
    /// People who may read the call log (`mesh audit calls`).
    pub auditors: Vec<String>,
    pub retention: crate::calllog::Retention,
    /// Tools (full names) whose argument and result values the log keeps; of every other
    /// call, only a digest and a size.
    pub values: Vec<String>,
}

/// A positive whole number and the unit after it (`30d` → 30, `d`), or why not.
fn count_and_unit<'a>(
    node: &Node,
    text: &'a str,
    what: &str,
    such_as: &str,
) -> Result<(u64, &'a str), ConfError> {
    let (n, unit) = text.split_at(
        text.find(|c: char| !c.is_ascii_digit())
            .unwrap_or(text.len()),
    );
    match n.parse::<u64>() {
        Ok(n) if n > 0 => Ok((n, unit)),
        _ => bad(node, format!("{what} {text:?} is not {such_as}")),
    }
}

/// `30d`, `12h`, `90m`: how long the log keeps a record.
fn age(node: &Node) -> Result<std::time::Duration, ConfError> {
    match &node.value {
        Value::Str(s) => {
            crate::duration::parse_duration(s).or_else(|e| bad(node, format!("log max_age: {e}")))
        }
        _ => bad(
            node,
            "log max_age must be a string such as \"30d\" or \"12h\"",
        ),
    }
}

/// `512MB`, `1GB`, or a number of bytes: how much of the log each of its streams keeps.
fn size(node: &Node) -> Result<u64, ConfError> {
    let text = match &node.value {
        Value::Int(n) if *n > 0 => return Ok(*n as u64),
        Value::Str(s) => s.trim().to_ascii_uppercase(),
        _ => return bad(node, "log max_bytes must be a size such as \"1GB\""),
    };
    let (n, unit) = count_and_unit(node, &text, "log max_bytes", "a size such as \"1GB\"")?;
    let unit: u64 = match unit.trim().trim_end_matches('B').trim_end_matches('I') {
        "" => 1,
        "K" => 1 << 10,
        "M" => 1 << 20,
        "G" => 1 << 30,
        "T" => 1 << 40,
        _ => {
            return bad(
                node,
                format!("log max_bytes {text:?}: the unit is KB, MB, GB or TB"),
            );
        }
    };
    Ok(n.saturating_mul(unit))
}

/// The configuration, and the passwords it holds, by user (for whoever hands them out).
pub struct Rendered {
    pub config: String,
    pub passwords: BTreeMap<String, String>,
}

fn bad<T>(node: &Node, message: impl Into<String>) -> Result<T, ConfError> {
    Err(ConfError {
        pos: node.pos.clone(),
        message: message.into(),
    })
}

fn names(node: &Node, what: &str) -> Result<Vec<String>, ConfError> {
    match &node.value {
        Value::Array(items) => items
            .iter()
            .map(|i| match i.as_str() {
                Some(s) => Ok(s.to_owned()),
                None => bad(i, format!("{what} must list names")),
            })
            .collect(),
        Value::Str(s) => Ok(vec![s.clone()]),
        _ => bad(node, format!("{what} must be a list of names")),
    }
}

/// An MCP server's `command: ["program", "arg", …]`: strings, the program first.
fn command(node: &Node, module: &str) -> Result<Vec<String>, ConfError> {
    let why = format!(
        "module {module}: command must list the MCP server's program and its arguments, each a quoted string: command: [\"python3\", \"-m\", \"mcp_server_time\"]"
    );
    let Value::Array(items) = &node.value else {
        return bad(node, why);
    };
    let words: Option<Vec<String>> = items.iter().map(|i| i.as_str().map(String::from)).collect();
    match words {
        Some(w) if !w.is_empty() && !w[0].is_empty() => Ok(w),
        _ => bad(node, why),
    }
}

fn targets(node: &Node, what: &str) -> Result<Vec<Target>, ConfError> {
    names(node, what)?
        .iter()
        .map(|n| Target::parse(n).or_else(|e| bad(node, format!("{what}: {e}"))))
        .collect()
}

/// A module's `calls_for_people`: a list (from any of its tools), or a block by tool
/// (`{ apply: [avu_add], "*": [avu_list] }`, `*` its other tools); the union of them all.
#[allow(clippy::type_complexity)]
fn people_targets(
    node: &Node,
    module: &str,
) -> Result<(Vec<Target>, BTreeMap<String, Vec<Target>>), ConfError> {
    if !matches!(node.value, Value::Map(_)) {
        return Ok((targets(node, "calls_for_people")?, BTreeMap::new()));
    }
    let mut all: Vec<Target> = Vec::new();
    let mut by_tool = BTreeMap::new();
    for (tool, list) in node.entries() {
        // Its own tools by their short names: `decide_apply` here is read as the mistake it
        // almost always is, not as a tool named so.
        let why = if tool == ANY_TOOL {
            None
        } else if tool.starts_with(&format!("{module}_")) {
            Some("it names the module".to_owned())
        } else {
            mesh_core::subjects::check_tool(tool)
                .err()
                .map(|e| e.to_string())
        };
        if let Some(why) = why {
            return bad(
                list,
                format!(
                    "module {module}: calls_for_people names tool {tool:?} ({why}): name the module's own tools without it (apply, not {module}_apply), or \"*\" for the others"
                ),
            );
        }
        let named = targets(list, "calls_for_people")?;
        for t in &named {
            if !all.contains(t) {
                all.push(t.clone());
            }
        }
        by_tool.insert(tool.to_owned(), named);
    }
    Ok((all, by_tool))
}

/// A `limits { in_flight: N, per_minute: N }` block.
fn limits(node: &Node, whose: &str) -> Result<Limits, ConfError> {
    let mut l = Limits::default();
    if !matches!(node.value, Value::Map(_)) {
        return bad(
            node,
            format!("{whose} limits must be a block: limits {{ in_flight: 8, per_minute: 600 }}"),
        );
    }
    for (k, v) in node.entries() {
        let n = match v.value {
            Value::Int(n) if n > 0 && n <= i64::from(u32::MAX) => n as u32,
            _ => {
                return bad(
                    v,
                    format!("{whose} limits: {k} must be a whole number above 0"),
                );
            }
        };
        match k.to_ascii_lowercase().as_str() {
            "in_flight" => l.in_flight = Some(n),
            "per_minute" => l.per_minute = Some(n),
            other => {
                return bad(
                    v,
                    format!(
                        "{whose} limits: unknown key {other:?}: expected in_flight or per_minute"
                    ),
                );
            }
        }
    }
    Ok(l)
}

/// Names usable as a NATS user and in a subject token.
pub fn usable_user(name: &str) -> bool {
    !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
}

/// Names a module cannot have: each module keeps its files in `<state>/<name>`, where these
/// are nats-server's store, `mesh up`'s lock and the modules' credential files.
pub const RESERVED_MODULE_NAMES: [&str; 3] = ["jetstream", "lock", "credentials"];

fn read_module(name: &str, body: &Node) -> Result<ModuleGrant, ConfError> {
    if let Err(e) = subjects::check_module(name) {
        return bad(body, e.to_string());
    }
    if RESERVED_MODULE_NAMES.contains(&name) {
        return bad(
            body,
            format!(
                "module name {name:?} is reserved: the state directory's {name} is not a module's; choose another name"
            ),
        );
    }
    let mut m = ModuleGrant::plain(name);
    for (k, v) in body.entries() {
        match k.to_ascii_lowercase().as_str() {
            "calls" => m.calls = targets(v, "calls")?,
            "calls_for_people" => {
                (m.calls_for_people, m.calls_for_people_by_tool) = people_targets(v, name)?
            }
            "jetstream" => m.jetstream = matches!(v.value, Value::Bool(true)),
            "tools" => {
                let mut tools = std::collections::BTreeSet::new();
                for t in names(v, "tools")? {
                    mesh_core::subjects::check_tool(&t)
                        .or_else(|e| bad(v, format!("module {name}: tools: {e}")))?;
                    tools.insert(t);
                }
                m.tools = Some(tools);
            }
            "password" => m.password = v.as_str().map(String::from),
            "command" => m.command = Some(command(v, name)?),
            "url" => match v.as_str() {
                Some(u) if u.starts_with("http://") || u.starts_with("https://") => {
                    m.url = Some(u.to_owned())
                }
                _ => {
                    return bad(
                        v,
                        format!("module {name}: url must be an http(s) URL, quoted"),
                    );
                }
            },
            "per_person" => {
                m.per_person = match v.value {
                    Value::Bool(true) => Some(16),
                    Value::Bool(false) => None,
                    Value::Int(n) if n > 0 && n <= 4096 => Some(n as usize),
                    _ => {
                        return bad(
                            v,
                            format!(
                                "module {name}: per_person is true, false, or the most processes at once (1 to 4096)"
                            ),
                        );
                    }
                }
            }
            "headers" => match v.as_str() {
                Some(f) if !f.is_empty() => m.headers = Some(f.to_owned()),
                _ => {
                    return bad(
                        v,
                        format!(
                            "module {name}: headers must name a file of `Name: value` lines, quoted"
                        ),
                    );
                }
            },
            other => {
                return bad(
                    v,
                    format!(
                        "module {name} has an unknown key {other:?}: expected calls, calls_for_people, tools, command, url, headers, per_person, jetstream or password"
                    ),
                );
            }
        }
    }
    if m.command.is_some() && m.url.is_some() {
        return bad(
            body,
            format!("module {name}: an MCP server is a command or a url, not both"),
        );
    }
    if m.headers.is_some() && m.url.is_none() {
        return bad(body, format!("module {name}: headers go with a url"));
    }
    if m.per_person.is_some() && m.command.is_none() && m.url.is_none() {
        return bad(
            body,
            format!("module {name}: per_person goes with an MCP server's command or url"),
        );
    }
    Ok(m)
}

/// `curation { tools: [decide_*, avu_list] }`: the patterns checked, here where the file can
/// say where a bad one is.
fn read_profile(name: &str, body: &Node) -> Result<Profile, ConfError> {
    if !usable_user(name) {
        return bad(
            body,
            format!("profile name {name:?} cannot be used (use [A-Za-z0-9_-])"),
        );
    }
    let mut tools = None;
    for (k, v) in body.entries() {
        match k.to_ascii_lowercase().as_str() {
            "tools" => {
                let patterns = names(v, "tools")?;
                Selection::parse(&patterns).or_else(|e| bad(v, format!("profile {name}: {e}")))?;
                tools = Some(patterns);
            }
            other => {
                return bad(
                    v,
                    format!("profile {name} has an unknown key {other:?}: expected tools"),
                );
            }
        }
    }
    match tools {
        Some(tools) => Ok(Profile { tools }),
        None => bad(
            body,
            format!("profile {name} selects nothing: give it tools: [PATTERN, ...]"),
        ),
    }
}

impl Grants {
    pub fn read_file(path: &Path) -> Result<Grants, ConfError> {
        Grants::read(&crate::natsconf::parse_file(path)?)
    }

    /// Reads and checks a parsed grants file: names follow the mesh grammar, roles exist,
    /// tools and modules are among the declared modules.
    pub fn read(root: &Node) -> Result<Grants, ConfError> {
        let mut grants = Grants::default();
        for (key, value) in root.entries() {
            match key.to_ascii_lowercase().as_str() {
                "modules" => match &value.value {
                    Value::Array(_) | Value::Str(_) => {
                        for m in names(value, "modules")? {
                            grants.modules.push(read_module(&m, value)?);
                        }
                    }
                    _ => {
                        for (name, body) in value.entries() {
                            grants.modules.push(read_module(name, body)?);
                        }
                    }
                },
                "roles" => {
                    for (name, body) in value.entries() {
                        let mut role = Role::default();
                        for (k, v) in body.entries() {
                            match k.to_ascii_lowercase().as_str() {
                                "tools" => role.tools = names(v, "tools")?,
                                "modules" => role.modules = names(v, "modules")?,
                                "resources" => role.resources = names(v, "resources")?,
                                "prompts" => role.prompts = names(v, "prompts")?,
                                "all" => role.all = matches!(v.value, Value::Bool(true)),
                                "limits" => role.limits = Some(limits(v, &format!("role {name}"))?),
                                other => {
                                    return bad(
                                        v,
                                        format!("role {name} has an unknown key {other:?}"),
                                    );
                                }
                            }
                        }
                        grants.roles.insert(name.clone(), role);
                    }
                }
                "people" => {
                    for (user, body) in value.entries() {
                        let mut person = PersonGrant {
                            user: user.clone(),
                            password: None,
                            roles: Vec::new(),
                            limits: None,
                        };
                        for (k, v) in body.entries() {
                            match k.to_ascii_lowercase().as_str() {
                                "roles" => person.roles = names(v, "roles")?,
                                "password" => person.password = v.as_str().map(String::from),
                                "limits" => {
                                    person.limits = Some(limits(v, &format!("person {user}"))?)
                                }
                                other => {
                                    return bad(
                                        v,
                                        format!("person {user} has an unknown key {other:?}"),
                                    );
                                }
                            }
                        }
                        grants.people.push(person);
                    }
                }
                "limits" => grants.limits = limits(value, "the top-level")?,
                "profiles" => {
                    for (name, body) in value.entries() {
                        grants
                            .profiles
                            .insert(name.clone(), read_profile(name, body)?);
                    }
                }
                "log" => {
                    for (k, v) in value.entries() {
                        match k.to_ascii_lowercase().as_str() {
                            "auditors" => grants.log.auditors = names(v, "auditors")?,
                            "max_age" => grants.log.retention.max_age = age(v)?,
                            "max_bytes" => grants.log.retention.max_bytes = size(v)?,
                            "values" => grants.log.values = names(v, "values")?,
                            other => {
                                return bad(
                                    v,
                                    format!(
                                        "log has an unknown key {other:?}: expected auditors, max_age, max_bytes or values"
                                    ),
                                );
                            }
                        }
                    }
                }
                other => {
                    return bad(
                        value,
                        format!(
                            "unknown key {other:?}: expected modules, roles, people, profiles, limits or log"
                        ),
                    );
                }
            }
        }
        grants.check(root)?;
        Ok(grants)
    }

    /// The profile `name`, or a message naming the ones the file has.
    pub fn profile(&self, name: &str) -> Result<&Profile, String> {
        self.profiles.get(name).ok_or_else(|| {
            let known: Vec<&str> = self.profiles.keys().map(String::as_str).collect();
            if known.is_empty() {
                format!(
                    "no profile {name}: the grants file has no profiles (add profiles {{ {name} {{ tools: [PATTERN, ...] }} }})"
                )
            } else {
                format!(
                    "no profile {name}: the grants file has {}",
                    known.join(", ")
                )
            }
        })
    }

    pub fn module(&self, name: &str) -> Option<&ModuleGrant> {
        self.modules.iter().find(|m| m.name == name)
    }

    fn declared(&self, module: &str) -> bool {
        self.module(module).is_some()
    }

    fn check(&self, root: &Node) -> Result<(), ConfError> {
        let fail = |message: String| bad::<()>(root, message);
        // nats-server lets a user with an empty password in without one.
        let empty = |who: &str, pw: &Option<String>| match pw {
            Some(p) if p.is_empty() => Err(ConfError {
                pos: root.pos.clone(),
                message: format!(
                    "{who} has an empty password, which nats-server would take as none: remove the line to have one generated"
                ),
            }),
            _ => Ok(()),
        };
        let mut declared = std::collections::HashSet::new();
        for m in &self.modules {
            if !declared.insert(m.name.as_str()) {
                fail(format!("module {} is declared twice", m.name))?;
            }
            empty(&m.name, &m.password)?;
            for (what, list) in [
                ("calls", &m.calls),
                ("calls_for_people", &m.calls_for_people),
            ] {
                for t in list {
                    if !self.declared(t.module()) {
                        fail(format!(
                            "module {} {what} {t}, but module {} is not declared",
                            m.name,
                            t.module()
                        ))?;
                    }
                }
            }
        }
        for (name, role) in &self.roles {
            for tool in &role.tools {
                let n = FullName::parse(tool).map_err(|e| ConfError {
                    pos: root.pos.clone(),
                    message: format!("role {name}: {e}"),
                })?;
                if !self.declared(n.module()) {
                    fail(format!(
                        "role {name} grants {tool}, but module {} is not declared",
                        n.module()
                    ))?;
                }
            }
            for m in &role.resources {
                if !self.declared(m) {
                    fail(format!(
                        "role {name} grants the resources of module {m}, which is not declared"
                    ))?;
                }
            }
            for p in &role.prompts {
                let module = match p.split_once('_') {
                    Some(_) => FullName::parse(p)
                        .map_err(|e| ConfError {
                            pos: root.pos.clone(),
                            message: format!("role {name}: prompts: {e}"),
                        })?
                        .module()
                        .to_owned(),
                    None => p.clone(),
                };
                if !self.declared(&module) {
                    fail(format!(
                        "role {name} grants prompt {p}, but module {module} is not declared"
                    ))?;
                }
            }
            for m in &role.modules {
                if !self.declared(m) {
                    fail(format!(
                        "role {name} grants module {m}, which is not declared"
                    ))?;
                }
            }
        }
        let mut seen = std::collections::HashSet::new();
        for p in &self.people {
            if !usable_user(&p.user) {
                fail(format!(
                    "user name {:?} cannot be used in a subject (use [A-Za-z0-9_-])",
                    p.user
                ))?;
            }
            if !seen.insert(p.user.as_str()) {
                fail(format!("person {} is listed twice", p.user))?;
            }
            empty(&p.user, &p.password)?;
            if self.declared(&p.user) {
                fail(format!("{} is both a person and a module", p.user))?;
            }
            for r in &p.roles {
                if !self.roles.contains_key(r) {
                    fail(format!("{} has role {r}, which is not defined", p.user))?;
                }
            }
        }
        // A profile's pattern names its module when nothing stands in for the module's name:
        // one not declared is a typo, as in a role.
        for (name, profile) in &self.profiles {
            for pattern in &profile.tools {
                if let Some((module, _)) = pattern.split_once('_')
                    && !module.contains('*')
                    && !self.declared(module)
                {
                    fail(format!(
                        "profile {name} selects {pattern}, but module {module} is not declared"
                    ))?;
                }
            }
        }
        for t in &self.log.values {
            match FullName::parse(t) {
                Ok(n) if self.declared(n.module()) => {}
                Ok(n) => fail(format!(
                    "log keeps the values of {t}, but module {} is not declared",
                    n.module()
                ))?,
                Err(e) => fail(format!("log values: {t:?} is no tool's full name: {e}"))?,
            }
        }
        for a in &self.log.auditors {
            if !self.people.iter().any(|p| &p.user == a) {
                fail(format!(
                    "log names {a} an auditor, but {a} is not among the people"
                ))?;
            }
        }
        Ok(())
    }

    /// A person's share of each module: their own limits, else the most generous of their
    /// roles' that say any, else everyone's.
    pub fn limits_of(&self, person: &PersonGrant) -> Limits {
        if let Some(own) = person.limits {
            return own;
        }
        person
            .roles
            .iter()
            .filter_map(|r| self.roles.get(r).and_then(|r| r.limits))
            .reduce(Limits::widest)
            .unwrap_or(self.limits)
    }

    /// Every person's limits, as the catalogue publishes them (`limits.json`).
    pub fn limits_table(&self) -> LimitsTable {
        let mut table = LimitsTable {
            default: self.limits,
            // As the runtime names its tools: `echo_echo` is `echo`.
            log_values: self
                .log
                .values
                .iter()
                .map(|t| FullName::parse(t).map_or_else(|_| t.clone(), |n| n.to_string()))
                .collect(),
            ..Default::default()
        };
        for p in &self.people {
            let l = self.limits_of(p);
            if l != self.limits {
                table
                    .callers
                    .insert(format!("{}@{}", p.user, layout::PEOPLE_ACCOUNT), l);
            }
        }
        table
    }

    /// Who may call what, for the ticket issuer (`people.json`): every person's subjects
    /// to call tools, by their id (`ann@PEOPLE`), and what each module may call for people,
    /// by its tool.
    pub fn may_call_table(&self) -> MayCallTable {
        let names = |targets: &[Target]| targets.iter().map(Target::to_string).collect();
        MayCallTable {
            people: self
                .people
                .iter()
                .map(|p| {
                    (
                        format!("{}@{}", p.user, layout::PEOPLE_ACCOUNT),
                        self.may_call(p),
                    )
                })
                .collect(),
            acting: self
                .modules
                .iter()
                .filter(|m| !m.calls_for_people.is_empty())
                .map(|m| {
                    let by_tool = if m.calls_for_people_by_tool.is_empty() {
                        BTreeMap::from([(ANY_TOOL.to_owned(), names(&m.calls_for_people))])
                    } else {
                        m.calls_for_people_by_tool
                            .iter()
                            .map(|(tool, t)| (tool.clone(), names(t)))
                            .collect()
                    };
                    (m.name.clone(), by_tool)
                })
                .collect(),
        }
    }

    /// The subjects a person may publish to call tools, from their roles.
    pub fn may_call(&self, person: &PersonGrant) -> Vec<String> {
        let mut subjects = Vec::new();
        for role in person.roles.iter().filter_map(|r| self.roles.get(r)) {
            if role.all {
                subjects.push(format!("{}.>", subjects::PREFIX));
            }
            subjects.extend(
                role.modules
                    .iter()
                    .map(|m| format!("{}.{m}.>", subjects::PREFIX)),
            );
            subjects.extend(
                role.tools
                    .iter()
                    .filter_map(|t| FullName::parse(t).ok())
                    .map(|n| n.subject().to_owned()),
            );
            subjects.extend(role.resources.iter().map(|m| features::resources_grant(m)));
            for p in &role.prompts {
                match FullName::parse(p) {
                    Ok(n) => subjects.extend(features::prompt_grant(n.module(), n.tool())),
                    Err(_) => subjects.extend(features::prompt_grant(p, "*")),
                }
            }
        }
        // An auditor reads the call log.
        if self.log.auditors.contains(&person.user) {
            subjects.extend(layout::AUDIT_SUBJECTS.map(String::from));
            // The issuer's keys, to check the tickets behind a person acted for.
            subjects.push(mesh_core::subjects::ticket::KEYS_SUBJECT.to_owned());
        }
        subjects.sort();
        subjects.dedup();
        subjects
    }

    /// The nats-server configuration with passwords given in the file, else in `known`
    /// (credentials kept from an earlier rendering), else generated; all are returned.
    pub fn render_with(
        &self,
        port: i32,
        store_dir: &Path,
        known: &BTreeMap<String, String>,
    ) -> Rendered {
        let mut passwords = BTreeMap::new();
        let mut secret = |user: &str, given: Option<&String>| {
            let pw = given
                .or_else(|| known.get(user))
                .cloned()
                .unwrap_or_else(|| uuid::Uuid::new_v4().simple().to_string());
            passwords.insert(user.to_owned(), pw.clone());
            pw
        };
        let modules: Vec<ModuleUser> = self
            .modules
            .iter()
            .map(|m| {
                let mut user = ModuleUser::new(&m.name, secret(&m.name, m.password.as_ref()));
                user.calls = m.calls.clone();
                user.calls_for_people = m.calls_for_people.clone();
                user.jetstream |= m.jetstream;
                user.tools = m.tools.clone();
                user
            })
            .collect();
        let people: Vec<Person> = self
            .people
            .iter()
            .map(|p| Person {
                user: p.user.clone(),
                password: secret(&p.user, p.password.as_ref()),
                may_call: self.may_call(p),
            })
            .collect();
        let owner = secret(calllog::OWNER_CREDENTIAL, None);
        Rendered {
            config: layout::accounts_owned(port, store_dir, &modules, &people, &owner),
            passwords,
        }
    }

    /// As [`Grants::render_with`], with no credentials kept from before.
    pub fn render(&self, port: i32, store_dir: &Path) -> Rendered {
        self.render_with(port, store_dir, &BTreeMap::new())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::natsconf::parse_str;

    const FILE: &str = r#"
        modules: [catalog, echo, files]
        roles {
          reader { tools: [files_read, echo] }
          filer  { modules: [files] }
          admin  { all: true }
        }
        people {
          ann { roles: [reader], password: "a-secret" }
          bob { roles: [reader, filer] }
          root { roles: [admin] }
        }
    "#;

    #[test]
    fn roles_become_subjects_and_the_audit_reads_them_back() {
        let grants = Grants::read(&parse_str(FILE, Path::new("grants.conf")).unwrap()).unwrap();
        let bob = &grants.people[1];
        assert_eq!(
            grants.may_call(bob),
            ["mesh.echo.echo", "mesh.files.>", "mesh.files.read"]
        );
        let rendered = grants.render(-1, Path::new("/tmp/js"));
        assert_eq!(rendered.passwords["ann"], "a-secret");
        // Every person and module, and the call log's owner.
        assert_eq!(rendered.passwords.len(), 7);
        assert!(rendered.passwords.contains_key(calllog::OWNER_CREDENTIAL));
        // Known credentials are kept; new users get new ones.
        let again = grants.render_with(-1, Path::new("/tmp/js"), &rendered.passwords);
        assert_eq!(again.passwords, rendered.passwords);
        // The generated config is one the audit reads, with each person's own inbox only.
        let conf = parse_str(&rendered.config, Path::new("gen.conf")).unwrap();
        let model = crate::audit::Model::read(&conf).unwrap();
        let report = crate::audit::audit(&model, None);
        assert!(
            !report
                .findings
                .iter()
                .any(|f| f.kind == crate::audit::FindingKind::ForeignInbox),
            "{:?}",
            report.findings
        );
        assert_eq!(report.people, ["ann@PEOPLE", "bob@PEOPLE", "root@PEOPLE"]);
    }

    #[test]
    fn mistakes_are_named() {
        let cases = [
            (
                "modules: [echo]\nroles { r { tools: [files_read] } }",
                "module files is not declared",
            ),
            (
                "modules: [echo]\npeople { ann { roles: [nope] } }",
                "role nope, which is not defined",
            ),
            ("modules: [Echo]", "module name \"Echo\" is invalid"),
            (
                "modules: [echo]\nroles { r { tool: [echo] } }",
                "unknown key \"tool\"",
            ),
            ("people { \"a b\" { } }", "cannot be used in a subject"),
            (
                "modules { echo {}, decide { calls_for_people: [avu] } }",
                "module decide calls_for_people avu, but module avu is not declared",
            ),
            (
                "modules { decide { calls: [\"avu.add\"] } }",
                "calls: module name",
            ),
            ("modules { decide { obo: [avu] } }", "unknown key \"obo\""),
            (
                "modules { jetstream {} }",
                "module name \"jetstream\" is reserved",
            ),
            ("modules: [echo, lock]", "module name \"lock\" is reserved"),
        ];
        for (text, want) in cases {
            let e = Grants::read(&parse_str(text, Path::new("g.conf")).unwrap()).unwrap_err();
            assert!(e.to_string().contains(want), "{text:?}: {e}");
        }
    }

    #[test]
    fn profiles_select_tools_and_their_mistakes_are_named() {
        let text =
            format!("{FILE}\nprofiles {{ reading {{ tools: [files_*, echo, \"*_list\"] }} }}");
        let grants = Grants::read(&parse_str(&text, Path::new("g.conf")).unwrap()).unwrap();
        let reading = grants
            .profile("reading")
            .unwrap()
            .selection("reading")
            .unwrap();
        assert!(reading.selects("files_read") && reading.selects("avu_list"));
        assert!(!reading.selects("echo_fail"));
        assert_eq!(
            reading.to_string(),
            "profile reading (files_*, echo, *_list)"
        );
        assert_eq!(
            grants.profile("writing").unwrap_err(),
            "no profile writing: the grants file has reading"
        );
        assert!(
            Grants::read(&parse_str(FILE, Path::new("g.conf")).unwrap())
                .unwrap()
                .profile("x")
                .unwrap_err()
                .contains("has no profiles")
        );
        let cases = [
            (
                "modules: [echo]\nprofiles { p { tools: [files_*] } }",
                "profile p selects files_*, but module files is not declared",
            ),
            (
                "modules: [echo]\nprofiles { p { tools: [\"echo.echo\"] } }",
                "profile p: tool pattern \"echo.echo\" is not a full tool name",
            ),
            (
                "modules: [echo]\nprofiles { p { modules: [echo] } }",
                "profile p has an unknown key \"modules\"",
            ),
            (
                "modules: [echo]\nprofiles { p {} }",
                "profile p selects nothing",
            ),
        ];
        for (text, want) in cases {
            let e = Grants::read(&parse_str(text, Path::new("g.conf")).unwrap()).unwrap_err();
            assert!(e.to_string().contains(want), "{text:?}: {e}");
        }
    }

    /// A password crafted to close its string and add permissions stays one password.
    #[test]
    fn a_module_may_act_for_people_by_tool() {
        let text = r#"
            modules {
              catalog {}, avu {}, echo {}
              decide { calls_for_people: { apply: [avu_add, avu_list], "*": [avu_list] } }
              helper { calls_for_people: [echo] }
            }
            people { ann { roles: [] } }
        "#;
        let g = Grants::read(&parse_str(text, Path::new("g.conf")).unwrap()).unwrap();
        let decide = g.module("decide").unwrap();
        // The bus grants the union; the issuer reads it by tool.
        let union: Vec<String> = decide
            .calls_for_people
            .iter()
            .map(|t| t.to_string())
            .collect();
        assert_eq!(union, ["avu_add", "avu_list"]);
        let table = g.may_call_table();
        assert_eq!(
            table.acting_for("decide", "apply").unwrap(),
            &["avu_add", "avu_list"]
        );
        assert_eq!(
            table.acting_for("decide", "suggest").unwrap(),
            &["avu_list"]
        );
        assert_eq!(table.acting_for("helper", "any").unwrap(), &["echo"]);
        assert_eq!(table.acting_for("avu", "add"), None);
        assert_eq!(table.people["ann@PEOPLE"], Vec::<String>::new());
        let bad = text.replace("apply: [", "decide_apply: [");
        let e = Grants::read(&parse_str(&bad, Path::new("g.conf")).unwrap()).unwrap_err();
        assert!(e.to_string().contains("not decide_apply"), "{e}");
    }

    #[test]
    fn a_crafted_password_cannot_write_permissions() {
        let crafted = r#"x\", permissions: {publish: \">\"}, y: \"\nz} \\"#;
        let plain = FILE.replace("\"a-secret\"", "\"plain\"");
        let evil = FILE.replace("\"a-secret\"", &format!("\"{crafted}\""));
        let read =
            |text: &str| Grants::read(&parse_str(text, Path::new("g.conf")).unwrap()).unwrap();
        let (plain, evil) = (read(&plain), read(&evil));
        let literal = "x\", permissions: {publish: \">\"}, y: \"\nz} \\";
        assert_eq!(evil.people[0].password.as_deref(), Some(literal));
        let rendered = |g: &Grants| {
            let r = g.render(-1, Path::new("/tmp/js"));
            parse_str(&r.config, Path::new("gen.conf")).unwrap()
        };
        let (plain_conf, evil_conf) = (rendered(&plain), rendered(&evil));
        // The server's view: the same accounts, users and permissions either way.
        assert_eq!(
            crate::audit::Model::read(&evil_conf).unwrap(),
            crate::audit::Model::read(&plain_conf).unwrap()
        );
        // And ann's password is the literal text, nothing more, nothing less.
        let people = evil_conf.get("accounts").unwrap().get("PEOPLE").unwrap();
        let Value::Array(users) = &people.get("users").unwrap().value else {
            panic!("PEOPLE has no users list");
        };
        let ann = users
            .iter()
            .find(|u| u.get("user").and_then(Node::as_str) == Some("ann"))
            .unwrap();
        assert_eq!(ann.get("password").and_then(Node::as_str), Some(literal));
    }
}

#[cfg(test)]
mod limits_tests {
    use super::*;
    use crate::natsconf::parse_str;

    fn read(text: &str) -> Result<Grants, ConfError> {
        Grants::read(&parse_str(text, Path::new("g.conf")).unwrap())
    }

    #[test]
    fn the_logs_values_name_tools_as_their_modules_do() {
        let g = read("modules: [echo, avu]\nlog { values: [echo_echo, avu_add] }").unwrap();
        assert_eq!(g.limits_table().log_values, ["echo", "avu_add"]);
    }

    #[test]
    fn a_person_has_their_own_limits_else_their_roles_widest_else_everyones() {
        let g = read(
            r#"
            modules: [echo]
            limits { in_flight: 2, per_minute: 60 }
            roles {
              a { tools: [echo], limits: { in_flight: 4, per_minute: 100 } }
              b { tools: [echo], limits: { in_flight: 8 } }
              c { tools: [echo] }
            }
            people {
              ann { roles: [a, b] }
              bob { roles: [a], limits: { in_flight: 1 } }
              cid { roles: [c] }
            }
            "#,
        )
        .unwrap();
        let table = g.limits_table();
        assert_eq!(
            table.default,
            Limits {
                in_flight: Some(2),
                per_minute: Some(60)
            }
        );
        // Of two roles, the wider: 8 at once, and no bound a minute (b names none).
        assert_eq!(
            table.of("ann@PEOPLE"),
            Limits {
                in_flight: Some(8),
                per_minute: None
            }
        );
        assert_eq!(
            table.of("bob@PEOPLE"),
            Limits {
                in_flight: Some(1),
                per_minute: None
            }
        );
        assert_eq!(table.of("cid@PEOPLE"), table.default);
        assert!(!table.callers.contains_key("cid@PEOPLE"));
    }

    #[test]
    fn limits_that_do_not_read_are_named() {
        for (text, says) in [
            ("limits { in_flight: 0 }", "whole number above 0"),
            ("limits { in_flight: -3 }", "whole number above 0"),
            ("limits { in_flight: \"8\" }", "whole number above 0"),
            ("limits { burst: 8 }", "unknown key \"burst\""),
            ("limits: 8", "must be a block"),
            (
                "people { ann { limits: { per_minute: 1.5 } } }",
                "person ann limits",
            ),
        ] {
            let e = read(text).unwrap_err().to_string();
            assert!(e.contains(says), "{text}: {e}");
        }
    }

    /// An MCP server under a module: a command (strings, the program first) or a url (with
    /// a headers file), never both; neither reaches the nats-server configuration.
    #[test]
    fn an_mcp_server_is_a_command_or_a_url() {
        let read = |text: &str| Grants::read(&parse_str(text, Path::new("g.conf")).unwrap());
        let g = read(
            "modules { time { command: [\"python3\", \"-m\", \"mcp_server_time\"] } \
             web { url: \"https://mcp.example/mcp\", headers: \"/etc/mesh/web.headers\" } }",
        )
        .unwrap();
        assert_eq!(
            g.module("time").unwrap().command.as_deref(),
            Some(&["python3".to_owned(), "-m".into(), "mcp_server_time".into()][..])
        );
        assert_eq!(g.module("time").unwrap().per_person, None);
        let g2 = read("modules { n { command: [\"n\"], per_person: true } m { command: [\"m\"], per_person: 3 } }")
            .unwrap();
        assert_eq!(g2.module("n").unwrap().per_person, Some(16));
        assert_eq!(g2.module("m").unwrap().per_person, Some(3));
        let web = g.module("web").unwrap();
        assert_eq!(web.url.as_deref(), Some("https://mcp.example/mcp"));
        assert_eq!(web.headers.as_deref(), Some("/etc/mesh/web.headers"));
        let rendered = g.render(-1, Path::new("/tmp/js"));
        for secret in ["mcp_server_time", "mcp.example", "web.headers"] {
            assert!(!rendered.config.contains(secret), "{secret}");
        }
        for (text, why) in [
            ("modules { t { command: [] } }", "command must list"),
            (
                "modules { t { command: \"python3 -m x\" } }",
                "command must list",
            ),
            (
                "modules { t { command: [python3, 2] } }",
                "command must list",
            ),
            (
                "modules { t { url: \"file:///etc/passwd\" } }",
                "http(s) URL",
            ),
            (
                "modules { t { command: [\"x\"], url: \"http://a/mcp\" } }",
                "not both",
            ),
            ("modules { t { headers: \"/h\" } }", "headers go with a url"),
            ("modules { t { per_person: true } }", "per_person goes with"),
            (
                "modules { t { command: [\"x\"], per_person: 0 } }",
                "1 to 4096",
            ),
        ] {
            let e = read(text).unwrap_err().to_string();
            assert!(e.contains(why), "{text}: {e}");
        }
    }

    #[test]
    fn the_logs_retention_reads_as_people_write_it() {
        let read = |text: &str| Grants::read(&parse_str(text, Path::new("g.conf")).unwrap());
        let g = read("modules: [echo]\nlog { max_age: \"7d\", max_bytes: \"512MB\" }").unwrap();
        assert_eq!(g.log.retention.max_age.as_secs(), 7 * 86_400);
        assert_eq!(g.log.retention.max_bytes, 512 << 20);
        let g = read("modules: [echo]\nlog { max_bytes: 1000, max_age: \"90m\" }").unwrap();
        assert_eq!(
            (g.log.retention.max_bytes, g.log.retention.max_age.as_secs()),
            (1000, 5400)
        );
        // Each refused with its own reason, naming the key.
        for (bad, why) in [
            (
                "log { max_age: \"0d\" }",
                "max_age: \"0d\" is not a positive duration",
            ),
            ("log { max_age: \"7y\" }", "max_age: \"y\" is not a unit"),
            ("log { max_age: 7 }", "max_age must be a string"),
            ("log { max_bytes: \"1XB\" }", "the unit is KB, MB, GB or TB"),
            (
                "log { max_bytes: \"-1GB\" }",
                "max_bytes \"-1GB\" is not a size",
            ),
            (
                "log { auditors: [nobody] }",
                "nobody is not among the people",
            ),
            ("log { retain: 1 }", "unknown key \"retain\""),
        ] {
            let e = read(&format!("modules: [echo]\n{bad}")).unwrap_err();
            assert!(e.to_string().contains(why), "{bad}: {e}");
        }
    }
}
