//! A handler that blocks its thread (a sync database call, a long computation written in an
//! async fn) holds up the other calls of its tool once, then only its own: the module runs
//! on a runtime of its own, as in a process of its own, so the test's client is not what
//! stalls.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use mesh_core::runtime::{Call, Module, ServeOptions, Serving, Tool};
use mesh_core::subjects::{FullName, ToolResult};
use serde_json::json;

use crate::bus::{Bus, GENEROUS};

/// How long a blocking call holds its thread: long against a quick call's round trip.
const BLOCKS_FOR: Duration = Duration::from_millis(1500);

/// A module `stall` with one tool, `work`: `{"block": true}` blocks its thread before it
/// ever waits (and says so on `started`); anything else answers at once.
fn stall(started: std::sync::mpsc::Sender<()>) -> Module {
    let started = std::sync::Mutex::new(started);
    let started = Arc::new(started);
    Module::new("stall", "1.0.0", "a module with a tool that may block").tool(Tool::new(
        "work",
        "blocks its thread when asked",
        json!({"type": "object", "properties": {"block": {"type": "boolean"}}}),
        move |call: Call| {
            let block = call.args.get("block") == Some(&json!(true));
            let started = started.clone();
            async move {
                if block {
                    let _ = started.lock().unwrap().send(());
                    std::thread::sleep(BLOCKS_FOR);
                    return ToolResult::text("blocked");
                }
                ToolResult::text("quick")
            }
        },
    ))
}

/// Serves `stall` on a two-worker runtime of its own, on a connection of its own.
fn serve_apart(url: String) -> std::sync::mpsc::Receiver<()> {
    let (started, heard) = std::sync::mpsc::channel();
    let (ready, serving) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async move {
            let nats = async_nats::connect(&url).await.unwrap();
            let serving = Serving::start(stall(started), nats, ServeOptions::default())
                .await
                .unwrap();
            ready.send(()).unwrap();
            serving.run(std::future::pending()).await;
        });
    });
    serving.recv_timeout(GENEROUS).expect("stall serves");
    heard
}

async fn call(client: &mesh_core::client::Client, block: bool) -> String {
    let tool = FullName::parse("stall_work").unwrap();
    client
        .call(&tool, &json!({"block": block}), GENEROUS)
        .await
        .unwrap()
        .text_content()
}

/// While one call blocks its thread, `quick` calls of the same tool are answered: each is
/// checked to come back before the blocked one has.
async fn quick_calls_pass_a_blocked_one(
    client: &mesh_core::client::Client,
    started: &std::sync::mpsc::Receiver<()>,
    quick: usize,
) {
    let done = Arc::new(AtomicBool::new(false));
    let blocked = {
        let (client, done) = (client.clone(), done.clone());
        tokio::spawn(async move {
            let said = call(&client, true).await;
            done.store(true, Ordering::SeqCst);
            said
        })
    };
    tokio::task::block_in_place(|| started.recv_timeout(GENEROUS)).expect("the call blocks");
    for _ in 0..quick {
        assert_eq!(call(client, false).await, "quick");
        assert!(
            !done.load(Ordering::SeqCst),
            "a quick call of the tool was answered only after the blocked one"
        );
    }
    assert_eq!(blocked.await.unwrap(), "blocked");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handler_that_blocks_holds_up_the_other_calls_of_its_tool_once_only() {
    let bus = Bus::single().await;
    let started = serve_apart(bus.url());
    let client = bus.client().await;
    // The first call that blocks holds up those behind it (it cannot be told in advance);
    // after it, the tool's calls run on threads of their own.
    let once = {
        let client = client.clone();
        tokio::spawn(async move { call(&client, true).await })
    };
    tokio::task::block_in_place(|| started.recv_timeout(GENEROUS)).expect("the call blocks");
    assert_eq!(call(&client, false).await, "quick");
    assert_eq!(once.await.unwrap(), "blocked");
    quick_calls_pass_a_blocked_one(&client, &started, 5).await;
    // Quick long enough, the tool is polled on its endpoint's loop again; blocking again
    // holds the others up once more, and no more.
    for _ in 0..600 {
        assert_eq!(call(&client, false).await, "quick");
    }
    let again = {
        let client = client.clone();
        tokio::spawn(async move { call(&client, true).await })
    };
    tokio::task::block_in_place(|| started.recv_timeout(GENEROUS)).expect("the call blocks");
    assert_eq!(call(&client, false).await, "quick");
    assert_eq!(again.await.unwrap(), "blocked");
    quick_calls_pass_a_blocked_one(&client, &started, 5).await;
}
