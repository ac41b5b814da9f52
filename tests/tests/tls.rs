//! TLS on tetherd's own listener: HTTPS and WSS on one port with the
//! test's own CA (made with the openssl CLI), plain HTTP to it refused
//! cleanly, and clear start-up errors for a missing or mismatched key.

use std::path::Path;
use std::process::Command;

use futures_util::{SinkExt, StreamExt};
use serde_json::{json, Value};
use tether_protocol::{ClientFrame, ServerFrame};
use tether_tests::pki::Pki;
use tether_tests::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::Message;

fn addr_of(server: &TestServer) -> String {
    server
        .base
        .strip_prefix("https://")
        .expect("an https:// address")
        .to_string()
}

async fn tls_stream(
    pki: &Pki,
    addr: &str,
) -> tokio_rustls::client::TlsStream<tokio::net::TcpStream> {
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let name = rustls_pki_types::ServerName::try_from("127.0.0.1").unwrap();
    tokio::time::timeout(WAIT, pki.connector().connect(name, tcp))
        .await
        .expect("handshake timed out")
        .expect("TLS handshake with the test CA")
}

/// One HTTPS request with Connection: close; status and JSON body.
async fn https(
    pki: &Pki,
    addr: &str,
    method: &str,
    path: &str,
    body: Option<Value>,
) -> (u16, Value) {
    let mut stream = tls_stream(pki, addr).await;
    let body = body.map(|b| b.to_string()).unwrap_or_default();
    let request = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer tls-token\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut response = Vec::new();
    let _ = stream.read_to_end(&mut response).await;
    let text = String::from_utf8_lossy(&response).to_string();
    let status = text
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let json = text
        .split_once("\r\n\r\n")
        .and_then(|(_, b)| serde_json::from_str(b).ok())
        .unwrap_or(Value::Null);
    (status, json)
}

/// A WSS attachment to process `id` with the operator token `tls-token`.
async fn wss_attach(
    pki: &Pki,
    addr: &str,
    id: &str,
) -> tokio_tungstenite::WebSocketStream<tokio_rustls::client::TlsStream<tokio::net::TcpStream>> {
    let stream = tls_stream(pki, addr).await;
    let mut request = format!("wss://{addr}/v1/processes/{id}/attach")
        .into_client_request()
        .unwrap();
    request.headers_mut().insert(
        "Sec-WebSocket-Protocol",
        "tether.v1, tether.bearer.tls-token".parse().unwrap(),
    );
    tokio_tungstenite::client_async(request, stream)
        .await
        .unwrap()
        .0
}

#[tokio::test]
async fn https_and_wss_share_the_listener_and_plain_http_is_told_to_use_tls() {
    let pki = Pki::new("serve");
    let server = TestServer::start_with(&[
        "--token",
        "tls-token",
        "--tls-cert",
        &pki.path("server.pem"),
        "--tls-key",
        &pki.path("server.key"),
    ]);
    let addr = addr_of(&server);
    let (status, info) = https(
        &pki,
        &addr,
        "POST",
        "/v1/processes",
        Some(json!({"command": "read line; echo \"secure $line\"", "stdin": true})),
    )
    .await;
    assert_eq!(status, 201, "{info}");
    let id = info["id"].as_str().unwrap();

    // WSS on the same port.
    let mut ws = wss_attach(&pki, &addr, id).await;
    let frame = ClientFrame::Stdin {
        data: b"hello\n".to_vec(),
    };
    ws.send(Message::Binary(frame.encode().into()))
        .await
        .unwrap();
    let mut stdout = Vec::new();
    loop {
        let message = tokio::time::timeout(WAIT, ws.next())
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        if let Message::Binary(bytes) = message {
            match ServerFrame::decode(&bytes).unwrap() {
                ServerFrame::Stdout { data, .. } => stdout.extend_from_slice(&data),
                ServerFrame::Exit { .. } => break,
                _ => {}
            }
        }
    }
    assert_eq!(String::from_utf8_lossy(&stdout), "secure hello\n");

    // Plain HTTP to the TLS port: a clear 400, then the connection closes.
    let plain = reqwest::Client::new()
        .get(format!("http://{addr}/healthz"))
        .send()
        .await
        .unwrap();
    assert_eq!(plain.status().as_u16(), 400);
    assert_eq!(plain.headers()["tether-error-code"], "tls_required");
    let body: Value = plain.json().await.unwrap();
    assert_eq!(body["error"]["code"], "tls_required", "{body}");
    // The listener serves TLS on as before.
    let (status, _) = https(&pki, &addr, "GET", "/v1/processes", None).await;
    assert_eq!(status, 200);
}

fn start_error(args: &[&str]) -> String {
    let output = Command::new(binary("tetherd"))
        .args(["--listen", "127.0.0.1:0", "--no-token"])
        .args(args)
        .output()
        .unwrap();
    assert!(!output.status.success(), "tetherd started");
    String::from_utf8_lossy(&output.stderr).to_string()
}

#[tokio::test]
async fn a_missing_or_mismatched_key_stops_tetherd_at_start_with_a_clear_error() {
    let pki = Pki::new("errors");
    let missing = pki.path("nope.key");
    let message = start_error(&["--tls-cert", &pki.path("server.pem"), "--tls-key", &missing]);
    assert!(
        message.contains("--tls-key") && message.contains(&missing),
        "{message}"
    );

    let message = start_error(&[
        "--tls-cert",
        &pki.path("server.pem"),
        "--tls-key",
        &pki.path("other.key"),
    ]);
    assert!(message.contains("does not match"), "{message}");

    let message = start_error(&[
        "--tls-cert",
        &pki.path("server.key"),
        "--tls-key",
        &pki.path("server.key"),
    ]);
    assert!(message.contains("--tls-cert"), "{message}");

    let message = start_error(&["--tls-cert", &pki.path("server.pem")]);
    assert!(message.contains("--tls-key"), "{message}");
    let _ = Path::new(&missing);
}

#[tokio::test]
async fn beyond_loopback_with_a_token_but_no_tls_a_warning_says_what_is_exposed() {
    let dir = std::env::temp_dir().join(format!("tether-tls-warn-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let log = dir.join("stderr");
    let server =
        TestServer::start_exact(&["--listen", "0.0.0.0:0", "--token", "t"], &[], Some(&log));
    let port = server.base.rsplit(':').next().unwrap().to_string();
    let response = reqwest::get(format!("http://127.0.0.1:{port}/healthz"))
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 200);
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(
        text.contains("without TLS") && text.contains("clear text"),
        "{text}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// Whether a TLS handshake with `pki`'s CA succeeds against `addr`.
async fn handshake_trusts(pki: &Pki, addr: &str) -> bool {
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let name = rustls_pki_types::ServerName::try_from("127.0.0.1").unwrap();
    matches!(
        tokio::time::timeout(WAIT, pki.connector().connect(name, tcp)).await,
        Ok(Ok(_))
    )
}

/// SIGHUP reads the certificate, its key and the token file again, as they
/// rotate, without a restart: new handshakes and requests see the new
/// ones, and a session attached before carries on. A file that does not
/// read leaves what is in force.
#[tokio::test]
async fn sighup_reloads_the_certificate_and_the_token_file_and_sessions_carry_on() {
    let old = Pki::new("rotate-old");
    let new = Pki::new("rotate-new");
    let dir = fresh_dir();
    std::fs::create_dir_all(&dir).unwrap();
    let (cert, key, token_file) = (dir.join("cert.pem"), dir.join("key.pem"), dir.join("token"));
    std::fs::copy(old.path("server.pem"), &cert).unwrap();
    std::fs::copy(old.path("server.key"), &key).unwrap();
    std::fs::write(&token_file, "tls-token\n").unwrap();
    let server = TestServer::start_with(&[
        "--token-file",
        token_file.to_str().unwrap(),
        "--tls-cert",
        cert.to_str().unwrap(),
        "--tls-key",
        key.to_str().unwrap(),
    ]);
    let addr = addr_of(&server);
    let (status, info) = https(
        &old,
        &addr,
        "POST",
        "/v1/processes",
        Some(json!({"command": "while read line; do echo \"got $line\"; done", "stdin": true})),
    )
    .await;
    assert_eq!(status, 201, "{info}");
    let id = info["id"].as_str().unwrap().to_string();
    // Attached before the rotation, with the old certificate and token.
    let mut ws = wss_attach(&old, &addr, &id).await;

    // A key that does not match: the reload is refused, nothing changes.
    std::fs::copy(new.path("server.pem"), &cert).unwrap();
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(server.pid() as i32),
        nix::sys::signal::Signal::SIGHUP,
    )
    .unwrap();
    // The rotation proper: the new pair and a new token.
    std::fs::copy(new.path("server.key"), &key).unwrap();
    std::fs::write(&token_file, "rotated-token\n").unwrap();
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(server.pid() as i32),
        nix::sys::signal::Signal::SIGHUP,
    )
    .unwrap();
    let rotated = settle_async(|| handshake_trusts(&new, &addr), |ok| *ok).await;
    assert!(rotated, "new handshakes never got the new certificate");
    assert!(
        !handshake_trusts(&old, &addr).await,
        "the old certificate is still served"
    );
    let status_with = |token: &'static str| {
        let new = &new;
        let addr = addr.clone();
        async move {
            let mut stream = tls_stream(new, &addr).await;
            let request = format!(
                "GET /v1/processes HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {token}\r\nConnection: close\r\n\r\n"
            );
            stream.write_all(request.as_bytes()).await.unwrap();
            let mut response = Vec::new();
            let _ = stream.read_to_end(&mut response).await;
            String::from_utf8_lossy(&response)
                .split(' ')
                .nth(1)
                .and_then(|s| s.parse::<u16>().ok())
                .unwrap_or(0)
        }
    };
    assert_eq!(status_with("rotated-token").await, 200);
    assert_eq!(status_with("tls-token").await, 401);

    // The session attached before carries on.
    ws.send(Message::Binary(
        ClientFrame::Stdin {
            data: b"after\n".to_vec(),
        }
        .encode()
        .into(),
    ))
    .await
    .unwrap();
    let mut stdout = Vec::new();
    while !String::from_utf8_lossy(&stdout).contains("got after") {
        let message = tokio::time::timeout(WAIT, ws.next())
            .await
            .expect("the attached session stopped")
            .unwrap()
            .unwrap();
        if let Message::Binary(bytes) = message {
            if let Ok(ServerFrame::Stdout { data, .. }) = ServerFrame::decode(&bytes) {
                stdout.extend_from_slice(&data);
            }
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}
