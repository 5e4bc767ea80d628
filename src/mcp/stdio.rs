//! `mesh mcp`: the relay over stdio, one JSON-RPC message per line; stdout carries only
//! protocol. rmcp drops lines it cannot read, so they are answered here: a line that is not
//! JSON with -32700, a JSON request that is no JSON-RPC message with -32600.
//!
//! rmcp reads and writes through in-memory pipes; a transport of rmcp's sink/stream kind
//! that did the same measured about 15 µs slower per call. Once the session is initialised,
//! each request is read by rmcp's types here and run by rmcp's `RequestDispatcher` (the serve
//! loop's context, cancellation and task-locals, without its task and channel hops: the
//! vendored patch) in a task of its own; its answer, written by rmcp's types, goes out after
//! whatever the call sent the client before it (progress, a question). Notifications and
//! answers to the server's questions go through rmcp's loop, which cancels a dispatched call
//! on the client's `notifications/cancelled` as its own.

use std::os::fd::AsFd;
use std::sync::{Arc, OnceLock};

use rmcp::RoleServer;
use rmcp::model::ClientJsonRpcMessage;
use rmcp::service::RequestDispatcher;
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::sync::mpsc;

use super::Relay;

/// Runs the session's requests once it is initialised.
type Dispatch = Arc<OnceLock<RequestDispatcher<RoleServer, Relay>>>;

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

    let dispatch = Dispatch::default();
    tokio::spawn(filter_input(input, to_rmcp, errors_tx, dispatch.clone()));
    let writer = tokio::spawn(write_output(from_rmcp, errors_rx, output));
    let running = relay.serve((rmcp_in, rmcp_out)).await?;
    let _ = dispatch.set(running.request_dispatcher());
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
    dispatch: Dispatch,
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
        // Read once, by rmcp's types: a request of an initialised session runs here; any
        // other message goes to rmcp's loop; a line rmcp cannot read is checked for the
        // answer it deserves (rmcp would drop it).
        let refused = match (
            ClientJsonRpcMessage::from_slice(line.as_bytes()),
            dispatch.get(),
        ) {
            (Ok(ClientJsonRpcMessage::Request(request)), Some(dispatcher)) => {
                // Registered now, before a later line can cancel it; run in a task of its own.
                let call = dispatcher.handle(request);
                let out = errors.clone();
                tokio::spawn(async move {
                    if let Some(answer) = call.await
                        && let Ok(answer) = serde_json::to_string(&answer)
                    {
                        let _ = out.send(answer).await;
                    }
                });
                continue;
            }
            (Ok(_), _) => None,
            (Err(_), _) => check(line),
        };
        match refused {
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

/// `None` for a line to pass to rmcp; else the error answer it deserves.
/// (Only for a line rmcp's types cannot read: a good line is not read twice.)
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

/// One writer for stdout, so rmcp's lines and ours never interleave. rmcp's lines first:
/// what a call sent the client before its answer (awaited into the pipe) goes before it.
async fn write_output<R, W>(from_rmcp: R, mut errors: mpsc::Receiver<String>, mut output: W)
where
    R: tokio::io::AsyncRead + Unpin,
    W: tokio::io::AsyncWrite + Unpin,
{
    let mut lines = BufReader::new(from_rmcp).lines();
    let mut errors_open = true;
    loop {
        let line = tokio::select! {
            biased;
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

    /// The vendored rmcp reads the common requests by their method first
    /// (`ClientJsonRpcMessage::from_slice`); whatever the bytes, it must read them as the
    /// generic parse does: the same message (its JSON and its `_meta`), or an error.
    #[test]
    fn reading_by_method_agrees_with_rmcps_generic_reading() {
        let call = |id: &str, params: &str| {
            format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{params}}}"#)
        };
        let plain = r#"{"name":"echo","arguments":{"text":"hi"}}"#;
        let mut lines = vec![
            call("1", plain),
            call(r#""a""#, plain),
            call("9223372036854775807", plain),
            call("9223372036854775808", plain),
            call("-0", plain),
            call("1.0", plain),
            call("1e2", plain),
            call("null", plain),
            call("[1]", plain),
            call("{}", plain),
            call(r#""\ud800""#, plain),
            call("1", r#"{"name":"echo","arguments":{"text":"hi"},"_meta":{"progressToken":"p","traceparent":"x"}}"#),
            call("1", r#"{"name":"echo","arguments":{"text":"hi"},"_meta":5}"#),
            call("1", r#"{"name":"echo","arguments":{"text":"hi"},"_meta":null}"#),
            call("1", r#"{"name":"echo","arguments":{"text":"hi"},"_meta":{"progressToken":{}}}"#),
            call("1", r#"{"name":"echo","arguments":{"text":"hi"},"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}}"#),
            call("1", r#"{"name":"a","name":"b"}"#),
            call("1", r#"{"name":"a","arguments":{"t":1,"t":2}}"#),
            call("1", r#"{"name":"a","arguments":null}"#),
            call("1", r#"{"name":"a","arguments":[]}"#),
            call("1", r#"{"name":"a"}"#),
            call("1", r#"{"name":5}"#),
            call("1", r#"{"name":"a","requestState":"s","inputResponses":{"q":{"action":"accept"}}}"#),
            call("1", r#"{"name":"a","task":{"ttl":5}}"#),
            call("1", r#"{"name":"a","unknown":true}"#),
            call("1", "null"),
            call("1", "[]"),
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call"}"#.into(),
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"a"},"params":{"name":"b"}}"#.into(),
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","method":"ping","params":{"name":"a"}}"#.into(),
            r#"{"jsonrpc":"2.0","jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"a"}}"#.into(),
            r#"{"jsonrpc":"2.0","id":1,"id":2,"method":"tools/call","params":{"name":"a"}}"#.into(),
            r#"{"jsonrpc":"1.0","id":1,"method":"tools/call","params":{"name":"a"}}"#.into(),
            r#"{"id":1,"method":"tools/call","params":{"name":"a"}}"#.into(),
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"a"},"result":null}"#.into(),
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"a"},"error":{"code":1,"message":"x"}}"#.into(),
            r#"{"jsonrpc":"2.0","id":1,"met\u0068od":"tools\/call","params":{"name":"a"}}"#.into(),
            r#"{"jsonrpc":"2.0","method":"tools/call","params":{"name":"a"}}"#.into(),
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#.into(),
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{"cursor":"c","_meta":{"k":1}}}"#.into(),
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/list","params":null}"#.into(),
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{"cursor":5}}"#.into(),
            r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#.into(),
            r#"{"jsonrpc":"2.0","id":1,"method":"ping","params":{}}"#.into(),
            r#"{"jsonrpc":"2.0","id":1,"method":"ping","params":{"_meta":{"a":1}}}"#.into(),
            r#"{"jsonrpc":"2.0","id":1,"method":"ping","params":7}"#.into(),
            r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{}}"#.into(),
            r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#.into(),
            r#"{"jsonrpc":"2.0","id":1,"result":{}}"#.into(),
            format!("{} ", call("1", plain)),
            format!("{}{}", call("1", plain), call("2", plain)),
            "{".into(),
            "".into(),
        ];
        lines.push(call(
            "1",
            &format!(
                r#"{{"name":"a","arguments":{}}}"#,
                "[".repeat(200) + &"]".repeat(200)
            ),
        ));
        for line in &lines {
            let fast = rmcp::model::ClientJsonRpcMessage::from_slice(line.as_bytes());
            let slow = serde_json::from_slice::<rmcp::model::ClientJsonRpcMessage>(line.as_bytes());
            let seen = |r: &serde_json::Result<rmcp::model::ClientJsonRpcMessage>| match r {
                Ok(m) => {
                    let meta = match m {
                        rmcp::model::JsonRpcMessage::Request(r) => {
                            format!("{:?}", rmcp::model::GetMeta::get_meta(&r.request))
                        }
                        _ => String::new(),
                    };
                    format!("{} {meta}", serde_json::to_string(m).unwrap())
                }
                Err(e) => format!("error: {e}"),
            };
            assert_eq!(seen(&fast), seen(&slow), "{line}");
        }
    }

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
