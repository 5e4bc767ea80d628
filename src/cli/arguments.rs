//! `mesh call`'s arguments, read by the tool's input schema: a `key=value` value is typed as
//! the schema types that argument (`value=2019` stays the string a string argument wants;
//! `n=5` is the number a number argument wants), and arguments the schema refuses are
//! described in words, by name, before anything is sent.

use std::io::Read;

use anyhow::{Context, bail};
use serde_json::{Map, Value};

/// The arguments as given on the command line, before any schema is known.
#[derive(Debug, Clone, PartialEq)]
pub enum Given {
    /// One JSON object (on the command line or stdin): taken as it is.
    Object(Map<String, Value>),
    /// `key=value` pairs, in order, their values as typed.
    Pairs(Vec<(String, String)>),
}

/// One JSON object, `-` for a JSON object on stdin, or `key=value` pairs.
pub fn given(args: &[String]) -> anyhow::Result<Given> {
    let object = |text: &str, from: &str| -> anyhow::Result<Given> {
        match serde_json::from_str::<Value>(text)
            .with_context(|| format!("arguments from {from} are not valid JSON"))?
        {
            Value::Object(m) => Ok(Given::Object(m)),
            other => bail!("arguments from {from} must be a JSON object, got {other}"),
        }
    };
    match args {
        [] => Ok(Given::Object(Map::new())),
        [only] if only == "-" => {
            let mut text = String::new();
            std::io::stdin()
                .read_to_string(&mut text)
                .context("cannot read arguments from stdin")?;
            object(&text, "stdin")
        }
        [only] if only.trim_start().starts_with('{') => object(only, "the command line"),
        pairs => {
            let mut out: Vec<(String, String)> = Vec::new();
            for pair in pairs {
                let Some((key, raw)) = pair.split_once('=') else {
                    bail!(
                        "argument {pair:?} is not key=value (or give one JSON object, or - for stdin)"
                    );
                };
                if key.is_empty() {
                    bail!("argument {pair:?} has an empty key");
                }
                if out.iter().any(|(k, _)| k == key) {
                    bail!("argument {key} is given twice");
                }
                out.push((key.to_owned(), raw.to_owned()));
            }
            Ok(Given::Pairs(out))
        }
    }
}

impl Given {
    /// The arguments with no schema to read them by: a value is JSON where it parses, a
    /// string otherwise.
    pub fn untyped(self) -> Map<String, Value> {
        match self {
            Given::Object(m) => m,
            Given::Pairs(pairs) => pairs
                .into_iter()
                .map(|(k, raw)| {
                    let v = serde_json::from_str(&raw).unwrap_or(Value::String(raw));
                    (k, v)
                })
                .collect(),
        }
    }

    /// The arguments read by `schema` (a tool's input schema): each value as the type its
    /// property asks for; a JSON object given whole is left as it is.
    pub fn typed(self, schema: &Value) -> Map<String, Value> {
        match self {
            Given::Object(m) => m,
            Given::Pairs(pairs) => pairs
                .into_iter()
                .map(|(k, raw)| {
                    let types = types_of(property(schema, &k));
                    let v = typed_value(raw, &types);
                    (k, v)
                })
                .collect(),
        }
    }
}

/// The schema of argument `name`, if the tool's schema describes it.
fn property<'a>(schema: &'a Value, name: &str) -> Option<&'a Value> {
    schema.get("properties")?.get(name)
}

/// The JSON types a property's schema allows (`type`, or the branches of `anyOf`/`oneOf`,
/// or what its `enum` and `const` values are); empty when it says nothing.
fn types_of(schema: Option<&Value>) -> Vec<&'static str> {
    let mut out = Vec::new();
    let Some(schema) = schema else {
        return out;
    };
    let mut add = |t: &str| {
        let t = match t {
            "string" => "string",
            "number" => "number",
            "integer" => "integer",
            "boolean" => "boolean",
            "array" => "array",
            "object" => "object",
            "null" => "null",
            _ => return,
        };
        if !out.contains(&t) {
            out.push(t);
        }
    };
    match schema.get("type") {
        Some(Value::String(t)) => add(t),
        Some(Value::Array(ts)) => ts.iter().filter_map(Value::as_str).for_each(&mut add),
        _ => {}
    }
    for key in ["anyOf", "oneOf"] {
        for branch in schema
            .get(key)
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            for t in types_of(Some(branch)) {
                add(t);
            }
        }
    }
    let values = schema
        .get("enum")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .chain(schema.get("const"));
    for v in values {
        add(kind(v));
    }
    out
}

/// The JSON type name of a value (`integer` for a whole number).
fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_i64() || n.is_u64() => "integer",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// Whether a value of type `got` is one of `types` (an integer is a number).
fn fits(got: &str, types: &[&str]) -> bool {
    types.contains(&got) || (got == "integer" && types.contains(&"number"))
}

/// A raw `key=value` value as the property's types want it: a string stays a string; a
/// number, boolean, array or object is parsed as JSON; with no types known, JSON where it
/// parses. A value that parses as none of the types is left a string for the schema check
/// to name.
fn typed_value(raw: String, types: &[&str]) -> Value {
    if types.is_empty() {
        return serde_json::from_str(&raw).unwrap_or(Value::String(raw));
    }
    if types == ["string"] {
        return Value::String(raw);
    }
    match serde_json::from_str::<Value>(&raw) {
        Ok(v) if fits(kind(&v), types) => v,
        _ => Value::String(raw),
    }
}

/// A type as a person reads it.
fn words_for(types: &[&str]) -> String {
    let one = |t: &str| match t {
        "string" => "text",
        "integer" => "a whole number",
        "number" => "a number",
        "boolean" => "true or false",
        "array" => "a JSON array",
        "object" => "a JSON object",
        "null" => "null",
        _ => "a value",
    };
    match types {
        [] => "a value".to_owned(),
        [t] => one(t).to_owned(),
        ts => {
            let words: Vec<&str> = ts.iter().map(|t| one(t)).collect();
            words.join(" or ")
        }
    }
}

/// How argument `name` is given, for a message: `name=<text>`, and its description.
fn how(schema: &Value, name: &str) -> String {
    let p = property(schema, name);
    let mut s = format!("{name}=<{}>", words_for(&types_of(p)));
    if let Some(d) = p
        .and_then(|p| p.get("description"))
        .and_then(Value::as_str)
        .filter(|d| !d.is_empty())
    {
        s.push_str(&format!(" ({})", d.trim_end_matches('.')));
    }
    s
}

/// What is wrong with `args` for a tool whose input schema is `schema`, one line each, in
/// words and by argument name: a required argument missing, an argument it does not take, a
/// value of the wrong type. The rest (ranges, patterns, `oneOf` branches) the tool's runtime
/// checks on its side: a module's schema is not run here, so a hostile one (a pattern that
/// backtracks for ever) cannot hang the command.
pub fn problems(tool: &str, schema: &Value, args: &Map<String, Value>) -> Vec<String> {
    let mut out = Vec::new();
    let required: Vec<&str> = schema
        .get("required")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect();
    for name in &required {
        if !args.contains_key(*name) {
            out.push(format!(
                "{tool} needs argument {name}: give {}",
                how(schema, name)
            ));
        }
    }
    let known: Vec<&str> = schema
        .get("properties")
        .and_then(Value::as_object)
        .map(|p| p.keys().map(String::as_str).collect())
        .unwrap_or_default();
    let closed = schema.get("additionalProperties") == Some(&Value::Bool(false));
    for (name, value) in args {
        match property(schema, name) {
            None if closed => {
                let mut line = format!("{tool} takes no argument {name}");
                match nearest(name, known.iter().copied()).first() {
                    Some(near) => line.push_str(&format!("; did you mean {near}?")),
                    None if known.is_empty() => line.push_str("; it takes none"),
                    None => line.push_str(&format!("; it takes {}", known.join(", "))),
                }
                out.push(line);
            }
            None => {}
            Some(p) => {
                let types = types_of(Some(p));
                if !types.is_empty() && !fits(kind(value), &types) {
                    out.push(format!(
                        "argument {name} of {tool} is {}, got {}: give {}",
                        words_for(&types),
                        shown(value),
                        how(schema, name)
                    ));
                }
            }
        }
    }
    // The rest of the schema (enums, bounds, patterns, and whatever else it says), by the
    // validator the module checks with: what it would refuse is said here, before the call.
    // Not built for a schema that says no more than the checks above read (building it
    // costs a one-shot command about a tenth of its time).
    if out.is_empty() && says_more(schema) {
        for (path, rule) in mesh_core::runtime::arguments::violations(schema, args) {
            let rule: String = rule.chars().take(200).collect();
            out.push(match path.trim_start_matches('/') {
                "" => format!("arguments of {tool}: {rule}"),
                name => format!("argument {name} of {tool}: {rule}"),
            });
        }
    }
    out
}

/// Whether `schema` says more than `problems` reads itself: a closed or open object of
/// properties, each of one plain type, some required, with titles and descriptions.
fn says_more(schema: &Value) -> bool {
    const WORDS: [&str; 3] = ["title", "description", "$schema"];
    let Some(top) = schema.as_object() else {
        return true;
    };
    let plain_type = |t: Option<&Value>| {
        t.and_then(Value::as_str)
            .is_some_and(|t| ["string", "number", "integer", "boolean", "null"].contains(&t))
    };
    top.iter().any(|(k, v)| match k.as_str() {
        "type" => v != "object",
        "required" => !v.as_array().is_some_and(|r| r.iter().all(Value::is_string)),
        "additionalProperties" => !v.is_boolean(),
        "properties" => !v.as_object().is_some_and(|props| {
            props.values().all(|p| {
                p.as_object().is_some_and(|p| {
                    plain_type(p.get("type"))
                        && p.keys().all(|k| k == "type" || WORDS.contains(&k.as_str()))
                })
            })
        }),
        k => !WORDS.contains(&k),
    })
}

/// A value as a message shows it: short, on one line.
fn shown(v: &Value) -> String {
    let text = v.to_string();
    if text.chars().count() > 40 {
        let cut: String = text.chars().take(37).collect();
        format!("{cut}...")
    } else {
        text
    }
}

/// The names nearest to `wanted` (a typo's likely meaning), nearest first: at most three,
/// within the edits a typo makes (a letter left out, doubled, swapped or wrong: one for a
/// short name, up to a quarter of a long one).
pub fn nearest<'a>(wanted: &str, names: impl Iterator<Item = &'a str>) -> Vec<&'a str> {
    let most = (wanted.chars().count() / 4).clamp(1, 3);
    let mut scored: Vec<(usize, &str)> = names
        .map(|n| (strsim::damerau_levenshtein(wanted, n), n))
        .filter(|(edits, _)| *edits <= most)
        .collect();
    scored.sort();
    scored.into_iter().take(3).map(|(_, n)| n).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pairs(args: &[&str]) -> Given {
        let v: Vec<String> = args.iter().map(|s| s.to_string()).collect();
        given(&v).unwrap()
    }

    fn schema() -> Value {
        json!({
            "type": "object",
            "properties": {
                "path": {"type": "string", "description": "The object's path."},
                "value": {"type": "string"},
                "n": {"type": "integer"},
                "ratio": {"type": "number"},
                "on": {"type": "boolean"},
                "tags": {"type": "array", "items": {"type": "string"}},
                "either": {"type": ["string", "integer"]},
                "kind": {"enum": ["a", "b"]},
                "free": {}
            },
            "required": ["path"],
            "additionalProperties": false
        })
    }

    /// The validator is built only for a schema that says more than the checks in words
    /// read: what they cannot say is still said before the call.
    #[test]
    fn the_validator_is_built_only_for_what_words_do_not_check() {
        let plain = json!({"type": "object", "title": "t",
            "properties": {"text": {"type": "string", "description": "d"}, "n": {"type": "integer"}},
            "required": ["text"], "additionalProperties": false});
        assert!(!says_more(&plain));
        for more in [
            json!({"type": "object", "properties": {"n": {"type": "integer", "minimum": 1}}}),
            json!({"type": "object", "properties": {"m": {"enum": ["a"]}}}),
            json!({"type": "object", "properties": {"s": {"type": "string", "pattern": "^a$"}}}),
            json!({"type": "object", "properties": {"o": {"type": "object"}}}),
            json!({"type": "object", "properties": {"t": {"type": ["string", "null"]}}}),
            json!({"type": "object", "minProperties": 1}),
            json!({"type": "object", "additionalProperties": {"type": "string"}}),
            json!({"allOf": [{"type": "object"}]}),
            json!(true),
        ] {
            assert!(says_more(&more), "{more}");
        }
        let args = pairs(&["n=0"]).typed(
            &json!({"type": "object", "properties": {"n": {"type": "integer", "minimum": 1}}}),
        );
        let p = problems(
            "t_t",
            &json!({"type": "object", "properties": {"n": {"type": "integer", "minimum": 1}}}),
            &args,
        );
        assert_eq!(p.len(), 1, "{p:?}");
        assert!(p[0].starts_with("argument n of t_t: "), "{p:?}");
    }

    #[test]
    fn values_are_read_as_the_schema_types_them() {
        let args = pairs(&[
            "path=/a",
            "value=2019",
            "n=5",
            "ratio=0.5",
            "on=true",
            "tags=[\"x\"]",
            "either=7",
            "kind=a",
            "free=3",
        ])
        .typed(&schema());
        assert_eq!(
            Value::Object(args),
            json!({"path": "/a", "value": "2019", "n": 5, "ratio": 0.5, "on": true,
                   "tags": ["x"], "either": 7, "kind": "a", "free": 3})
        );
        // What does not parse as the wanted type is left for the check to name.
        let args = pairs(&["path=/a", "n=five"]).typed(&schema());
        assert_eq!(args["n"], json!("five"));
        // Without a schema: JSON where it parses.
        let args = pairs(&["value=2019", "s=hello"]).untyped();
        assert_eq!(Value::Object(args), json!({"value": 2019, "s": "hello"}));
        // A whole JSON object is taken as given.
        let args = pairs(&[r#"{"value": 2019}"#]).typed(&schema());
        assert_eq!(args["value"], json!(2019));
    }

    #[test]
    fn problems_name_the_argument_in_words() {
        let s = schema();
        let p = problems("avu_add", &s, &Map::new());
        assert_eq!(
            p,
            ["avu_add needs argument path: give path=<text> (The object's path)"]
        );
        let args = pairs(&["path=/a", "n=five"]).typed(&s);
        let p = problems("avu_add", &s, &args);
        assert_eq!(
            p,
            ["argument n of avu_add is a whole number, got \"five\": give n=<a whole number>"]
        );
        let args = pairs(&["path=/a", "valeu=x"]).typed(&s);
        let p = problems("avu_add", &s, &args);
        assert_eq!(p, ["avu_add takes no argument valeu; did you mean value?"]);
        // Beyond presence and type, the rest of the schema as the module's validator reads
        // it: named before the call too.
        let args = pairs(&["path=/a", "kind=c"]).typed(&s);
        let p = problems("avu_add", &s, &args);
        assert_eq!(p.len(), 1, "{p:?}");
        assert!(
            p[0].starts_with("argument kind of avu_add: ") && p[0].contains("is not one of"),
            "{p:?}"
        );
        assert!(problems("avu_add", &s, &pairs(&["path=/a"]).typed(&s)).is_empty());
    }

    /// A module is who answers with the schema: whatever it sends, the command reads the
    /// arguments and says something, never panicking (the schema's validator, the module's
    /// own, runs bounded; one that does not compile is left to the module to name).
    #[test]
    fn a_hostile_schema_is_only_read() {
        // As deep as a reply can be (serde_json reads 128 levels; each level here is two).
        let mut deep = json!({"type": "integer"});
        for _ in 0..60 {
            deep = json!({"anyOf": [{"oneOf": [deep]}, {"type": "null"}]});
        }
        let weird = [
            json!("string"),
            json!([1, 2]),
            json!(null),
            json!({"properties": 5, "required": "text"}),
            json!({"required": [1, {}, "a"], "properties": {"a": {"type": 7}}}),
            json!({"properties": {"a": {"anyOf": "x", "enum": 3, "type": ["x", 1]}}}),
            json!({"properties": {"a": {"pattern": "(a+)+$", "type": "string"}},
                   "additionalProperties": false}),
            json!({"properties": {"a": deep}}),
        ];
        for schema in &weird {
            let args =
                pairs(&["a=aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa!", "b=1"]).typed(schema);
            let _ = problems("x_y", schema, &args);
        }
        // A required name that is not text is no argument to ask for.
        let p = problems("x_y", &weird[4], &Map::new());
        assert_eq!(p, ["x_y needs argument a: give a=<a value>"]);
        // The deep schema still types its argument.
        let args = pairs(&["a=5"]).typed(&weird[7]);
        assert_eq!(args["a"], json!(5));
    }

    #[test]
    fn nearest_names_for_a_typo() {
        let names = ["echo", "echo_health", "avu_add"];
        assert_eq!(nearest("echho", names.into_iter()), ["echo"]);
        assert!(nearest("zzz", names.into_iter()).is_empty());
    }

    #[test]
    fn bad_arguments_say_what_is_wrong() {
        let e = given(&["{\"a\":".into()]).unwrap_err().to_string();
        assert!(e.contains("not valid JSON"), "{e}");
        let e = given(&["[1]".into()]).unwrap_err().to_string();
        assert!(e.contains("not key=value"), "{e}");
        let e = given(&["a=1".into(), "a=2".into()])
            .unwrap_err()
            .to_string();
        assert!(e.contains("given twice"), "{e}");
        assert_eq!(given(&[]).unwrap(), Given::Object(Map::new()));
    }
}
