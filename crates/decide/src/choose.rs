//! `decide_choose`, the chooser: answers `avu_apply_term`'s eight-candidate picker without a
//! person. It asks `term.fits.chooser` about each candidate over only what the picker carries
//! (ontology, value, candidate), with that question's own learned artifacts, and picks the
//! best when its p(fits) clears the propose threshold; otherwise it declines. Given the
//! picker itself (an answerer's arguments, `subjects/README.md`), it answers with the
//! `inputResponses` the picker takes, so `mesh call … --answer-with decide_choose` works.

use std::sync::Arc;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

use super::backend::Backend;
use super::calibrated::Calibrated;
use super::questions;
use super::state::Decide;
use mesh_avu::TERM_CHOICE;
use mesh_core::runtime::{Call, Tool, WithText};

// The arguments of decide_choose: a picker's ontology, value and candidates, or (as an
// answerer) the tool that asked, its arguments and its form. (Plain comments on the argument
// types: a doc comment would become the schema's description.)
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(extend("oneOf" = [
    {"required": ["ontology", "value", "candidates"]},
    {"required": ["tool", "arguments", "inputRequests"]}
]))]
pub(super) struct Choose {
    #[schemars(length(min = 1))]
    ontology: Option<String>,
    #[schemars(length(min = 1))]
    value: Option<String>,
    #[schemars(length(min = 1, max = 8))]
    candidates: Option<Vec<Candidate>>,
    /// as an answerer: the tool that asked
    tool: Option<String>,
    /// as an answerer: that tool's arguments
    arguments: Option<Map<String, Value>>,
    /// as an answerer: what it asked
    #[serde(rename = "inputRequests")]
    input_requests: Option<Map<String, Value>>,
}

// One term offered. It is also the candidate in the question's state, as it was given.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(inline)]
struct Candidate {
    #[schemars(length(min = 1))]
    curie: String,
    label: String,
}

pub(super) fn tool(decide: Arc<Decide>) -> Tool {
    Tool::typed_blocking(
        "choose",
        "Answers avu_apply_term's term picker: p(fits) of each candidate for the value, the best one if it clears the propose threshold, else none (decline)",
        decide,
        run,
    )
    .output_schema(json!({
        "type": "object",
        "required": ["choice", "threshold", "candidates"],
        "properties": {
            "choice": {"type": ["string", "null"], "description": "the CURIE to pick, or null to decline"},
            "p": {"type": "number"},
            "level": {"type": "string"},
            "threshold": {"type": "number"},
            "candidates": {"type": "array"},
            "inputResponses": {"type": "object", "description": "as an answerer: the picker's answer"}
        }
    }))
    .annotations(json!({"readOnlyHint": true, "idempotentHint": true, "openWorldHint": false}))
}

/// Why the chooser did not answer.
#[derive(Debug, thiserror::Error)]
pub enum ChooseError {
    #[error(
        "decide_choose answers avu_apply_term's term picker ({TERM_CHOICE}) only, not what {0} asked"
    )]
    NotThePicker(String),
    #[error("the chooser cannot answer: {0}")]
    Backend(#[source] crate::backend::BackendError),
}

fn run(decide: &Decide, args: Choose, _call: Call) -> Result<WithText<Value>, ChooseError> {
    let Some(requests) = args.input_requests else {
        return choose(
            decide,
            &args.ontology.unwrap_or_default(),
            &args.value.unwrap_or_default(),
            &args.candidates.unwrap_or_default(),
        );
    };
    // As an answerer: the picker's form in, the picker's answer out.
    let asked = args.arguments.unwrap_or_default();
    let Some(picker) = chooser_arguments(&asked, &requests) else {
        return Err(ChooseError::NotThePicker(
            args.tool.unwrap_or_else(|| "the tool".to_owned()),
        ));
    };
    let mut chosen = choose(decide, &picker.ontology, &picker.value, &picker.candidates)?;
    let responses = picker_responses(chosen.output["choice"].as_str());
    if let Value::Object(content) = &mut chosen.output {
        content.insert("inputResponses".into(), Value::Object(responses));
    }
    Ok(chosen)
}

/// The chooser on a picker's ontology, value and candidates.
fn choose(
    decide: &Decide,
    ontology: &str,
    value: &str,
    candidates: &[Candidate],
) -> Result<WithText<Value>, ChooseError> {
    let bundle = decide.bundle();
    let backend = Calibrated {
        inner: decide.backend.as_ref(),
        bundle: bundle.as_deref(),
    };
    let options: Vec<String> = questions::CHOOSER
        .options
        .iter()
        .map(|s| s.to_string())
        .collect();
    let mut scored = Vec::new();
    for c in candidates {
        let state = json!({"ontology": ontology, "value": value, "candidate": c});
        let answer = backend
            .ask(&questions::CHOOSER, &state, &options)
            .map_err(ChooseError::Backend)?;
        let p = answer
            .options
            .iter()
            .find(|o| o.option == "yes")
            .map(|o| o.p)
            .unwrap_or(0.0);
        scored.push((c, p, answer.level.name()));
    }
    let threshold = decide.policy.threshold(&questions::CHOOSER).propose;
    // The graph's rule: the first found of those tied highest.
    let best = (!scored.is_empty()).then(|| {
        let ps: Vec<f64> = scored.iter().map(|s| s.1).collect();
        scored[crate::graph::best_of(&ps)]
    });
    let (choice, text) = match best {
        Some((c, p, level)) if p >= threshold => (
            Some(c.curie.clone()),
            format!("{} ({}) p(fits)={p:.2} {level}", c.label, c.curie),
        ),
        Some((c, p, level)) => (
            None,
            format!(
                "none: the best, {} p(fits)={p:.2} {level}, is below the threshold {threshold:.2}",
                c.curie
            ),
        ),
        None => (None, "none: no candidates".into()),
    };
    Ok(WithText {
        text,
        output: json!({
            "choice": choice,
            "p": best.map(|b| b.1),
            "level": best.map(|b| b.2),
            "threshold": threshold,
            "candidates": scored.iter().map(|(c, p, level)| json!({"curie": c.curie, "label": c.label, "p": p, "level": level})).collect::<Vec<_>>(),
        }),
    })
}

/// What the chooser weighs: a picker's ontology, value and candidates.
#[derive(Debug, PartialEq)]
struct Picker {
    ontology: String,
    value: String,
    candidates: Vec<Candidate>,
}

/// What the chooser weighs for an `avu_apply_term` picker, from the call's own arguments and
/// the form it got back; `None` when `requests` is not that picker.
fn chooser_arguments(
    call_args: &Map<String, Value>,
    requests: &Map<String, Value>,
) -> Option<Picker> {
    if requests.len() != 1 {
        return None;
    }
    let form = requests.get(TERM_CHOICE)?;
    let options = form
        .pointer("/params/requestedSchema/properties/term/oneOf")?
        .as_array()?;
    let candidates: Vec<Candidate> = options
        .iter()
        .filter_map(|o| {
            let curie = o["const"].as_str()?;
            let title = o["title"].as_str().unwrap_or(curie);
            // The picker titles each term `label (CURIE)`.
            let label = title.strip_suffix(&format!(" ({curie})")).unwrap_or(title);
            Some(Candidate {
                curie: curie.to_owned(),
                label: label.to_owned(),
            })
        })
        .collect();
    Some(Picker {
        ontology: call_args.get("ontology")?.as_str()?.to_owned(),
        value: call_args.get("value")?.as_str()?.to_owned(),
        candidates,
    })
}

/// The picker's answer from the chooser's choice: accept it, or decline.
fn picker_responses(choice: Option<&str>) -> Map<String, Value> {
    let answer = match choice {
        Some(curie) => json!({"action": "accept", "content": {"term": curie}}),
        None => json!({"action": "decline"}),
    };
    let mut responses = Map::new();
    responses.insert(TERM_CHOICE.into(), answer);
    responses
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tools::tests::accepts;

    #[test]
    fn choose_takes_a_picker_or_an_answerers_arguments() {
        let c = json!({"curie": "PATO:0000122", "label": "length"});
        let eight: Vec<Value> = (0..8).map(|_| c.clone()).collect();
        let nine: Vec<Value> = (0..9).map(|_| c.clone()).collect();
        let answerer =
            json!({"tool": "avu_apply_term", "arguments": {"value": "x"}, "inputRequests": {}});
        accepts::<Choose>(
            &[
                json!({"ontology": "pato", "value": "length", "candidates": [c]}),
                json!({"ontology": "pato", "value": "length", "candidates": eight}),
                json!({"ontology": "pato", "value": "length", "candidates": [{"curie": "P:1", "label": ""}]}),
                answerer.clone(),
            ],
            &[
                json!({}),
                json!({"ontology": "pato", "value": "length"}),
                json!({"ontology": "", "value": "length", "candidates": [c]}),
                json!({"ontology": "pato", "value": "", "candidates": [c]}),
                json!({"ontology": "pato", "value": "length", "candidates": []}),
                json!({"ontology": "pato", "value": "length", "candidates": nine}),
                json!({"ontology": "pato", "value": "length", "candidates": [{"curie": "", "label": "x"}]}),
                json!({"ontology": "pato", "value": "length", "candidates": [{"curie": "P:1"}]}),
                json!({"ontology": "pato", "value": "length", "candidates": [{"curie": "P:1", "label": "x", "p": 1}]}),
                json!({"tool": "avu_apply_term", "arguments": {}}),
                json!({"tool": "avu_apply_term", "arguments": [], "inputRequests": {}}),
                json!({"ontology": "pato", "value": "length", "candidates": [c], "tool": "t", "arguments": {}, "inputRequests": {}}),
                json!({"ontology": "pato", "value": "length", "candidates": [c], "colour": "red"}),
            ],
        );
    }

    #[test]
    fn the_picker_form_becomes_the_choosers_arguments() {
        let form = json!({"params": {"requestedSchema": {"properties": {"term": {"oneOf": [
            {"const": "PATO:0000122", "title": "length (PATO:0000122)"},
            {"const": "PATO:0000117", "title": "size"}
        ]}}}}});
        let mut requests = Map::new();
        requests.insert(TERM_CHOICE.into(), form);
        let asked = json!({"ontology": "pato", "value": "hind foot"});
        let picker = chooser_arguments(asked.as_object().unwrap(), &requests).unwrap();
        assert_eq!(
            picker,
            Picker {
                ontology: "pato".into(),
                value: "hind foot".into(),
                candidates: vec![
                    Candidate {
                        curie: "PATO:0000122".into(),
                        label: "length".into()
                    },
                    Candidate {
                        curie: "PATO:0000117".into(),
                        label: "size".into()
                    },
                ],
            }
        );
        requests.insert("other".into(), json!({}));
        assert_eq!(
            chooser_arguments(asked.as_object().unwrap(), &requests),
            None
        );
        assert_eq!(
            picker_responses(Some("PATO:0000122"))[TERM_CHOICE],
            json!({"action": "accept", "content": {"term": "PATO:0000122"}})
        );
        assert_eq!(
            picker_responses(None)[TERM_CHOICE],
            json!({"action": "decline"})
        );
    }
}
