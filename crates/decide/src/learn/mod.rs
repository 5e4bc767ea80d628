//! Learning, offline (a serving module never fits): from the sidecar's labels, per question
//! key, L1 (Platt scaling of the backend's logit) and L2 (a logistic head over the backend's
//! features), validated leaving one card out, written as a new bundle version.

pub mod bundle;
pub mod eval;
pub mod logistic;
pub mod metrics;
pub mod plot;
pub mod winner;

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use serde::Serialize;
use serde_json::Value;

use super::backend::{Backend, BackendError, Level};
use super::questions::{self, Question};
use super::store::sidecar::Sidecar;
use bundle::{Artifact, BundleError, Fitted, Manifest};
use mesh_core::subjects::catalog::now_ms;
use metrics::{Metrics, metrics};

/// Penalties: Platt's two parameters barely need one; the head a little more.
const RIDGE_L1: f64 = 1e-4;
const RIDGE_L2: f64 = 1e-2;

#[derive(Debug, thiserror::Error)]
pub enum LearnError {
    #[error("decide sidecar: {0}")]
    Sidecar(#[from] crate::store::DbError),
    #[error(transparent)]
    Backend(#[from] BackendError),
    #[error(transparent)]
    Bundle(#[from] BundleError),
    #[error("nothing was fitted: {0}")]
    NothingFitted(String),
}

/// Why one question was not fitted: the fit goes on without it, and the bundle says why.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum Skip {
    #[error("no labels")]
    NoLabels,
    #[error("only yes/no questions are fitted")]
    NotYesNo,
    #[error(
        "too few labels: {labels} from {cards} cards ({yes} yes, {no} no); it needs {min_labels} from {min_cards} cards, both yes and no"
    )]
    TooFewLabels {
        labels: usize,
        cards: usize,
        yes: usize,
        no: usize,
        min_labels: usize,
        min_cards: usize,
    },
    #[error("the backend gave features of different lengths")]
    UnevenFeatures,
    #[error("labelled under another questions lock")]
    OtherLock,
}

/// What fitting one question came to.
#[derive(Debug, Clone)]
pub enum Fit {
    Fitted(QuestionFit),
    Skipped(Skip),
}

/// How many labels a question needs before it is fitted.
#[derive(Debug, Clone, Copy)]
pub struct FitOptions {
    pub min_labels: usize,
    pub min_cards: usize,
}

impl Default for FitOptions {
    fn default() -> Self {
        FitOptions {
            min_labels: 20,
            min_cards: 2,
        }
    }
}

/// One labelled example.
#[derive(Debug, Clone)]
pub struct Example {
    pub state: Value,
    pub positive: bool,
    pub weight: f64,
    pub card: String,
}

/// What `fit` did for one question.
#[derive(Debug, Clone, Serialize)]
pub struct QuestionFit {
    pub key: String,
    /// The level its answers get: L1 or L2.
    pub level: Level,
    pub labels: usize,
    pub cards: usize,
    /// Leave-one-card-out metrics per level (L0, L1, L2).
    pub metrics: BTreeMap<String, Metrics>,
    pub artifact: Artifact,
}

#[derive(Debug, Clone, Serialize)]
pub struct FitReport {
    pub version: String,
    pub fitted: Vec<QuestionFit>,
    pub skipped: BTreeMap<String, String>,
}

/// The labels in the sidecar, by question key.
pub fn labels(sidecar: &Sidecar) -> Result<BTreeMap<String, Vec<Example>>, LearnError> {
    let mut by_key: BTreeMap<String, Vec<Example>> = BTreeMap::new();
    for l in crate::store::answers::labels(&sidecar.db)? {
        by_key.entry(l.question_key).or_default().push(Example {
            state: serde_json::from_str(&l.state_json).unwrap_or(Value::Null),
            positive: l.positive,
            weight: l.weight,
            card: l.card,
        });
    }
    Ok(by_key)
}

/// L1 (Platt scaling of the first feature, the logit) and L2 (a head over all features)
/// fitted on the examples `rows` of `features`, outcomes `y` (0 or 1) and weights `w`.
pub fn fit_artifact(features: &[Vec<f64>], y: &[f64], w: &[f64], rows: &[usize]) -> Artifact {
    let pick = |v: &[f64]| rows.iter().map(|i| v[*i]).collect::<Vec<_>>();
    let zs: Vec<Vec<f64>> = rows.iter().map(|i| vec![features[*i][0]]).collect();
    let fs: Vec<Vec<f64>> = rows.iter().map(|i| features[*i].clone()).collect();
    let l1 = logistic::fit(&zs, &pick(y), &pick(w), RIDGE_L1, Some(vec![1.0, 0.0]));
    let l2 = logistic::fit(&fs, &pick(y), &pick(w), RIDGE_L2, None);
    Artifact { l1, l2 }
}

/// How far a fit has got: for a bar on a terminal, or a line in a log (its `Display`).
#[derive(Debug, Clone, Copy)]
pub enum Step<'a> {
    /// A question's fit begins, on this many labels.
    Question { key: &'a str, labels: usize },
    /// The backend's features read for `done` of the question's `of` labels.
    Features {
        key: &'a str,
        done: usize,
        of: usize,
    },
    /// `done` of the question's `of` cards held out and predicted.
    HeldOut {
        key: &'a str,
        done: usize,
        of: usize,
    },
    /// The question is not fitted, and why.
    Skipped { key: &'a str, why: &'a Skip },
}

impl std::fmt::Display for Step<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Step::Question { key, labels } => write!(f, "{key}: {labels} labels"),
            Step::Features { key, done, of } => {
                write!(f, "{key}: features of {done} / {of} labels")
            }
            Step::HeldOut { key, done, of } => write!(f, "{key}: held out card {done} of {of}"),
            Step::Skipped { key, why } => write!(f, "{key}: {why}"),
        }
    }
}

/// Fits one question on its examples: features from the backend, leave-one-card-out
/// predictions at each level, then the artifact from all of them; or why it was not fitted.
pub fn fit_question(
    question: &Question,
    examples: &[Example],
    backend: &dyn Backend,
    options: FitOptions,
    progress: &mut dyn FnMut(Step<'_>),
) -> Result<Fit, LearnError> {
    let key = question.key();
    let cards: BTreeSet<&str> = examples.iter().map(|e| e.card.as_str()).collect();
    let positives = examples.iter().filter(|e| e.positive).count();
    if examples.len() < options.min_labels
        || cards.len() < options.min_cards
        || positives == 0
        || positives == examples.len()
    {
        return Ok(Fit::Skipped(Skip::TooFewLabels {
            labels: examples.len(),
            cards: cards.len(),
            yes: positives,
            no: examples.len() - positives,
            min_labels: options.min_labels,
            min_cards: options.min_cards,
        }));
    }
    let mut features = Vec::with_capacity(examples.len());
    for (i, e) in examples.iter().enumerate() {
        features.push(backend.features(question, &e.state)?);
        progress(Step::Features {
            key: &key,
            done: i + 1,
            of: examples.len(),
        });
    }
    if features.iter().any(|f| f.len() != features[0].len()) {
        return Ok(Fit::Skipped(Skip::UnevenFeatures));
    }
    let y: Vec<f64> = examples
        .iter()
        .map(|e| f64::from(u8::from(e.positive)))
        .collect();
    let w: Vec<f64> = examples.iter().map(|e| e.weight).collect();
    let fit_on = |rows: &[usize]| fit_artifact(&features, &y, &w, rows);
    // Leave one card out: every prediction is made by parameters that never saw its card.
    let mut predicted: BTreeMap<&str, Vec<f64>> = BTreeMap::new();
    let mut truth = Vec::new();
    for (n, card) in cards.iter().enumerate() {
        let train: Vec<usize> = (0..examples.len())
            .filter(|i| examples[*i].card != *card)
            .collect();
        let held: Vec<usize> = (0..examples.len())
            .filter(|i| examples[*i].card == *card)
            .collect();
        let a = fit_on(&train);
        for i in held {
            let f = &features[i];
            predicted
                .entry(Level::L0.name())
                .or_default()
                .push(logistic::sigmoid(f[0]));
            predicted
                .entry(Level::L1.name())
                .or_default()
                .push(a.p_l1(f[0]));
            predicted
                .entry(Level::L2.name())
                .or_default()
                .push(a.p_l2(f).unwrap_or(f64::NAN));
            truth.push(y[i]);
        }
        progress(Step::HeldOut {
            key: &key,
            done: n + 1,
            of: cards.len(),
        });
    }
    let metrics: BTreeMap<String, Metrics> = predicted
        .iter()
        .map(|(level, p)| (level.to_string(), metrics(p, &truth)))
        .collect();
    // The head only where it predicts better (lower Brier score) than calibration alone.
    let level = if metrics[Level::L2.name()].brier < metrics[Level::L1.name()].brier {
        Level::L2
    } else {
        Level::L1
    };
    let all: Vec<usize> = (0..examples.len()).collect();
    Ok(Fit::Fitted(QuestionFit {
        key,
        level,
        labels: examples.len(),
        cards: cards.len(),
        metrics,
        artifact: fit_on(&all),
    }))
}

/// Fits every question with enough labels and writes a new bundle version in `bundles`.
pub fn fit(
    sidecar: &Sidecar,
    backend: &dyn Backend,
    bundles: &Path,
    options: FitOptions,
    progress: &mut dyn FnMut(Step<'_>),
) -> Result<FitReport, LearnError> {
    let by_key = labels(sidecar)?;
    let mut fitted = Vec::new();
    let mut skipped = BTreeMap::new();
    for question in questions::ALL {
        let key = question.key();
        let examples = by_key.get(&key).map(Vec::as_slice).unwrap_or_default();
        if examples.is_empty() {
            skipped.insert(key, Skip::NoLabels.to_string());
            continue;
        }
        if question.options != ["yes", "no"] {
            skipped.insert(key, Skip::NotYesNo.to_string());
            continue;
        }
        progress(Step::Question {
            key: &key,
            labels: examples.len(),
        });
        match fit_question(&question, examples, backend, options, progress)? {
            Fit::Fitted(f) => fitted.push(f),
            Fit::Skipped(why) => {
                progress(Step::Skipped {
                    key: &key,
                    why: &why,
                });
                skipped.insert(key, why.to_string());
            }
        }
    }
    for key in by_key.keys() {
        if !questions::ALL.iter().any(|q| q.key() == *key) {
            skipped.insert(key.clone(), Skip::OtherLock.to_string());
        }
    }
    if fitted.is_empty() {
        let why: Vec<String> = skipped.iter().map(|(k, w)| format!("{k}: {w}")).collect();
        return Err(LearnError::NothingFitted(if why.is_empty() {
            "no labels in the sidecar".into()
        } else {
            why.join("; ")
        }));
    }
    let manifest = Manifest {
        version: String::new(),
        created_ms: now_ms(),
        backend: backend.name(),
        questions_lock: questions::lock_id(),
        questions: fitted
            .iter()
            .map(|f| {
                (
                    f.key.clone(),
                    Fitted {
                        level: f.level,
                        labels: f.labels,
                        cards: f.cards,
                    },
                )
            })
            .collect(),
        skipped: skipped.clone(),
    };
    let artifacts = fitted
        .iter()
        .map(|f| (f.key.clone(), f.artifact.clone()))
        .collect();
    let metrics = fitted
        .iter()
        .map(|f| (f.key.clone(), f.metrics.clone()))
        .collect();
    let version = bundle::write(bundles, manifest, &artifacts, &metrics)?;
    Ok(FitReport {
        version,
        fitted,
        skipped,
    })
}

/// Whether `new` is worse than `old`, judged on the same labels — those the sidecar holds
/// now — question by question, each bundle's parameters at its own level as they stand
/// (either may have seen some of these labels when it was fitted; the figures each stored
/// at its fit were measured on its own labels, and are not compared). Accuracy down, ECE
/// up, or a question `old` answers that `new` does not: each a reason. A bundle this
/// backend and questions lock would refuse anyway is no bar.
pub fn compare_on_labels(
    sidecar: &Sidecar,
    backend: &dyn Backend,
    new: &bundle::Bundle,
    old: &bundle::Bundle,
) -> Result<Vec<String>, LearnError> {
    if old.check(&backend.name(), &questions::lock_id()).is_err() {
        return Ok(Vec::new());
    }
    let by_key = labels(sidecar)?;
    let mut why = Vec::new();
    for (key, old_fit) in &old.manifest.questions {
        let Some(new_fit) = new.manifest.questions.get(key) else {
            why.push(format!("{key} is no longer fitted"));
            continue;
        };
        let (Some(question), Some(old_artifact)) = (
            questions::ALL.iter().find(|q| q.key() == *key),
            old.artifacts.get(key),
        ) else {
            continue;
        };
        let examples = by_key.get(key).map(Vec::as_slice).unwrap_or_default();
        let cards: BTreeSet<&str> = examples.iter().map(|e| e.card.as_str()).collect();
        if cards.len() < 2 {
            why.push(format!(
                "{key}: {} labels of {} card(s) now, too few to judge either bundle on",
                examples.len(),
                cards.len()
            ));
            continue;
        }
        let Some(new_artifact) = new.artifacts.get(key) else {
            why.push(format!("{key} is no longer fitted"));
            continue;
        };
        let at = |level: Level, a: &Artifact, f: &[f64]| match level {
            Level::L2 => a.p_l2(f).unwrap_or_else(|| a.p_l1(f[0])),
            _ => a.p_l1(f[0]),
        };
        let (mut p_new, mut p_old, mut truth) = (Vec::new(), Vec::new(), Vec::new());
        for e in examples {
            let f = backend.features(question, &e.state)?;
            p_new.push(at(new_fit.level, new_artifact, &f));
            p_old.push(at(old_fit.level, old_artifact, &f));
            truth.push(f64::from(u8::from(e.positive)));
        }
        let (n, o) = (metrics(&p_new, &truth), metrics(&p_old, &truth));
        let on = format!(
            "on the same {} labels of {} cards",
            truth.len(),
            cards.len()
        );
        if n.accuracy + 1e-9 < o.accuracy {
            why.push(format!(
                "{key}: accuracy drops {:.3} → {:.3} {on}",
                o.accuracy, n.accuracy
            ));
        }
        if n.ece > o.ece + 1e-9 {
            why.push(format!("{key}: ECE rises {:.3} → {:.3} {on}", o.ece, n.ece));
        }
    }
    Ok(why)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::Embedded;

    #[test]
    fn too_few_labels_is_a_skip_that_says_what_it_needs() {
        let examples: Vec<Example> = (0..3)
            .map(|i| Example {
                state: serde_json::json!({}),
                positive: i == 0,
                weight: 1.0,
                card: "c".into(),
            })
            .collect();
        let options = FitOptions::default();
        let fit = fit_question(
            &questions::TERM_FITS,
            &examples,
            &Embedded,
            options,
            &mut |_| {},
        );
        let Ok(Fit::Skipped(why)) = fit else {
            panic!("fitted on three labels: {fit:?}");
        };
        assert_eq!(
            why,
            Skip::TooFewLabels {
                labels: 3,
                cards: 1,
                yes: 1,
                no: 2,
                min_labels: 20,
                min_cards: 2
            }
        );
        assert_eq!(
            why.to_string(),
            "too few labels: 3 from 1 cards (1 yes, 2 no); it needs 20 from 2 cards, both yes and no"
        );
    }

    #[test]
    fn a_manifest_names_the_level_as_before() {
        let fitted = Fitted {
            level: Level::L2,
            labels: 40,
            cards: 3,
        };
        let text = serde_json::to_value(&fitted).unwrap();
        assert_eq!(text["level"], "L2");
        assert_eq!(serde_json::from_value::<Fitted>(text).unwrap(), fitted);
        let unknown = serde_json::json!({"level": "L7", "labels": 1, "cards": 1});
        assert!(serde_json::from_value::<Fitted>(unknown).is_err());
    }
}
