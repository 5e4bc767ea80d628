//! A NATS client of the test's own over a plain TCP socket: it sends header blocks byte for
//! byte, including ones no client library would build (bare LF, duplicates, odd case).

use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;

/// How long a raw exchange may take before the test calls it hung.
const HANG: Duration = Duration::from_secs(10);

pub struct Raw {
    stream: BufReader<TcpStream>,
    inbox: String,
    next: u64,
}

/// What came back for a request.
#[derive(Debug)]
pub enum Reply {
    /// A message: its header block (as sent by the server) and payload.
    Message { headers: String, payload: Vec<u8> },
    /// The server's `-ERR` line (a permission violation, for one).
    Err(String),
    /// No responders (status 503 in the header block).
    NoResponders,
}

impl Reply {
    /// The payload as JSON; panics with what came instead.
    pub fn json(&self) -> serde_json::Value {
        match self {
            Reply::Message { payload, .. } => serde_json::from_slice(payload)
                .unwrap_or_else(|e| panic!("not JSON ({e}): {}", String::from_utf8_lossy(payload))),
            other => panic!("no message came back: {other:?}"),
        }
    }
}

impl Raw {
    /// Connects as `user` (with a password; on an operator-mode test bus with their credential
    /// file instead, the server's nonce signed) and subscribes to the user's own inbox prefix.
    pub async fn connect(url: &str, user: &str, password: &str) -> Raw {
        let addr = url.trim_start_matches("nats://");
        let stream = TcpStream::connect(addr).await.expect("tcp connect");
        let mut raw = Raw {
            stream: BufReader::new(stream),
            inbox: format!("_INBOX.{user}.raw"),
            next: 0,
        };
        let info = raw.line().await;
        assert!(info.starts_with("INFO "), "{info}");
        let mut connect = serde_json::json!({
            "verbose": false, "pedantic": false, "headers": true, "no_responders": true,
            "protocol": 1, "lang": "raw", "version": "0", "user": user, "pass": password,
        });
        if let Some(creds) = crate::bus::creds_for(url, user) {
            let info: serde_json::Value =
                serde_json::from_str(info.trim_start_matches("INFO ")).unwrap();
            let nonce = info["nonce"]
                .as_str()
                .expect("an operator-mode server sends a nonce");
            let (jwt, seed) =
                mesh_bus::jwt::read_creds(&std::fs::read_to_string(creds).unwrap()).unwrap();
            let key = nkeys::KeyPair::from_seed(&seed).unwrap();
            use base64::Engine as _;
            let sig = base64::engine::general_purpose::URL_SAFE_NO_PAD
                .encode(key.sign(nonce.as_bytes()).unwrap());
            connect = serde_json::json!({
                "verbose": false, "pedantic": false, "headers": true, "no_responders": true,
                "protocol": 1, "lang": "raw", "version": "0", "jwt": jwt, "sig": sig,
            });
        }
        raw.send(format!("CONNECT {connect}\r\nSUB {}.> 1\r\nPING\r\n", raw.inbox).as_bytes())
            .await;
        loop {
            let line = raw.line().await;
            match line.as_str() {
                "PONG" => break,
                "+OK" => {}
                l if l.starts_with("-ERR") => panic!("{user} could not connect: {l}"),
                l if l.starts_with("INFO ") => {}
                l => panic!("unexpected while connecting: {l}"),
            }
        }
        raw
    }

    async fn send(&mut self, bytes: &[u8]) {
        self.stream
            .get_mut()
            .write_all(bytes)
            .await
            .expect("tcp write");
    }

    async fn line(&mut self) -> String {
        let mut line = String::new();
        let n = tokio::time::timeout(HANG, self.stream.read_line(&mut line))
            .await
            .expect("the server said nothing: hung")
            .expect("tcp read");
        assert!(n > 0, "the server closed the connection");
        line.trim_end_matches(['\r', '\n']).to_owned()
    }

    /// Publishes `header_block` (sent exactly as given) and `payload` on `subject` with a
    /// reply inbox, and returns what comes back first.
    pub async fn request(&mut self, subject: &str, header_block: &[u8], payload: &[u8]) -> Reply {
        self.next += 1;
        let reply = format!("{}.{}", self.inbox, self.next);
        let mut frame = if header_block.is_empty() {
            format!("PUB {subject} {reply} {}\r\n", payload.len()).into_bytes()
        } else {
            format!(
                "HPUB {subject} {reply} {} {}\r\n",
                header_block.len(),
                header_block.len() + payload.len()
            )
            .into_bytes()
        };
        frame.extend_from_slice(header_block);
        frame.extend_from_slice(payload);
        frame.extend_from_slice(b"\r\n");
        self.send(&frame).await;
        loop {
            let line = self.line().await;
            let words: Vec<&str> = line.split(' ').collect();
            match words[0] {
                "PING" => self.send(b"PONG\r\n").await,
                "+OK" | "PONG" | "INFO" => {}
                "-ERR" => return Reply::Err(line),
                "MSG" => {
                    let len: usize = words.last().unwrap().parse().unwrap();
                    let body = self.body(len).await;
                    return Reply::Message {
                        headers: String::new(),
                        payload: body,
                    };
                }
                "HMSG" => {
                    let total: usize = words[words.len() - 1].parse().unwrap();
                    let hlen: usize = words[words.len() - 2].parse().unwrap();
                    let body = self.body(total).await;
                    let headers = String::from_utf8_lossy(&body[..hlen]).into_owned();
                    if headers.starts_with("NATS/1.0 503") {
                        return Reply::NoResponders;
                    }
                    return Reply::Message {
                        headers,
                        payload: body[hlen..].to_vec(),
                    };
                }
                other => panic!("unexpected from the server: {other} ({line})"),
            }
        }
    }

    /// Sends `frame` and a PING; the server's `-ERR` line if one comes before the PONG.
    async fn refused(&mut self, frame: &[u8]) -> Option<String> {
        let mut bytes = frame.to_vec();
        bytes.extend_from_slice(b"PING\r\n");
        self.send(&bytes).await;
        let mut refused = None;
        loop {
            let line = self.line().await;
            match line.split(' ').next().unwrap_or("") {
                "PONG" => return refused,
                "-ERR" => refused = Some(line),
                "PING" => self.send(b"PONG\r\n").await,
                "MSG" | "HMSG" => {
                    let total: usize = line.rsplit(' ').next().unwrap().parse().unwrap();
                    self.body(total).await;
                }
                _ => {}
            }
        }
    }

    /// Subscribes to `subject`; the server's `-ERR` if it refused.
    pub async fn subscribe(&mut self, subject: &str) -> Option<String> {
        self.next += 1;
        let frame = format!("SUB {subject} {}\r\n", 100 + self.next);
        self.refused(frame.as_bytes()).await
    }

    /// Publishes `payload` with a header block (`NATS/1.0\r\n…\r\n\r\n`, as written) on
    /// `subject`, no reply wanted; the server's `-ERR` if it refused.
    pub async fn publish_with_headers(
        &mut self,
        subject: &str,
        header_block: &[u8],
        payload: &[u8],
    ) -> Option<String> {
        let mut frame = format!(
            "HPUB {subject} {} {}\r\n",
            header_block.len(),
            header_block.len() + payload.len()
        )
        .into_bytes();
        frame.extend_from_slice(header_block);
        frame.extend_from_slice(payload);
        frame.extend_from_slice(b"\r\n");
        self.refused(&frame).await
    }

    /// Publishes `payload` on `subject`, no reply wanted; the server's `-ERR` if it refused.
    pub async fn publish(&mut self, subject: &str, payload: &[u8]) -> Option<String> {
        let mut frame = format!("PUB {subject} {}\r\n", payload.len()).into_bytes();
        frame.extend_from_slice(payload);
        frame.extend_from_slice(b"\r\n");
        self.refused(&frame).await
    }

    /// Publishes `payload` on `subject` naming `reply` as where to answer; the server's `-ERR`
    /// if it refused.
    pub async fn publish_with_reply(
        &mut self,
        subject: &str,
        reply: &str,
        payload: &[u8],
    ) -> Option<String> {
        let mut frame = format!("PUB {subject} {reply} {}\r\n", payload.len()).into_bytes();
        frame.extend_from_slice(payload);
        frame.extend_from_slice(b"\r\n");
        self.refused(&frame).await
    }

    async fn body(&mut self, len: usize) -> Vec<u8> {
        let mut buf = vec![0; len + 2];
        tokio::time::timeout(HANG, self.stream.read_exact(&mut buf))
            .await
            .expect("hung reading a message")
            .expect("tcp read");
        buf.truncate(len);
        buf
    }
}
