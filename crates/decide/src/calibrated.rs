//! A backend's answers through a promoted bundle: a question the bundle fitted is answered at
//! its level (L1 Platt-scaled logit, or the L2 head over the backend's features); any other
//! question stays L0.

use serde_json::Value;

use super::backend::{Answer, Backend, BackendError, Level, Scored, logit};
use super::learn::bundle::Bundle;
use super::learn::winner::WinnerModel;
use super::questions::Question;

pub struct Calibrated<'a> {
    pub inner: &'a dyn Backend,
    pub bundle: Option<&'a Bundle>,
}

impl Backend for Calibrated<'_> {
    fn name(&self) -> String {
        self.inner.name()
    }

    fn ask(
        &self,
        question: &Question,
        state: &Value,
        options: &[String],
    ) -> Result<Answer, BackendError> {
        let raw = self.inner.ask(question, state, options)?;
        let Some(bundle) = self.bundle else {
            return Ok(raw);
        };
        let key = question.key();
        let (Some(fitted), Some(artifact)) = (
            bundle.manifest.questions.get(&key),
            bundle.artifacts.get(&key),
        ) else {
            return Ok(raw);
        };
        if !options.iter().all(|o| o == "yes" || o == "no") {
            return Ok(raw);
        }
        let (p_yes, level, calibration) = match fitted.level {
            Level::L2 => {
                let features = self.inner.features(question, state)?;
                match artifact.p_l2(&features) {
                    Some(p) => (
                        p,
                        Level::L2,
                        format!("logistic head, bundle {}", bundle.version()),
                    ),
                    None => return Ok(raw),
                }
            }
            Level::L1 => (
                artifact.p_l1(logit(&raw)),
                Level::L1,
                format!(
                    "platt(a={:.3}, b={:.3}), bundle {}",
                    artifact.l1[0],
                    artifact.l1[1],
                    bundle.version()
                ),
            ),
            // A bundle fits L1 or L2; one that says L0 leaves the backend's answer as it is.
            Level::L0 => return Ok(raw),
        };
        let scored: Vec<Scored> = raw
            .options
            .iter()
            .map(|o| Scored {
                option: o.option.clone(),
                score: o.score,
                p: if o.option == "yes" {
                    p_yes
                } else {
                    1.0 - p_yes
                },
            })
            .collect();
        let (answer, p) = if p_yes >= 0.5 {
            ("yes", p_yes)
        } else {
            ("no", 1.0 - p_yes)
        };
        Ok(Answer {
            options: scored,
            answer: answer.into(),
            p,
            margin: (2.0 * p_yes - 1.0).abs(),
            level,
            calibration,
        })
    }

    fn features(&self, question: &Question, state: &Value) -> Result<Vec<f64>, BackendError> {
        self.inner.features(question, state)
    }

    // A bundle fits questions, not the winner head: the backend's own serves (it reads the
    // backend's scores, not the bundle's).
    fn winner_head(&self) -> Option<&WinnerModel> {
        self.inner.winner_head()
    }

    fn winner_inputs(&self, fits: &[f64]) -> Vec<f64> {
        self.inner.winner_inputs(fits)
    }
}
