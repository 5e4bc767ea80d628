//! An ID token signs its holder in as the person it names, so it never leaves this machine in
//! the clear (issue 49): a "server" beyond loopback that speaks no TLS — a listener that
//! records every byte it is sent — never receives it, and the person is told why. The same
//! listener on loopback does receive it (what shows the recording would catch a leak).

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// This machine's address beyond loopback: the one its route out leaves from.
pub(crate) fn beyond_loopback() -> IpAddr {
    let socket = std::net::UdpSocket::bind("0.0.0.0:0").unwrap();
    // Connecting a UDP socket sends nothing: it only picks the route (TEST-NET-2).
    socket
        .connect("198.51.100.1:9")
        .expect("this test needs a network interface beyond loopback (a route out)");
    let ip = socket.local_addr().unwrap().ip();
    assert!(!ip.is_loopback(), "the route out leaves from {ip}");
    ip
}

/// A listener on `ip` that greets like a NATS server without TLS and keeps every byte a
/// client sends it (for a few seconds).
pub(crate) async fn recorder(ip: IpAddr) -> (SocketAddr, tokio::task::JoinHandle<Vec<u8>>) {
    let listener = tokio::net::TcpListener::bind((ip, 0)).await.unwrap();
    let addr = listener.local_addr().unwrap();
    let heard = tokio::spawn(async move {
        let mut heard = Vec::new();
        let Ok(Ok((mut conn, _))) =
            tokio::time::timeout(Duration::from_secs(20), listener.accept()).await
        else {
            return heard;
        };
        let info = r#"INFO {"server_id":"NRECORDER","server_name":"recorder","version":"2.10.0","proto":1,"host":"0.0.0.0","port":4222,"headers":true,"max_payload":1048576,"auth_required":true}"#;
        let _ = conn.write_all(format!("{info}\r\n").as_bytes()).await;
        let mut buf = [0u8; 4096];
        let until = tokio::time::Instant::now() + Duration::from_secs(3);
        while let Ok(Ok(n)) = tokio::time::timeout_at(until, conn.read(&mut buf)).await {
            if n == 0 {
                break;
            }
            heard.extend_from_slice(&buf[..n]);
        }
        heard
    });
    (addr, heard)
}

/// `mesh call echo` signing in with `token` at `addr`: its exit code and stderr.
async fn call_with_token(addr: SocketAddr, token: &std::path::Path) -> (Option<i32>, String) {
    let home = tempfile::tempdir().unwrap();
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_mesh"))
        .arg("--server")
        .arg(format!("nats://{addr}"))
        .arg("--id-token")
        .arg(token)
        .args(["call", "echo", "text=hi"])
        .env("HOME", home.path())
        .env_remove("NATS_URL")
        .env_remove("MESH_ID_TOKEN")
        .kill_on_drop(true)
        .output();
    let out = tokio::time::timeout(Duration::from_secs(60), out)
        .await
        .expect("mesh gives up on a server that never answers")
        .unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[tokio::test]
async fn an_id_token_goes_beyond_this_machine_only_over_tls() {
    let dir = tempfile::tempdir().unwrap();
    let token =
        "eyJhbGciOiJSUzI1NiJ9.eyJwcmVmZXJyZWRfdXNlcm5hbWUiOiJhbm4ifQ.c2VjcmV0LXNpZ25hdHVyZQ";
    let file = dir.path().join("ann.jwt");
    std::fs::write(&file, token).unwrap();

    let (addr, heard) = recorder(beyond_loopback()).await;
    let (code, err) = call_with_token(addr, &file).await;
    let heard = heard.await.unwrap();
    assert!(
        !String::from_utf8_lossy(&heard).contains(token),
        "the ID token was sent in the clear to {addr}"
    );
    assert_ne!(code, Some(0), "{err}");
    assert!(
        err.contains("your ID token was not sent") && err.contains("TLS"),
        "{err}"
    );

    // The same listener on loopback: the token is sent (the recording catches it).
    let (addr, heard) = recorder(IpAddr::from([127, 0, 0, 1])).await;
    let _ = call_with_token(addr, &file).await;
    let heard = heard.await.unwrap();
    assert!(
        String::from_utf8_lossy(&heard).contains(token),
        "on loopback the CONNECT carries the token: {}",
        String::from_utf8_lossy(&heard)
    );
}

/// `mesh call echo` signing in with `token` at the server list `servers`, as given.
async fn call_at(servers: &str, token: &std::path::Path) -> (Option<i32>, String) {
    let home = tempfile::tempdir().unwrap();
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_mesh"))
        .args(["--server", servers, "--id-token"])
        .arg(token)
        .args(["call", "echo", "text=hi"])
        .env("HOME", home.path())
        .env_remove("NATS_URL")
        .env_remove("MESH_ID_TOKEN")
        .kill_on_drop(true)
        .output();
    let out = tokio::time::timeout(Duration::from_secs(60), out)
        .await
        .expect("mesh gives up on a server that never answers")
        .unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn token_file(dir: &std::path::Path) -> (String, std::path::PathBuf) {
    let token =
        "eyJhbGciOiJSUzI1NiJ9.eyJwcmVmZXJyZWRfdXNlcm5hbWUiOiJhbm4ifQ.c2VjcmV0LXNpZ25hdHVyZQ";
    let file = dir.join("ann.jwt");
    std::fs::write(&file, token).unwrap();
    (token.to_owned(), file)
}

/// A URL whose host is beyond this machine though a loopback address appears in it (after
/// a `?` or `#` with an `@`, where a URL parser sees a query or fragment, not userinfo):
/// the server connected to is the one beyond loopback, and it hears no token.
#[tokio::test]
async fn a_loopback_address_in_a_urls_query_is_not_this_machine() {
    let dir = tempfile::tempdir().unwrap();
    let (token, file) = token_file(dir.path());
    for trick in ["?@127.0.0.1:4222", "#@127.0.0.1:4222"] {
        let (addr, heard) = recorder(beyond_loopback()).await;
        let (code, err) = call_at(&format!("nats://{addr}{trick}"), &file).await;
        let heard = heard.await.unwrap();
        assert!(
            !String::from_utf8_lossy(&heard).contains(&token),
            "the ID token was sent in the clear to {addr} (URL nats://{addr}{trick})"
        );
        assert_ne!(code, Some(0), "{err}");
    }
}

/// `ws://` is no TLS either (async-nats skips its TLS upgrade for a websocket URL, and
/// without its websocket feature speaks plain NATS there): no token to a server beyond
/// loopback that way.
#[tokio::test]
async fn a_websocket_url_beyond_loopback_hears_no_token() {
    let dir = tempfile::tempdir().unwrap();
    let (token, file) = token_file(dir.path());
    let (addr, heard) = recorder(beyond_loopback()).await;
    let (code, err) = call_at(&format!("ws://{addr}"), &file).await;
    let heard = heard.await.unwrap();
    assert!(
        !String::from_utf8_lossy(&heard).contains(&token),
        "the ID token was sent in the clear to ws://{addr}"
    );
    assert_ne!(code, Some(0), "{err}");
}

/// A server on loopback that names another of its cluster beyond this machine
/// (`connect_urls` in its INFO), then goes away: the client reconnecting must not carry the
/// ID token in the clear to the server it was told of.
#[tokio::test]
async fn a_discovered_server_beyond_loopback_hears_no_token() {
    let dir = tempfile::tempdir().unwrap();
    let (token, file) = token_file(dir.path());
    let (far, heard) = recorder(beyond_loopback()).await;
    let near = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let near_addr = near.local_addr().unwrap();
    let serve = tokio::spawn(async move {
        let (mut conn, _) = near.accept().await.unwrap();
        let info = format!(
            r#"INFO {{"server_id":"NNEAR","server_name":"near","version":"2.10.0","proto":1,"host":"127.0.0.1","port":{},"headers":true,"max_payload":1048576,"connect_urls":["{far}"]}}"#,
            near_addr.port()
        );
        conn.write_all(format!("{info}\r\n").as_bytes())
            .await
            .unwrap();
        // Answer the CONNECT's PING, then leave: the client reconnects to what it knows.
        let mut buf = [0u8; 4096];
        let mut seen = Vec::new();
        while !String::from_utf8_lossy(&seen).contains("PING") {
            match conn.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => seen.extend_from_slice(&buf[..n]),
            }
        }
        let _ = conn.write_all(b"PONG\r\n").await;
        tokio::time::sleep(Duration::from_millis(200)).await;
        // The listener goes with this task: only the discovered server is left.
    });
    let call = tokio::spawn({
        let file = file.clone();
        async move { call_at(&format!("nats://{near_addr}"), &file).await }
    });
    let heard = heard.await.unwrap();
    serve.abort();
    call.abort();
    assert!(
        !String::from_utf8_lossy(&heard).contains(&token),
        "the ID token was sent in the clear to {far}, a server the loopback one named: {}",
        String::from_utf8_lossy(&heard)
    );
}
