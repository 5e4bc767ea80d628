//! Sentence embeddings on the CPU: sentence-transformers/all-MiniLM-L6-v2 (BERT, 6 layers,
//! 384 dimensions) run with candle and the tokenizers crate, giving what
//! sentence-transformers gives for it (word pieces truncated to 256, mean pooling over the
//! attention mask, L2 normalisation).
//!
//! The model's three files are installed by `bin/deps.sh` (`ensure_minilm`, which `bin/test`
//! and `bin/up` call) into `target/models/all-MiniLM-L6-v2`; [`Embedder::load`] checks each
//! file's sha256 against the upstream revision before it uses it, so a file changed after
//! the install is refused. Where the model is looked for: [`model_dir`].

use std::path::{Path, PathBuf};
use std::time::Instant;

use candle_core::{DType, Device, Tensor};
use candle_nn::VarBuilder;
use candle_transformers::models::bert::{BertModel, Config};
use mesh_ontology::index::{Index, IndexError};
use mesh_ontology::vectors::VectorSet;
use sha2::{Digest, Sha256};
use tokenizers::{Tokenizer, TruncationParams};

/// The length of every embedding.
pub const DIM: usize = 384;

/// Word pieces per text, [CLS] and [SEP] included (sentence-transformers' `max_seq_length`
/// for this model); a longer text is cut.
pub const MAX_TOKENS: usize = 256;

/// Texts per forward pass by default ([`Embedder::with_batch`] sets another). Texts are
/// sorted by length first, so a batch pads little.
pub const BATCH: usize = 32;

/// The environment variable naming the model's directory.
pub const DIR_ENV: &str = "MESH_MINILM_DIR";

/// The model's directory name under `target/models` (and under the state directory).
pub const MODEL_NAME: &str = "all-MiniLM-L6-v2";

/// The upstream revision the checksums are of.
pub const REVISION: &str = "1110a243fdf4706b3f48f1d95db1a4f5529b4d41";

/// The model's name in the index's vector sets.
pub const MODEL: &str = "sentence-transformers/all-MiniLM-L6-v2@1110a243";

/// Ontologies whose terms are not embedded at import: NCBITaxon's 1.26 M taxon names would
/// take about an hour here and a species' Latin name is matched by its words.
pub const NOT_EMBEDDED: &[&str] = &["ncbitaxon"];

/// Terms embedded per step of [`embed_ontology`] (and per progress report).
const TERMS_PER_STEP: usize = 2048;

/// Each file the embedder reads and its sha256 at [`REVISION`].
pub const FILES: [(&str, &str); 3] = [
    (
        "model.safetensors",
        "53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db",
    ),
    (
        "tokenizer.json",
        "be50c3628f2bf5bb5e3a7f17b1f74611b2561a3a27eeab05e5aa30f411572037",
    ),
    (
        "config.json",
        "953f9c0d463486b10a6871cc2fd59f223b2c70184f49815e7efbcab5d8908b41",
    ),
];

/// An embedding: unit length, [`DIM`] long.
pub type Vector = [f32; DIM];

#[derive(Debug, thiserror::Error)]
pub enum EmbedError {
    #[error(
        "no embedding model found (looked in {looked}): run bin/deps.sh's ensure_minilm (bin/up and bin/test do), or set {DIR_ENV} to a directory holding all-MiniLM-L6-v2's model.safetensors, tokenizer.json and config.json"
    )]
    NotFound { looked: String },
    #[error(
        "the embedding model's {file} is missing from {}: run bin/deps.sh's ensure_minilm, or set {DIR_ENV} to a complete model directory",
        dir.display()
    )]
    Missing { dir: PathBuf, file: &'static str },
    #[error("cannot read the embedding model's {}: {source}", path.display())]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(
        "refusing the embedding model: {} has sha256 {got}, all-MiniLM-L6-v2 at {REVISION} has {want}; delete {} and run bin/deps.sh's ensure_minilm again",
        path.display(),
        path.parent().unwrap_or(Path::new(".")).display()
    )]
    Checksum {
        path: PathBuf,
        file: &'static str,
        want: &'static str,
        got: String,
    },
    #[error("the embedding model's config.json does not parse: {0}")]
    Config(#[source] serde_json::Error),
    #[error("the embedding model's tokenizer.json does not load: {0}")]
    Tokenizer(String),
    #[error("the embedding model does not load or run (candle): {0}")]
    Model(#[from] candle_core::Error),
    #[error(transparent)]
    Index(#[from] IndexError),
}

/// Where the model is looked for, in order: the directory `MESH_MINILM_DIR` names (used as
/// given, even if incomplete, so a wrong setting is reported rather than passed over); else
/// `models/all-MiniLM-L6-v2` in the `target` directory above the running executable
/// (`bin/up`'s `target/release/mesh-decide`, a test binary under `target/debug/deps`); else
/// `target/models/all-MiniLM-L6-v2` of the checkout this binary was built from (so a
/// `cargo install`ed `mesh-decide` finds what `bin/deps.sh` put there, as it finds
/// libduckdb); else `models/all-MiniLM-L6-v2` in the mesh's state directory (where a copy
/// can be put for a binary far from its checkout). `Err` lists the places looked in.
pub fn model_dir() -> Result<PathBuf, EmbedError> {
    if let Some(dir) = std::env::var_os(DIR_ENV).filter(|d| !d.is_empty()) {
        return Ok(PathBuf::from(dir));
    }
    let mut looked = Vec::new();
    if let Ok(exe) = std::env::current_exe() {
        for up in exe.ancestors().skip(1) {
            if up.file_name().is_some_and(|n| n == "target") {
                let dir = up.join("models").join(MODEL_NAME);
                if is_model_dir(&dir) {
                    return Ok(dir);
                }
                looked.push(dir);
                break;
            }
        }
    }
    // crates/decide → the checkout.
    let checkout = Path::new(env!("CARGO_MANIFEST_DIR")).ancestors().nth(2);
    let built = checkout.unwrap_or(Path::new(".")).join("target/models");
    let state = mesh_core::runtime::default_state_dir().join("models");
    for dir in [built.join(MODEL_NAME), state.join(MODEL_NAME)] {
        if is_model_dir(&dir) {
            return Ok(dir);
        }
        looked.push(dir);
    }
    let mut looked: Vec<String> = looked.iter().map(|d| d.display().to_string()).collect();
    looked.insert(0, format!("${DIR_ENV} (unset)"));
    Err(EmbedError::NotFound {
        looked: looked.join(", "),
    })
}

fn is_model_dir(dir: &Path) -> bool {
    FILES.iter().all(|(f, _)| dir.join(f).is_file())
}

/// Reads one of the model's files and checks it against its upstream sha256.
fn read_checked(dir: &Path, file: &'static str, want: &'static str) -> Result<Vec<u8>, EmbedError> {
    let path = dir.join(file);
    let bytes = std::fs::read(&path).map_err(|source| {
        if source.kind() == std::io::ErrorKind::NotFound {
            EmbedError::Missing {
                dir: dir.to_owned(),
                file,
            }
        } else {
            EmbedError::Read {
                path: path.clone(),
                source,
            }
        }
    })?;
    let got: String = Sha256::digest(&bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    if got != want {
        return Err(EmbedError::Checksum {
            path,
            file,
            want,
            got,
        });
    }
    Ok(bytes)
}

/// all-MiniLM-L6-v2, loaded and checked, ready to embed texts.
pub struct Embedder {
    model: BertModel,
    tokenizer: Tokenizer,
    device: Device,
    dir: PathBuf,
    batch: usize,
}

impl std::fmt::Debug for Embedder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Embedder").field("dir", &self.dir).finish()
    }
}

impl Embedder {
    /// Loads the model from where [`model_dir`] finds it.
    pub fn load_default() -> Result<Embedder, EmbedError> {
        Embedder::load(&model_dir()?)
    }

    /// Loads the model from `dir`, after checking the sha256 of each of its three files
    /// against [`FILES`]; the bytes checked are the bytes used.
    pub fn load(dir: &Path) -> Result<Embedder, EmbedError> {
        let started = Instant::now();
        let mut files = Vec::with_capacity(FILES.len());
        for (file, want) in FILES {
            files.push(read_checked(dir, file, want)?);
        }
        let [weights, tokenizer, config]: [Vec<u8>; 3] =
            files.try_into().expect("three files were read");
        let config: Config = serde_json::from_slice(&config).map_err(EmbedError::Config)?;
        let mut tokenizer =
            Tokenizer::from_bytes(&tokenizer).map_err(|e| EmbedError::Tokenizer(e.to_string()))?;
        // tokenizer.json pads and cuts at 128; sentence-transformers cuts at 256 and pads
        // each batch to its longest text (done here, per batch).
        tokenizer
            .with_truncation(Some(TruncationParams {
                max_length: MAX_TOKENS,
                ..TruncationParams::default()
            }))
            .map_err(|e| EmbedError::Tokenizer(e.to_string()))?;
        tokenizer.with_padding(None);
        let device = Device::Cpu;
        let vb = VarBuilder::from_buffered_safetensors(weights, DType::F32, &device)?;
        let model = BertModel::load(vb, &config)?;
        tracing::info!(
            dir = %dir.display(),
            ms = started.elapsed().as_millis() as u64,
            "loaded the embedding model (all-MiniLM-L6-v2, checksums match)"
        );
        Ok(Embedder {
            model,
            tokenizer,
            device,
            dir: dir.to_owned(),
            batch: BATCH,
        })
    }

    /// The same embedder with `batch` texts per forward pass (at least one).
    pub fn with_batch(mut self, batch: usize) -> Embedder {
        self.batch = batch.max(1);
        self
    }

    /// The directory the model was loaded from.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The embedding of each text, in order: unit length, [`DIM`] long. The same text gives
    /// the same vector whatever it is batched with, up to float rounding.
    pub fn embed(&self, texts: &[&str]) -> Result<Vec<Vector>, EmbedError> {
        let mut pieces = Vec::with_capacity(texts.len());
        for text in texts {
            let encoding = self
                .tokenizer
                .encode(*text, true)
                .map_err(|e| EmbedError::Tokenizer(e.to_string()))?;
            pieces.push(encoding.get_ids().to_vec());
        }
        // Shortest first, so each batch pads to a length near its texts' own.
        let mut order: Vec<usize> = (0..texts.len()).collect();
        order.sort_by_key(|&i| (pieces[i].len(), i));
        let mut out = vec![[0f32; DIM]; texts.len()];
        for chunk in order.chunks(self.batch) {
            let batch: Vec<&[u32]> = chunk.iter().map(|&i| pieces[i].as_slice()).collect();
            for (&i, vector) in chunk.iter().zip(self.forward(&batch)?) {
                out[i] = vector;
            }
        }
        Ok(out)
    }

    /// One forward pass over texts already cut to word pieces: BERT, mean pooling over the
    /// attention mask, L2 normalisation.
    fn forward(&self, batch: &[&[u32]]) -> Result<Vec<Vector>, EmbedError> {
        let rows = batch.len();
        let width = batch.iter().map(|p| p.len()).max().unwrap_or(0);
        let mut ids = vec![0u32; rows * width];
        let mut mask = vec![0u32; rows * width];
        for (r, p) in batch.iter().enumerate() {
            ids[r * width..r * width + p.len()].copy_from_slice(p);
            mask[r * width..r * width + p.len()].fill(1);
        }
        let ids = Tensor::from_vec(ids, (rows, width), &self.device)?;
        let mask = Tensor::from_vec(mask, (rows, width), &self.device)?;
        let types = ids.zeros_like()?;
        let hidden = self.model.forward(&ids, &types, Some(&mask))?;
        let mask = mask.to_dtype(DType::F32)?.unsqueeze(2)?;
        let summed = hidden.broadcast_mul(&mask)?.sum(1)?;
        let counts = mask.sum(1)?.clamp(1e-9, f32::MAX)?;
        let mean = summed.broadcast_div(&counts)?;
        let norms = mean.sqr()?.sum_keepdim(1)?.sqrt()?.clamp(1e-12, f32::MAX)?;
        let unit = mean.broadcast_div(&norms)?;
        let rows = unit.to_vec2::<f32>()?;
        Ok(rows
            .into_iter()
            .map(|r| r.try_into().expect("the model gives 384 dimensions"))
            .collect())
    }
}

/// The cosine of two unit vectors (their dot product).
pub fn cosine(a: &Vector, b: &Vector) -> f32 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

/// Embeds the label (and, with `synonyms`, each synonym) of every term of `ontology` that is
/// not obsolete and stores the vectors in the index, replacing the ontology's earlier ones
/// in one transaction. `progress` is told the terms done and the terms in all after each
/// step.
pub fn embed_ontology(
    index: &mut Index,
    embedder: &Embedder,
    ontology: &str,
    synonyms: bool,
    mut progress: impl FnMut(u64, u64),
) -> Result<VectorSet, EmbedError> {
    let terms = index.texts_to_embed(ontology)?;
    let total = terms.len() as u64;
    let started = Instant::now();
    let set = index.store_vectors(ontology, MODEL, DIM, |writer| {
        let mut done = 0u64;
        for step in terms.chunks(TERMS_PER_STEP) {
            let mut texts: Vec<&str> = Vec::new();
            for term in step {
                texts.push(&term.label);
                if synonyms {
                    texts.extend(term.synonyms.iter().map(String::as_str));
                }
            }
            let vectors = embedder.embed(&texts)?;
            let mut at = 0;
            for term in step {
                let n = 1 + if synonyms { term.synonyms.len() } else { 0 };
                let own: Vec<&[f32]> = vectors[at..at + n].iter().map(|v| &v[..]).collect();
                writer.put(term.id, &own)?;
                at += n;
            }
            done += step.len() as u64;
            progress(done, total);
        }
        Ok::<_, EmbedError>(())
    })?;
    tracing::info!(
        ontology,
        terms = set.terms,
        vectors = set.vectors,
        s = started.elapsed().as_secs_f64(),
        "embedded the ontology's terms"
    );
    Ok(set)
}
