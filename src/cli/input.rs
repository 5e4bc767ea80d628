//! Answers a tool's `input_required` requests: from `--answer`/`--decline`, or by asking at
//! the terminal, one form at a time, enum fields as a numbered choice.

use std::collections::HashMap;
use std::io::{BufRead, Write};

use serde_json::{Map, Value, json};

/// A person's answer to one input request, given on the command line.
#[derive(Debug, Clone, PartialEq)]
enum Given {
    /// `KEY=VALUE`: the value of a one-field form.
    Value(String),
    /// `KEY.FIELD=VALUE`, one or more.
    Fields(Vec<(String, String)>),
    Decline,
}

/// The answers given with `--answer` and `--decline`, by input request key.
#[derive(Debug, Default, Clone)]
pub struct Answers(HashMap<String, Given>);

impl Answers {
    pub fn parse(answers: &[String], declines: &[String]) -> Result<Answers, String> {
        let mut map: HashMap<String, Given> = HashMap::new();
        for a in answers {
            let (target, value) = a
                .split_once('=')
                .ok_or_else(|| format!("--answer {a:?}: expected KEY=VALUE or KEY.FIELD=VALUE"))?;
            if target.is_empty() {
                return Err(format!("--answer {a:?}: the key is empty"));
            }
            // Keys may hold dots themselves (`term_choice:g1`); a field follows the last one
            // only when the whole target is not itself a key given elsewhere.
            match target.rsplit_once('.') {
                Some((key, field)) if !key.is_empty() && !field.is_empty() => {
                    match map
                        .entry(key.to_owned())
                        .or_insert(Given::Fields(Vec::new()))
                    {
                        Given::Fields(fields) => fields.push((field.to_owned(), value.to_owned())),
                        _ => return Err(format!("--answer for {key} given twice")),
                    }
                }
                _ => {
                    if map
                        .insert(target.to_owned(), Given::Value(value.to_owned()))
                        .is_some()
                    {
                        return Err(format!("--answer for {target} given twice"));
                    }
                }
            }
        }
        for d in declines {
            if map.insert(d.clone(), Given::Decline).is_some() {
                return Err(format!("{d} is both answered and declined"));
            }
        }
        Ok(Answers(map))
    }
}

/// Builds `inputResponses` for `requests`, asking at the terminal when `interactive` and no
/// answer was given. `Err` says what was asked and could not be answered.
pub fn respond(
    requests: &Map<String, Value>,
    answers: &Answers,
    interactive: bool,
) -> Result<Map<String, Value>, String> {
    let mut responses = Map::new();
    for (key, request) in requests {
        let form = Form::read(key, request)?;
        let response = match answers.0.get(key) {
            Some(Given::Decline) => json!({"action": "decline"}),
            Some(given) => json!({"action": "accept", "content": form.content_of(given)?}),
            None if interactive => form.ask()?,
            None => return Err(form.describe()),
        };
        responses.insert(key.clone(), response);
    }
    Ok(responses)
}

/// Answers from `--answer`/`--decline`, else asked of the person at the terminal (when
/// `interactive`): what `mesh call`, `mesh read` and `mesh prompt` answer with.
#[derive(Debug, Clone)]
pub struct Terminal {
    pub answers: Answers,
    pub interactive: bool,
}

impl Terminal {
    /// The answers given, asking at the terminal only when both stdin and stderr are one.
    pub fn new(answers: Answers) -> Terminal {
        use std::io::IsTerminal as _;
        let interactive = std::io::stdin().is_terminal() && std::io::stderr().is_terminal();
        Terminal {
            answers,
            interactive,
        }
    }

    /// `inputResponses` for `requests`; `Err` says what was asked and could not be answered.
    pub async fn respond(
        &self,
        requests: &Map<String, Value>,
    ) -> Result<Map<String, Value>, String> {
        // Reading the terminal blocks: off the runtime's thread (one, for a command that
        // starts soonest), so the connection keeps answering the server meanwhile.
        let (requests, answers, interactive) =
            (requests.clone(), self.answers.clone(), self.interactive);
        tokio::task::spawn_blocking(move || respond(&requests, &answers, interactive))
            .await
            .unwrap_or_else(|e| Err(format!("the form at the terminal failed: {e}")))
    }
}

impl mesh_core::client::Asker for Terminal {
    type Error = String;

    async fn ask(
        &mut self,
        requests: &Map<String, Value>,
        _arguments: &Map<String, Value>,
    ) -> Result<mesh_core::client::Asked, String> {
        self.respond(requests)
            .await
            .map(mesh_core::client::Asked::Answers)
    }
}

/// One elicitation form.
struct Form {
    key: String,
    message: String,
    fields: Vec<Field>,
}

struct Field {
    name: String,
    title: String,
    kind: String,
    required: bool,
    /// (value, label) for enum fields.
    options: Vec<(Value, String)>,
    /// The schema's `default`: shown when asking, and sent for a field left empty.
    default: Option<Value>,
}

impl Field {
    /// The default as a person types it (a string without its quotes).
    fn default_text(&self) -> Option<String> {
        self.default.as_ref().map(|d| match d {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        })
    }
}

impl Form {
    fn read(key: &str, request: &Value) -> Result<Form, String> {
        let method = request.get("method").and_then(Value::as_str).unwrap_or("");
        if method != "elicitation/create" {
            return Err(format!(
                "input request {key} asks for {method:?}, which the command line cannot answer"
            ));
        }
        let params = request.get("params").cloned().unwrap_or_default();
        let message = params
            .get("message")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_owned();
        let schema = params.get("requestedSchema").cloned().unwrap_or_default();
        let required: Vec<&str> = schema
            .get("required")
            .and_then(Value::as_array)
            .map(|a| a.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        let mut fields = Vec::new();
        if let Some(props) = schema.get("properties").and_then(Value::as_object) {
            for (name, p) in props {
                fields.push(Field {
                    name: name.clone(),
                    title: p
                        .get("title")
                        .or_else(|| p.get("description"))
                        .and_then(Value::as_str)
                        .unwrap_or(name)
                        .to_owned(),
                    kind: p
                        .get("type")
                        .and_then(Value::as_str)
                        .unwrap_or("string")
                        .to_owned(),
                    required: required.contains(&name.as_str()),
                    options: options(p),
                    default: p.get("default").cloned(),
                });
            }
        }
        Ok(Form {
            key: key.to_owned(),
            message,
            fields,
        })
    }

    fn content_of(&self, given: &Given) -> Result<Value, String> {
        let pairs: Vec<(String, String)> = match given {
            Given::Value(v) => match self.fields.as_slice() {
                [only] => vec![(only.name.clone(), v.clone())],
                _ => {
                    return Err(format!(
                        "input request {} has {} fields; answer each as --answer {}.FIELD=VALUE",
                        self.key,
                        self.fields.len(),
                        self.key
                    ));
                }
            },
            Given::Fields(f) => f.clone(),
            Given::Decline => unreachable!("declines are answered before"),
        };
        let mut content = Map::new();
        for (name, raw) in pairs {
            let field = self
                .fields
                .iter()
                .find(|f| f.name == name)
                .ok_or_else(|| format!("input request {} has no field {name}", self.key))?;
            content.insert(name, field.coerce(&raw)?);
        }
        // A field not answered takes its default, as a form left as shown would.
        for f in &self.fields {
            if let Some(d) = &f.default {
                content.entry(f.name.clone()).or_insert_with(|| d.clone());
            }
        }
        if let Some(missing) = self
            .fields
            .iter()
            .find(|f| f.required && !content.contains_key(&f.name))
        {
            return Err(format!(
                "input request {} needs field {} ({})",
                self.key, missing.name, missing.title
            ));
        }
        Ok(Value::Object(content))
    }

    /// What was asked, for a person reading a non-interactive failure.
    fn describe(&self) -> String {
        let mut out = format!("  {}: {}\n", self.key, self.message);
        for f in &self.fields {
            let req = if f.required { "required" } else { "optional" };
            let default = f
                .default_text()
                .map(|d| format!(", default {d}"))
                .unwrap_or_default();
            out.push_str(&format!(
                "    {} ({}, {req}{default}): {}\n",
                f.name, f.kind, f.title
            ));
            for (i, (value, label)) in f.options.iter().enumerate() {
                out.push_str(&format!("      {}) {label} = {value}\n", i + 1));
            }
        }
        let example = match self.fields.as_slice() {
            [only] => format!("--answer {}=VALUE", self.key).replace("VALUE", &only.example()),
            _ => format!("--answer {}.FIELD=VALUE", self.key),
        };
        out.push_str(&format!(
            "  answer with {example}, or --decline {}",
            self.key
        ));
        out
    }

    /// Asks at the terminal (prompts on stderr, answers from stdin).
    fn ask(&self) -> Result<Value, String> {
        let stdin = std::io::stdin();
        let mut err = std::io::stderr();
        let _ = writeln!(err, "\n{}", self.message);
        let mut content = Map::new();
        for f in &self.fields {
            loop {
                if f.options.is_empty() {
                    let default = f
                        .default_text()
                        .map(|d| format!(" [{d}]"))
                        .unwrap_or_default();
                    let _ = write!(
                        err,
                        "{} ({}{}){default}: ",
                        f.title,
                        f.kind,
                        if f.required { "" } else { ", optional" }
                    );
                } else {
                    for (i, (_, label)) in f.options.iter().enumerate() {
                        let _ = writeln!(err, "  {}) {label}", i + 1);
                    }
                    // Left empty: its default where it has one, else a required field declines.
                    let decline = match (f.default_text(), f.required) {
                        (Some(d), _) => format!(", empty for {d}"),
                        (None, true) => ", empty to decline".to_owned(),
                        (None, false) => String::new(),
                    };
                    let _ = write!(err, "{} [1-{}{decline}]: ", f.title, f.options.len());
                }
                let _ = err.flush();
                let mut line = String::new();
                let read = stdin
                    .lock()
                    .read_line(&mut line)
                    .map_err(|e| format!("cannot read the answer: {e}"))?;
                let line = line.trim();
                // Left empty: the default, where there is one.
                if read != 0
                    && line.is_empty()
                    && let Some(d) = &f.default
                {
                    content.insert(f.name.clone(), d.clone());
                    break;
                }
                if read == 0 || (line.is_empty() && f.required) {
                    let _ = writeln!(err, "declined");
                    return Ok(json!({"action": "decline"}));
                }
                if line.is_empty() {
                    break;
                }
                match f.coerce(line) {
                    Ok(v) => {
                        content.insert(f.name.clone(), v);
                        break;
                    }
                    Err(e) => {
                        let _ = writeln!(err, "{e}");
                    }
                }
            }
        }
        Ok(json!({"action": "accept", "content": content}))
    }
}

impl Field {
    /// Reads a typed value: enum by number, value or label; booleans, numbers, strings.
    fn coerce(&self, raw: &str) -> Result<Value, String> {
        if !self.options.is_empty() {
            if let Ok(n) = raw.parse::<usize>()
                && (1..=self.options.len()).contains(&n)
            {
                return Ok(self.options[n - 1].0.clone());
            }
            return self
                .options
                .iter()
                .find(|(v, label)| {
                    v.as_str() == Some(raw)
                        || serde_json::from_str::<Value>(raw).is_ok_and(|r| r == *v)
                        || label == raw
                })
                .map(|(v, _)| v.clone())
                .ok_or_else(|| {
                    format!(
                        "{raw:?} is not one of the {} options of {} (give its number 1-{})",
                        self.options.len(),
                        self.name,
                        self.options.len()
                    )
                });
        }
        match self.kind.as_str() {
            "boolean" => match raw.to_ascii_lowercase().as_str() {
                "true" | "yes" | "y" => Ok(json!(true)),
                "false" | "no" | "n" => Ok(json!(false)),
                _ => Err(format!("{} takes yes or no, not {raw:?}", self.name)),
            },
            "integer" => raw
                .parse::<i64>()
                .map(|n| json!(n))
                .map_err(|_| format!("{} takes a whole number, not {raw:?}", self.name)),
            "number" => raw
                .parse::<f64>()
                .map(|n| json!(n))
                .map_err(|_| format!("{} takes a number, not {raw:?}", self.name)),
            _ => Ok(json!(raw)),
        }
    }

    fn example(&self) -> String {
        match self.options.first() {
            Some(_) => "1".to_owned(),
            None => "VALUE".to_owned(),
        }
    }
}

/// Enum options of a field: `enum` (+ `enumNames`), or `oneOf`/`anyOf` of `{const, title}`.
fn options(p: &Value) -> Vec<(Value, String)> {
    // A label given by the schema, else the value itself.
    let label = |given: Option<&Value>, v: &Value| {
        given
            .and_then(Value::as_str)
            .map(String::from)
            .unwrap_or_else(|| {
                v.as_str()
                    .map(String::from)
                    .unwrap_or_else(|| v.to_string())
            })
    };
    if let Some(values) = p.get("enum").and_then(Value::as_array) {
        let names = p.get("enumNames").and_then(Value::as_array);
        return values
            .iter()
            .enumerate()
            .map(|(i, v)| (v.clone(), label(names.and_then(|n| n.get(i)), v)))
            .collect();
    }
    p.get("oneOf")
        .or_else(|| p.get("anyOf"))
        .and_then(Value::as_array)
        .map(|items| {
            items
                .iter()
                .filter_map(|o| {
                    let v = o.get("const")?;
                    Some((v.clone(), label(o.get("title"), v)))
                })
                .collect()
        })
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_default_is_shown_and_sent_for_a_field_left_out() {
        let mut requests = Map::new();
        requests.insert(
            "q".into(),
            json!({"method": "elicitation/create", "params": {
                "message": "who?",
                "requestedSchema": {"type": "object", "required": ["name"], "properties": {
                    "name": {"type": "string"},
                    "color": {"type": "string", "title": "String with default", "default": "blue"},
                    "n": {"type": "integer", "default": 3}}}}}),
        );
        let answers = Answers::parse(&["q.name=Bob".into()], &[]).unwrap();
        let r = respond(&requests, &answers, false).unwrap();
        assert_eq!(
            r["q"],
            json!({"action": "accept", "content": {"name": "Bob", "color": "blue", "n": 3}})
        );
        // Unanswerable without `name`: the description shows the defaults.
        let e = respond(&requests, &Answers::default(), false).unwrap_err();
        assert!(e.contains("color (string, optional, default blue)"), "{e}");
    }

    fn choice_request() -> Map<String, Value> {
        let mut m = Map::new();
        m.insert(
            "pick".into(),
            json!({"method": "elicitation/create", "params": {
                "message": "which one?",
                "requestedSchema": {"type": "object", "required": ["choice"], "properties": {
                    "choice": {"type": "string", "title": "Option",
                               "oneOf": [{"const": "d1", "title": "cell (CL:0000000)"},
                                         {"const": "d2", "title": "neuron (CL:0000540)"}]}}}}}),
        );
        m
    }

    #[test]
    fn answers_by_number_value_or_label() {
        for given in [
            "pick=2",
            "pick=d2",
            "pick=neuron (CL:0000540)",
            "pick.choice=2",
        ] {
            let answers = Answers::parse(&[given.into()], &[]).unwrap();
            let r = respond(&choice_request(), &answers, false).unwrap();
            assert_eq!(
                r["pick"],
                json!({"action": "accept", "content": {"choice": "d2"}}),
                "{given}"
            );
        }
    }

    #[test]
    fn decline_and_bad_answers() {
        let answers = Answers::parse(&[], &["pick".into()]).unwrap();
        let r = respond(&choice_request(), &answers, false).unwrap();
        assert_eq!(r["pick"], json!({"action": "decline"}));
        let answers = Answers::parse(&["pick=7".into()], &[]).unwrap();
        let e = respond(&choice_request(), &answers, false).unwrap_err();
        assert!(e.contains("not one of the 2 options"), "{e}");
    }

    #[test]
    fn unanswered_says_what_was_asked() {
        let e = respond(&choice_request(), &Answers::default(), false).unwrap_err();
        assert!(e.contains("pick: which one?"), "{e}");
        assert!(e.contains("1) cell (CL:0000000)"), "{e}");
        assert!(e.contains("--answer pick=1"), "{e}");
    }
}
