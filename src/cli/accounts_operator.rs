//! `mesh accounts --auth operator --out DIR`: the accounts layout signed as JWTs for a site's
//! servers in operator mode (operator.rs in mesh-bus), written as files, and `--push URL`
//! sending the accounts to a running full resolver.

use std::path::Path;

use super::args::AccountsArgs;
use mesh_bus::callout;
use mesh_bus::layout;
use mesh_bus::operator::{self, KeyRing, SYSTEM_ACCOUNT, SYSTEM_USER, Signed};
use mesh_bus::site::{self, Site};
use mesh_core::client::{Exit, on_this_machine, write_private};

/// Writes the signed layout into `out`: a configuration per server (`config` is the file
/// layout as rendered, with its listen, TLS and leaf blocks), the JWTs, every user's
/// credential file and the keys; then pushes, if asked.
pub async fn write(args: &AccountsArgs, config: &str, out: &Path) -> anyhow::Result<Exit> {
    std::fs::create_dir_all(out)?;
    let mut ring = KeyRing::open(&out.join("keys"))?;
    if let Some(exit) = use_site_keys(args, &mut ring)? {
        return Ok(exit);
    }
    let root = mesh_bus::natsconf::parse_str(config, Path::new("accounts.conf"))?;
    let people_from_idp = args.idp.idp.is_some();
    if people_from_idp {
        // PEOPLE lists the callout's signing key; the callout never holds PEOPLE's own.
        callout::delegate(&mut ring);
    }
    let mut signed = operator::sign(&root, &mut ring)?;
    let mapping = out.join(callout::MAPPING_FILE);
    match (&args.idp.idp, &args.idp.audience) {
        (Some(issuer), Some(audience)) => {
            callout::add_accounts(&mut signed, &mut ring)?;
            // How the callout names people, for `mesh audit`.
            let said = callout::Mapping {
                issuer: issuer.clone(),
                audience: audience.clone(),
                claim: args.idp.claim.clone(),
            };
            std::fs::write(&mapping, serde_json::to_string_pretty(&said)?)?;
        }
        _ => {
            let _ = std::fs::remove_file(&mapping);
        }
    }
    let base = operator::without_accounts(config);
    // Each server keeps the accounts it is sent beside its JetStream store.
    let resolver = args.store_dir.with_file_name("jwt");
    let trust = signed.server_block(&resolver);
    if args.cluster.is_empty() {
        let path = out.join("nats-server.conf");
        write_private(&path, &format!("{base}\n{trust}"))
            .map_err(|e| anyhow::anyhow!("cannot write {}: {e}", path.display()))?;
        eprintln!("mesh: wrote {} (operator mode)", path.display());
    } else {
        let secret = layout::route_secret();
        for (i, route) in args.cluster.iter().enumerate() {
            let node = layout::ClusterNode {
                cluster: mesh_bus::cluster::CLUSTER_NAME.to_owned(),
                server: format!("{}-{i}", mesh_bus::cluster::CLUSTER_NAME),
                listen: route.clone(),
                routes: args.cluster.clone(),
                secret: secret.clone(),
                tls: match (&args.tls_cert, &args.tls_key, &args.tls_ca) {
                    (Some(cert), Some(key), Some(ca)) => Some(layout::Tls {
                        cert: cert.clone(),
                        key: key.clone(),
                        ca: ca.clone(),
                    }),
                    _ => None,
                },
            };
            let path = out.join(format!("nats-server-{i}.conf"));
            let text = format!("{base}\n{}\n{trust}", layout::cluster_block(&node));
            write_private(&path, &text)
                .map_err(|e| anyhow::anyhow!("cannot write {}: {e}", path.display()))?;
            eprintln!(
                "mesh: wrote {} (operator mode, routes on {route})",
                path.display()
            );
        }
    }
    write_jwts(out, &signed, args.nsc.is_some())?;
    // The callout's own folder: its keys only, never the others `keys/` holds.
    let callout_dir = if people_from_idp {
        Some(callout::write_service_dir(out, &signed, &mut ring)?)
    } else {
        None
    };
    eprintln!(
        "mesh: wrote the operator's and accounts' JWTs, each user's credential file into {} and the keys into {} (keep both private; hand each module its own file)",
        out.join("creds").display(),
        out.join("keys").display()
    );
    if let Some(callout_dir) = &callout_dir {
        eprintln!(
            "mesh: people sign in with their ID token and {} (public: it may do nothing); answer their sign-ins with `mesh callout --dir {} --grants … --idp … --server …` (that folder holds only the callout's keys: copy it alone to the callout's host)",
            out.join("creds")
                .join(format!(
                    "{}.{}.creds",
                    callout::ACCOUNT,
                    callout::SENTINEL_USER
                ))
                .display(),
            callout_dir.display()
        );
    }
    if let Some(url) = &args.push {
        return push(url, &signed, args.tls_ca.as_deref()).await;
    }
    Ok(Exit::Ok)
}

/// The site's own keys and operator the ring signs with, as the arguments give them; an
/// exit when they cannot be used (said on stderr).
fn use_site_keys(args: &AccountsArgs, ring: &mut KeyRing) -> anyhow::Result<Option<Exit>> {
    let read = |path: &Path, what: &str| {
        std::fs::read_to_string(path)
            .map_err(|e| anyhow::anyhow!("cannot read the {what} {}: {e}", path.display()))
    };
    if let Some(path) = &args.operator_key
        && ring.use_operator(&read(path, "operator key")?).is_err()
    {
        eprintln!(
            "mesh: {} holds no operator seed (SO…): give the operator's key file as nsc keeps it",
            path.display()
        );
        return Ok(Some(Exit::Usage));
    }
    if let Some(path) = &args.signing_key
        && ring.use_signing_key(&read(path, "signing key")?).is_err()
    {
        eprintln!(
            "mesh: {} holds no operator signing key seed (SO…): give the signing key's file as nsc keeps it (`nsc list keys --show-seeds` finds it)",
            path.display()
        );
        return Ok(Some(Exit::Usage));
    }
    if let Some(store) = &args.nsc {
        let Some(keys) = args.nsc_keys.clone().or_else(site::nsc_keys_dir) else {
            eprintln!("mesh: no folder of nsc's keys: give --nsc-keys (or set NKEYS_PATH)");
            return Ok(Some(Exit::Usage));
        };
        match Site::from_nsc(store, &keys) {
            Ok((found, None)) if args.signing_key.is_none() => {
                let e = site::SiteError::NoSigner {
                    operator: found.operator.name,
                    keys,
                };
                eprintln!("mesh: {e}");
                return Ok(Some(Exit::Usage));
            }
            Ok((found, signer)) => {
                eprintln!(
                    "mesh: joining operator {} ({}) from {}; its system account {} as nsc keeps it{}",
                    found.operator.name,
                    found.operator.sub,
                    store.display(),
                    found.system.name,
                    if found.system_user.is_some() {
                        ""
                    } else {
                        " (no user of it with a seed in nsc's keys: --push cannot sign in)"
                    }
                );
                ring.use_site(found, signer);
            }
            Err(e) => {
                eprintln!("mesh: {}", super::audit::chain(&e));
                return Ok(Some(Exit::Usage));
            }
        }
    }
    Ok(None)
}

fn write_jwts(out: &Path, signed: &Signed, site: bool) -> anyhow::Result<()> {
    let accounts = out.join("accounts");
    let creds = out.join("creds");
    mesh_core::runtime::private_dir(&creds)
        .map_err(|e| anyhow::anyhow!("cannot make {}: {e}", creds.display()))?;
    std::fs::create_dir_all(&accounts)?;
    std::fs::write(out.join("operator.jwt"), &signed.operator)?;
    for a in &signed.accounts {
        std::fs::write(accounts.join(format!("{}.jwt", a.name)), &a.jwt)?;
    }
    // A site's system user stays where the site keeps it: only the mesh's own are written.
    for u in signed
        .users
        .iter()
        .filter(|u| !(site && u.account == SYSTEM_ACCOUNT))
    {
        let path = creds.join(format!("{}.{}.creds", u.account, u.name));
        write_private(&path, &u.creds)
            .map_err(|e| anyhow::anyhow!("cannot write {}: {e}", path.display()))?;
    }
    // Which account each key is: what the servers stamp on a request is the key.
    std::fs::write(
        out.join("accounts.json"),
        serde_json::to_string_pretty(&signed.names())?,
    )?;
    Ok(())
}

async fn push(url: &str, signed: &Signed, tls_ca: Option<&Path>) -> anyhow::Result<Exit> {
    let Some(system) = signed.user(SYSTEM_ACCOUNT, SYSTEM_USER) else {
        eprintln!(
            "mesh: no user of the system account to push with: nsc keeps no seed for one (`nsc add user -a SYS sys`)"
        );
        return Ok(Exit::Usage);
    };
    // The system account's user signs in beyond this machine only over TLS: in the clear,
    // anyone on the path can relay its signature of the server's nonce and keep the session
    // (the system account kicks clients, puts servers in lame duck, reads every event).
    let servers: Vec<&str> = url
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .collect();
    let tls = tls_ca.is_some()
        || servers
            .iter()
            .all(|s| s.get(..6).is_some_and(|p| p.eq_ignore_ascii_case("tls://")));
    if !tls && !servers.iter().all(|s| on_this_machine(s)) {
        eprintln!(
            "mesh: {url} is beyond this machine: the system account's user signs in there only over TLS: push to tls://… (with --tls-ca if the servers' authority is your site's own)"
        );
        return Ok(Exit::Usage);
    }
    let mut options = async_nats::ConnectOptions::with_credentials(&system.creds)?;
    if !tls {
        // Only the servers named (on this machine): not ones a cluster's INFO names beyond it.
        options = options.ignore_discovered_servers();
    }
    // Servers that take clients over TLS (--tls-ca): reached over TLS, their certificates
    // checked against the site's authority.
    if let Some(ca) = tls_ca {
        options = options
            .add_root_certificates(ca.to_owned())
            .require_tls(true);
    }
    let client = match options.connect(url).await {
        Ok(c) => c,
        Err(e) => {
            eprintln!(
                "mesh: cannot reach {url} as the system account's user ({e}): is it a server of this operator, and does it run?"
            );
            return Ok(Exit::Usage);
        }
    };
    let mut failed = 0;
    for p in operator::push(&client, signed).await {
        match p.outcome {
            Ok(()) => eprintln!("mesh: {} ({}) is in the resolver", p.name, p.key),
            Err(why) => {
                failed += 1;
                eprintln!("mesh: {} ({}) was not taken: {why}", p.name, p.key);
            }
        }
    }
    // A resolver that refused an account: the grants did not reach it.
    Ok(if failed == 0 {
        Exit::Ok
    } else {
        Exit::ToolError
    })
}
