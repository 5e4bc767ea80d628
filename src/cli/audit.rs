//! `mesh audit --config <nats-server.conf>`: a row per person, a column per tool, findings.

use super::args::{AuditArgs, ConnectArgs};
use mesh_bus::audit::{self, Model, ProfileReport, Report, ToolSource};
use mesh_bus::grants::Grants;
use mesh_core::client::Client;
use mesh_core::client::Exit;
use mesh_core::subjects::catalog::ModuleEntry;
use mesh_core::subjects::limits::LimitsTable;
use mesh_core::table;

pub async fn run(connect_args: &ConnectArgs, args: AuditArgs) -> anyhow::Result<Exit> {
    let Some(config) = args.config.clone() else {
        eprintln!("mesh: give the configuration nats-server runs with: mesh audit --config FILE");
        return Ok(Exit::Usage);
    };
    let conf = match audit::parse_file(&config) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("mesh: cannot read the configuration: {e}");
            return Ok(Exit::Usage);
        }
    };
    let model = match Model::read(&conf) {
        Ok(m) => m,
        Err(e) => {
            eprintln!("mesh: cannot read the configuration: {e}");
            return Ok(Exit::Usage);
        }
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
    match grants(&args) {
        Ok(Some(grants)) => report = report.with_profiles(&grants),
        Ok(None) => {}
        Err(e) => {
            eprintln!("mesh: {e}");
            return Ok(Exit::Usage);
        }
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
        None => (
            args.config
                .as_deref()
                .and_then(|c| c.parent())
                .unwrap_or(std::path::Path::new("."))
                .join(beside),
            false,
        ),
    }
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
