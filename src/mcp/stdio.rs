//! `mesh mcp`: the relay over stdio, one JSON-RPC message per line; stdout carries only
//! protocol. rmcp drops lines it cannot read, so they are answered here: a line that is not
//! JSON with -32700, a JSON request that is no JSON-RPC message with -32600.
//!
//! rmcp reads and writes through in-memory pipes; a transport of rmcp's sink/stream kind
//! that did the same measured about 15 µs slower per call. Once the session is initialised, a
//! plain `tools/call` (a name and arguments) does not pass through rmcp at all: it is read
//! here, relayed by the same `Relay::answer` rmcp's handler uses (questions put to the person
//! through rmcp's session), and its answer written here. Everything else, and any
//! `tools/call` with more in it, goes to rmcp.

use std::os::fd::AsFd;
use std::sync::{Arc, OnceLock};

use rmcp::RoleServer;
use rmcp::model::ProtocolVersion;
use rmcp::service::Peer;
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::sync::mpsc;

use super::Relay;
use super::call::{self, PlainCall};

/// Serves `relay` on stdin/stdout until stdin closes.
pub async fn serve(relay: Relay) -> anyhow::Result<()> {
    // Pipes, as MCP clients give their servers, are read and written on the runtime itself;
    // tokio's stdin and stdout hand every read and write to a blocking thread and back, two
    // thread hops per call.
    match (pipe_in(), pipe_out()) {
        (Some(input), Some(output)) => serve_on(relay, input, output).await,
        _ => serve_on(relay, tokio::io::stdin(), tokio::io::stdout()).await,
    }
}

/// Standard input as a non-blocking pipe, when it is one.
fn pipe_in() -> Option<tokio::net::unix::pipe::Receiver> {
    let fd = std::io::stdin().as_fd().try_clone_to_owned().ok()?;
    tokio::net::unix::pipe::Receiver::from_owned_fd(fd).ok()
}

/// Standard output as a non-blocking pipe, when it is one.
fn pipe_out() -> Option<tokio::net::unix::pipe::Sender> {
    let fd = std::io::stdout().as_fd().try_clone_to_owned().ok()?;
    tokio::net::unix::pipe::Sender::from_owned_fd(fd).ok()
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

    let (relay, session) = relay.for_one_session();
    let fast = Fast {
        relay: relay.clone(),
        session,
        out: errors_tx.clone(),
        in_flight: Arc::default(),
    };
    tokio::spawn(filter_input(input, to_rmcp, errors_tx, Some(fast)));
    let writer = tokio::spawn(write_output(from_rmcp, errors_rx, output));
    let running = relay.serve((rmcp_in, rmcp_out)).await?;
    running.waiting().await?;
    let _ = writer.await;
    Ok(())
}

/// Passes JSON lines on; answers the others with a parse error, and a line longer than
/// [`MAX_MESSAGE`](super::MAX_MESSAGE) with an invalid-request error, without holding it.
async fn filter_input<R, W>(
    input: R,
    mut to_rmcp: W,
    errors: mpsc::Sender<String>,
    fast: Option<Fast>,
) where
    R: tokio::io::AsyncRead + Unpin,
    W: tokio::io::AsyncWrite + Unpin,
{
    let mut input = BufReader::new(input);
    let mut buf = Vec::new();
    loop {
        buf.clear();
        let limit = super::MAX_MESSAGE as u64 + 1;
        match (&mut input).take(limit).read_until(b'\n', &mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(_) => {}
        }
        if buf.len() as u64 == limit && buf.last() != Some(&b'\n') {
            // Too long: drop the rest of the line as it comes, then say so.
            let mut dropped = buf.len();
            loop {
                let chunk = match input.fill_buf().await {
                    Ok([]) | Err(_) => break,
                    Ok(c) => c,
                };
                let (n, end) = match chunk.iter().position(|b| *b == b'\n') {
                    Some(i) => (i + 1, true),
                    None => (chunk.len(), false),
                };
                input.consume(n);
                dropped += n;
                if end {
                    break;
                }
            }
            let message = format!(
                "invalid request: the message is {dropped} bytes or more, past the {} bytes mesh mcp reads",
                super::MAX_MESSAGE
            );
            if errors
                .send(error(Value::Null, -32600, message).to_string())
                .await
                .is_err()
            {
                return;
            }
            continue;
        }
        let Ok(line) = std::str::from_utf8(&buf) else {
            // Not text: nothing in it is run with replacement characters in its place.
            let answer = error(
                Value::Null,
                -32700,
                "parse error: the line is not UTF-8".into(),
            );
            if errors.send(answer.to_string()).await.is_err() {
                return;
            }
            continue;
        };
        let line = line.trim_end_matches(['\n', '\r']);
        if line.trim().is_empty() {
            continue;
        }
        if let Some(fast) = &fast
            && (fast.take(line) || fast.cancel(line))
        {
            continue;
        }
        match check(line) {
            None => {
                if to_rmcp
                    .write_all(format!("{line}\n").as_bytes())
                    .await
                    .is_err()
                {
                    return;
                }
            }
            Some(answer) => {
                if errors.send(answer.to_string()).await.is_err() {
                    return;
                }
            }
        }
    }
    let _ = to_rmcp.shutdown().await;
}

/// The `tools/call` lines answered without rmcp.
struct Fast {
    relay: Relay,
    session: Arc<OnceLock<Peer<RoleServer>>>,
    out: mpsc::Sender<String>,
    /// The calls it answers, by their JSON-RPC id as written: a client's
    /// `notifications/cancelled` for one drops it (and so tells its module).
    in_flight: Arc<std::sync::Mutex<std::collections::HashMap<String, tokio::task::AbortHandle>>>,
}

/// A `notifications/cancelled` line's `requestId`, as written.
fn cancelled_id(line: &str) -> Option<String> {
    #[derive(serde::Deserialize)]
    struct Note<'a> {
        #[serde(borrow)]
        method: &'a str,
        #[serde(borrow)]
        params: Option<Params<'a>>,
    }
    #[derive(serde::Deserialize)]
    struct Params<'a> {
        #[serde(rename = "requestId", borrow)]
        request_id: &'a serde_json::value::RawValue,
    }
    let note: Note = serde_json::from_str(line).ok()?;
    (note.method == "notifications/cancelled")
        .then(|| note.params.map(|p| p.request_id.get().to_owned()))
        .flatten()
}

impl Fast {
    /// Takes `line` if it is a plain `tools/call` on an initialised session of a protocol
    /// before 2026-07-28, and answers it when the call ends; `false` leaves it to rmcp.
    fn take(&self, line: &str) -> bool {
        let Some(peer) = self.session.get() else {
            return false;
        };
        let Some(info) = peer.peer_info() else {
            return false;
        };
        if info.protocol_version >= ProtocolVersion::V_2026_07_28 {
            return false;
        }
        let Some(call) = PlainCall::read(line) else {
            return false;
        };
        let c = &info.capabilities;
        let can_elicit = c.elicitation.is_some() || c.sampling.is_some() || c.roots.is_some();
        let (relay, peer, out) = (self.relay.clone(), peer.clone(), self.out.clone());
        let key = call.id.get().to_owned();
        let in_flight = self.in_flight.clone();
        // Held until the task is registered, so that it cannot end (and unregister) first.
        let mut calls = self.in_flight.lock().unwrap_or_else(|p| p.into_inner());
        let done = key.clone();
        let task = tokio::spawn(async move {
            let (id, answered) = call
                .relay(&relay, Some((&peer, can_elicit)), None, None)
                .await;
            in_flight
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .remove(&done);
            let _ = out.send(call::written(&id, answered)).await;
        });
        calls.insert(key, task.abort_handle());
        true
    }

    /// Takes a client's `notifications/cancelled` for a call this answers: the call is
    /// dropped (its module told) and, as MCP asks, never answered.
    fn cancel(&self, line: &str) -> bool {
        let Some(id) = cancelled_id(line) else {
            return false;
        };
        let task = self
            .in_flight
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&id);
        match task {
            Some(task) => {
                task.abort();
                true
            }
            None => false,
        }
    }
}

/// `None` for a line to pass to rmcp; else the error answer it deserves.
pub fn check(line: &str) -> Option<Value> {
    let value: Value = match serde_json::from_str(line) {
        Ok(v) => v,
        Err(e) => {
            return Some(error(Value::Null, -32700, format!("parse error: {e}")));
        }
    };
    // The shape of a JSON-RPC message; rmcp reads the rest (a full parse here would read
    // every line twice).
    let Value::Object(fields) = &value else {
        return Some(error(
            Value::Null,
            -32600,
            "invalid request: not a JSON object".into(),
        ));
    };
    let id = fields.get("id").cloned();
    let is_message = fields.get("jsonrpc").and_then(Value::as_str) == Some("2.0")
        && (fields.contains_key("method")
            || fields.contains_key("result")
            || fields.contains_key("error"));
    if is_message {
        return None;
    }
    let message = "invalid request: not a JSON-RPC 2.0 message".to_owned();
    Some(error(id.unwrap_or(Value::Null), -32600, message))
}

fn error(id: Value, code: i64, message: String) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}})
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_are_passed_on_or_answered() {
        assert_eq!(check(r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#), None);
        let parse = check("{nope").unwrap();
        assert_eq!(parse["error"]["code"], -32700);
        assert_eq!(parse["id"], Value::Null);
        let invalid = check(r#"{"jsonrpc":"2.0","id":7}"#).unwrap();
        assert_eq!(invalid["id"], 7);
        assert_eq!(invalid["error"]["code"], -32600);
        assert_eq!(check("[1, 2]").unwrap()["error"]["code"], -32600);
    }
}
