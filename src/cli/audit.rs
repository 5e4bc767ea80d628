//! `mesh audit --config <nats-server.conf>`: a row per person, a column per tool, findings;
//! in operator mode read from the accounts' JWTs (`--resolver DIR`, `--resolver-url URL`, or
//! the resolver the configuration names), with the callout and the accounts against the
//! grants.

use std::path::{Path, PathBuf};

use super::args::{AuditArgs, ConnectArgs};
use mesh_bus::audit::{self, JwtReport, Model, ProfileReport, Report, ToolSource, jwts};
use mesh_bus::grants::Grants;
use mesh_core::client::Client;
use mesh_core::client::Exit;
use mesh_core::subjects::catalog::ModuleEntry;
use mesh_core::subjects::limits::LimitsTable;
use mesh_core::table;

pub async fn run(connect_args: &ConnectArgs, args: AuditArgs) -> anyhow::Result<Exit> {
    let conf = match &args.config {
        Some(config) => match audit::parse_file(config) {
            Ok(c) => Some(c),
            Err(e) => {
                eprintln!("mesh: cannot read the configuration: {e}");
                return Ok(Exit::Usage);
            }
        },
        None => None,
    };
    let configured = match &conf {
        Some(root) => match jwts::configured(root, &config_dir(&args)) {
            Ok(c) => c,
            Err(e) => {
                eprintln!(
                    "mesh: cannot read the configuration's operator: {}",
                    chain(&e)
                );
                return Ok(Exit::Usage);
            }
        },
        None => None,
    };
    let file_model = match &conf {
        Some(root) => match Model::read(root) {
            Ok(m) => Some(m),
            Err(e) => {
                eprintln!("mesh: cannot read the configuration: {e}");
                return Ok(Exit::Usage);
            }
        },
        None => None,
    };
    let grants = match grants(&args) {
        Ok(g) => g,
        Err(e) => {
            eprintln!("mesh: {e}");
            return Ok(Exit::Usage);
        }
    };
    let operator_mode =
        args.resolver.is_some() || args.resolver_url.is_some() || configured.is_some();
    let (model, from_jwts) = if operator_mode {
        match read_jwts(
            connect_args,
            &args,
            configured,
            file_model.as_ref(),
            grants.as_ref(),
        )
        .await
        {
            Ok((model, report)) => (model, Some(report)),
            Err(e) => {
                eprintln!("mesh: {e}");
                return Ok(Exit::Usage);
            }
        }
    } else {
        (
            file_model.expect("a configuration without an operator"),
            None,
        )
    };
    let installed = if args.offline {
        None
    } else {
        installed_tools(connect_args, &args).await
    };
    let mut report = audit::audit(&model, installed.as_deref());
    report.limits = match limits(&args) {
        Ok(l) => l,
        Err(e) => {
            eprintln!("mesh: {e}");
            return Ok(Exit::Usage);
        }
    };
    if let Some(grants) = &grants {
        report = report.with_profiles(grants);
    }
    if let Some(j) = from_jwts {
        report = report.with_jwts(j);
    }
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else if args.csv {
        println!("caller,kind,tool,may_call");
        let rows = [
            ("person", &report.people, &report.may_call),
            ("module", &report.modules, &report.module_may_call),
            (
                "module_for_people",
                &report.modules,
                &report.module_acts_for_people,
            ),
        ];
        for (kind, callers, verdicts) in rows {
            for (caller, row) in callers.iter().zip(verdicts) {
                for (tool, may) in report.tools.iter().zip(row) {
                    println!("{caller},{kind},{tool},{may}");
                }
            }
        }
    } else {
        print_report(&report);
    }
    Ok(Exit::Ok)
}

/// The people's limits: the file given, else `catalog/limits.json` beside the configuration
/// when there is one.
fn limits(args: &AuditArgs) -> Result<Option<LimitsTable>, String> {
    let (path, given) = given_or_beside(
        args,
        args.limits.as_ref(),
        &std::path::Path::new("catalog").join(mesh_bus::statedir::LIMITS_FILE),
    );
    match std::fs::read(&path) {
        Ok(bytes) => serde_json::from_slice(&bytes)
            .map(Some)
            .map_err(|e| format!("{} is not a limits table: {e}", path.display())),
        Err(e) if !given && e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(format!("cannot read the limits {}: {e}", path.display())),
    }
}

/// The file `given`, else `beside` (relative) the configuration's folder; and whether it was
/// given (a file given must be there; one looked for beside may not be).
fn given_or_beside(
    args: &AuditArgs,
    given: Option<&std::path::PathBuf>,
    beside: &std::path::Path,
) -> (std::path::PathBuf, bool) {
    match given {
        Some(p) => (p.clone(), true),
        // No configuration: nothing is beside it (a path that is never there).
        None if args.config.is_none() => (std::path::PathBuf::new(), false),
        None => (config_dir(args).join(beside), false),
    }
}

/// The configuration's folder (relative paths in it are read from there).
fn config_dir(args: &AuditArgs) -> PathBuf {
    args.config
        .as_deref()
        .and_then(|c| c.parent())
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."))
        .to_owned()
}

/// An error and its causes, in one line.
pub(super) fn chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        out.push_str(": ");
        out.push_str(&s.to_string());
        source = s.source();
    }
    out
}

/// The first of `candidates` beside the configuration that exists.
fn beside_config(args: &AuditArgs, candidates: &[&str]) -> Option<PathBuf> {
    args.config.as_ref()?;
    let dir = config_dir(args);
    candidates.iter().map(|c| dir.join(c)).find(|p| p.exists())
}

/// Operator mode: the model the account JWTs give (from `--resolver`, `--resolver-url` or
/// the resolver the configuration names), checked against the operator, with the users'
/// JWTs, the callout and the comparison with the grants.
async fn read_jwts(
    connect_args: &ConnectArgs,
    args: &AuditArgs,
    configured: Option<jwts::Configured>,
    base: Option<&Model>,
    grants: Option<&Grants>,
) -> Result<(Model, JwtReport), String> {
    let trust = match (&args.operator, &configured) {
        (Some(value), _) => jwts::Trust::from_value(value, Path::new("."))
            .map_err(|e| format!("cannot read the operator: {}", chain(&e)))?,
        (None, Some(c)) => c.trust.clone(),
        (None, None) => {
            return Err(
                "give the operator the accounts must be signed by: --operator FILE (its JWT, as nsc keeps it) or --config of a server in operator mode"
                    .into(),
            );
        }
    };
    let (found, accounts_from) = if let Some(dir) = &args.resolver {
        let found =
            jwts::read_dir(dir).map_err(|e| format!("cannot read the accounts: {}", chain(&e)))?;
        (found, format!("the resolver's directory {}", dir.display()))
    } else if let Some(url) = &args.resolver_url {
        let messages = pack(connect_args, args, url).await?;
        let from = format!("the resolver at {url} ($SYS.REQ.CLAIMS.PACK)");
        (
            jwts::read_pack(messages.iter().map(String::as_str), &from),
            from,
        )
    } else {
        let c = configured.expect("operator mode without a resolver is the configuration's");
        let mut found = c.preload;
        let from = match &c.dir {
            Some(dir) => {
                found.extend(
                    jwts::read_dir(dir)
                        .map_err(|e| format!("cannot read the accounts: {}", chain(&e)))?,
                );
                format!(
                    "the resolver's directory {} the configuration names, and its preload",
                    dir.display()
                )
            }
            None => "the configuration's resolver_preload (no resolver directory found)".into(),
        };
        (found, from)
    };
    let users = args
        .users
        .clone()
        .or_else(|| beside_config(args, &["operator/creds", "creds"]));
    let mapping = beside_config(args, &["operator"])
        .and_then(|d| mesh_bus::callout::read_mapping(&d))
        .or_else(|| {
            users
                .as_deref()
                .and_then(Path::parent)
                .and_then(mesh_bus::callout::read_mapping)
        });
    // The tools `mesh up` learned each module lists are kept beside its grants file.
    let grants_path = given_or_beside(
        args,
        args.grants.as_ref(),
        Path::new(mesh_bus::statedir::GRANTS_FILE),
    )
    .0;
    let learned = grants_path.parent().map(Path::to_owned);
    audit::from_jwts(audit::JwtSources {
        trust,
        found,
        accounts_from,
        users: users.as_deref(),
        base,
        mapping,
        grants,
        learned: learned.as_deref(),
    })
    .map_err(|e| format!("cannot audit the JWTs: {}", chain(&e)))
}

/// The account JWTs the resolver at `url` keeps, asked as the system account's user.
async fn pack(
    connect_args: &ConnectArgs,
    args: &AuditArgs,
    url: &str,
) -> Result<Vec<String>, String> {
    let creds = connect_args
        .creds
        .clone()
        .or_else(|| beside_config(args, &["operator/creds/SYS.sys.creds", "creds/SYS.sys.creds"]))
        .ok_or_else(|| {
            "give the system account's credential file to ask the resolver: --creds FILE (mesh up keeps it as operator/creds/SYS.sys.creds in its state directory)".to_owned()
        })?;
    let config = mesh_core::client::ConnectConfig {
        server: Some(url.to_owned()),
        creds: Some(creds.clone()),
        tls_cert: connect_args.tlscert.clone(),
        tls_key: connect_args.tlskey.clone(),
        tls_ca: connect_args.tlsca.clone(),
        name: Some("mesh audit: the resolver's accounts".into()),
        isolated: true,
        ..Default::default()
    };
    let client = Client::connect(&config).await.map_err(|e| {
        format!(
            "cannot reach {url} as {} ({e}): is it a server of this operator, and is that the system account's user?",
            creds.display()
        )
    })?;
    mesh_bus::operator::pack(client.nats(), args.timeout)
        .await
        .map_err(|e| format!("cannot read the accounts at {url}: {}", chain(&e)))
}

/// The grants file (for its profiles): the file given, else `grants.conf` beside the
/// configuration when there is one.
fn grants(args: &AuditArgs) -> Result<Option<Grants>, String> {
    let (path, given) = given_or_beside(
        args,
        args.grants.as_ref(),
        std::path::Path::new(mesh_bus::statedir::GRANTS_FILE),
    );
    if !given && !path.exists() {
        return Ok(None);
    }
    Grants::read_file(&path)
        .map(Some)
        .map_err(|e| format!("cannot read the grants file {}: {e}", path.display()))
}

/// The catalogue's tools, or `None` (said on stderr) when no bus answers.
async fn installed_tools(connect_args: &ConnectArgs, args: &AuditArgs) -> Option<Vec<String>> {
    let client = match Client::connect(&connect_args.config("mesh audit", false)).await {
        Ok(c) => c,
        Err(e) => {
            eprintln!("mesh: no bus reachable ({e}); auditing the tools the grants name");
            return None;
        }
    };
    // The catalogue's entries name every tool: neither the modules nor the server are asked.
    match client.catalogue(None, args.timeout).await {
        Ok(entries) => Some(entries.iter().flat_map(ModuleEntry::full_names).collect()),
        Err(e) => {
            eprintln!(
                "mesh: the catalogue did not answer ({e}); auditing the tools the grants name"
            );
            None
        }
    }
}

fn print_report(report: &Report) {
    match report.tools_from {
        ToolSource::Catalogue => println!("Tools: the catalogue's ({}).", report.tools.len()),
        ToolSource::Grants => println!(
            "Tools: those the grants name ({}); no catalogue was asked.",
            report.tools.len()
        ),
    }
    println!();
    // One row per person; the tools are columns, numbered, with a key below.
    let mut rows: Vec<Vec<String>> = Vec::new();
    for (person, verdicts) in report.people.iter().zip(&report.may_call) {
        let mut row = vec![person.clone()];
        row.extend(
            verdicts
                .iter()
                .map(|v| if *v { "yes" } else { "-" }.to_owned()),
        );
        rows.push(row);
    }
    let mut header = vec!["PERSON".to_owned()];
    header.extend((1..=report.tools.len()).map(|i| i.to_string()));
    // One column per tool: nothing to cut, so whole (`--json` and `--csv` for scripts).
    table::print(&header, &rows, &[], None);
    println!();
    if !report.modules.is_empty() {
        // Modules: "self" calls as itself, "people" for the person who called it.
        let rows: Vec<Vec<String>> = report
            .modules
            .iter()
            .zip(
                report
                    .module_may_call
                    .iter()
                    .zip(&report.module_acts_for_people),
            )
            .map(|(m, (own, obo))| {
                let mut row = vec![m.clone()];
                row.extend(own.iter().zip(obo).map(|(o, p)| {
                    match (o, p) {
                        (true, true) => "both",
                        (true, false) => "self",
                        (false, true) => "people",
                        (false, false) => "-",
                    }
                    .to_owned()
                }));
                row
            })
            .collect();
        let mut header = vec!["MODULE".to_owned()];
        header.extend((1..=report.tools.len()).map(|i| i.to_string()));
        // One column per tool: nothing to cut, so whole (`--json` and `--csv` for scripts).
        table::print(&header, &rows, &[], None);
        println!("  self: calls as itself; people: calls for the person who called it");
        println!();
    }
    for (i, tool) in report.tools.iter().enumerate() {
        println!("{:>3}  {tool}", i + 1);
    }
    println!();
    if !report.features.is_empty() {
        super::audit_features::print(&report.features);
        println!();
    }
    if let Some(limits) = &report.limits {
        print_limits(limits);
        println!();
    }
    if let Some(profiles) = report.profiles.as_ref().filter(|p| !p.is_empty()) {
        print_profiles(profiles);
        println!();
    }
    if let Some(j) = &report.jwts {
        print_jwts(j);
        println!();
    }
    if report.findings.is_empty() {
        println!("No findings.");
    } else {
        println!("Findings:");
        for f in &report.findings {
            println!("  {}: {}", f.kind, f.message);
        }
    }
}

/// Each person's share of every module instance, as the runtime enforces it.
fn print_limits(limits: &LimitsTable) {
    println!(
        "Limits, per caller and module instance (more in flight wait their turn; past that, or past a minute's calls, busy):"
    );
    let cell = |n: Option<u32>, none: &str| n.map_or_else(|| none.to_owned(), |n| n.to_string());
    let mut rows = vec![vec![
        "everyone else".to_owned(),
        cell(limits.default.in_flight, "a fair share"),
        cell(limits.default.per_minute, "no bound"),
    ]];
    for (who, l) in &limits.callers {
        rows.push(vec![
            who.clone(),
            cell(l.in_flight, "a fair share"),
            cell(l.per_minute, "no bound"),
        ]);
    }
    let header = ["CALLER", "IN FLIGHT", "A MINUTE"].map(String::from);
    table::print(&header, &rows, &[], None);
}

/// The tools each profile offers an agent (`mesh mcp --profile NAME`), of those audited;
/// what the agent may call is still its person's row above.
fn print_profiles(profiles: &[ProfileReport]) {
    println!(
        "Profiles, the tools each offers an agent (mesh mcp --profile NAME; each person still calls only what their row says):"
    );
    for p in profiles {
        let tools = if p.tools.is_empty() {
            "none of these tools".to_owned()
        } else {
            p.tools.join(", ")
        };
        println!("  {}: {} -> {tools}", p.name, p.patterns.join(", "));
    }
}

/// Operator mode: where the accounts and users came from, the accounts, the callout, and the
/// accounts against the grants.
fn print_jwts(j: &JwtReport) {
    println!(
        "Accounts: {}, each checked against operator {} ({}).",
        j.accounts_from, j.operator.name, j.operator.operator
    );
    let limit = |n: i64| {
        if n < 0 { "-".to_owned() } else { n.to_string() }
    };
    let rows: Vec<Vec<String>> = j
        .accounts
        .iter()
        .map(|a| {
            vec![
                a.name.clone(),
                a.role.to_owned(),
                a.users.to_string(),
                a.exports.to_string(),
                a.imports.to_string(),
                limit(a.conn),
                limit(a.subs),
                limit(a.data),
                limit(a.payload),
                if a.jetstream { "yes" } else { "-" }.to_owned(),
            ]
        })
        .collect();
    let header = [
        "ACCOUNT",
        "ROLE",
        "USERS",
        "EXPORTS",
        "IMPORTS",
        "CONN",
        "SUBS",
        "DATA",
        "PAYLOAD",
        "JETSTREAM",
    ]
    .map(String::from);
    table::print(&header, &rows, &[], None);
    println!("  limits: - is none");
    println!("Users: {}.", j.users_from);
    for c in &j.callouts {
        println!(
            "Auth callout in {}: answered by {}, places people in {}{}.",
            c.account,
            c.answered_by.join(", "),
            c.places_in.join(", "),
            if c.sealed {
                ", its questions and answers sealed"
            } else {
                ", unsealed"
            }
        );
        match &c.mapping {
            Some(m) => println!(
                "  ID tokens of {} for audience {}: the claim {} names the person in the grants file",
                m.issuer, m.audience, m.claim
            ),
            None => println!(
                "  which identity provider and claim name people is not kept beside the configuration (mesh up --idp keeps operator/idp.json)"
            ),
        }
        match &c.people {
            Some(people) if !people.is_empty() => {
                let named: Vec<String> = people
                    .iter()
                    .map(|p| format!("{} ({})", p.person, p.roles.join(", ")))
                    .collect();
                println!(
                    "  signs in, each with their row above: {}",
                    named.join(", ")
                );
            }
            Some(_) => println!("  signs in nobody: the grants file names no person"),
            None => println!("  whom it signs in is the grants file's (give --grants FILE)"),
        }
    }
    if let Some(drift) = &j.drift {
        println!("Against what the grants file writes:");
        for d in drift {
            if d.what.is_empty() {
                println!("  {}: {}", d.account, d.verdict);
            } else {
                println!("  {}: {} ({})", d.account, d.verdict, d.what.join(", "));
            }
        }
    }
}
