//! The `tether` CLI and the Rust client over HTTPS and WSS: straight to
//! tetherd's own TLS listener and through nginx terminating TLS, with the
//! test's CA given by `--cacert` / `TETHER_CACERT` / `with_ca_file`, a
//! self-signed server reached only with an explicit `--insecure`, and
//! failures that say what failed (TLS, refused, DNS) without guessing.

#![allow(clippy::unwrap_used)]

use std::path::Path;

use tether_client::{
    AttachOptions, Attachment, Client, RetryPolicy, SpawnRequest, SpawnSpec, TransportKind,
};
use tether_tests::cli::{block_on, tether, tether_env, tether_lines, text, wait_file, wait_output};
use tether_tests::nginx::Nginx;
use tether_tests::pki::Pki;
use tether_tests::rust_client::bounded;
use tether_tests::tmux::Tmux;
use tether_tests::{TestServer, WAIT};
use tokio::io::AsyncReadExt;

/// tetherd serving TLS itself with the PKI's server certificate.
fn tls_server(pki: &Pki) -> TestServer {
    let server = TestServer::start_with(&[
        "--tls-cert",
        &pki.path("server.pem"),
        "--tls-key",
        &pki.path("server.key"),
    ]);
    assert!(server.base.starts_with("https://"), "{}", server.base);
    server
}

/// nginx terminating TLS (the PKI's server certificate) in front of a
/// plain tetherd, passing WebSocket upgrades on; returns its https:// URL.
fn nginx_tls(pki: &Pki, server: &TestServer) -> (Nginx, String) {
    let upstream = server.base.trim_start_matches("http://").to_string();
    let (cert, key) = (pki.path("server.pem"), pki.path("server.key"));
    let nginx = block_on(Nginx::start(|_, port| {
        format!(
            r#"
    map $http_upgrade $connection_upgrade {{
        default upgrade;
        ''      close;
    }}
    server {{
        listen 127.0.0.1:{port} ssl;
        ssl_certificate {cert};
        ssl_certificate_key {key};
        location / {{
            proxy_pass http://{upstream};
            proxy_http_version 1.1;
            proxy_set_header Upgrade $http_upgrade;
            proxy_set_header Connection $connection_upgrade;
            proxy_set_header Host $http_host;
            proxy_buffering off;
            proxy_read_timeout 60s;
        }}
    }}
"#
        )
    }));
    let base = format!("https://127.0.0.1:{}", nginx.port);
    (nginx, base)
}

/// What every https:// server must give the CLI: `run` with both streams
/// and the exit code, a detached run attached to with stdin, `-t` in a
/// real terminal (tmux), the CA from the environment, and a clear refusal
/// without it.
fn cli_over_tls(base: &str, pki: &Pki, name: &str) {
    let ca = pki.path("ca.pem");
    let out = tether(
        base,
        &[
            "--cacert",
            &ca,
            "run",
            "--",
            "sh",
            "-c",
            "echo out; echo err >&2; exit 7",
        ],
        b"",
    );
    assert_eq!(
        (text(&out.stdout).as_str(), text(&out.stderr).as_str()),
        ("out\n", "err\n")
    );
    assert_eq!(out.status.code(), Some(7));

    // The CA from TETHER_CACERT, for every subcommand.
    let env = [("TETHER_CACERT", ca.as_str())];
    let out = tether_env(
        base,
        &[
            "run",
            "-d",
            "-i",
            "--",
            "sh",
            "-c",
            "echo before; read x; echo after $x; exit 4",
        ],
        &env,
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let id = text(&out.stdout).trim().to_string();
    let out = tether(base, &["--cacert", &ca, "attach", "-i", &id], b"now\n");
    assert_eq!(text(&out.stdout), "before\nafter now\n");
    assert_eq!(out.status.code(), Some(4));
    let out = tether_env(base, &["ps", "-a", "-q"], &env);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains(&id), "{}", text(&out.stdout));

    // Without the CA: one line naming TLS and the way out, no guess.
    let out = tether(base, &["ps"], b"");
    assert_eq!(out.status.code(), Some(125));
    let stderr = text(&out.stderr);
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(stderr.contains("TLS handshake failed"), "{stderr}");
    assert!(stderr.contains("--cacert"), "{stderr}");
    assert!(!stderr.contains("is tetherd running"), "{stderr}");
    let out = tether(base, &["run", "--", "true"], b"");
    assert_eq!(out.status.code(), Some(125));
    assert!(
        text(&out.stderr).contains("TLS handshake failed"),
        "{}",
        text(&out.stderr)
    );
    // --insecure, asked for by name, accepts the certificate.
    let out = tether(base, &["--insecure", "run", "--", "echo", "insecure"], b"");
    assert_eq!(
        (text(&out.stdout).as_str(), out.status.code()),
        ("insecure\n", Some(0)),
        "{}",
        text(&out.stderr)
    );

    // A kill while attached is told apart from a server shutting down by
    // /healthz, asked with the same trust.
    let (child, lines) = tether_lines(
        base,
        &[
            "--cacert",
            &ca,
            "run",
            "--",
            "sh",
            "-c",
            "echo ready; exec sleep 60",
        ],
    );
    assert_eq!(lines.recv_timeout(WAIT).unwrap(), "ready");
    let running = tether_env(base, &["ps", "-q", "--filter", "status=running"], &env);
    let running = text(&running.stdout).trim().to_string();
    let out = tether_env(base, &["kill", &running], &env);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let out = wait_output(child);
    assert_eq!(out.status.code(), Some(137));
    assert!(
        text(&out.stderr).contains("tether: killed: a kill request"),
        "{}",
        text(&out.stderr)
    );

    // -t through a real terminal, over WSS.
    let (tmux, dir) = Tmux::start(name, base, &format!("TETHER_CACERT={ca}"));
    tmux.until("the prompt", |p| p.contains("prompt>"));
    tmux.type_line("echo $((6*7))");
    tmux.until("42", |p| p.lines().any(|l| l.trim() == "42"));
    tmux.type_line("exit 3");
    assert_eq!(wait_file(&dir.join("rc")), "3\n");
    assert_eq!(
        wait_file(&dir.join("before")),
        wait_file(&dir.join("after")),
        "terminal mode restored"
    );
}

#[test]
fn the_cli_runs_attaches_and_drives_a_terminal_over_tetherds_own_tls() {
    let pki = Pki::new("cli-direct");
    let server = tls_server(&pki);
    cli_over_tls(&server.base, &pki, "tls-direct");
}

#[test]
fn the_cli_runs_attaches_and_drives_a_terminal_through_nginx_with_tls() {
    let pki = Pki::new("cli-nginx");
    let server = TestServer::start();
    let (_nginx, base) = nginx_tls(&pki, &server);
    cli_over_tls(&base, &pki, "tls-nginx");
}

/// The Rust client against an https:// server: exec, run (one WSS) and
/// attach, trusting the CA; a TLS failure without it, reported as such.
async fn client_over_tls(base: &str, ca: &Path) {
    let client = Client::new(base).unwrap().with_ca_file(ca).unwrap();
    let out = bounded(
        "exec",
        client.exec(SpawnRequest::command("echo secure; exit 3")),
    )
    .await
    .unwrap();
    assert_eq!(
        (out.stdout.as_slice(), out.exit_code),
        (&b"secure\n"[..], 3)
    );

    let run = bounded(
        "run",
        client.run(
            SpawnRequest::command("echo from-run; exit 5"),
            AttachOptions::default(),
        ),
    )
    .await
    .unwrap();
    let Attachment {
        mut stdout, exit, ..
    } = run;
    let mut seen = String::new();
    bounded("stdout", stdout.read_to_string(&mut seen))
        .await
        .unwrap();
    assert_eq!(seen, "from-run\n");
    assert_eq!(bounded("exit", exit).await.unwrap().exit_code, Some(5));

    let untrusted = Client::new(base).unwrap().with_retry(RetryPolicy::none());
    let error = untrusted.list().await.unwrap_err();
    assert_eq!(error.transport_kind(), Some(TransportKind::Tls), "{error}");
    let insecure = untrusted.with_insecure_tls().unwrap();
    assert!(insecure.list().await.is_ok());
}

#[tokio::test]
async fn the_rust_client_reaches_tetherd_and_nginx_over_tls() {
    let pki = Pki::new("client");
    let ca = pki.path("ca.pem");
    let direct = tls_server(&pki);
    client_over_tls(&direct.base, Path::new(&ca)).await;

    let plain = TestServer::start();
    let upstream = plain.base.trim_start_matches("http://").to_string();
    let (cert, key) = (pki.path("server.pem"), pki.path("server.key"));
    let nginx = Nginx::start(|_, port| {
        format!(
            r#"
    map $http_upgrade $connection_upgrade {{ default upgrade; '' close; }}
    server {{
        listen 127.0.0.1:{port} ssl;
        ssl_certificate {cert};
        ssl_certificate_key {key};
        location / {{
            proxy_pass http://{upstream};
            proxy_http_version 1.1;
            proxy_set_header Upgrade $http_upgrade;
            proxy_set_header Connection $connection_upgrade;
            proxy_buffering off;
        }}
    }}
"#
        )
    })
    .await;
    client_over_tls(&format!("https://127.0.0.1:{}", nginx.port), Path::new(&ca)).await;
}

#[tokio::test]
async fn a_failure_to_connect_says_what_failed() {
    let port = tether_tests::free_port();
    let refused = Client::new(&format!("http://127.0.0.1:{port}"))
        .unwrap()
        .with_retry(RetryPolicy::none());
    let error = refused.list().await.unwrap_err();
    assert_eq!(
        error.transport_kind(),
        Some(TransportKind::Refused),
        "{error}"
    );
    // `.invalid` never resolves (RFC 2606).
    let dns = Client::new("http://no-such-host.invalid:7420")
        .unwrap()
        .with_retry(RetryPolicy::none());
    let error = dns.list().await.unwrap_err();
    assert_eq!(error.transport_kind(), Some(TransportKind::Dns), "{error}");
    let out = tether("http://no-such-host.invalid:7420", &["ps"], b"");
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(125));
    assert!(stderr.contains("DNS lookup failed"), "{stderr}");
    assert!(!stderr.contains("is tetherd running"), "{stderr}");
    // A plain-HTTP server asked for TLS: a TLS failure, not a guess.
    let server = TestServer::start();
    let https = server.base.replace("http://", "https://");
    let out = tether(&https, &["ps"], b"");
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(125));
    assert!(stderr.contains("TLS handshake failed"), "{stderr}");
    assert!(
        stderr.contains("answered without TLS: use http://"),
        "{stderr}"
    );
    assert!(
        !stderr.contains("--cacert"),
        "no advice that does not apply: {stderr}"
    );
}

/// docs/DEPLOY.md's recipe, word for word: OpenSSL 3 marks the
/// self-signed certificate `CA:TRUE`, which curl accepts with `--cacert`;
/// the CLI and the Rust client accept it the same way, for the names it
/// holds, and refuse it for another name.
#[tokio::test]
async fn the_self_signed_certificate_of_the_deploy_recipe_works_with_cacert() {
    let dir = std::env::temp_dir().join(format!("tether-deploy-tls-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let made = std::process::Command::new("sh")
        .arg("-c")
        .arg(
            "openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 30 \\
  -subj /CN=localhost -addext subjectAltName=DNS:localhost,IP:127.0.0.1 \\
  -keyout key.pem -out cert.pem 2>/dev/null",
        )
        .current_dir(&dir)
        .status()
        .unwrap();
    assert!(made.success());
    let (cert, key) = (dir.join("cert.pem"), dir.join("key.pem"));
    let text_of = |out: &std::process::Output| (text(&out.stdout), text(&out.stderr));
    let dump = std::process::Command::new("openssl")
        .args(["x509", "-noout", "-text", "-in"])
        .arg(&cert)
        .output()
        .unwrap();
    assert!(
        text(&dump.stdout).contains("CA:TRUE"),
        "the recipe makes a CA-marked certificate"
    );
    let server = TestServer::start_with(&[
        "--tls-cert",
        cert.to_str().unwrap(),
        "--tls-key",
        key.to_str().unwrap(),
    ]);
    let port = server.base.rsplit(':').next().unwrap().to_string();
    for host in ["localhost", "127.0.0.1"] {
        let base = format!("https://{host}:{port}");
        let out = tether(
            &base,
            &[
                "--cacert",
                cert.to_str().unwrap(),
                "run",
                "--",
                "echo",
                "over TLS",
            ],
            b"",
        );
        let (stdout, stderr) = text_of(&out);
        assert!(out.status.success(), "{base}: {stderr}");
        assert_eq!(stdout, "over TLS\n");
        let client = Client::new(&base).unwrap().with_ca_file(&cert).unwrap();
        bounded("the Rust client's list over TLS", client.list())
            .await
            .unwrap();
    }
    // The certificate names localhost and 127.0.0.1 only.
    let other = format!("https://127.0.0.2:{port}");
    let server_elsewhere = TestServer::start_at(
        &format!("127.0.0.2:{port}"),
        &[
            "--tls-cert",
            cert.to_str().unwrap(),
            "--tls-key",
            key.to_str().unwrap(),
        ],
        &[],
    );
    let out = tether(&other, &["--cacert", cert.to_str().unwrap(), "ps"], b"");
    let (_, stderr) = text_of(&out);
    assert_eq!(out.status.code(), Some(125), "{stderr}");
    assert!(
        stderr.contains("TLS handshake failed") && stderr.contains("not valid for name"),
        "{stderr}"
    );
    assert!(
        !stderr.contains("pass it with --cacert"),
        "no advice already followed: {stderr}"
    );
    drop(server_elsewhere);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// No server at all: the library with its default retries and the CLI
/// say so in well under a second, as docker and kubectl do (a refused
/// connection is retried only briefly until a server has answered once).
#[tokio::test]
async fn a_client_against_a_closed_port_fails_at_once() {
    let port = tether_tests::free_port();
    let base = format!("http://127.0.0.1:{port}");
    let started = std::time::Instant::now();
    let error = Client::new(&base).unwrap().list().await.unwrap_err();
    assert!(error.is_unreachable(), "{error}");
    assert!(
        started.elapsed() < std::time::Duration::from_secs(1),
        "{:?}",
        started.elapsed()
    );
    let started = std::time::Instant::now();
    let out = tether(&base, &["ps"], b"");
    assert_eq!(out.status.code(), Some(125));
    assert!(
        text(&out.stderr).contains("is tetherd running"),
        "{}",
        text(&out.stderr)
    );
    assert!(
        started.elapsed() < std::time::Duration::from_secs(1),
        "{:?}",
        started.elapsed()
    );
}
