//! `mesh decide ontology import|search|list` (the decide module's local ontology index) and
//! `mesh decide lake recover|show` (its lake).

use std::io::IsTerminal;
use std::path::PathBuf;
use std::time::Instant;

use super::args::{DecideCommand, DecideDirArg, IndexArg, LakeCommand, OntologyCommand};
use super::exit::Exit;
use super::up::default_dir;
use crate::modules::avu::path::normalise;
use crate::modules::decide::apply::mirror_pending;
use crate::modules::decide::index::Index;
use crate::modules::decide::lake::Lake;
use crate::modules::decide::sidecar::Sidecar;

fn index_path(arg: &IndexArg) -> PathBuf {
    arg.index
        .clone()
        .unwrap_or_else(|| default_dir().join("decide").join("ontology.sqlite"))
}

fn decide_dir(arg: &DecideDirArg) -> PathBuf {
    arg.dir
        .clone()
        .unwrap_or_else(|| default_dir().join("decide"))
}

pub fn run(cmd: DecideCommand) -> anyhow::Result<Exit> {
    match cmd {
        DecideCommand::Ontology(cmd) => ontology(cmd),
        DecideCommand::Lake(cmd) => lake(cmd),
    }
}

fn lake(cmd: LakeCommand) -> anyhow::Result<Exit> {
    match cmd {
        LakeCommand::Recover { dir } => {
            let dir = decide_dir(&dir);
            let sidecar = std::sync::Mutex::new(Sidecar::open(&dir.join("sidecar.sqlite"))?);
            let done = mirror_pending(&sidecar, &dir.join("lake"));
            if done.is_empty() {
                println!("nothing to mirror: the lake holds every written AVU");
                return Ok(Exit::Ok);
            }
            let mut failed = false;
            for m in &done {
                match (&m.error, m.snapshot) {
                    (None, Some(s)) => println!(
                        "run {} on {}: {} AVUs in lake snapshot {s}",
                        m.run_id, m.path, m.links
                    ),
                    (e, _) => {
                        failed = true;
                        eprintln!(
                            "mesh: run {} on {}: {}",
                            m.run_id,
                            m.path,
                            e.as_deref().unwrap_or("not mirrored")
                        );
                    }
                }
            }
            Ok(if failed { Exit::ToolError } else { Exit::Ok })
        }
        LakeCommand::Show { path, dir } => {
            let lake = Lake::open(&decide_dir(&dir).join("lake"))?;
            match path {
                Some(p) => {
                    let p = normalise(&p)?;
                    for (attribute, value, unit) in lake.current(&p)? {
                        println!("{attribute}\t{value}\t{unit}");
                    }
                }
                None => {
                    for (snapshot, e) in lake.events()? {
                        println!(
                            "{snapshot}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}",
                            e.run_id,
                            e.path,
                            e.op,
                            e.attribute,
                            e.value,
                            e.unit,
                            e.actor,
                            e.link_id
                        );
                    }
                }
            }
            Ok(Exit::Ok)
        }
    }
}

fn ontology(cmd: OntologyCommand) -> anyhow::Result<Exit> {
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
