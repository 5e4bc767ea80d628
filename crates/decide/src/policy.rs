//! When a decision is proposed: thresholds and margins per question from `policy.json`
//! (committed defaults), and the outcome every decision gets.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::backend::Answer;
use super::questions::{self, Question};

/// The committed defaults.
pub const DEFAULTS: &str = include_str!("policy.json");

/// A decision's outcome as the policy sees it (picks later add `accepted` and `human`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// Confident enough to put before a person.
    Proposed,
    /// Not confident enough either way.
    Abstain,
    /// Decided by a rule, not by probabilities.
    Rule,
    /// Confidently "no".
    Rejected,
    /// A person decided (a pick); authoritative, never the policy's answer.
    Human,
}

impl Outcome {
    pub fn name(self) -> &'static str {
        match self {
            Outcome::Proposed => "proposed",
            Outcome::Abstain => "abstain",
            Outcome::Rule => "rule",
            Outcome::Rejected => "rejected",
            Outcome::Human => "human",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Threshold {
    pub propose: f64,
    pub margin: f64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Policy {
    /// Accepting proposals without a person stays off unless configured.
    pub auto_accept: bool,
    /// By question kind.
    pub questions: BTreeMap<String, Threshold>,
}

impl Policy {
    /// The committed defaults; every question has a threshold.
    pub fn defaults() -> Policy {
        serde_json::from_str(DEFAULTS).expect("policy.json is valid")
    }

    pub fn threshold(&self, question: &Question) -> Threshold {
        self.questions
            .get(question.kind)
            .copied()
            .unwrap_or(Threshold {
                propose: 1.0,
                margin: 1.0,
            })
    }

    /// The outcome of an answer: a confident yes (or choice) is proposed, a confident "no"
    /// rejected, anything else abstains.
    pub fn outcome(&self, question: &Question, answer: &Answer) -> Outcome {
        let t = self.threshold(question);
        if answer.p < t.propose || answer.margin < t.margin {
            return Outcome::Abstain;
        }
        if answer.answer == "no" {
            Outcome::Rejected
        } else {
            Outcome::Proposed
        }
    }
}

/// Every question has a threshold in the defaults (checked by a test).
pub fn covers_every_question(policy: &Policy) -> Vec<&'static str> {
    questions::ALL
        .iter()
        .filter(|q| !policy.questions.contains_key(q.kind))
        .map(|q| q.kind)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::answer_from_scores;

    #[test]
    fn defaults_cover_every_question_and_do_not_auto_accept() {
        let p = Policy::defaults();
        assert!(
            covers_every_question(&p).is_empty(),
            "{:?}",
            covers_every_question(&p)
        );
        assert!(!p.auto_accept);
    }

    #[test]
    fn outcomes() {
        let p = Policy::defaults();
        let yes_no = ["yes".to_string(), "no".to_string()];
        let sure_yes = answer_from_scores(&yes_no, &[3.0, 0.0], 1.0);
        let sure_no = answer_from_scores(&yes_no, &[0.0, 3.0], 1.0);
        let unsure = answer_from_scores(&yes_no, &[1.0, 0.9], 1.0);
        assert_eq!(
            p.outcome(&questions::TERM_FITS, &sure_yes),
            Outcome::Proposed
        );
        assert_eq!(
            p.outcome(&questions::TERM_FITS, &sure_no),
            Outcome::Rejected
        );
        assert_eq!(p.outcome(&questions::TERM_FITS, &unsure), Outcome::Abstain);
    }
}
