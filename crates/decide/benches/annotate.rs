//! annotate's cost on a 30-column card (the relay bench's card, `benches/relay.rs`), from
//! decide alone: `cargo bench -p mesh-decide --bench annotate`. Without a model, then, where
//! the index has term vectors and the model is installed, with it (sentence embeddings in the
//! ranking and the nearest terms by meaning among the candidates). Ends `annotate p50_ms=<x>`.
//!
//! `MESH_BENCH_INDEX=FILE` uses an index already made (the seven ontologies, some with
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

/// A 30-column card: the example's ten columns and twenty more of the kinds field data has.
fn wide_card() -> String {
    let mut card = String::from(
        "# Dataset: DP1.00000.001 / wide_table\nProduct: A wide table for the benchmark\nSource: mesh\nSites: HARV, BART\nRows: 1000\n",
    );
    let columns = [
        "uid | Unique identifier | string | - | 1000 distinct values",
        "plotID | Plot | string | - | HARV_001 12%",
        "collectDate | Date collected | datetime | - | 2019 to 2023",
        "scientificName | Scientific name of the captured animal | string | - | Peromyscus leucopus 41%, Myodes gapperi 22%",
        "sex | Sex of the captured animal | string | - | M 48%, F 44%",
        "lifeStage | Life stage of the captured animal | string | - | adult 71%",
        "hindfootLength | Length of the hind foot | float | millimeter | 12.0 to 31.5",
        "weight | Body mass of the captured animal | float | gram | 3.5 to 61.0",
        "earLength | Length of the ear | float | millimeter | 8.0 to 21.0",
        "tailLength | Length of the tail | float | millimeter | 40 to 110",
        "soilTemperature | Temperature of the soil | float | celsius | 2.0 to 24.0",
        "soilMoisture | Water content of the soil | float | percent | 5 to 45",
        "nitrateConcentration | Nitrate concentration in the soil | float | milligram per kilogram | 0.1 to 12",
        "carbonContent | Organic carbon content | float | percent | 0.5 to 9",
        "phosphateConcentration | Phosphate concentration | float | milligram per liter | 0.01 to 2",
        "leafArea | Area of the leaf | float | square centimeter | 3 to 120",
        "leafMass | Dry mass of the leaf | float | gram | 0.02 to 3",
        "rootDepth | Depth of the root | float | centimeter | 5 to 80",
        "plantHeight | Height of the plant | float | centimeter | 10 to 300",
        "stemDiameter | Diameter of the stem | float | millimeter | 1 to 40",
        "parasiteCount | Number of parasites on the animal | integer | - | 0 to 12",
        "diseaseStatus | Disease observed in the animal | string | - | none 80%, lesion 12%",
        "bloodCellCount | Count of blood cells | integer | - | 1000 to 9000",
        "treatment | Treatment applied to the plot | string | - | control 50%, warmed 50%",
        "samplingMethod | Sampling method used | string | - | box trap 100%",
        "eyeColor | Colour of the eye | string | - | black 90%",
        "bodyLength | Length of the body | float | millimeter | 50 to 120",
        "skullWidth | Width of the skull | float | millimeter | 8 to 20",
        "wingLength | Length of the wing | float | millimeter | 20 to 90",
        "remarks | Technician remarks | string | - | all blank",
    ];
    for c in columns {
        card.push_str("- ");
        card.push_str(c);
        card.push('\n');
    }
    card
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
        // A warm-up run: the index's pages and (with the model) the vector tables read once.
        graph::annotate_into(&card, terms, &Embedded, &policy, &mut sidecar, None, None)
            .expect("annotate");
        let mut runs: Vec<Duration> = (0..ROUNDS)
            .map(|_| {
                let t = Instant::now();
                graph::annotate_into(&card, terms, &Embedded, &policy, &mut sidecar, None, None)
                    .expect("annotate");
                t.elapsed()
            })
            .collect();
        runs.sort();
        println!(
            "annotate {what} p50 / p99: {:>8.2} / {:.2} ms",
            ms(percentile(&runs, 0.5)),
            ms(percentile(&runs, 0.99))
        );
        ms(percentile(&runs, 0.5))
    };
    let without = time(&Semantic::new(&index, None), "without a model");
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
