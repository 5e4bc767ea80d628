//! `mesh login --id-token FILE`: a nats context that signs in with the identity provider's
//! ID token beside the mesh's sentinel credential, written, selected and tried.

use std::time::Duration;

use super::args::LoginArgs;
use crate::state::default_dir;
use mesh_core::client::{Client, ConnectConfig, Context, Exit};

pub async fn run(args: LoginArgs) -> anyhow::Result<Exit> {
    let dir = args.dir.clone().unwrap_or_else(default_dir);
    let url = match &args.server {
        Some(url) => url.clone(),
        None => match std::fs::read_to_string(dir.join("up.json"))
            .ok()
            .and_then(|t| serde_json::from_str::<serde_json::Value>(&t).ok())
            .and_then(|v| v["url"].as_str().map(str::to_owned))
        {
            Some(url) => url,
            None => {
                eprintln!(
                    "mesh: no mesh up runs in {} to sign in to: give --server URL",
                    dir.display()
                );
                return Ok(Exit::Usage);
            }
        },
    };
    let sentinel = args.sentinel.clone().unwrap_or_else(|| {
        dir.join(mesh_bus::statedir::OPERATOR_DIR)
            .join("creds")
            .join(format!(
                "{}.{}.creds",
                mesh_bus::callout::ACCOUNT,
                mesh_bus::callout::SENTINEL_USER
            ))
    });
    if !sentinel.exists() {
        eprintln!(
            "mesh: no sentinel credential at {}: is the mesh in operator mode with an identity provider (mesh up --auth operator --idp …)? Give --sentinel FILE",
            sentinel.display()
        );
        return Ok(Exit::Usage);
    }
    let absolute = |p: &std::path::Path| std::path::absolute(p).unwrap_or_else(|_| p.to_owned());
    let context = Context {
        description: format!("mesh login ({})", args.id_token.display()),
        url,
        creds: absolute(&sentinel).display().to_string(),
        id_token: absolute(&args.id_token).display().to_string(),
        ..Default::default()
    };
    let (path, _) = context.write(&args.name, true)?;
    // Tried at once: a refusal is said now, not at the next command.
    let config = ConnectConfig {
        context: Some(args.name.clone()),
        name: Some("mesh login".into()),
        ..Default::default()
    };
    match Client::connect(&config).await {
        Ok(client) => {
            let who = client
                .user_name(Duration::from_secs(5))
                .await
                .unwrap_or_default();
            println!(
                "signed in as {who}: nats context {} ({})",
                args.name,
                path.display()
            );
            Ok(Exit::Ok)
        }
        Err(e) => {
            eprintln!(
                "mesh: {e} (context {} written: {})",
                args.name,
                path.display()
            );
            Ok(Exit::Denied)
        }
    }
}
