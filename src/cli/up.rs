//! `mesh up`: a whole local mesh on loopback — nats-server in the two-account layout, the
//! built-in modules, a `nats` context for the person — until Ctrl-C.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context as _, bail};
use serde::{Deserialize, Serialize};
use tokio::sync::watch;

use super::args::UpArgs;
use super::exit::Exit;
use super::run::{BUILTIN, builtin, shutdown_signal};
use crate::actor::Layout;
use crate::client::{Client, ConnectConfig, Context, write_private};
use crate::grants::{Grants, PersonGrant, Rendered, Role};
use crate::layout;
use crate::mcp::{self, Relay, RelayOptions};
use crate::natsd::NatsServer;
use crate::runtime::{ServeOptions, Serving};

/// The context written for the person, selected so commands work without flags.
pub const CONTEXT: &str = "mesh";
/// A second person who may call only `echo_echo`: the tour's way to see "denied".
pub const GUEST: &str = "guest";
const GUEST_MAY_CALL: &str = "echo_echo";

/// What a running `mesh up` says about itself in its state directory.
#[derive(Serialize, Deserialize)]
struct UpInfo {
    pid: u32,
    url: String,
    nats_server_pid: Option<u32>,
}

pub async fn run(args: UpArgs) -> anyhow::Result<Exit> {
    let dir = args.dir.clone().unwrap_or_else(default_dir);
    std::fs::create_dir_all(&dir)
        .with_context(|| format!("cannot create the state directory {}", dir.display()))?;
    let _lock = match lock(&dir)? {
        Some(lock) => lock,
        None => {
            let info = std::fs::read_to_string(dir.join("up.json"))
                .ok()
                .and_then(|t| serde_json::from_str::<UpInfo>(&t).ok());
            match info {
                Some(i) => eprintln!(
                    "mesh: a mesh is already up from {} (pid {}, {}); stop it with Ctrl-C there, or `kill {}`",
                    dir.display(),
                    i.pid,
                    i.url,
                    i.pid
                ),
                None => eprintln!("mesh: a mesh is already up from {}", dir.display()),
            }
            return Ok(Exit::Usage);
        }
    };

    let person = person_name(args.person.as_deref())?;
    // The same generator `mesh accounts` runs on a grants file.
    let grants = Grants {
        modules: BUILTIN.map(String::from).to_vec(),
        roles: [
            (
                "everything".to_owned(),
                Role {
                    all: true,
                    ..Role::default()
                },
            ),
            (
                GUEST.to_owned(),
                Role {
                    tools: vec![GUEST_MAY_CALL.to_owned()],
                    ..Role::default()
                },
            ),
        ]
        .into(),
        people: vec![
            PersonGrant {
                user: person.clone(),
                password: None,
                roles: vec!["everything".into()],
            },
            PersonGrant {
                user: GUEST.into(),
                password: None,
                roles: vec![GUEST.into()],
            },
        ],
    };
    let port = args.port.map(i32::from).unwrap_or(-1);
    let Rendered {
        config: conf,
        passwords,
    } = grants.render(port, &dir.join("jetstream"));
    let password = |user: &str| passwords[user].clone();
    let conf_path = dir.join("nats-server.conf");
    write_private(&conf_path, &conf)
        .with_context(|| format!("cannot write {}", conf_path.display()))?;

    let binary = match args.nats_server.clone() {
        Some(b) => b,
        None => NatsServer::binary()?,
    };
    let log = dir.join("nats-server.log");
    let mut server = NatsServer::start_using(binary, &conf_path, args.port, &log).await?;
    let url = server.url();

    let (stop_tx, stop_rx) = watch::channel(false);
    let mut running = Vec::new();
    for m in BUILTIN {
        let config = ConnectConfig {
            server: Some(url.clone()),
            user: Some(m.to_owned()),
            password: Some(password(m)),
            name: Some(format!("mesh up: {m}")),
            isolated: true,
            ..Default::default()
        };
        let client = Client::connect(&config).await?;
        let module = builtin(m, &client, &dir).await?;
        let options = ServeOptions {
            layout: Layout::TwoAccount,
            ..Default::default()
        };
        let serving = Serving::start(module, client.nats().clone(), options).await?;
        let mut stop = stop_rx.clone();
        running.push(tokio::spawn(serving.run(async move {
            let _ = stop.wait_for(|s| *s).await;
        })));
    }

    // The console relays as you, like `mesh serve` from your terminal would.
    let console = match mcp::http::bind(
        "127.0.0.1",
        args.console_port.unwrap_or(mcp::http::DEFAULT_PORT),
    )
    .await
    {
        Ok(l) => l,
        Err(_) if args.console_port.is_none() => mcp::http::bind("127.0.0.1", 0).await?,
        Err(e) => return Err(e.context("cannot bind the console")),
    };
    let console_url = format!("http://{}{}", console.local_addr()?, mcp::http::PATH);
    let as_person = ConnectConfig {
        server: Some(url.clone()),
        user: Some(person.clone()),
        password: Some(password(&person)),
        name: Some("mesh up: console".into()),
        isolated: true,
        ..Default::default()
    };
    let relay = Relay::new(Client::connect(&as_person).await?, RelayOptions::default());
    let mut stop = stop_rx.clone();
    let console_task = tokio::spawn(mcp::http::serve(relay, console, async move {
        let _ = stop.wait_for(|s| *s).await;
    }));

    let context_for = |user: &str| Context {
        description: format!("mesh up in {}", dir.display()),
        url: url.clone(),
        user: user.to_owned(),
        password: password(user),
        inbox_prefix: layout::inbox_prefix(user),
        ..Default::default()
    };
    let (path, before) = context_for(&person)
        .write(CONTEXT, true)
        .context("cannot write the nats context")?;
    context_for(GUEST)
        .write(&format!("{CONTEXT}-{GUEST}"), false)
        .context("cannot write the guest's nats context")?;

    let info = UpInfo {
        pid: std::process::id(),
        url: url.clone(),
        nats_server_pid: server.pid(),
    };
    std::fs::write(dir.join("up.json"), serde_json::to_string(&info)?)?;

    println!("mesh is up");
    println!(
        "  nats-server {url} (pid {}), two accounts: MESH for modules, PEOPLE for people",
        server.pid().unwrap_or_default()
    );
    println!("  modules:     {}", BUILTIN.join(", "));
    println!("  you:         {person}@PEOPLE, may call every tool");
    println!("  guest:       {GUEST}@PEOPLE, may call echo_echo only (context {CONTEXT}-{GUEST})");
    println!("  state:       {}", dir.display());
    match before.filter(|b| b != CONTEXT) {
        Some(b) => println!(
            "  nats context {CONTEXT} selected ({}); it was {b}: `nats context select {b}` to go back",
            path.display()
        ),
        None => println!("  nats context {CONTEXT} selected ({})", path.display()),
    }
    println!("  console:     {console_url} (MCP over streamable HTTP, loopback only)");
    let exe = std::env::current_exe()
        .map(|p| p.display().to_string())
        .unwrap_or_else(|_| "mesh".into());
    println!();
    println!("MCP client configuration (either entry):");
    let snippet = serde_json::json!({"mcpServers": {
        "mesh": {"command": exe, "args": ["--context", CONTEXT, "mcp"]},
        "mesh-console": {"type": "http", "url": console_url},
    }});
    println!("{}", serde_json::to_string_pretty(&snippet)?);
    println!();
    println!("From another terminal:");
    println!("  mesh tools");
    println!("  mesh call echo_echo text=hello");
    println!("  nats req mesh.echo.echo '{{\"text\":\"hello\"}}'");
    println!("Ctrl-C stops everything.");

    let exit = tokio::select! {
        _ = shutdown_signal() => Exit::Ok,
        status = server.exited() => {
            eprintln!("mesh: nats-server stopped by itself ({status:?}); see {}", log.display());
            Exit::Usage
        }
    };
    eprintln!("mesh: stopping");
    let _ = stop_tx.send(true);
    for task in running {
        let _ = task.await;
    }
    let _ = console_task.await;
    server.terminate(Duration::from_secs(10)).await;
    let _ = std::fs::remove_file(dir.join("up.json"));
    Ok(exit)
}

/// `$XDG_STATE_HOME/mesh`, else `~/.local/state/mesh`, else `.mesh`.
pub fn default_dir() -> PathBuf {
    let env = |k: &str| {
        std::env::var_os(k)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
    };
    env("XDG_STATE_HOME")
        .or_else(|| env("HOME").map(|h| h.join(".local/state")))
        .map(|d| d.join("mesh"))
        .unwrap_or_else(|| PathBuf::from(".mesh"))
}

/// Takes the state directory's lock; `None` when another `mesh up` holds it. The lock goes
/// with the process, however it ends.
fn lock(dir: &Path) -> anyhow::Result<Option<File>> {
    let path = dir.join("lock");
    let file = File::create(&path).with_context(|| format!("cannot open {}", path.display()))?;
    match file.try_lock() {
        Ok(()) => Ok(Some(file)),
        Err(std::fs::TryLockError::WouldBlock) => Ok(None),
        Err(std::fs::TryLockError::Error(e)) => {
            Err(e).with_context(|| format!("cannot lock {}", path.display()))
        }
    }
}

/// The person's user name: given, else `$USER`, checked to be usable in a subject.
fn person_name(given: Option<&str>) -> anyhow::Result<String> {
    let name = match given {
        Some(n) => n.to_owned(),
        None => std::env::var("USER").unwrap_or_else(|_| "me".into()),
    };
    let ok = !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
    if !ok {
        bail!(
            "user name {name:?} cannot be used in a subject: give one of [A-Za-z0-9_-] with --as"
        );
    }
    if name == GUEST || BUILTIN.contains(&name.as_str()) {
        bail!("user name {name:?} is taken by mesh up itself: choose another with --as");
    }
    Ok(name)
}
