//! `mesh decide learn eval`: cards with gold AVUs through the decision graph, in a sidecar of
//! its own (in memory, nothing recorded): how often the proposal is the gold term, and how
//! good term.fits probabilities are at each level. The gold format is in docs/learning.md.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Serialize;
use serde_json::Value;

use super::bundle::Bundle;
use super::metrics::{Metrics, metrics};
use crate::backend::Backend;
use crate::calibrated::Calibrated;
use crate::card;
use crate::graph;
use crate::policy::Policy;
use crate::questions;
use crate::sidecar::Sidecar;
use mesh_ontology::index::Index;

#[derive(Debug, thiserror::Error)]
pub enum EvalError {
    #[error("{0}")]
    Input(String),
    #[error(transparent)]
    Graph(#[from] graph::GraphError),
    #[error(transparent)]
    Sidecar(#[from] crate::sidecar::SidecarError),
    #[error(transparent)]
    Backend(#[from] crate::backend::BackendError),
    #[error("sidecar: {0}")]
    Sqlite(#[from] rusqlite::Error),
}

/// One gold AVU and what decide made of its column.
#[derive(Debug, Clone, Serialize)]
pub struct GoldRow {
    pub card: String,
    pub column: String,
    pub gold: String,
    /// The CURIE decide proposed for the column, if it proposed one.
    pub proposed: Option<String>,
    /// The candidate with the highest p(fits), if the column had candidates.
    pub top_candidate: Option<String>,
}

#[derive(Debug, Clone, Serialize)]
pub struct EvalReport {
    pub cards: usize,
    pub rows: Vec<GoldRow>,
    /// Share of gold AVUs whose column's proposal is the gold term.
    pub proposal_top1: f64,
    /// Share of gold AVUs whose best candidate is the gold term.
    pub candidate_top1: f64,
    /// term.fits over every candidate of a gold column (yes = it is the gold term), per level.
    pub term_fits: BTreeMap<String, Metrics>,
    pub bundle: Option<String>,
}

/// `column CURIE` per line (tab or spaces), `#` comments and blank lines ignored.
pub fn parse_gold(text: &str, file: &Path) -> Result<Vec<(String, String)>, EvalError> {
    let mut rows = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.split('#').next().unwrap_or_default().trim();
        if line.is_empty() {
            continue;
        }
        let fields: Vec<&str> = line.split_whitespace().collect();
        match fields.as_slice() {
            [column, curie] if curie.contains(':') => {
                rows.push((column.to_string(), curie.to_string()))
            }
            _ => {
                return Err(EvalError::Input(format!(
                    "{}:{}: a gold line is `column CURIE`, e.g. `hindfootLength PATO:0000122`",
                    file.display(),
                    n + 1
                )));
            }
        }
    }
    Ok(rows)
}

/// The cards in `dir` that have gold: `X.md` beside `X.gold`.
fn gold_cards(dir: &Path) -> Result<Vec<(PathBuf, PathBuf)>, EvalError> {
    let entries = std::fs::read_dir(dir)
        .map_err(|e| EvalError::Input(format!("cannot read {}: {e}", dir.display())))?;
    let mut found: Vec<(PathBuf, PathBuf)> = entries
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "md"))
        .filter_map(|p| {
            let gold = p.with_extension("gold");
            gold.exists().then_some((p, gold))
        })
        .collect();
    found.sort();
    if found.is_empty() {
        return Err(EvalError::Input(format!(
            "no cards with gold AVUs in {} (X.md beside X.gold)",
            dir.display()
        )));
    }
    Ok(found)
}

pub fn eval(
    dir: &Path,
    index: &Index,
    backend: &dyn Backend,
    policy: &Policy,
    bundle: Option<&Bundle>,
) -> Result<EvalReport, EvalError> {
    let cards = gold_cards(dir)?;
    let mut sidecar = Sidecar::open(Path::new(":memory:"))?;
    let raw = Calibrated {
        inner: backend,
        bundle: None,
    };
    let fits_key = questions::TERM_FITS.key();
    let artifact = bundle.and_then(|b| b.artifacts.get(&fits_key));
    let mut rows = Vec::new();
    let mut p: BTreeMap<&str, Vec<f64>> = BTreeMap::new();
    let mut truth = Vec::new();
    for (card_file, gold_file) in &cards {
        let text = std::fs::read_to_string(card_file)
            .map_err(|e| EvalError::Input(format!("cannot read {}: {e}", card_file.display())))?;
        let card = card::parse(&text)
            .map_err(|e| EvalError::Input(format!("{}: {e}", card_file.display())))?;
        let gold_text = std::fs::read_to_string(gold_file)
            .map_err(|e| EvalError::Input(format!("cannot read {}: {e}", gold_file.display())))?;
        let gold = parse_gold(&gold_text, gold_file)?;
        let search = |o: &str, w: &str, n: usize| index.search(o, w, n);
        let run = graph::annotate_into(&card, &search, &raw, policy, &mut sidecar, None, None)?;
        for (column, curie) in gold {
            if !card.columns.iter().any(|c| c.name == column) {
                return Err(EvalError::Input(format!(
                    "{}: no column {column} in {}",
                    gold_file.display(),
                    card_file.display()
                )));
            }
            let group = run.groups.iter().find(|g| g.column == column);
            let proposed = run
                .proposed
                .iter()
                .find(|l| group.is_some_and(|g| g.group_id == l.group_id))
                .map(|l| l.unit.clone());
            let top_candidate = group.and_then(|g| {
                g.candidates
                    .iter()
                    .max_by(|a, b| a.p.total_cmp(&b.p))
                    .map(|c| c.curie.clone())
            });
            for c in group.map(|g| g.candidates.as_slice()).unwrap_or_default() {
                let state: String = sidecar.db.query_row(
                    "SELECT state_json FROM decisions WHERE id = ?1",
                    [&c.decision_id],
                    |r| r.get(0),
                )?;
                let state: Value = serde_json::from_str(&state).unwrap_or(Value::Null);
                p.entry("L0").or_default().push(c.p);
                if let Some(a) = artifact {
                    let f = backend.features(&questions::TERM_FITS, &state)?;
                    p.entry("L1").or_default().push(a.p_l1(f[0]));
                    if let Some(p2) = a.p_l2(&f) {
                        p.entry("L2").or_default().push(p2);
                    }
                }
                truth.push(if c.curie == curie { 1.0 } else { 0.0 });
            }
            rows.push(GoldRow {
                card: card.name.clone(),
                column,
                gold: curie,
                proposed,
                top_candidate,
            });
        }
    }
    let share = |hit: &dyn Fn(&GoldRow) -> bool| {
        rows.iter().filter(|r| hit(r)).count() as f64 / rows.len().max(1) as f64
    };
    let proposal_top1 = share(&|r| r.proposed.as_deref() == Some(r.gold.as_str()));
    let candidate_top1 = share(&|r| r.top_candidate.as_deref() == Some(r.gold.as_str()));
    let term_fits = p
        .into_iter()
        .filter(|(_, v)| v.len() == truth.len())
        .map(|(level, v)| (level.to_owned(), metrics(&v, &truth)))
        .collect();
    Ok(EvalReport {
        cards: cards.len(),
        rows,
        proposal_top1,
        candidate_top1,
        term_fits,
        bundle: bundle.map(|b| b.version().to_owned()),
    })
}
