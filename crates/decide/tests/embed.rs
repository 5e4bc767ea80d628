//! The sentence embedder with the real all-MiniLM-L6-v2 files (bin/test installs them first,
//! so nothing here is skipped): unit vectors, agreement with an independent numpy
//! implementation (tests/py/minilm_reference.py), sense on real terms, similarity as
//! evidence only where an ontology has vectors, and refusal of changed files. `embed_speed` (ignored) prints the figures in docs/benchmarks.md.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::Instant;

use mesh_decide::embed::{self, DIM, EmbedError, Embedder, FILES, Vector, cosine};
use mesh_ontology::index::Index;

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The installed model; a test fails with the fix when it is missing.
fn model_dir() -> PathBuf {
    embed::model_dir().unwrap_or_else(|e| panic!("{e}"))
}

fn embedder() -> &'static Embedder {
    static EMBEDDER: OnceLock<Embedder> = OnceLock::new();
    EMBEDDER.get_or_init(|| Embedder::load(&model_dir()).unwrap_or_else(|e| panic!("{e}")))
}

/// The Python with numpy and tokenizers (bin/test installs them in target/py and names it).
fn python() -> String {
    std::env::var("MESH_PYTHON").unwrap_or_else(|_| {
        workspace()
            .join("target/py/bin/python")
            .display()
            .to_string()
    })
}

#[test]
fn vectors_are_unit_length_384_and_deterministic() {
    let e = embedder();
    let texts = ["water temperature", "", "Body mass index (kg/m2)", "x"];
    let v = e.embed(&texts).unwrap();
    assert_eq!(v.len(), texts.len());
    for (t, v) in texts.iter().zip(&v) {
        assert_eq!(v.len(), DIM);
        let norm = cosine(v, v).sqrt();
        assert!((norm - 1.0).abs() < 1e-4, "{t:?} has norm {norm}");
    }
    assert_eq!(
        v,
        e.embed(&texts).unwrap(),
        "the same texts, the same vectors"
    );
    // Alone or batched with others, a text gives (nearly) the same vector.
    let alone = e.embed(&[texts[2]]).unwrap();
    assert!(cosine(&alone[0], &v[2]) > 0.99999);
    assert!(e.embed(&[]).unwrap().is_empty());
}

#[test]
fn agrees_with_an_independent_numpy_implementation() {
    let long = "sea surface temperature measured by the ship's thermosalinograph ".repeat(40);
    let sentences = vec![
        "water temperature",
        "BMI",
        "Body mass index (kg/m2)",
        "sample_id: identifier of the sample as given by the sequencing centre",
        "Nitrate concentration in µmol/L, filtered seawater",
        "Ünïcödé, punctuation!? and    spaces",
        long.as_str(),
    ];
    let mut child = Command::new(python())
        .arg(workspace().join("tests/py/minilm_reference.py"))
        .arg(model_dir())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| {
            panic!(
                "{} does not run ({e}): run bin/test, which installs numpy and tokenizers in target/py",
                python()
            )
        });
    serde_json::to_writer(child.stdin.take().unwrap(), &sentences).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "minilm_reference.py: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let reference: Vec<Vec<f64>> = serde_json::from_slice(&out.stdout).unwrap();
    let ours = embedder().embed(&sentences).unwrap();
    assert_eq!(reference.len(), ours.len());
    let mut least = f64::MAX;
    for ((s, r), o) in sentences.iter().zip(&reference).zip(&ours) {
        let cos: f64 = r.iter().zip(o).map(|(a, b)| a * f64::from(*b)).sum();
        least = least.min(cos);
        assert!(
            cos >= 0.999,
            "{:?}: cosine {cos} between Rust and numpy",
            &s[..s.len().min(40)]
        );
    }
    println!("least cosine between Rust and numpy: {least:.7}");
}

#[test]
fn related_terms_are_closer() {
    let e = embedder();
    let v = e
        .embed(&[
            "water temperature",
            "temperature",
            "nitrate",
            "BMI",
            "body mass index",
            "blood pressure",
        ])
        .unwrap();
    let (near, far) = (cosine(&v[0], &v[1]), cosine(&v[0], &v[2]));
    assert!(
        near > far,
        "water temperature: temperature {near}, nitrate {far}"
    );
    let (near, far) = (cosine(&v[3], &v[4]), cosine(&v[3], &v[5]));
    assert!(
        near > far,
        "BMI: body mass index {near}, blood pressure {far}"
    );
}

#[test]
fn an_ontology_is_embedded_into_the_index() {
    let dir = tempfile::tempdir().unwrap();
    let mut index = Index::open(&dir.path().join("index.sqlite")).unwrap();
    let fixture = workspace().join("tests/ontologies/pato.obo");
    index.import(&fixture, |_| {}).unwrap();
    let mut reports = Vec::new();
    let set = embed::embed_ontology(&mut index, embedder(), "pato", true, |done, total| {
        reports.push((done, total))
    })
    .unwrap();
    let texts = index.texts_to_embed("pato").unwrap();
    assert_eq!(set.terms, texts.len() as u64);
    assert_eq!(
        set.vectors,
        texts
            .iter()
            .map(|t| 1 + t.synonyms.len() as u64)
            .sum::<u64>()
    );
    assert_eq!(set.model, embed::MODEL);
    assert_eq!(reports.last(), Some(&(set.terms, set.terms)));
    let got = index
        .vectors("pato", &["PATO:0000125", "PATO:0000122"])
        .unwrap();
    let [mass, length] = &got[..] else {
        panic!("{got:?}")
    };
    // Stored as int8, read back close to what the embedder gives.
    let fresh = embedder().embed(&["mass"]).unwrap();
    let stored: Vector = mass.label.as_slice().try_into().unwrap();
    assert!(cosine(&fresh[0], &stored) > 0.999);
    let query = embedder().embed(&["body weight (kg)"]).unwrap();
    let length: Vector = length.label.as_slice().try_into().unwrap();
    assert!(cosine(&query[0], &stored) > cosine(&query[0], &length));
}

#[test]
fn semantic_terms_weigh_meaning_only_where_vectors_are() {
    use mesh_decide::evidence::Terms;
    use mesh_decide::semantic::Semantic;
    let dir = tempfile::tempdir().unwrap();
    let mut index = Index::open(&dir.path().join("index.sqlite")).unwrap();
    for o in ["pato", "uberon"] {
        let fixture = workspace().join(format!("tests/ontologies/{o}.obo"));
        index.import(&fixture, |_| {}).unwrap();
    }
    embed::embed_ontology(&mut index, embedder(), "pato", false, |_, _| {}).unwrap();
    let semantic = Semantic::new(&index, Some(embedder()));
    let near = semantic
        .similarity(
            "body weight: weight of the animal (g)",
            "pato",
            &["PATO:0000125", "PATO:0000122", "PATO:9999999"],
        )
        .unwrap();
    let [Some(mass), Some(length), None] = near[..] else {
        panic!("mass and length have vectors, a CURIE not in PATO none: {near:?}")
    };
    assert!(mass > length, "mass {mass}, length {length}");
    // Recall by meaning: the PATO terms nearest a text that names none of them by its words,
    // each once, nearest first; none where no vectors are, nor without the model.
    let nearest = semantic
        .nearest("how heavy the animal was (g)", "pato", 3)
        .unwrap();
    assert_eq!(nearest.len(), 3, "{nearest:?}");
    assert!(
        nearest.windows(2).all(|w| w[0].score >= w[1].score),
        "{nearest:?}"
    );
    assert!(
        nearest
            .iter()
            .any(|c| c.label == "mass" || c.label == "weight"),
        "{nearest:?}"
    );
    assert!(semantic.nearest("tissue", "uberon", 3).unwrap().is_empty());
    assert!(
        Semantic::new(&index, None)
            .nearest("how heavy", "pato", 3)
            .unwrap()
            .is_empty()
    );
    // UBERON was imported without vectors: no meaning there, and nothing embedded for it.
    let none = semantic
        .similarity("tissue", "uberon", &["UBERON:0000479"])
        .unwrap();
    assert_eq!(none, [None]);
    // The index alone knows no meaning, nor does a Semantic without the model.
    assert_eq!(
        Terms::similarity(&index, "mass", "pato", &["PATO:0000125"]).unwrap(),
        [None]
    );
    let without = Semantic::new(&index, None);
    assert_eq!(
        without
            .similarity("mass", "pato", &["PATO:0000125"])
            .unwrap(),
        [None]
    );
    // The graph ranks through it and still proposes the quality the column names.
    let card = mesh_decide::card::parse(
        "# Dataset: T.1 / semantic\nProduct: T\nSource: tests\nSites: A\nRows: 1\n- bodyMass | Body mass of the animal | float | gram | 5 to 40, median 18\n",
    )
    .unwrap();
    let mut sidecar =
        mesh_decide::store::sidecar::Sidecar::open(&dir.path().join("sidecar.sqlite")).unwrap();
    let run = mesh_decide::graph::annotate_into(
        &card,
        &semantic,
        &mesh_decide::backend::Embedded,
        &mesh_decide::policy::Policy::defaults(),
        &mut sidecar,
        None,
        None,
    )
    .unwrap();
    let winner = run.groups[0].winner.as_ref().expect("a winner");
    assert_eq!(winner.curie, "PATO:0000125");
}

/// A copy of the installed model directory in a temporary one.
fn copy_model() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    for (file, _) in FILES {
        std::fs::copy(model_dir().join(file), dir.path().join(file)).unwrap();
    }
    dir
}

fn refused_naming(dir: &Path, name: &str) {
    match Embedder::load(dir) {
        Err(e @ EmbedError::Checksum { file, .. }) => {
            assert_eq!(file, name);
            let message = e.to_string();
            assert!(message.contains(name), "{message}");
            assert!(message.contains("sha256"), "{message}");
        }
        Err(e) => panic!("refused for another reason: {e}"),
        Ok(_) => panic!("a changed {name} was loaded"),
    }
}

#[test]
fn a_changed_file_is_refused() {
    let dir = copy_model();
    let config = dir.path().join("config.json");
    let mut bytes = std::fs::read(&config).unwrap();
    bytes[10] ^= 0x01;
    std::fs::write(&config, bytes).unwrap();
    refused_naming(dir.path(), "config.json");

    let dir = copy_model();
    let weights = std::fs::OpenOptions::new()
        .write(true)
        .open(dir.path().join("model.safetensors"))
        .unwrap();
    let len = weights.metadata().unwrap().len();
    weights.set_len(len - 1000).unwrap();
    refused_naming(dir.path(), "model.safetensors");

    let dir = copy_model();
    std::fs::remove_file(dir.path().join("tokenizer.json")).unwrap();
    match Embedder::load(dir.path()) {
        Err(EmbedError::Missing { file, .. }) => assert_eq!(file, "tokenizer.json"),
        other => panic!("a missing tokenizer.json: {other:?}"),
    }
}

/// The figures in docs/benchmarks.md (`## embed`):
/// `cargo test --release -p mesh-decide --test embed -- --ignored --nocapture embed_speed`.
#[test]
#[ignore]
fn embed_speed() {
    let started = Instant::now();
    let mut e = Embedder::load(&model_dir()).unwrap();
    println!(
        "load (3 sha256 + weights): {} ms",
        started.elapsed().as_millis()
    );
    let units = [
        "°C", "mg/L", "µmol/kg", "m", "psu", "kg/m2", "mmHg", "years", "%", "",
    ];
    let card: Vec<String> = (0..30)
        .map(|i| {
            format!(
                "column_{i} sample measurement {i}: the value measured for the sample at station {i}, {}",
                units[i % units.len()]
            )
        })
        .collect();
    let labels = chebi_like_labels();
    // MESH_EMBED_BATCHES="8 16 32 64 128" compares batch sizes.
    let batches: Vec<usize> = std::env::var("MESH_EMBED_BATCHES")
        .unwrap_or_else(|_| embed::BATCH.to_string())
        .split_whitespace()
        .map(|b| b.parse().expect("a batch size"))
        .collect();
    for batch in batches {
        e = e.with_batch(batch);
        for (what, texts, runs) in [
            ("card of 30 columns", &card, 9),
            ("1,000 labels", &labels, 5),
        ] {
            let texts: Vec<&str> = texts.iter().map(String::as_str).collect();
            e.embed(&texts).unwrap();
            let mut ms: Vec<f64> = (0..runs)
                .map(|_| {
                    let t = Instant::now();
                    e.embed(&texts).unwrap();
                    t.elapsed().as_secs_f64() * 1e3
                })
                .collect();
            ms.sort_by(f64::total_cmp);
            let p50 = ms[ms.len() / 2];
            let batches = texts.len().div_ceil(batch);
            println!(
                "batch {batch:3}, {what}: p50 {p50:.1} ms ({runs} runs, min {:.1}, max {:.1}), {:.0} sentences/s, {:.1} ms per batch",
                ms[0],
                ms[ms.len() - 1],
                texts.len() as f64 / p50 * 1e3,
                p50 / batches as f64,
            );
        }
    }
}

/// 1,000 real ontology labels: the first non-obsolete terms of the shared CHEBI, UBERON,
/// EFO and MONDO files (250 each), else made-up ones where those files are absent.
fn chebi_like_labels() -> Vec<String> {
    let shared = workspace().join("../shared/ontologies");
    let mut labels = Vec::new();
    for o in ["chebi", "uberon", "efo", "mondo"] {
        let Ok(mut reader) = mesh_ontology::obo::Reader::open(&shared.join(format!("{o}.obo.gz")))
        else {
            continue;
        };
        let mut n = 0;
        while let Ok(Some(t)) = reader.next_term() {
            if !t.obsolete && !t.name.is_empty() {
                labels.push(t.name);
                n += 1;
                if n == 250 {
                    break;
                }
            }
        }
    }
    if labels.len() < 1000 {
        println!("(made-up labels: {} is absent)", shared.display());
        labels = (0..1000)
            .map(|i| format!("concentration of dissolved nitrate in sea water {i}"))
            .collect();
    }
    labels
}
