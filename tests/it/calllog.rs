//! The call log: nats-server witnesses every call in the module's account, the log's account
//! keeps it, modules add their word, callers report denials; `mesh audit calls` reads it. And the attacks: a person and
//! a module reading, writing, purging, forging.

use std::time::Duration;

use serde_json::{Value, json};

use crate::bus::{Bus, module};
use crate::raw::Raw;
use mesh_bus::layout::AUDIT_SUBJECTS;
use mesh_core::subjects::FullName;

const GENEROUS: Duration = Duration::from_secs(10);

fn name(s: &str) -> FullName {
    FullName::parse(s).unwrap()
}

/// `mesh audit calls` as `user`, with `extra` arguments: exit code, stdout, stderr.
async fn audit_calls(bus: &Bus, user: &str, extra: &[&str]) -> (Option<i32>, String, String) {
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_mesh"))
        .args(["audit", "calls"])
        .args(bus.flags(user))
        .args(extra)
        .env("NO_COLOR", "1")
        .output()
        .await
        .unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn rows(stdout: &str) -> Vec<Value> {
    stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect()
}

/// The log as `user` reads it (`--json`), once `done` says all that is awaited is there:
/// nats-server's events and the modules' words arrive on their own time.
pub(crate) async fn logged(
    bus: &Bus,
    user: &str,
    extra: &[&str],
    done: impl Fn(&[Value]) -> bool,
) -> Vec<Value> {
    let mut args = vec!["--json"];
    args.extend_from_slice(extra);
    let mut last = Vec::new();
    for _ in 0..100 {
        let (code, out, err) = audit_calls(bus, user, &args).await;
        assert_eq!(code, Some(0), "{err}");
        last = rows(&out);
        if done(&last) {
            return last;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    panic!("the log never held what was awaited: {last:#?}");
}

fn find<'a>(rows: &'a [Value], caller: &str, tool: &str) -> Vec<&'a Value> {
    rows.iter()
        .filter(|r| r["caller"] == caller && r["tool"] == tool)
        .collect()
}

#[tokio::test]
async fn the_log_says_who_called_what_and_how_it_ended() {
    let mut ann: Vec<&str> = vec!["mesh.echo.>"];
    ann.extend(AUDIT_SUBJECTS);
    let bus = Bus::accounts_with(
        &[module("echo"), module("ghost")],
        &[
            ("ann", &ann),
            ("bob", &["mesh.echo.echo", "mesh.echo.fail", "mesh.ghost.>"]),
        ],
    )
    .await;
    bus.keep_log().await;
    let _echo = bus.serve(mesh_echo::module()).await;
    let bob = bus.client_as(Some("bob")).await;
    bob.call(&name("echo"), &json!({"text": "hi"}), GENEROUS)
        .await
        .unwrap();
    bob.call(&name("echo_fail"), &json!({"text": "no"}), GENEROUS)
        .await
        .unwrap();
    assert!(
        bob.call(&name("ghost_boo"), &json!({}), GENEROUS)
            .await
            .is_err()
    );
    assert!(
        bob.call(&name("echo_whoami"), &json!({}), GENEROUS)
            .await
            .is_err()
    );
    let ann_client = bus.client_as(Some("ann")).await;
    ann_client
        .call(&name("echo_whoami"), &json!({}), GENEROUS)
        .await
        .unwrap();

    let all = logged(&bus, "ann", &[], |r| {
        find(r, "bob@PEOPLE", "echo").len() == 1
            && find(r, "bob@PEOPLE", "fail").len() == 1
            && find(r, "ann@PEOPLE", "whoami").len() == 1
            && r.iter().any(|c| c["module"] == "ghost")
            && find(r, "bob@PEOPLE", "whoami").len() == 1
    })
    .await;
    let echo = find(&all, "bob@PEOPLE", "echo")[0];
    assert_eq!(echo["outcome"], "ok", "{echo}");
    assert_eq!(echo["seen"], "bus_and_module", "{echo}");
    assert_eq!(echo["status"], 200);
    assert!(echo["total_us"].as_u64().unwrap() > 0);
    // Nothing of the arguments but their size and digest.
    assert_eq!(echo["arguments"]["bytes"], 13);
    assert!(!echo.to_string().contains("\"hi\""), "{echo}");
    assert_eq!(find(&all, "bob@PEOPLE", "fail")[0]["outcome"], "tool_error");
    let ghost = all.iter().find(|c| c["module"] == "ghost").unwrap();
    assert_eq!(ghost["outcome"], "nobody", "{ghost}");
    assert_eq!(ghost["seen"], "bus");
    let denied = find(&all, "bob@PEOPLE", "whoami")[0];
    assert_eq!(denied["outcome"], "denied", "{denied}");
    assert_eq!(denied["seen"], "caller");
    // Where the layout does not know a module's tools, all its subjects are one export: a
    // verb's request is witnessed as a call to the module, the tool unnamed (a verb has no
    // word), and no module's silence hides it.
    bob.tools("echo", GENEROUS).await.unwrap();
    logged(&bus, "ann", &[], |r| {
        r.iter().any(|c| {
            c["caller"] == "bob@PEOPLE"
                && c["module"] == "echo"
                && c.get("tool").is_none()
                && c["seen"] == "bus"
        })
    })
    .await;

    // Filters: a person, a tool, an outcome.
    let (code, out, err) = audit_calls(
        &bus,
        "ann",
        &["--json", "--person", "bob", "--outcome", "denied"],
    )
    .await;
    assert_eq!(code, Some(0), "{err}");
    let only = rows(&out);
    assert_eq!(only.len(), 1, "{only:#?}");
    let (code, out, err) = audit_calls(&bus, "ann", &["--json", "--tool", "echo_fail"]).await;
    assert_eq!(code, Some(0), "{err}");
    let fails = rows(&out);
    assert!(
        !fails.is_empty() && fails.iter().all(|c| c["tool"] == "fail"),
        "{fails:#?}"
    );
    // Since a time after every call: none; since an hour ago: all of them.
    let later = mesh_core::subjects::calllog::rfc3339(
        time::OffsetDateTime::now_utc() + time::Duration::minutes(1),
    );
    let (code, out, err) = audit_calls(&bus, "ann", &["--json", "--since", &later]).await;
    assert_eq!(code, Some(0), "{err}");
    assert!(rows(&out).is_empty(), "{out}");
    let (_, out, _) = audit_calls(&bus, "ann", &["--json", "--since", "1h"]).await;
    assert_eq!(
        rows(&out).len(),
        all.len() + 1,
        "and bob's tools verb: {out}"
    );

    // Against a configuration where bob may no longer call echo: flagged.
    let stricter = std::fs::read_to_string(bus.config_path()).unwrap().replace(
        r#""mesh.echo.echo", "mesh.echo.fail""#,
        r#""mesh.echo.fail""#,
    );
    let conf = bus.config_path().with_file_name("stricter.conf");
    std::fs::write(&conf, stricter).unwrap();
    let (code, out, err) = audit_calls(
        &bus,
        "ann",
        &[
            "--json",
            "--person",
            "bob",
            "--config",
            conf.to_str().unwrap(),
        ],
    )
    .await;
    assert_eq!(code, Some(0), "{err}");
    let flagged = rows(&out);
    let echo = flagged.iter().find(|c| c["tool"] == "echo").unwrap();
    assert_eq!(echo["allowed_today"], false, "{echo}");
    let fail = flagged.iter().find(|c| c["tool"] == "fail").unwrap();
    assert_eq!(fail["allowed_today"], true, "{fail}");
    // And as a table, in a terminal's width.
    let (code, out, _) = audit_calls(
        &bus,
        "ann",
        &["--person", "bob", "--config", conf.to_str().unwrap()],
    )
    .await;
    assert_eq!(code, Some(0));
    let head = out.lines().next().unwrap();
    for col in [
        "TIME",
        "CALLER",
        "TOOL",
        "OUTCOME",
        "TOOK",
        "SEEN BY",
        "ALLOWED TODAY",
    ] {
        assert!(head.contains(col), "{out}");
    }
    assert!(
        out.lines().any(|l| l.contains("echo") && l.contains("NO")),
        "{out}"
    );
}

#[tokio::test]
async fn a_module_acting_for_a_person_is_logged_with_them() {
    let mut ann: Vec<&str> = vec!["mesh.caller.>", "mesh.catalog.keys"];
    ann.extend(AUDIT_SUBJECTS);
    let bus = Bus::accounts_with(
        &[
            module("catalog"),
            crate::bus::acting_for_people("caller", &["echo"]),
            module("echo"),
        ],
        &[("ann", &ann)],
    )
    .await;
    bus.keep_log().await;
    // The issuer, whose keys the audit checks each ticket behind a person acted for with.
    let _catalog = bus.serve_catalog().await;
    let _echo = bus.serve(mesh_echo::module()).await;
    // The module calls echo_whoami for the person who called it, with their ticket.
    let ticket = bus.ticket("ann", "caller", "caller_relay", Duration::from_secs(60));
    let module_client = bus.client_as(Some("caller")).await;
    let acting = module_client.for_person(&ticket);
    let r = acting
        .call(&name("echo_whoami"), &json!({}), GENEROUS)
        .await
        .unwrap();
    assert!(r.text_content().contains("ann"), "{}", r.text_content());
    let all = logged(&bus, "ann", &[], |r| {
        r.iter()
            .any(|c| c["tool"] == "whoami" && c["seen"] == "bus_and_module")
    })
    .await;
    let call = all.iter().find(|c| c["tool"] == "whoami").unwrap();
    assert_eq!(call["caller"], "caller@MODULE_caller", "{call}");
    assert_eq!(call["for_person"], "ann@PEOPLE", "{call}");
    let (_, out, _) = audit_calls(&bus, "ann", &["--json", "--person", "ann"]).await;
    assert!(rows(&out).iter().any(|c| c["tool"] == "whoami"), "{out}");
}

/// A person who is no auditor, and a module with its own credential, try to read, write,
/// purge and forge the log — with the `mesh` command, and byte for byte over TCP.
#[tokio::test]
async fn nobody_but_its_owner_and_auditors_reads_and_nobody_writes_the_log() {
    let mut ann: Vec<&str> = vec!["mesh.echo.>"];
    ann.extend(AUDIT_SUBJECTS);
    let bus = Bus::accounts_with(
        &[module("echo")],
        &[("ann", &ann), ("bob", &["mesh.echo.>"])],
    )
    .await;
    bus.keep_log().await;
    let _echo = bus.serve(mesh_echo::module()).await;
    let bob = bus.client_as(Some("bob")).await;
    bob.call(&name("echo"), &json!({"text": "x"}), GENEROUS)
        .await
        .unwrap();
    let before = logged(&bus, "ann", &[], |r| {
        !find(r, "bob@PEOPLE", "echo").is_empty()
    })
    .await;

    // Reading: bob is refused by the bus (exit 4, said so), and so are raw direct gets.
    let (code, _, err) = audit_calls(&bus, "bob", &[]).await;
    assert_eq!(code, Some(4), "{err}");
    assert!(err.contains("auditors"), "{err}");
    let mut raw_bob = Raw::connect(&bus.url(), "bob", "pw-bob").await;
    for subject in AUDIT_SUBJECTS {
        let refused = raw_bob.publish(subject, br#"{"seq":1}"#).await;
        assert!(
            refused.is_some_and(|e| e.contains("Permissions Violation")),
            "{subject}"
        );
    }
    for (subject, body) in [
        ("$JS.API.STREAM.INFO.MESH_CALLS", &b""[..]),
        ("$JS.API.STREAM.PURGE.MESH_CALLS", b""),
        ("$JS.API.STREAM.DELETE.MESH_CALLS", b""),
        ("$JS.API.STREAM.MSG.DELETE.MESH_CALLS", br#"{"seq":1}"#),
        ("$JS.API.CONSUMER.CREATE.MESH_CALLS", b"{}"),
        (
            "mesh-log.calls.echo",
            br#"{"type":"io.nats.server.metric.v1.service_latency","status":200}"#,
        ),
        ("mesh-log.words", b"{}"),
    ] {
        let refused = raw_bob.publish(subject, body).await;
        assert!(
            refused.is_some_and(|e| e.contains("Permissions Violation")),
            "bob on {subject}"
        );
    }

    // A module's credential: its account has no JetStream at all, and the log's is not its.
    let mut raw_echo = Raw::connect(&bus.url(), "echo", "pw-echo").await;
    for subject in [
        "$JS.API.DIRECT.GET.MESH_CALLS",
        "$JS.API.STREAM.PURGE.MESH_CALLS",
        "$JS.API.STREAM.DELETE.MESH_WORDS",
        "$JS.API.STREAM.CREATE.FORGE",
    ] {
        let reply = raw_echo.request(subject, b"", br#"{"seq":1}"#).await;
        let text = format!("{reply:?}");
        assert!(
            !text.contains("service_latency") && !text.contains("\"success\":true"),
            "echo on {subject}: {text}"
        );
    }
    let echo = bus.client_as(Some("echo")).await;
    let js = async_nats::jetstream::new(echo.nats().clone());
    assert!(js.get_stream("MESH_CALLS").await.is_err());
    assert!(
        js.create_stream(async_nats::jetstream::stream::Config {
            name: "FORGE".into(),
            subjects: vec!["forge.x".into()],
            republish: Some(async_nats::jetstream::stream::Republish {
                source: "forge.x".into(),
                destination: "_R_.mesh-log.calls.echo".into(),
                headers_only: false,
            }),
            ..Default::default()
        })
        .await
        .is_err(),
        "a module made a stream that could republish into the log"
    );
    // nats-server publishes its events of echo's calls in echo's account, under `_R_.`:
    // echo may not publish there, nor name it as where an answer goes (an answer to its own
    // request would land there), nor reach the log's subjects anywhere else.
    let forged = br#"{"type":"io.nats.server.metric.v1.service_latency","status":200,"requestor":{"acc":"PEOPLE","user":"forged","id":1}}"#;
    for subject in [
        "_R_.mesh-log.calls.echo",
        "_R_.mesh-log.calls.echo.echo",
        "mesh-log.calls.echo",
    ] {
        let refused = raw_echo.publish(subject, forged).await;
        assert!(
            refused.is_some_and(|e| e.contains("Permissions Violation")),
            "echo on {subject}"
        );
    }
    let refused = raw_echo
        .publish_with_reply("mesh.catalog.keys", "_R_.mesh-log.calls.echo", b"")
        .await;
    assert!(
        refused.is_some_and(|e| e.contains("Permissions Violation")),
        "an answer routed into the log"
    );
    // An answer routed to the log's subject without the prefix lands in echo's own account,
    // which the log does not hear.
    assert_eq!(
        raw_echo
            .publish_with_reply("mesh.catalog.keys", "mesh-log.calls.echo", b"")
            .await,
        None
    );
    // Its own word it may say, stamped with its name: a word claiming another module or
    // caller stays its own.
    echo.nats()
        .publish(
            "mesh-log.words",
            serde_json::to_vec(&json!({
                "name": "forged", "caller": {"acc": "PEOPLE", "user": "forged", "id": 1},
                "at": mesh_core::subjects::calllog::now(), "took_us": 1, "outcome": "ok",
                "arguments": {"bytes": 0, "digest": ""}
            }))
            .unwrap()
            .into(),
        )
        .await
        .unwrap();
    crate::bus::module_round_trip(echo.nats()).await;
    // A module says words only as itself: another module's subject is refused.
    let refused = raw_echo.publish("mesh-log.words.avu", b"{}").await;
    assert!(refused.is_some_and(|e| e.contains("Permissions Violation")));
    // A person reports only as themselves: under another's name the bus refuses it; under
    // their own it is kept as their word, marked as a caller's report.
    let report = serde_json::to_vec(&json!({
        "subject": "mesh.echo.secret", "at": mesh_core::subjects::calllog::now(), "outcome": "denied"
    }))
    .unwrap();
    for other in [
        "mesh-log.reports.ann",
        "mesh-log.reports.PEOPLE.ann",
        "mesh-log.reports",
    ] {
        let refused = raw_bob.publish(other, &report).await;
        assert!(
            refused.is_some_and(|e| e.contains("Permissions Violation")),
            "{other}"
        );
    }
    assert_eq!(raw_bob.publish("mesh-log.reports.bob", &report).await, None);

    let after = logged(&bus, "ann", &["--all"], |r| {
        r.iter().any(|c| c["tool"] == "forged") && r.iter().any(|c| c["tool"] == "secret")
    })
    .await;
    let word = after.iter().find(|c| c["tool"] == "forged").unwrap();
    assert_eq!(word["module"], "echo", "{word}");
    assert_eq!(word["seen"], "module", "{word}");
    assert!(
        after
            .iter()
            .all(|c| c["seen"] != "bus" || c["caller"] != "forged@PEOPLE"),
        "a forged server event got in: {after:#?}"
    );
    let secret: Vec<_> = after.iter().filter(|c| c["tool"] == "secret").collect();
    assert_eq!(secret.len(), 1, "{after:#?}");
    assert_eq!(secret[0]["caller"], "bob@PEOPLE");
    assert_eq!(secret[0]["seen"], "caller");
    // Nothing was taken out: every call seen before is still there.
    for b in &before {
        assert!(after.contains(b), "{b} is gone from the log");
    }

    // The owner may read; even the owner cannot purge (deny_purge), only age and size do.
    let (code, out, err) = audit_calls(&bus, "owner", &["--json"]).await;
    assert_eq!(code, Some(0), "{err}");
    assert!(!rows(&out).is_empty());
    let owner = bus.client_as(Some("owner")).await;
    let js = async_nats::jetstream::new(owner.nats().clone());
    let mut calls = js.get_stream("MESH_CALLS").await.unwrap();
    assert!(calls.purge().await.is_err());
    let state = calls.info().await.unwrap().state.clone();
    assert!(state.messages > 0 && state.first_sequence == 1, "{state:?}");
}

/// The grants file's `log { values: [echo] }`: that tool's arguments and result are
/// kept whole in its module's word; every other tool's only by size and digest.
#[tokio::test]
async fn values_are_kept_only_of_the_tools_the_grants_name() {
    let mut ann: Vec<&str> = vec!["mesh.echo.>"];
    ann.extend(AUDIT_SUBJECTS);
    let bus = Bus::accounts_with(&[module("catalog"), module("echo")], &[("ann", &ann)]).await;
    bus.keep_log().await;
    let dir = tempfile::tempdir().unwrap();
    let limits = dir.path().join("limits.json");
    let grants = mesh_bus::grants::Grants::read(
        &mesh_bus::natsconf::parse_str(
            r#"
            modules: [catalog, echo]
            people { ann {} }
            log { values: [echo] }
            "#,
            std::path::Path::new("grants.conf"),
        )
        .unwrap(),
    )
    .unwrap();
    std::fs::write(
        &limits,
        serde_json::to_string(&grants.limits_table()).unwrap(),
    )
    .unwrap();
    let _catalog = bus.serve_catalog_with_limits(Some(limits)).await;
    let _echo = bus.serve(mesh_echo::module()).await;
    let ann_client = bus.client_as(Some("ann")).await;
    ann_client
        .call(&name("echo"), &json!({"text": "keep me"}), GENEROUS)
        .await
        .unwrap();
    ann_client
        .call(&name("echo_fail"), &json!({"text": "not me"}), GENEROUS)
        .await
        .unwrap();
    let all = logged(&bus, "ann", &[], |r| {
        !find(r, "ann@PEOPLE", "echo").is_empty() && !find(r, "ann@PEOPLE", "fail").is_empty()
    })
    .await;
    let kept = find(&all, "ann@PEOPLE", "echo")[0];
    assert_eq!(
        kept["arguments"]["value"],
        json!({"text": "keep me"}),
        "{kept}"
    );
    assert_eq!(
        kept["result"]["value"]["content"][0]["text"], "keep me",
        "{kept}"
    );
    let not = find(&all, "ann@PEOPLE", "fail")[0];
    assert!(not["arguments"].get("value").is_none(), "{not}");
    assert!(!not.to_string().contains("not me"), "{not}");
    assert!(
        not["arguments"]["digest"]
            .as_str()
            .unwrap()
            .starts_with("SHA-256=")
    );
    // A file naming a tool of a module it does not declare is refused with its reason.
    let refused = mesh_bus::grants::Grants::read(
        &mesh_bus::natsconf::parse_str(
            "modules: [echo]\nlog { values: [ghost_boo] }",
            std::path::Path::new("grants.conf"),
        )
        .unwrap(),
    )
    .unwrap_err();
    assert!(refused.to_string().contains("ghost"), "{refused}");
}

/// `--follow` on a terminal: calls appear as they are made, in a table that fits its width,
/// and Ctrl-C (SIGINT to the whole process group, from the terminal) ends it cleanly.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn follow_shows_calls_as_they_come_until_ctrl_c() {
    let mut ann: Vec<&str> = vec!["mesh.echo.>"];
    ann.extend(AUDIT_SUBJECTS);
    let bus = Bus::accounts_with(&[module("echo")], &[("ann", &ann)]).await;
    bus.keep_log().await;
    let _echo = bus.serve(mesh_echo::module()).await;
    let flags = bus.flags("ann");
    let following = tokio::task::spawn_blocking(move || {
        let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_mesh"));
        cmd.args(["audit", "calls", "--follow"])
            .args(&flags)
            .env("NO_COLOR", "1");
        crate::pty::run_typing_after(&mut cmd, 100, 30, "\x03", Duration::from_secs(6))
    });
    // Made while it follows.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let ann_client = bus.client_as(Some("ann")).await;
    ann_client
        .call(&name("echo"), &json!({"text": "live"}), GENEROUS)
        .await
        .unwrap();
    let seen = following.await.unwrap();
    assert_eq!(seen.code, 0, "{}", seen.output);
    let row = seen
        .output
        .lines()
        .find(|l| l.contains("echo"))
        .unwrap_or_else(|| panic!("the call never showed:\n{}", seen.output));
    assert!(row.contains("ann@PEOPLE") && row.contains("ok"), "{row}");
    assert!(
        seen.output.lines().all(|l| l.chars().count() <= 100),
        "{}",
        seen.output
    );
}

/// A module cannot recast a call: where the layout knows its tools, each is exported and
/// witnessed apart, and nats-server's event names the tool eve called, whatever the module's
/// word says. The word, naming another tool, stays the module's alone.
#[tokio::test]
async fn a_module_cannot_recast_the_tool_it_was_called_on() {
    use futures_util::StreamExt;
    let mut root: Vec<&str> = vec!["mesh.>"];
    root.extend(AUDIT_SUBJECTS);
    let mut evil = module("evil");
    evil.tools = Some(["delete_everything", "lookup"].map(String::from).into());
    let bus = Bus::accounts_with(&[evil], &[("root", &root), ("eve", &["mesh.evil.>"])]).await;
    bus.keep_log().await;
    // The module, by hand: it answers, and says each call was `lookup`, for the caller the
    // stamp names, so that its word would match the server's event.
    let nats = bus.client_as(Some("evil")).await.nats().clone();
    let mut calls = nats
        .queue_subscribe("mesh.evil.*", "evil".into())
        .await
        .unwrap();
    crate::bus::module_round_trip(&nats).await;
    let liar = nats.clone();
    tokio::spawn(async move {
        while let Some(msg) = calls.next().await {
            if msg.subject.ends_with(".tools") || msg.subject.ends_with(".cancel") {
                continue;
            }
            let stamp: Value = msg
                .headers
                .as_ref()
                .and_then(|h| h.get("Nats-Request-Info"))
                .and_then(|v| serde_json::from_str(v.as_str()).ok())
                .unwrap_or_default();
            let word = json!({
                "name": "lookup", "caller": stamp, "for_person": "root@PEOPLE", "obo": true,
                "at": mesh_core::subjects::calllog::now(), "took_us": 1, "outcome": "ok",
                "arguments": {"bytes": 0, "digest": ""}
            });
            liar.publish("mesh-log.words", word.to_string().into())
                .await
                .unwrap();
            if let Some(reply) = msg.reply {
                liar.publish(reply, r#"{"content":[]}"#.into())
                    .await
                    .unwrap();
            }
        }
    });
    let eve = bus.client_as(Some("eve")).await;
    eve.call(&name("evil_delete_everything"), &json!({}), GENEROUS)
        .await
        .unwrap();

    let all = logged(&bus, "root", &["--all"], |r| {
        !find(r, "eve@PEOPLE", "delete_everything").is_empty()
            && !find(r, "eve@PEOPLE", "lookup").is_empty()
    })
    .await;
    let called = find(&all, "eve@PEOPLE", "delete_everything");
    assert_eq!(called.len(), 1, "{all:#?}");
    assert_eq!(called[0]["seen"], "bus", "{all:#?}");
    assert_eq!(called[0]["status"], 200);
    // The lie is there as what it is: a word nats-server saw no call for, acting for nobody.
    let said = find(&all, "eve@PEOPLE", "lookup");
    assert!(said.iter().all(|c| c["seen"] == "module"), "{all:#?}");
    assert!(
        all.iter().all(|c| c.get("for_person").is_none()),
        "{all:#?}"
    );
    // root made no call and nobody acted for root.
    let (code, out, err) =
        audit_calls(&bus, "root", &["--json", "--all", "--person", "root"]).await;
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(out.trim(), "", "{out}");
    // And the module's own verbs are not calls: nothing of eve's `tools` request is kept.
    let mut raw = Raw::connect(&bus.url(), "eve", "pw-eve").await;
    for _ in 0..20 {
        raw.publish("mesh.evil.tools", b"").await;
        raw.publish("mesh.evil.cancel", b"x").await;
    }
    // A call after them: once its event is kept, theirs would be too.
    eve.call(&name("evil_lookup"), &json!({}), GENEROUS)
        .await
        .unwrap();
    let after = logged(&bus, "root", &["--all"], |r| {
        r.iter()
            .any(|c| c["tool"] == "lookup" && c["status"] == 200)
    })
    .await;
    assert!(
        after
            .iter()
            .all(|c| c["tool"] != "tools" && c["tool"] != "cancel"),
        "{after:#?}"
    );
}

/// A flood of calls the module refuses spends its sender's budget, not the module's part of
/// the log: every call is witnessed by the bus, but the module says at most ten of one
/// caller's refusals a second, and the next one said counts those it did not. Another
/// caller's words are all there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_of_refused_calls_spends_its_senders_words_only() {
    let mut root: Vec<&str> = vec!["mesh.echo.>"];
    root.extend(AUDIT_SUBJECTS);
    let mut echo = module("echo");
    echo.tools = Some(["echo"].map(String::from).into());
    let bus = Bus::accounts_with(&[echo], &[("root", &root), ("guest", &["mesh.echo.echo"])]).await;
    bus.keep_log().await;
    let _echo = bus.serve(mesh_echo::module()).await;
    let started = std::time::Instant::now();
    // Arguments the schema refuses, as fast as one connection sends them.
    let guest = bus.client_as(Some("guest")).await;
    let nats = guest.nats().clone();
    let floods: Vec<_> = (0..400)
        .map(|_| {
            let nats = nats.clone();
            tokio::spawn(async move {
                nats.request("mesh.echo.echo", r#"{"text": 7}"#.into())
                    .await
                    .map(|m| m.payload.len())
            })
        })
        .collect();
    for f in floods {
        assert!(f.await.unwrap().is_ok_and(|n| n > 0));
    }
    let seconds = started.elapsed().as_secs() + 1;
    let root_client = bus.client_as(Some("root")).await;
    for _ in 0..3 {
        root_client
            .call(&name("echo"), &json!({"text": "mine"}), GENEROUS)
            .await
            .unwrap();
    }
    // A refusal after a second: it says how many went unsaid.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    nats.request("mesh.echo.echo", r#"{"text": 7}"#.into())
        .await
        .unwrap();
    let all = logged(&bus, "root", &["--all"], |r| {
        find(r, "root@PEOPLE", "echo")
            .iter()
            .filter(|c| c["seen"] == "bus_and_module")
            .count()
            == 3
            && r.iter()
                .any(|c| c["unsaid"].as_u64().is_some_and(|n| n > 0))
            && find(r, "guest@PEOPLE", "echo").len() >= 401
    })
    .await;
    let guest_rows = find(&all, "guest@PEOPLE", "echo");
    // Every one of guest's calls is the bus's record.
    assert!(guest_rows.iter().all(|c| c["seen"] != "module"), "{all:#?}");
    assert!(guest_rows.len() >= 401);
    let said = guest_rows
        .iter()
        .filter(|c| c["seen"] == "bus_and_module")
        .count() as u64;
    assert!(said <= 10 * (seconds + 2), "{said} words in {seconds} s");
    let unsaid: u64 = all.iter().filter_map(|c| c["unsaid"].as_u64()).sum();
    assert!(said + unsaid >= 401, "said {said}, unsaid {unsaid}");
}

/// What the audit cannot show, it says: past `--max` it shows the newest calls and counts
/// the older ones it left out; when the log's limits pushed records out from inside the
/// window asked for, it says from when the log holds them.
#[tokio::test]
async fn the_audit_says_what_it_left_out_and_what_the_log_lost() {
    let mut ann: Vec<&str> = vec!["mesh.echo.>"];
    ann.extend(AUDIT_SUBJECTS);
    let mut echo = module("echo");
    echo.tools = Some(["echo"].map(String::from).into());
    let bus = Bus::accounts_with(&[echo], &[("ann", &ann)]).await;
    // A log of 16 KiB a stream: a few dozen events fill it, and a batch of words (at most
    // 14 KiB) still fits.
    let owner = bus
        .client_as(Some(mesh_core::subjects::calllog::OWNER))
        .await;
    let small = mesh_bus::calllog::Retention {
        max_age: Duration::from_secs(3600),
        max_bytes: 16 * 1024,
    };
    mesh_bus::calllog::ensure(owner.nats(), small, 1, Default::default())
        .await
        .unwrap();
    let _echo = bus.serve(mesh_echo::module()).await;
    let client = bus.client_as(Some("ann")).await;
    // nats-server sends each call's event as the call ends, not in the calls' order: the
    // last call is made once the 60 before it have all been stored, so that its event is
    // the newest the log holds.
    let js = async_nats::jetstream::new(owner.nats().clone());
    let stored = || async {
        let mut stream = js
            .get_stream(mesh_core::subjects::calllog::CALLS_STREAM)
            .await
            .unwrap();
        stream.info().await.unwrap().state.last_sequence
    };
    let before = stored().await;
    for i in 0..60 {
        client
            .call(&name("echo"), &json!({"text": format!("{i}")}), GENEROUS)
            .await
            .unwrap();
    }
    let started = std::time::Instant::now();
    while stored().await < before + 60 {
        assert!(
            started.elapsed() < GENEROUS,
            "the 60 calls' events were not all stored"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // The last one, told apart by its size, once it is kept.
    client
        .call(&name("echo"), &json!({"text": "the last"}), GENEROUS)
        .await
        .unwrap();
    let last = |c: &Value| c["arguments"]["bytes"] == 19 && c["seen"] == "bus_and_module";
    let kept = logged(&bus, "ann", &[], |r| r.iter().any(last)).await;
    assert!(
        kept.len() < 61,
        "the log kept all 61 in 16 KiB: {}",
        kept.len()
    );
    let (code, _, err) = audit_calls(&bus, "ann", &["--json", "--since", "1h"]).await;
    assert_eq!(code, Some(0), "{err}");
    assert!(
        err.contains("the log holds nats-server's events of calls only from"),
        "{err}"
    );
    // Past --max: the newest shown, the older counted.
    let (code, out, err) = audit_calls(&bus, "ann", &["--json", "--max", "2"]).await;
    assert_eq!(code, Some(0), "{err}");
    assert!(
        err.contains("oldest of nats-server's events of calls since")
            && err.contains("were not read (--max 2)"),
        "{err}"
    );
    let newest = rows(&out);
    assert!(
        newest.iter().any(last),
        "the newest call is shown: {newest:#?}"
    );
}

/// Issue 45: a caller's report is free text its caller writes, `at` and `subject` included.
/// The table's TIME is when the bus took the report in, and its TOOL only a tool name that
/// reads as one: what a caller writes cannot pass for another time, another tool or another
/// row (a newline, a carriage return, columns of its own).
#[tokio::test]
async fn a_callers_report_cannot_write_the_time_and_tool_columns() {
    let mut ann: Vec<&str> = vec!["mesh.echo.>"];
    ann.extend(AUDIT_SUBJECTS);
    let bus = Bus::accounts_with(
        &[module("echo")],
        &[("ann", &ann), ("bob", &["mesh.echo.>"])],
    )
    .await;
    bus.keep_log().await;
    let mut raw_bob = Raw::connect(&bus.url(), "bob", "pw-bob").await;
    let forged_row = "1999-12-31 23:59:59.000  root@PEOPLE  avu_delete  ok  1.0ms  bus+module";
    let reports = [
        // A time long past, and a subject carrying a whole forged row after a newline.
        json!({"subject": format!("mesh.avu.delete\n{forged_row}"),
            "at": "1999-12-31T23:59:59Z", "outcome": "denied"}),
        // A time that is no time (the table printed it as written), columns after a tool.
        json!({"subject": "mesh.echo.echo  ok  1.0ms  bus+module\r",
            "at": forged_row, "outcome": "denied"}),
        // A well-formed report with a time of its own choosing.
        json!({"subject": "mesh.echo.secret", "at": "2001-01-01T00:00:00Z", "outcome": "denied"}),
    ];
    let sent_from = time::OffsetDateTime::now_utc() - Duration::from_secs(5);
    for r in &reports {
        let body = serde_json::to_vec(r).unwrap();
        assert_eq!(raw_bob.publish("mesh-log.reports.bob", &body).await, None);
    }
    let sent_until = time::OffsetDateTime::now_utc() + Duration::from_secs(5);
    let kept = logged(&bus, "ann", &["--person", "bob"], |r| r.len() == 3).await;
    let ours = |at: &time::OffsetDateTime| *at >= sent_from && *at <= sent_until;
    for c in &kept {
        assert_eq!(c["seen"], "caller", "{c}");
        let at = mesh_core::subjects::calllog::parse_time(c["at"].as_str().unwrap());
        assert!(
            at.as_ref().is_some_and(ours),
            "a time the caller wrote: {c}"
        );
    }
    let tools: Vec<&Value> = kept.iter().map(|c| &c["tool"]).collect();
    assert_eq!(
        tools.iter().filter(|t| **t == "secret").count(),
        1,
        "{kept:#?}"
    );
    assert!(
        tools.iter().all(|t| t.is_null() || *t == "secret"),
        "a tool that is no tool name: {kept:#?}"
    );

    // The table, whole (a pipe): one line a report, each TIME the bus's and each TOOL
    // either a tool name or `?`.
    let (code, out, err) = audit_calls(&bus, "ann", &["--person", "bob"]).await;
    assert_eq!(code, Some(0), "{err}");
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 4, "{out}");
    assert!(!out.contains("1999") && !out.contains("2001"), "{out}");
    assert!(
        !out.contains("root@PEOPLE") && !out.contains("avu_delete"),
        "{out}"
    );
    let mut shown = Vec::new();
    for line in &lines[1..] {
        let cells: Vec<&str> = line
            .split("  ")
            .map(str::trim)
            .filter(|c| !c.is_empty())
            .collect();
        assert_eq!(cells.len(), 6, "{line:?}");
        // `2026-12-01 20:38:42.775`, as RFC 3339.
        let at = mesh_core::subjects::calllog::parse_time(&format!(
            "{}Z",
            cells[0].replacen(' ', "T", 1)
        ));
        assert!(
            at.as_ref().is_some_and(ours),
            "TIME {:?}: {line:?}",
            cells[0]
        );
        assert_eq!(cells[1], "bob@PEOPLE", "{line:?}");
        assert!(
            cells[2] == "?" || FullName::parse(cells[2]).is_ok(),
            "TOOL {:?}: {line:?}",
            cells[2]
        );
        assert_eq!(cells[3], "denied", "{line:?}");
        assert_eq!(cells[5], "caller", "{line:?}");
        shown.push(cells[2].to_owned());
    }
    shown.sort();
    assert_eq!(shown, ["?", "?", "echo_secret"], "{out}");
}

/// `mesh audit calls --config` of a server in operator mode (issue 49), whatever mode the
/// rest of the run is in: real calls through a real nats-server trusting an operator, and
/// each call's line flagged by what that configuration allows today — read from the
/// resolver it names (its accounts preloaded, the users' credential files beside it), there
/// being no password to read. First the running server's own configuration, then another
/// server's, signed by the same operator, where bob may no longer call echo.
#[tokio::test]
async fn an_operator_mode_servers_configuration_flags_the_calls_through_its_resolver() {
    let mut ann: Vec<&str> = vec!["mesh.echo.>"];
    ann.extend(AUDIT_SUBJECTS);
    let modules = [module("echo")];
    let bus = Bus::operated(
        &modules,
        &[
            ("ann", &ann),
            ("bob", &["mesh.echo.echo", "mesh.echo.fail"]),
        ],
    )
    .await;
    bus.keep_log().await;
    let _echo = bus.serve(mesh_echo::module()).await;
    let bob = bus.client_as(Some("bob")).await;
    bob.call(&name("echo"), &json!({"text": "hi"}), GENEROUS)
        .await
        .unwrap();
    bob.call(&name("echo_fail"), &json!({"text": "no"}), GENEROUS)
        .await
        .unwrap();
    assert!(
        bob.call(&name("echo_whoami"), &json!({}), GENEROUS)
            .await
            .is_err()
    );
    bus.client_as(Some("ann"))
        .await
        .call(&name("echo_whoami"), &json!({}), GENEROUS)
        .await
        .unwrap();

    let conf = bus.server_config_path();
    let text = std::fs::read_to_string(&conf).unwrap();
    assert!(
        text.contains("resolver") && !text.contains("password"),
        "not an operator-mode configuration: {text}"
    );
    let conf = conf.to_str().unwrap();
    let all = logged(&bus, "ann", &["--config", conf], |r| {
        find(r, "bob@PEOPLE", "echo").len() == 1
            && find(r, "bob@PEOPLE", "fail").len() == 1
            && find(r, "bob@PEOPLE", "whoami").len() == 1
            && find(r, "ann@PEOPLE", "whoami").len() == 1
            && r.iter().all(|c| c.get("allowed_today").is_some())
    })
    .await;
    // Each line: its caller by the name the layout gives them (never an account's or a
    // user's key), how it ended, who saw it, and whether today's configuration allows it.
    let line = |caller: &str, tool: &str| {
        let c = find(&all, caller, tool)[0];
        (
            c["module"].as_str().unwrap().to_owned(),
            c["outcome"].as_str().unwrap().to_owned(),
            c["seen"].as_str().unwrap().to_owned(),
            c["allowed_today"].as_bool(),
        )
    };
    let want = |outcome: &str, seen: &str, allowed: bool| {
        (
            "echo".to_owned(),
            outcome.to_owned(),
            seen.to_owned(),
            Some(allowed),
        )
    };
    assert_eq!(
        line("bob@PEOPLE", "echo"),
        want("ok", "bus_and_module", true)
    );
    assert_eq!(
        line("bob@PEOPLE", "fail"),
        want("tool_error", "bus_and_module", true)
    );
    assert_eq!(
        line("bob@PEOPLE", "whoami"),
        want("denied", "caller", false)
    );
    assert_eq!(
        line("ann@PEOPLE", "whoami"),
        want("ok", "bus_and_module", true)
    );
    assert_eq!(all.len(), 4, "{all:#?}");

    // Another server's configuration, the same operator's: bob may call fail only.
    let elsewhere = tempfile::tempdir().unwrap();
    let stricter = bus.operated_elsewhere(
        &modules,
        &[("ann", &ann), ("bob", &["mesh.echo.fail"])],
        elsewhere.path(),
    );
    let stricter = stricter.to_str().unwrap();
    let (code, out, err) = audit_calls(
        &bus,
        "ann",
        &["--json", "--person", "bob", "--config", stricter],
    )
    .await;
    assert_eq!(code, Some(0), "{err}");
    let flagged: Vec<(String, String, bool)> = rows(&out)
        .iter()
        .map(|c| {
            (
                c["tool"].as_str().unwrap().to_owned(),
                c["outcome"].as_str().unwrap().to_owned(),
                c["allowed_today"].as_bool().unwrap(),
            )
        })
        .collect();
    let mut flagged = flagged;
    flagged.sort();
    assert_eq!(
        flagged,
        [
            ("echo".to_owned(), "ok".to_owned(), false),
            ("fail".to_owned(), "tool_error".to_owned(), true),
            ("whoami".to_owned(), "denied".to_owned(), false),
        ],
        "{out}"
    );
    // As a table: bob's echo, allowed then, is not today.
    let (code, out, err) =
        audit_calls(&bus, "ann", &["--person", "bob", "--config", stricter]).await;
    assert_eq!(code, Some(0), "{err}");
    assert!(
        out.lines().next().unwrap().contains("ALLOWED TODAY"),
        "{out}"
    );
    let echo_line = out
        .lines()
        .find(|l| l.contains("echo_echo") || l.contains(" echo "))
        .unwrap_or_else(|| panic!("no line of bob's echo: {out}"));
    assert!(
        echo_line.contains("bob@PEOPLE") && echo_line.contains("ok") && echo_line.contains("NO"),
        "{out}"
    );
}
