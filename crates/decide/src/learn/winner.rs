//! The winner's probability: how often a column's best candidate is the right term, read from
//! that candidate's features, its margin over the next and its ontology — a head fitted
//! on winners alone (right or wrong, and a column that should stay unannotated has no right
//! one). A candidate's p(fits) answers "does this term fit?" for every candidate; this answers
//! the question a curator has about the one shown first. decide ships one fitted on its gold
//! set (`winner.json`, made by `bin/fit-calibration`) for the embedded backend; it reads the
//! backend's own scores, so it serves whatever bundle is promoted (bundles fit no winner
//! head of their own yet).

use std::sync::OnceLock;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::logistic::{self, predict};
use super::metrics::Metrics;

/// The calibration decide ships, fitted on the development part of `tests/gold/real` (see
/// docs/learning.md) and measured on its sealed part.
pub const DEFAULT: &str = include_str!("../winner.json");

/// The penalties the head is tried with; the one with the least held-out log loss is kept
/// (a proper score, so the choice does not chase the calibration error it is judged by).
pub const RIDGES: [f64; 6] = [0.1, 0.3, 1.0, 3.0, 10.0, 30.0];

/// A fitted winner head and where it came from.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WinnerModel {
    /// The backend whose features it reads; any other gets no calibrated winner.
    pub backend: String,
    /// The head: one weight per feature of [`features`], then the bias.
    pub weights: Vec<f64>,
    /// The p from which a winner is kept: the lowest at which the development part's
    /// winners, each p held out, were right for [`KEEP_PRECISION`] of the proposals kept
    /// ([`choose_keep_at`]); `None` (a head written before): kept when more likely right
    /// than not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub keep_at: Option<f64>,
    pub fitted_on: FittedOn,
}

/// What a winner head was fitted on and how well it did held out.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FittedOn {
    /// The folder of gold cards, as given.
    pub cards_dir: String,
    pub cards: usize,
    /// Columns with a winner.
    pub winners: usize,
    /// SHA-256 over the gold set's files (name and bytes, in name order): a changed gold set
    /// is a calibration to fit again.
    pub gold_sha256: String,
    /// The penalty chosen.
    pub ridge: f64,
    /// Each card's winners predicted by a head fitted on the other cards.
    pub held_out: Metrics,
    /// The calibration error a perfectly calibrated p would show on as many winners with
    /// these p (binned ECE is biased upward on few examples): mean and 95th percentile.
    pub ece_floor: (f64, f64),
    /// The held-out reliability: per tenth of p, how many winners, their mean p and the
    /// share right.
    pub reliability: Vec<(usize, f64, f64)>,
    /// The command that made it.
    pub command: String,
    /// How the head did on the sealed part of the gold set, which it was not fitted on;
    /// `None` when it was fitted on a gold set without one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sealed: Option<Sealed>,
}

/// The head, fitted on the development part, on the sealed part's winners.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Sealed {
    pub cards_dir: String,
    pub cards: usize,
    pub winners: usize,
    /// SHA-256 over the sealed part's files, as [`FittedOn::gold_sha256`]: the figures
    /// below are of these cards.
    pub gold_sha256: String,
    pub metrics: Metrics,
    /// What a perfectly calibrated p would show on these winners: mean and 95th percentile.
    pub ece_floor: (f64, f64),
}

impl WinnerModel {
    /// p(the winner is right), or `None` when the features are not the ones it was fitted on.
    pub fn p(&self, features: &[f64]) -> Option<f64> {
        (features.len() + 1 == self.weights.len()).then(|| predict(&self.weights, features))
    }

    /// How a winner's p was made, as explain and health say it (short: it ends a line of a
    /// group's table).
    pub fn calibration(&self, origin: &str) -> String {
        let f = &self.fitted_on;
        match &f.sealed {
            // The figure a stranger's card can expect: on cards it was not fitted on.
            Some(s) => format!(
                "{origin} winner head, ECE {:.3} on {} sealed cards",
                s.metrics.ece, s.cards
            ),
            None => format!(
                "{origin} winner head, held-out ECE {:.3} on {} cards",
                f.held_out.ece, f.cards
            ),
        }
    }
}

/// The shipped head, when it parses (a unit test makes sure it does).
pub fn default_model() -> Option<&'static WinnerModel> {
    static MODEL: OnceLock<Option<WinnerModel>> = OnceLock::new();
    MODEL
        .get_or_init(|| serde_json::from_str(DEFAULT).ok())
        .as_ref()
}

/// The ontologies a winner may come from, one input each: how often a winner is right
/// differs by ontology (a taxon group is harder than a quality) whatever its scores say.
pub const ONTOLOGIES: [&str; 7] = ["pato", "uberon", "ncbitaxon", "chebi", "mondo", "cl", "efo"];

/// The head's inputs: the winner's own features (the backend's, for `term.fits`), its margin
/// over the next candidate's p(fits), its ontology, and whether the column states a unit
/// (`measured`): a winner for a column of measured values is right far more often than one
/// for a column of categories, codes or names, however alike their scores (on the
/// development part, 90% of proposals against 62%), and every part of the fit and the margin
/// again for such a column. Not how many candidates were found:
/// that is the index's size as much as the column's (a small index finds few for anything).
///
/// Then what the column's description says that the winner does not ([`Said::unsaid`]) and
/// how far below its ontology's top the winner is ([`Said::above`]): a wrong winner is most
/// often a general word of a longer phrase (`rate` for "Estimated glomerular filtration
/// rate", `nitrogen atom` for "Net nitrogen mineralisation rate"), its label one word of
/// many the description says, high in its ontology.
///
/// Last, how sure the backend was that the column is annotated at all ([`Upstream`]): more
/// than half of the development part's wrong proposals are of columns that should stay
/// unannotated, and a winner's scores say nothing of that (on the 89 cards of session 10 of
/// issue 48, the head held out without and with it: Brier 0.149 → 0.142 on the development
/// part, 0.174 → 0.156 on the sealed part, where a right proposal's p is above a wrong
/// one's 0.814 → 0.856 of the time; docs/benchmarks.md). And how much the evidence said
/// for the ontology searched: chosen by its held-out fit on the development part (Brier
/// 0.150 → 0.145 on its 60 cards), and on the sealed part no worse (0.157 → 0.155).
pub fn features(
    candidate: &[f64],
    margin: f64,
    ontology: &str,
    measured: bool,
    said: Said,
    upstream: Upstream,
) -> Vec<f64> {
    let mut x = candidate.to_vec();
    x.push(margin);
    x.extend(ONTOLOGIES.map(|o| f64::from(u8::from(o == ontology))));
    x.push(f64::from(u8::from(measured)));
    // Each part of the fit and the margin say more, or other things, for a column of
    // measured values than for one of categories, codes or names: each again for such a
    // column (chosen on the development part by held-out log loss, 0.426 → 0.393; the score
    // alone 0.403).
    let m = f64::from(u8::from(measured));
    x.extend(candidate.iter().map(|v| v * m));
    x.push(margin * m);
    x.push(said.unsaid);
    x.push(said.above);
    x.push(upstream.annotate);
    x.push(upstream.ontology);
    x
}

/// What the questions before the candidates said (inputs of the head): a winner is only as
/// right as the column's being annotated at all and its terms' being of the ontology
/// searched, which the candidates' scores do not know.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Upstream {
    /// The backend's own logit that the column is annotated (`column.annotate`), finite.
    pub annotate: f64,
    /// The backend's own score for the ontology searched (`column.ontology`): how much the
    /// column's words, values and unit say for it. Finite.
    pub ontology: f64,
}

impl Upstream {
    /// From the annotate question's logit and the ontology question's score: a backend sure
    /// past any score the head was fitted on (±∞) reads as very sure, and one that gives no
    /// number as undecided, so that the head's p stays a number.
    pub fn of(annotate: f64, ontology: f64) -> Upstream {
        let bounded = |v: f64| {
            if v.is_nan() {
                0.0
            } else {
                v.clamp(-SCORE_BOUND, SCORE_BOUND)
            }
        };
        Upstream {
            annotate: bounded(annotate),
            ontology: bounded(ontology),
        }
    }
}

/// How far a question's score is read: far past any the embedded backend gives.
const SCORE_BOUND: f64 = 50.0;

/// What the column's description says beside its winner (inputs of the head).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Said {
    /// The description's words that are not words of the winner's label or synonyms
    /// (function words and numbers aside): the more it says that the term does not, the
    /// likelier the term is a part of what the column is, not all of it.
    pub unsaid: f64,
    /// `is_a` steps from the winner up its first parents to its ontology's top: a term
    /// high up (`rate`, `mass`, `cation`) names many columns' words without being their term.
    pub above: f64,
}

/// Words that say nothing of what a column is.
const FUNCTION_WORDS: [&str; 21] = [
    "a", "an", "the", "of", "in", "on", "at", "to", "by", "for", "from", "with", "as", "per",
    "and", "or", "is", "are", "was", "be", "its",
];

impl Said {
    /// What `description` says beside the winner `curie`, read from the index.
    pub fn of(
        description: &str,
        curie: &str,
        terms: &crate::graph::Search<'_>,
    ) -> Result<Said, mesh_ontology::index::IndexError> {
        let mut named: std::collections::BTreeSet<String> = Default::default();
        if let Some(about) = terms.about(curie)? {
            for text in std::iter::once(&about.label).chain(&about.synonyms) {
                named.extend(crate::backend::words(text));
            }
        }
        let unsaid = crate::backend::words(description)
            .into_iter()
            .filter(|w| !FUNCTION_WORDS.contains(&w.as_str()))
            .filter(|w| !w.chars().all(|c| c.is_ascii_digit()))
            .filter(|w| !named.contains(w))
            .count();
        Ok(Said {
            unsaid: unsaid as f64,
            above: crate::evidence::depth(curie, terms)? as f64,
        })
    }
}

/// The share of kept proposals that should be right: an abstention costs a curator one
/// column to annotate by hand, a wrong term one to find and undo.
pub const KEEP_PRECISION: f64 = 0.9;

/// The thresholds tried: hundredths from an even chance to 0.95.
fn thresholds() -> impl Iterator<Item = f64> {
    (50..=95).map(|h| f64::from(h) / 100.0)
}

/// The lowest threshold at which the proposals kept among rows `of` are right for
/// [`KEEP_PRECISION`] of them, else the one at which they are most often right: `p` the
/// winners' held-out p, `proposed` whether the graph proposed each winner, `right` whether it
/// is right, `keeps(p, at)` the keep question asked with the threshold `at`.
pub fn choose_keep_at(
    p: &[f64],
    proposed: &[bool],
    right: &[bool],
    of: &[usize],
    keeps: &dyn Fn(f64, f64) -> bool,
) -> f64 {
    let precision = |at: f64| {
        let kept: Vec<usize> = of
            .iter()
            .copied()
            .filter(|i| proposed[*i] && keeps(p[*i], at))
            .collect();
        let hits = kept.iter().filter(|i| right[**i]).count();
        (!kept.is_empty()).then(|| hits as f64 / kept.len() as f64)
    };
    let mut best = (0.5, f64::NEG_INFINITY);
    for at in thresholds() {
        let Some(share) = precision(at) else { break };
        if share >= KEEP_PRECISION {
            return at;
        }
        if share > best.1 {
            best = (at, share);
        }
    }
    best.0
}

/// Fits the head on rows `of` of `x` (winner features) and `right` (1 or 0).
pub fn fit(x: &[Vec<f64>], right: &[f64], of: &[usize], ridge: f64) -> Vec<f64> {
    let xs: Vec<Vec<f64>> = of.iter().map(|i| x[*i].clone()).collect();
    let ys: Vec<f64> = of.iter().map(|i| right[*i]).collect();
    let w = vec![1.0; xs.len()];
    logistic::fit(&xs, &ys, &w, ridge, None)
}

/// Every row's p from a head fitted on the rows of the other groups (cards), with `ridge`;
/// `None` when some group's complement lacks right or wrong rows.
pub fn held_out(x: &[Vec<f64>], right: &[f64], group: &[usize], ridge: f64) -> Option<Vec<f64>> {
    let mut p = vec![f64::NAN; x.len()];
    let groups: std::collections::BTreeSet<usize> = group.iter().copied().collect();
    for g in groups {
        let train: Vec<usize> = (0..x.len()).filter(|i| group[*i] != g).collect();
        let yes = train.iter().filter(|i| right[**i] > 0.5).count();
        if yes == 0 || yes == train.len() {
            return None;
        }
        let w = fit(x, right, &train, ridge);
        for i in (0..x.len()).filter(|i| group[*i] == g) {
            p[i] = predict(&w, &x[i]);
        }
    }
    Some(p)
}

/// The mean log loss of `p` against `y`.
pub fn log_loss(p: &[f64], y: &[f64]) -> f64 {
    let sum: f64 = p
        .iter()
        .zip(y)
        .map(|(p, y)| {
            let p = p.clamp(1e-12, 1.0 - 1e-12);
            -(y * p.ln() + (1.0 - y) * (1.0 - p).ln())
        })
        .sum();
    sum / p.len().max(1) as f64
}

/// The binned ECE a perfectly calibrated predictor gets on `p` (outcomes drawn from p
/// itself), over `draws` deterministic draws: mean and 95th percentile.
pub fn ece_floor(p: &[f64], draws: usize) -> (f64, f64) {
    let mut rng = logistic::Rng::new(0x9E37_79B9_7F4A_7C15);
    let mut eces: Vec<f64> = (0..draws)
        .map(|_| {
            let y: Vec<f64> = p
                .iter()
                .map(|p| f64::from(u8::from(rng.uniform() < *p)))
                .collect();
            super::metrics::metrics(p, &y).ece
        })
        .collect();
    eces.sort_by(f64::total_cmp);
    let mean = eces.iter().sum::<f64>() / draws.max(1) as f64;
    let p95 = eces
        .get((draws * 95 / 100).min(draws.saturating_sub(1)))
        .copied()
        .unwrap_or(0.0);
    (mean, p95)
}

/// SHA-256 over `files` (name, then bytes, each as given), hex.
pub fn digest(files: &[(String, Vec<u8>)]) -> String {
    let mut h = Sha256::new();
    for (name, bytes) in files {
        h.update((name.len() as u64).to_le_bytes());
        h.update(name.as_bytes());
        h.update((bytes.len() as u64).to_le_bytes());
        h.update(bytes);
    }
    h.finalize().iter().map(|b| format!("{b:02x}")).collect()
}

/// The files of a gold set (`*.md` and `*.gold`), in name order, for [`digest`].
pub fn gold_files(dir: &std::path::Path) -> std::io::Result<Vec<(String, Vec<u8>)>> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        let kept = path.extension().is_some_and(|e| e == "md" || e == "gold");
        let name = path.file_name().map(|n| n.to_string_lossy().into_owned());
        if let (true, Some(name)) = (kept, name) {
            files.push((name, std::fs::read(&path)?));
        }
    }
    files.sort();
    Ok(files)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::Backend;
    use std::path::Path;

    /// The embedded backend's winner inputs for a column and candidate both named `x`.
    fn embedded_inputs() -> Vec<f64> {
        let fits = crate::backend::Embedded
            .features(
                &crate::questions::TERM_FITS,
                &serde_json::json!({"column": {"name": "x"}, "candidate": {"label": "x"}}),
            )
            .unwrap();
        crate::backend::Embedded.winner_inputs(&fits)
    }

    #[test]
    fn the_shipped_head_parses_and_reads_the_embedded_backend() {
        let m = default_model().expect("winner.json parses");
        assert_eq!(m.backend, "embedded");
        let inputs = embedded_inputs();
        let p = m
            .p(&features(
                &inputs,
                0.1,
                "pato",
                true,
                Said::default(),
                Upstream::default(),
            ))
            .expect("as many features as the backend gives the head");
        assert!((0.0..=1.0).contains(&p));
        assert!(m.fitted_on.held_out.ece < 1.0, "{:?}", m.fitted_on);
    }

    /// A changed gold set is a calibration to fit again: `bin/fit-calibration` does it. The
    /// head is fitted on the development part only, and its figures on the sealed part are
    /// of the sealed part as it is.
    #[test]
    fn the_shipped_head_was_fitted_on_the_gold_set_as_it_is() {
        let m = default_model().unwrap();
        let real = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/gold/real");
        let dev = digest(&gold_files(&real.join("dev")).unwrap());
        assert_eq!(
            m.fitted_on.gold_sha256, dev,
            "tests/gold/real/dev changed since winner.json was fitted: run bin/fit-calibration"
        );
        assert_eq!(m.fitted_on.cards_dir, "tests/gold/real/dev");
        let sealed = m
            .fitted_on
            .sealed
            .as_ref()
            .expect("winner.json says how the head did on the sealed part");
        assert_eq!(
            sealed.gold_sha256,
            digest(&gold_files(&real.join("sealed")).unwrap()),
            "tests/gold/real/sealed changed since winner.json was measured: run bin/fit-calibration"
        );
        assert!(sealed.cards > 0 && sealed.winners > 0, "{sealed:?}");
    }

    #[test]
    fn a_question_sure_past_any_score_still_gives_the_head_a_number() {
        let u = Upstream::of(f64::INFINITY, f64::NAN);
        assert_eq!(u, Upstream::of(SCORE_BOUND, 0.0));
        let inputs = embedded_inputs();
        let p = default_model()
            .unwrap()
            .p(&features(&inputs, 0.1, "pato", true, Said::default(), u))
            .expect("as many features as the head reads");
        assert!(p.is_finite(), "{p}");
    }

    #[test]
    fn the_keep_threshold_is_the_lowest_that_keeps_proposals_right() {
        // Ten proposals: the right ones at p 0.9, 0.8, 0.7; a wrong one at 0.6; the rest
        // right at 0.55 but for two wrong there; one winner never proposed.
        let p = [0.9, 0.8, 0.7, 0.6, 0.55, 0.55, 0.55, 0.55, 0.55, 0.95];
        let right = [
            true, true, true, false, true, true, true, false, false, false,
        ];
        let proposed = [true, true, true, true, true, true, true, true, true, false];
        let all: Vec<usize> = (0..p.len()).collect();
        let at_least = |p: f64, at: f64| p >= at;
        // At 0.55: 6 right of 9; at 0.56 to 0.60: 3 of 4; from 0.61: 3 of 3.
        assert_eq!(choose_keep_at(&p, &proposed, &right, &all, &at_least), 0.61);
        // Never reached: the threshold kept most often right.
        let wrong = [false; 10];
        assert_eq!(choose_keep_at(&p, &proposed, &wrong, &all, &at_least), 0.5);
    }

    #[test]
    fn a_head_learns_which_winners_are_right() {
        // Right winners have a wide margin, wrong ones a narrow one.
        let x: Vec<Vec<f64>> = (0..200)
            .map(|i| {
                features(
                    &[0.5],
                    if i % 2 == 0 { 0.6 } else { 0.05 },
                    "pato",
                    false,
                    Said::default(),
                    Upstream::default(),
                )
            })
            .collect();
        let y: Vec<f64> = (0..200).map(|i| f64::from(u8::from(i % 2 == 0))).collect();
        let all: Vec<usize> = (0..200).collect();
        let w = fit(&x, &y, &all, 0.01);
        let m = WinnerModel {
            backend: "embedded".into(),
            weights: w,
            keep_at: None,
            fitted_on: default_model().unwrap().fitted_on.clone(),
        };
        assert!(m.p(&x[0]).unwrap() > 0.9);
        assert!(m.p(&x[1]).unwrap() < 0.1);
        assert_eq!(m.p(&[1.0]), None, "other features are not read");
    }

    #[test]
    fn a_calibrated_p_has_a_floor_above_zero_and_more_winners_lower_it() {
        let p: Vec<f64> = (0..250).map(|i| 0.5 + 0.5 * (i as f64 / 250.0)).collect();
        let (few, _) = ece_floor(&p, 200);
        let many: Vec<f64> = p.iter().cycle().take(2500).copied().collect();
        let (lots, _) = ece_floor(&many, 200);
        assert!(few > 0.02 && few < 0.1, "{few}");
        assert!(lots < few / 2.0, "{lots} vs {few}");
    }

    #[test]
    fn the_digest_sees_names_and_bytes() {
        let a = digest(&[("a.md".into(), b"x".to_vec())]);
        assert_ne!(a, digest(&[("b.md".into(), b"x".to_vec())]));
        assert_ne!(a, digest(&[("a.md".into(), b"y".to_vec())]));
        assert_eq!(a.len(), 64);
    }
}
