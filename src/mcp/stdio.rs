//! `mesh mcp`: the relay over stdio, one JSON-RPC message per line; stdout carries only
//! protocol. Lines that are not JSON are answered -32700 here, since rmcp drops them.

use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::sync::mpsc;

use super::Relay;

/// Serves `relay` on stdin/stdout until stdin closes.
pub async fn serve(relay: Relay) -> anyhow::Result<()> {
    serve_on(relay, tokio::io::stdin(), tokio::io::stdout()).await
}

/// Serves on any pair of streams (stdio in production, pipes in tests).
pub async fn serve_on<R, W>(relay: Relay, input: R, output: W) -> anyhow::Result<()>
where
    R: tokio::io::AsyncRead + Unpin + Send + 'static,
    W: tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    use rmcp::ServiceExt;

    let (to_rmcp, rmcp_in) = tokio::io::duplex(1 << 16);
    let (rmcp_out, from_rmcp) = tokio::io::duplex(1 << 16);
    let (errors_tx, errors_rx) = mpsc::channel::<String>(16);

    tokio::spawn(filter_input(input, to_rmcp, errors_tx));
    let writer = tokio::spawn(write_output(from_rmcp, errors_rx, output));
    let running = relay.serve((rmcp_in, rmcp_out)).await?;
    running.waiting().await?;
    let _ = writer.await;
    Ok(())
}

/// Passes JSON lines on; answers the others with a parse error.
async fn filter_input<R, W>(input: R, mut to_rmcp: W, errors: mpsc::Sender<String>)
where
    R: tokio::io::AsyncRead + Unpin,
    W: tokio::io::AsyncWrite + Unpin,
{
    let mut lines = BufReader::new(input).lines();
    while let Ok(Some(line)) = lines.next_line().await {
        if line.trim().is_empty() {
            continue;
        }
        match serde_json::from_str::<serde_json::Value>(&line) {
            Ok(_) => {
                if to_rmcp
                    .write_all(format!("{line}\n").as_bytes())
                    .await
                    .is_err()
                {
                    return;
                }
            }
            Err(e) => {
                let answer = serde_json::json!({
                    "jsonrpc": "2.0",
                    "id": null,
                    "error": {"code": -32700, "message": format!("parse error: {e}")}
                });
                if errors.send(answer.to_string()).await.is_err() {
                    return;
                }
            }
        }
    }
    let _ = to_rmcp.shutdown().await;
}

/// One writer for stdout, so rmcp's lines and ours never interleave.
async fn write_output<R, W>(from_rmcp: R, mut errors: mpsc::Receiver<String>, mut output: W)
where
    R: tokio::io::AsyncRead + Unpin,
    W: tokio::io::AsyncWrite + Unpin,
{
    let mut lines = BufReader::new(from_rmcp).lines();
    let mut errors_open = true;
    loop {
        let line = tokio::select! {
            l = lines.next_line() => match l {
                Ok(Some(l)) => l,
                _ => break,
            },
            e = errors.recv(), if errors_open => match e {
                Some(e) => e,
                None => {
                    errors_open = false;
                    continue;
                }
            },
        };
        if output
            .write_all(format!("{line}\n").as_bytes())
            .await
            .is_err()
            || output.flush().await.is_err()
        {
            return;
        }
    }
    // Parse errors still queued after rmcp finished.
    while let Ok(e) = errors.try_recv() {
        let _ = output.write_all(format!("{e}\n").as_bytes()).await;
    }
    let _ = output.flush().await;
}
