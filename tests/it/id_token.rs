//! An ID token signs its holder in as the person it names, so it never leaves this machine in
//! the clear (issue 49): a "server" beyond loopback that speaks no TLS — a listener that
//! records every byte it is sent — never receives it, and the person is told why. The same
//! listener on loopback does receive it (what shows the recording would catch a leak).

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// This machine's address beyond loopback: the one its route out leaves from.
fn beyond_loopback() -> IpAddr {
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
async fn recorder(ip: IpAddr) -> (SocketAddr, tokio::task::JoinHandle<Vec<u8>>) {
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
