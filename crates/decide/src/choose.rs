//! `decide_choose`, the chooser: answers `avu_apply_term`'s eight-candidate picker without a
//! person. It asks `term.fits.chooser` about each candidate over only what the picker carries
//! (ontology, value, candidate), with that question's own learned artifacts, and picks the
//! best when its p(fits) clears the propose threshold; otherwise it declines. Given the
//! picker itself (an answerer's arguments, `subjects/README.md`), it answers with the
//! `inputResponses` the picker takes, so `mesh call … --answer-with decide_choose` works.

use serde_json::{Map, Value, json};

use super::backend::Backend;
use super::calibrated::Calibrated;
use super::questions;
use super::tools::Decide;
use mesh_avu::TERM_CHOICE;
use mesh_core::runtime::{Call, Tool};
use mesh_core::subjects::ToolResult;

pub(super) fn tool<F, Fut>(handler: F) -> Tool
where
    F: Fn(Call) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = ToolResult> + Send + 'static,
{
    Tool::new(
        "choose",
        "Answers avu_apply_term's term picker: p(fits) of each candidate for the value, the best one if it clears the propose threshold, else none (decline)",
        json!({
            "type": "object",
            "properties": {
                "ontology": {"type": "string", "minLength": 1},
                "value": {"type": "string", "minLength": 1},
                "candidates": {
                    "type": "array", "minItems": 1, "maxItems": 8,
                    "items": {
                        "type": "object",
                        "properties": {"curie": {"type": "string", "minLength": 1}, "label": {"type": "string"}},
                        "required": ["curie", "label"],
                        "additionalProperties": false
                    }
                },
                "tool": {"type": "string", "description": "as an answerer: the tool that asked"},
                "arguments": {"type": "object", "description": "as an answerer: that tool's arguments"},
                "inputRequests": {"type": "object", "description": "as an answerer: what it asked"}
            },
            "oneOf": [
                {"required": ["ontology", "value", "candidates"]},
                {"required": ["tool", "arguments", "inputRequests"]}
            ],
            "additionalProperties": false
        }),
        handler,
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

pub(super) fn run(decide: &Decide, call: Call) -> ToolResult {
    let args = Value::Object(call.args.clone());
    if args.get("inputRequests").is_none() {
        return choose(decide, &args);
    }
    // As an answerer: the picker's form in, the picker's answer out.
    let requests = args["inputRequests"]
        .as_object()
        .cloned()
        .unwrap_or_default();
    let asked = args["arguments"].as_object().cloned().unwrap_or_default();
    let Some(direct) = chooser_arguments(&asked, &requests) else {
        return ToolResult::error(format!(
            "decide_choose answers avu_apply_term's term picker ({TERM_CHOICE}) only, not what {} asked",
            args["tool"].as_str().unwrap_or("the tool")
        ));
    };
    let mut chosen = choose(decide, &direct);
    if !chosen.is_error {
        let responses = picker_responses(&chosen);
        if let Some(Value::Object(content)) = chosen.structured_content.as_mut() {
            content.insert("inputResponses".into(), Value::Object(responses));
        }
    }
    chosen
}

/// The chooser on a picker's ontology, value and candidates.
fn choose(decide: &Decide, args: &Value) -> ToolResult {
    let text = |k: &str| args.get(k).and_then(Value::as_str).unwrap_or_default();
    let (ontology, value) = (text("ontology"), text("value"));
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
    for c in args["candidates"].as_array().into_iter().flatten() {
        let state = json!({"ontology": ontology, "value": value, "candidate": c});
        let answer = match backend.ask(&questions::CHOOSER, &state, &options) {
            Ok(a) => a,
            Err(e) => return ToolResult::error(format!("the chooser cannot answer: {e}")),
        };
        let p = answer
            .options
            .iter()
            .find(|o| o.option == "yes")
            .map(|o| o.p)
            .unwrap_or(0.0);
        scored.push((c.clone(), p, answer.level.name()));
    }
    let threshold = decide.policy.threshold(&questions::CHOOSER).propose;
    let best = scored
        .iter()
        .enumerate()
        .max_by(|(i, a), (j, b)| a.1.total_cmp(&b.1).then(j.cmp(i)))
        .map(|(_, s)| s.clone());
    let (choice, text) = match &best {
        Some((c, p, level)) if *p >= threshold => (
            c["curie"].as_str().map(str::to_owned),
            format!(
                "{} ({}) p(fits)={p:.2} {level}",
                c["label"].as_str().unwrap_or_default(),
                c["curie"].as_str().unwrap_or_default()
            ),
        ),
        Some((c, p, level)) => (
            None,
            format!(
                "none: the best, {} p(fits)={p:.2} {level}, is below the threshold {threshold:.2}",
                c["curie"].as_str().unwrap_or_default()
            ),
        ),
        None => (None, "none: no candidates".into()),
    };
    ToolResult {
        structured_content: Some(json!({
            "choice": choice,
            "p": best.as_ref().map(|b| b.1),
            "level": best.as_ref().map(|b| b.2),
            "threshold": threshold,
            "candidates": scored.iter().map(|(c, p, level)| json!({"curie": c["curie"], "label": c["label"], "p": p, "level": level})).collect::<Vec<_>>(),
        })),
        ..ToolResult::text(text)
    }
}

/// The arguments of `decide_choose` for an `avu_apply_term` picker, from the call's own
/// arguments and the form it got back; `None` when `requests` is not that picker.
fn chooser_arguments(
    call_args: &Map<String, Value>,
    requests: &Map<String, Value>,
) -> Option<Value> {
    if requests.len() != 1 {
        return None;
    }
    let form = requests.get(TERM_CHOICE)?;
    let options = form
        .pointer("/params/requestedSchema/properties/term/oneOf")?
        .as_array()?;
    let candidates: Vec<Value> = options
        .iter()
        .filter_map(|o| {
            let curie = o["const"].as_str()?;
            let title = o["title"].as_str().unwrap_or(curie);
            // The picker titles each term `label (CURIE)`.
            let label = title.strip_suffix(&format!(" ({curie})")).unwrap_or(title);
            Some(json!({"curie": curie, "label": label}))
        })
        .collect();
    Some(json!({
        "ontology": call_args.get("ontology")?.as_str()?,
        "value": call_args.get("value")?.as_str()?,
        "candidates": candidates,
    }))
}

/// The picker's answer from the chooser's result: accept its choice, or decline.
fn picker_responses(chosen: &ToolResult) -> Map<String, Value> {
    let choice = chosen
        .structured_content
        .as_ref()
        .and_then(|s| s["choice"].as_str());
    let answer = match choice {
        Some(curie) => json!({"action": "accept", "content": {"term": curie}}),
        None => json!({"action": "decline"}),
    };
    let mut responses = Map::new();
    responses.insert(TERM_CHOICE.into(), answer);
    responses
}
