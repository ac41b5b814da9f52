//! Secure by default: a generated token, where it goes and who may read it.

use super::*;

#[test]
fn a_start_that_fails_leaves_no_generated_token_file_behind() {
    let runtime = TempDir::new("xdg-failed");
    let missing = runtime.0.join("no-such-cert.pem");
    let output = Command::new(binary("tetherd"))
        .args(["--listen", "127.0.0.1:0", "--tls-cert"])
        .arg(&missing)
        .arg("--tls-key")
        .arg(&missing)
        .env_remove("TETHER_TOKEN")
        .env_remove("TETHER_TOKEN_FILE")
        .env("XDG_RUNTIME_DIR", &runtime.0)
        .output()
        .unwrap();
    assert!(!output.status.success());
    assert!(
        String::from_utf8_lossy(&output.stderr).contains("no-such-cert.pem"),
        "{output:?}"
    );
    let entries = std::fs::read_dir(runtime.0.join("tether").join("servers"))
        .map(|d| d.count())
        .unwrap_or(0);
    assert_eq!(entries, 0, "no runtime entry left behind");
}

#[tokio::test]
async fn without_a_token_flag_tetherd_generates_one_requires_it_and_the_cli_finds_it() {
    let runtime = TempDir::new("xdg");
    let xdg = runtime.0.to_str().unwrap();
    let server = TestServer::start_exact(&[], &[("XDG_RUNTIME_DIR", xdg)], None);
    let file_line = server.next_stdout_line();
    let url_line = server.next_stdout_line();
    let servers = runtime.0.join("tether").join("servers");
    let token_path = std::fs::read_dir(&servers)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .find(|p| p.extension().is_some_and(|e| e == "json"))
        .expect("the server's runtime entry");
    assert!(
        file_line.contains(token_path.to_str().unwrap()),
        "{file_line}"
    );
    let token = url_line
        .strip_prefix(&format!("open: {}/#token=", server.base))
        .unwrap_or_else(|| panic!("no URL with the token in its fragment: {url_line}"))
        .to_string();
    assert!(token.len() >= 40, "{token}");

    // Unauthenticated requests are refused; the token opens them.
    let (status, body) = call(&server, "GET", "/v1/processes", None, None).await;
    assert_eq!((status, code(&body)), (401, "unauthorized"), "{body}");
    let (status, _) = call(&server, "GET", "/v1/processes", Some(&token), None).await;
    assert_eq!(status, 200);

    // Its runtime entry holds it and its URL, readable by this user only.
    let entry: Value = serde_json::from_slice(&std::fs::read(&token_path).unwrap()).unwrap();
    assert_eq!(entry["token"], token.as_str());
    assert_eq!(entry["url"], server.base.as_str());
    let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&token_path), 0o600);
    assert_eq!(mode(token_path.parent().unwrap()), 0o700);
    if nix::unistd::Uid::effective().is_root() {
        // Another Unix user (nobody) cannot read it.
        let output = Command::new("setpriv")
            .args(["--reuid=65534", "--regid=65534", "--clear-groups", "cat"])
            .arg(&token_path)
            .output()
            .unwrap();
        assert!(!output.status.success(), "nobody read the token file");
        assert!(
            String::from_utf8_lossy(&output.stderr).contains("Permission denied"),
            "{}",
            String::from_utf8_lossy(&output.stderr)
        );
        assert!(!String::from_utf8_lossy(&output.stdout).contains(&token));
    }

    // The CLI on this machine works without being told the token.
    let env = [
        ("XDG_RUNTIME_DIR", xdg),
        ("TETHER_SERVER", server.base.as_str()),
    ];
    let run = cli(&env, &["run", "--", "sh", "-c", "echo found-the-token"]);
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&run.stdout), "found-the-token\n");
    // ...and without the file it is refused, saying what to set.
    let elsewhere = TempDir::new("empty");
    let env = [
        ("XDG_RUNTIME_DIR", elsewhere.0.to_str().unwrap()),
        ("TETHER_SERVER", server.base.as_str()),
    ];
    let refused = cli(&env, &["ps"]);
    assert!(!refused.status.success());
    let said = String::from_utf8_lossy(&refused.stderr);
    assert!(said.contains("TETHER_TOKEN"), "{said}");
    assert!(
        said.contains("no runtime entry for"),
        "says where it looked: {said}"
    );
}

#[tokio::test]
async fn two_servers_with_generated_tokens_each_reached_without_a_token() {
    let runtime = TempDir::new("xdg-two");
    let xdg = runtime.0.to_str().unwrap();
    let first = TestServer::start_exact(&[], &[("XDG_RUNTIME_DIR", xdg)], None);
    let mut second = TestServer::start_exact(&[], &[("XDG_RUNTIME_DIR", xdg)], None);
    let run_on = |server: &TestServer, word: &str| {
        let env = [
            ("XDG_RUNTIME_DIR", xdg),
            ("TETHER_SERVER", server.base.as_str()),
        ];
        cli(&env, &["run", "--", "echo", word])
    };
    // An entry's token goes to exactly the origin the entry names: the
    // same server reached as `localhost` (which may resolve to another
    // listener, on ::1) gets none, and is told so.
    let as_localhost = first.base.replace("127.0.0.1", "localhost");
    let refused = cli(
        &[
            ("XDG_RUNTIME_DIR", xdg),
            ("TETHER_SERVER", as_localhost.as_str()),
        ],
        &["ps"],
    );
    assert!(!refused.status.success());
    let said = String::from_utf8_lossy(&refused.stderr);
    assert!(said.contains("exactly its own URL"), "{said}");
    for (server, word) in [(&first, "first"), (&second, "second")] {
        let run = run_on(server, word);
        assert!(
            run.status.success(),
            "{}",
            String::from_utf8_lossy(&run.stderr)
        );
        assert_eq!(String::from_utf8_lossy(&run.stdout), format!("{word}\n"));
    }
    second.terminate().await;
    let run = run_on(&first, "still");
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&run.stdout), "still\n");
    let left = std::fs::read_dir(runtime.0.join("tether").join("servers"))
        .unwrap()
        .count();
    assert_eq!(left, 1, "the second removed its own entry only");
}

#[tokio::test]
async fn no_token_keeps_the_open_behaviour_with_a_warning() {
    let log = TempDir::new("log");
    let path = log.0.join("stderr");
    let server = TestServer::start_exact(&["--no-token"], &[], Some(&path));
    let (status, _) = call(&server, "GET", "/v1/processes", None, None).await;
    assert_eq!(status, 200);
    let text = std::fs::read_to_string(&path).unwrap();
    assert!(
        text.contains("--no-token") && text.contains("run commands"),
        "{text}"
    );
}

#[tokio::test]
async fn a_unix_socket_client_attaches_and_no_other_user_may_connect() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let dir = TempDir::new("sock");
    let socket = dir.0.join("tether.sock");
    let listen = format!("unix:{}", socket.display());
    let server = TestServer::start_exact(&["--listen", &listen, "--no-token"], &[], None);
    assert_eq!(server.base, listen);
    assert_eq!(
        std::fs::metadata(&socket).unwrap().permissions().mode() & 0o777,
        0o600
    );

    // Spawn over plain HTTP on the socket.
    let mut stream = tokio::net::UnixStream::connect(&socket).await.unwrap();
    let body = json!({"command": "read line; echo \"got $line\"", "stdin": true}).to_string();
    let request = format!(
        "POST /v1/processes HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).await.unwrap();
    assert!(response.starts_with("HTTP/1.1 201"), "{response}");
    let info: Value = serde_json::from_str(response.split("\r\n\r\n").nth(1).unwrap()).unwrap();
    let id = info["id"].as_str().unwrap();

    // Attach over the socket, type, read the answer and the exit.
    let stream = tokio::net::UnixStream::connect(&socket).await.unwrap();
    let mut request =
        tokio_tungstenite::tungstenite::client::IntoClientRequest::into_client_request(format!(
            "ws://localhost/v1/processes/{id}/attach"
        ))
        .unwrap();
    request
        .headers_mut()
        .insert("Sec-WebSocket-Protocol", "tether.v1".parse().unwrap());
    let (mut ws, _) = tokio_tungstenite::client_async(request, stream)
        .await
        .unwrap();
    use futures_util::{SinkExt, StreamExt};
    let frame = ClientFrame::Stdin {
        data: b"over-unix\n".to_vec(),
    };
    ws.send(tokio_tungstenite::tungstenite::Message::Binary(
        frame.encode().into(),
    ))
    .await
    .unwrap();
    let mut stdout = Vec::new();
    let mut exited = false;
    while !exited {
        let message = tokio::time::timeout(WAIT, ws.next())
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        if let tokio_tungstenite::tungstenite::Message::Binary(bytes) = message {
            match ServerFrame::decode(&bytes).unwrap() {
                ServerFrame::Stdout { data, .. } => stdout.extend_from_slice(&data),
                ServerFrame::Exit { .. } => exited = true,
                _ => {}
            }
        }
    }
    assert_eq!(String::from_utf8_lossy(&stdout), "got over-unix\n");

    if nix::unistd::Uid::effective().is_root() {
        // nobody cannot connect to a 0600 socket.
        let output = Command::new("setpriv")
            .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
            .args(["curl", "-sS", "--unix-socket"])
            .arg(&socket)
            .arg("http://localhost/healthz")
            .output()
            .unwrap();
        assert!(!output.status.success(), "nobody connected to the socket");
    }
    drop(server);
}
