//! nats-server configurations for the mesh: the two-account layout from `subjects/` and a
//! single-account bus for development.

use std::fmt::Write as _;
use std::path::Path;

use crate::subjects::{self, TWO_ACCOUNT_TEMPLATE};

/// Subjects everybody may publish: the `tools` verbs, the catalogue, and the server's
/// answer to "what may I do" (nats-server 2.10+), which marks a person's own tools.
pub const PUBLIC_SUBJECTS: [&str; 3] = ["mesh.*.tools", "mesh.catalog.modules", USER_INFO];

/// nats-server's request for a connection's own account and permissions.
pub const USER_INFO: &str = "$SYS.REQ.USER.INFO";

/// A module's user in the `MESH` account.
#[derive(Debug, Clone)]
pub struct ModuleUser {
    pub user: String,
    pub password: String,
    /// The module names this user serves (its subscribe permissions).
    pub modules: Vec<String>,
}

/// A person's user in the `PEOPLE` account.
#[derive(Debug, Clone)]
pub struct Person {
    pub user: String,
    pub password: String,
    /// Tool subjects (wildcards allowed) this person may call, e.g. `mesh.echo.echo`.
    pub may_call: Vec<String>,
}

/// The inbox prefix a user subscribes to and its client must use: `_INBOX.<user>`.
pub fn inbox_prefix(user: &str) -> String {
    format!("_INBOX.{user}")
}

/// Renders `subjects/two-account.conf`. `port` -1 lets the server pick a free one.
pub fn two_account(
    port: i32,
    store_dir: &Path,
    modules: &[ModuleUser],
    people: &[Person],
) -> String {
    let mut module_users = String::new();
    for m in modules {
        let mut subscribe: Vec<String> = m
            .modules
            .iter()
            .map(|name| format!("{}.{name}.>", subjects::PREFIX))
            .collect();
        subscribe.push("$SRV.>".into());
        subscribe.push(format!("{}.>", inbox_prefix(&m.user)));
        let publish = ["mesh.>", "$JS.API.>", "$KV.>", USER_INFO].map(String::from);
        let _ = writeln!(
            module_users,
            "      {{ user: {}, password: {}, permissions: {{ publish: {{ allow: {} }}, subscribe: {{ allow: {} }}, allow_responses: true }} }}",
            quote(&m.user),
            quote(&m.password),
            list(&publish),
            list(&subscribe),
        );
    }
    let mut people_users = String::new();
    for p in people {
        let mut publish = p.may_call.clone();
        publish.extend(PUBLIC_SUBJECTS.map(String::from));
        let subscribe = [format!("{}.>", inbox_prefix(&p.user))];
        let _ = writeln!(
            people_users,
            "      {{ user: {}, password: {}, permissions: {{ publish: {{ allow: {} }}, subscribe: {{ allow: {} }} }} }}",
            quote(&p.user),
            quote(&p.password),
            list(&publish),
            list(&subscribe),
        );
    }
    TWO_ACCOUNT_TEMPLATE
        .replace("@PORT@", &port.to_string())
        .replace("@STORE_DIR@", &store_dir.display().to_string())
        .replace("@MODULE_USERS@\n", &module_users)
        .replace("@PEOPLE_USERS@\n", &people_users)
}

/// One account, no users: a developer's bus. Modules on it run in local mode.
pub fn single_account(port: i32, store_dir: &Path) -> String {
    format!(
        "listen: \"127.0.0.1:{port}\"\njetstream {{ store_dir: {} }}\n",
        quote(&store_dir.display().to_string())
    )
}

fn quote(s: &str) -> String {
    serde_json::to_string(s).expect("a string always serialises")
}

fn list(items: &[String]) -> String {
    let quoted: Vec<String> = items.iter().map(|s| quote(s)).collect();
    format!("[{}]", quoted.join(", "))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn two_account_fills_every_placeholder() {
        let conf = two_account(
            -1,
            Path::new("/tmp/js"),
            &[ModuleUser {
                user: "echo".into(),
                password: "pw".into(),
                modules: vec!["echo".into()],
            }],
            &[Person {
                user: "alice".into(),
                password: "pw".into(),
                may_call: vec!["mesh.echo.echo".into()],
            }],
        );
        for placeholder in ["@PORT@", "@STORE_DIR@", "@MODULE_USERS@", "@PEOPLE_USERS@"] {
            assert!(
                !conf.contains(placeholder),
                "{placeholder} left in:\n{conf}"
            );
        }
        assert!(
            conf.contains(r#"subscribe: { allow: ["_INBOX.alice.>"] }"#),
            "{conf}"
        );
        assert!(
            conf.contains(r#""mesh.echo.echo", "mesh.*.tools""#),
            "{conf}"
        );
        assert!(conf.contains("allow_responses: true"));
    }
}
