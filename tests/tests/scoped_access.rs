//! Access that fits real deployments: a generated token by default, scoped
//! tokens (one process, some rights, an expiry, dead with their process),
//! the audit trail, the CLI's share links.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::{json, Value};
use tether_protocol::{ClientFrame, ServerFrame};
use tether_tests::scoped::{call, code, mint_as_operator, OPERATOR};
use tether_tests::*;

/// A fresh directory under the system temp dir, removed by the caller's
/// `TempDir` drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new(name: &str) -> TempDir {
        let path = std::env::temp_dir().join(format!(
            "tether-access-{name}-{}-{}",
            std::process::id(),
            uuid_like()
        ));
        std::fs::create_dir_all(&path).unwrap();
        // Others may traverse it: only the modes tetherd sets keep them out.
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
        TempDir(path)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn uuid_like() -> u64 {
    use std::time::{SystemTime, UNIX_EPOCH};
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .subsec_nanos() as u64
}

/// Mints a token for `id` with the operator token.
async fn mint(server: &TestServer, id: &str, rights: &[&str], ttl_ms: u64) -> String {
    let body = mint_as_operator(server, id, rights, ttl_ms).await;
    assert_eq!(body["process"], id);
    body["token"].as_str().unwrap().to_string()
}

async fn spawn_as_operator(server: &TestServer, body: Value) -> String {
    let info = tether_tests::scoped::spawn_as_operator(server, body).await;
    info["id"].as_str().unwrap().to_string()
}

fn cli(env: &[(&str, &str)], args: &[&str]) -> std::process::Output {
    Command::new(binary("tether"))
        .args(args)
        .env_remove("TETHER_TOKEN")
        .env_remove("TETHER_TOKEN_FILE")
        .envs(env.iter().copied())
        .output()
        .unwrap()
}

mod secure_by_default {
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
            // Reached as localhost: the entry says 127.0.0.1, the same server.
            let url = server.base.replace("127.0.0.1", "localhost");
            let env = [("XDG_RUNTIME_DIR", xdg), ("TETHER_SERVER", url.as_str())];
            cli(&env, &["run", "--", "echo", word])
        };
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
            tokio_tungstenite::tungstenite::client::IntoClientRequest::into_client_request(
                format!("ws://localhost/v1/processes/{id}/attach"),
            )
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
}

mod scoped_tokens {
    use super::*;

    fn server() -> TestServer {
        TestServer::start_with(&["--token", OPERATOR])
    }

    #[tokio::test]
    async fn a_read_only_token_reads_its_process_and_can_change_nothing() {
        let server = server();
        let a = spawn_as_operator(
            &server,
            json!({"command": "echo ready; read line; echo \"got $line\"", "stdin": true}),
        )
        .await;
        let token = mint(&server, &a, &["read"], 60_000).await;
        let t = Some(token.as_str());

        let (status, body) = call(&server, "GET", &format!("/v1/processes/{a}"), t, None).await;
        assert_eq!(status, 200, "{body}");
        let (status, _) = call(
            &server,
            "GET",
            &format!("/v1/processes/{a}/wait?timeout_ms=1"),
            t,
            None,
        )
        .await;
        assert_eq!(status, 200);

        // Attach and read (token as a subprotocol, as browsers send it).
        let mut attachment = Attachment::connect_offering(
            &server.ws_url(&a, ""),
            &format!("tether.v1, tether.bearer.{token}"),
        )
        .await;
        assert_eq!(attachment.protocol.as_deref(), Some("tether.v1"));
        let mut received = Received::default();
        attachment
            .until_stdout_contains("ready\n", &mut received)
            .await;
        // Frames that act are refused on the attachment, which carries on.
        attachment
            .send(ClientFrame::Stdin {
                data: b"from-reader\n".to_vec(),
            })
            .await;
        match attachment.frame().await {
            Some(ServerFrame::Error { code, .. }) => assert_eq!(code, "missing_right"),
            other => panic!("expected an error frame, got {other:?}"),
        }

        // Every route that acts: 403 missing_right.
        for (method, path, body) in [
            ("POST", format!("/v1/processes/{a}/stdin"), None),
            ("POST", format!("/v1/processes/{a}/stdin/close"), None),
            (
                "POST",
                format!("/v1/processes/{a}/resize"),
                Some(json!({"cols": 100, "rows": 30})),
            ),
            (
                "POST",
                format!("/v1/processes/{a}/signal"),
                Some(json!({"signal": "KILL"})),
            ),
            ("DELETE", format!("/v1/processes/{a}"), None),
        ] {
            let (status, answer) = call(&server, method, &path, t, body).await;
            assert_eq!(
                (status, code(&answer)),
                (403, "missing_right"),
                "{method} {path}: {answer}"
            );
        }

        // A is untouched: running, its stdin open, nothing from the reader in it.
        let (_, info) = call(
            &server,
            "GET",
            &format!("/v1/processes/{a}"),
            Some(OPERATOR),
            None,
        )
        .await;
        assert_eq!(info["status"], "running", "{info}");
        let response = server
            .http
            .post(server.url(&format!("/v1/processes/{a}/stdin")))
            .bearer_auth(OPERATOR)
            .body("from-operator\n")
            .send()
            .await
            .unwrap();
        assert_eq!(response.status().as_u16(), 204);
        let received = attachment.until_exit().await;
        assert_eq!(
            String::from_utf8_lossy(&received.stdout),
            "got from-operator\n"
        );
        assert_eq!(received.exit.unwrap().exit_code, Some(0));
    }

    #[tokio::test]
    async fn a_token_never_reaches_another_process_spawns_lists_or_mints() {
        let server = server();
        let a = spawn_as_operator(&server, json!({"argv": ["sleep", "30"]})).await;
        let b = spawn_as_operator(&server, json!({"argv": ["sleep", "30"]})).await;
        let token = mint(&server, &a, &["read", "write", "kill"], 60_000).await;
        let t = Some(token.as_str());
        for (method, path, body) in [
            ("GET", format!("/v1/processes/{b}"), None),
            ("GET", format!("/v1/processes/{b}/wait?timeout_ms=1"), None),
            (
                "POST",
                format!("/v1/processes/{b}/signal"),
                Some(json!({"signal": "TERM"})),
            ),
            ("DELETE", format!("/v1/processes/{b}"), None),
            // Not even whether an id exists.
            ("GET", "/v1/processes/does-not-exist".to_string(), None),
            ("GET", "/v1/processes".to_string(), None),
            (
                "POST",
                "/v1/processes".to_string(),
                Some(json!({"argv": ["true"]})),
            ),
            (
                "POST",
                format!("/v1/processes/{a}/tokens"),
                Some(json!({"rights": ["read"]})),
            ),
            (
                "POST",
                format!("/v1/processes/{b}/tokens"),
                Some(json!({"rights": ["read"]})),
            ),
        ] {
            let (status, answer) = call(&server, method, &path, t, body).await;
            assert_eq!(
                (status, code(&answer)),
                (403, "out_of_scope"),
                "{method} {path}: {answer}"
            );
        }
        let (status, body) =
            refused_attach(&format!("{}&access_token={token}", server.ws_url(&b, ""))).await;
        assert_eq!((status, code(&body)), (403, "out_of_scope"));
        // B runs on; a forged token is no token.
        assert_eq!(
            call(
                &server,
                "GET",
                &format!("/v1/processes/{b}"),
                Some(OPERATOR),
                None
            )
            .await
            .1["status"],
            "running"
        );
        let forged = format!("{}x", &token[..token.len() - 1]);
        let (status, answer) = call(
            &server,
            "GET",
            &format!("/v1/processes/{a}"),
            Some(&forged),
            None,
        )
        .await;
        assert_eq!((status, code(&answer)), (401, "unauthorized"));
    }

    #[tokio::test]
    async fn a_write_token_types_and_signals_but_cannot_kill() {
        let server = server();
        let a = spawn_as_operator(
            &server,
            json!({"command": "read line; echo \"got $line\"; sleep 30", "stdin": true}),
        )
        .await;
        let token = mint(&server, &a, &["write"], 60_000).await;
        let mut attachment = server.attach(&a, &format!("access_token={token}")).await;
        attachment
            .send(ClientFrame::Stdin {
                data: b"typed\n".to_vec(),
            })
            .await;
        let mut received = Received::default();
        attachment
            .until_stdout_contains("got typed\n", &mut received)
            .await;
        let (status, body) = call(
            &server,
            "DELETE",
            &format!("/v1/processes/{a}"),
            Some(&token),
            None,
        )
        .await;
        assert_eq!((status, code(&body)), (403, "missing_right"));
        let (status, _) = call(
            &server,
            "POST",
            &format!("/v1/processes/{a}/signal"),
            Some(&token),
            Some(json!({"signal": "TERM"})),
        )
        .await;
        assert_eq!(status, 200);
        let received = attachment.until_exit().await;
        assert_eq!(received.exit.unwrap().signal.as_deref(), Some("TERM"));
    }

    #[tokio::test]
    async fn after_its_expiry_every_request_with_the_token_is_refused() {
        let server = server();
        let a = spawn_as_operator(&server, json!({"argv": ["sleep", "30"], "stdin": true})).await;
        let token = mint(&server, &a, &["read", "write", "kill"], 1500).await;
        let t = Some(token.as_str());
        let (status, _) = call(&server, "GET", &format!("/v1/processes/{a}"), t, None).await;
        assert_eq!(status, 200, "the token works before its expiry");
        // Wait for the expiry, bounded.
        let deadline = tokio::time::Instant::now() + WAIT;
        loop {
            let (status, _) = call(&server, "GET", &format!("/v1/processes/{a}"), t, None).await;
            if status == 401 {
                break;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "the token never expired"
            );
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
        for (method, path, body) in [
            ("GET", format!("/v1/processes/{a}"), None),
            ("GET", format!("/v1/processes/{a}/wait?timeout_ms=1"), None),
            ("POST", format!("/v1/processes/{a}/stdin"), None),
            (
                "POST",
                format!("/v1/processes/{a}/signal"),
                Some(json!({"signal": "TERM"})),
            ),
            ("DELETE", format!("/v1/processes/{a}"), None),
            ("GET", "/v1/processes".to_string(), None),
        ] {
            let (status, answer) = call(&server, method, &path, t, body).await;
            assert_eq!(
                (status, code(&answer)),
                (401, "token_expired"),
                "{method} {path}: {answer}"
            );
        }
        let (status, body) =
            refused_attach(&server.ws_url(&a, &format!("access_token={token}"))).await;
        assert_eq!((status, code(&body)), (401, "token_expired"));
        assert_eq!(
            call(
                &server,
                "GET",
                &format!("/v1/processes/{a}"),
                Some(OPERATOR),
                None
            )
            .await
            .1["status"],
            "running"
        );
    }

    #[tokio::test]
    async fn streams_opened_before_the_expiry_stay_open_on_websocket_and_sse_alike() {
        let server = server();
        let flag = TempDir::new("expiry");
        let go = flag.0.join("go");
        let command = format!(
            "echo early; while [ ! -e {} ]; do sleep 0.05; done; echo late",
            go.display()
        );
        let a = spawn_as_operator(&server, json!({"command": command})).await;
        let token = mint(&server, &a, &["read"], 1500).await;
        let mut attachment =
            Attachment::connect(&server.ws_url(&a, &format!("access_token={token}"))).await;
        let sse = reqwest::Client::new()
            .get(server.url(&format!("/v1/processes/{a}/output?follow=1")))
            .header("Accept", "text/event-stream")
            .bearer_auth(&token)
            .send()
            .await
            .unwrap();
        assert_eq!(sse.status(), 200);
        let deadline = tokio::time::Instant::now() + WAIT;
        loop {
            let (status, _) = call(
                &server,
                "GET",
                &format!("/v1/processes/{a}"),
                Some(&token),
                None,
            )
            .await;
            if status == 401 {
                break;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "the token never expired"
            );
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
        // Printed after the expiry: both streams still deliver it, then the end.
        std::fs::write(&go, b"").unwrap();
        let received = attachment.until_exit().await;
        assert_eq!(received.stdout, b"early\nlate\n");
        let body = tokio::time::timeout(WAIT, sse.text())
            .await
            .unwrap()
            .unwrap();
        let mut stdout = Vec::new();
        for event in body.split("\n\n") {
            if event.starts_with("event: stdout\n") {
                let data = event
                    .lines()
                    .find_map(|l| l.strip_prefix("data: "))
                    .unwrap();
                use base64::Engine;
                stdout.extend(
                    base64::engine::general_purpose::STANDARD
                        .decode(data)
                        .unwrap(),
                );
            }
        }
        assert_eq!(stdout, b"early\nlate\n", "{body}");
        assert!(body.contains("event: exit"), "{body}");
    }

    #[tokio::test]
    async fn a_token_dies_with_the_process_it_names() {
        let server = server();
        let a = spawn_as_operator(&server, json!({"argv": ["sleep", "30"]})).await;
        let token = mint(&server, &a, &["read", "kill"], 60_000).await;
        let (status, _) = call(
            &server,
            "DELETE",
            &format!("/v1/processes/{a}?force=1"),
            Some(OPERATOR),
            None,
        )
        .await;
        assert_eq!(status, 200);
        for path in [format!("/v1/processes/{a}"), "/v1/processes".to_string()] {
            let (status, body) = call(&server, "GET", &path, Some(&token), None).await;
            assert_eq!(
                (status, code(&body)),
                (401, "token_process_gone"),
                "{path}: {body}"
            );
        }
    }

    #[tokio::test]
    async fn the_kubernetes_routes_make_the_same_decision() {
        let server = server();
        let a = spawn_as_operator(&server, json!({"argv": ["sleep", "30"]})).await;
        let b = spawn_as_operator(&server, json!({"argv": ["sleep", "30"]})).await;
        let token = mint(&server, &a, &["read"], 60_000).await;
        let t = Some(token.as_str());
        let pod = |id: &str| format!("/api/v1/namespaces/default/pods/{id}");
        let (status, body) = call(&server, "GET", &pod(&a), t, None).await;
        assert_eq!(status, 200, "{body}");
        for path in [
            pod(&b),
            format!("{}/attach?stdout=true", pod(&b)),
            format!("{}/exec?command=true&stdout=true", pod(&a)),
        ] {
            let (status, body) = call(&server, "GET", &path, t, None).await;
            assert_eq!(status, 403, "{path}: {body}");
            assert_eq!(body["kind"], "Status", "{body}");
        }
    }

    #[tokio::test]
    async fn a_token_of_another_server_is_no_token() {
        let one = server();
        let two = server();
        let a = spawn_as_operator(&one, json!({"argv": ["sleep", "30"]})).await;
        let token = mint(&one, &a, &["read"], 60_000).await;
        let (status, body) = call(&two, "GET", "/v1/processes", Some(&token), None).await;
        assert_eq!((status, code(&body)), (401, "unauthorized"));
    }

    #[tokio::test]
    async fn mint_checks_its_request() {
        let server = server();
        let a = spawn_as_operator(&server, json!({"argv": ["sleep", "30"]})).await;
        for body in [
            json!({"rights": ["root"]}),
            json!({"ttl_ms": 0}),
            json!({"ttl_ms": 10u64 * 365 * 24 * 3_600_000}),
            json!({"rights": "read"}),
        ] {
            let (status, answer) = call(
                &server,
                "POST",
                &format!("/v1/processes/{a}/tokens"),
                Some(OPERATOR),
                Some(body.clone()),
            )
            .await;
            assert_eq!(
                (status, code(&answer)),
                (400, "invalid_request"),
                "{body}: {answer}"
            );
        }
        let (status, answer) = call(
            &server,
            "POST",
            "/v1/processes/nope/tokens",
            Some(OPERATOR),
            Some(json!({})),
        )
        .await;
        assert_eq!((status, code(&answer)), (404, "not_found"));
    }

    #[tokio::test]
    async fn tether_share_prints_a_link_whose_token_reads_or_writes() {
        let server = server();
        let a = spawn_as_operator(&server, json!({"argv": ["sleep", "30"], "stdin": true})).await;
        let env = [
            ("TETHER_SERVER", server.base.as_str()),
            ("TETHER_TOKEN", OPERATOR),
        ];
        let token_of = |output: std::process::Output| -> String {
            assert!(
                output.status.success(),
                "{}",
                String::from_utf8_lossy(&output.stderr)
            );
            let link = String::from_utf8(output.stdout).unwrap();
            let prefix = format!("{}/#session={a}&token=", server.base);
            link.trim()
                .strip_prefix(&prefix)
                .unwrap_or_else(|| panic!("{link}"))
                .to_string()
        };
        let read = token_of(cli(&env, &["share", &a, "--ttl", "10m"]));
        let write = token_of(cli(&env, &["share", &a, "--write"]));
        let stdin = format!("/v1/processes/{a}/stdin");
        assert_eq!(
            call(
                &server,
                "GET",
                &format!("/v1/processes/{a}"),
                Some(&read),
                None
            )
            .await
            .0,
            200
        );
        assert_eq!(
            call(&server, "POST", &stdin, Some(&read), None).await.0,
            403
        );
        assert_eq!(
            call(&server, "POST", &stdin, Some(&write), None).await.0,
            204
        );
    }
}

mod audit {
    use super::*;

    /// The audit lines of a JSON log: (event, identity, process, rights
    /// field or reason).
    fn audit_lines(log: &str) -> Vec<(String, String, String, String)> {
        log.lines()
            .filter_map(|line| serde_json::from_str::<Value>(line).ok())
            .filter(|v| v["target"] == "audit")
            .map(|v| {
                let f = &v["fields"];
                let s = |k: &str| f[k].as_str().unwrap_or("").to_string();
                let detail = if s("event") == "refused" {
                    s("reason")
                } else {
                    s("rights")
                };
                (s("event"), s("identity"), s("process"), detail)
            })
            .collect()
    }

    #[tokio::test]
    async fn a_sequence_of_actions_leaves_exactly_its_audit_lines_and_no_token_anywhere() {
        let dir = TempDir::new("audit");
        let path = dir.0.join("stderr");
        let server = TestServer::start_exact(
            &["--token", OPERATOR, "--log-json"],
            &[("RUST_LOG", "warn,audit=info")],
            Some(&path),
        );
        let a = spawn_as_operator(&server, json!({"argv": ["sleep", "30"], "stdin": true})).await;
        let (_, minted) = call(
            &server,
            "POST",
            &format!("/v1/processes/{a}/tokens"),
            Some(OPERATOR),
            Some(json!({"rights": ["read"], "ttl_ms": 60000})),
        )
        .await;
        let token = minted["token"].as_str().unwrap().to_string();
        let id = minted["token_id"].as_str().unwrap().to_string();
        let scoped = format!("token:{id}");

        let attachment = server.attach(&a, &format!("access_token={token}")).await;
        drop(attachment);
        let lines = settle(
            || audit_lines(&std::fs::read_to_string(&path).unwrap()),
            |l| l.iter().any(|e| e.0 == "detach"),
        )
        .await;
        assert!(lines.iter().any(|e| e.0 == "detach"), "{lines:?}");
        call(
            &server,
            "POST",
            &format!("/v1/processes/{a}/stdin"),
            Some(&token),
            None,
        )
        .await;
        call(&server, "GET", "/v1/processes", Some("wrong-token"), None).await;
        call(
            &server,
            "POST",
            &format!("/v1/processes/{a}/signal"),
            Some(OPERATOR),
            Some(json!({"signal": "CONT"})),
        )
        .await;
        call(
            &server,
            "DELETE",
            &format!("/v1/processes/{a}?force=1"),
            Some(OPERATOR),
            None,
        )
        .await;

        let log = std::fs::read_to_string(&path).unwrap();
        let o = "operator".to_string();
        let e = |event: &str, who: &str, process: &str, detail: &str| {
            (
                event.to_string(),
                who.to_string(),
                process.to_string(),
                detail.to_string(),
            )
        };
        assert_eq!(
            audit_lines(&log),
            vec![
                e("spawn", &o, &a, "operator"),
                e("mint", &o, &a, "operator"),
                e("attach", &scoped, &a, "read"),
                e("detach", &scoped, &a, "read"),
                e("refused", &scoped, &a, "missing_right"),
                e("refused", "anonymous", "", "unauthorized"),
                e("signal", &o, &a, "operator"),
                e("kill", &o, &a, "operator"),
                e("forget", &o, &a, "operator"),
            ],
            "{log}"
        );
        // Peers are named; secrets never.
        assert!(log.contains("127.0.0.1:"), "{log}");
        let metrics = server.metrics().await;
        assert!(
            metrics.contains("tether_refusals_total{reason=\"missing_right\"} 1"),
            "{metrics}"
        );
        assert!(
            metrics.contains("tether_refusals_total{reason=\"unauthorized\"} 1"),
            "{metrics}"
        );
        for secret in [OPERATOR, token.as_str(), "wrong-token"] {
            assert!(!log.contains(secret), "the log holds a token");
            assert!(!metrics.contains(secret), "the metrics hold a token");
        }
    }
}
