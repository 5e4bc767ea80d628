//! `mesh accounts --auth operator --out DIR`: the accounts layout signed as JWTs for a site's
//! servers in operator mode (operator.rs in mesh-bus), written as files, and `--push URL`
//! sending the accounts to a running full resolver.

use std::path::Path;

use super::args::AccountsArgs;
use mesh_bus::layout;
use mesh_bus::operator::{self, KeyRing, SYSTEM_ACCOUNT, SYSTEM_USER, Signed};
use mesh_core::client::{Exit, write_private};

/// Writes the signed layout into `out`: a configuration per server (`config` is the file
/// layout as rendered, with its listen, TLS and leaf blocks), the JWTs, every user's
/// credential file and the keys; then pushes, if asked.
pub async fn write(args: &AccountsArgs, config: &str, out: &Path) -> anyhow::Result<Exit> {
    std::fs::create_dir_all(out)?;
    let mut ring = KeyRing::open(&out.join("keys"))?;
    if let Some(path) = &args.operator_key {
        let seed = std::fs::read_to_string(path)
            .map_err(|e| anyhow::anyhow!("cannot read the operator key {}: {e}", path.display()))?;
        if ring.use_operator(&seed).is_err() {
            eprintln!(
                "mesh: {} holds no operator seed (SO…): give the operator's key file as nsc keeps it",
                path.display()
            );
            return Ok(Exit::Usage);
        }
    }
    let root = mesh_bus::natsconf::parse_str(config, Path::new("accounts.conf"))?;
    let signed = operator::sign(&root, &mut ring)?;
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
    write_jwts(out, &signed)?;
    eprintln!(
        "mesh: wrote the operator's and accounts' JWTs, each user's credential file into {} and the keys into {} (keep both private; hand each module its own file)",
        out.join("creds").display(),
        out.join("keys").display()
    );
    if let Some(url) = &args.push {
        return push(url, out, &signed).await;
    }
    Ok(Exit::Ok)
}

fn write_jwts(out: &Path, signed: &Signed) -> anyhow::Result<()> {
    let accounts = out.join("accounts");
    let creds = out.join("creds");
    mesh_core::runtime::private_dir(&creds)
        .map_err(|e| anyhow::anyhow!("cannot make {}: {e}", creds.display()))?;
    std::fs::create_dir_all(&accounts)?;
    std::fs::write(out.join("operator.jwt"), &signed.operator)?;
    for a in &signed.accounts {
        std::fs::write(accounts.join(format!("{}.jwt", a.name)), &a.jwt)?;
    }
    for u in &signed.users {
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

async fn push(url: &str, out: &Path, signed: &Signed) -> anyhow::Result<Exit> {
    let creds = out
        .join("creds")
        .join(format!("{SYSTEM_ACCOUNT}.{SYSTEM_USER}.creds"));
    let client = match async_nats::ConnectOptions::with_credentials_file(&creds)
        .await?
        .connect(url)
        .await
    {
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
