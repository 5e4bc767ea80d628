//! The proof is the bus: for every person and every installed tool, `mesh audit`'s verdict
//! is what happens when that person calls that tool.

use std::time::Duration;

use mesh_bus::audit::{self, Model};
use mesh_core::client::{Outcome, outcome};
use mesh_core::runtime::{Call, Module, Tool};
use mesh_core::subjects::{FullName, ToolResult};
use serde_json::{Value, json};

use crate::bus::Bus;

fn files() -> Module {
    let tool = |name: &str| {
        Tool::new(
            name,
            "a file tool",
            json!({"type": "object"}),
            |_c: Call| async { ToolResult::text("ok") },
        )
    };
    Module::new("files", "1.0.0", "files for the audit test")
        .tool(tool("read"))
        .tool(tool("write"))
        .tool(tool("remove"))
}

/// Several people and roles over several modules; `gone` is declared but never runs.
const GRANTS: &str = r#"
    modules {
      catalog {}
      echo  { calls: [files_read] }
      files { calls: [echo], calls_for_people: [echo_whoami] }
      gone  { calls_for_people: [files] }
    }
    roles {
      echoer    { modules: [echo] }
      reader    { tools: [echo, files_read] }
      writer    { modules: [files] }
      forgetful { tools: [catalog_forget] }
      ghost     { tools: [gone_tool] }
      admin     { all: true }
    }
    people {
      ann { roles: [echoer] }
      bob { roles: [reader], password: "pw-bob" }
      cat { roles: [admin], password: "pw-cat" }
      dan { }
      eve { roles: [writer, forgetful, ghost] }
    }
"#;

const PEOPLE: usize = 5;

#[tokio::test]
async fn every_verdict_matches_the_bus() {
    // The configuration comes from the generator, as an operator would make it.
    let dir = tempfile::tempdir().unwrap();
    let grants = dir.path().join("grants.conf");
    std::fs::write(&grants, GRANTS).unwrap();
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_mesh"))
        .args([
            "accounts",
            "--grants",
            grants.to_str().unwrap(),
            "--store-dir",
            "@DIR@/js",
            "--credentials",
        ])
        .arg(dir.path().join("credentials"))
        .args(["--credentials-url", "nats://a.example.org:4222"])
        .output()
        .await
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let conf = String::from_utf8(out.stdout).unwrap();
    // Each module's credential alone, in a file of its own, as the configuration has it.
    {
        use std::os::unix::fs::PermissionsExt;
        let file = dir.path().join("credentials/echo.json");
        assert_eq!(
            std::fs::metadata(&file).unwrap().permissions().mode() & 0o777,
            0o600
        );
        let ctx: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
        assert_eq!(ctx["user"], "echo");
        assert_eq!(ctx["url"], "nats://a.example.org:4222");
        let line = format!(r#"user: "echo", password: {}"#, ctx["password"]);
        assert!(conf.contains(&line), "{line} not in the configuration");
    }
    assert!(
        conf.contains(
            r#"subscribe: { allow: ["_INBOX.ann.>", "mesh.catalog.changed", "mesh-progress.*.ann.>", "mesh-resources.echo.updated"] }"#
        ),
        "{conf}"
    );
    let bus = Bus::from_generated_config(&conf).await;
    let _catalog = bus.serve_catalog().await;
    let _echo = bus.serve(mesh_echo::module()).await;
    let _files = bus.serve(files()).await;

    // The catalogue's tools, as the audit sees them.
    let admin = bus.client_as(Some("cat")).await;
    let installed: Vec<String> = admin
        .catalogue(None, Duration::from_secs(10))
        .await
        .unwrap()
        .iter()
        .flat_map(|e| e.full_names())
        .collect();
    assert_eq!(installed.len(), 4 + 5 + 3);

    let conf_path = bus.config_path();
    let model = Model::read(&audit::parse_file(&conf_path).unwrap()).unwrap();
    let report = audit::audit(&model, Some(&installed));
    assert_eq!(report.people.len(), PEOPLE);

    let mut checked = 0;
    for (p, person) in report.people.iter().enumerate() {
        let user = person.split('@').next().unwrap();
        let client = bus.client_as(Some(user)).await;
        for (t, tool) in report.tools.iter().enumerate() {
            let name = FullName::parse(tool).unwrap();
            let r = client
                .call(&name, &json!({}), Duration::from_secs(10))
                .await;
            let actual = match outcome(&r) {
                Outcome::Denied => false,
                Outcome::Result | Outcome::ToolError => true,
                other => panic!("{person} calling {tool}: unexpected {other:?}: {r:?}"),
            };
            assert_eq!(
                report.may_call[p][t], actual,
                "{person} calling {tool}: audit says {}, the bus says {}",
                report.may_call[p][t], actual
            );
            checked += 1;
        }
    }
    assert_eq!(checked, PEOPLE * 12);

    // Every module, calling each tool as itself and for a person: the same proof.
    assert_eq!(report.modules.len(), 4);
    // A ticket no module's call gave it: reaching the tool is what is proved here (the tool
    // then refuses the ticket, a tool error), not acting for carol.
    let forged = mesh_core::subjects::ticket::Ticket::unchecked(
        &bus.ticket("carol", "x", "x_y", Duration::from_secs(60)).raw,
    )
    .unwrap();
    let mut checked = 0;
    for (m, module) in report.modules.iter().enumerate() {
        let user = module.split('@').next().unwrap();
        let client = bus.client_as(Some(user)).await;
        for (t, tool) in report.tools.iter().enumerate() {
            let name = FullName::parse(tool).unwrap();
            for (via, verdicts, caller) in [
                ("itself", &report.module_may_call, client.clone()),
                (
                    "for people",
                    &report.module_acts_for_people,
                    client.for_person(&forged),
                ),
            ] {
                let r = caller
                    .call(&name, &json!({}), Duration::from_secs(10))
                    .await;
                let actual = match outcome(&r) {
                    Outcome::Denied => false,
                    Outcome::Result | Outcome::ToolError => true,
                    other => panic!("{module} calling {tool} {via}: unexpected {other:?}: {r:?}"),
                };
                assert_eq!(
                    verdicts[m][t], actual,
                    "{module} calling {tool} {via}: audit says {}, the bus says {actual}",
                    verdicts[m][t]
                );
                checked += 1;
            }
        }
    }
    assert_eq!(checked, 4 * 12 * 2);
    let granted = |who: &str, tool: &str, table: &Vec<Vec<bool>>| {
        let m = report.modules.iter().position(|x| x == who).unwrap();
        let t = report.tools.iter().position(|x| x == tool).unwrap();
        table[m][t]
    };
    assert!(granted(
        "echo@MODULE_echo",
        "files_read",
        &report.module_may_call
    ));
    assert!(!granted(
        "echo@MODULE_echo",
        "files_write",
        &report.module_may_call
    ));
    assert!(granted(
        "files@MODULE_files",
        "echo_whoami",
        &report.module_acts_for_people
    ));
    assert!(!granted(
        "files@MODULE_files",
        "echo",
        &report.module_acts_for_people
    ));
    assert!(granted(
        "gone@MODULE_gone",
        "files_write",
        &report.module_acts_for_people
    ));

    // Findings: eve is granted a tool that is not installed; ann's and cat's wildcards cover
    // tools added later; dan may call nothing beyond the public verbs.
    let kinds: Vec<(&str, &str)> = report
        .findings
        .iter()
        .map(|f| (f.kind.name(), f.subject.as_str()))
        .collect();
    assert!(
        kinds.contains(&("grant_not_installed", "eve@PEOPLE")),
        "{kinds:?}"
    );
    assert!(kinds.contains(&("wide_grant", "ann@PEOPLE")), "{kinds:?}");
    assert!(
        kinds.contains(&("acts_for_people", "files@MODULE_files")),
        "{kinds:?}"
    );
    assert!(
        !kinds.contains(&("acts_for_people", "echo@MODULE_echo")),
        "{kinds:?}"
    );
    assert!(kinds.contains(&("wide_grant", "cat@PEOPLE")), "{kinds:?}");
    assert!(
        !kinds.iter().any(|(k, _)| *k == "foreign_inbox"),
        "{kinds:?}"
    );

    // The command line says the same.
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_mesh"))
        .args([
            "--server",
            &bus.url(),
            "--user",
            "cat",
            "--password",
            "pw-cat",
        ])
        .args(["audit", "--config", conf_path.to_str().unwrap(), "--json"])
        .env("XDG_CONFIG_HOME", "/nonexistent")
        .output()
        .await
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let cli: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        cli["tools_from"],
        "catalogue",
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(cli["may_call"], json!(report.may_call));
    assert_eq!(
        cli["module_acts_for_people"],
        json!(report.module_acts_for_people)
    );
}

#[tokio::test]
async fn an_inbox_open_to_all_is_a_finding() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("open.conf");
    std::fs::write(
        &path,
        r#"
        # people who may read each other's replies
        accounts: {
          MESH = { users = [ { user = m } ]; exports = [ { service = "mesh.>" } ] }
          PEOPLE: {
            users: [
              { user: ann, permissions: { publish: "mesh.echo.echo", subscribe: "_INBOX.>" } }
              { user: bob, permissions: { publish: ["mesh.echo.echo"], subscribe: { allow: "_INBOX.bob.>" } } }
            ]
            imports: [ { service: { account: MESH, subject: "mesh.>" }, share: true } ]
          }
        }
        "#,
    )
    .unwrap();
    let model = Model::read(&audit::parse_file(&path).unwrap()).unwrap();
    let report = audit::audit(&model, None);
    assert_eq!(report.tools, ["echo"]);
    assert_eq!(report.may_call, [[true], [true]]);
    let open: Vec<&str> = report
        .findings
        .iter()
        .filter(|f| f.kind == mesh_bus::audit::FindingKind::ForeignInbox)
        .map(|f| f.subject.as_str())
        .collect();
    assert_eq!(open, ["ann@PEOPLE"]);
}

#[test]
fn forty_thousand_people_are_audited_in_linear_time() {
    // Linear in the people: this used to take minutes (each inbox against every other).
    let mut text = String::from(
        "accounts { MODULE_echo { users [ {user: echo} ], exports [ {service: \"mesh.echo.>\"} ] }\nPEOPLE { users [\n",
    );
    for i in 0..40_000 {
        text.push_str(&format!(
            "{{user: p{i}, permissions: {{publish: [\"mesh.echo.echo\"], subscribe: [\"_INBOX.p{i}.>\"]}}}}\n"
        ));
    }
    text.push_str("] imports [ {service: {account: MODULE_echo, subject: \"mesh.echo.>\"}, share: true} ] } }\n");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let conf = mesh_bus::natsconf::parse_str(&text, std::path::Path::new("many.conf")).unwrap();
        let model = Model::read(&conf).unwrap();
        let report = audit::audit(&model, Some(&["echo".to_owned()]));
        let _ = tx.send(report);
    });
    // A bound that only catches the old behaviour (minutes), not a measure of speed.
    let report = rx
        .recv_timeout(Duration::from_secs(60))
        .expect("the audit of 40,000 people finished");
    assert_eq!(report.people.len(), 40_000);
    assert!(report.may_call.iter().all(|row| row == &[true]));
    assert!(
        !report
            .findings
            .iter()
            .any(|f| f.kind == mesh_bus::audit::FindingKind::ForeignInbox),
        "{:?}",
        &report.findings[..3.min(report.findings.len())]
    );
}
