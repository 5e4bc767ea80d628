//! Turns a request body into checked arguments and a continuation, or a message saying what is wrong.

use serde_json::{Map, Value};

use super::module::Continuation;
use crate::subjects::{KEY_INPUT_RESPONSES, KEY_REQUEST_STATE};

/// How many schema violations one error message lists before summarising the rest.
const MAX_LISTED: usize = 5;

/// Parses the body: a JSON object (an empty body counts as `{}`, so `nats req` with no
/// payload works), with the reserved continuation keys taken out.
pub(crate) fn parse(
    tool: &str,
    body: &[u8],
) -> Result<(Map<String, Value>, Option<Continuation>), String> {
    let value: Value = if body.iter().all(u8::is_ascii_whitespace) {
        Value::Object(Map::new())
    } else {
        serde_json::from_slice(body)
            .map_err(|e| format!("arguments of {tool} are not valid JSON: {e}"))?
    };
    let Value::Object(mut args) = value else {
        return Err(format!(
            "arguments of {tool} must be a JSON object, got {}",
            kind(&value)
        ));
    };
    let request_state = match args.remove(KEY_REQUEST_STATE) {
        None => None,
        Some(Value::String(s)) => Some(s),
        Some(other) => {
            return Err(format!(
                "{KEY_REQUEST_STATE} of {tool} must be a string, got {}",
                kind(&other)
            ));
        }
    };
    let input_responses = match args.remove(KEY_INPUT_RESPONSES) {
        None => None,
        Some(Value::Object(o)) => Some(o),
        Some(other) => {
            return Err(format!(
                "{KEY_INPUT_RESPONSES} of {tool} must be an object, got {}",
                kind(&other)
            ));
        }
    };
    let continuation =
        (request_state.is_some() || input_responses.is_some()).then_some(Continuation {
            request_state,
            input_responses,
        });
    Ok((args, continuation))
}

/// Every way `args` breaks `schema`, with the validator the runtime checks calls with: each
/// as (the argument's path, `/ms`, or empty for the whole object; the rule in words). For a
/// caller to say before the call what the tool would refuse. A schema that does not compile
/// gives none (the module names it at start).
pub fn violations(schema: &Value, args: &Map<String, Value>) -> Vec<(String, String)> {
    let Ok(validator) = jsonschema::validator_for(schema) else {
        return Vec::new();
    };
    let value = Value::Object(args.clone());
    validator
        .iter_errors(&value)
        .take(MAX_LISTED)
        .map(|e| (e.instance_path().to_string(), e.to_string()))
        .collect()
}

/// Checks the arguments against the tool's input schema, naming each violation by path.
pub(crate) fn check(
    tool: &str,
    validator: &jsonschema::Validator,
    args: Map<String, Value>,
) -> Result<Map<String, Value>, String> {
    let value = Value::Object(args);
    if validator.is_valid(&value) {
        let Value::Object(args) = value else {
            unreachable!("built from an object above")
        };
        return Ok(args);
    }
    let problems: Vec<String> = validator
        .iter_errors(&value)
        .map(|e| {
            let path = e.instance_path().to_string();
            let at = if path.is_empty() {
                "/".to_owned()
            } else {
                path
            };
            format!("at {at}: {e}")
        })
        .collect();
    let mut msg = format!(
        "arguments of {tool} do not match its input schema: {}",
        problems[..problems.len().min(MAX_LISTED)].join("; ")
    );
    if problems.len() > MAX_LISTED {
        msg.push_str(&format!("; and {} more", problems.len() - MAX_LISTED));
    }
    Err(msg)
}

fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn empty_body_is_an_empty_object() {
        let (args, cont) = parse("t", b"  ").unwrap();
        assert!(args.is_empty());
        assert!(cont.is_none());
    }

    #[test]
    fn malformed_and_non_objects_are_named() {
        let e = parse("echo", b"{\"a\":").unwrap_err();
        assert!(e.starts_with("arguments of echo are not valid JSON"), "{e}");
        let e = parse("echo", b"[1]").unwrap_err();
        assert_eq!(e, "arguments of echo must be a JSON object, got an array");
    }

    #[test]
    fn continuation_keys_are_taken_out() {
        let body = br#"{"x":1,"requestState":"s","inputResponses":{"k":{"action":"accept"}}}"#;
        let (args, cont) = parse("t", body).unwrap();
        assert_eq!(Value::Object(args), json!({"x": 1}));
        let cont = cont.unwrap();
        assert_eq!(cont.request_state.as_deref(), Some("s"));
        assert!(cont.input_responses.unwrap().contains_key("k"));
        assert!(parse("t", br#"{"requestState":5}"#).is_err());
    }

    #[test]
    fn schema_violations_name_the_path() {
        let schema = json!({"type": "object", "properties": {"n": {"type": "integer"}},
                            "required": ["n"], "additionalProperties": false});
        let v = jsonschema::validator_for(&schema).unwrap();
        let e = check("t", &v, json!({"n": "x"}).as_object().unwrap().clone()).unwrap_err();
        assert!(e.contains("at /n:"), "{e}");
        let e = check("t", &v, Map::new()).unwrap_err();
        assert!(e.contains("\"n\" is a required property"), "{e}");
        assert!(check("t", &v, json!({"n": 3}).as_object().unwrap().clone()).is_ok());
    }
}
