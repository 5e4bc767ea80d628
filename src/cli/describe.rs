//! `mesh describe <tool>`: a tool's description and schemas, readable, from its module.

use anyhow::Context;
use serde_json::{Value, json};

use super::args::{ConnectArgs, DescribeArgs};
use super::{Reach, failed};
use mesh_core::client::Access;
use mesh_core::client::Exit;
use mesh_core::subjects::FullName;

pub async fn run(connect_args: &ConnectArgs, args: DescribeArgs) -> anyhow::Result<Exit> {
    let name = FullName::parse(&args.tool)?;
    let client = match Reach::new(connect_args, args.console.as_deref()).await {
        Ok(r) => r,
        Err(exit) => return Ok(exit),
    };
    let reply = match client.tools(name.module(), args.timeout).await {
        Ok(r) => r,
        Err(e) => return Ok(failed(&e)),
    };
    let Some(tool) = reply.tools.iter().find(|t| t.name == name.tool()) else {
        let known: Vec<String> = reply
            .tools
            .iter()
            .map(|t| mesh_core::subjects::full_name(&reply.module, &t.name))
            .collect();
        eprintln!(
            "mesh: module {} has no tool {}; it has: {}",
            reply.module,
            name.tool(),
            known.join(", ")
        );
        return Ok(Exit::NobodyServes);
    };
    if args.json {
        let mut v = serde_json::to_value(tool)?;
        v["name"] = json!(name.to_string());
        v["module"] = json!({"name": reply.module, "version": reply.version});
        println!("{}", serde_json::to_string_pretty(&v)?);
        return Ok(Exit::Ok);
    }
    println!("{name}");
    if let Some(title) = &tool.title {
        println!("{title}");
    }
    println!("module {} {}", reply.module, reply.version);
    println!();
    println!("{}", tool.description);
    println!();
    println!("Arguments:");
    print_fields(&tool.input_schema);
    if let Some(hints) = tool.annotations.as_ref().and_then(Value::as_object) {
        let on: Vec<&str> = hints
            .iter()
            .filter(|(_, v)| v.as_bool() == Some(true))
            .map(|(k, _)| k.as_str())
            .collect();
        if !on.is_empty() {
            println!();
            println!("Hints: {}", on.join(", "));
        }
    }
    println!();
    println!("Input schema:");
    println!(
        "{}",
        serde_json::to_string_pretty(&tool.input_schema).context("input schema")?
    );
    if let Some(out) = &tool.output_schema {
        println!();
        println!("Output schema:");
        println!("{}", serde_json::to_string_pretty(out)?);
    }
    Ok(Exit::Ok)
}

/// One line per top-level property: name, type, required, description.
fn print_fields(schema: &Value) {
    let required: Vec<&str> = schema
        .get("required")
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let Some(props) = schema.get("properties").and_then(Value::as_object) else {
        println!("  (none)");
        return;
    };
    if props.is_empty() {
        println!("  (none)");
    }
    for (name, p) in props {
        let kind = match p.get("type") {
            Some(Value::String(t)) => t.clone(),
            Some(other) => other.to_string(),
            None => "any".into(),
        };
        let req = if required.contains(&name.as_str()) {
            "required"
        } else {
            "optional"
        };
        let desc = p
            .get("description")
            .and_then(Value::as_str)
            .unwrap_or_default();
        println!("  {name}  {kind}  {req}  {desc}");
    }
}
