//! annotate's cost on a 30-column card (the relay bench's card, `benches/relay.rs`), from
//! decide alone: `cargo bench -p mesh-decide --bench annotate`. Without a model, then, where
//! the index has term vectors and the model is installed, with it (sentence embeddings in the
//! ranking and the nearest terms by meaning among the candidates). Ends `annotate p50_ms=<x>`.
//!
//! `MESH_BENCH_CARDS=tests/gold/real/dev` annotates those cards too, each once and then once
//! more. `MESH_BENCH_INDEX=FILE` uses an index already made (the seven ontologies, some with
//! `--vectors labels`); without it PATO, UBERON, EFO, CHEBI and NCBITaxon are imported from
//! `../shared/ontologies/` into a fresh one (about a minute), as the relay bench does.

use std::time::{Duration, Instant};

use mesh_decide::backend::Embedded;
use mesh_decide::embed::Embedder;
use mesh_decide::semantic::Semantic;
use mesh_decide::{card, graph, policy::Policy, store::sidecar::Sidecar};
use mesh_ontology::index::Index;

const ROUNDS: usize = 20;

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// The time this thread has run on a CPU (`/proc/thread-self/schedstat`'s first field, ns):
/// what a run costs whatever else the machine runs, where the wall clock also counts the
/// time it waited for a core (this machine's two are often shared). `None` off Linux.
fn on_cpu() -> Option<Duration> {
    let text = std::fs::read_to_string("/proc/thread-self/schedstat").ok()?;
    let ns: u64 = text.split_whitespace().next()?.parse().ok()?;
    Some(Duration::from_nanos(ns))
}

/// Cards the index has not ranked the words of (`MESH_BENCH_CARDS`: a folder of cards, the
/// gold set's `dev/`, never `sealed/`), each annotated once without a model, then each once
/// more: the first pass is what new cards cost a decide that has run a while, the second what
/// they cost once everything their searches read is kept.
fn cards(folder: &std::path::Path, index: &Index, policy: &Policy, sidecar: &mut Sidecar) {
    let mut files: Vec<_> = std::fs::read_dir(folder)
        .expect("MESH_BENCH_CARDS is a folder")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    files.sort();
    let cards: Vec<_> = files
        .iter()
        .filter_map(|f| card::parse(&std::fs::read_to_string(f).ok()?).ok())
        .collect();
    let terms = Semantic::new(index, None);
    for pass in ["first", "second"] {
        let (mut runs, mut cpu): (Vec<Duration>, Vec<Duration>) = cards
            .iter()
            .map(|card| {
                let (t, c) = (Instant::now(), on_cpu());
                graph::annotate_into(card, &terms, &Embedded, policy, sidecar, None, None)
                    .expect("annotate");
                let on = c.zip(on_cpu()).map(|(a, b)| b - a).unwrap_or_default();
                (t.elapsed(), on)
            })
            .unzip();
        let total: Duration = runs.iter().sum();
        let total_cpu: Duration = cpu.iter().sum();
        runs.sort();
        cpu.sort();
        println!(
            "{} cards of {}, {pass} pass: {:.1} ms in all ({:.1} on a CPU), p50 {:.2} ms ({:.2} on a CPU)",
            cards.len(),
            folder.display(),
            ms(total),
            ms(total_cpu),
            ms(percentile(&runs, 0.5)),
            ms(percentile(&cpu, 0.5))
        );
    }
}

/// A 30-column card: the example's ten columns and twenty more of the kinds field data has
/// (`wide_card.md`, which the relay's bench reads too).
fn wide_card() -> String {
    include_str!("wide_card.md").to_owned()
}

fn main() {
    let dir = tempfile::tempdir().expect("temp dir");
    let index = match std::env::var("MESH_BENCH_INDEX") {
        Ok(path) => Index::open(std::path::Path::new(&path)).expect("MESH_BENCH_INDEX opens"),
        Err(_) => {
            let shared = std::path::Path::new(concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/../../../shared/ontologies"
            ));
            if !shared.exists() {
                println!("skipped: {} is not here", shared.display());
                return;
            }
            let mut index = Index::open(&dir.path().join("ontology.sqlite")).expect("index");
            for o in ["pato", "uberon", "efo", "chebi", "ncbitaxon"] {
                index
                    .import(&shared.join(format!("{o}.obo.gz")), |_| {})
                    .expect("import");
            }
            index
        }
    };
    let mut sidecar = Sidecar::open(&dir.path().join("sidecar.sqlite")).expect("sidecar");
    let card = card::parse(&wide_card()).expect("card");
    assert_eq!(card.columns.len(), 30);
    let policy = Policy::defaults();
    let mut time = |terms: &Semantic<'_>, what: &str| {
        // A warm-up run: the index's pages and (with the model) the vector tables read once,
        // and the words' counts and rows' sizes the rank keeps (mesh-ontology's `rank`).
        // Timed apart: what a card whose words the index has not ranked yet costs.
        let (t, c) = (Instant::now(), on_cpu());
        graph::annotate_into(&card, terms, &Embedded, &policy, &mut sidecar, None, None)
            .expect("annotate");
        let first = (t.elapsed(), c.zip(on_cpu()).map(|(a, b)| b - a));
        let (mut runs, mut cpu): (Vec<Duration>, Vec<Duration>) = (0..ROUNDS)
            .map(|_| {
                let (t, c) = (Instant::now(), on_cpu());
                graph::annotate_into(&card, terms, &Embedded, &policy, &mut sidecar, None, None)
                    .expect("annotate");
                let on = c.zip(on_cpu()).map(|(a, b)| b - a).unwrap_or_default();
                (t.elapsed(), on)
            })
            .unzip();
        runs.sort();
        cpu.sort();
        println!(
            "annotate {what} p50 / p99: {:>8.2} / {:.2} ms (on a CPU: p50 {:.2} ms); the first run {:.2} ms ({:.2} on a CPU)",
            ms(percentile(&runs, 0.5)),
            ms(percentile(&runs, 0.99)),
            ms(percentile(&cpu, 0.5)),
            ms(first.0),
            ms(first.1.unwrap_or_default())
        );
        ms(percentile(&runs, 0.5))
    };
    let without = time(&Semantic::new(&index, None), "without a model");
    if let Ok(folder) = std::env::var("MESH_BENCH_CARDS") {
        cards(std::path::Path::new(&folder), &index, &policy, &mut sidecar);
    }
    match Embedder::load_default() {
        // A fresh Semantic per run, as the module makes one per call: each column embedded
        // again, the vector tables read again.
        Ok(model) => {
            let t = Instant::now();
            let mut runs: Vec<Duration> = (0..5)
                .map(|_| {
                    let t = Instant::now();
                    let terms = Semantic::new(&index, Some(&model));
                    graph::annotate_into(
                        &card,
                        &terms,
                        &Embedded,
                        &policy,
                        &mut sidecar,
                        None,
                        None,
                    )
                    .expect("annotate");
                    t.elapsed()
                })
                .collect();
            runs.sort();
            println!(
                "annotate with the model, a fresh run each time p50: {:>8.2} ms ({:.1} s for 5)",
                ms(percentile(&runs, 0.5)),
                t.elapsed().as_secs_f64()
            );
        }
        Err(e) => println!("with the model: skipped ({e})"),
    }
    println!("annotate p50_ms={without:.2}");
}
