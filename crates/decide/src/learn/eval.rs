//! `mesh decide learn eval`: cards with gold AVUs through the decision graph, in a sidecar of
//! its own (in memory, nothing recorded), and how good the answers are at each level — L0
//! straight from the backend, L1 and L2 fitted on the gold set itself leaving one card out,
//! and a bundle's when one is given. The gold format is in docs/learning.md.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use serde::Serialize;
use serde_json::Value;

use super::bundle::{Artifact, Bundle};
use super::metrics::{Metrics, metrics};
use super::winner::{self, FittedOn, WinnerModel};
use crate::backend::Backend;
use crate::calibrated::Calibrated;
use crate::card;
use crate::evidence::ontology_of;
use crate::graph;
use crate::policy::Policy;
use crate::questions;
use crate::store::sidecar::Sidecar;
use mesh_ontology::index::Index;

use crate::embed::Embedder;
use crate::semantic::Semantic;

#[derive(Debug, thiserror::Error)]
pub enum EvalError {
    #[error("{0}")]
    Input(String),
    #[error(transparent)]
    Graph(#[from] graph::GraphError),
    #[error(transparent)]
    Sidecar(#[from] crate::store::sidecar::SidecarError),
    #[error(transparent)]
    Backend(#[from] crate::backend::BackendError),
    #[error(transparent)]
    Index(#[from] mesh_ontology::index::IndexError),
    #[error("sidecar: {0}")]
    Sqlite(#[from] crate::store::DbError),
}

/// One line of a gold file: a column and the terms that would be right for it (the first the
/// curator's preferred), or none when the column should stay unannotated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GoldColumn {
    pub column: String,
    pub terms: Vec<String>,
    /// The gold file's line, for messages.
    pub line: usize,
}

/// One gold column and what decide made of it.
#[derive(Debug, Clone, Serialize)]
pub struct GoldRow {
    pub card: String,
    pub column: String,
    /// The right terms; empty: the column should stay unannotated.
    pub gold: Vec<String>,
    /// The CURIE the graph proposed for the column (L0, as `decide_annotate` would).
    pub proposed: Option<String>,
    /// The candidate with the highest p(fits) at L0, if the column had candidates.
    pub top_candidate: Option<String>,
    /// The ontology the graph searched for the column, if it was annotated.
    pub ontology: Option<String>,
    /// Candidates the search found for the column.
    pub candidates: usize,
    /// Each candidate, as found: CURIE, label and p(fits) at L0.
    pub found: Vec<(String, String, f64)>,
    /// What carried each candidate's fit (the embedded backend's parts, as explain shows
    /// them), in the order of `found`.
    pub carried: Vec<Vec<(String, f64)>>,
    /// Whether any candidate was a right term (the most ranking can reach).
    pub reachable: bool,
    /// Whether the column states a unit (an input of the winner head).
    pub measured: bool,
    /// What the column's description says beside its best candidate (inputs of the head).
    #[serde(skip)]
    pub said: winner::Said,
    /// What the questions before the candidates said of the column.
    #[serde(skip)]
    pub upstream: winner::Upstream,
}

/// How good one level's probabilities are on the gold set.
#[derive(Debug, Clone, Serialize)]
pub struct LevelReport {
    /// Share of gold columns (with terms) whose best candidate is right.
    pub top1: f64,
    /// Share of gold columns (with terms) whose proposal is right: the best candidate, when
    /// the policy proposes it at this level's p.
    pub proposal_top1: f64,
    /// Share of proposals on gold-listed columns that are right (a proposal on a column that
    /// should stay unannotated is wrong).
    pub precision: f64,
    pub proposals: usize,
    /// `term.fits` over every candidate of a gold-listed column (yes: a right term).
    pub term_fits: Metrics,
    /// Reliability: per tenth of p(yes), the examples, their mean p and the share that fit.
    pub reliability: Vec<Bin>,
    /// Accuracy against coverage, most confident first: (coverage, accuracy) per step.
    pub coverage_curve: Vec<(f64, f64)>,
    /// The winners: each column's best candidate, its p(fits) against whether it is right
    /// (on a column that should stay unannotated, no winner is) — what a curator is shown.
    pub winner: Metrics,
    /// The winners' mean p(fits), and the share of them that are right.
    pub winner_mean_p: f64,
    pub winner_right: f64,
    /// The winners' reliability: per tenth of p, how many, their mean p, the share right.
    pub winner_reliability: Vec<Bin>,
}

/// The graph's own proposals against the gold.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Annotated {
    /// Share of gold columns (with terms) whose proposal is right.
    pub proposal_top1: f64,
    /// Share of proposals on gold-listed columns that are right.
    pub precision: f64,
    pub proposals: usize,
}

#[derive(Debug, Clone, Copy, Serialize)]
pub struct Bin {
    pub n: usize,
    pub mean_p: f64,
    pub observed: f64,
}

#[derive(Debug, Clone, Serialize)]
pub struct EvalReport {
    /// Which part of the gold set this is: a folder of cards that is not split is reported
    /// as a development part.
    pub part: Part,
    pub cards: usize,
    /// Gold columns with terms.
    pub gold_columns: usize,
    /// Gold columns that should stay unannotated.
    pub unannotated_columns: usize,
    /// Share of gold columns whose candidates include a right term.
    pub reachable: f64,
    /// Share of gold columns the graph did not search at all (it chose not to annotate).
    pub not_searched: f64,
    /// Share of gold columns searched in an ontology none of their right terms is in.
    pub searched_elsewhere: f64,
    /// Share of unannotated columns the graph left without a proposal.
    pub kept_unannotated: f64,
    /// What `decide_annotate` proposed (the graph as it runs, at L0).
    pub annotate: Annotated,
    pub rows: Vec<GoldRow>,
    /// By level: `L0`, `L1` and `L2` fitted on the gold set leaving one card out (when it
    /// has labels from two cards, both yes and no), and `L1 (vN)` / `L2 (vN)` with a bundle.
    pub levels: BTreeMap<String, LevelReport>,
    /// The winner head (`W2`), each card's winners predicted by one fitted on the others;
    /// `None` when some card's complement lacks right or wrong winners.
    pub winner_held_out: Option<WinnerReport>,
    /// The winner head fitted on every card: what `--write-calibration` writes.
    pub winner_model: Option<WinnerModel>,
    pub bundle: Option<String>,
    /// The sealed part of a split gold set, its rows withheld: nothing is fitted on it and
    /// nobody writing rules reads it, so its figures are the held-out ones.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sealed: Option<Box<EvalReport>>,
}

/// How a winner p did: the winners' mean p, the share right, the metrics and reliability.
#[derive(Debug, Clone, Serialize)]
pub struct WinnerReport {
    pub mean_p: f64,
    pub right: f64,
    pub metrics: Metrics,
    pub reliability: Vec<Bin>,
    /// What a perfectly calibrated p would score on these winners (see
    /// [`winner::ece_floor`]): mean and 95th percentile.
    pub ece_floor: (f64, f64),
    /// What the graph keeps with the head held out: the winners it proposes at L0 that the
    /// keep question, asked with the held-out head's p and threshold, keeps under the policy:
    /// proposal top-1, precision, proposals. On the development part each card's threshold
    /// is chosen on the other cards, as its head is fitted on them.
    pub kept: Annotated,
    /// The same, keeping every winner more likely right than not (the threshold before one
    /// was chosen).
    pub kept_even: Annotated,
    /// The threshold chosen on every development card's held-out p (what the head ships
    /// with), or the one the sealed part was kept at.
    pub keep_at: Option<f64>,
    /// Of the winners annotate proposes before the keep question asks the head (the graph
    /// without it, kept by p(fits)), the chance a right one's p is above a wrong one's
    /// ([`super::metrics::separation`]): what any threshold on the head's p has to work with.
    pub separation: Option<f64>,
}

/// Reads a gold file: `column CURIE [CURIE ...]` or `column -` per line (tab or spaces),
/// `#` comments and blank lines ignored; a column at most once.
pub fn parse_gold(text: &str, file: &Path) -> Result<Vec<GoldColumn>, EvalError> {
    let mut rows: Vec<GoldColumn> = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.split('#').next().unwrap_or_default().trim();
        if line.is_empty() {
            continue;
        }
        let at = || format!("{}:{}", file.display(), n + 1);
        let mut fields = line.split_whitespace();
        let column = fields.next().unwrap_or_default().to_owned();
        let rest: Vec<&str> = fields.collect();
        let terms = match rest.as_slice() {
            ["-"] => Vec::new(),
            terms if !terms.is_empty() && terms.iter().all(|t| is_curie(t)) => {
                terms.iter().map(|t| t.to_string()).collect()
            }
            _ => {
                return Err(EvalError::Input(format!(
                    "{}: a gold line is `column CURIE [CURIE ...]` or `column -`, e.g. `hindfootLength PATO:0000122`",
                    at()
                )));
            }
        };
        if rows.iter().any(|r| r.column == column) {
            return Err(EvalError::Input(format!(
                "{}: {column} is listed twice",
                at()
            )));
        }
        rows.push(GoldColumn {
            column,
            terms,
            line: n + 1,
        });
    }
    Ok(rows)
}

/// `PREFIX:local`, both parts non-empty, no blanks.
fn is_curie(text: &str) -> bool {
    text.split_once(':').is_some_and(|(p, l)| {
        !p.is_empty() && !l.is_empty() && p.chars().all(|c| c.is_ascii_alphanumeric())
    })
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

/// One candidate of a gold-listed column, as every level sees it.
struct Example {
    /// Index into the report's rows.
    row: usize,
    card: usize,
    fits: bool,
    p_l0: f64,
    features: Vec<f64>,
}

/// Checks that every gold term is a live term of an imported ontology.
fn check_terms(index: &Index, gold: &[GoldColumn], file: &Path) -> Result<(), EvalError> {
    let imported: BTreeSet<String> = index.ontologies()?.into_iter().map(|o| o.0).collect();
    for g in gold {
        for curie in &g.terms {
            let ontology = ontology_of(curie);
            let at = format!("{}:{}", file.display(), g.line);
            if !imported.contains(&ontology) {
                return Err(EvalError::Input(format!(
                    "{at}: {curie} is from {ontology}, which the index has not imported (mesh decide ontology import FILE)"
                )));
            }
            match index.term(&ontology, curie)? {
                None => {
                    return Err(EvalError::Input(format!(
                        "{at}: {curie} is not a term of {ontology}"
                    )));
                }
                Some((label, true)) => {
                    return Err(EvalError::Input(format!(
                        "{at}: {curie} ({label}) is obsolete in {ontology}"
                    )));
                }
                Some(_) => {}
            }
        }
    }
    Ok(())
}

/// The folders of a split gold set: the development part, read while writing rules and
/// fitted on, and the sealed part, which nothing is fitted on and whose rows are not shown.
pub const DEV: &str = "dev";
pub const SEALED: &str = "sealed";

/// The parts of a gold set: a folder holding `dev/` and `sealed/` is a split set, any other
/// folder of cards is one part (fitted on and measured leaving each card out, as before).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Parts {
    pub dev: PathBuf,
    pub sealed: Option<PathBuf>,
}

impl Parts {
    pub fn of(dir: &Path) -> Parts {
        let (dev, sealed) = (dir.join(DEV), dir.join(SEALED));
        if dev.is_dir() && sealed.is_dir() {
            Parts {
                dev,
                sealed: Some(sealed),
            }
        } else {
            Parts {
                dev: dir.to_owned(),
                sealed: None,
            }
        }
    }
}

/// One part's cards through the graph: its gold rows and every candidate as an example.
struct Pass {
    rows: Vec<GoldRow>,
    examples: Vec<Example>,
    cards: usize,
}

/// Evaluates the cards of `dir`. A split set (`dir/dev`, `dir/sealed`) is reported part by
/// part: the development part as it would be alone (L1, L2, W1 and the winner head each held
/// out card by card), the sealed part with everything fitted on the whole development part —
/// what a user's cards get — and without its rows (`EvalReport::sealed`).
pub fn eval(
    dir: &Path,
    index: &Index,
    embedder: Option<&Embedder>,
    backend: &dyn Backend,
    policy: &Policy,
    bundle: Option<&Bundle>,
) -> Result<EvalReport, EvalError> {
    let parts = Parts::of(dir);
    // With sentence embeddings, the graph reads the index through them.
    let terms = Semantic::new(index, embedder);
    let mut sidecar = Sidecar::open(Path::new(":memory:"))?;
    // The graph as it runs without the winner head: the head decide ships was fitted on
    // these cards, so what it keeps is judged below with each card's head held out.
    let unheaded = Unheaded(backend);
    let raw = Calibrated {
        inner: &unheaded,
        bundle: None,
    };
    let mut run = |dir: &Path| pass(dir, index, &terms, &raw, backend, policy, &mut sidecar);
    let dev = run(&parts.dev)?;
    let sealed = parts.sealed.as_deref().map(&mut run).transpose()?;
    let keeps = |p: f64, at: f64| {
        let q = &questions::KEEP;
        let options: Vec<String> = q.options.iter().map(|o| o.to_string()).collect();
        let state = serde_json::json!({"winner": {"p": p, "keep_at": at}});
        backend
            .ask(q, &state, &options)
            .is_ok_and(|a| policy.outcome(q, &a) == crate::policy::Outcome::Proposed)
    };

    let Pass {
        rows,
        examples,
        cards,
    } = &dev;
    let mut levels = BTreeMap::new();
    let l0: Vec<f64> = examples.iter().map(|e| e.p_l0).collect();
    levels.insert("L0".to_owned(), level(rows, examples, &l0, policy));
    if let Some((l1, l2)) = leave_one_card_out(examples, *cards) {
        levels.insert("L1".to_owned(), level(rows, examples, &l1, policy));
        if let Some(l2) = l2 {
            levels.insert("L2".to_owned(), level(rows, examples, &l2, policy));
        }
    }
    if let Some(w1) = winners_held_out(examples, *cards) {
        levels.insert("W1".to_owned(), level(rows, examples, &w1, policy));
    }
    bundle_levels(&mut levels, bundle, rows, examples, policy);
    let (winner_held_out, mut winner_model) = match winner_head(backend, examples, rows, &keeps) {
        Some((held_out, weights, ridge, n)) => {
            let model = WinnerModel {
                backend: backend.name(),
                weights,
                keep_at: held_out.keep_at,
                fitted_on: FittedOn {
                    cards_dir: parts.dev.display().to_string(),
                    cards: *cards,
                    winners: n,
                    gold_sha256: part_digest(&parts.dev)?,
                    ridge,
                    held_out: held_out.metrics,
                    ece_floor: held_out.ece_floor,
                    reliability: held_out
                        .reliability
                        .iter()
                        .map(|b| (b.n, b.mean_p, b.observed))
                        .collect(),
                    command: String::new(),
                    sealed: None,
                },
            };
            (Some(held_out), Some(model))
        }
        None => (None, None),
    };

    let sealed_report = match (sealed, &parts.sealed) {
        (Some(s), Some(s_dir)) => {
            let report = sealed_part(
                &dev,
                s,
                backend,
                policy,
                bundle,
                winner_model.as_ref(),
                &keeps,
            );
            if let (Some(m), Some(w)) = (winner_model.as_mut(), &report.winner_held_out) {
                m.fitted_on.sealed = Some(winner::Sealed {
                    cards_dir: s_dir.display().to_string(),
                    cards: report.cards,
                    winners: w.metrics.n,
                    gold_sha256: part_digest(s_dir)?,
                    metrics: w.metrics,
                    ece_floor: w.ece_floor,
                });
            }
            Some(Box::new(report))
        }
        _ => None,
    };
    let mut report = summary(&dev, levels, bundle, Part::Development);
    report.winner_held_out = winner_held_out;
    report.winner_model = winner_model;
    report.sealed = sealed_report;
    Ok(report)
}

/// Which part of a gold set a report is of.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Part {
    /// The cards read while writing rules, and fitted on (each held out in turn).
    Development,
    /// The cards nobody reads: only aggregate figures, everything fitted on the other part.
    Sealed,
}

/// The sealed part's report: L0 as the graph ranks; L1, L2, W1 and the winner head fitted on
/// every development card; its rows withheld once counted (nobody writing rules reads them).
fn sealed_part(
    dev: &Pass,
    sealed: Pass,
    backend: &dyn Backend,
    policy: &Policy,
    bundle: Option<&Bundle>,
    head: Option<&WinnerModel>,
    keeps: &dyn Fn(f64, f64) -> bool,
) -> EvalReport {
    let Pass { rows, examples, .. } = &sealed;
    let mut levels = BTreeMap::new();
    let l0: Vec<f64> = examples.iter().map(|e| e.p_l0).collect();
    levels.insert("L0".to_owned(), level(rows, examples, &l0, policy));
    let all: Vec<usize> = (0..dev.examples.len()).collect();
    let both = |of: &[usize]| {
        let yes = of.iter().filter(|i| dev.examples[**i].fits).count();
        yes > 0 && yes < of.len()
    };
    if both(&all) {
        let y: Vec<f64> = dev
            .examples
            .iter()
            .map(|e| f64::from(u8::from(e.fits)))
            .collect();
        let w = vec![1.0; y.len()];
        let x: Vec<Vec<f64>> = dev.examples.iter().map(|e| e.features.clone()).collect();
        let a = super::fit_artifact(&x, &y, &w, &all);
        let l1: Vec<f64> = examples.iter().map(|e| a.p_l1(e.features[0])).collect();
        levels.insert("L1".to_owned(), level(rows, examples, &l1, policy));
        let l2: Option<Vec<f64>> = examples.iter().map(|e| a.p_l2(&e.features)).collect();
        if let Some(l2) = l2.filter(|_| examples.first().is_some_and(|e| e.features.len() > 1)) {
            levels.insert("L2".to_owned(), level(rows, examples, &l2, policy));
        }
    }
    let won = winners(&dev.examples);
    if both(&won) {
        let a = fit_winners(&dev.examples, &won);
        let w1: Vec<f64> = examples.iter().map(|e| a.p_l1(e.features[0])).collect();
        levels.insert("W1".to_owned(), level(rows, examples, &w1, policy));
    }
    bundle_levels(&mut levels, bundle, rows, examples, policy);
    let winner_held_out = head.map(|m| {
        let won = winner_rows(backend, examples, rows);
        let p: Vec<f64> = won
            .iter()
            .map(|(_, x, _)| m.p(x).unwrap_or(f64::NAN))
            .collect();
        let at = m.keep_at.unwrap_or(0.5);
        winner_report(&won, examples, rows, &p, keeps, &vec![at; won.len()])
    });
    let mut report = summary(&sealed, levels, bundle, Part::Sealed);
    report.winner_held_out = winner_held_out;
    report.rows.clear();
    report
}

/// A part's counts and what the graph proposed, beside its levels.
fn summary(
    pass: &Pass,
    levels: BTreeMap<String, LevelReport>,
    bundle: Option<&Bundle>,
    part: Part,
) -> EvalReport {
    let rows = &pass.rows;
    let with_terms = rows.iter().filter(|r| !r.gold.is_empty()).count();
    let without = rows.len() - with_terms;
    let share = |n: usize, of: usize| n as f64 / of.max(1) as f64;
    EvalReport {
        part,
        cards: pass.cards,
        gold_columns: with_terms,
        unannotated_columns: without,
        reachable: share(
            rows.iter()
                .filter(|r| !r.gold.is_empty() && r.reachable)
                .count(),
            with_terms,
        ),
        not_searched: share(
            rows.iter()
                .filter(|r| !r.gold.is_empty() && r.ontology.is_none())
                .count(),
            with_terms,
        ),
        searched_elsewhere: share(
            rows.iter()
                .filter(|r| {
                    r.ontology.as_deref().is_some_and(|o| {
                        !r.gold.is_empty() && !r.gold.iter().any(|t| ontology_of(t) == o)
                    })
                })
                .count(),
            with_terms,
        ),
        kept_unannotated: share(
            rows.iter()
                .filter(|r| r.gold.is_empty() && r.proposed.is_none())
                .count(),
            without,
        ),
        annotate: annotated(rows),
        rows: rows.clone(),
        levels,
        winner_held_out: None,
        winner_model: None,
        bundle: bundle.map(|b| b.version().to_owned()),
        sealed: None,
    }
}

/// A bundle's L1 and L2, when one is given and fits `term.fits`.
fn bundle_levels(
    levels: &mut BTreeMap<String, LevelReport>,
    bundle: Option<&Bundle>,
    rows: &[GoldRow],
    examples: &[Example],
    policy: &Policy,
) {
    let Some(b) = bundle else { return };
    let Some(a) = b.artifacts.get(&questions::TERM_FITS.key()) else {
        return;
    };
    let l1: Vec<f64> = examples.iter().map(|e| a.p_l1(e.features[0])).collect();
    levels.insert(
        format!("L1 ({})", b.version()),
        level(rows, examples, &l1, policy),
    );
    let l2: Option<Vec<f64>> = examples.iter().map(|e| a.p_l2(&e.features)).collect();
    if let Some(l2) = l2 {
        levels.insert(
            format!("L2 ({})", b.version()),
            level(rows, examples, &l2, policy),
        );
    }
}

/// The SHA-256 of a part's files (see [`winner::digest`]).
fn part_digest(dir: &Path) -> Result<String, EvalError> {
    let files = winner::gold_files(dir)
        .map_err(|e| EvalError::Input(format!("cannot read {}: {e}", dir.display())))?;
    Ok(winner::digest(&files))
}

/// Every card of `dir` with gold through the graph, into `sidecar`.
fn pass(
    dir: &Path,
    index: &Index,
    terms: &Semantic<'_>,
    raw: &dyn Backend,
    backend: &dyn Backend,
    policy: &Policy,
    sidecar: &mut Sidecar,
) -> Result<Pass, EvalError> {
    let cards = gold_cards(dir)?;
    let mut rows = Vec::new();
    let mut examples = Vec::new();
    for (card_no, (card_file, gold_file)) in cards.iter().enumerate() {
        let text = std::fs::read_to_string(card_file)
            .map_err(|e| EvalError::Input(format!("cannot read {}: {e}", card_file.display())))?;
        let card = card::parse(&text)
            .map_err(|e| EvalError::Input(format!("{}: {e}", card_file.display())))?;
        let gold_text = std::fs::read_to_string(gold_file)
            .map_err(|e| EvalError::Input(format!("cannot read {}: {e}", gold_file.display())))?;
        let gold = parse_gold(&gold_text, gold_file)?;
        check_terms(index, &gold, gold_file)?;
        let run = graph::annotate_into(&card, terms, raw, policy, sidecar, None, None)?;
        for g in gold {
            if !card.columns.iter().any(|c| c.name == g.column) {
                return Err(EvalError::Input(format!(
                    "{}:{}: no column {} in {}",
                    gold_file.display(),
                    g.line,
                    g.column,
                    card_file.display()
                )));
            }
            let group = run.groups.iter().find(|x| x.column == g.column);
            let proposed = run
                .proposed
                .iter()
                .find(|l| group.is_some_and(|x| x.group_id == l.group_id))
                .map(|l| l.unit.clone());
            let candidates = group.map(|x| x.candidates.as_slice()).unwrap_or_default();
            let ps: Vec<f64> = candidates.iter().map(|c| c.p).collect();
            let top_candidate =
                (!ps.is_empty()).then(|| candidates[graph::best_of(&ps)].curie.clone());
            let mut carried = Vec::new();
            for c in candidates {
                let asked = crate::store::decisions::asked(&sidecar.db, &c.decision_id)?;
                let state: Value = serde_json::from_str(&asked.state_json).map_err(|e| {
                    EvalError::Input(format!(
                        "decision {}: its recorded state is no JSON ({e})",
                        c.decision_id
                    ))
                })?;
                carried.push(crate::backend::carried_by(
                    questions::TERM_FITS.kind,
                    &state,
                ));
                examples.push(Example {
                    row: rows.len(),
                    card: card_no,
                    fits: g.terms.contains(&c.curie),
                    p_l0: c.p,
                    features: backend.features(&questions::TERM_FITS, &state)?,
                });
            }
            let column = card.columns.iter().find(|c| c.name == g.column);
            let measured = column.is_some_and(|c| c.unit.is_some());
            let said = match (&top_candidate, column) {
                (Some(best), Some(c)) => winner::Said::of(&c.description, best, terms)?,
                _ => winner::Said::default(),
            };
            rows.push(GoldRow {
                measured,
                said,
                upstream: group.map(|x| x.upstream).unwrap_or_default(),
                card: card.name.clone(),
                column: g.column,
                reachable: candidates.iter().any(|c| g.terms.contains(&c.curie)),
                gold: g.terms,
                proposed,
                top_candidate,
                ontology: group.map(|x| x.ontology.clone()),
                candidates: candidates.len(),
                found: candidates
                    .iter()
                    .map(|c| (c.curie.clone(), c.label.clone(), c.p))
                    .collect(),
                carried,
            });
        }
    }
    Ok(Pass {
        rows,
        examples,
        cards: cards.len(),
    })
}

fn annotated(rows: &[GoldRow]) -> Annotated {
    let right = |r: &GoldRow| r.proposed.as_ref().is_some_and(|p| r.gold.contains(p));
    let proposals = rows.iter().filter(|r| r.proposed.is_some()).count();
    let with_terms = rows.iter().filter(|r| !r.gold.is_empty()).count();
    let hits = rows.iter().filter(|r| right(r)).count();
    Annotated {
        proposal_top1: hits as f64 / with_terms.max(1) as f64,
        precision: if proposals == 0 {
            0.0
        } else {
            hits as f64 / proposals as f64
        },
        proposals,
    }
}

/// L1 and L2 predictions for every example, each from parameters fitted on the other cards'
/// examples; `None` when no card's complement has both yes and no. L2 is `None` when the
/// backend gives no features beyond the logit.
fn leave_one_card_out(examples: &[Example], cards: usize) -> Option<(Vec<f64>, Option<Vec<f64>>)> {
    let y: Vec<f64> = examples
        .iter()
        .map(|e| f64::from(u8::from(e.fits)))
        .collect();
    let w = vec![1.0; examples.len()];
    let features: Vec<Vec<f64>> = examples.iter().map(|e| e.features.clone()).collect();
    let mut l1 = vec![f64::NAN; examples.len()];
    let mut l2 = vec![f64::NAN; examples.len()];
    let mut fitted_any = false;
    for card in 0..cards {
        let train: Vec<usize> = (0..examples.len())
            .filter(|i| examples[*i].card != card)
            .collect();
        let yes = train.iter().filter(|i| examples[**i].fits).count();
        if yes == 0 || yes == train.len() {
            continue;
        }
        let a: Artifact = super::fit_artifact(&features, &y, &w, &train);
        fitted_any = true;
        for (i, e) in examples.iter().enumerate().filter(|(_, e)| e.card == card) {
            l1[i] = a.p_l1(e.features[0]);
            l2[i] = a.p_l2(&e.features).unwrap_or(f64::NAN);
        }
    }
    if !fitted_any || l1.iter().any(|p| p.is_nan()) {
        return None;
    }
    let has_head = examples.first().is_some_and(|e| e.features.len() > 1);
    let l2 = (has_head && !l2.iter().any(|p| p.is_nan())).then_some(l2);
    Some((l1, l2))
}

/// Each gold-listed column's winner at L0 (its best candidate), as an index into
/// `examples`.
fn winners(examples: &[Example]) -> Vec<usize> {
    let mut best: BTreeMap<usize, usize> = BTreeMap::new();
    for (i, e) in examples.iter().enumerate() {
        if best.get(&e.row).is_none_or(|b| e.p_l0 > examples[*b].p_l0) {
            best.insert(e.row, i);
        }
    }
    best.into_values().collect()
}

/// Platt scaling of the logit fitted on the winners alone (each column's best candidate,
/// right or not): p(fits) made to mean, for the candidate a curator is shown, how often
/// such a winner is right. Monotone in the logit, so every ranking stays L0's.
fn fit_winners(examples: &[Example], of: &[usize]) -> Artifact {
    let y: Vec<f64> = examples
        .iter()
        .map(|e| f64::from(u8::from(e.fits)))
        .collect();
    let w = vec![1.0; examples.len()];
    let z: Vec<Vec<f64>> = examples.iter().map(|e| vec![e.features[0]]).collect();
    super::fit_artifact(&z, &y, &w, of)
}

/// The winners' calibration held out card by card: every example's p from parameters fitted
/// on the other cards' winners; `None` when some card's complement lacks right or wrong ones.
fn winners_held_out(examples: &[Example], cards: usize) -> Option<Vec<f64>> {
    let won = winners(examples);
    let mut p = vec![f64::NAN; examples.len()];
    for card in 0..cards {
        let train: Vec<usize> = won
            .iter()
            .copied()
            .filter(|i| examples[*i].card != card)
            .collect();
        let right = train.iter().filter(|i| examples[**i].fits).count();
        if right == 0 || right == train.len() {
            return None;
        }
        let a = fit_winners(examples, &train);
        for (i, e) in examples.iter().enumerate().filter(|(_, e)| e.card == card) {
            p[i] = a.p_l1(e.features[0]);
        }
    }
    (!p.iter().any(|p| p.is_nan())).then_some(p)
}

/// Each row's winner at L0 with the head's features (see [`winner::features`]) and whether
/// it is right: (example index, features, right).
fn winner_rows(
    backend: &dyn Backend,
    examples: &[Example],
    rows: &[GoldRow],
) -> Vec<(usize, Vec<f64>, f64)> {
    let mut by_row: BTreeMap<usize, Vec<usize>> = BTreeMap::new();
    for (i, e) in examples.iter().enumerate() {
        by_row.entry(e.row).or_default().push(i);
    }
    by_row
        .into_values()
        .map(|of| {
            // The graph's best: the first found of those tied highest.
            let ps: Vec<f64> = of.iter().map(|i| examples[*i].p_l0).collect();
            let first = graph::best_of(&ps);
            let best = &examples[of[first]];
            let next = (0..ps.len())
                .filter(|i| *i != first)
                .map(|i| ps[i])
                .fold(0.0, f64::max);
            let ontology = rows[best.row].ontology.as_deref().unwrap_or_default();
            let x = winner::features(
                &backend.winner_inputs(&best.features),
                best.p_l0 - next,
                ontology,
                rows[best.row].measured,
                rows[best.row].said,
                rows[best.row].upstream,
            );
            (of[first], x, f64::from(u8::from(best.fits)))
        })
        .collect()
}

/// The winner head held out card by card (its penalty the one of least held-out log loss),
/// and fitted on all: the held-out report, the weights, the penalty and the winners' count;
/// `None` when some card's complement lacks right or wrong winners.
fn winner_head(
    backend: &dyn Backend,
    examples: &[Example],
    gold: &[GoldRow],
    keeps: &dyn Fn(f64, f64) -> bool,
) -> Option<(WinnerReport, Vec<f64>, f64, usize)> {
    let rows = winner_rows(backend, examples, gold);
    let x: Vec<Vec<f64>> = rows.iter().map(|r| r.1.clone()).collect();
    let y: Vec<f64> = rows.iter().map(|r| r.2).collect();
    let card: Vec<usize> = rows.iter().map(|r| examples[r.0].card).collect();
    let (ridge, p) = winner::RIDGES
        .iter()
        .map(|r| Some((*r, winner::held_out(&x, &y, &card, *r)?)))
        .collect::<Option<Vec<_>>>()?
        .into_iter()
        .min_by(|a, b| winner::log_loss(&a.1, &y).total_cmp(&winner::log_loss(&b.1, &y)))?;
    let all: Vec<usize> = (0..rows.len()).collect();
    // The threshold from the held-out p: the head shipped keeps at the one chosen on every
    // card; each card is measured at the one chosen on the other cards.
    let proposed: Vec<bool> = rows
        .iter()
        .map(|r| gold[examples[r.0].row].proposed.is_some())
        .collect();
    let right: Vec<bool> = y.iter().map(|y| *y > 0.5).collect();
    let keep_at = winner::choose_keep_at(&p, &proposed, &right, &all, keeps);
    let at: Vec<f64> = card
        .iter()
        .map(|c| {
            let others: Vec<usize> = all.iter().copied().filter(|i| card[*i] != *c).collect();
            winner::choose_keep_at(&p, &proposed, &right, &others, keeps)
        })
        .collect();
    let mut report = winner_report(&rows, examples, gold, &p, keeps, &at);
    report.keep_at = Some(keep_at);
    Some((report, winner::fit(&x, &y, &all, ridge), ridge, rows.len()))
}

/// How the winners' p did, and what the graph keeps when the keep question is asked with it.
fn winner_report(
    rows: &[(usize, Vec<f64>, f64)],
    examples: &[Example],
    gold: &[GoldRow],
    p: &[f64],
    keeps: &dyn Fn(f64, f64) -> bool,
    at: &[f64],
) -> WinnerReport {
    let y: Vec<f64> = rows.iter().map(|r| r.2).collect();
    let n = rows.len().max(1) as f64;
    // What keep decides with the head: the question asked with its p, as the graph asks it.
    let kept = |at: &dyn Fn(usize) -> f64| {
        let mut kept_rows: Vec<GoldRow> = gold.to_vec();
        for (i, (e, _, _)) in rows.iter().enumerate() {
            if !keeps(p[i], at(i)) {
                kept_rows[examples[*e].row].proposed = None;
            }
        }
        annotated(&kept_rows)
    };
    let keep_at = at.first().copied().filter(|a| at.iter().all(|b| b == a));
    let proposed: Vec<usize> = (0..rows.len())
        .filter(|i| gold[examples[rows[*i].0].row].proposed.is_some())
        .collect();
    let separation = super::metrics::separation(
        &proposed.iter().map(|i| p[*i]).collect::<Vec<_>>(),
        &proposed.iter().map(|i| y[*i]).collect::<Vec<_>>(),
    );
    WinnerReport {
        separation,
        kept: kept(&|i| at[i]),
        kept_even: kept(&|_| 0.5),
        keep_at,
        mean_p: p.iter().sum::<f64>() / n,
        right: y.iter().sum::<f64>() / n,
        metrics: metrics(p, &y),
        reliability: reliability(p, &y),
        ece_floor: winner::ece_floor(p, 1000),
    }
}

/// A backend without its winner head: the graph keeps winners by their p(fits).
struct Unheaded<'a>(&'a dyn Backend);

impl Backend for Unheaded<'_> {
    fn name(&self) -> String {
        self.0.name()
    }

    fn ask(
        &self,
        question: &questions::Question,
        state: &Value,
        options: &[String],
    ) -> Result<crate::backend::Answer, crate::backend::BackendError> {
        self.0.ask(question, state, options)
    }

    fn features(
        &self,
        question: &questions::Question,
        state: &Value,
    ) -> Result<Vec<f64>, crate::backend::BackendError> {
        self.0.features(question, state)
    }
}

/// One level's figures from its p(fits) per example.
fn level(rows: &[GoldRow], examples: &[Example], p: &[f64], policy: &Policy) -> LevelReport {
    let threshold = policy.threshold(&questions::TERM_FITS);
    // Per row, its best candidate under these probabilities (the first found on a tie).
    let mut best: BTreeMap<usize, (usize, f64)> = BTreeMap::new();
    for (i, e) in examples.iter().enumerate() {
        let better = best.get(&e.row).is_none_or(|(_, q)| p[i] > *q);
        if better {
            best.insert(e.row, (i, p[i]));
        }
    }
    let (mut top1, mut proposal_top1, mut proposals, mut right) = (0usize, 0usize, 0usize, 0usize);
    for (row, (i, q)) in &best {
        let fits = examples[*i].fits;
        let gold = !rows[*row].gold.is_empty();
        if gold && fits {
            top1 += 1;
        }
        // As the policy decides a yes/no question: p(yes) and its margin over p(no).
        let proposed = *q >= threshold.propose && 2.0 * q - 1.0 >= threshold.margin;
        if proposed {
            proposals += 1;
            if fits {
                right += 1;
                proposal_top1 += 1;
            }
        }
    }
    let (winner_p, winner_y): (Vec<f64>, Vec<f64>) = best
        .values()
        .map(|(i, q)| (*q, f64::from(u8::from(examples[*i].fits))))
        .unzip();
    let n = winner_p.len().max(1) as f64;
    let with_terms = rows.iter().filter(|r| !r.gold.is_empty()).count().max(1) as f64;
    let truth: Vec<f64> = examples
        .iter()
        .map(|e| f64::from(u8::from(e.fits)))
        .collect();
    LevelReport {
        top1: top1 as f64 / with_terms,
        proposal_top1: proposal_top1 as f64 / with_terms,
        precision: if proposals == 0 {
            0.0
        } else {
            right as f64 / proposals as f64
        },
        proposals,
        term_fits: metrics(p, &truth),
        reliability: reliability(p, &truth),
        coverage_curve: coverage_curve(p, &truth),
        winner_mean_p: winner_p.iter().sum::<f64>() / n,
        winner_right: winner_y.iter().sum::<f64>() / n,
        winner: metrics(&winner_p, &winner_y),
        winner_reliability: reliability(&winner_p, &winner_y),
    }
}

/// Ten equal bins of p(yes): how many, their mean p, and the share that were yes.
fn reliability(p: &[f64], y: &[f64]) -> Vec<Bin> {
    let mut bins = vec![(0usize, 0.0f64, 0.0f64); 10];
    for (p, y) in p.iter().zip(y) {
        let b = ((p * 10.0).floor() as usize).min(9);
        bins[b].0 += 1;
        bins[b].1 += p;
        bins[b].2 += y;
    }
    bins.into_iter()
        .map(|(n, sp, sy)| Bin {
            n,
            mean_p: if n == 0 { 0.0 } else { sp / n as f64 },
            observed: if n == 0 { 0.0 } else { sy / n as f64 },
        })
        .collect()
}

/// Most confident first (confidence max(p, 1−p)): the accuracy of the answers given at each
/// coverage, at most 100 points.
fn coverage_curve(p: &[f64], y: &[f64]) -> Vec<(f64, f64)> {
    let n = p.len();
    let mut order: Vec<usize> = (0..n).collect();
    let confidence = |i: usize| p[i].max(1.0 - p[i]);
    order.sort_by(|a, b| confidence(*b).total_cmp(&confidence(*a)));
    let step = n.div_ceil(100).max(1);
    let mut right = 0usize;
    let mut curve = Vec::new();
    for (k, i) in order.iter().enumerate() {
        if (p[*i] >= 0.5) == (y[*i] >= 0.5) {
            right += 1;
        }
        if (k + 1) % step == 0 || k + 1 == n {
            curve.push(((k + 1) as f64 / n as f64, right as f64 / (k + 1) as f64));
        }
    }
    curve
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gold_lines_name_terms_or_none() {
        let file = Path::new("x.gold");
        let text = "# a card\nsex PATO:0000047 PATO:0000383\n\nremarks  -  # free text\ntaxon\tNCBITaxon:10090\n";
        let gold = parse_gold(text, file).unwrap();
        assert_eq!(gold.len(), 3);
        assert_eq!(gold[0].terms, ["PATO:0000047", "PATO:0000383"]);
        assert!(gold[1].terms.is_empty());
        assert_eq!((gold[2].column.as_str(), gold[2].line), ("taxon", 5));
        for bad in ["sex", "sex PATO", "sex - PATO:1", "sex :1", "a PATO:1\na -"] {
            let e = parse_gold(bad, file).unwrap_err().to_string();
            assert!(e.starts_with("x.gold:"), "{bad}: {e}");
        }
    }

    #[test]
    fn the_curve_starts_with_the_most_confident() {
        let p = [0.99, 0.6, 0.01, 0.5];
        let y = [1.0, 0.0, 0.0, 1.0];
        let curve = coverage_curve(&p, &y);
        assert_eq!(curve[0], (0.25, 1.0));
        assert_eq!(curve[1], (0.5, 1.0));
        assert_eq!(curve.last().unwrap().0, 1.0);
        let bins = reliability(&p, &y);
        assert_eq!(bins.iter().map(|b| b.n).sum::<usize>(), 4);
        assert_eq!(bins[9].n, 1);
        assert_eq!(bins[9].observed, 1.0);
    }
}
