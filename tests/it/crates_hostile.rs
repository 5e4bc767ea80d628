//! Today's new surfaces through an attacker's eyes: typed tools (a schemars-derived schema
//! checked, then serde), the typed catalogue registration, `mesh <name>` looking up
//! `mesh-<name>`, and `mesh up` starting module processes with a credential each. Every test
//! talks to a real nats-server, a real `mesh` binary or both; raw protocol bytes (raw.rs)
//! where a library would not send what an attacker would.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use mesh_core::client::{Client, Outcome};
use mesh_core::subjects::{FullName, ToolResult};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::Child;

use crate::bus::{Bus, GENEROUS, Running, alive};
use crate::cli::{command, lone_mesh, mesh, run_in};
use crate::raw::Raw;

/// A bound that only catches a hang.
const HANG: Duration = Duration::from_secs(60);

async fn call(client: &Client, tool: &str, args: Value) -> ToolResult {
    client
        .call(&FullName::parse(tool).unwrap(), &args, GENEROUS)
        .await
        .unwrap_or_else(|e| panic!("{tool}: {e}"))
}

/// The text of a reply as raw.rs reads it (a `CallToolResult` in JSON).
fn text_of(reply: &Value) -> String {
    reply["content"]
        .as_array()
        .map(|c| {
            c.iter()
                .filter_map(|p| p["text"].as_str())
                .collect::<Vec<_>>()
                .join("\n")
        })
        .unwrap_or_default()
}

/// catalog, echo and avu as their own users, `weather` a module account with nothing served,
/// and ann, a person who may publish every tool subject (so that only the modules decide).
async fn builtins(dir: &Path) -> (Bus, Vec<Running>) {
    let bus = Bus::accounts(
        &["catalog", "echo", "avu", "weather"],
        &[("ann", &["mesh.>"])],
    )
    .await;
    let catalog = bus.serve_catalog().await;
    let echo = bus.serve(mesh_echo::module()).await;
    let config =
        mesh_avu::Config::in_dir(&dir.join("avu"), &dir.join("decide/ontology.sqlite")).unwrap();
    let avu = bus.serve(mesh_avu::module(config).unwrap()).await;
    (bus, vec![catalog, echo, avu])
}

/// Every object (sub)schema in `schema`, with where it is.
fn objects<'a>(at: String, schema: &'a Value, out: &mut Vec<(String, &'a Value)>) {
    let Some(map) = schema.as_object() else {
        return;
    };
    if map.get("type") == Some(&json!("object")) || map.contains_key("properties") {
        out.push((at.clone(), schema));
    }
    for key in ["properties", "$defs"] {
        if let Some(Value::Object(children)) = map.get(key) {
            for (name, child) in children {
                objects(format!("{at}/{key}/{name}"), child, out);
            }
        }
    }
    for key in ["items", "not", "if", "then", "else", "additionalProperties"] {
        if let Some(child) = map.get(key) {
            objects(format!("{at}/{key}"), child, out);
        }
    }
    for key in ["oneOf", "anyOf", "allOf"] {
        if let Some(Value::Array(branches)) = map.get(key) {
            for (i, b) in branches.iter().enumerate() {
                objects(format!("{at}/{key}/{i}"), b, out);
            }
        }
    }
}

/// Arguments with every required key of `schema` given a value of its type, so that a key
/// added to them is the refusal's main reason.
fn filled(schema: &Value) -> Value {
    let mut body = json!({});
    for key in schema["required"].as_array().into_iter().flatten() {
        let key = key.as_str().unwrap();
        body[key] = match schema["properties"][key]["type"].as_str() {
            Some("integer") => json!(1),
            Some("array") => json!(["x"]),
            Some("object") => json!({}),
            _ => json!("x"),
        };
    }
    body
}

/// Every built-in typed tool says in its schema what its type says with
/// `deny_unknown_fields`: no key beyond its own, at any depth. So a key the type would refuse
/// is refused by the schema, before the handler, and named — at the top and inside `avus`.
#[tokio::test]
async fn every_builtin_typed_tool_refuses_unknown_keys_in_its_schema_at_every_depth() {
    let dir = tempfile::tempdir().unwrap();
    let (bus, _running) = builtins(dir.path()).await;
    let ann = bus.client_as(Some("ann")).await;
    // Registering is a module's (the bus denies it to people): a module's client tries those.
    let weather = bus.client_as(Some("weather")).await;
    let mut seen = Vec::new();
    for module in ["echo", "avu", "catalog"] {
        let reply = ann.tools(module, GENEROUS).await.unwrap();
        for spec in reply.tools {
            let full = mesh_core::subjects::full_name(module, &spec.name);
            let mut found = Vec::new();
            objects(String::new(), &spec.input_schema, &mut found);
            assert!(!found.is_empty(), "{full}: {}", spec.input_schema);
            for (at, object) in found {
                assert_eq!(
                    object.get("additionalProperties"),
                    Some(&json!(false)),
                    "{full} at {at:?} takes keys its type refuses: {object}"
                );
            }
            // A key nobody declared: refused by the schema, before the type sees it, and
            // named (but where the type has no fields at all, `NoArgs`, jsonschema says only
            // "False schema does not allow 1", at `/`: refused, not named).
            let mut body = filled(&spec.input_schema);
            body["zzz_unknown"] = json!(1);
            let caller = if matches!(full.as_str(), "catalog_register" | "catalog_unregister") {
                &weather
            } else {
                &ann
            };
            let r = call(caller, &full, body).await;
            let said = r.text_content();
            assert!(r.is_error, "{full}: {said}");
            assert!(
                said.contains("do not match its input schema"),
                "{full}: refused by the schema: {said}"
            );
            if spec.input_schema.get("properties").is_some() {
                assert!(said.contains("zzz_unknown"), "{full}: {said}");
            } else {
                assert!(
                    said.contains("False schema does not allow 1"),
                    "{full}: {said}"
                );
            }
            seen.push(full);
        }
    }
    seen.sort();
    assert_eq!(
        seen,
        [
            "avu_add",
            "avu_apply_term",
            "avu_list",
            "avu_remove",
            "catalog_forget",
            "catalog_modules",
            "catalog_register",
            "catalog_unregister",
            "echo",
            "echo_choose",
            "echo_fail",
            "echo_sleep",
            "echo_whoami",
        ],
        "every built-in tool was tried"
    );
    // Inside a nested type, too: one AVU of several with a key of its own.
    let nested = json!({"path": "/mesh/home/ann/x",
        "avus": [{"attribute": "a", "value": "1"}, {"attribute": "b", "value": "2", "zzz_nested": true}]});
    let r = call(&ann, "avu_add", nested).await;
    assert!(
        r.is_error
            && r.text_content().contains("do not match its input schema")
            && r.text_content().contains("/avus/1")
            && r.text_content().contains("zzz_nested"),
        "{}",
        r.text_content()
    );
    // Nothing was written by any of it.
    let listed = call(&ann, "avu_list", json!({"path": "/mesh/home/ann/x"})).await;
    assert_eq!(listed.structured_content.unwrap()["avus"], json!([]));
}

/// A body with a key twice, as raw bytes: the schema and the type read the same value (the
/// last), so a first value that passes the schema cannot carry a second past it, nor the
/// other way round.
#[tokio::test]
async fn a_key_given_twice_is_read_once_and_the_same_way_by_schema_and_type() {
    let dir = tempfile::tempdir().unwrap();
    let (bus, _running) = builtins(dir.path()).await;
    let mut ann = Raw::connect(&bus.url(), "ann", "pw-ann").await;
    for (subject, body, answer) in [
        ("mesh.echo.echo", r#"{"text":"a","text":"b"}"#, Ok("b")),
        ("mesh.echo.echo", r#"{"text":7,"text":"b"}"#, Ok("b")),
        (
            "mesh.echo.echo",
            r#"{"text":"a","text":7}"#,
            Err("at /text"),
        ),
        ("mesh.echo.sleep", r#"{"ms":1,"ms":600000}"#, Err("maximum")),
        (
            "mesh.echo.sleep",
            r#"{"ms":600000,"ms":1}"#,
            Ok("slept 1 ms"),
        ),
        (
            "mesh.echo.echo",
            r#"{"text":"a","zzz":1,"zzz":2}"#,
            Err("zzz"),
        ),
    ] {
        let reply = ann.request(subject, b"", body.as_bytes()).await.json();
        let text = text_of(&reply);
        match answer {
            Ok(expected) => {
                assert_ne!(reply["isError"], true, "{body}: {reply}");
                assert_eq!(text, expected, "{body}");
            }
            Err(named) => {
                assert_eq!(reply["isError"], true, "{body}: {reply}");
                assert!(
                    text.contains("do not match its input schema") && text.contains(named),
                    "{body}: {text}"
                );
            }
        }
    }
}

/// Numbers and bodies that strain the parser: each ends as a tool error that says what is
/// wrong (never a panic, never a sleep of some other length), and echo serves on after all
/// of them; a text too large to answer is named as such. Integral numbers written as floats
/// pass the derived schema (JSON Schema counts 10.0 as an integer) and are then refused by
/// serde, by name: see the ignored test below.
#[tokio::test]
async fn numbers_and_bodies_that_strain_the_parser_are_named_tool_errors() {
    let dir = tempfile::tempdir().unwrap();
    let (bus, _running) = builtins(dir.path()).await;
    let mut ann = Raw::connect(&bus.url(), "ann", "pw-ann").await;
    let deep_text = format!(
        r#"{{"text":{}"a"{}}}"#,
        "[".repeat(100_000),
        "]".repeat(100_000)
    );
    let deep_state = format!(
        r#"{{"text":"a","inputResponses":{}1{}}}"#,
        r#"{"a":"#.repeat(500),
        "}".repeat(500)
    );
    let cases: Vec<(&str, String, &str)> = vec![
        // At u64's end and past it: the schema's maximum; past f64: not JSON at all.
        (
            "mesh.echo.sleep",
            r#"{"ms":18446744073709551616}"#.into(),
            "greater than the maximum of 60000",
        ),
        (
            "mesh.echo.sleep",
            r#"{"ms":18446744073709551615}"#.into(),
            "greater than the maximum of 60000",
        ),
        (
            "mesh.echo.sleep",
            r#"{"ms":1e400}"#.into(),
            "not valid JSON: number out of range",
        ),
        (
            "mesh.echo.sleep",
            r#"{"ms":-1}"#.into(),
            "less than the minimum of 0",
        ),
        (
            "mesh.echo.sleep",
            r#"{"ms":0.5}"#.into(),
            "is not of type \"integer\"",
        ),
        // Nesting past serde_json's limit, in an argument and in a reserved key.
        ("mesh.echo.echo", deep_text, "recursion limit exceeded"),
        ("mesh.echo.echo", deep_state, "recursion limit exceeded"),
        // No object at all.
        (
            "mesh.echo.echo",
            r#"["text","a"]"#.into(),
            "must be a JSON object",
        ),
        ("mesh.echo.echo", "\u{feff}{}".into(), "not valid JSON"),
    ];
    for (subject, body, named) in cases {
        let reply = ann.request(subject, b"", body.as_bytes()).await.json();
        let short: String = body.chars().take(60).collect();
        assert_eq!(reply["isError"], true, "{short}: {reply}");
        assert!(text_of(&reply).contains(named), "{short}: {reply}");
    }
    // Integral, but not written as an integer: past the schema; today the type refuses it,
    // by name (the ignored test below says it should sleep). Never another length.
    for (body, slept) in [
        (r#"{"ms":1e1}"#, "slept 10 ms"),
        (r#"{"ms":10.0}"#, "slept 10 ms"),
        (r#"{"ms":-0}"#, "slept 0 ms"),
    ] {
        let reply = ann
            .request("mesh.echo.sleep", b"", body.as_bytes())
            .await
            .json();
        let text = text_of(&reply);
        let named = reply["isError"] == true
            && text.starts_with("the arguments do not fit")
            && text.contains("expected u64");
        assert!(named || text == slept, "{body}: {reply}");
    }
    let r = ann
        .request("mesh.echo.sleep", b"", br#"{"ms":1}"#)
        .await
        .json();
    assert_eq!(text_of(&r), "slept 1 ms", "echo serves on: {r}");

    // A text as large as the bus takes: the request goes, the answer (the text wrapped in a
    // result) would not fit in one message, and comes back whole all the same (kept by the
    // module, fetched by the client); a smaller one comes back in one message.
    let client = bus.client_as(Some("ann")).await;
    let max = client.nats().server_info().max_payload;
    // (Less the call's headers, which count: its deadline and its id.)
    let too_big = "x".repeat(max - 160);
    let r = call(&client, "echo", json!({ "text": too_big })).await;
    assert!(
        !r.is_error && r.text_content() == too_big,
        "{}",
        &r.text_content()[..r.text_content().len().min(200)]
    );
    let half = "y".repeat(max / 2);
    let r = call(&client, "echo", json!({ "text": half })).await;
    assert!(!r.is_error);
    assert_eq!(r.text_content(), half);
    // One byte past the bus's limit is the caller's to know before sending.
    let past = "z".repeat(max + 1);
    let e = client
        .call(
            &FullName::parse("echo").unwrap(),
            &json!({ "text": past }),
            GENEROUS,
        )
        .await
        .expect_err("a request past max_payload is not sent");
    assert!(e.to_string().contains("too large for the bus"), "{e}");
    let r = call(&client, "echo", json!({"text": "still here"})).await;
    assert_eq!(r.text_content(), "still here");
}

/// JSON Schema counts any number with no fractional part as an integer, so the derived
/// schema of a `u64` field lets `10.0`, `1e1` and `-0` through (a Python client's
/// `json.dumps(10.0)`, an agent writing `1e3`), and then serde refuses what the schema
/// accepted. The tool's own input schema is the contract a caller checks against.
#[tokio::test]
async fn an_integral_number_the_derived_schema_accepts_is_taken_by_the_type() {
    let dir = tempfile::tempdir().unwrap();
    let (bus, _running) = builtins(dir.path()).await;
    let mut ann = Raw::connect(&bus.url(), "ann", "pw-ann").await;
    for (body, slept) in [
        (r#"{"ms":10.0}"#, "slept 10 ms"),
        (r#"{"ms":1e1}"#, "slept 10 ms"),
        (r#"{"ms":-0}"#, "slept 0 ms"),
    ] {
        let reply = ann
            .request("mesh.echo.sleep", b"", body.as_bytes())
            .await
            .json();
        assert_eq!(text_of(&reply), slept, "{body}: {reply}");
    }
}

/// `requestState` and `inputResponses` are the runtime's, never a typed tool's arguments:
/// taken out before the schema and the type see the rest (so a tool of no arguments still
/// answers), and one of the wrong kind is refused by name before any tool runs.
#[tokio::test]
async fn reserved_keys_never_reach_a_typed_tool_as_arguments() {
    let dir = tempfile::tempdir().unwrap();
    let (bus, _running) = builtins(dir.path()).await;
    let mut ann = Raw::connect(&bus.url(), "ann", "pw-ann").await;
    let reply = ann
        .request(
            "mesh.echo.whoami",
            b"",
            br#"{"requestState":"forged","inputResponses":{"x":{"action":"accept"}}}"#,
        )
        .await
        .json();
    assert_ne!(reply["isError"], true, "{reply}");
    assert_eq!(reply["structuredContent"]["actor"], "ann@PEOPLE");
    let reply = ann
        .request(
            "mesh.echo.echo",
            b"",
            br#"{"text":"a","requestState":"forged"}"#,
        )
        .await
        .json();
    assert_eq!(text_of(&reply), "a");
    for (body, named) in [
        (r#"{"text":"a","requestState":5}"#, "requestState"),
        (r#"{"text":"a","inputResponses":"yes"}"#, "inputResponses"),
        (r#"{"text":"a","inputResponses":null}"#, "inputResponses"),
    ] {
        let reply = ann
            .request("mesh.echo.echo", b"", body.as_bytes())
            .await
            .json();
        assert_eq!(reply["isError"], true, "{body}: {reply}");
        assert!(text_of(&reply).contains(named), "{body}: {reply}");
    }
    // A continuation forged for a tool that asks: refused as a state, nothing chosen.
    let reply = ann
        .request(
            "mesh.echo.choose",
            b"",
            br#"{"options":["a"],"requestState":"forged","inputResponses":{"choice":{"action":"accept","content":{"pick":"a"}}}}"#,
        )
        .await
        .json();
    assert_eq!(reply["isError"], true, "{reply}");
    assert!(!text_of(&reply).contains("you chose"), "{reply}");
}

/// What `catalog_modules` lists, without the clocks: (module, version, description, tools,
/// instances).
async fn catalogue(client: &Client) -> Vec<Value> {
    let r = call(client, "catalog_modules", json!({})).await;
    r.structured_content.unwrap()["modules"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            json!([
                m["module"],
                m["version"],
                m["description"],
                m["tools"],
                m["instances"]
            ])
        })
        .collect()
}

/// A registration of weather by weather, as the runtime sends it.
fn weather(instance: &str, tools: Value) -> Value {
    json!({"module": "weather", "version": "1.0.0", "description": "forecasts",
        "tools": tools, "instance": instance, "started_ms": 1})
}

/// A module registering itself with anything odd, or as another, and a person registering
/// at all: each refused, and the catalogue reads back as it was. The bound on tools is where
/// the contract says (1024 taken, 1025 not), and a refused refresh leaves the record it had.
#[tokio::test]
async fn hostile_registrations_are_refused_and_leave_the_catalogue_as_it_was() {
    let dir = tempfile::tempdir().unwrap();
    let (bus, _running) = builtins(dir.path()).await;
    let ann = bus.client_as(Some("ann")).await;
    let module = bus.client_as(Some("weather")).await;
    let before = catalogue(&ann).await;
    assert_eq!(before.len(), 3, "{before:?}");

    let mut hostile: Vec<(String, Value)> = Vec::new();
    for tool in [
        "Forecast",
        "a.b",
        "a b",
        "a-b",
        "a>",
        "*",
        "tools",
        "",
        "9lives",
        "é",
        "forecast\n",
        &"t".repeat(65),
    ] {
        hostile.push((format!("tool {tool:?}"), weather("i1", json!(["ok", tool]))));
    }
    for instance in [
        "",
        "a.b",
        "*",
        ">",
        "a b",
        "é",
        "a\n",
        "a\u{0}",
        &"i".repeat(65),
    ] {
        hostile.push((
            format!("instance {instance:?}"),
            weather(instance, json!([])),
        ));
    }
    for name in [
        "Weather",
        "weather ",
        "weather.x",
        "weather\n",
        "weather-",
        &"w".repeat(33),
        "",
        "echo",
        "catalog",
    ] {
        let mut r = weather("i1", json!(["forecast"]));
        r["module"] = json!(name);
        hostile.push((format!("module {name:?}"), r));
    }
    let valid = weather("i1", json!(["forecast"]));
    let with = |key: &str, value: Value| {
        let mut r = valid.clone();
        r[key] = value;
        r
    };
    hostile.extend([
        ("unknown key".into(), with("last_seen_ms", json!(0))),
        (
            "unknown key, other case".into(),
            with("Module", json!("weather")),
        ),
        ("tools not a list".into(), with("tools", json!("forecast"))),
        ("negative start".into(), with("started_ms", json!(-1))),
        ("fractional start".into(), with("started_ms", json!(1.5))),
        ("version not text".into(), with("version", json!(1))),
        (
            "version too long".into(),
            with("version", json!("v".repeat(65))),
        ),
        (
            "description too long".into(),
            with("description", json!("d".repeat(4097))),
        ),
        (
            "1025 tools".into(),
            with(
                "tools",
                json!((0..1025).map(|i| format!("t{i}")).collect::<Vec<_>>()),
            ),
        ),
        ("null description".into(), with("description", Value::Null)),
        (
            "specs naming another tool".into(),
            with("specs", json!([{"name": "other", "inputSchema": {"type": "object"}}])),
        ),
        (
            "specs of more tools than it lists".into(),
            with(
                "specs",
                json!([{"name": "forecast", "inputSchema": {}}, {"name": "radar", "inputSchema": {}}]),
            ),
        ),
        (
            "a spec with a key MCP does not give a tool".into(),
            with(
                "specs",
                json!([{"name": "forecast", "inputSchema": {}, "secret": 1}]),
            ),
        ),
        (
            "an input schema that is not an object".into(),
            with("specs", json!([{"name": "forecast", "inputSchema": "any"}])),
        ),
        (
            "an output schema that is not an object".into(),
            with(
                "specs",
                json!([{"name": "forecast", "inputSchema": {}, "outputSchema": [1]}]),
            ),
        ),
        (
            "a spec without an input schema".into(),
            with("specs", json!([{"name": "forecast"}])),
        ),
        ("specs not a list".into(), with("specs", json!({}))),
    ]);
    let no_version = {
        let mut r = valid.clone();
        r.as_object_mut().unwrap().remove("version");
        r
    };
    hostile.push(("no version".into(), no_version));

    for (what, registration) in &hostile {
        let r = call(&module, "catalog_register", registration.clone()).await;
        assert!(r.is_error, "weather, {what}: {}", r.text_content());
    }
    // A person, as itself or as the module, even one granted `mesh.>`: the bus says no, and
    // the catalogue would too (`check_registrant`'s unit test).
    for name in ["ann", "weather"] {
        let mut r = valid.clone();
        r["module"] = json!(name);
        let e = ann
            .call(&FullName::parse("catalog_register").unwrap(), &r, GENEROUS)
            .await
            .unwrap_err();
        assert_eq!(e.outcome(), Outcome::Denied, "ann as {name}: {e}");
    }
    // Unregistering with a wildcard or another's name removes nothing.
    for (m, instance) in [
        ("weather", ">"),
        ("weather", "*"),
        ("echo", ">"),
        ("echo", "*"),
    ] {
        let args = json!({"module": m, "instance": instance});
        let r = call(&module, "catalog_unregister", args.clone()).await;
        assert!(r.is_error, "weather unregisters {m} {instance}");
        let e = ann
            .call(
                &FullName::parse("catalog_unregister").unwrap(),
                &args,
                GENEROUS,
            )
            .await
            .unwrap_err();
        assert_eq!(
            e.outcome(),
            Outcome::Denied,
            "ann unregisters {m} {instance}"
        );
    }
    assert_eq!(catalogue(&ann).await, before, "nothing changed");
    let r = call(&ann, "catalog_modules", json!({"module": "weather"})).await;
    assert_eq!(
        r.structured_content.unwrap()["modules"],
        json!([]),
        "weather is not registered"
    );

    // The bound itself: 1024 valid tools are taken ...
    let many: Vec<String> = (0..1024).map(|i| format!("t{i}")).collect();
    let r = call(&module, "catalog_register", weather("i1", json!(many))).await;
    assert!(!r.is_error, "{}", r.text_content());
    let registered = catalogue(&ann).await;
    // ... and a refused refresh after that (weather naming itself) leaves the record as it was.
    for (what, registration) in &hostile {
        if registration["module"] != "weather" {
            continue;
        }
        let r = call(&module, "catalog_register", registration.clone()).await;
        assert!(r.is_error, "weather, again, {what}: {}", r.text_content());
    }
    assert_eq!(catalogue(&ann).await, registered);
    let w: Vec<&Value> = registered.iter().filter(|m| m[0] == "weather").collect();
    assert_eq!(w.len(), 1, "{registered:?}");
    assert_eq!(w[0][3].as_array().unwrap().len(), 1024);
    assert_eq!(w[0][4], 1, "one instance");
}

/// A key given twice in a registration, as raw bytes from the module: the name checked
/// against the caller is the name written, whichever comes last.
#[tokio::test]
async fn a_module_cannot_smuggle_another_name_into_a_registration_with_a_key_twice() {
    let dir = tempfile::tempdir().unwrap();
    let (bus, _running) = builtins(dir.path()).await;
    let ann = bus.client_as(Some("ann")).await;
    let before = catalogue(&ann).await;
    let mut raw = Raw::connect(&bus.url(), "weather", "pw-weather").await;
    let as_echo = br#"{"module":"weather","module":"echo","version":"6.6.6","tools":["pwned"],"instance":"x","started_ms":0}"#;
    let reply = raw
        .request("mesh.catalog.register", b"", as_echo)
        .await
        .json();
    assert_eq!(reply["isError"], true, "{reply}");
    assert!(
        text_of(&reply).contains("cannot register"),
        "{}",
        text_of(&reply)
    );
    assert_eq!(catalogue(&ann).await, before);
    let as_itself = br#"{"module":"echo","module":"weather","version":"1.0.0","tools":["forecast"],"instance":"x","started_ms":0}"#;
    let reply = raw
        .request("mesh.catalog.register", b"", as_itself)
        .await
        .json();
    assert_ne!(reply["isError"], true, "{reply}");
    let after = catalogue(&ann).await;
    let echo_before: Vec<&Value> = before.iter().filter(|m| m[0] == "echo").collect();
    let echo_after: Vec<&Value> = after.iter().filter(|m| m[0] == "echo").collect();
    assert_eq!(echo_after, echo_before, "echo's entry is echo's");
    assert!(
        after
            .iter()
            .any(|m| m[0] == "weather" && m[3] == json!(["forecast"])),
        "{after:?}"
    );
}

/// An executable shell script at `path` that runs `body`.
fn script(path: &Path, body: &str) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, format!("#!/bin/sh\n{body}\n")).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
}

/// `mesh <name>` runs `mesh-<name>` from beside `mesh` and from PATH's directories only: a
/// hostile `mesh-foo` in the working directory is not run while PATH does not name it, and
/// a name that is not a module's (unicode, too long, not UTF-8) is refused even where
/// `mesh-<name>` exists on PATH. A PATH that does name the working directory (an empty
/// element, `.`, or a relative directory) is obeyed, as execvp, sh and git obey it.
#[tokio::test]
async fn a_module_command_is_looked_up_only_where_path_says() {
    use std::ffi::{OsStr, OsString};
    use std::os::unix::ffi::{OsStrExt, OsStringExt};
    let dir = tempfile::tempdir().unwrap();
    let lone = lone_mesh(dir.path());
    let work = dir.path().join("work");
    let marker = dir.path().join("ran");
    let hostile = format!("echo \"$0\" >> {}", marker.display());
    script(&work.join("mesh-foo"), &hostile);
    script(&work.join("sub/mesh-foo"), &hostile);
    let foo = OsStr::new("foo");

    let (code, _, err) = run_in(&lone, &work, "/usr/bin:/bin", &[foo]).await;
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("not installed"), "{err}");
    assert!(!marker.exists(), "ran from the working directory");

    // Names no module has, each with a `mesh-<name>` waiting on PATH.
    let on_path = dir.path().join("path");
    let long = "a".repeat(33);
    let mut names: Vec<OsString> = ["ünï", "foo\u{200b}", "Foo", long.as_str()]
        .iter()
        .map(OsString::from)
        .collect();
    names.push(OsString::from_vec(b"f\xffo".to_vec()));
    for name in &names {
        let mut file = OsString::from("mesh-");
        file.push(name);
        script(&on_path.join(&file), &hostile);
    }
    let path_var = format!("{}:/usr/bin:/bin", on_path.display());
    for name in &names {
        let (code, out, err) = run_in(&lone, &work, &path_var, &[name.as_os_str()]).await;
        assert_eq!(code, 2, "{:?}: {out}{err}", name.as_bytes());
        assert!(!marker.exists(), "{:?} ran", name.as_bytes());
    }

    // What PATH names is searched, the working directory included when it names it.
    for (path_var, ran) in [
        ("/usr/bin::/bin", "mesh-foo"),
        (":/usr/bin", "mesh-foo"),
        (".", "./mesh-foo"),
        ("sub", "sub/mesh-foo"),
    ] {
        let _ = std::fs::remove_file(&marker);
        let (code, out, err) = run_in(&lone, &work, path_var, &[foo]).await;
        assert_eq!(code, 0, "{path_var:?}: {out}{err}");
        let said = std::fs::read_to_string(&marker).unwrap_or_default();
        assert_eq!(said.trim(), ran, "{path_var:?}");
    }
}

/// A running `mesh up` in `home`, its stderr kept in a file.
struct Up {
    child: Child,
    state: PathBuf,
    url: String,
    banner: String,
    stderr: PathBuf,
}

/// The grants file `mesh up` reads on its first start: catalog, echo and the given modules,
/// tester a person who may call everything.
fn grants(state: &Path, modules: &str) {
    std::fs::create_dir_all(state).unwrap();
    std::fs::write(
        state.join("grants.conf"),
        format!(
            "modules {{ catalog {{}} echo {{}} {modules} }}\n\
             roles {{ everything {{ all: true }} }}\n\
             people {{ tester {{ roles: [everything] }} }}\n"
        ),
    )
    .unwrap();
}

/// `PATH` with `bin` first.
fn path_with(bin: &Path) -> String {
    format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    )
}

/// Starts `mesh up` in `home` (state in `home/up`), as `configure` sets it up, and waits for
/// "Ctrl-C stops everything".
async fn up(home: &Path, configure: impl FnOnce(&mut tokio::process::Command)) -> Up {
    let state = home.join("up");
    let stderr = home.join("up.stderr");
    let mut cmd = command(home);
    cmd.args(["up", "--dir", state.to_str().unwrap(), "--as", "tester"])
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(&stderr).unwrap())
        .process_group(0);
    configure(&mut cmd);
    let mut child = cmd.spawn().unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut banner = String::new();
    let read = async {
        while let Some(line) = lines.next_line().await.unwrap() {
            banner.push_str(&line);
            banner.push('\n');
            if line.starts_with("Ctrl-C stops everything") {
                return;
            }
        }
        panic!(
            "mesh up ended before it was up: {banner}{}",
            std::fs::read_to_string(&stderr).unwrap_or_default()
        );
    };
    tokio::time::timeout(HANG + Duration::from_secs(30), read)
        .await
        .expect("mesh up came up");
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
    let url = banner
        .split_whitespace()
        .find(|w| w.starts_with("nats://"))
        .expect("the banner names the bus")
        .to_owned();
    Up {
        child,
        state,
        url,
        banner,
        stderr,
    }
}

impl Up {
    /// Ctrl-C to its process group, as a terminal sends it; it stops cleanly.
    async fn stop(mut self) {
        let group = self.child.id().unwrap() as i32;
        // SAFETY: signalling our own child's process group.
        unsafe { libc::kill(-group, libc::SIGINT) };
        let status = tokio::time::timeout(HANG, self.child.wait())
            .await
            .expect("mesh up stops after Ctrl-C")
            .unwrap();
        assert_eq!(status.code(), Some(0), "{}", self.stderr());
    }

    fn stderr(&self) -> String {
        std::fs::read_to_string(&self.stderr).unwrap_or_default()
    }

    fn credentials(&self) -> BTreeMap<String, String> {
        let text = std::fs::read_to_string(self.state.join("credentials.json")).unwrap();
        serde_json::from_str(&text).unwrap()
    }
}

/// Waits until `path` exists (a bound that only catches a hang).
async fn appears(path: &Path) {
    for _ in 0..600 {
        if path.exists() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("{} never appeared", path.display());
}

/// A fake module process: `mesh-<name>` in `bin` that writes its arguments and environment
/// under `out` (atomically), then runs `then`.
fn fake_module(bin: &Path, name: &str, out: &Path, then: &str) {
    std::fs::create_dir_all(out).unwrap();
    let out = out.display();
    script(
        &bin.join(format!("mesh-{name}")),
        &format!(
            "printf '%s\\n' \"$@\" > {out}/argv.tmp && mv {out}/argv.tmp {out}/argv\n\
             env > {out}/env.tmp && mv {out}/env.tmp {out}/env\n\
             {then}"
        ),
    );
}

fn env_of(out: &Path) -> BTreeMap<String, String> {
    std::fs::read_to_string(out.join("env"))
        .unwrap()
        .lines()
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect()
}

/// The hostile values the person's own environment holds when they run `mesh up`.
const PERSONS_NATS: [(&str, &str); 7] = [
    ("NATS_URL", "nats://persons-bus.invalid:4222"),
    ("NATS_USER", "persons-user"),
    ("NATS_PASSWORD", "the-persons-password"),
    ("NATS_TOKEN", "the-persons-token"),
    ("NATS_CREDS", "/the/persons.creds"),
    ("NATS_NKEY", "/the/persons.nk"),
    ("NATS_CONTEXT", "the-persons-context"),
];

/// `mesh up` starts a module its grants name as `mesh-<name> run --layout accounts`, found
/// on PATH, with the module's own credential and the state directory mesh up uses — none of
/// the `NATS_*` settings of whoever ran `mesh up`, no other user's password, and not a
/// `MESH_STATE_DIR` of theirs. One that ends at once does not keep the mesh from coming up,
/// and mesh up says it ended.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_module_process_gets_its_own_credential_and_nothing_of_the_persons() {
    let home = tempfile::tempdir().unwrap();
    let home = home.path();
    let bin = home.join("bin");
    let out = home.join("spy");
    fake_module(&bin, "spy", &out, "exit 3");
    grants(&home.join("up"), "spy {}");
    let elsewhere = home.join("elsewhere");
    let running = up(home, |cmd| {
        cmd.env("PATH", path_with(&bin))
            .env("MESH_STATE_DIR", &elsewhere);
        for (k, v) in PERSONS_NATS {
            cmd.env(k, v);
        }
    })
    .await;
    appears(&out.join("env")).await;

    let argv = std::fs::read_to_string(out.join("argv")).unwrap();
    assert_eq!(argv, "run\n--layout\naccounts\n");
    let env = env_of(&out);
    let credentials = running.credentials();
    assert_eq!(env.get("NATS_URL"), Some(&running.url));
    assert_eq!(env.get("NATS_USER").map(String::as_str), Some("spy"));
    assert_eq!(env.get("NATS_PASSWORD"), credentials.get("spy"));
    assert_eq!(
        env.get("MESH_STATE_DIR").map(PathBuf::from),
        Some(running.state.clone())
    );
    let nats: Vec<&String> = env.keys().filter(|k| k.starts_with("NATS_")).collect();
    assert_eq!(
        nats,
        ["NATS_PASSWORD", "NATS_URL", "NATS_USER"],
        "only its own connection settings"
    );
    // No other user's password anywhere in its environment, the person's least of all.
    for (user, password) in &credentials {
        if user == "spy" {
            continue;
        }
        let leaked: Vec<&String> = env.keys().filter(|k| env[*k].contains(password)).collect();
        assert!(leaked.is_empty(), "{user}'s password in {leaked:?}");
    }
    for (k, v) in PERSONS_NATS {
        assert!(
            env.values().all(|value| !value.contains(v)),
            "{k}={v} reached the module"
        );
    }

    // Ended at once: the mesh came up anyway, said so, and answers.
    assert!(
        running
            .stderr()
            .contains("module spy ended before it answered"),
        "{}",
        running.stderr()
    );
    let (code, answer, err) = mesh(home, &["call", "echo", "text=up"]).await;
    assert_eq!((code, answer.as_str()), (0, "up\n"), "{err}");
    running.stop().await;
}

/// The module's name is the grants file's, and a grants file is checked before anything
/// starts: a name that is a path is refused, however real the path it leads to.
#[tokio::test]
async fn a_grants_file_cannot_make_mesh_up_run_a_path() {
    let home = tempfile::tempdir().unwrap();
    let home = home.path();
    let bin = home.join("bin");
    let marker = home.join("ran");
    // bin/mesh-../spy is a real executable, reached by the name `../spy`.
    let hostile = format!("touch {}", marker.display());
    script(&bin.join("mesh-../spy"), &hostile);
    script(&bin.join("mesh-Spy"), &hostile);
    script(&bin.join("mesh-spÿ"), &hostile);
    for name in ["\"../spy\"", "Spy", "\"spÿ\""] {
        grants(&home.join("up"), &format!("{name} {{}}"));
        let mut cmd = command(home);
        let out = cmd
            .args([
                "up",
                "--dir",
                home.join("up").to_str().unwrap(),
                "--as",
                "tester",
            ])
            .env("PATH", path_with(&bin))
            .stdin(Stdio::null())
            .output();
        let out = tokio::time::timeout(HANG, out)
            .await
            .expect("mesh up refuses at once")
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{name}: {err}");
        assert!(err.contains("cannot read the grants"), "{name}: {err}");
        assert!(!marker.exists(), "{name} ran");
    }
}

/// `mesh up` hands a module process its own credential, and nothing else that acts as the
/// person: the console's bearer token (which relays as the person who ran mesh up, with all
/// their grants) given in `MESH_CONSOLE_TOKEN` is the person's, like the `NATS_*` settings
/// spawn already removes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_module_process_does_not_get_the_persons_console_token() {
    let home = tempfile::tempdir().unwrap();
    let home = home.path();
    let bin = home.join("bin");
    let out = home.join("spy");
    fake_module(&bin, "spy", &out, "exit 3");
    grants(&home.join("up"), "spy {}");
    let running = up(home, |cmd| {
        cmd.env("PATH", path_with(&bin))
            .env("MESH_CONSOLE_TOKEN", "the-persons-console-token");
    })
    .await;
    appears(&out.join("env")).await;
    let env = env_of(&out);
    running.stop().await;
    assert_eq!(
        env.get("MESH_CONSOLE_TOKEN"),
        None,
        "the console's token reached the module"
    );
}

/// A module process has its credential in NATS_URL, NATS_USER and NATS_PASSWORD, and needs
/// nothing else to connect: the `nats` context the person happens to have selected (one
/// since deleted, say) is not its business.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_module_process_does_not_depend_on_the_persons_selected_context() {
    let home = tempfile::tempdir().unwrap();
    let home = home.path();
    std::fs::create_dir_all(home.join("config/nats/context")).unwrap();
    std::fs::write(home.join("config/nats/context.txt"), "gone").unwrap();
    let running = up(home, |_| {}).await;
    let stderr = running.stderr();
    let (code, out, err) = mesh(home, &["call", "decide_health"]).await;
    running.stop().await;
    assert!(
        !stderr.contains("decide ended before it answered"),
        "{stderr}"
    );
    assert_eq!(code, 0, "decide answers: {out}{err}");
}

/// Stopping `mesh up` stops what it started, also when a module's `mesh-<name>` is a
/// wrapper script that runs the module as its child rather than exec'ing it (the common way
/// to install a Python module): the child keeps the module's password in its environment and
/// reconnects to the next bus on the same port.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stopping_mesh_up_stops_what_a_module_process_started() {
    use futures_util::StreamExt;
    let home = tempfile::tempdir().unwrap();
    let home = home.path();
    let bin = home.join("bin");
    let out = home.join("spy");
    let pid_file = out.join("child.pid");
    fake_module(
        &bin,
        "spy",
        &out,
        &format!(
            "sleep 1000 &\necho $! > {}.tmp && mv {0}.tmp {0}\nwait",
            pid_file.display()
        ),
    );
    grants(&home.join("up"), "spy {}");
    // The module's `tools` verb, answered with the credential mesh up gave it (as the real
    // module would), so that mesh up is up at once.
    let answering = {
        let out = out.clone();
        tokio::spawn(async move {
            appears(&out.join("env")).await;
            let env = env_of(&out);
            let nc = async_nats::ConnectOptions::with_user_and_password(
                "spy".into(),
                env["NATS_PASSWORD"].clone(),
            )
            .custom_inbox_prefix("_INBOX.spy")
            .connect(env["NATS_URL"].as_str())
            .await
            .expect("the module's credential works");
            let mut verb = nc.subscribe("mesh.spy.tools").await.unwrap();
            let reply =
                json!({"module": "spy", "version": "0.0.1", "description": "", "tools": []});
            while let Some(m) = verb.next().await {
                if let Some(to) = m.reply {
                    let _ = nc.publish(to, reply.to_string().into()).await;
                }
            }
        })
    };
    let running = up(home, |cmd| {
        cmd.env("PATH", path_with(&bin));
    })
    .await;
    assert!(running.banner.contains("spy"), "{}", running.banner);
    appears(&pid_file).await;
    let child: i32 = std::fs::read_to_string(&pid_file)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    running.stop().await;
    answering.abort();
    let mut outlived = true;
    for _ in 0..100 {
        if !alive(child) {
            outlived = false;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // SAFETY: the pid is the test's own fake module's child; nothing else if it has gone.
    unsafe { libc::kill(child, libc::SIGKILL) };
    assert!(!outlived, "the module's child outlived mesh up");
}
