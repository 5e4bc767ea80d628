//! `mesh audit`: the bus's own permission list read as "who may call which tool", with
//! findings against the catalogue. Nothing here grants anything; it only reads. The
//! permissions come from a configuration file (`model.rs`) or, in operator mode, from the
//! accounts' and users' JWTs (`jwts.rs`), compared with what the grants would write
//! (`drift.rs`).

pub mod drift;
pub mod features;
pub mod jwts;
pub mod model;

use std::collections::BTreeSet;

use serde::Serialize;

pub use crate::natsconf::{ConfError, parse_file};
pub use model::{Model, User, matches};

use crate::layout::PUBLIC_SUBJECTS;
use mesh_core::actor::module_of_account;
use mesh_core::subjects::{self, FullName, PREFIX, TOOLS_VERB};

/// Where the audited tool list came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ToolSource {
    /// The catalogue of a reachable bus.
    Catalogue,
    /// No bus: the tools that grants name literally.
    Grants,
}

/// What kind of thing a finding is (its name in `--json` and in the table).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum FindingKind {
    /// A module may act for any person toward some tools (`calls_for_people`).
    ActsForPeople,
    /// An import without `share: true`: nothing is stamped on its calls, so modules refuse them.
    UnstampedImport,
    /// A tool nobody may call.
    NobodyMayCall,
    /// A person is granted a tool that is not installed.
    GrantNotInstalled,
    /// A person may publish a wildcard that covers tools added later too.
    WideGrant,
    /// A person may subscribe to inboxes not their own: others' replies.
    ForeignInbox,
    /// A cluster's routes take any server: whoever reaches them could stamp any caller.
    OpenRoutes,
    /// A port reachable off the host takes logins without TLS: passwords in the clear.
    NoTls,
    /// A JWT the operator (or its account) did not sign, changed after signing, expired or
    /// misplaced: it grants nothing, and the audit does not count it.
    UntrustedJwt,
    /// An account the server runs is not what the grants file would write.
    AccountDrift,
}

impl FindingKind {
    pub fn name(self) -> &'static str {
        match self {
            FindingKind::ActsForPeople => "acts_for_people",
            FindingKind::UnstampedImport => "unstamped_import",
            FindingKind::NobodyMayCall => "nobody_may_call",
            FindingKind::GrantNotInstalled => "grant_not_installed",
            FindingKind::WideGrant => "wide_grant",
            FindingKind::ForeignInbox => "foreign_inbox",
            FindingKind::OpenRoutes => "open_routes",
            FindingKind::NoTls => "no_tls",
            FindingKind::UntrustedJwt => "untrusted_jwt",
            FindingKind::AccountDrift => "account_drift",
        }
    }
}

impl std::fmt::Display for FindingKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// One thing an auditor should look at.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Finding {
    pub kind: FindingKind,
    pub subject: String,
    pub message: String,
}

/// The verdicts and findings.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub tools_from: ToolSource,
    /// Full tool names, sorted.
    pub tools: Vec<String>,
    /// `user@account` of every person, sorted.
    pub people: Vec<String>,
    /// For each person (same order), whether they may call each tool (same order).
    pub may_call: Vec<Vec<bool>>,
    /// `user@account` of every module's user, sorted.
    pub modules: Vec<String>,
    /// For each module (same order), whether it may call each tool as itself.
    pub module_may_call: Vec<Vec<bool>>,
    /// For each module, whether it may call each tool for a person (its `mesh-obo` twin).
    pub module_acts_for_people: Vec<Vec<bool>>,
    pub findings: Vec<Finding>,
    /// The people's limits, as the catalogue publishes them (`limits.json`), when known.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub limits: Option<mesh_core::subjects::limits::LimitsTable>,
    /// Who may read each module's resources and get its prompts (modules of the audited
    /// tools).
    pub features: Vec<features::FeatureReach>,
    /// The grants file's profiles (selections of tools for agents), when it was read.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub profiles: Option<Vec<ProfileReport>>,
    /// Operator mode: where the accounts and users were read, which JWTs did not count, the
    /// auth callout, and whether the accounts are what the grants would write.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub jwts: Option<JwtReport>,
}

/// What the audit read from JWTs (operator mode).
#[derive(Debug, Clone, Serialize)]
pub struct JwtReport {
    /// The operator every account was checked against.
    pub operator: jwts::Trust,
    /// Where the account JWTs were read.
    pub accounts_from: String,
    /// Where what people and modules may publish was read: user JWTs are not in the
    /// resolver, so the credential files the mesh issues (a person signing in through the
    /// callout is given the same claims as their credential file).
    pub users_from: String,
    pub accounts: Vec<jwts::AccountSummary>,
    pub callouts: Vec<CalloutReport>,
    /// JWTs that do not count.
    pub refused: Vec<jwts::Refused>,
    /// Each account against what the grants file would write, when it was read.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub drift: Option<Vec<drift::Drift>>,
}

/// An auth callout: who answers it, where it may place people, how it names them.
#[derive(Debug, Clone, Serialize)]
pub struct CalloutReport {
    pub account: String,
    /// Its service's users (by name where their JWT was read, else key).
    pub answered_by: Vec<String>,
    /// The accounts it may place people in.
    pub places_in: Vec<String>,
    /// Whether the server seals its questions (and the callout its answers) with a curve key.
    pub sealed: bool,
    /// The identity provider, the audience and the ID token's claim that names the person,
    /// as `mesh up --idp` keeps them.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mapping: Option<crate::callout::Mapping>,
    /// Whom it signs in, by the grants file: each person and their roles (what each may
    /// call is their row of the matrix).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub people: Option<Vec<PersonRoles>>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PersonRoles {
    pub person: String,
    pub roles: Vec<String>,
}

impl JwtReport {
    /// What an auditor should look at: every JWT that does not count (a revoked user's
    /// credential file is no risk, and is only listed), every account that is not what the
    /// grants would write.
    pub fn findings(&self) -> Vec<Finding> {
        let mut out = Vec::new();
        for r in self.refused.iter().filter(|r| r.why != jwts::Why::Revoked) {
            let named = if r.name.is_empty() {
                String::new()
            } else {
                format!(" ({})", r.name)
            };
            out.push(Finding {
                kind: FindingKind::UntrustedJwt,
                subject: r.from.clone(),
                message: format!(
                    "{} JWT {}{named} in {} does not count, it grants nothing: {}",
                    r.what, r.key, r.from, r.detail
                ),
            });
        }
        for d in self.drift.iter().flatten() {
            let message = match d.verdict {
                "differs" => format!(
                    "account {} differs from what the grants file writes ({}): push the grants again (mesh accounts --push, or a reload of mesh up)",
                    d.account,
                    d.what.join(", ")
                ),
                "missing" => format!(
                    "account {} is in the grants but not on the server: push the grants again",
                    d.account
                ),
                "extra" => format!(
                    "account {} is on the server but the grants write none: find out who made it",
                    d.account
                ),
                _ => continue,
            };
            out.push(Finding {
                kind: FindingKind::AccountDrift,
                subject: d.account.clone(),
                message,
            });
        }
        out
    }
}

/// One profile: what it names, and which of the audited tools that selects. It grants
/// nothing: an agent given it still calls only what its person may.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ProfileReport {
    pub name: String,
    pub patterns: Vec<String>,
    /// The audited tools (`Report::tools`) it selects, sorted.
    pub tools: Vec<String>,
}

impl Report {
    /// The grants' profiles, each with the audited tools it selects.
    pub fn with_profiles(mut self, grants: &crate::grants::Grants) -> Report {
        let profiles = grants
            .profiles
            .iter()
            .map(|(name, profile)| {
                // Checked when the file was read; one built otherwise selects nothing.
                let selection = profile.selection(name).ok();
                let selects = |t: &&String| selection.as_ref().is_some_and(|s| s.selects(t));
                ProfileReport {
                    name: name.clone(),
                    patterns: profile.tools.clone(),
                    tools: self.tools.iter().filter(selects).cloned().collect(),
                }
            })
            .collect();
        self.profiles = Some(profiles);
        self
    }

    /// What was read from JWTs, and its findings.
    pub fn with_jwts(mut self, jwts: JwtReport) -> Report {
        self.findings.extend(jwts.findings());
        self.jwts = Some(jwts);
        self
    }
}

/// Why the audit could not read the JWTs.
#[derive(Debug, thiserror::Error)]
pub enum AuditError {
    #[error(transparent)]
    Jwts(#[from] jwts::JwtsError),
    #[error(transparent)]
    Drift(#[from] drift::DriftError),
}

/// What the audit reads in operator mode.
pub struct JwtSources<'a> {
    /// The operator to check every account against.
    pub trust: jwts::Trust,
    /// The account JWTs as found, and where (said in the report).
    pub found: Vec<jwts::Found>,
    pub accounts_from: String,
    /// The folder of user JWTs (credential files), if known.
    pub users: Option<&'a std::path::Path>,
    /// A configuration's routes and ports, when one was read.
    pub base: Option<&'a Model>,
    /// How the callout names people, if kept.
    pub mapping: Option<crate::callout::Mapping>,
    /// The grants file, to compare the accounts with and to name whom the callout signs in.
    pub grants: Option<&'a crate::grants::Grants>,
    /// The state directory keeping the tools each module lists (`mesh up`'s), if any.
    pub learned: Option<&'a std::path::Path>,
}

/// The model the JWTs give, and what the report says of them.
pub fn from_jwts(sources: JwtSources<'_>) -> Result<(Model, JwtReport), AuditError> {
    let accounts = jwts::verify(&sources.trust, sources.found);
    let found_users = match sources.users {
        Some(dir) => jwts::read_users(dir)?,
        None => Vec::new(),
    };
    let (users, mut refused) = jwts::verify_users(&accounts, found_users);
    let (model, not_activated) = jwts::model(&accounts, &users, sources.base);
    let mut all_refused = accounts.refused.clone();
    all_refused.append(&mut refused);
    all_refused.extend(not_activated);
    let names = accounts.names();
    let user_names: std::collections::BTreeMap<&str, &str> = users
        .iter()
        .map(|u| (u.claims.sub.as_str(), u.claims.name.as_str()))
        .collect();
    let callouts = accounts
        .trusted
        .iter()
        .filter(|a| jwts::is_callout(a))
        .map(|a| {
            let z = a.claims.nats.authorization.clone().unwrap_or_default();
            let name = |k: &String, of: &dyn Fn(&str) -> Option<String>| {
                of(k).unwrap_or_else(|| k.clone())
            };
            CalloutReport {
                account: a.name.clone(),
                answered_by: z
                    .auth_users
                    .iter()
                    .map(|k| name(k, &|k| user_names.get(k).map(|n| n.to_string())))
                    .collect(),
                places_in: z
                    .allowed_accounts
                    .iter()
                    .map(|k| name(k, &|k| names.get(k).cloned()))
                    .collect(),
                sealed: !z.xkey.is_empty(),
                mapping: sources.mapping.clone(),
                people: sources.grants.map(|g| {
                    g.people
                        .iter()
                        .map(|p| PersonRoles {
                            person: p.user.clone(),
                            roles: p.roles.clone(),
                        })
                        .collect()
                }),
            }
        })
        .collect();
    let drift = match sources.grants {
        Some(g) => Some(drift::compare(
            &drift::expected(g, sources.learned)?,
            &accounts,
        )),
        None => None,
    };
    let users_from = match sources.users {
        Some(dir) => format!(
            "the user JWTs in {} ({} counted): the credential files the mesh issues; a person signing in through the callout is given their file's claims",
            dir.display(),
            users.len()
        ),
        None => "none: user JWTs are not in the resolver, and no folder of credential files was given (--users DIR), so no user is audited".to_owned(),
    };
    let report = JwtReport {
        operator: sources.trust.clone(),
        accounts_from: sources.accounts_from,
        users_from,
        accounts: jwts::summaries(&accounts, &users),
        callouts,
        refused: all_refused,
        drift,
    };
    Ok((model, report))
}

/// Whether an account holds modules: it exports the mesh's services or is named as a
/// module's account is.
fn is_module_account(account: &model::Account) -> bool {
    if account.name == mesh_core::subjects::calllog::ACCOUNT {
        return false;
    }
    module_of_account(&account.name).is_some()
        || account
            .exports
            .iter()
            .any(|e| e.subject.starts_with(PREFIX))
}

/// People are the users outside the module accounts (on a one-account bus, everybody).
fn people(model: &Model) -> Vec<&User> {
    let mut out: Vec<&User> = model
        .accounts
        .iter()
        .filter(|a| !is_module_account(a) && a.name != mesh_core::subjects::calllog::ACCOUNT)
        .flat_map(|a| &a.users)
        .collect();
    out.sort_by_key(|u| u.id());
    out
}

/// The users of the module accounts.
fn modules(model: &Model) -> Vec<&User> {
    let mut out: Vec<&User> = model
        .accounts
        .iter()
        .filter(|a| is_module_account(a))
        .flat_map(|a| &a.users)
        .collect();
    out.sort_by_key(|u| u.id());
    out
}

/// Tool subjects the publish grants name literally (`mesh.<module>.<tool>`).
fn granted_tools(model: &Model) -> BTreeSet<String> {
    model
        .accounts
        .iter()
        .flat_map(|a| &a.users)
        .flat_map(|u| u.permissions.publish.allow.iter().flatten())
        .filter_map(|p| tool_of(p))
        .collect()
}

/// The full name a literal tool subject stands for.
fn tool_of(subject: &str) -> Option<String> {
    let mut parts = subject.split('.');
    let (Some(PREFIX), Some(module), Some(tool), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return None;
    };
    if tool == TOOLS_VERB || subject.contains(['*', '>']) {
        return None;
    }
    FullName::parse(&mesh_core::subjects::full_name(module, tool))
        .ok()
        .map(|n| n.to_string())
}

/// Audits `model` against `installed` (the catalogue's full tool names), or against the
/// tools the grants name when no catalogue could be asked.
pub fn audit(model: &Model, installed: Option<&[String]>) -> Report {
    let (tools_from, tools): (ToolSource, Vec<String>) = match installed {
        Some(t) => (
            ToolSource::Catalogue,
            t.iter()
                .cloned()
                .collect::<BTreeSet<_>>()
                .into_iter()
                .collect(),
        ),
        None => (
            ToolSource::Grants,
            granted_tools(model).into_iter().collect(),
        ),
    };
    let people = people(model);
    let subjects: Vec<String> = tools
        .iter()
        .map(|t| {
            FullName::parse(t)
                .map(|n| n.subject().to_owned())
                .unwrap_or_default()
        })
        .collect();
    let may_call: Vec<Vec<bool>> = people
        .iter()
        .map(|p| subjects.iter().map(|s| model.may_call(p, s)).collect())
        .collect();
    let module_users = modules(model);
    let module_may_call: Vec<Vec<bool>> = module_users
        .iter()
        .map(|m| subjects.iter().map(|s| model.may_call(m, s)).collect())
        .collect();
    let obo_subjects: Vec<String> = tools
        .iter()
        .map(|t| {
            FullName::parse(t)
                .map(|n| subjects::obo_subject(n.module(), n.tool()))
                .unwrap_or_default()
        })
        .collect();
    let module_acts_for_people: Vec<Vec<bool>> = module_users
        .iter()
        .map(|m| obo_subjects.iter().map(|s| model.may_call(m, s)).collect())
        .collect();

    let mut findings = Vec::new();
    if let Some(listen) = &model.open_routes {
        findings.push(Finding {
            kind: FindingKind::OpenRoutes,
            subject: listen.clone(),
            message: format!(
                "the cluster's routes on {listen} take any server: whoever reaches them can join as a server and stamp any caller; give the cluster block an authorization (mesh accounts --cluster writes one)"
            ),
        });
    }
    for (what, at) in &model.plaintext {
        findings.push(Finding {
            kind: FindingKind::NoTls,
            subject: at.clone(),
            message: format!(
                "the {what} on {at} takes logins without TLS: passwords (and every call) cross the network in the clear; give it a tls block (mesh accounts --tls-cert --tls-key --tls-ca writes them)"
            ),
        });
    }
    for (m, row) in module_users.iter().zip(&module_acts_for_people) {
        let toward: Vec<&str> = tools
            .iter()
            .zip(row)
            .filter(|(_, may)| **may)
            .map(|(t, _)| t.as_str())
            .collect();
        if !toward.is_empty() {
            findings.push(Finding {
                kind: FindingKind::ActsForPeople,
                subject: m.id(),
                message: format!(
                    "{} may act for any person toward {}",
                    m.id(),
                    toward.join(", ")
                ),
            });
        }
    }
    // A call through an import without share: true arrives unstamped, and the runtime
    // (accounts layout) refuses it: the grant is there but cannot work.
    for account in &model.accounts {
        for i in account.imports.iter().filter(|i| !i.share) {
            if i.subject.starts_with(PREFIX) {
                findings.push(Finding {
                    kind: FindingKind::UnstampedImport,
                    subject: account.name.clone(),
                    message: format!(
                        "account {} imports {} from {} without share: true: nobody is stamped on those calls, so the modules refuse them",
                        account.name, i.subject, i.account
                    ),
                });
            }
        }
    }
    if tools_from == ToolSource::Catalogue {
        for (i, tool) in tools.iter().enumerate() {
            if !may_call.iter().chain(&module_may_call).any(|row| row[i]) {
                findings.push(Finding {
                    kind: FindingKind::NobodyMayCall,
                    subject: tool.clone(),
                    message: format!("nobody may call {tool}"),
                });
            }
        }
    }
    let names: BTreeSet<&str> = people.iter().map(|p| p.name.as_str()).collect();
    for person in &people {
        for pattern in person.permissions.publish.allow.iter().flatten() {
            if PUBLIC_SUBJECTS.contains(&pattern.as_str()) || !pattern.starts_with(PREFIX) {
                continue;
            }
            if let Some(tool) = tool_of(pattern) {
                if tools_from == ToolSource::Catalogue && !tools.contains(&tool) {
                    findings.push(Finding {
                        kind: FindingKind::GrantNotInstalled,
                        subject: person.id(),
                        message: format!(
                            "{} is granted {tool}, which is not installed",
                            person.id()
                        ),
                    });
                }
            } else if pattern.contains(['*', '>']) {
                findings.push(Finding {
                    kind: FindingKind::WideGrant,
                    subject: person.id(),
                    message: format!(
                        "{} may publish {pattern}: it covers tools added later too",
                        person.id()
                    ),
                });
            }
        }
        // Replies come back on inboxes: reading another person's is reading their answers.
        // Only the inboxes this person's patterns could reach are tried (a wildcard reaches
        // the first other person's), so the check is linear in the people, not quadratic.
        let named: BTreeSet<&str> = person
            .permissions
            .subscribe
            .allow
            .iter()
            .flatten()
            .filter_map(|p| p.strip_prefix("_INBOX."))
            .filter_map(|rest| rest.split('.').next())
            .filter(|t| !matches!(*t, "*" | ">"))
            .collect();
        let first_other = people
            .iter()
            .take(2)
            .find(|o| o.name != person.name)
            .map(|o| o.name.as_str());
        let others: Vec<String> = first_other
            .into_iter()
            .chain(
                named
                    .into_iter()
                    .filter(|t| *t != person.name && names.contains(t)),
            )
            .map(|o| format!("_INBOX.{o}.x"))
            .chain(std::iter::once("_INBOX.x".to_owned()))
            .collect();
        if let Some(inbox) = others
            .iter()
            .find(|s| person.permissions.subscribe.permits(s))
        {
            let whose = inbox.trim_start_matches("_INBOX.").trim_end_matches(".x");
            findings.push(Finding {
                kind: FindingKind::ForeignInbox,
                subject: person.id(),
                message: if whose == "x" {
                    format!(
                        "{} may subscribe to inboxes not their own (_INBOX.>)",
                        person.id()
                    )
                } else {
                    format!(
                        "{} may subscribe to {whose}'s inbox and read their replies",
                        person.id()
                    )
                },
            });
        }
    }
    let audited: Vec<String> = tools
        .iter()
        .filter_map(|t| FullName::parse(t).ok().map(|n| n.module().to_owned()))
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    let features = features::reach(model, &people, &audited);
    Report {
        tools_from,
        tools,
        people: people.iter().map(|u| u.id()).collect(),
        may_call,
        modules: module_users.iter().map(|u| u.id()).collect(),
        module_may_call,
        module_acts_for_people,
        findings,
        features,
        limits: None,
        profiles: None,
        jwts: None,
    }
}
