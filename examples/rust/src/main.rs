//! wordcount: a mesh module in Rust on `mesh-core` alone — the shape a module author copies.
//! One tool, `wordcount_count`, counting the words, lines and characters of a text: a
//! function from a Rust type to a Rust type; the schemas are derived from them.
//!
//! Run it with the credentials `mesh up` wrote for it (a `nats` context `mesh-wordcount`,
//! after `wordcount {}` is declared in the grants file and `mesh up --reload`):
//!
//! ```sh
//! cargo run -p mesh-example-wordcount -- --context mesh-wordcount
//! ```

use clap::Parser;
use mesh_core::actor::Layout;
use mesh_core::client::{Client, ConnectArgs};
use mesh_core::runtime::{Module, ServeOptions, Stop, Tool, serve};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// What `count` takes. Doc comments become the schema's descriptions.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct Count {
    /// what to count
    text: String,
}

/// What `count` answers: structured content, with its JSON as text.
#[derive(Serialize, JsonSchema)]
struct Counted {
    words: usize,
    lines: usize,
    chars: usize,
}

/// Why `count` says no: each case becomes a tool error with its message.
#[derive(Debug)]
enum CountError {
    Empty,
}

impl std::fmt::Display for CountError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CountError::Empty => f.write_str("there is nothing to count: give a text"),
        }
    }
}

/// The tool itself: arguments already checked against `Count`'s schema by the runtime.
async fn count(args: Count) -> Result<Counted, CountError> {
    if args.text.is_empty() {
        return Err(CountError::Empty);
    }
    Ok(Counted {
        words: args.text.split_whitespace().count(),
        lines: args.text.lines().count(),
        chars: args.text.chars().count(),
    })
}

fn module() -> Module {
    Module::new(
        "wordcount",
        env!("CARGO_PKG_VERSION"),
        "Counts the words, lines and characters of a text",
    )
    .tool(
        Tool::typed(
            "count",
            "Counts the words, lines and characters of the text given",
            |args: Count, _call| count(args),
        )
        .annotations(serde_json::json!({"readOnlyHint": true, "idempotentHint": true, "openWorldHint": false})),
    )
}

/// The `nats` CLI's connection flags, as every `mesh` command takes them.
#[derive(Parser)]
#[command(name = "wordcount", about = "A mesh module that counts words")]
struct Args {
    #[command(flatten)]
    connect: ConnectArgs,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    // Listening first: Ctrl-C or SIGTERM while connecting is a stop, not a kill.
    let mut stop = Stop::listen()?;
    let client = Client::connect(&args.connect.config("wordcount module", true)).await?;
    eprintln!("wordcount: serving mesh.wordcount.count");
    // The accounts layout: every call is stamped; registration, $SRV, drain are the runtime's.
    let options = ServeOptions {
        layout: Layout::Accounts,
        ..Default::default()
    };
    serve(module(), client.nats().clone(), options, async move {
        stop.next().await
    })
    .await?;
    Ok(())
}
