//! `mesh decide run` (the module on the bus), `mesh decide ontology import|search|list` (its
//! local ontology index), `lake recover|show` (its lake) and `learn fit|promote|list|eval`.

use std::path::{Path, PathBuf};
use std::time::Instant;

pub mod args;
mod fetch;

use anyhow::Context as _;
use args::{
    DecideDirArg, EmbedTexts, IndexArg, LakeCommand, LearnCommand, OntologyCommand, RunArgs,
};
use indicatif::{ProgressBar, ProgressStyle};
use mesh_avu::path::normalise;
use mesh_core::client::{Client, Exit};
use mesh_core::runtime::{self, ServeOptions, Stop, default_state_dir as default_dir};
use mesh_core::table;
use mesh_decide::apply::{LAKE_WAIT, mirror_pending_reporting};
use mesh_decide::embed;
use mesh_decide::lake::{Lake, LakeAt};
use mesh_decide::learn::bundle::{self, BundleError};
use mesh_decide::learn::metrics::Metrics;
use mesh_decide::learn::{self, FitOptions, LearnError, eval};
use mesh_decide::questions;
use mesh_decide::store::sidecar::Sidecar;
use mesh_decide::tools::Config;
use mesh_ontology::index::Index;

/// After an import: the ontology's terms embedded into the index, unless it is one
/// [`embed::NOT_EMBEDDED`] names or `--vectors none` was given. Without the model the import
/// stands and a warning says how to install it.
fn embed_terms(index: &mut Index, ontology: &str, texts: EmbedTexts) -> anyhow::Result<()> {
    if texts == EmbedTexts::None || embed::NOT_EMBEDDED.contains(&ontology) {
        return Ok(());
    }
    let embedder = match embed::Embedder::load_default() {
        Ok(e) => e,
        Err(e) => {
            eprintln!("mesh decide: {ontology}'s terms not embedded: {e}");
            return Ok(());
        }
    };
    let started = Instant::now();
    // A bar on a terminal (indicatif draws nothing on a pipe); the summary goes to stdout.
    let bar = ProgressBar::new(0).with_style(
        ProgressStyle::with_template("{msg} [{bar:30}] {pos}/{len} terms, {per_sec}, {eta} left")
            .expect("a fixed template")
            .progress_chars("=> "),
    );
    bar.set_message(format!("embedding {ontology}"));
    let set = embed::embed_ontology(
        index,
        &embedder,
        ontology,
        texts == EmbedTexts::Synonyms,
        |done, total| {
            bar.set_length(total);
            bar.set_position(done);
        },
    )?;
    bar.finish_and_clear();
    println!(
        "embedded {ontology}: {} vectors of {} terms in {:.1} s ({})",
        set.vectors,
        set.terms,
        started.elapsed().as_secs_f64(),
        embed::MODEL
    );
    Ok(())
}

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

/// `mesh decide run`: the module served on the bus until Ctrl-C or SIGTERM (a second one
/// ends the process at once).
pub async fn serve(args: RunArgs) -> anyhow::Result<Exit> {
    // Signals first: a stop asked for while the module starts (on a bus not up yet, it
    // waits) is a stop, not the signal's default action.
    let stop = Stop::listen().context("cannot listen for Ctrl-C and SIGTERM")?;
    let client = Client::connect(&args.connect.config("mesh decide", true))
        .await
        .context("cannot connect to the bus")?;
    let dir = decide_dir(&args.dir);
    // The sidecar, lake and key under it are the owner's alone.
    runtime::private_dir(&dir)
        .with_context(|| format!("cannot make decide's directory {} (private)", dir.display()))?;
    // Off the runtime: a shared sidecar's PostgreSQL client blocks on a runtime of its own.
    // The message names the cause already: no chain of sources after it.
    let config = Config::in_dir(&dir).with_bus(client.clone());
    let module = tokio::task::spawn_blocking(move || mesh_decide::tools::module(config))
        .await
        .context("decide stopped while it started")?
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    let options = ServeOptions {
        layout: args.layout,
        max_in_flight: args.max_in_flight,
        ..ServeOptions::default()
    };
    let stopping = stop.then_at_once("mesh decide");
    runtime::serve(module, client.nats().clone(), options, stopping).await?;
    Ok(Exit::Ok)
}

pub fn learn(cmd: LearnCommand) -> anyhow::Result<Exit> {
    match cmd {
        LearnCommand::Fit {
            min_labels,
            json,
            dir,
        } => learn_fit(min_labels, json, &decide_dir(&dir)),
        LearnCommand::Promote {
            version,
            force,
            dir,
        } => learn_promote(version.as_deref(), force, &decide_dir(&dir)),
        LearnCommand::List { dir } => learn_list(&decide_dir(&dir)),
        LearnCommand::Eval {
            cards,
            bundle,
            index,
            plot,
            rows,
            embed,
            json,
            write_calibration,
            dir,
        } => learn_eval(
            &cards,
            &bundle,
            index,
            embed,
            EvalOutput {
                plot,
                rows,
                json,
                write_calibration,
            },
            &decide_dir(&dir),
        ),
    }
}

/// `learn fit`: a new bundle from the sidecar's labels.
fn learn_fit(min_labels: usize, json: bool, dir: &Path) -> anyhow::Result<Exit> {
    let sidecar = Sidecar::in_dir(dir)?;
    let config = Config::in_dir(dir);
    let options = FitOptions {
        min_labels,
        ..FitOptions::default()
    };
    let mut shown = FitShown::new();
    let fitted = learn::fit(
        &sidecar,
        config.backend.as_ref(),
        &dir.join("bundles"),
        options,
        &mut |step| shown.step(step),
    );
    shown.done();
    let report = match fitted {
        Ok(r) => r,
        Err(LearnError::NothingFitted(why)) => {
            eprintln!("mesh decide: nothing fitted, no bundle written: {why}");
            return Ok(Exit::ToolError);
        }
        Err(e) => return Err(e.into()),
    };
    if json {
        println!("{}", serde_json::to_string_pretty(&report)?);
        return Ok(Exit::Ok);
    }
    println!(
        "bundle {} written (mesh decide learn promote {} puts it in use)",
        report.version, report.version
    );
    for f in &report.fitted {
        println!(
            "  {}: {} labels from {} cards, answers at {}",
            f.key,
            f.labels,
            f.cards,
            f.level.name()
        );
        for (level, m) in &f.metrics {
            println!("    {}", metrics_line(level, m));
        }
    }
    for (key, why) in &report.skipped {
        println!("  {key}: not fitted: {why}");
    }
    Ok(Exit::Ok)
}

/// How `learn fit` shows its steps: a bar per question on a terminal (its labels' features,
/// then its cards held out); through a pipe a line per question, per 200 labels and per
/// card held out, as a log.
struct FitShown {
    /// The question being fitted, and its bar once it has something to show.
    question: Option<String>,
    bar: Option<ProgressBar>,
    terminal: bool,
}

impl FitShown {
    fn new() -> FitShown {
        FitShown {
            question: None,
            bar: None,
            terminal: std::io::IsTerminal::is_terminal(&std::io::stderr()),
        }
    }

    fn step(&mut self, step: learn::Step<'_>) {
        use learn::Step;
        if !self.terminal {
            match step {
                Step::Features { done, of, .. } if done % 200 != 0 && done != of => {}
                step => eprintln!("{step}"),
            }
            return;
        }
        match step {
            Step::Question { key, .. } => {
                self.done();
                self.question = Some(key.to_owned());
            }
            Step::Features { done, of, .. } => self.at(done, of, "labels read"),
            Step::HeldOut { done, of, .. } => self.at(done, of, "cards held out"),
            Step::Skipped { .. } => {
                self.done();
                eprintln!("{step}");
            }
        }
    }

    fn at(&mut self, done: usize, of: usize, what: &'static str) {
        let question = &self.question;
        let bar = self.bar.get_or_insert_with(|| {
            let bar = ProgressBar::new(of as u64).with_style(
                ProgressStyle::with_template("{prefix} [{bar:30}] {pos}/{len} {msg}, {eta} left")
                    .expect("a fixed template")
                    .progress_chars("=> "),
            );
            bar.set_prefix(question.clone().unwrap_or_default());
            bar.set_message(what);
            bar
        });
        if bar.length() != Some(of as u64) || bar.message() != what {
            bar.set_length(of as u64);
            bar.set_message(what);
            bar.reset_eta();
        }
        bar.set_position(done as u64);
    }

    fn done(&mut self) {
        if let Some(bar) = self.bar.take() {
            bar.finish_and_clear();
        }
    }
}

/// `learn promote`: a version in use, unless it is worse than the one in use.
fn learn_promote(version: Option<&str>, force: bool, dir: &Path) -> anyhow::Result<Exit> {
    let bundles = dir.join("bundles");
    let sidecar = Sidecar::in_dir(dir)?;
    let config = Config::in_dir(dir);
    let backend = config.backend.as_ref();
    let name = backend.name();
    let lock = mesh_decide::questions::lock_id();
    let compare = |new: &bundle::Bundle, old: &bundle::Bundle| {
        learn::compare_on_labels(&sidecar, backend, new, old)
    };
    let judge = bundle::Judge {
        backend: &name,
        lock: &lock,
        judge: &compare,
    };
    match bundle::promote(&bundles, version, force, &judge) {
        Ok(p) => {
            println!(
                "bundle {} is current (was {}); a running decide picks it up on its next call",
                p.version,
                p.from.as_deref().unwrap_or("none")
            );
            for why in &p.overridden {
                println!("  forced past: {why}");
            }
            Ok(Exit::Ok)
        }
        Err(
            e @ (BundleError::Worse { .. }
            | BundleError::CannotCompare { .. }
            | BundleError::OtherBackend { .. }
            | BundleError::OtherLock { .. }),
        ) => {
            eprintln!("mesh decide: {e}");
            Ok(Exit::ToolError)
        }
        Err(e) => Err(e.into()),
    }
}

/// `learn list`: every version with its metrics, the current one marked.
fn learn_list(dir: &Path) -> anyhow::Result<Exit> {
    let bundles = dir.join("bundles");
    let current = bundle::current(&bundles);
    let versions = bundle::versions(&bundles);
    if versions.is_empty() {
        println!("no bundles: mesh decide learn fit makes one");
    }
    for v in versions {
        let b = bundle::load(&bundles, &v)?;
        let mark = if current.as_deref() == Some(v.as_str()) {
            " (current)"
        } else {
            ""
        };
        println!(
            "{v}{mark}: backend {}, {} questions",
            b.manifest.backend,
            b.manifest.questions.len()
        );
        for (key, f) in &b.manifest.questions {
            let level = f.level.name();
            if let Some(m) = b.metrics.get(key).and_then(|m| m.get(level)) {
                println!("  {key}: {}", metrics_line(level, m));
            }
        }
    }
    Ok(Exit::Ok)
}

/// What `learn eval` writes besides its summary.
struct EvalOutput {
    plot: Option<PathBuf>,
    rows: bool,
    json: bool,
    write_calibration: Option<PathBuf>,
}

/// `learn eval`: gold cards through the graph, at every level.
fn learn_eval(
    cards: &Path,
    which: &str,
    index: Option<PathBuf>,
    embed: bool,
    output: EvalOutput,
    dir: &Path,
) -> anyhow::Result<Exit> {
    let bundles = dir.join("bundles");
    let index = Index::open(&index.unwrap_or_else(|| dir.join("ontology.sqlite")))?;
    let embedder = if embed {
        match mesh_decide::embed::Embedder::load_default() {
            Ok(e) => Some(e),
            Err(e) => {
                eprintln!("mesh decide: {e}");
                return Ok(Exit::Usage);
            }
        }
    } else {
        None
    };
    let config = Config::in_dir(dir);
    let chosen = match which {
        "none" => None,
        "current" => bundle::current(&bundles),
        v => Some(v.to_owned()),
    };
    let loaded = match chosen {
        Some(v) => {
            let b = bundle::load(&bundles, &v)?;
            b.check(&config.backend.name(), &questions::lock_id())?;
            Some(b)
        }
        None => None,
    };
    let report = match eval::eval(
        cards,
        &index,
        embedder.as_ref(),
        config.backend.as_ref(),
        &config.policy,
        loaded.as_ref(),
    ) {
        Ok(r) => r,
        Err(e @ eval::EvalError::Input(_)) => {
            eprintln!("mesh decide: {e}");
            return Ok(Exit::Usage);
        }
        Err(e) => return Err(e.into()),
    };
    if let Some(file) = &output.plot {
        if let Err(e) = learn::plot::draw(&report, file) {
            eprintln!("mesh decide: {e}");
            return Ok(Exit::Usage);
        }
        eprintln!("mesh decide: plot written to {}", file.display());
    }
    if let Some(file) = &output.write_calibration {
        let Some(model) = &report.winner_model else {
            eprintln!(
                "mesh decide: no winner head could be fitted: some card's complement has no right or no wrong winner"
            );
            return Ok(Exit::Usage);
        };
        let mut model = model.clone();
        model.fitted_on.command = format!(
            "mesh-decide learn eval --cards {} --bundle none --write-calibration FILE",
            cards.display()
        );
        if report.sealed.is_some() && model.fitted_on.sealed.is_none() {
            eprintln!(
                "mesh decide: the winner head has no figures on the sealed part (its winners are all right or all wrong): not written"
            );
            return Ok(Exit::Usage);
        }
        std::fs::write(file, serde_json::to_string_pretty(&model)? + "\n")?;
        eprintln!("mesh decide: winner head written to {}", file.display());
    }
    if output.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
        return Ok(Exit::Ok);
    }
    // Every figure of the development part beside the sealed part's, when the set is split.
    let parts: Vec<(&str, &eval::EvalReport)> = match &report.sealed {
        Some(s) => vec![("dev", &report), ("sealed", s)],
        None => vec![("", &report)],
    };
    for (name, r) in &parts {
        let name = if name.is_empty() {
            String::new()
        } else {
            format!("{name}: ")
        };
        println!(
            "{name}{} cards: {} gold columns, {} that stay unannotated; bundle {}",
            r.cards,
            r.gold_columns,
            r.unannotated_columns,
            r.bundle.as_deref().unwrap_or("none")
        );
    }
    if report.sealed.is_some() {
        println!(
            "(sealed: nothing fitted on it, its rows not shown; L1, L2, W1 and W2 on it fitted on every dev card)"
        );
    }
    let figure = |what: &str, f: &dyn Fn(&eval::EvalReport) -> String| {
        let cells: Vec<String> = parts.iter().map(|(_, r)| format!("{:>9}", f(r))).collect();
        println!("{what:<58}{}", cells.join(" "));
    };
    if report.sealed.is_some() {
        figure("", &|r| match r.part {
            eval::Part::Development => "dev".into(),
            eval::Part::Sealed => "sealed".into(),
        });
    }
    figure("annotate without the winner head: proposal top-1", &|r| {
        format!("{:.3}", r.annotate.proposal_top1)
    });
    figure("  precision", &|r| format!("{:.3}", r.annotate.precision));
    figure("  proposals", &|r| r.annotate.proposals.to_string());
    figure("  unannotated kept", &|r| {
        format!("{:.3}", r.kept_unannotated)
    });
    figure("right term among the candidates", &|r| {
        format!("{:.3}", r.reachable)
    });
    figure("  not searched (decide chose not to annotate)", &|r| {
        format!("{:.3}", r.not_searched)
    });
    figure("  searched in none of its right terms' ontologies", &|r| {
        format!("{:.3}", r.searched_elsewhere)
    });
    let head = |r: &eval::EvalReport, f: &dyn Fn(&eval::WinnerReport) -> String| {
        r.winner_held_out.as_ref().map(f).unwrap_or("-".into())
    };
    figure("annotate as decide runs (kept by the head): top-1", &|r| {
        head(r, &|w| format!("{:.3}", w.kept.proposal_top1))
    });
    figure("  precision", &|r| {
        head(r, &|w| format!("{:.3}", w.kept.precision))
    });
    figure("  proposals", &|r| {
        head(r, &|w| w.kept.proposals.to_string())
    });
    figure("  the keep question even at p (chosen on dev)", &|r| {
        head(r, &|w| {
            w.keep_at
                .map(|a| format!("{a:.2}"))
                .unwrap_or("each".into())
        })
    });
    figure("  right proposals above wrong ones in p (AUC)", &|r| {
        head(r, &|w| {
            w.separation
                .map(|s| format!("{s:.3}"))
                .unwrap_or("-".into())
        })
    });
    figure("  kept from an even chance instead: top-1", &|r| {
        head(r, &|w| format!("{:.3}", w.kept_even.proposal_top1))
    });
    figure("    precision", &|r| {
        head(r, &|w| format!("{:.3}", w.kept_even.precision))
    });
    figure("    proposals", &|r| {
        head(r, &|w| w.kept_even.proposals.to_string())
    });
    figure("winner-p ECE (W2, the winner head held out)", &|r| {
        head(r, &|w| format!("{:.3}", w.metrics.ece))
    });
    figure("  a calibrated p's ECE on these winners (mean)", &|r| {
        head(r, &|w| format!("{:.3}", w.ece_floor.0))
    });
    figure("  the same, 95th percentile", &|r| {
        head(r, &|w| format!("{:.3}", w.ece_floor.1))
    });
    figure("  Brier", &|r| {
        head(r, &|w| format!("{:.3}", w.metrics.brier))
    });
    figure("  winners", &|r| head(r, &|w| w.metrics.n.to_string()));
    println!(
        "{:<17} {:>6} {:>9} {:>9} {:>9} {:>6} {:>6} {:>6} {:>6} {:>6}",
        "level",
        "top-1",
        "proposal",
        "precision",
        "accuracy",
        "ECE",
        "Brier",
        "cov5%",
        "cov10%",
        "n"
    );
    for level in report.levels.keys() {
        for (name, r) in &parts {
            let Some(l) = r.levels.get(level) else {
                continue;
            };
            let m = &l.term_fits;
            println!(
                "{:<17} {:>6.3} {:>9.3} {:>9.3} {:>9.3} {:>6.3} {:>6.3} {:>6.2} {:>6.2} {:>6}",
                format!("{level} {name}").trim_end(),
                l.top1,
                l.proposal_top1,
                l.precision,
                m.accuracy,
                m.ece,
                m.brier,
                m.coverage_at_5,
                m.coverage_at_10,
                m.n
            );
        }
    }
    println!(
        "(L1, L2: fitted on the other cards for each card; W1: Platt fitted on the other cards' winners alone, which speaks for winners, not every candidate; top-1 and proposal over gold columns, precision over proposals)"
    );
    // What a curator is shown: each column's winner, its p against whether it is right.
    println!(
        "{:<17} {:>9} {:>9} {:>6} {:>6} {:>6}",
        "winners", "mean p", "right", "ECE", "Brier", "n"
    );
    let mut winner_lines: Vec<(String, f64, f64, &Metrics)> = Vec::new();
    for level in report.levels.keys() {
        for (name, r) in &parts {
            if let Some(l) = r.levels.get(level) {
                winner_lines.push((
                    format!("{level} {name}").trim_end().to_owned(),
                    l.winner_mean_p,
                    l.winner_right,
                    &l.winner,
                ));
            }
        }
    }
    for (name, r) in &parts {
        if let Some(w) = &r.winner_held_out {
            winner_lines.push((
                format!("W2 {name}").trim_end().to_owned(),
                w.mean_p,
                w.right,
                &w.metrics,
            ));
        }
    }
    for (level, mean_p, right, m) in winner_lines {
        println!(
            "{level:<17} {mean_p:>9.3} {right:>9.3} {:>6.3} {:>6.3} {:>6}",
            m.ece, m.brier, m.n
        );
    }
    if report.winner_held_out.is_some() {
        println!(
            "(W2: the winner head — the features, margin and ontology of each column's winner, whether the column states a unit and how sure the backend was that it is annotated — fitted on the other cards' winners, or on every dev card's for the sealed part: the p a curator is shown for a winner)"
        );
    }
    if output.rows {
        if report.sealed.is_some() {
            println!("(rows of the dev part only: the sealed part's are not shown)");
        }
        for r in &report.rows {
            let gold = if r.gold.is_empty() {
                "-".to_owned()
            } else {
                r.gold.join(" ")
            };
            let mark = match (&r.proposed, r.gold.is_empty()) {
                (Some(p), _) if r.gold.contains(p) => "ok",
                (None, true) => "ok",
                (None, false) => "missed",
                (Some(_), _) => "wrong",
            };
            println!(
                "  {:<6} {} {}: gold {gold}, proposed {} (searched {})",
                mark,
                r.card,
                r.column,
                r.proposed.as_deref().unwrap_or("-"),
                r.ontology.as_deref().unwrap_or("-")
            );
            if mark == "ok" {
                continue;
            }
            // A miss with what carried its best candidates: what a person tuning the
            // ranking reads first.
            let mut order: Vec<usize> = (0..r.found.len()).collect();
            order.sort_by(|a, b| r.found[*b].2.total_cmp(&r.found[*a].2));
            for i in order.into_iter().take(3) {
                let (curie, label, p) = &r.found[i];
                let parts: Vec<String> = r.carried[i]
                    .iter()
                    .map(|(why, w)| format!("{why} {w:+.1}"))
                    .collect();
                println!("           {p:.2} {curie} {label}: {}", parts.join("; "));
            }
        }
    }
    Ok(Exit::Ok)
}

fn metrics_line(level: &str, m: &Metrics) -> String {
    format!(
        "{level}: n={} accuracy={:.3} ECE={:.3} Brier={:.3} coverage@5%={:.2} @10%={:.2}",
        m.n, m.accuracy, m.ece, m.brier, m.coverage_at_5, m.coverage_at_10
    )
}

pub fn lake(cmd: LakeCommand) -> anyhow::Result<Exit> {
    match cmd {
        LakeCommand::Recover { dir } => {
            let dir = decide_dir(&dir);
            let sidecar = std::sync::Mutex::new(Sidecar::in_dir(&dir)?);
            let at = LakeAt::in_dir(&dir)?;
            // A bar of the (run, path) batches on a terminal; nothing drawn through a pipe.
            let bar = ProgressBar::new(0).with_style(
                ProgressStyle::with_template("mirroring [{bar:30}] {pos}/{len} writes, {eta} left")
                    .expect("a fixed template")
                    .progress_chars("=> "),
            );
            let done = mirror_pending_reporting(&sidecar, &at, LAKE_WAIT, &mut |n, of| {
                bar.set_length(of as u64);
                bar.set_position(n as u64);
            });
            bar.finish_and_clear();
            let done = match done {
                Ok(done) => done,
                Err(e) => {
                    eprintln!("mesh: nothing mirrored: {e}; the links stay to be mirrored");
                    return Ok(Exit::ToolError);
                }
            };
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
            let lake = Lake::open_at(&LakeAt::in_dir(&decide_dir(&dir))?)?;
            match path {
                // Tables with a header, that fit a terminal (values give way) and print
                // whole through a pipe.
                Some(p) => {
                    let p = normalise(&p)?;
                    let rows: Vec<Vec<String>> = lake
                        .current(&p)?
                        .into_iter()
                        .map(|(attribute, value, unit)| vec![attribute, value, unit])
                        .collect();
                    let header = ["ATTRIBUTE", "VALUE", "UNIT"].map(String::from);
                    table::print(&header, &rows, &[1], table::width(false));
                }
                None => {
                    let rows: Vec<Vec<String>> = lake
                        .events()?
                        .into_iter()
                        .map(|(snapshot, e)| {
                            vec![
                                snapshot.to_string(),
                                e.run_id,
                                e.path,
                                e.op,
                                e.attribute,
                                e.value,
                                e.unit,
                                e.actor,
                                e.link_id,
                            ]
                        })
                        .collect();
                    let header = [
                        "SNAPSHOT",
                        "RUN",
                        "PATH",
                        "OP",
                        "ATTRIBUTE",
                        "VALUE",
                        "UNIT",
                        "ACTOR",
                        "LINK",
                    ]
                    .map(String::from);
                    table::print(&header, &rows, &[1, 2, 5, 8], table::width(false));
                }
            }
            Ok(Exit::Ok)
        }
    }
}

pub fn ontology(cmd: OntologyCommand) -> anyhow::Result<Exit> {
    match cmd {
        OntologyCommand::Import {
            file,
            vectors,
            max_bytes,
            index,
        } => {
            let path = index_path(&index);
            let mut index = Index::open(&path)?;
            let started = Instant::now();
            let name = file.display().to_string();
            // A URL is fetched beside the index first (and removed after).
            let fetched = match file.to_str().filter(|f| fetch::is_url(f)) {
                Some(url) => {
                    let dir = path.parent().unwrap_or(Path::new("."));
                    Some(fetch::fetch(url, dir, max_bytes)?)
                }
                None => None,
            };
            let file = fetched.as_ref().map_or(file.clone(), |f| f.path.clone());
            // Terms as they are read, on a terminal only (indicatif draws nothing on a pipe).
            let bar = ProgressBar::new_spinner().with_style(
                ProgressStyle::with_template("{spinner} {msg}: {pos} terms ({per_sec})")
                    .expect("a fixed template"),
            );
            bar.set_message(name.clone());
            let done = index.import(&file, |n| bar.set_position(n))?;
            bar.finish_and_clear();
            drop(fetched);
            println!(
                "imported {} {}: {} terms ({} obsolete, not searchable) in {:.1} s into {}",
                done.ontology,
                done.version.as_deref().unwrap_or("(no version)"),
                done.terms,
                done.obsolete,
                started.elapsed().as_secs_f64(),
                path.display()
            );
            embed_terms(&mut index, &done.ontology, vectors)?;
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
                eprintln!(
                    "mesh decide: nothing in {ontology} matches {:?}",
                    words.join(" ")
                );
                return Ok(Exit::ToolError);
            } else {
                let rows: Vec<Vec<String>> =
                    found.into_iter().map(|c| vec![c.curie, c.label]).collect();
                let header = ["TERM", "LABEL"].map(String::from);
                table::print(&header, &rows, &[1], table::width(false));
            }
            Ok(Exit::Ok)
        }
        OntologyCommand::List { index } => {
            let index = Index::open(&index_path(&index))?;
            // A table, as every list the mesh prints: columns aligned whatever the names.
            let rows: Vec<Vec<String>> = index
                .ontologies()?
                .into_iter()
                .map(|(name, version, terms)| {
                    vec![name, version.unwrap_or_default(), terms.to_string()]
                })
                .collect();
            let header = ["ONTOLOGY", "VERSION", "TERMS"].map(String::from);
            table::print(&header, &rows, &[1], table::width(false));
            Ok(Exit::Ok)
        }
    }
}
