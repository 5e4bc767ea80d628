//! Test harness: a real nats-server per test, on a free port, with a config made for that test.
//! The accounts layout takes either form: a configuration file with passwords, or — with
//! `MESH_TEST_AUTH=operator` — the same layout signed as JWTs (`mesh_bus::operator::sign`),
//! served by nats-server in operator mode through a full resolver, every user connecting with
//! their credential file. The tests are the same in both.

use std::time::Duration;

use mesh_bus::layout::{self, ModuleUser, Person, Target};
use mesh_bus::natsd::NatsServer;
use mesh_core::actor::Layout;
use mesh_core::client::{Client, ConnectConfig};
use mesh_core::runtime::{Module, ServeOptions, Serving};
use mesh_core::subjects::ticket::{self, Ticket};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

/// The Python with the client packages (bin/test makes a virtualenv and names it here).
pub fn python() -> String {
    std::env::var("MESH_PYTHON").unwrap_or_else(|_| "python3".into())
}

/// Runs a client this project did not write and reads the JSON it prints; its stderr is the
/// failure message.
pub async fn json_of(command: &mut tokio::process::Command) -> serde_json::Value {
    let out = command.output().await.expect("the client runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("not JSON ({e}): {}", String::from_utf8_lossy(&out.stdout)))
}

/// Where nats.js is installed (bin/test installs it and names the folder here); a test that
/// needs it fails with the fix rather than skip.
pub fn node_path() -> String {
    let path = std::env::var("MESH_NODE_PATH")
        .unwrap_or_else(|_| format!("{}/target/js/node_modules", env!("CARGO_MANIFEST_DIR")));
    assert!(
        std::path::Path::new(&path).join("nats").is_dir(),
        "nats.js is not installed in {path}: run bin/test, which installs it (npm install --prefix target/js nats)"
    );
    path
}

/// A deadline long enough never to be the reason a healthy call fails.
pub const GENEROUS: Duration = Duration::from_secs(10);

/// A round trip to the server on a person's connection (or any on a bus without users):
/// when it returns, the server has read everything this connection sent before it (a
/// subscription is in place for others' messages), and this connection has read everything
/// the server sent it before (a message routed here before is pending on its subscriber).
/// async-nats's `flush` is no such thing: it only writes this connection's buffer to the
/// socket. The request goes to a fresh subject under the connection's own inbox, which a
/// person may publish to and nobody listens on, so the server answers that nobody serves.
pub async fn round_trip(nats: &async_nats::Client) {
    round_trip_via(nats, nats.new_inbox()).await;
}

/// [`round_trip`] on a module's connection: a module may not publish to its inbox, but to
/// reply subjects (`_R_.>`), of which a fresh one has nobody listening.
pub async fn module_round_trip(nats: &async_nats::Client) {
    round_trip_via(
        nats,
        format!("_R_.round-trip.{}", uuid::Uuid::new_v4().simple()),
    )
    .await;
}

async fn round_trip_via(nats: &async_nats::Client, subject: String) {
    // Only catches a hang (the connection's own request timeout is 10 s).
    let within = Some(Duration::from_secs(60));
    let answer = nats
        .send_request(subject, async_nats::Request::new().timeout(within))
        .await;
    match answer {
        Err(e) if e.kind() == async_nats::RequestErrorKind::NoResponders => {}
        other => panic!("a round trip to the server was answered {other:?}"),
    }
}

/// Whether this run signs the accounts layout for operator mode (`MESH_TEST_AUTH=operator`).
pub fn operator_mode() -> bool {
    match std::env::var("MESH_TEST_AUTH").as_deref() {
        Ok("operator") => true,
        Ok("" | "password") | Err(_) => false,
        Ok(other) => panic!("MESH_TEST_AUTH={other}: give operator, password or nothing"),
    }
}

/// Each operator-mode bus's credential files by user, under its servers' URLs: what
/// [`creds_for`] answers a client that knows only a URL, a user and a password.
static OPERATED: std::sync::Mutex<
    std::collections::BTreeMap<String, std::collections::BTreeMap<String, std::path::PathBuf>>,
> = std::sync::Mutex::new(std::collections::BTreeMap::new());

/// The credential file of `user` on the operator-mode bus at `url`, if it is one.
pub fn creds_for(url: &str, user: &str) -> Option<std::path::PathBuf> {
    let operated = OPERATED.lock().unwrap_or_else(|e| e.into_inner());
    let users = operated.get(url)?;
    Some(users.get(user).cloned().unwrap_or_else(|| {
        panic!("no user {user} on the operator-mode bus at {url}: the layout does not have them")
    }))
}

/// The accounts layout rendered as a configuration file (`rendered`), signed for operator
/// mode in `dir`: the credential files in `dir/creds` (`<ACCOUNT>.<user>.creds`, 0600) with
/// `dir/accounts.json` beside them (as `mesh accounts --auth operator` writes both), this
/// process told which account each key is; returns the layout signed and the users'
/// credential files.
fn sign_for_operator_mode(
    rendered: &str,
    dir: &std::path::Path,
) -> (
    mesh_bus::operator::Signed,
    std::collections::BTreeMap<String, std::path::PathBuf>,
) {
    use mesh_bus::operator;
    let root = mesh_bus::natsconf::parse_str(rendered, std::path::Path::new("layout.conf"))
        .expect("the layout parses");
    let mut ring = operator::KeyRing::open(&dir.join("keys")).unwrap();
    let signed = operator::sign(&root, &mut ring).unwrap_or_else(|e| panic!("{e}"));
    let creds = dir.join("creds");
    std::fs::create_dir_all(&creds).unwrap();
    let mut users = std::collections::BTreeMap::new();
    for u in &signed.users {
        let path = creds.join(format!("{}.{}.creds", u.account, u.name));
        operator::write_private(&path, u.creds.as_bytes()).unwrap();
        users.insert(u.name.clone(), path);
    }
    let names = signed.names();
    std::fs::write(
        dir.join("accounts.json"),
        serde_json::to_string_pretty(&names).unwrap(),
    )
    .unwrap();
    mesh_core::actor::learn_accounts(names);
    (signed, users)
}

pub struct Bus {
    pub server: NatsServer,
    pub layout: Layout,
    /// Passwords the config sets otherwise than `pw-<user>`.
    passwords: std::collections::HashMap<String, String>,
    /// In operator mode, each user's credential file.
    creds: Option<std::collections::BTreeMap<String, std::path::PathBuf>>,
    /// The key this bus's catalogue signs tickets with, which its modules trust.
    pub issuer: nkeys::KeyPair,
    _dir: tempfile::TempDir,
}

fn password(user: &str) -> String {
    format!("pw-{user}")
}

/// People as (user, tool subjects they may call), each with the test password `pw-<user>`.
fn persons(people: &[(&str, &[&str])]) -> Vec<Person> {
    people
        .iter()
        .map(|(user, may_call)| Person {
            user: user.to_string(),
            password: password(user),
            may_call: may_call.iter().map(|s| s.to_string()).collect(),
        })
        .collect()
}

/// A module user with no grants, for [`Bus::accounts_with`].
pub fn module(name: &str) -> ModuleUser {
    ModuleUser::new(name, password(name))
}

/// A module user that may call `targets` (modules or full tool names) for people.
pub fn acting_for_people(name: &str, targets: &[&str]) -> ModuleUser {
    let mut m = module(name);
    m.calls_for_people = targets.iter().map(|t| Target::parse(t).unwrap()).collect();
    m
}

/// A module user that may call `targets` as itself.
pub fn calling(name: &str, targets: &[&str]) -> ModuleUser {
    let mut m = module(name);
    m.calls = targets.iter().map(|t| Target::parse(t).unwrap()).collect();
    m
}

impl Bus {
    /// One account, no users: the developer's bus; modules run in local mode.
    pub async fn single() -> Bus {
        let dir = tempfile::tempdir().unwrap();
        let conf = layout::single_account(-1, &dir.path().join("js"));
        Self::start(dir, conf, Layout::Local).await
    }

    /// The accounts layout: each of `modules` in an account of its own with no grants,
    /// `people` as (user, tool subjects they may call) in `PEOPLE`.
    pub async fn accounts(modules: &[&str], people: &[(&str, &[&str])]) -> Bus {
        let modules: Vec<ModuleUser> = modules.iter().map(|m| module(m)).collect();
        Self::accounts_with(&modules, people).await
    }

    /// As [`Bus::accounts`], with modules as given (grants included).
    pub async fn accounts_with(modules: &[ModuleUser], people: &[(&str, &[&str])]) -> Bus {
        Self::accounts_in(modules, people, operator_mode()).await
    }

    /// As [`Bus::accounts_with`], in operator mode whatever `MESH_TEST_AUTH` says: for a
    /// test of what only operator mode has.
    pub async fn operated(modules: &[ModuleUser], people: &[(&str, &[&str])]) -> Bus {
        Self::accounts_in(modules, people, true).await
    }

    async fn accounts_in(
        modules: &[ModuleUser],
        people: &[(&str, &[&str])],
        operator: bool,
    ) -> Bus {
        let dir = tempfile::tempdir().unwrap();
        let people = persons(people);
        // The mesh's owner is `owner`, with the test password (`Bus::keep_log`).
        let conf = layout::accounts_owned(
            -1,
            &dir.path().join("js"),
            modules,
            &people,
            &password(mesh_core::subjects::calllog::OWNER),
        );
        if !operator {
            return Self::start(dir, conf, Layout::Accounts).await;
        }
        std::fs::write(dir.path().join("layout.conf"), &conf).unwrap();
        let (signed, users) = sign_for_operator_mode(&conf, dir.path());
        let conf = format!(
            "{}\n{}",
            mesh_bus::operator::without_accounts(&conf),
            signed.server_block(&dir.path().join("jwt"))
        );
        let mut bus = Self::start(dir, conf, Layout::Accounts).await;
        OPERATED
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(bus.url(), users.clone());
        bus.creds = Some(users);
        bus
    }

    /// `user`'s credential file, in operator mode.
    fn creds_of(&self, user: &str) -> Option<std::path::PathBuf> {
        self.creds.as_ref().map(|users| {
            users
                .get(user)
                .cloned()
                .unwrap_or_else(|| panic!("no user {user} in this bus's layout"))
        })
    }

    /// Makes the call log's streams, as `mesh up` does (accounts layout).
    pub async fn keep_log(&self) {
        let owner = self
            .client_as(Some(mesh_core::subjects::calllog::OWNER))
            .await;
        mesh_bus::calllog::ensure(
            owner.nats(),
            mesh_bus::calllog::Retention::default(),
            1,
            Default::default(),
        )
        .await
        .expect("the call log's streams");
    }

    /// A bus from configuration text; `@DIR@` stands for the bus's own directory.
    pub async fn from_config(conf: &str, layout: Layout) -> Bus {
        let dir = tempfile::tempdir().unwrap();
        let conf = conf.replace("@DIR@", &dir.path().display().to_string());
        Self::start(dir, conf, layout).await
    }

    /// As [`Bus::from_config`], taking each user's password from the configuration itself.
    pub async fn from_generated_config(conf: &str) -> Bus {
        let parsed = mesh_bus::natsconf::parse_str(conf, std::path::Path::new("generated.conf"))
            .expect("the generated configuration parses");
        let mut bus = Self::from_config(conf, Layout::Accounts).await;
        for (_, account) in parsed.get("accounts").unwrap().entries() {
            let Some(users) = account.get("users") else {
                continue;
            };
            let mesh_bus::natsconf::Value::Array(users) = &users.value else {
                continue;
            };
            for u in users {
                let name = u.get("user").and_then(|n| n.as_str()).unwrap().to_owned();
                let pw = u
                    .get("password")
                    .and_then(|n| n.as_str())
                    .unwrap()
                    .to_owned();
                bus.passwords.insert(name, pw);
            }
        }
        bus
    }

    async fn start(dir: tempfile::TempDir, conf: String, layout: Layout) -> Bus {
        let path = dir.path().join("nats-server.conf");
        std::fs::write(&path, conf).unwrap();
        let server = match NatsServer::start(&path, None, &dir.path().join("nats-server.log")).await
        {
            Ok(s) => s,
            // Never skip: a missing server is a broken set-up, and the message says how to fix it.
            Err(e) => panic!("{e}"),
        };
        Bus {
            server,
            layout,
            passwords: Default::default(),
            creds: None,
            issuer: nkeys::KeyPair::new_operator(),
            _dir: dir,
        }
    }

    pub fn url(&self) -> String {
        self.server.url()
    }

    /// The configuration file this bus's nats-server runs with; in operator mode the layout
    /// in its file form, the accounts its JWTs were signed from (what a test edits as text to
    /// ask the audit about another configuration reads the same there).
    pub fn config_path(&self) -> std::path::PathBuf {
        if self.creds.is_some() {
            return self._dir.path().join("layout.conf");
        }
        self._dir.path().join("nats-server.conf")
    }

    /// The configuration file this bus's nats-server runs with, as it is: in operator mode
    /// the one naming its resolver (`jwt/`, the accounts preloaded), with the users'
    /// credential files beside it (`creds/`), as a site's server directory has them.
    pub fn server_config_path(&self) -> std::path::PathBuf {
        self._dir.path().join("nats-server.conf")
    }

    /// In operator mode: the accounts layout of `modules` and `people` signed with this
    /// bus's keys (the same operator, accounts and users) as another server's directory,
    /// `dir`: its configuration naming a resolver of its own (`dir/jwt`), the users'
    /// credential files in `dir/creds`. Nothing runs it: it is what a test asks the audit
    /// about, the grants of another day. Returns the configuration's path.
    pub fn operated_elsewhere(
        &self,
        modules: &[ModuleUser],
        people: &[(&str, &[&str])],
        dir: &std::path::Path,
    ) -> std::path::PathBuf {
        assert!(self.creds.is_some(), "this bus is not in operator mode");
        let keys = dir.join("keys");
        std::fs::create_dir_all(&keys).unwrap();
        for entry in std::fs::read_dir(self._dir.path().join("keys")).unwrap() {
            let entry = entry.unwrap();
            std::fs::copy(entry.path(), keys.join(entry.file_name())).unwrap();
        }
        let conf = layout::accounts_owned(
            -1,
            &dir.join("js"),
            modules,
            &persons(people),
            &password(mesh_core::subjects::calllog::OWNER),
        );
        let (signed, _) = sign_for_operator_mode(&conf, dir);
        std::fs::create_dir_all(dir.join("jwt")).unwrap();
        let path = dir.join("nats-server.conf");
        std::fs::write(
            &path,
            format!(
                "{}\n{}",
                mesh_bus::operator::without_accounts(&conf),
                signed.server_block(&dir.join("jwt"))
            ),
        )
        .unwrap();
        path
    }

    /// A client as `user` (accounts layout) or anonymous (single account).
    pub async fn client_as(&self, user: Option<&str>) -> Client {
        if let Some(creds) = user.and_then(|u| self.creds_of(u)) {
            let config = ConnectConfig {
                server: Some(self.url()),
                creds: Some(creds),
                isolated: true,
                ..Default::default()
            };
            return Client::connect(&config)
                .await
                .expect("connect to the test bus");
        }
        let config = ConnectConfig {
            server: Some(self.url()),
            user: user.map(String::from),
            password: user.map(|u| {
                self.passwords
                    .get(u)
                    .cloned()
                    .unwrap_or_else(|| password(u))
            }),
            isolated: true,
            ..Default::default()
        };
        Client::connect(&config)
            .await
            .expect("connect to the test bus")
    }

    /// The `mesh` flags that connect to this bus as `user` (accounts layout).
    pub fn flags(&self, user: &str) -> Vec<String> {
        if let Some(creds) = self.creds_of(user) {
            return vec![
                "--server".into(),
                self.url(),
                "--creds".into(),
                creds.display().to_string(),
            ];
        }
        let password = self
            .passwords
            .get(user)
            .cloned()
            .unwrap_or_else(|| password(user));
        [
            "--server",
            &self.url(),
            "--user",
            user,
            "--password",
            &password,
        ]
        .map(String::from)
        .to_vec()
    }

    /// What a client this project did not write connects as `user` with: the URL, the user,
    /// and their password or (operator mode) the path of their credential file (`.creds`).
    pub fn foreign_login(&self, user: &str) -> [String; 3] {
        let secret = match self.creds_of(user) {
            Some(creds) => creds.display().to_string(),
            None => self
                .passwords
                .get(user)
                .cloned()
                .unwrap_or_else(|| password(user)),
        };
        [self.url(), user.to_owned(), secret]
    }

    pub async fn client(&self) -> Client {
        self.client_as(None).await
    }

    /// Starts the catalogue (as its own user in the accounts layout).
    pub async fn serve_catalog(&self) -> Running {
        self.serve_catalog_with_limits(None).await
    }

    /// The catalogue, publishing the people's limits from `limits` (a `limits.json`).
    pub async fn serve_catalog_with_limits(&self, limits: Option<std::path::PathBuf>) -> Running {
        self.serve_catalog_with(limits, None).await
    }

    /// The catalogue with the people's limits and who may call what (a `people.json`), as
    /// `mesh up` starts it.
    pub async fn serve_catalog_with(
        &self,
        limits: Option<std::path::PathBuf>,
        people: Option<std::path::PathBuf>,
    ) -> Running {
        let user = (self.layout == Layout::Accounts).then_some("catalog");
        let client = self.client_as(user).await;
        let issuer = mesh_catalog::Issuer::from_seed(&self.issuer.seed().unwrap()).unwrap();
        let options = mesh_catalog::Options {
            issuer,
            limits,
            people,
        };
        let module = mesh_catalog::module_with(client.nats().clone(), options)
            .await
            .expect("catalog starts");
        self.serve(module).await
    }

    /// A ticket for `person` (in `PEOPLE`) that lets module `audience` act for them during a
    /// call of `tool`, as this bus's issuer signs one, ending `ttl` from now.
    pub fn ticket(&self, person: &str, audience: &str, tool: &str, ttl: Duration) -> Ticket {
        self.ticket_granting(person, audience, tool, ttl, None)
    }

    /// As [`Bus::ticket`], carrying what the grant lets the audience call (`may`).
    pub fn ticket_granting(
        &self,
        person: &str,
        audience: &str,
        tool: &str,
        ttl: Duration,
        may: Option<&[&str]>,
    ) -> Ticket {
        let now = std::time::SystemTime::now();
        let claims = ticket::Claims {
            v: 1,
            iss: self.issuer.public_key(),
            sub: format!("{person}@PEOPLE"),
            aud: audience.into(),
            tool: tool.into(),
            call: uuid::Uuid::new_v4().to_string(),
            iat: ticket::ms(now),
            exp: ticket::ms(now + ttl),
            may: may.map(|m| m.iter().map(|t| t.to_string()).collect()),
        };
        Ticket::unchecked(&ticket::sign(&claims, &self.issuer).unwrap()).unwrap()
    }

    /// Starts `module` on its own connection (as the module's user in the accounts layout).
    pub async fn serve(&self, module: Module) -> Running {
        self.serve_with(module, ServeOptions::default()).await
    }

    pub async fn serve_with(&self, module: Module, mut options: ServeOptions) -> Running {
        let user = (self.layout == Layout::Accounts).then(|| module.name.clone());
        let client = self.client_as(user.as_deref()).await;
        options.layout = self.layout;
        // The keys are pinned to this bus's issuer: most tests serve no catalogue to ask.
        if options.ticket_keys.is_none() {
            options.ticket_keys = Some(vec![self.issuer.public_key()]);
        }
        serve_on(client.nats().clone(), module, options).await
    }
}

impl Bus {
    /// Starts `module` trusting no key it was given: it asks the catalogue for the keys
    /// tickets are signed with, as a module started by hand does.
    pub async fn serve_asking(&self, module: Module) -> Running {
        let user = (self.layout == Layout::Accounts).then(|| module.name.clone());
        let client = self.client_as(user.as_deref()).await;
        let options = ServeOptions {
            layout: self.layout,
            ..Default::default()
        };
        serve_on(client.nats().clone(), module, options).await
    }
}

/// Serves `module` on `nats` in the background.
pub async fn serve_on(nats: async_nats::Client, module: Module, options: ServeOptions) -> Running {
    let serving = Serving::start(module, nats, options)
        .await
        .expect("module starts");
    let id = serving.id().to_owned();
    let (stop, stopped) = oneshot::channel::<()>();
    let task = tokio::spawn(serving.run(async {
        let _ = stopped.await;
    }));
    Running {
        id,
        stop: Some(stop),
        task,
    }
}

/// A cluster of nats-servers on loopback with the accounts layout: every server the same
/// accounts, routes to the others, JetStream of its own. A client is put on one server (it
/// learns the others from it, and goes to one of them should its server go).
pub struct ClusterBus {
    pub cluster: mesh_bus::cluster::Cluster,
    /// In operator mode, each user's credential file (every server trusts the same operator
    /// and keeps the same accounts in its full resolver).
    creds: Option<std::collections::BTreeMap<String, std::path::PathBuf>>,
    _dir: tempfile::TempDir,
}

impl ClusterBus {
    /// `n` servers; `modules` each in an account of their own, `people` as (user, subjects).
    pub async fn accounts(n: usize, modules: &[&str], people: &[(&str, &[&str])]) -> ClusterBus {
        let modules: Vec<ModuleUser> = modules.iter().map(|m| module(m)).collect();
        ClusterBus::accounts_with(n, &modules, people).await
    }

    /// As [`ClusterBus::accounts`], with module users made by the caller.
    pub async fn accounts_with(
        n: usize,
        modules: &[ModuleUser],
        people: &[(&str, &[&str])],
    ) -> ClusterBus {
        let dir = tempfile::tempdir().unwrap();
        let modules = modules.to_vec();
        let people = persons(people);
        let binary = NatsServer::binary().unwrap_or_else(|e| panic!("{e}"));
        // Operator mode: the layout signed once; every server its own resolver directory.
        let signed = operator_mode().then(|| {
            let rendered = layout::accounts(-1, &dir.path().join("js"), &modules, &people);
            sign_for_operator_mode(&rendered, &dir.path().join("operator"))
        });
        let resolvers = dir.path().join("operator");
        let cluster = mesh_bus::cluster::Cluster::start(n, dir.path(), binary, None, |slot| {
            let conf = layout::accounts(slot.config_port(), slot.store_dir, &modules, &people);
            match &signed {
                None => conf,
                Some((signed, _)) => format!(
                    "{}\n{}",
                    mesh_bus::operator::without_accounts(&conf),
                    signed.server_block(&resolvers.join(format!("jwt-{}", slot.index)))
                ),
            }
        })
        .await
        .unwrap_or_else(|e| panic!("{e}"));
        let creds = signed.map(|(_, users)| users);
        let any = people.first().map(|p| p.user.as_str()).unwrap_or("catalog");
        let bus = ClusterBus {
            cluster,
            creds,
            _dir: dir,
        };
        assert!(
            bus.cluster
                .formed(&bus.config_as(any), Duration::from_secs(30))
                .await,
            "the cluster's servers did not all see each other"
        );
        bus
    }

    /// How `user` connects (to whichever server `server` names).
    fn config_as(&self, user: &str) -> ConnectConfig {
        match &self.creds {
            Some(users) => ConnectConfig {
                creds: Some(
                    users
                        .get(user)
                        .cloned()
                        .unwrap_or_else(|| panic!("no user {user} in this cluster's layout")),
                ),
                isolated: true,
                ..Default::default()
            },
            None => ConnectConfig {
                user: Some(user.to_owned()),
                password: Some(password(user)),
                isolated: true,
                ..Default::default()
            },
        }
    }

    pub fn url(&self, server: usize) -> String {
        self.cluster.servers[server].url()
    }

    /// The `mesh` flags that connect to server `server` as `user`.
    pub fn flags(&self, server: usize, user: &str) -> Vec<String> {
        let mut flags = vec!["--server".to_owned(), self.url(server)];
        let config = self.config_as(user);
        match config.creds {
            Some(creds) => flags.extend(["--creds".to_owned(), creds.display().to_string()]),
            None => flags.extend(["--user".to_owned(), user.to_owned()]),
        }
        if let Some(password) = config.password {
            flags.extend(["--password".to_owned(), password]);
        }
        flags
    }

    /// The environment a module process connects as `user` with, as `mesh up` gives it:
    /// its credential file (`NATS_CREDS`), or its user and password.
    pub fn login_env(&self, user: &str) -> Vec<(&'static str, String)> {
        let config = self.config_as(user);
        match (config.creds, config.password) {
            (Some(creds), _) => vec![("NATS_CREDS", creds.display().to_string())],
            (None, password) => vec![
                ("NATS_USER", user.to_owned()),
                ("NATS_PASSWORD", password.unwrap_or_default()),
            ],
        }
    }

    /// async-nats's options for connecting as `user`, for a test that sets more of them.
    pub async fn nats_options(&self, user: &str) -> async_nats::ConnectOptions {
        let config = self.config_as(user);
        match config.creds {
            Some(creds) => async_nats::ConnectOptions::with_credentials_file(creds)
                .await
                .expect("the credential file reads"),
            None => {
                async_nats::ConnectOptions::new().user_and_password(user.to_owned(), password(user))
            }
        }
    }

    /// A client as `user` on server `server`.
    pub async fn client_on(&self, server: usize, user: &str) -> Client {
        let config = ConnectConfig {
            server: Some(self.url(server)),
            ..self.config_as(user)
        };
        Client::connect(&config)
            .await
            .expect("connect to the test cluster")
    }

    /// Serves `module` as its own user, connected to server `server`.
    pub async fn serve_on(&self, server: usize, module: Module) -> Running {
        let client = self.client_on(server, &module.name.clone()).await;
        let options = ServeOptions {
            layout: Layout::Accounts,
            ..Default::default()
        };
        serve_on(client.nats().clone(), module, options).await
    }

    /// Starts the catalogue on server `server`.
    pub async fn serve_catalog_on(&self, server: usize) -> Running {
        let client = self.client_on(server, "catalog").await;
        let module = mesh_catalog::module(client.nats().clone())
            .await
            .expect("catalog starts");
        self.serve_on(server, module).await
    }
}

/// A module serving in the background.
pub struct Running {
    pub id: String,
    stop: Option<oneshot::Sender<()>>,
    task: JoinHandle<()>,
}

impl Running {
    /// Asks the module to drain and waits until it has.
    pub async fn stop(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        (&mut self.task).await.expect("module task ends cleanly");
    }

    /// Asks the module to drain without waiting; `join` waits.
    pub fn begin_stop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }

    pub async fn join(self) {
        self.task.await.expect("module task ends cleanly");
    }
}

/// Whether process `pid` runs. A zombie has ended for this purpose: it answers signal 0 until
/// reaped, and here PID 1 reaps nothing.
pub fn alive(pid: i32) -> bool {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let zombie = stat
        .rsplit_once(") ")
        .is_some_and(|(_, rest)| rest.starts_with('Z'));
    // SAFETY: signal 0 only asks whether the process exists.
    !zombie && unsafe { libc::kill(pid, 0) } == 0
}

/// Whether process `pid` ignores SIGPIPE (`SigIgn` in /proc/<pid>/status, bit 13).
pub fn ignores_sigpipe(pid: u32) -> bool {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let mask = status
        .lines()
        .find_map(|l| l.strip_prefix("SigIgn:"))
        .map(|m| u64::from_str_radix(m.trim(), 16).unwrap())
        .unwrap();
    mask & (1 << (libc::SIGPIPE - 1)) != 0
}
