//! wordcount: a mesh module written in Rust against the mesh crate's runtime — the shape a
//! module author copies. One tool, `wordcount_count`, counting the words, lines and
//! characters of a text.
//!
//! Run it with the credentials `mesh up` wrote for it (a `nats` context `mesh-wordcount`,
//! after `wordcount {}` is declared in the grants file and `mesh up --reload`):
//!
//! ```sh
//! cargo run --example wordcount -- --context mesh-wordcount
//! ```

use mesh_core::actor::Layout;
use mesh_core::client::{Client, ConnectConfig};
use mesh_core::runtime::{Call, Module, ServeOptions, Tool, serve};
use mesh_core::subjects::ToolResult;
use serde_json::json;

fn module() -> Module {
    Module::new(
        "wordcount",
        "1.0.0",
        "Counts the words, lines and characters of a text",
    )
    .tool(
        Tool::new(
            "count",
            "Counts the words, lines and characters of the text given",
            json!({
                "type": "object",
                "properties": {"text": {"type": "string", "description": "what to count"}},
                "required": ["text"],
                "additionalProperties": false
            }),
            // The runtime has checked the arguments against the schema before this runs.
            |call: Call| async move {
                let text = call.args["text"].as_str().unwrap_or_default();
                let (words, lines, chars) = (
                    text.split_whitespace().count(),
                    text.lines().count(),
                    text.chars().count(),
                );
                ToolResult {
                    structured_content: Some(json!({"words": words, "lines": lines, "chars": chars})),
                    ..ToolResult::text(format!("{words} words, {lines} lines, {chars} characters"))
                }
            },
        )
        .output_schema(json!({
            "type": "object",
            "properties": {
                "words": {"type": "integer"}, "lines": {"type": "integer"}, "chars": {"type": "integer"}
            },
            "required": ["words", "lines", "chars"]
        }))
        .annotations(json!({"readOnlyHint": true, "idempotentHint": true, "openWorldHint": false})),
    )
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let context = args
        .iter()
        .position(|a| a == "--context")
        .and_then(|i| args.get(i + 1))
        .cloned()
        .unwrap_or_else(|| "mesh-wordcount".into());
    // The same connection settings as every `mesh` command: a `nats` context here.
    let client = Client::connect(&ConnectConfig {
        context: Some(context),
        name: Some("wordcount module".into()),
        ..Default::default()
    })
    .await?;
    eprintln!("wordcount: serving mesh.wordcount.count");
    // The accounts layout: every call is stamped; registration, $SRV, drain are the runtime's.
    let options = ServeOptions {
        layout: Layout::Accounts,
        ..Default::default()
    };
    let stop = async {
        let mut term =
            tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).unwrap();
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = term.recv() => {}
        }
    };
    serve(module(), client.nats().clone(), options, stop).await?;
    Ok(())
}
