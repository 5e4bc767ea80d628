//! Tools as Rust functions: the input and output schemas derived from Rust types (schemars),
//! the checked arguments deserialised into the input type, and an error type whose message
//! becomes the tool error — so an author writes a function, not JSON schemas by hand.

use std::fmt::Display;
use std::future::Future;
use std::sync::Arc;

use schemars::JsonSchema;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use super::module::{Call, Tool};
use crate::subjects::ToolResult;

/// What a typed handler returns, and the output schema it promises.
///
/// `Result<O, E>`: `Ok` becomes the result — structured content (with its JSON as text) when
/// `O` serialises to an object, which is then the tool's output schema; text otherwise —
/// and `Err` a tool error whose text is `E`'s message. A `ToolResult` passes as it is (for a
/// tool that asks the person first, or answers in a shape of its own).
pub trait Reply: Send + 'static {
    /// The output schema, when the reply is a JSON object of a known shape.
    fn output_schema() -> Option<Value>;
    fn into_result(self) -> ToolResult;
}

impl<O, E> Reply for Result<O, E>
where
    O: Serialize + JsonSchema + Send + 'static,
    E: Display + Send + 'static,
{
    fn output_schema() -> Option<Value> {
        let schema = schema_of::<O>();
        (schema.get("type") == Some(&Value::String("object".into()))).then_some(schema)
    }

    fn into_result(self) -> ToolResult {
        match self {
            Ok(output) => match serde_json::to_value(output) {
                Ok(Value::Object(o)) => ToolResult::json(Value::Object(o)),
                Ok(Value::String(s)) => ToolResult::text(s),
                Ok(other) => ToolResult::text(other.to_string()),
                Err(e) => ToolResult::error(format!("the tool's answer is not JSON: {e}")),
            },
            Err(e) => ToolResult::error(e.to_string()),
        }
    }
}

/// An output with a text of its own for people (a terminal shows the text, an agent reads
/// the structured content, whose schema is `O`'s).
#[derive(Debug, Clone)]
pub struct WithText<O> {
    pub text: String,
    pub output: O,
}

impl<O, E> Reply for Result<WithText<O>, E>
where
    O: Serialize + JsonSchema + Send + 'static,
    E: Display + Send + 'static,
{
    fn output_schema() -> Option<Value> {
        <Result<O, E> as Reply>::output_schema()
    }

    fn into_result(self) -> ToolResult {
        match self {
            Ok(WithText { text, output }) => match serde_json::to_value(output) {
                Ok(value @ Value::Object(_)) => ToolResult {
                    structured_content: Some(value),
                    ..ToolResult::text(text)
                },
                Ok(_) => ToolResult::text(text),
                Err(e) => ToolResult::error(format!("the tool's answer is not JSON: {e}")),
            },
            Err(e) => ToolResult::error(e.to_string()),
        }
    }
}

impl Reply for ToolResult {
    fn output_schema() -> Option<Value> {
        None
    }

    fn into_result(self) -> ToolResult {
        self
    }
}

/// `T`'s JSON Schema as a tool's output schema: schemars' draft 2020-12, without the root's
/// `$schema` and Rust type name (`title`), which say nothing to a caller.
pub fn schema_of<T: JsonSchema>() -> Value {
    tidy(schemars::schema_for!(T).to_value())
}

/// `T`'s JSON Schema as a tool's input schema: as `schema_of`, except that an `Option` field
/// is a key one may leave out, not one that may be `null` (as a hand-written schema says it).
pub fn input_schema_of<T: JsonSchema>() -> Value {
    use schemars::transform::{RecursiveTransform, Transform};
    let mut schema = schemars::schema_for!(T);
    RecursiveTransform(no_null).transform(&mut schema);
    tidy(schema.to_value())
}

/// Takes `null` out of what a (sub)schema allows: `"type": ["string", "null"]` becomes
/// `"string"`, an `anyOf` loses its `{"type": "null"}` branch (and is unwrapped when one is
/// left), an `Option`'s `"default": null` goes.
fn no_null(schema: &mut schemars::Schema) {
    let Some(map) = schema.as_object_mut() else {
        return;
    };
    if let Some(Value::Array(types)) = map.get_mut("type") {
        types.retain(|t| t.as_str() != Some("null"));
        if types.len() == 1 {
            let only = types.remove(0);
            map.insert("type".into(), only);
        }
    }
    if let Some(Value::Array(branches)) = map.get_mut("anyOf") {
        branches.retain(|b| b.get("type") != Some(&Value::String("null".into())));
        if branches.len() == 1
            && let Some(Value::Object(only)) = branches.pop()
        {
            map.remove("anyOf");
            for (k, v) in only {
                map.entry(k).or_insert(v);
            }
        }
    }
    if map.get("default") == Some(&Value::Null) {
        map.remove("default");
    }
}

fn tidy(mut schema: Value) -> Value {
    if let Some(root) = schema.as_object_mut() {
        root.remove("$schema");
        root.remove("title");
    }
    standard_formats(&mut schema);
    schema
}

/// The formats JSON Schema (2020-12) defines; validators and MCP clients warn on others.
const FORMATS: [&str; 19] = [
    "date-time",
    "date",
    "time",
    "duration",
    "email",
    "idn-email",
    "hostname",
    "idn-hostname",
    "ipv4",
    "ipv6",
    "uri",
    "uri-reference",
    "iri",
    "iri-reference",
    "uuid",
    "uri-template",
    "json-pointer",
    "relative-json-pointer",
    "regex",
];

/// Takes out every `format` JSON Schema does not define (schemars writes Rust's own —
/// `uint64`, `uint`, `int32`, `double` — which the official SDKs warn of on every listing),
/// keeping what they said that JSON Schema can: an unsigned integer's `minimum: 0`.
fn standard_formats(schema: &mut Value) {
    match schema {
        Value::Object(map) => {
            if let Some(Value::String(f)) = map.get("format")
                && !FORMATS.contains(&f.as_str())
            {
                let unsigned = f.starts_with("uint");
                map.remove("format");
                if unsigned && !map.contains_key("minimum") {
                    map.insert("minimum".into(), Value::from(0));
                }
            }
            for v in map.values_mut() {
                standard_formats(v);
            }
        }
        Value::Array(items) => items.iter_mut().for_each(standard_formats),
        _ => {}
    }
}

impl Tool {
    /// A tool whose arguments are `I` and whose handler is `handler(args, call)`: the input
    /// schema is `I`'s, the output schema the reply's. The runtime checks a request against
    /// the schema before the handler runs; arguments the schema let through but `I` does not
    /// take (a schema written by hand beside the type) end as a tool error naming why.
    pub fn typed<I, R, F, Fut>(
        name: impl Into<String>,
        description: impl Into<String>,
        handler: F,
    ) -> Tool
    where
        I: DeserializeOwned + JsonSchema + Send + 'static,
        R: Reply,
        F: Fn(I, Call) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = R> + Send + 'static,
    {
        let handler = Arc::new(handler);
        let tool = Tool::new(
            name,
            description,
            input_schema_of::<I>(),
            move |mut call: Call| {
                let handler = handler.clone();
                async move {
                    let mut args = Value::Object(std::mem::take(&mut call.args));
                    whole_numbers(&mut args);
                    match serde_json::from_value::<I>(args) {
                        Ok(input) => handler(input, call).await.into_result(),
                        Err(e) => ToolResult::error(format!("the arguments do not fit: {e}")),
                    }
                }
            },
        );
        match R::output_schema() {
            Some(schema) => tool.output_schema(schema),
            None => tool,
        }
    }
}

impl Tool {
    /// `typed` for work that blocks (SQLite, files): `f(state, args, call)` runs on tokio's
    /// blocking pool, never on the runtime's threads; a panic there is a tool error.
    pub fn typed_blocking<S, I, R>(
        name: impl Into<String>,
        description: impl Into<String>,
        state: Arc<S>,
        f: fn(&S, I, Call) -> R,
    ) -> Tool
    where
        S: Send + Sync + 'static,
        I: DeserializeOwned + JsonSchema + Send + 'static,
        R: Reply,
    {
        let name = name.into();
        let what = name.clone();
        let mut tool = Tool::typed(name, description, move |args: I, call: Call| {
            let state = state.clone();
            let what = what.clone();
            async move {
                match super::off_runtime(&what, move || f(&state, args, call).into_result()).await {
                    Ok(result) => result,
                    Err(e) => ToolResult::error(e.to_string()),
                }
            }
        });
        tool.spec.output_schema = R::output_schema();
        tool
    }
}

/// JSON Schema counts `10.0`, `1e1` and `-0` as integers, serde's integer types do not:
/// each whole number written as a float, within `i64`/`u64`, becomes the integer it is, so
/// what the schema let through the type takes. (Arguments are at most serde_json's 128
/// levels deep, so the recursion is bounded.)
fn whole_numbers(value: &mut Value) {
    match value {
        Value::Number(n) if n.is_f64() => {
            if let Some(f) = n.as_f64().filter(|f| f.fract() == 0.0) {
                if f >= 0.0 && f < u64::MAX as f64 {
                    *value = Value::from(f as u64);
                } else if f < 0.0 && f >= i64::MIN as f64 {
                    *value = Value::from(f as i64);
                }
            }
        }
        Value::Array(items) => items.iter_mut().for_each(whole_numbers),
        Value::Object(map) => map.values_mut().for_each(whole_numbers),
        _ => {}
    }
}

// Arguments of a tool that takes none: `{}` and nothing else. (No doc comment: it would
// become the schema's description.)
#[derive(Debug, Clone, Copy, Default, serde::Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct NoArgs {}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::actor::Caller;

    /// Counts words.
    #[derive(serde::Deserialize, JsonSchema)]
    #[serde(deny_unknown_fields)]
    struct Count {
        /// The text to count in.
        text: String,
        limit: Option<u32>,
    }

    #[derive(Serialize, JsonSchema)]
    struct Counted {
        words: usize,
    }

    #[derive(Debug, thiserror::Error)]
    enum CountError {
        #[error("too many words: {0} (at most {1})")]
        TooMany(usize, u32),
    }

    fn tool() -> Tool {
        Tool::typed("count", "counts", |args: Count, _call: Call| async move {
            let words = args.text.split_whitespace().count();
            match args.limit {
                Some(l) if words > l as usize => Err(CountError::TooMany(words, l)),
                _ => Ok(Counted { words }),
            }
        })
    }

    fn call(args: Value) -> Call {
        Call {
            args: args.as_object().unwrap().clone(),
            caller: Caller::Unknown,
            ..Call::default()
        }
    }

    #[test]
    fn only_formats_json_schema_defines_are_written() {
        #[derive(JsonSchema)]
        #[allow(dead_code)]
        struct Sizes {
            last_seen_ms: u64,
            count: usize,
            ratio: f64,
            at: i32,
        }
        let schema = schema_of::<Sizes>();
        let text = schema.to_string();
        for f in ["uint64", "uint", "double", "int32"] {
            assert!(!text.contains(&format!("\"{f}\"")), "{f} in {text}");
        }
        assert_eq!(
            schema["properties"]["last_seen_ms"]["minimum"], 0,
            "{schema}"
        );
    }

    #[test]
    fn schemas_come_from_the_types() {
        let spec = tool().spec;
        assert_eq!(spec.input_schema["type"], "object");
        assert_eq!(spec.input_schema["required"], serde_json::json!(["text"]));
        assert_eq!(spec.input_schema["additionalProperties"], false);
        assert_eq!(
            spec.input_schema["properties"]["text"]["description"],
            "The text to count in."
        );
        assert!(spec.input_schema.get("$schema").is_none());
        // An Option is a key one may leave out, not one that may be null; Rust's `uint32` is
        // no JSON Schema format, its minimum stays.
        assert_eq!(
            spec.input_schema["properties"]["limit"],
            serde_json::json!({"type": "integer", "minimum": 0})
        );
        assert!(spec.input_schema.get("title").is_none());
        let out = spec.output_schema.expect("an object output has a schema");
        assert_eq!(out["properties"]["words"]["type"], "integer");
        let compiled = crate::runtime::Module::new("m", "1.0.0", "")
            .tool(tool())
            .compile();
        assert!(compiled.is_ok(), "{compiled:?}");
    }

    #[tokio::test]
    async fn arguments_in_output_and_typed_errors_out() {
        let t = tool();
        let ok = (t.handler)(call(serde_json::json!({"text": "a b c"}))).await;
        assert!(!ok.is_error);
        assert_eq!(ok.structured_content, Some(serde_json::json!({"words": 3})));
        let no = (t.handler)(call(serde_json::json!({"text": "a b c", "limit": 2}))).await;
        assert!(no.is_error);
        assert_eq!(no.text_content(), "too many words: 3 (at most 2)");
        // Whole numbers written as floats are integers, as the schema says.
        for whole in [serde_json::json!(2.0), serde_json::json!(2e0)] {
            let r = (t.handler)(call(serde_json::json!({"text": "a b c", "limit": whole}))).await;
            assert_eq!(r.text_content(), "too many words: 3 (at most 2)");
        }
        let half = (t.handler)(call(serde_json::json!({"text": "a", "limit": 2.5}))).await;
        assert!(half.is_error, "2.5 is no u32");
        // What the schema would have refused, had the runtime not: an error, not a panic.
        let bad = (t.handler)(call(serde_json::json!({"text": 7}))).await;
        assert!(bad.is_error);
        assert!(
            bad.text_content().starts_with("the arguments do not fit"),
            "{}",
            bad.text_content()
        );
    }
}
