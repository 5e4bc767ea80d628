//! `mesh catalog forget <module>`: asks the catalogue to remove a module (on the bus or
//! through a console).

use serde_json::json;

use super::args::{CatalogCommand, ConnectArgs};
use super::{Reach, failed};
use mesh_core::client::Access;
use mesh_core::client::Exit;
use mesh_core::subjects::FullName;

pub async fn run(connect_args: &ConnectArgs, cmd: CatalogCommand) -> anyhow::Result<Exit> {
    let CatalogCommand::Forget {
        module,
        timeout,
        console,
        ..
    } = cmd;
    let client = match Reach::new(connect_args, console.as_deref()).await {
        Ok(r) => r,
        Err(exit) => return Ok(exit),
    };
    let tool = FullName::parse("catalog_forget")?;
    match client
        .call(&tool, &json!({ "module": module }), timeout)
        .await
    {
        Ok(r) if r.is_error => {
            eprintln!("mesh: {}", r.text_content());
            Ok(Exit::ToolError)
        }
        Ok(r) => {
            println!("{}", r.text_content());
            Ok(Exit::Ok)
        }
        Err(e) => Ok(failed(&e)),
    }
}
