//! `mesh decide ontology import|search|list`: the decide module's local ontology index.

use std::io::IsTerminal;
use std::path::PathBuf;
use std::time::Instant;

use super::args::{DecideCommand, IndexArg, OntologyCommand};
use super::exit::Exit;
use super::up::default_dir;
use crate::modules::decide::index::Index;

fn index_path(arg: &IndexArg) -> PathBuf {
    arg.index
        .clone()
        .unwrap_or_else(|| default_dir().join("decide").join("ontology.sqlite"))
}

pub fn run(cmd: DecideCommand) -> anyhow::Result<Exit> {
    let DecideCommand::Ontology(cmd) = cmd;
    match cmd {
        OntologyCommand::Import { file, index } => {
            let path = index_path(&index);
            let mut index = Index::open(&path)?;
            let started = Instant::now();
            let tty = std::io::stderr().is_terminal();
            let name = file.display().to_string();
            let done = index.import(&file, |n| {
                if tty {
                    eprint!("\r{name}: {n} terms");
                } else {
                    eprintln!("{name}: {n} terms");
                }
            })?;
            if tty {
                eprintln!();
            }
            println!(
                "imported {} {}: {} terms ({} obsolete, not searchable) in {:.1} s into {}",
                done.ontology,
                done.version.as_deref().unwrap_or("(no version)"),
                done.terms,
                done.obsolete,
                started.elapsed().as_secs_f64(),
                path.display()
            );
            Ok(Exit::Ok)
        }
        OntologyCommand::Search {
            ontology,
            words,
            limit,
            json,
            index,
        } => {
            let index = Index::open(&index_path(&index))?;
            let found = index.search(&ontology, &words.join(" "), limit)?;
            if json {
                println!("{}", serde_json::to_string_pretty(&found)?);
            } else if found.is_empty() {
                eprintln!("mesh: nothing in {ontology} matches {:?}", words.join(" "));
                return Ok(Exit::ToolError);
            } else {
                for c in found {
                    println!("{}  {}", c.curie, c.label);
                }
            }
            Ok(Exit::Ok)
        }
        OntologyCommand::List { index } => {
            let index = Index::open(&index_path(&index))?;
            for (name, version, terms) in index.ontologies()? {
                println!("{name}  {}  {terms} terms", version.unwrap_or_default());
            }
            Ok(Exit::Ok)
        }
    }
}
