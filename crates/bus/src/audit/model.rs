//! Who may publish and subscribe where, read from a parsed configuration the way nats-server
//! reads it: accounts and users, permissions (allow/deny, the short forms), defaults,
//! service exports and imports.

use crate::natsconf::{ConfError, Node, Value};
pub use mesh_core::permission::{Rule, covers, matches};

/// The account users land in when the configuration has no `accounts` block.
pub const GLOBAL_ACCOUNT: &str = "$G";

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Permissions {
    pub publish: Rule,
    pub subscribe: Rule,
    pub allow_responses: bool,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct User {
    pub name: String,
    pub account: String,
    /// The permissions in force: the user's own, else the account's or the global defaults.
    pub permissions: Permissions,
}

impl User {
    pub fn id(&self) -> String {
        format!("{}@{}", self.name, self.account)
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Export {
    pub subject: String,
    /// Accounts allowed to import it; `None` is public.
    pub accounts: Option<Vec<String>>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Import {
    pub account: String,
    pub subject: String,
    /// The local subject the import is published on, when it differs.
    pub to: Option<String>,
    /// `share: true`: nats-server stamps the caller's identity on requests crossing it.
    pub share: bool,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Account {
    pub name: String,
    pub users: Vec<User>,
    pub exports: Vec<Export>,
    pub imports: Vec<Import>,
}

/// The whole configuration's authorization, as the server would apply it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Model {
    pub accounts: Vec<Account>,
    /// The route address of a `cluster` block that takes any server (no `authorization`):
    /// anyone reaching it could join as a server and stamp any caller.
    pub open_routes: Option<String>,
    /// Ports reachable off this host that take logins without TLS: (which port, its
    /// address). Loopback is left out (`mesh up`, a developer's bus).
    pub plaintext: Vec<(String, String)>,
}

/// Whether an address (`host:port`) is reachable from this host only.
/// The most accounts a request crosses: a caller's, the mesh's own, a module's, and room.
const MAX_HOPS: usize = 4;

/// Whether an import takes requests published on `subject` in the importing account.
fn import_takes(i: &Import, subject: &str) -> bool {
    matches(i.to.as_deref().unwrap_or(&i.subject), subject)
}

fn loopback(address: &str) -> bool {
    let host = address
        .rsplit_once(':')
        .map_or(address, |(h, _)| h)
        .trim_start_matches('[')
        .trim_end_matches(']');
    host == "localhost"
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

fn bad<T>(node: &Node, message: impl Into<String>) -> Result<T, ConfError> {
    Err(ConfError {
        pos: node.pos.clone(),
        message: message.into(),
    })
}

/// Strings of a value that is one string or an array of them.
fn strings(node: &Node, what: &str) -> Result<Vec<String>, ConfError> {
    match &node.value {
        Value::Str(s) => Ok(vec![s.clone()]),
        Value::Array(items) => items
            .iter()
            .map(|i| match &i.value {
                Value::Str(s) => Ok(s.clone()),
                _ => bad(i, format!("{what} must list subjects as strings")),
            })
            .collect(),
        _ => bad(
            node,
            format!("{what} must be a subject or a list of subjects"),
        ),
    }
}

/// `publish: "a"`, `publish: ["a", "b"]` (both allow lists) or `publish: {allow, deny}`.
fn rule(node: &Node, what: &str) -> Result<Rule, ConfError> {
    match &node.value {
        Value::Map(_) => {
            let mut r = Rule::default();
            for (k, v) in node.entries() {
                match k.to_ascii_lowercase().as_str() {
                    "allow" => r.allow = Some(strings(v, &format!("{what}.allow"))?),
                    "deny" => r.deny = strings(v, &format!("{what}.deny"))?,
                    other => return bad(v, format!("{what} has an unknown key {other:?}")),
                }
            }
            Ok(r)
        }
        _ => Ok(Rule {
            allow: Some(strings(node, what)?),
            deny: Vec::new(),
        }),
    }
}

fn permissions(node: &Node) -> Result<Permissions, ConfError> {
    let Value::Map(entries) = &node.value else {
        return bad(node, "permissions must be a map");
    };
    let mut p = Permissions::default();
    for (k, v) in entries {
        match k.to_ascii_lowercase().as_str() {
            "publish" | "pub" | "import" => p.publish = rule(v, "publish")?,
            "subscribe" | "sub" | "export" => p.subscribe = rule(v, "subscribe")?,
            "allow_responses" | "allow_resp" => {
                p.allow_responses = !matches!(v.value, Value::Bool(false));
            }
            other => return bad(v, format!("permissions has an unknown key {other:?}")),
        }
    }
    Ok(p)
}

fn users(node: &Node, account: &str, defaults: &Permissions) -> Result<Vec<User>, ConfError> {
    let Value::Array(items) = &node.value else {
        return bad(node, "users must be a list");
    };
    items
        .iter()
        .map(|u| {
            let name = u
                .get("user")
                .or_else(|| u.get("nkey"))
                .and_then(Node::as_str)
                .map(String::from);
            let Some(name) = name else {
                return bad(u, "a user needs a user name or an nkey");
            };
            let permissions = match u.get("permissions") {
                Some(p) => permissions(p)?,
                None => defaults.clone(),
            };
            Ok(User {
                name,
                account: account.to_owned(),
                permissions,
            })
        })
        .collect()
}

fn exports(node: &Node) -> Result<Vec<Export>, ConfError> {
    let Value::Array(items) = &node.value else {
        return bad(node, "exports must be a list");
    };
    let mut out = Vec::new();
    for e in items {
        // Streams carry messages, not requests: only services reach tools.
        let Some(service) = e.get("service") else {
            continue;
        };
        let Some(subject) = service.as_str() else {
            return bad(service, "an exported service must be a subject");
        };
        let accounts = match e.get("accounts") {
            Some(a) => Some(strings(a, "accounts")?),
            None => None,
        };
        out.push(Export {
            subject: subject.to_owned(),
            accounts,
        });
    }
    Ok(out)
}

fn imports(node: &Node) -> Result<Vec<Import>, ConfError> {
    let Value::Array(items) = &node.value else {
        return bad(node, "imports must be a list");
    };
    let mut out = Vec::new();
    for i in items {
        let Some(service) = i.get("service") else {
            continue;
        };
        let account = service.get("account").and_then(Node::as_str);
        let subject = service.get("subject").and_then(Node::as_str);
        let (Some(account), Some(subject)) = (account, subject) else {
            return bad(
                service,
                "an imported service needs an account and a subject",
            );
        };
        out.push(Import {
            account: account.to_owned(),
            subject: subject.to_owned(),
            to: i.get("to").and_then(Node::as_str).map(String::from),
            share: matches!(i.get("share").map(|n| &n.value), Some(Value::Bool(true))),
        });
    }
    Ok(out)
}

impl Model {
    /// Reads the authorization of a parsed configuration.
    pub fn read(root: &Node) -> Result<Model, ConfError> {
        let mut accounts = Vec::new();
        let global_defaults = match root
            .get("authorization")
            .and_then(|a| a.get("default_permissions"))
        {
            Some(d) => permissions(d)?,
            None => Permissions::default(),
        };
        if let Some(block) = root.get("accounts") {
            let Value::Map(entries) = &block.value else {
                return bad(block, "accounts must be a map of account names");
            };
            for (name, body) in entries {
                let defaults = match body.get("default_permissions") {
                    Some(d) => permissions(d)?,
                    None => global_defaults.clone(),
                };
                accounts.push(Account {
                    name: name.clone(),
                    users: match body.get("users") {
                        Some(u) => users(u, name, &defaults)?,
                        None => Vec::new(),
                    },
                    exports: match body.get("exports") {
                        Some(e) => exports(e)?,
                        None => Vec::new(),
                    },
                    imports: match body.get("imports") {
                        Some(i) => imports(i)?,
                        None => Vec::new(),
                    },
                });
            }
        }
        if let Some(auth) = root.get("authorization") {
            let mut global = match auth.get("users") {
                Some(u) => users(u, GLOBAL_ACCOUNT, &global_defaults)?,
                None => Vec::new(),
            };
            if let Some(user) = auth.get("user").and_then(Node::as_str) {
                global.push(User {
                    name: user.to_owned(),
                    account: GLOBAL_ACCOUNT.to_owned(),
                    permissions: global_defaults.clone(),
                });
            }
            if !global.is_empty() {
                accounts.push(Account {
                    name: GLOBAL_ACCOUNT.to_owned(),
                    users: global,
                    exports: Vec::new(),
                    imports: Vec::new(),
                });
            }
        }
        let open_routes = root
            .get("cluster")
            .filter(|c| c.get("authorization").is_none())
            .map(|c| {
                c.get("listen")
                    .and_then(Node::as_str)
                    .unwrap_or("its route port")
                    .to_owned()
            });
        let mut plaintext = Vec::new();
        let address = |node: &Node, default: &str| {
            node.get("listen")
                .and_then(Node::as_str)
                .map(str::to_owned)
                .or_else(|| {
                    node.get("listen").and_then(|n| match &n.value {
                        Value::Int(p) => Some(format!("0.0.0.0:{p}")),
                        _ => None,
                    })
                })
                .unwrap_or_else(|| default.to_owned())
        };
        let client = match root.get("host").and_then(Node::as_str) {
            Some(host) => format!("{host}:4222"),
            None => address(root, "0.0.0.0:4222"),
        };
        if root.get("tls").is_none() && !loopback(&client) {
            plaintext.push(("client port".to_owned(), client));
        }
        for (block, what) in [("cluster", "routes"), ("leafnodes", "leaf port")] {
            if let Some(node) = root.get(block) {
                let at = address(node, "0.0.0.0");
                if node.get("tls").is_none() && !loopback(&at) {
                    plaintext.push((what.to_owned(), at));
                }
            }
        }
        Ok(Model {
            accounts,
            open_routes,
            plaintext,
        })
    }

    pub fn account(&self, name: &str) -> Option<&Account> {
        self.accounts.iter().find(|a| a.name == name)
    }

    /// Accounts whose users serve `subject`: those exporting a service covering it that they
    /// do not import themselves (an account that does passes calls on, as the mesh's own
    /// account does), or, when no account exports one, every account (modules then answer
    /// within their own).
    fn serving(&self, subject: &str) -> Vec<&Account> {
        let exporting: Vec<&Account> = self
            .accounts
            .iter()
            .filter(|a| a.exports.iter().any(|e| matches(&e.subject, subject)))
            .collect();
        if exporting.is_empty() {
            return self.accounts.iter().collect();
        }
        exporting
            .into_iter()
            .filter(|a| !a.imports.iter().any(|i| import_takes(i, subject)))
            .collect()
    }

    /// Whether a request `user` publishes on `subject` can reach a module serving it.
    pub fn reaches(&self, user: &User, subject: &str) -> bool {
        self.account_reaches(&user.account, subject, MAX_HOPS)
    }

    /// Whether a request published in `account` reaches a serving account: there, or across
    /// imports whose exporters allow it, through accounts that pass it on (at most `hops`).
    fn account_reaches(&self, account: &str, subject: &str, hops: usize) -> bool {
        if self.serving(subject).iter().any(|a| a.name == account) {
            return true;
        }
        let Some(own) = self.account(account) else {
            return false;
        };
        hops > 0
            && own.imports.iter().any(|i| {
                if !import_takes(i, subject) {
                    return false;
                }
                // With `to`, the subject is mapped back to the exporter's; for the tool
                // subjects the mesh uses (no wildcards remapped) the mapped subject is the
                // import's own.
                let remote = if i.to.is_some() {
                    i.subject.as_str()
                } else {
                    subject
                };
                self.account(&i.account).is_some_and(|exporter| {
                    exporter.exports.iter().any(|e| {
                        (matches(&e.subject, remote) || covers(&e.subject, remote))
                            && e.accounts
                                .as_ref()
                                .is_none_or(|acc| acc.contains(&own.name))
                    }) && self.account_reaches(&exporter.name, remote, hops - 1)
                })
            })
    }

    /// Whether `caller` (`user@ACCOUNT`, as the call log names callers) may publish a
    /// request on `subject` that reaches a module; `false` for a user not in the model.
    pub fn allows(&self, caller: &str, subject: &str) -> bool {
        let Some((user, account)) = caller.split_once('@') else {
            return false;
        };
        self.account(account)
            .and_then(|a| a.users.iter().find(|u| u.name == user))
            .is_some_and(|u| self.may_call(u, subject))
    }

    /// The verdict on one person calling one tool subject.
    pub fn may_call(&self, user: &User, subject: &str) -> bool {
        user.permissions.publish.permits(subject) && self.reaches(user, subject)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::natsconf::parse_str;
    use std::path::Path;

    #[test]
    fn routes_that_take_any_server_are_seen() {
        let open = "cluster { name: mesh, listen: \"10.0.0.1:6222\", routes: [\"nats-route://10.0.0.2:6222\"] }";
        let model = Model::read(&parse_str(open, Path::new("a.conf")).unwrap()).unwrap();
        assert_eq!(model.open_routes.as_deref(), Some("10.0.0.1:6222"));
        let closed = "cluster { name: mesh, listen: \"10.0.0.1:6222\", authorization { user: route, password: s } }";
        let model = Model::read(&parse_str(closed, Path::new("b.conf")).unwrap()).unwrap();
        assert_eq!(model.open_routes, None);
        let alone = "listen: \"127.0.0.1:4222\"";
        let model = Model::read(&parse_str(alone, Path::new("c.conf")).unwrap()).unwrap();
        assert_eq!(model.open_routes, None);
        // What the layout writes is closed.
        let node = crate::layout::ClusterNode {
            cluster: "mesh".into(),
            server: "mesh-0".into(),
            listen: "127.0.0.1:6222".into(),
            routes: vec!["127.0.0.1:6222".into(), "127.0.0.1:6223".into()],
            secret: crate::layout::route_secret(),
            tls: None,
        };
        let written = crate::layout::cluster_block(&node);
        let model = Model::read(&parse_str(&written, Path::new("d.conf")).unwrap()).unwrap();
        assert_eq!(model.open_routes, None, "{written}");
    }

    #[test]
    fn ports_off_the_host_without_tls_are_found() {
        let read =
            |text: &str| Model::read(&parse_str(text, Path::new("c.conf")).unwrap()).unwrap();
        // Loopback only: nothing crosses a network.
        let local = read("listen: \"127.0.0.1:4222\"\ncluster { listen: \"127.0.0.1:6222\" }");
        assert!(local.plaintext.is_empty(), "{:?}", local.plaintext);
        // Off the host, in the clear: each port named.
        let open = read(
            "listen: \"0.0.0.0:4222\"\ncluster { listen: \"10.0.0.1:6222\" }\nleafnodes { listen: \"0.0.0.0:7422\" }",
        );
        let named: Vec<&str> = open.plaintext.iter().map(|(w, _)| w.as_str()).collect();
        assert_eq!(named, ["client port", "routes", "leaf port"]);
        // No listen at all is nats-server's default, every interface.
        assert_eq!(read("").plaintext[0].1, "0.0.0.0:4222");
        // What `mesh accounts --tls-*` writes has TLS on each.
        let tls = crate::layout::Tls {
            cert: "s.pem".into(),
            key: "s.key".into(),
            ca: "ca.pem".into(),
        };
        let node = crate::layout::ClusterNode {
            cluster: "mesh".into(),
            server: "mesh-0".into(),
            listen: "10.0.0.1:6222".into(),
            routes: vec!["10.0.0.1:6222".into()],
            secret: crate::layout::route_secret(),
            tls: Some(tls.clone()),
        };
        let written = format!(
            "listen: \"0.0.0.0:4222\"\n{}{}{}",
            crate::layout::tls_block(&tls, false),
            crate::layout::cluster_block(&node),
            crate::layout::leafnode_block("0.0.0.0:7422", Some(&tls)),
        );
        assert!(read(&written).plaintext.is_empty(), "{written}");
    }

    #[test]
    fn wildcards() {
        assert!(matches("mesh.>", "mesh.echo.echo"));
        assert!(matches("mesh.*.tools", "mesh.echo.tools"));
        assert!(!matches("mesh.*.tools", "mesh.echo.echo"));
        assert!(!matches("mesh.echo", "mesh.echo.echo"));
        assert!(!matches("mesh.echo.echo.>", "mesh.echo.echo"));
        assert!(covers("mesh.>", "mesh.echo.*"));
        assert!(!covers("mesh.echo.*", "mesh.>"));
    }

    #[test]
    fn deny_wins_and_defaults_apply() {
        let conf = parse_str(
            r#"
            accounts {
              MESH { users [ {user: m} ], exports [ {service: "mesh.>"} ] }
              PEOPLE {
                default_permissions { publish { allow: "mesh.echo.*" } }
                users [
                  {user: ann, permissions: {publish: {allow: ["mesh.>"], deny: "mesh.echo.fail"}}}
                  {user: bob}
                  {user: cat, permissions: {pub: "mesh.echo.echo"}}
                ]
                imports [ {service: {account: MESH, subject: "mesh.>"}} ]
              }
              OTHER { users [ {user: dan} ] }
            }"#,
            Path::new("t.conf"),
        )
        .unwrap();
        let model = Model::read(&conf).unwrap();
        let user = |n: &str| {
            model
                .accounts
                .iter()
                .flat_map(|a| &a.users)
                .find(|u| u.name == n)
                .unwrap()
                .clone()
        };
        assert!(model.may_call(&user("ann"), "mesh.echo.echo"));
        assert!(!model.may_call(&user("ann"), "mesh.echo.fail"), "deny wins");
        assert!(
            model.may_call(&user("bob"), "mesh.echo.fail"),
            "account defaults"
        );
        assert!(!model.may_call(&user("bob"), "mesh.files.read"));
        assert!(model.may_call(&user("cat"), "mesh.echo.echo"), "short form");
        assert!(
            !model.may_call(&user("dan"), "mesh.echo.echo"),
            "no import, nothing reachable"
        );
        assert!(
            model.may_call(&user("m"), "mesh.echo.echo"),
            "inside the module account"
        );
    }

    #[test]
    fn unknown_keys_are_errors_with_a_place() {
        let conf = parse_str(
            "authorization { users [ {user: a, permissions: {publsh: x}} ] }",
            Path::new("t.conf"),
        )
        .unwrap();
        let e = Model::read(&conf).unwrap_err();
        assert!(e.to_string().starts_with("t.conf:1:"), "{e}");
        assert!(e.message.contains("unknown key \"publsh\""), "{e}");
    }
}
