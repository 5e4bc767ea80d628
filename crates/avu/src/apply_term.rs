//! `avu_apply_term`: attaches an ontology term as an AVU (`<ontology>.<label>` = value, unit
//! the CURIE); without a CURIE or IRI it asks the person to pick among up to eight candidates.

use std::sync::Arc;

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Map, Value, json};
use sha2::Digest;

use super::store::Avu;
use super::{AvuOut, Avus, avu_text, check_field, locked, term_attribute, writable, writer};
use mesh_core::runtime::{Call, Tool};
use mesh_core::subjects::ToolResult;

/// The key of the one input request.
pub const TERM_CHOICE: &str = "term_choice";

/// How many candidates the picker offers at most.
const OFFERED: usize = 8;

const TOOL: &str = "avu_apply_term";

/// What `avu_apply_term` takes: a term by CURIE or IRI, or neither, and the picker asks.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(extend("not" = {"required": ["curie", "iri"]}))]
pub struct ApplyTerm {
    /// an absolute object path under your home or a shared root
    path: String,
    /// the AVU's value, also what the term is searched by
    #[schemars(length(min = 1))]
    value: String,
    /// an imported ontology, e.g. pato
    #[schemars(length(min = 1))]
    ontology: String,
    /// the term, e.g. PATO:0000122
    curie: Option<String>,
    /// the term as an OBO PURL, e.g. http://purl.obolibrary.org/obo/PATO_0000122
    iri: Option<String>,
    /// what the change comes from, kept in the history
    source: Option<String>,
}

pub(super) fn tool(avus: Arc<Avus>) -> Tool {
    Tool::typed_blocking(
        "apply_term",
        "Attaches an ontology term to a path as the AVU <ontology>.<label> = value [CURIE]; without a curie or iri it searches the ontology for the value and asks you to pick among up to eight terms",
        avus,
        run,
    )
    .output_schema(json!({
        "type": "object",
        "required": ["path", "written"],
        "properties": {
            "path": {"type": "string"},
            "written": {"type": "array"},
            "present": {"type": "array"}
        }
    }))
    .annotations(json!({"readOnlyHint": false, "destructiveHint": false, "idempotentHint": true, "openWorldHint": false}))
}

/// `http://purl.obolibrary.org/obo/PATO_0000122` → `PATO:0000122`.
fn curie_of_iri(iri: &str) -> Option<String> {
    let local = iri
        .strip_prefix("http://purl.obolibrary.org/obo/")
        .or_else(|| iri.strip_prefix("https://purl.obolibrary.org/obo/"))?;
    let (prefix, id) = local.split_once('_')?;
    (!prefix.is_empty() && !id.is_empty() && !local.contains('/')).then(|| format!("{prefix}:{id}"))
}

/// Binds a state to the arguments it was issued for, without carrying them.
fn arguments_hash(path: &str, value: &str, ontology: &str) -> String {
    let digest = sha2::Sha256::digest(format!("{path}\0{value}\0{ontology}").as_bytes());
    digest[..12].iter().map(|b| format!("{b:02x}")).collect()
}

fn run(avus: &Avus, args: ApplyTerm, call: Call) -> ToolResult {
    match apply(avus, &args, &call) {
        Ok(r) => r,
        Err(e) => ToolResult::error(e),
    }
}

fn apply(avus: &Avus, args: &ApplyTerm, call: &Call) -> Result<ToolResult, String> {
    let (path, actor) = writable(avus, call, &args.path, TOOL)?;
    let value = args.value.as_str();
    check_field("value", value, true)?;
    let ontology = args.ontology.to_lowercase();
    let index = locked(&avus.index);
    let known = index.ontologies().map_err(|e| e.to_string())?;
    if !known.iter().any(|(name, _, _)| *name == ontology) {
        let names: Vec<&str> = known.iter().map(|(n, _, _)| n.as_str()).collect();
        return Err(format!(
            "ontology {ontology:?} is not in the index (imported: {}); import it with mesh decide ontology import",
            if names.is_empty() {
                "none".to_owned()
            } else {
                names.join(", ")
            }
        ));
    }
    let who = actor.to_string();
    let given = match (&args.curie, &args.iri) {
        (Some(c), _) => Some(c.clone()),
        (_, Some(iri)) => Some(curie_of_iri(iri).ok_or_else(|| {
            format!("iri {iri:?} is not an OBO PURL (http://purl.obolibrary.org/obo/PREFIX_ID): give the curie instead")
        })?),
        _ => None,
    };
    let bound = arguments_hash(&path, value, &ontology);
    let mut answered = None;
    let curie = match given {
        Some(c) => c,
        None => {
            let answer = call
                .continuation
                .as_ref()
                .and_then(|c| c.input_responses.as_ref())
                .and_then(|r| r.get(TERM_CHOICE));
            let Some(answer) = answer else {
                return ask(&index, &avus.key, &who, &path, value, &ontology, &bound);
            };
            let state = call
                .continuation
                .as_ref()
                .and_then(|c| c.request_state.as_deref())
                .ok_or("the answer to term_choice came without its requestState: call the tool again without inputResponses")?;
            let opened = avus
                .key
                .open(state, TOOL, Some(&who))
                .map_err(|e| e.to_string())?;
            let ids = opened.ids.clone();
            if ids["args"] != json!(bound) {
                return Err("requestState was issued for another path, value or ontology: call the tool again without it".into());
            }
            match answer.get("action").and_then(Value::as_str) {
                Some("accept") => {}
                Some("decline") | Some("cancel") => {
                    // A decline answers the question too: the state is spent.
                    locked(&avus.store)
                        .spend(&opened)
                        .map_err(|e| e.to_string())?;
                    return Ok(ToolResult {
                        structured_content: Some(
                            json!({"path": path, "written": [], "declined": true}),
                        ),
                        ..ToolResult::text(format!("nothing written on {path}: no term was chosen"))
                    });
                }
                _ => {
                    return Err(
                        "the answer to term_choice has no valid action (accept, decline or cancel)"
                            .into(),
                    );
                }
            }
            let picked = answer
                .pointer("/content/term")
                .and_then(Value::as_str)
                .ok_or("the answer to term_choice carries no term")?;
            let offered = ids["offered"].as_array().cloned().unwrap_or_default();
            if !offered.iter().any(|o| o.as_str() == Some(picked)) {
                return Err(format!("{picked:?} was not one of the terms offered"));
            }
            answered = Some(opened);
            picked.to_owned()
        }
    };
    // Whatever the state said, the label comes from the index now.
    let (label, obsolete) = index
        .term(&ontology, &curie)
        .map_err(|e| e.to_string())?
        .ok_or_else(|| format!("no term {curie} in {ontology}"))?;
    if obsolete {
        return Err(format!("{curie} ({label}) is obsolete in {ontology}"));
    }
    drop(index);
    let avu = Avu {
        attribute: term_attribute(&ontology, &label),
        value: value.to_owned(),
        unit: curie,
    };
    let mut by = writer(&who, actor.via.as_deref(), args.source.as_deref());
    by.answers = answered.as_ref();
    let new = locked(&avus.store)
        .add(&path, std::slice::from_ref(&avu), &by)
        .map_err(|e| e.to_string())?;
    let (written, present) = if new[0] {
        (vec![avu.clone()], vec![])
    } else {
        (vec![], vec![avu.clone()])
    };
    Ok(ToolResult {
        structured_content: Some(json!({
            "path": path,
            "written": written.iter().map(AvuOut::from).collect::<Vec<_>>(),
            "present": present.iter().map(AvuOut::from).collect::<Vec<_>>(),
        })),
        ..ToolResult::text(if new[0] {
            format!("added to {path}: {}", avu_text(&avu))
        } else {
            format!("already on {path}: {}", avu_text(&avu))
        })
    })
}

/// The picker: up to eight candidates from the index, the state naming them.
fn ask(
    index: &mesh_ontology::index::Index,
    key: &mesh_core::runtime::request_state::StateKey,
    who: &str,
    path: &str,
    value: &str,
    ontology: &str,
    bound: &str,
) -> Result<ToolResult, String> {
    let found = index
        .search(ontology, value, OFFERED)
        .map_err(|e| e.to_string())?;
    if found.is_empty() {
        return Err(format!(
            "no term in {ontology} matches {value:?}: give a curie, or other words as the value"
        ));
    }
    let options: Vec<Value> = found
        .iter()
        .map(|c| json!({"const": c.curie, "title": format!("{} ({})", c.label, c.curie)}))
        .collect();
    let schema = json!({
        "type": "object",
        "properties": {"term": {"type": "string", "title": "Term", "oneOf": options}},
        "required": ["term"]
    });
    let mut requests = Map::new();
    requests.insert(
        TERM_CHOICE.into(),
        ToolResult::elicitation(
            format!("Which {ontology} term describes {value:?} on {path}?"),
            schema,
        ),
    );
    let offered: Vec<&str> = found.iter().map(|c| c.curie.as_str()).collect();
    let state = key.seal(TOOL, Some(who), json!({"args": bound, "offered": offered}));
    Ok(ToolResult::input_required(requests, state))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn iris_become_curies() {
        assert_eq!(
            curie_of_iri("http://purl.obolibrary.org/obo/PATO_0000122").as_deref(),
            Some("PATO:0000122")
        );
        assert_eq!(
            curie_of_iri("https://purl.obolibrary.org/obo/NCBITaxon_10041").as_deref(),
            Some("NCBITaxon:10041")
        );
        for bad in [
            "http://example.org/PATO_1",
            "http://purl.obolibrary.org/obo/PATO",
            "http://purl.obolibrary.org/obo/_1",
        ] {
            assert_eq!(curie_of_iri(bad), None, "{bad}");
        }
        assert_eq!(
            term_attribute("PATO", "hind foot length"),
            "pato.hind_foot_length"
        );
    }
}
