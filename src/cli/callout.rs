//! `mesh callout`: the auth callout of a site's servers run as a service of its own — people
//! sign in with their identity provider's ID tokens and are let in as the grants file says,
//! with the keys and credential `mesh accounts --auth operator --idp … --out DIR` wrote in
//! DIR/callout (the callout's own, and no other key).

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::{Arc, RwLock};

use anyhow::Context as _;
use mesh_bus::callout::{self, Callout};
use mesh_bus::grants::Grants;
use mesh_bus::jwt::User;
use mesh_bus::operator::{self, KeyRing};
use mesh_core::client::{Client, ConnectConfig, Exit};
use mesh_core::runtime::Stop;

use super::args::CalloutArgs;

pub async fn run(args: CalloutArgs) -> anyhow::Result<Exit> {
    let Some(provider) = super::jwks::provider(&args.idp).await? else {
        eprintln!(
            "mesh: name the identity provider: --idp ISSUER --jwks FILE|URL --audience AUD (as given to mesh accounts)"
        );
        return Ok(Exit::Usage);
    };
    let creds = args.dir.join("creds").join(format!(
        "{}.{}.creds",
        callout::ACCOUNT,
        callout::SERVICE_USER
    ));
    if !creds.exists() {
        eprintln!(
            "mesh: {} is missing: write the callout's account and keys first with `mesh accounts --auth operator --idp … --out {}`",
            creds.display(),
            args.dir.display()
        );
        return Ok(Exit::Usage);
    }
    // The callout's folder holds its own keys only: one that holds others (every account's,
    // as `mesh accounts --out` keeps them) would let whoever runs it sign any module's users.
    let others: Vec<String> = std::fs::read_dir(args.dir.join("keys"))
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            e.file_name()
                .to_str()?
                .strip_suffix(".nk")
                .map(str::to_owned)
        })
        .filter(|name| !callout::SERVICE_KEYS.contains(&name.as_str()))
        .collect();
    if !others.is_empty() {
        eprintln!(
            "mesh: {} holds keys beyond the callout's ({}; every account's, as `mesh accounts --out` keeps them): run the callout with --dir {}, the folder that holds only its own",
            args.dir.join("keys").display(),
            others.join(", "),
            args.dir.join(callout::SERVICE_DIR).display()
        );
        return Ok(Exit::Usage);
    }
    let people_file = args.dir.join(callout::PEOPLE_KEY_FILE);
    let people_account = match callout::people_key(&args.dir) {
        Some(key) => key,
        None => {
            eprintln!(
                "mesh: {} does not name PEOPLE's public key: write the callout's folder with `mesh accounts --auth operator --idp … --out DIR` and give --dir DIR/{}",
                people_file.display(),
                callout::SERVICE_DIR
            );
            return Ok(Exit::Usage);
        }
    };
    let now = match people(&args.grants) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("mesh: {e:#}");
            return Ok(Exit::Usage);
        }
    };
    let count = now.len();
    let grants = Arc::new(RwLock::new(now));
    let mut ring = KeyRing::open(&args.dir.join("keys"))?;
    let callout = Callout::with_keys(&mut ring, people_account.clone(), provider, grants.clone())?;
    // With the system account's user, the sessions of people whose grants a reread changes
    // are closed at once; without, each keeps its grants until its token expires.
    let system = match &args.system_creds {
        None => None,
        Some(path) => Some(
            Client::connect(&ConnectConfig {
                server: Some(args.server.clone()),
                creds: Some(path.clone()),
                tls_ca: args.tlsca.clone(),
                name: Some("mesh callout: signing out".into()),
                isolated: true,
                ..Default::default()
            })
            .await?,
        ),
    };
    let client = Client::connect(&ConnectConfig {
        server: Some(args.server.clone()),
        creds: Some(creds),
        tls_ca: args.tlsca.clone(),
        name: Some("mesh callout: people's sign-in".into()),
        isolated: true,
        ..Default::default()
    })
    .await?;
    let mut hangup = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup())
        .context("cannot listen for SIGHUP")?;
    let mut stop = Stop::listen().context("cannot listen for Ctrl-C and SIGTERM")?;
    // Said to answer only once it listens.
    let listening = callout.listen(client.nats().clone()).await?;
    let mut serving = tokio::spawn(listening.serve());
    eprintln!(
        "mesh: answering sign-ins at {} for the {count} people of {} (SIGHUP reads it again; Ctrl-C stops)",
        args.server,
        args.grants.display()
    );
    loop {
        tokio::select! {
            () = stop.next() => return Ok(Exit::Ok),
            _ = hangup.recv() => match people(&args.grants) {
                Ok(now) => {
                    eprintln!("mesh: {} read again: {} people", args.grants.display(), now.len());
                    let before = std::mem::replace(
                        &mut *grants.write().unwrap_or_else(|e| e.into_inner()),
                        now.clone(),
                    );
                    let changed = callout::changed(&before, &now);
                    if let (Some(system), false) = (&system, changed.is_empty()) {
                        match callout::sign_out(system.nats(), &people_account, &changed).await {
                            Ok(n) => eprintln!(
                                "mesh: signed out {n} session(s) of {}, whose grants changed",
                                changed.join(", ")
                            ),
                            Err(e) => eprintln!(
                                "mesh: {}; their sessions keep their grants until their tokens expire",
                                super::audit::chain(&e)
                            ),
                        }
                    }
                }
                // A broken edit changes nobody's grant: the last good ones stay in force.
                Err(e) => eprintln!("mesh: {e:#}; the grants read before stay in force"),
            },
            ended = &mut serving => {
                let why = match ended {
                    Ok(Ok(())) => "the connection to the servers closed".to_owned(),
                    Ok(Err(e)) => super::audit::chain(&e),
                    Err(e) => e.to_string(),
                };
                eprintln!("mesh: the callout stopped: {why}");
                return Ok(Exit::Usage);
            }
        }
    }
}

/// Each person's user claims as the grants file at `path` gives them (the layout signed
/// with throwaway keys: only the claims are kept).
fn people(path: &Path) -> anyhow::Result<BTreeMap<String, User>> {
    let grants = Grants::read_file(path)
        .map_err(|e| anyhow::anyhow!("cannot read the grants {}: {e}", path.display()))?;
    let rendered = grants.render(-1, Path::new("jetstream"));
    let root = mesh_bus::natsconf::parse_str(&rendered.config, path)?;
    let signed = operator::sign(&root, &mut KeyRing::in_memory())?;
    Ok(callout::people_of(&signed))
}
