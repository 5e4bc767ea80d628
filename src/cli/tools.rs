//! `mesh tools [module]`: what the catalogue has, tool by tool, and which modules did not answer.

use serde_json::json;

use super::args::{ConnectArgs, ToolsArgs};
use super::{Reach, failed};
use mesh_catalog::ago;
use mesh_core::client::Access;
use mesh_core::client::Exit;
use mesh_core::client::Found;
use mesh_core::client::Outcome;
use mesh_core::subjects::catalog::now_ms;
use mesh_core::table;

pub async fn run(connect_args: &ConnectArgs, args: ToolsArgs) -> anyhow::Result<Exit> {
    let client = match Reach::new(connect_args, args.console.as_deref()).await {
        Ok(r) => r,
        Err(exit) => return Ok(exit),
    };
    if args.stats
        && let Reach::Bus(bus) = &client
    {
        return super::stats::run(bus, args.module.as_deref(), args.json, args.wide).await;
    }
    let found = match client.discover(args.module.as_deref(), args.timeout).await {
        Ok(d) => d,
        Err(e) => return Ok(failed(&e)),
    };
    if let Some(m) = &args.module
        && found.modules.is_empty()
    {
        eprintln!("mesh: no module named {m} is registered in the catalogue");
        return Ok(Exit::NobodyServes);
    }
    let now = now_ms();
    if args.mine
        && let Err(why) = &found.yours
    {
        eprintln!("mesh: cannot tell which tools are yours: {why}");
        return Ok(Exit::Usage);
    }
    let yours = |full: &str| found.yours.as_ref().ok().map(|set| set.contains(full));
    let shown = |full: &str| !args.mine || yours(full) == Some(true);
    if args.json {
        let mut tools = Vec::new();
        let mut silent = Vec::new();
        for f in &found.modules {
            match &f.tools {
                Ok(reply) => {
                    for t in reply.tools.iter() {
                        let full = mesh_core::subjects::full_name(&reply.module, &t.name);
                        if !shown(&full) {
                            continue;
                        }
                        let mut v = serde_json::to_value(t)?;
                        v["yours"] = json!(yours(&full));
                        v["name"] = json!(full);
                        v["module"] = json!(reply.module);
                        tools.push(v);
                    }
                }
                Err(e) => silent.push(json!({
                    "module": f.entry.module,
                    "outcome": e.outcome().name(),
                    "error": e.to_string(),
                    "last_seen_ms": f.entry.last_seen_ms,
                })),
            }
        }
        let out = json!({
            "tools": tools,
            "not_answering": silent,
            "yours_unknown": found.yours.as_ref().err(),
        });
        println!("{}", serde_json::to_string_pretty(&out)?);
        return Ok(Exit::Ok);
    }

    let mut rows: Vec<Vec<String>> = Vec::new();
    let mut silent = Vec::new();
    for f in &found.modules {
        match &f.tools {
            Ok(reply) => {
                let status = match f.entry.instances {
                    0 | 1 => "running".to_owned(),
                    n => format!("running ({n} instances)"),
                };
                for t in reply.tools.iter() {
                    let full = mesh_core::subjects::full_name(&reply.module, &t.name);
                    if !shown(&full) {
                        continue;
                    }
                    let first_line = t.description.lines().next().unwrap_or_default();
                    let mark = match yours(&full) {
                        Some(true) => "yes",
                        Some(false) => "-",
                        None => "?",
                    };
                    rows.push(vec![
                        full,
                        first_line.to_owned(),
                        status.clone(),
                        mark.to_owned(),
                    ]);
                }
            }
            Err(e) => silent.push((f, e)),
        }
    }
    let header = ["TOOL", "DESCRIPTION", "STATUS", "YOURS"].map(String::from);
    // The description gives way on a terminal; names, status and YOURS stay whole.
    table::print(&header, &rows, &[1], table::width(args.wide));
    if let Err(why) = &found.yours {
        println!();
        println!("YOURS is unknown (?): {why}.");
    }
    // A module whose every instance said it stopped (unregistered) is installed and not
    // running; one still registered that does not answer ended without saying so, or hangs.
    let (stopped, silent): (Vec<_>, Vec<_>) = silent
        .into_iter()
        .partition(|(f, e)| f.entry.instances == 0 && e.outcome() == Outcome::NobodyServes);
    let seen = |f: &Found| {
        format!(
            "{} {} ({} tool{}; last seen {} ago)",
            f.entry.module,
            f.entry.version,
            f.entry.tools.len(),
            if f.entry.tools.len() == 1 { "" } else { "s" },
            ago(now, f.entry.last_seen_ms)
        )
    };
    if !stopped.is_empty() {
        println!();
        println!("Stopped (installed, not running; `mesh catalog forget <module>` removes one):");
        for (f, _) in &stopped {
            println!("  {}", seen(f));
        }
    }
    if !silent.is_empty() {
        println!();
        println!("Registered but not answering:");
        for (f, e) in silent {
            let why = match e.outcome() {
                Outcome::NobodyServes => "not running".to_owned(),
                Outcome::Denied => "its tools verb is not yours to ask".to_owned(),
                Outcome::Slow => "did not answer in time".to_owned(),
                _ => e.to_string(),
            };
            println!("  {}: {why}", seen(f));
        }
    }
    Ok(Exit::Ok)
}
