//! Resources, resource templates, prompts and completions through the mesh (issue 46): a
//! server nobody here wrote (npm's server-everything) joined through the bridge and the
//! built-in echo module, read with the official Python SDK over `mesh mcp` and with the
//! command line, under the bus's permissions: a person granted one tool, or one prompt, gets
//! no more, whether through the mesh's client or raw NATS, and the call log witnesses reads.

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use mesh_bus::layout::ModuleUser;
use mesh_core::client::Client;
use mesh_core::subjects::features;
use serde_json::{Value, json};
use tokio::process::{Child, Command};

use crate::bus::{Bus, json_of, module, node_path, python};
use crate::raw::{Raw, Reply};

const MESH: &str = env!("CARGO_BIN_EXE_mesh");
const CLIENT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/py/mcp_resources.py");
/// A bound that only catches a hang.
const HANG: Duration = Duration::from_secs(60);

/// server-everything joined as module `everything` with its credential; its log in `log`.
pub(crate) fn everything(bus: &Bus, log: &Path) -> Child {
    let server = format!(
        "{}/@modelcontextprotocol/server-everything/dist/index.js",
        node_path()
    );
    Command::new(MESH)
        .args(["-v", "run", "--mcp", "everything"])
        .args(bus.flags("everything"))
        .args(["--layout", "accounts", "--", "node", &server, "stdio"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(log).unwrap())
        .kill_on_drop(true)
        .spawn()
        .unwrap()
}

/// Waits until `module` answers its prompts listing (the bridge serves what the server
/// listed, once it has).
pub(crate) async fn serving_prompts(client: &Client, log: &Path) {
    let listed = async {
        loop {
            let asked = client
                .nats()
                .request(features::prompts_list_subject("everything"), "{}".into())
                .await;
            if let Ok(m) = asked
                && m.payload.starts_with(b"{\"prompts\"")
            {
                return;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    };
    if tokio::time::timeout(HANG, listed).await.is_err() {
        panic!(
            "everything never served its prompts; its log:\n{}",
            std::fs::read_to_string(log).unwrap_or_default()
        );
    }
}

/// `mesh <args>` as `user`: its exit code, stdout and stderr.
async fn mesh(bus: &Bus, user: &str, args: &[&str]) -> (i32, String, String) {
    let out = tokio::time::timeout(
        HANG,
        Command::new(MESH)
            .args(args)
            .args(bus.flags(user))
            .kill_on_drop(true)
            .output(),
    )
    .await
    .expect("mesh ends")
    .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The text of every message content in a `GetPromptResult`.
fn said(result: &Value) -> String {
    result["messages"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|m| m["content"]["text"].as_str())
        .collect::<Vec<_>>()
        .join("\n")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_joined_servers_resources_and_prompts_reach_sdk_clients_and_the_command_line_as_granted()
{
    let dir = tempfile::tempdir().unwrap();
    // everything's tools are known (as `mesh up` learns them): each feature subject is
    // exported apart, reads and gets witnessed under names no tool can have.
    let everything_user = ModuleUser {
        tools: Some(["get_sum".to_owned()].into()),
        ..module("everything")
    };
    let echo_user = ModuleUser {
        tools: Some(["echo".to_owned()].into()),
        ..module("echo")
    };
    let carol: Vec<String> = features::prompt_grant("everything", "simple_prompt").into();
    let carol: Vec<&str> = carol.iter().map(String::as_str).collect();
    let bus = Bus::accounts_with(
        &[module("catalog"), everything_user, echo_user],
        &[
            ("ann", &["mesh.everything.>", "mesh.echo.>"]),
            // A tool of each, nothing else of theirs.
            ("bob", &["mesh.everything.get_sum", "mesh.echo.echo"]),
            ("carol", &carol),
        ],
    )
    .await;
    bus.keep_log().await;
    let _catalog = bus.serve_catalog().await;
    let _echo = bus.serve(mesh_echo::module()).await;
    let log = dir.path().join("everything.log");
    let _everything = everything(&bus, &log);
    let ann = bus.client_as(Some("ann")).await;
    serving_prompts(&ann, &log).await;

    // The official Python SDK over `mesh mcp`, as ann.
    let mut args = vec!["mcp".to_owned()];
    args.extend(bus.flags("ann"));
    let seen = json_of(
        Command::new(python())
            .arg(CLIENT)
            .arg("legacy")
            .arg(MESH)
            .args(&args),
    )
    .await;
    assert_eq!(
        seen["capabilities"],
        json!({"resources": true, "prompts": true, "completions": true})
    );
    let uris: Vec<&str> = seen["resources"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|r| r["uri"].as_str())
        .collect();
    assert!(uris.contains(&"echo://readme"), "{uris:?}");
    assert!(
        uris.iter()
            .any(|u| u.starts_with("demo://resource/static/document/")),
        "{uris:?}"
    );
    // Each resource names its module; templates are listed as the server wrote them.
    let readme = seen["resources"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["uri"] == "echo://readme")
        .unwrap();
    assert_eq!(readme["_meta"]["mesh/module"], "echo");
    let templates: Vec<&str> = seen["templates"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|t| t["uriTemplate"].as_str())
        .collect();
    assert!(
        templates.contains(&"demo://resource/dynamic/text/{resourceId}"),
        "{templates:?}"
    );
    assert_eq!(seen["static"]["contents"][0]["uri"], seen["static_uri"]);
    // A uri nobody listed, routed by the template it matches.
    assert_eq!(
        seen["template_read"]["contents"][0]["uri"],
        "demo://resource/dynamic/text/1"
    );
    assert!(
        seen["echo_readme"]["contents"][0]["text"]
            .as_str()
            .unwrap()
            .contains("echo answers")
    );
    // A uri nobody has: -32602 with the uri (SEP-2164), not an empty result.
    assert_eq!(seen["missing"]["code"], -32602, "{}", seen["missing"]);
    assert_eq!(seen["missing"]["data"]["uri"], "demo://no/such/thing");
    // Prompts named as tools are: <module>_<prompt>, the server's name kept in _meta.
    let prompts: Vec<&str> = seen["prompts"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|p| p["name"].as_str())
        .collect();
    for p in [
        "everything_simple_prompt",
        "everything_args_prompt",
        "echo_say",
    ] {
        assert!(prompts.contains(&p), "{p} not in {prompts:?}");
    }
    let simple = seen["prompts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == "everything_simple_prompt")
        .unwrap();
    assert_eq!(simple["_meta"]["mesh/mcpName"], "simple-prompt");
    assert_eq!(
        said(&seen["simple"]),
        "This is a simple prompt without arguments."
    );
    assert_eq!(said(&seen["args"]), "What's weather in Paris?");
    assert!(
        said(&seen["echo_say"]).ends_with(": hi"),
        "{}",
        seen["echo_say"]
    );
    assert_eq!(seen["no_prompt"]["code"], -32602, "{}", seen["no_prompt"]);
    assert_eq!(
        seen["completion"]["completion"]["values"],
        json!(["Engineering"])
    );
    assert!(
        seen["template_completion"].is_null(),
        "{}",
        seen["template_completion"]
    );

    // The command line, as ann.
    let (code, out, err) = mesh(&bus, "ann", &["resources", "--json"]).await;
    assert_eq!(code, 0, "{err}");
    let listed: Value = serde_json::from_str(&out).unwrap();
    assert!(
        listed["resources"]
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r["uri"] == "echo://readme")
    );
    assert!(!listed["resourceTemplates"].as_array().unwrap().is_empty());
    let (code, out, err) = mesh(&bus, "ann", &["read", "echo://readme"]).await;
    assert_eq!((code, out.contains("echo answers")), (0, true), "{err}");
    let (code, out, err) = mesh(&bus, "ann", &["prompts"]).await;
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("everything_args_prompt") && out.contains("city"),
        "{out}"
    );
    let (code, out, err) = mesh(
        &bus,
        "ann",
        &["prompt", "everything_args_prompt", "city=Paris"],
    )
    .await;
    assert_eq!(
        (code, out.trim()),
        (0, "user: What's weather in Paris?"),
        "{err}"
    );
    // Bad input: a clear error, its own exit code.
    let (code, _, err) = mesh(&bus, "ann", &["prompt", "echo_say", "text"]).await;
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("key=value"), "{err}");
    let (code, _, err) = mesh(&bus, "ann", &["prompt", "echo_say"]).await;
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("needs argument text"), "{err}");
    let (code, _, err) = mesh(&bus, "ann", &["read", "demo://no/such/thing"]).await;
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("resource not found"), "{err}");
    // A binary resource is not poured onto the terminal: to a file, decoded.
    let blob = dir.path().join("blob.bin");
    let (code, _, err) = mesh(
        &bus,
        "ann",
        &[
            "read",
            "demo://resource/dynamic/blob/1",
            "-o",
            blob.to_str().unwrap(),
        ],
    )
    .await;
    assert_eq!(code, 0, "{err}");
    assert!(!std::fs::read(&blob).unwrap().is_empty());

    // bob may call a tool of each module, nothing else of theirs: the mesh's client lists
    // him nothing, and the bus refuses him what he names.
    let (code, out, err) = mesh(&bus, "bob", &["resources", "--json"]).await;
    assert_eq!(code, 0, "{err}");
    let listed: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(listed["resources"], json!([]), "{out}");
    let (code, out, _) = mesh(&bus, "bob", &["prompts", "--json"]).await;
    assert_eq!(
        (code, serde_json::from_str::<Value>(&out).unwrap()),
        (0, json!({"prompts": []}))
    );
    let (code, _, err) = mesh(&bus, "bob", &["prompt", "everything_simple_prompt"]).await;
    assert_eq!(code, 4, "{err}");
    assert!(err.contains("not yours"), "{err}");
    let mut raw = Raw::connect(&bus.url(), "bob", "pw-bob").await;
    for subject in [
        features::resource_read_subject("everything"),
        features::resource_read_subject("echo"),
        features::resources_list_subject("echo"),
        features::prompt_get_subject("everything", "simple_prompt"),
        features::prompt_complete_subject("everything", "completable_prompt"),
    ] {
        match raw
            .request(&subject, b"", br#"{"uri": "echo://readme"}"#)
            .await
        {
            Reply::Err(e) => assert!(e.contains("Permissions Violation"), "{subject}: {e}"),
            other => panic!("bob reached {subject}: {other:?}"),
        }
    }

    // A module with its own credential reaches no other module's resources or prompts
    // (its grants name none): echo's user asks everything's.
    let mut raw = Raw::connect(&bus.url(), "echo", "pw-echo").await;
    for subject in [
        features::resource_read_subject("everything"),
        features::prompt_get_subject("everything", "simple_prompt"),
    ] {
        match raw.request(&subject, b"", b"{}").await {
            Reply::Err(e) => assert!(e.contains("Permissions Violation"), "{subject}: {e}"),
            other => panic!("module echo reached {subject}: {other:?}"),
        }
    }
    // Bad input over raw NATS: a clear refusal with the JSON-RPC code, and the module goes on.
    let mut raw = Raw::connect(&bus.url(), "ann", "pw-ann").await;
    let refused = raw
        .request(&features::resource_read_subject("echo"), b"", b"not json")
        .await
        .json();
    assert_eq!(refused["error"]["code"], -32602, "{refused}");
    assert!(
        refused["error"]["message"]
            .as_str()
            .unwrap()
            .contains("does not read"),
        "{refused}"
    );
    let read = raw
        .request(
            &features::resource_read_subject("echo"),
            b"",
            br#"{"uri": "echo://readme"}"#,
        )
        .await
        .json();
    assert!(read["contents"][0]["text"].is_string(), "{read}");

    // carol may get one prompt: she is listed that one, gets it, and nothing beside it.
    let (code, out, err) = mesh(&bus, "carol", &["prompts", "--json"]).await;
    assert_eq!(code, 0, "{err}");
    let listed: Value = serde_json::from_str(&out).unwrap();
    let names: Vec<&str> = listed["prompts"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|p| p["name"].as_str())
        .collect();
    assert_eq!(names, ["everything_simple_prompt"], "{listed}");
    let (code, out, err) = mesh(&bus, "carol", &["prompt", "everything_simple_prompt"]).await;
    assert_eq!(
        (code, out.trim()),
        (0, "user: This is a simple prompt without arguments."),
        "{err}"
    );
    let (code, _, err) = mesh(
        &bus,
        "carol",
        &["prompt", "everything_args_prompt", "city=Paris"],
    )
    .await;
    assert_eq!(code, 4, "{err}");
    let (code, _, err) = mesh(&bus, "carol", &["read", "echo://readme"]).await;
    assert_eq!(code, 1, "{err}");

    // The bus witnessed the reads and gets for the call log, under names no tool can have.
    let owner = bus
        .client_as(Some(mesh_core::subjects::calllog::OWNER))
        .await;
    let witnessed = async {
        loop {
            let info = owner
                .nats()
                .request(
                    format!(
                        "$JS.API.STREAM.INFO.{}",
                        mesh_core::subjects::calllog::CALLS_STREAM
                    ),
                    r#"{"subjects_filter": ">"}"#.into(),
                )
                .await
                .unwrap();
            let info: Value = serde_json::from_slice(&info.payload).unwrap();
            let subjects = info["state"]["subjects"].clone();
            if subjects.get("mesh-log.calls.echo.resources-read").is_some()
                && subjects
                    .get("mesh-log.calls.everything.prompts-get")
                    .is_some()
            {
                return subjects;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    };
    let subjects = tokio::time::timeout(HANG, witnessed)
        .await
        .expect("the call log has the reads and the gets");
    // Listings are verbs, not calls: never witnessed.
    assert!(
        subjects
            .as_object()
            .unwrap()
            .keys()
            .all(|s| !s.contains("list")),
        "{subjects}"
    );
}

/// Grants of resources and prompts, as written in a grants file.
const GRANTS: &str = r#"
    modules { catalog {}, echo {} }
    roles {
      readers { resources: [echo] }
      sayers  { prompts: [echo_say] }
      echoers { modules: [echo] }
      callers { tools: [echo] }
    }
    people {
      ann { roles: [echoers] }
      bob { roles: [callers] }
      cat { roles: [readers] }
      dan { roles: [sayers] }
    }
"#;

/// `mesh accounts --grants` of `grants`: the configuration, or the error it said.
async fn accounts(dir: &Path, grants: &str) -> Result<String, String> {
    let file = dir.join("grants.conf");
    std::fs::write(&file, grants).unwrap();
    let out = Command::new(MESH)
        .args(["accounts", "--grants", file.to_str().unwrap()])
        .args(["--store-dir", "@DIR@/js", "--credentials"])
        .arg(dir.join("credentials"))
        .args(["--credentials-url", "nats://127.0.0.1:4222"])
        .output()
        .await
        .unwrap();
    match out.status.code() {
        Some(0) => Ok(String::from_utf8(out.stdout).unwrap()),
        _ => Err(String::from_utf8_lossy(&out.stderr).into_owned()),
    }
}

#[tokio::test]
async fn a_grants_files_resources_and_prompts_are_what_the_bus_and_the_audit_say() {
    let dir = tempfile::tempdir().unwrap();
    let conf = accounts(dir.path(), GRANTS).await.unwrap();
    let bus = Bus::from_generated_config(&conf).await;
    let _catalog = bus.serve_catalog().await;
    let _echo = bus.serve(mesh_echo::module()).await;
    let admin = bus.client_as(Some("ann")).await;
    let installed: Vec<String> = admin
        .catalogue(None, Duration::from_secs(10))
        .await
        .unwrap()
        .iter()
        .flat_map(|e| e.full_names())
        .collect();
    let model =
        mesh_bus::audit::Model::read(&mesh_bus::audit::parse_file(&bus.config_path()).unwrap())
            .unwrap();
    let report = mesh_bus::audit::audit(&model, Some(&installed));
    let reach = |person: &str| {
        report
            .features
            .iter()
            .find(|r| r.person == format!("{person}@PEOPLE") && r.module == "echo")
            .map(|r| (r.resources, r.prompts))
    };
    assert_eq!(reach("ann"), Some((true, "all")));
    assert_eq!(reach("bob"), None);
    assert_eq!(reach("cat"), Some((true, "none")));
    assert_eq!(reach("dan"), Some((false, "some")));
    // Each verdict is the bus's: what the audit says each may do, they can, and no more.
    for (person, reads, says) in [
        ("ann", true, true),
        ("bob", false, false),
        ("cat", true, false),
        ("dan", false, true),
    ] {
        let (code, out, err) = mesh(&bus, person, &["read", "echo://readme"]).await;
        assert_eq!(code == 0, reads, "{person} read: {out}{err}");
        let (code, out, err) = mesh(&bus, person, &["prompt", "echo_say", "text=hi"]).await;
        assert_eq!(code == 0, says, "{person} prompt: {out}{err}");
        if !says {
            // Not theirs: refused by the bus (exit 4), never reported as missing.
            assert_eq!(code, 4, "{person}: {err}");
        }
    }
    // `mesh audit` prints them.
    let out = Command::new(MESH)
        .args(["audit", "--config", bus.config_path().to_str().unwrap()])
        .args(bus.flags("ann"))
        .output()
        .await
        .unwrap();
    let printed = String::from_utf8_lossy(&out.stdout);
    assert!(printed.contains("Resources and prompts"), "{printed}");
    assert!(
        printed
            .lines()
            .any(|l| l.starts_with("dan@PEOPLE") && l.contains("some")),
        "{printed}"
    );
    // A grant naming what is not declared is refused with why, and writes nothing.
    let bad = GRANTS.replace("prompts: [echo_say]", "prompts: [nosuch_say]");
    let err = accounts(dir.path(), &bad).await.unwrap_err();
    assert!(
        err.contains("role sayers grants prompt nosuch_say, but module nosuch is not declared"),
        "{err}"
    );
    let bad = GRANTS.replace("resources: [echo]", "resources: [Echo!]");
    assert!(accounts(dir.path(), &bad).await.is_err());
}

/// One person's crowd of slow reads takes no more than a share of a module's answers: past
/// it they are answered busy at once (the services protocol's 429, as a tool's busy), and
/// another person's read is answered while the crowd's still run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crowd_of_one_persons_slow_reads_leaves_another_persons_read_its_turn() {
    use mesh_core::runtime::{Module, Resource, text_contents};
    use mesh_core::subjects::limits::retry_after;
    let bus = Bus::accounts_with(
        &[
            module("catalog"),
            ModuleUser {
                tools: Some(["noop".to_owned()].into()),
                ..module("slowres")
            },
        ],
        &[("ann", &["mesh.slowres.>"]), ("bob", &["mesh.slowres.>"])],
    )
    .await;
    // The slow read holds until the test lets it go: what it holds is slots, not time.
    let (release, held) = tokio::sync::watch::channel(false);
    let slow = Resource::new("slow://x", "slow", move |_| {
        let mut held = held.clone();
        async move {
            let _ = held.wait_for(|go| *go).await;
            Ok(vec![text_contents("slow://x", "text/plain", "at last")])
        }
    });
    let m = Module::new("slowres", "1.0.0", "a module with a slow resource")
        .resource(slow)
        .resource(Resource::text("fast://y", "fast", "text/plain", "at once"))
        .resource(Resource::new("boom://z", "boom", |_| async {
            panic!("a handler's own fault")
        }));
    let _slowres = bus.serve(m).await;
    let (ann, bob) = (
        bus.client_as(Some("ann")).await,
        bus.client_as(Some("bob")).await,
    );
    let read = |client: &Client, uri: &str| {
        let nats = client.nats().clone();
        let body = json!({ "uri": uri }).to_string();
        async move {
            tokio::time::timeout(
                HANG,
                nats.request("mesh.slowres.resources.read", body.into()),
            )
            .await
            .expect("answered, not left waiting")
            .expect("a reply")
        }
    };
    let mut crowd: Vec<_> = (0..64)
        .map(|_| tokio::spawn(read(&ann, "slow://x")))
        .collect();
    // Past ann's share, her reads are answered busy at once, while the share's still run.
    let mut busy = 0;
    let waited = tokio::time::timeout(HANG, async {
        while busy < 48 {
            let (done, rest): (Vec<_>, Vec<_>) = crowd.into_iter().partition(|c| c.is_finished());
            crowd = rest;
            for c in done {
                let msg = c.await.unwrap();
                assert!(
                    retry_after(msg.headers.as_ref()).is_some(),
                    "answered before it was let go, and not busy: {msg:?}"
                );
                busy += 1;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        crowd
    })
    .await;
    let crowd = waited.expect("ann's reads past her share are answered busy at once");
    assert_eq!(crowd.len(), 16, "ann runs her share, no more");
    // Meanwhile bob's read takes its turn.
    let fast = read(&bob, "fast://y").await;
    let answered = features::read_reply(&fast.payload).unwrap().unwrap();
    assert_eq!(answered["contents"][0]["text"], "at once", "{answered:?}");
    // A handler that panics is a refusal said at once, not an answer the caller waits out.
    let boom = read(&bob, "boom://z").await;
    let refused = features::read_reply(&boom.payload).unwrap().unwrap_err();
    assert!(
        refused.message.contains("failed unexpectedly"),
        "{refused:?}"
    );
    release.send_replace(true);
    for c in crowd {
        let msg = c.await.unwrap();
        let read = features::read_reply(&msg.payload).unwrap().unwrap();
        assert_eq!(read["contents"][0]["text"], "at last", "{read:?}");
    }
}

/// A prompt that asks before it answers (SEP-2322 on `prompts/get`; the conformance suite's
/// fixture, served by module `test`), and a module's resource that asks the same before it is
/// read (`resources/read`): the official Python SDK gets them over `mesh mcp` under
/// 2026-07-28 (the question passed back, answered by the SDK, the prompt got again) and
/// before it (the relay asks the client by elicitation), each answer reaching the prompt once
/// asked; `mesh prompt` and `mesh read` ask as `mesh call` does (`--answer`, the terminal),
/// and say what was asked (exit 6) where nobody can answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_prompt_or_a_read_that_asks_first_is_answered_by_the_sdk_at_every_protocol() {
    const ASKS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/py/mcp_prompt_asks.py");
    let bus = Bus::single().await;
    let _catalog = bus.serve_catalog().await;
    let _test = bus.serve(mesh_conformance::module()).await;
    // A resource of a module's own that asks the same before it is read.
    use mesh_core::runtime::{Module, ReadAnswer, Resource, text_contents};
    let asker = Module::new("asker", "1.0.0", "asks before a read").resource(Resource::asking(
        "asker://note",
        "note",
        |read| async move {
            let context = read
                .continuation
                .as_ref()
                .and_then(|c| c.input_responses.as_ref())
                .and_then(|r| r.get("user_context"))
                .and_then(|a| a.pointer("/content/context"))
                .and_then(Value::as_str)
                .map(str::to_owned);
            Ok(match context {
                Some(c) => ReadAnswer::Contents(vec![text_contents(
                    &read.uri,
                    "text/plain",
                    &format!("A prompt for the context: {c}"),
                )]),
                None => ReadAnswer::Asks {
                    input_requests: [(
                        "user_context".to_owned(),
                        mesh_core::subjects::ToolResult::elicitation(
                            "What context should the prompt use?",
                            json!({"type": "object", "properties": {"context": {"type": "string"}}}),
                        ),
                    )]
                    .into_iter()
                    .collect(),
                    request_state: None,
                },
            })
        },
    ));
    let _asker = bus.serve(asker).await;
    for (mode, read) in [
        ("2026-07-28", ""),
        ("legacy", ""),
        ("2026-07-28", "asker://note"),
        ("legacy", "asker://note"),
    ] {
        let seen = json_of(
            Command::new(python())
                .env("MESH_READ", read)
                .arg(ASKS)
                .arg(mode)
                .arg(MESH)
                .args(["mcp", "--server", &bus.url()]),
        )
        .await;
        assert_eq!(
            seen,
            json!({"asked": ["What context should the prompt use?"],
                   "texts": ["A prompt for the context: the mesh"]}),
            "{mode} {read}"
        );
    }
    // The command line: answered with --answer, asked at a terminal, and said as waiting for
    // input (6, the question described) where nobody can answer.
    for asks in [
        vec!["prompt", "test_input_required_result_prompt"],
        vec!["read", "asker://note"],
    ] {
        let out = Command::new(MESH)
            .args(&asks)
            .args(["--server", &bus.url()])
            .stdin(std::process::Stdio::null())
            .output()
            .await
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(6), "{out:?}");
        assert!(
            err.contains("needs input that could not be asked for"),
            "{err}"
        );
        assert!(err.contains("What context should the prompt use?"), "{err}");
        assert!(out.stdout.is_empty(), "{out:?}");
        let out = Command::new(MESH)
            .args(&asks)
            .args(["--answer", "user_context.context=the mesh"])
            .args(["--server", &bus.url()])
            .stdin(std::process::Stdio::null())
            .output()
            .await
            .unwrap();
        assert_eq!(out.status.code(), Some(0), "{out:?}");
        assert!(
            String::from_utf8_lossy(&out.stdout).contains("A prompt for the context: the mesh"),
            "{out:?}"
        );
        let mut at_terminal = std::process::Command::new(MESH);
        at_terminal.args(&asks).args(["--server", &bus.url()]);
        let typed = tokio::task::spawn_blocking(move || {
            crate::pty::run_typing(&mut at_terminal, 100, 30, "a person's own\n")
        })
        .await
        .unwrap();
        assert_eq!(typed.code, 0, "{}", typed.output);
        assert!(
            typed.output.contains("What context should the prompt use?"),
            "{}",
            typed.output
        );
        assert!(
            typed
                .output
                .contains("A prompt for the context: a person's own"),
            "{}",
            typed.output
        );
    }
}
