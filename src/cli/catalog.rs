//! `mesh catalog forget <module>`: asks the catalogue to remove a module.

use serde_json::json;

use super::args::{CatalogCommand, ConnectArgs};
use super::exit::Exit;
use super::{connect, failed};
use crate::subjects::FullName;

pub async fn run(connect_args: &ConnectArgs, cmd: CatalogCommand) -> anyhow::Result<Exit> {
    let CatalogCommand::Forget { module, timeout } = cmd;
    let client = connect(connect_args).await?;
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
