//! A tool called with no mesh code at all: plain async-nats, and nats-py from Python.

use tokio::process::Command;

use mesh_core::subjects::ToolResult;

use crate::bus::Bus;

#[tokio::test]
async fn plain_async_nats_request_calls_a_tool() {
    let bus = Bus::single().await;
    let _echo = bus.serve(mesh_echo::module()).await;
    let nats = async_nats::connect(bus.url()).await.unwrap();
    let msg = nats
        .request("mesh.echo.echo", r#"{"text":"plain"}"#.into())
        .await
        .unwrap();
    let r: ToolResult = serde_json::from_slice(&msg.payload).unwrap();
    assert_eq!(r.text_content(), "plain");
    assert!(msg.headers.is_none(), "a result carries no error headers");
}

#[tokio::test]
async fn nats_py_calls_a_tool_and_reads_the_error_headers() {
    let bus = Bus::single().await;
    let _echo = bus.serve(mesh_echo::module()).await;
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/py/plain_call.py");
    let out = Command::new(crate::bus::python())
        .arg(script)
        .arg(bus.url())
        .output()
        .await
        .expect("python3 runs (bin/test installs what the tests need)");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "nats-py client failed (bin/test installs nats-py):\n{stdout}\n{stderr}"
    );
    assert_eq!(stdout.trim(), "echo=from python\nfail=500 isError=True");
}
