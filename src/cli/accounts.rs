//! `mesh accounts --grants <file>`: the accounts layout's nats-server configuration for a grants
//! file, on stdout; or, for a cluster (`--cluster` routes, `--out` folder), one per server;
//! or signed for operator mode (`--auth operator`, accounts_operator.rs).

use super::accounts_operator;
use super::args::{AccountsArgs, Auth};
use mesh_bus::cluster::CLUSTER_NAME;
use mesh_bus::grants::Grants;
use mesh_bus::layout;
use mesh_core::client::{Context, Exit, write_private};

pub async fn run(args: AccountsArgs) -> anyhow::Result<Exit> {
    let operator = args.auth == Auth::Operator;
    if operator && args.out.is_none() {
        eprintln!("mesh: operator mode writes several files: give --out DIR");
        return Ok(Exit::Usage);
    }
    if !operator && args.idp.idp.is_some() {
        eprintln!(
            "mesh: people sign in with an identity provider in operator mode only: add --auth operator"
        );
        return Ok(Exit::Usage);
    }
    if operator && args.credentials.is_some() {
        eprintln!(
            "mesh: in operator mode each user's credential file is written into --out's creds/: leave --credentials out"
        );
        return Ok(Exit::Usage);
    }
    if !operator && args.out.is_some() && args.cluster.is_empty() {
        eprintln!(
            "mesh: --out is for a cluster's configurations (--cluster) or operator mode (--auth operator)"
        );
        return Ok(Exit::Usage);
    }
    let grants = match Grants::read_file(&args.grants) {
        Ok(g) => g,
        Err(e) => {
            eprintln!("mesh: cannot read the grants: {e}");
            return Ok(Exit::Usage);
        }
    };
    if let Some(path) = &args.limits {
        // Who may call what beside them: the ticket issuer signs only for those.
        let people = mesh_bus::statedir::write_catalog_files(path, &grants)?;
        eprintln!(
            "mesh: wrote the people's limits to {} and who may call what (for the ticket issuer) to {}",
            path.display(),
            people.display()
        );
    }
    let port = i32::from(args.port);
    let rendered = grants.render(port, &args.store_dir);
    if let (Some(dir), Some(servers)) = (&args.credentials, &args.credentials_url) {
        mesh_core::runtime::private_dir(dir)
            .map_err(|e| anyhow::anyhow!("cannot make {}: {e}", dir.display()))?;
        for m in &grants.modules {
            let context = Context {
                description: format!("module {} (mesh accounts)", m.name),
                url: servers.clone(),
                user: m.name.clone(),
                password: rendered.passwords.get(&m.name).cloned().unwrap_or_default(),
                inbox_prefix: layout::inbox_prefix(&m.name),
                ..Default::default()
            };
            let path = dir.join(format!("{}.json", m.name));
            write_private(&path, &serde_json::to_string_pretty(&context)?)
                .map_err(|e| anyhow::anyhow!("cannot write {}: {e}", path.display()))?;
        }
        eprintln!(
            "mesh: wrote each module's credential into {} (hand each to its module alone)",
            dir.display()
        );
    }
    let mut config = match &args.listen {
        Some(listen) => layout::listening_on(&rendered.config, port, listen),
        None => rendered.config.clone(),
    };
    let tls = match (&args.tls_cert, &args.tls_key, &args.tls_ca) {
        (Some(cert), Some(key), Some(ca)) => Some(layout::Tls {
            cert: cert.clone(),
            key: key.clone(),
            ca: ca.clone(),
        }),
        _ => None,
    };
    if let Some(tls) = &tls {
        // Clients over TLS: passwords never cross the network in the clear.
        config.push('\n');
        config.push_str(&layout::tls_block(tls, false));
    }
    if let Some(leaf) = &args.leafnodes {
        config.push('\n');
        config.push_str(&layout::leafnode_block(leaf, tls.as_ref()));
    }
    if let (true, Some(out)) = (operator, &args.out) {
        return accounts_operator::write(&args, &config, out).await;
    }
    match &args.out {
        None => print!("{config}"),
        Some(out) => {
            // The same accounts, passwords and route secret on every server, each its name
            // and its routes.
            std::fs::create_dir_all(out)?;
            let secret = layout::route_secret();
            for (i, route) in args.cluster.iter().enumerate() {
                let node = layout::ClusterNode {
                    cluster: CLUSTER_NAME.to_owned(),
                    server: format!("{CLUSTER_NAME}-{i}"),
                    listen: route.clone(),
                    routes: args.cluster.clone(),
                    secret: secret.clone(),
                    tls: tls.clone(),
                };
                let path = out.join(format!("nats-server-{i}.conf"));
                let text = format!("{config}\n{}", layout::cluster_block(&node));
                write_private(&path, &text)
                    .map_err(|e| anyhow::anyhow!("cannot write {}: {e}", path.display()))?;
                eprintln!(
                    "mesh: wrote {} (server {CLUSTER_NAME}-{i}, routes on {route})",
                    path.display()
                );
            }
        }
    }
    let generated: Vec<&str> = grants
        .modules
        .iter()
        .filter(|m| m.password.is_none())
        .map(|m| m.name.as_str())
        .chain(
            grants
                .people
                .iter()
                .filter(|p| p.password.is_none())
                .map(|p| p.user.as_str()),
        )
        .collect();
    if !generated.is_empty() {
        eprintln!(
            "mesh: generated passwords for {} (they are in the configuration; keep it private)",
            generated.join(", ")
        );
    }
    Ok(Exit::Ok)
}
