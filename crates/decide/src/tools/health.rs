//! `decide_health`: what decide runs with and whether each question's p is calibrated.

use std::convert::Infallible;
use std::sync::Arc;

use serde_json::{Value, json};

use crate::questions;
use crate::state::{Decide, locked};
use mesh_core::runtime::{Call, NoArgs, Tool, WithText};

/// `decide_health`, declared.
pub(crate) fn tool(decide: Arc<Decide>) -> Tool {
    Tool::typed_blocking(
        "health",
        "Reports the questions lock, the sidecar, the backend, the promoted bundle and the ontologies indexed",
        decide,
        health,
    )
    .output_schema(json!({"type": "object"}))
    .annotations(json!({"readOnlyHint": true, "idempotentHint": true, "openWorldHint": false}))
}

fn health(decide: &Decide, _args: NoArgs, _call: Call) -> Result<WithText<Value>, Infallible> {
    let in_use = decide.bundle();
    let refused = locked(&decide.loaded).refused.clone();
    let sidecar = locked(&decide.sidecar);
    let runs = crate::store::runs::count(&sidecar.db).unwrap_or(-1);
    let ontologies: Vec<Value> = locked(&decide.index)
        .ontologies()
        .unwrap_or_default()
        .into_iter()
        .map(|(name, version, terms)| json!({"ontology": name, "version": version, "terms": terms}))
        .collect();
    let lock_ok = questions::LOCK == questions::lock_text();
    let bundle = in_use.as_ref().map(|b| {
        json!({
            "version": b.version(),
            "backend": b.manifest.backend,
            "questions": b.manifest.questions,
        })
    });
    // The sentence-embedding model: whether the ranking uses it, where it is, and why not
    // (off unless asked for: the figures in docs/benchmarks.md do not defend it on two cores).
    let model = match &decide.embedder {
        Ok(e) => Ok(e.dir().to_owned()),
        Err(_) => crate::embed::model_dir(),
    };
    let embedder = json!({
        "loaded": decide.embedder.is_ok(),
        "model": model.as_ref().ok().map(|d| d.display().to_string()),
        "why": match (&decide.embedder, &model) {
            (Ok(_), _) => "loaded: the ranking weighs each column's similarity to its candidates".to_owned(),
            (Err(why), Ok(_)) => format!("installed; {why}"),
            (Err(why), Err(e)) => format!("{why}; {e}"),
        },
    });
    // Question by question: calibrated (and on what), or not, and why not.
    let calibration: serde_json::Map<String, Value> = questions::ALL
        .iter()
        .map(|q| {
            let key = q.key();
            let fitted = in_use
                .as_ref()
                .and_then(|b| b.manifest.questions.get(&key).map(|f| (b, f)));
            let said = match fitted {
                _ if q.kind == questions::VALUE_KIND.kind => json!({
                    "calibration": "rule",
                    "why": "the embedded backend cannot answer it: the convention (the column's name) is recorded as a rule",
                }),
                Some((b, f)) => json!({
                    "calibration": f.level.name(),
                    "bundle": b.version(),
                    "labels": f.labels,
                    "cards": f.cards,
                    "held_out_ece": b.chosen(&key).map(|m| m.ece),
                }),
                None if q.options != ["yes", "no"] => json!({
                    "calibration": "none",
                    "why": "not a yes/no question: its probabilities are the backend's softmax over the options, never fitted on labels",
                }),
                None => json!({
                    "calibration": "none",
                    "why": match &in_use {
                        Some(b) => format!("bundle {} fits nothing for it (no labels, or too few)", b.version()),
                        None => "no bundle promoted: the backend's scores, uncalibrated".to_owned(),
                    },
                }),
            };
            (key, said)
        })
        .collect();
    // The winner's p: the head that says how likely a column's best candidate is right.
    let mut calibration = calibration;
    calibration.insert(
        "winner".into(),
        match decide.backend.winner_head() {
            Some(head) => json!({
                "calibration": "winner head",
                "origin": "shipped with decide (crates/decide/src/winner.json)",
                "cards": head.fitted_on.cards,
                "winners": head.fitted_on.winners,
                "held_out_ece": head.fitted_on.held_out.ece,
                "ece_of_a_calibrated_p": head.fitted_on.ece_floor.0,
                "gold_sha256": head.fitted_on.gold_sha256,
                "command": head.fitted_on.command,
                // Where keep is even: chosen on the development part (winner::choose_keep_at).
                "keep_at": head.keep_at,
                // The cards it was not fitted on: the figure a user's cards can expect.
                "sealed": head.fitted_on.sealed.as_ref().map(|s| json!({
                    "cards": s.cards,
                    "winners": s.winners,
                    "ece": s.metrics.ece,
                    "ece_of_a_calibrated_p": s.ece_floor.0,
                    "gold_sha256": s.gold_sha256,
                })),
            }),
            None => json!({
                "calibration": "none",
                "why": format!("backend {} has no winner head: a winner's p is its p(fits)", decide.backend.name()),
            }),
        },
    );
    let calibrated = calibration
        .values()
        .filter(|c| matches!(c["calibration"].as_str(), Some("L1" | "L2")))
        .count();
    let v = json!({
        "calibration": calibration,
        "embedder": embedder,
        "questions_lock": {
            "matches": lock_ok,
            "id": questions::lock_id(),
            "keys": questions::ALL.iter().map(|q| q.key()).collect::<Vec<_>>(),
        },
        "sidecar": {"path": sidecar.path, "version": sidecar.version().ok(), "runs": runs},
        "backend": decide.backend.name(),
        "bundle": bundle,
        "bundle_refused": refused.as_ref().map(|(v, why)| json!({"version": v, "why": why})),
        "ontologies": ontologies,
    });
    let bundle_text = match (&in_use, &refused) {
        (Some(b), _) => format!("bundle {}", b.version()),
        (None, Some((v, _))) => format!("bundle {v} refused (see bundle_refused)"),
        (None, None) => "no bundle promoted".into(),
    };
    let text = format!(
        "questions lock {}; sidecar {} ({} runs); backend {}; {}; {} of {} questions calibrated, the winner's p {} (see calibration); {} ontologies indexed; embedding model {}",
        if lock_ok { "matches" } else { "DOES NOT MATCH" },
        sidecar.path,
        runs,
        decide.backend.name(),
        bundle_text,
        calibrated,
        questions::ALL.len(),
        if decide.backend.winner_head().is_some() {
            "by the shipped winner head"
        } else {
            "uncalibrated"
        },
        v["ontologies"].as_array().map(Vec::len).unwrap_or(0),
        match (&decide.embedder, &model) {
            (Ok(_), _) => "loaded, in the ranking",
            (Err(_), Ok(_)) => "not loaded (installed, unused)",
            (Err(_), Err(_)) => "not loaded (not installed)",
        }
    );
    Ok(WithText { text, output: v })
}

#[cfg(test)]
mod tests {
    use crate::tools::tests::accepts;
    use mesh_core::runtime::NoArgs;
    use serde_json::json;

    #[test]
    fn health_takes_nothing() {
        accepts::<NoArgs>(&[json!({})], &[json!({"verbose": true}), json!([])]);
    }
}
