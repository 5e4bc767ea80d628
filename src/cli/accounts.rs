//! `mesh accounts --grants <file>`: the accounts layout's nats-server configuration for a grants
//! file, on stdout.

use super::args::AccountsArgs;
use crate::grants::Grants;
use mesh_core::client::Exit;

pub fn run(args: AccountsArgs) -> anyhow::Result<Exit> {
    let grants = match Grants::read_file(&args.grants) {
        Ok(g) => g,
        Err(e) => {
            eprintln!("mesh: cannot read the grants: {e}");
            return Ok(Exit::Usage);
        }
    };
    let rendered = grants.render(i32::from(args.port), &args.store_dir);
    print!("{}", rendered.config);
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
