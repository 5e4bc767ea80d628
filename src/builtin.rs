//! The modules this binary serves itself, in one place: their names, and each made ready
//! to serve from the mesh's state directory. `mesh run` serves one, `mesh up` all of them;
//! the modules with binaries of their own are named here too.

use anyhow::bail;

use mesh_core::client::Client;
use mesh_core::runtime::{self, Module};

/// The seed of the key the catalogue signs tickets with, under `<state>/catalog`.
pub const TICKET_KEY: &str = "tickets.nk";

/// The modules this binary serves itself.
pub const BUILTIN: [&str; 3] = ["catalog", "echo", "avu"];

/// The modules of this project that live in binaries of their own (`mesh-<name>`), so that
/// the `mesh` command does not link what they need (decide: DuckDB).
pub const EXTERNAL: [&str; 1] = ["decide"];

/// A built-in module by name, ready to serve on `client`'s bus; `state` is the mesh's state
/// directory (avu keeps its store under `state/avu` and searches the ontology index decide
/// imports into `state/decide`, echo its question key under `state/echo`).
pub async fn builtin(
    name: &str,
    client: &Client,
    state: &std::path::Path,
) -> anyhow::Result<Module> {
    match name {
        "catalog" => {
            let dir = state.join("catalog");
            let options = mesh_catalog::Options {
                issuer: mesh_catalog::Issuer::load_or_create(&dir.join(TICKET_KEY))?,
                limits: Some(dir.join(mesh_bus::statedir::LIMITS_FILE)),
                people: Some(dir.join(mesh_bus::statedir::PEOPLE_FILE)),
            };
            Ok(mesh_catalog::module_with(client.nats().clone(), options).await?)
        }
        "echo" => {
            let key = runtime::request_state::StateKey::load_or_create(
                &state.join("echo").join("state.key"),
            )?;
            Ok(mesh_echo::module_with_key(key))
        }
        "avu" => {
            let config = mesh_avu::Config::in_dir(
                &state.join("avu"),
                &state.join("decide").join("ontology.sqlite"),
            )?;
            Ok(mesh_avu::module(config)?)
        }
        other => bail!(
            "no built-in module named {other:?} (known: {})",
            BUILTIN.join(", ")
        ),
    }
}
