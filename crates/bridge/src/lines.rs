//! The bridge's side of a server's stdio: one JSON-RPC message a line, each way. A line is
//! read whole up to [`MAX_LINE`] bytes and [`MAX_VALUES`] JSON values, so a large result
//! reaches its caller (through the runtime's claim when it is more than one bus message);
//! a line past either bound is not kept, and when it was the answer to one of the bridge's
//! requests that request is answered at once with an error naming its size, never left to
//! its deadline. rmcp's own stdio transport drops such a line unread, with the request it
//! answered left waiting.
//!
//! Reading a line past its bound keeps nothing of it but a scan of its top level (its
//! `id`, whether it answers or asks), which is what ties it to the request it answers:
//! servers write `id` anywhere, the TypeScript SDK after its result.

use std::sync::Arc;

use mesh_core::subjects::claim::MAX_KEPT_PER_OWNER;
use rmcp::RoleClient;
use rmcp::model::{ErrorCode, ErrorData, RequestId};
use rmcp::service::{RxJsonRpcMessage, TxJsonRpcMessage};
use rmcp::transport::Transport;
use serde_json::json;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::Mutex;

/// The longest line read from a server: the most of one caller's results the runtime keeps
/// to be fetched, so a longer answer could never reach its caller anyway. What one line
/// costs while it is read and parsed is a few times this, one line at a time per server.
pub const MAX_LINE: usize = MAX_KEPT_PER_OWNER;

/// The most JSON values a line may hold: serde builds a line's tree before it can be
/// refused, some hundred bytes a value, so a line of `[0,0,…]` would cost a hundred times
/// its size.
pub const MAX_VALUES: usize = 1_000_000;

/// The `data` of the error a request is answered with when its answer was not read:
/// `{"mesh/unread": <bytes of the line>}`, so the call says so instead of blaming the server.
pub const UNREAD: &str = "mesh/unread";

/// How much is read from the pipe at once.
const READ_AT_ONCE: usize = 64 * 1024;

/// The room a line buffer keeps between lines: a large line's room is given back.
const KEEP_ROOM: usize = 1024 * 1024;

/// The longest `id` kept from a scan; a longer one names no request of the bridge's.
const MAX_ID: usize = 256;

/// A server's stdout and stdin as an rmcp transport.
pub struct Lines<R, W> {
    read: R,
    chunk: Box<[u8]>,
    /// What of `chunk` is read but not yet taken.
    at: usize,
    filled: usize,
    /// The line so far, while it is within its bounds.
    line: Vec<u8>,
    /// Its length so far, kept or not.
    length: usize,
    scan: Scan,
    /// Why the line so far is not kept.
    refused: Option<Refused>,
    /// [`MAX_LINE`] and [`MAX_VALUES`] (smaller in tests).
    max_line: usize,
    max_values: usize,
    write: Arc<Mutex<Option<W>>>,
    /// A refusal of an unreadable request is being written: at most one at a time, so a
    /// server writing such requests without reading its stdin queues no more tasks.
    refusing: Arc<std::sync::atomic::AtomicBool>,
}

/// Why a line was not kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Refused {
    Long,
    Values,
}

impl<R, W> Lines<R, W>
where
    R: AsyncRead + Unpin + Send,
    W: AsyncWrite + Unpin + Send + 'static,
{
    pub fn new(read: R, write: W) -> Self {
        Lines {
            read,
            chunk: vec![0; READ_AT_ONCE].into_boxed_slice(),
            at: 0,
            filled: 0,
            line: Vec::new(),
            length: 0,
            scan: Scan::default(),
            refused: None,
            max_line: MAX_LINE,
            max_values: MAX_VALUES,
            write: Arc::new(Mutex::new(Some(write))),
            refusing: Arc::default(),
        }
    }

    #[cfg(test)]
    fn bounded(mut self, max_line: usize, max_values: usize) -> Self {
        (self.max_line, self.max_values) = (max_line, max_values);
        self
    }

    /// Takes the bytes of the line in `chunk[at..at + take]`: scanned, and kept while the
    /// line is within its bounds.
    fn take(&mut self, take: usize) {
        let bytes = &self.chunk[self.at..self.at + take];
        for &b in bytes {
            self.scan.byte(b);
        }
        self.length += take;
        if self.refused.is_none() {
            self.refused = if self.line.len() + take > self.max_line {
                Some(Refused::Long)
            } else if self.scan.values > self.max_values {
                Some(Refused::Values)
            } else {
                self.line.extend_from_slice(bytes);
                None
            };
            if self.refused.is_some() {
                self.line = Vec::new();
            }
        }
        self.at += take;
    }

    /// The line just ended as a message for rmcp, if it is one.
    fn ended(&mut self) -> Option<RxJsonRpcMessage<RoleClient>> {
        let scan = std::mem::take(&mut self.scan);
        let length = std::mem::take(&mut self.length);
        let refused = self.refused.take();
        let message = self.message(&scan, length, refused);
        // The room of a large line is given back; a small one's kept for the next.
        if self.line.capacity() > KEEP_ROOM {
            self.line = Vec::new();
        }
        self.line.clear();
        message
    }

    /// What the line just ended says to rmcp, if anything.
    fn message(
        &self,
        scan: &Scan,
        length: usize,
        refused: Option<Refused>,
    ) -> Option<RxJsonRpcMessage<RoleClient>> {
        let answers = scan.answers.then(|| scan.id()).flatten();
        if let Some(why) = refused {
            let message = match why {
                Refused::Long => format!(
                    "its answer is {} ({length} bytes), more than the {} the bridge reads from a server (the most of a caller's results the mesh keeps); ask for less at a time",
                    mib(length),
                    mib(self.max_line)
                ),
                Refused::Values => format!(
                    "its answer holds more than {} JSON values, more than the bridge reads from a server; ask for less at a time",
                    self.max_values
                ),
            };
            let Some(id) = answers else {
                tracing::warn!(
                    bytes = length,
                    "a line of the MCP server's that answers no request was dropped: {message}"
                );
                return None;
            };
            let data = json!({ UNREAD: length });
            return Some(RxJsonRpcMessage::<RoleClient>::error(
                ErrorData::new(ErrorCode::INTERNAL_ERROR, message, Some(data)),
                Some(id),
            ));
        }
        let text = line_text(&self.line);
        if text.iter().all(u8::is_ascii_whitespace) {
            return None;
        }
        match serde_json::from_slice::<RxJsonRpcMessage<RoleClient>>(text) {
            Ok(message) => Some(message),
            // An answer the bridge cannot read answers its request so, at once.
            Err(e) if answers.is_some() => {
                let message = format!(
                    "its answer is no JSON-RPC the bridge can read ({:?} at column {})",
                    e.classify(),
                    e.column()
                );
                let data = json!({ UNREAD: length });
                Some(RxJsonRpcMessage::<RoleClient>::error(
                    ErrorData::new(ErrorCode::INTERNAL_ERROR, message, Some(data)),
                    answers,
                ))
            }
            // A request the bridge cannot read is told so (the server would wait on it);
            // anything else (a log line, a notification of another protocol) is dropped.
            Err(e) => {
                if scan.asks
                    && let Some(id) = scan.id()
                    && e.classify() == serde_json::error::Category::Data
                {
                    let refusal = TxJsonRpcMessage::<RoleClient>::error(
                        ErrorData::invalid_request("Invalid request", None),
                        Some(id),
                    );
                    use std::sync::atomic::Ordering;
                    if !self.refusing.swap(true, Ordering::AcqRel) {
                        let (write, refusing) = (self.write.clone(), self.refusing.clone());
                        tokio::spawn(async move {
                            let _ = send(write, refusal).await;
                            refusing.store(false, Ordering::Release);
                        });
                    }
                }
                tracing::debug!("a line of the MCP server's that is no JSON-RPC was dropped: {e}");
                None
            }
        }
    }
}

/// A line's text: without its `\r`, or a byte order mark.
fn line_text(line: &[u8]) -> &[u8] {
    let text = line.strip_suffix(b"\r").unwrap_or(line);
    text.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(text)
}

/// `bytes` for people: `20.0 MiB`.
fn mib(bytes: usize) -> String {
    format!("{:.1} MiB", bytes as f64 / (1024.0 * 1024.0))
}

/// Writes `message` and its newline to the server.
async fn send<W: AsyncWrite + Unpin>(
    write: Arc<Mutex<Option<W>>>,
    message: TxJsonRpcMessage<RoleClient>,
) -> std::io::Result<()> {
    let mut bytes = serde_json::to_vec(&message)?;
    bytes.push(b'\n');
    let mut write = write.lock().await;
    let Some(w) = write.as_mut() else {
        return Err(std::io::Error::new(
            std::io::ErrorKind::NotConnected,
            "the MCP server's stdin is closed",
        ));
    };
    w.write_all(&bytes).await?;
    w.flush().await
}

impl<R, W> Transport<RoleClient> for Lines<R, W>
where
    R: AsyncRead + Unpin + Send,
    W: AsyncWrite + Unpin + Send + 'static,
{
    type Error = std::io::Error;

    fn send(
        &mut self,
        item: TxJsonRpcMessage<RoleClient>,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        send(self.write.clone(), item)
    }

    /// Cancel-safe (rmcp polls it in a `select!`): the only wait is the read into `chunk`,
    /// and everything taken from it is taken before the next wait.
    async fn receive(&mut self) -> Option<RxJsonRpcMessage<RoleClient>> {
        loop {
            if self.at == self.filled {
                let read = match self.read.read(&mut self.chunk).await {
                    // The server closed its stdout: a line without its newline is no message.
                    Ok(0) => return None,
                    Ok(n) => n,
                    Err(e) => {
                        tracing::warn!("the MCP server's stdout could not be read: {e}");
                        return None;
                    }
                };
                (self.at, self.filled) = (0, read);
            }
            let ahead = &self.chunk[self.at..self.filled];
            match ahead.iter().position(|b| *b == b'\n') {
                Some(end) => {
                    self.take(end);
                    self.at += 1;
                    if let Some(message) = self.ended() {
                        return Some(message);
                    }
                }
                None => self.take(ahead.len()),
            }
        }
    }

    async fn close(&mut self) -> Result<(), Self::Error> {
        drop(self.write.lock().await.take());
        Ok(())
    }
}

/// What a line says at its top level, read a byte at a time without keeping it: how many
/// values it holds, its `id`, and whether it answers (`result`, `error`) or asks (`method`).
#[derive(Default)]
struct Scan {
    values: usize,
    depth: usize,
    in_string: bool,
    escaped: bool,
    /// At the top level, where a key comes next (after `{` or `,`).
    key_next: bool,
    /// Reading a top-level key; what of it is read (a long one is no key of interest).
    in_key: bool,
    key: Vec<u8>,
    /// The raw `id` value, while it is read and after.
    id: Option<Vec<u8>>,
    reading_id: bool,
    answers: bool,
    asks: bool,
}

impl Scan {
    fn byte(&mut self, b: u8) {
        if self.reading_id
            && let Some(id) = self.id.as_mut()
        {
            let ends = !self.in_string && self.depth == 1 && matches!(b, b',' | b'}');
            if !ends && id.len() <= MAX_ID {
                id.push(b);
            }
            if ends {
                self.reading_id = false;
            }
        }
        if self.in_string {
            if self.escaped {
                self.escaped = false;
            } else if b == b'\\' {
                self.escaped = true;
            } else if b == b'"' {
                self.in_string = false;
                self.in_key = false;
                return;
            }
            if self.in_key && self.key.len() < 8 {
                self.key.push(b);
            }
            return;
        }
        match b {
            b'"' => {
                self.in_string = true;
                if self.depth == 1 && self.key_next {
                    (self.in_key, self.key_next) = (true, false);
                    self.key.clear();
                }
            }
            b'{' | b'[' => {
                self.values += 1;
                self.depth += 1;
                self.key_next = self.depth == 1 && b == b'{';
            }
            b'}' | b']' => self.depth = self.depth.saturating_sub(1),
            b',' => {
                self.values += 1;
                self.key_next = self.depth == 1;
            }
            b':' if self.depth == 1 => match self.key.as_slice() {
                b"id" => (self.id, self.reading_id) = (Some(Vec::new()), true),
                b"result" | b"error" => self.answers = true,
                b"method" => self.asks = true,
                _ => {}
            },
            _ => {}
        }
    }

    /// The line's `id`, if it has one a request of the bridge's could have.
    fn id(&self) -> Option<RequestId> {
        let raw = self.id.as_ref().filter(|id| id.len() <= MAX_ID)?;
        serde_json::from_slice(raw.trim_ascii()).ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scan(line: &str) -> Scan {
        let mut s = Scan::default();
        for b in line.bytes() {
            s.byte(b);
        }
        s
    }

    #[test]
    fn a_lines_id_is_found_wherever_it_is() {
        let s = scan(
            r#"{"result":{"content":[{"type":"text","text":"a \"id\": 9, }"}]},"jsonrpc":"2.0","id":7}"#,
        );
        assert!(s.answers && !s.asks);
        assert_eq!(s.id(), Some(RequestId::Number(7)));
        let s = scan(
            r#"{"jsonrpc":"2.0", "id" : "q-1" ,"method":"elicitation/create","params":{"id":3}}"#,
        );
        assert!(s.asks && !s.answers);
        assert_eq!(s.id(), Some(RequestId::String("q-1".into())));
        let s = scan(
            r#"{"jsonrpc":"2.0","method":"notifications/progress","params":{"id":3,"result":1}}"#,
        );
        assert!(s.asks && !s.answers);
        assert_eq!(s.id(), None);
        // Commas and brackets inside strings are no values, escaped quotes included.
        let s = scan(&format!(
            "{{\"t\":\"{}\\\"{}\"}}",
            ",".repeat(50),
            "[".repeat(10)
        ));
        assert_eq!(s.values, 1);
    }

    async fn read_all(input: Vec<u8>) -> Vec<RxJsonRpcMessage<RoleClient>> {
        let mut lines = Lines::new(&input[..], tokio::io::sink()).bounded(4096, 100);
        let mut out = Vec::new();
        while let Some(m) = lines.receive().await {
            out.push(m);
        }
        out
    }

    #[tokio::test]
    async fn a_line_past_its_bounds_answers_its_request_and_the_next_line_passes() {
        let ok =
            br#"{"jsonrpc":"2.0","id":1,"result":{"content":[{"type":"text","text":"[,,,{"}]}}"#;
        let mut input = ok.to_vec();
        input.push(b'\n');
        // Too many values, its id after them (as the TypeScript SDK writes an answer).
        input.extend_from_slice(br#"{"result":{"structuredContent":{"v":["#);
        for _ in 0..105 {
            input.extend_from_slice(b"0,");
        }
        input.extend_from_slice(b"0]}},\"jsonrpc\":\"2.0\",\"id\":2}\n");
        // Too long.
        input.extend_from_slice(
            br#"{"jsonrpc":"2.0","id":3,"result":{"content":[{"type":"text","text":""#,
        );
        input.extend(std::iter::repeat_n(b'x', 5000));
        input.extend_from_slice(b"\"}]}}\n");
        // A notification past its bound is dropped; no JSON at all is dropped.
        input.extend_from_slice(
            br#"{"jsonrpc":"2.0","method":"notifications/message","params":{"data":""#,
        );
        input.extend(std::iter::repeat_n(b'y', 5000));
        input.extend_from_slice(b"\"}}\nnot JSON\n");
        input.extend_from_slice(ok);
        input.push(b'\n');
        let read = read_all(input).await;
        assert_eq!(read.len(), 4, "{read:?}");
        assert!(
            matches!(&read[0], RxJsonRpcMessage::<RoleClient>::Response(r) if r.id == RequestId::Number(1))
        );
        for (m, id, says) in [(&read[1], 2, "100 JSON values"), (&read[2], 3, "MiB (5")] {
            let RxJsonRpcMessage::<RoleClient>::Error(e) = m else {
                panic!("{m:?}")
            };
            assert_eq!(e.id, Some(RequestId::Number(id)));
            assert!(e.error.message.contains(says), "{}", e.error.message);
            assert!(e.error.data.as_ref().unwrap()[UNREAD].is_u64());
        }
        assert!(
            matches!(&read[3], RxJsonRpcMessage::<RoleClient>::Response(r) if r.id == RequestId::Number(1))
        );
    }
}
