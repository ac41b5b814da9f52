//! Behind a reverse proxy (issue 7): Debian's nginx, with a plain WebSocket
//! proxy configuration (the one in `docs/nginx.conf.example`, with a short
//! `proxy_read_timeout` so the tests are quick), in front of a real tetherd.
//! Every request of the harness goes through nginx.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use serde_json::json;
use tether_protocol::{ClientFrame, ExitReason, ProcessInfo};
use tether_tests::{Attachment, Received, TestServer, WAIT};
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::Message;

/// nginx's `proxy_read_timeout` in these tests.
const PROXY_TIMEOUT: Duration = Duration::from_secs(2);

/// The server block of `docs/nginx.conf.example`, with the test's ports and
/// `proxy_read_timeout`.
fn nginx_conf(dir: &std::path::Path, port: u16, upstream: &str) -> String {
    let dir = dir.display();
    let timeout = PROXY_TIMEOUT.as_secs();
    format!(
        r#"daemon off;
master_process off;
worker_processes 1;
pid {dir}/nginx.pid;
error_log {dir}/error.log warn;
events {{ worker_connections 256; }}
http {{
    access_log off;
    client_body_temp_path {dir}/client_body;
    proxy_temp_path {dir}/proxy;
    fastcgi_temp_path {dir}/fastcgi;
    uwsgi_temp_path {dir}/uwsgi;
    scgi_temp_path {dir}/scgi;

    map $http_upgrade $connection_upgrade {{
        default upgrade;
        ''      close;
    }}

    server {{
        listen 127.0.0.1:{port};

        location / {{
            proxy_pass http://{upstream};
            proxy_http_version 1.1;
            proxy_set_header Upgrade $http_upgrade;
            proxy_set_header Connection $connection_upgrade;
            proxy_set_header Host $http_host;
            proxy_buffering off;
            proxy_read_timeout {timeout}s;
            proxy_send_timeout {timeout}s;
        }}
    }}
}}
"#
    )
}

/// nginx in the foreground on a free loopback port; killed on drop.
struct Nginx {
    child: Child,
    dir: PathBuf,
    /// `http://127.0.0.1:PORT`
    base: String,
}

impl Nginx {
    /// Starts nginx proxying to `upstream` (`http://HOST:PORT`) and waits,
    /// bounded, until it accepts connections.
    async fn start(upstream: &str) -> Nginx {
        let dir =
            std::env::temp_dir().join(format!("tether-nginx-{}-{}", std::process::id(), unique()));
        std::fs::create_dir_all(&dir).unwrap();
        let port = free_port();
        let conf = dir.join("nginx.conf");
        let upstream = upstream.trim_start_matches("http://");
        std::fs::write(&conf, nginx_conf(&dir, port, upstream)).unwrap();
        let child = Command::new(nginx_binary())
            .arg("-p")
            .arg(&dir)
            .arg("-e")
            .arg(dir.join("error.log"))
            .arg("-c")
            .arg(&conf)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start nginx (apt-get install nginx)");
        let mut nginx = Nginx {
            child,
            dir,
            base: format!("http://127.0.0.1:{port}"),
        };
        nginx.wait_accepting(port).await;
        nginx
    }

    /// Bounded retry of connect: the event is nginx accepting.
    async fn wait_accepting(&mut self, port: u16) {
        let deadline = Instant::now() + WAIT;
        loop {
            if tokio::net::TcpStream::connect(("127.0.0.1", port))
                .await
                .is_ok()
            {
                return;
            }
            if let Some(status) = self.child.try_wait().unwrap() {
                panic!("nginx exited with {status}: {}", self.error_log());
            }
            assert!(
                Instant::now() < deadline,
                "nginx never accepted: {}",
                self.error_log()
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    fn error_log(&self) -> String {
        std::fs::read_to_string(self.dir.join("error.log")).unwrap_or_default()
    }
}

impl Drop for Nginx {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn nginx_binary() -> &'static str {
    if std::path::Path::new("/usr/sbin/nginx").exists() {
        "/usr/sbin/nginx"
    } else {
        "nginx"
    }
}

fn free_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap().port()
}

fn unique() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

/// A tetherd with `flags`, and nginx in front of it. The server's `base`
/// is nginx's, so every harness call (HTTP and attach) goes through it.
async fn behind_nginx(flags: &[&str]) -> (TestServer, Nginx) {
    let mut server = TestServer::start_with(flags);
    let nginx = Nginx::start(&server.base).await;
    server.base = nginx.base.clone();
    (server, nginx)
}

/// Reads the socket for `quiet`, answering pings (tungstenite queues the
/// pong), and returns how many pings came. Panics on any data frame or on
/// the connection closing: the attachment must stay open and silent.
async fn stay_idle_for(attachment: &mut Attachment, quiet: Duration) -> usize {
    let mut pings = 0;
    let result = tokio::time::timeout(quiet, async {
        loop {
            match attachment.ws.next().await {
                Some(Ok(Message::Ping(_))) => pings += 1,
                Some(Ok(Message::Pong(_))) => {}
                other => panic!("the idle attachment got {other:?}"),
            }
        }
    })
    .await;
    assert!(result.is_err(), "the loop only ends by the timer");
    pings
}

#[tokio::test]
async fn attach_output_stdin_and_exit_work_through_the_proxy() {
    let (server, _nginx) = behind_nginx(&[]).await;
    let process = server
        .sh(
            "echo hello; read line; echo \"got $line\"; echo oops >&2; exit 3",
            json!({"stdin": true}),
        )
        .await;
    let mut attachment = server.attach(&process.id, "").await;
    assert_eq!(attachment.protocol.as_deref(), Some("tether.v1"));
    let mut received = Received::default();
    attachment
        .until_stdout_contains("hello\n", &mut received)
        .await;
    attachment
        .send(ClientFrame::Stdin {
            data: b"world\n".to_vec(),
        })
        .await;
    let rest = attachment.until_exit().await;
    assert_eq!(rest.stdout, b"got world\n");
    assert_eq!(rest.stderr, b"oops\n");
    let exit = rest.exit.unwrap();
    assert_eq!(exit.exit_code, Some(3));
    assert_eq!(exit.reason, Some(ExitReason::Exit));
    assert_eq!(attachment.frame_or_close().await.err(), Some(Some(1000)));
    assert_eq!(server.wait_exit(&process.id).await, exit);
}

#[tokio::test]
async fn a_browser_page_served_through_the_proxy_may_attach() {
    // The proxy passes the client's Host on, so an Origin naming the
    // proxy's own address is the server's own origin.
    let (server, nginx) = behind_nginx(&[]).await;
    let process = server.sh("echo hi", json!({})).await;
    let mut request = server
        .ws_url(&process.id, "")
        .into_client_request()
        .unwrap();
    request
        .headers_mut()
        .insert("Origin", nginx.base.parse().unwrap());
    let (mut ws, response) = tokio_tungstenite::connect_async(request)
        .await
        .expect("upgrade with the proxy's origin");
    assert_eq!(response.status(), 101);
    assert!(matches!(ws.next().await, Some(Ok(Message::Binary(_)))));
}

#[tokio::test]
async fn an_idle_attachment_survives_the_proxy_timeout_thanks_to_pings() {
    let (server, _nginx) = behind_nginx(&["--ping-interval-ms", "500"]).await;
    let process = server
        .sh("read x; echo \"got $x\"", json!({"stdin": true}))
        .await;
    let mut attachment = server.attach(&process.id, "").await;
    // Three proxy timeouts with no output at all: only pings cross nginx.
    let pings = stay_idle_for(&mut attachment, PROXY_TIMEOUT * 3).await;
    assert!(pings >= 6, "only {pings} pings in {:?}", PROXY_TIMEOUT * 3);
    attachment
        .send(ClientFrame::Stdin {
            data: b"late\n".to_vec(),
        })
        .await;
    let received = attachment.until_exit().await;
    assert_eq!(received.stdout, b"got late\n");
    assert_eq!(received.exit.unwrap().exit_code, Some(0));
}

#[tokio::test]
async fn without_pings_the_proxy_would_cut_an_idle_attachment() {
    // The control for the test above: with pings rarer than the proxy's
    // read timeout, nginx closes the silent connection. The process is
    // unaffected.
    let (server, _nginx) = behind_nginx(&["--ping-interval-ms", "60000"]).await;
    let process = server
        .sh("read x; echo \"got $x\"", json!({"stdin": true}))
        .await;
    let mut attachment = server.attach(&process.id, "").await;
    let started = Instant::now();
    let end = tokio::time::timeout(WAIT, async {
        loop {
            match attachment.ws.next().await {
                Some(Ok(Message::Ping(_) | Message::Pong(_))) => continue,
                other => return other,
            }
        }
    })
    .await
    .expect("nginx never cut the idle connection");
    assert!(
        !matches!(end, Some(Ok(Message::Binary(_)))),
        "unexpected data: {end:?}"
    );
    assert!(started.elapsed() >= PROXY_TIMEOUT - Duration::from_millis(100));
    assert!(!server.status(&process.id).await.is_exited());
    let (status, _) = server.post_raw_stdin(&process.id, b"x\n").await;
    assert_eq!(status, 204);
    assert_eq!(server.wait_exit(&process.id).await.exit_code, Some(0));
}

#[tokio::test]
async fn a_wait_longer_than_the_proxy_timeout_is_served_by_the_wait_maximum_and_a_client_loop() {
    // --max-wait-ms below proxy_read_timeout: each long-poll returns
    // `running` before nginx would give up, and the client asks again.
    let (server, _nginx) = behind_nginx(&["--max-wait-ms", "1000"]).await;
    let process = server.sh("read x; exit 5", json!({"stdin": true})).await;
    let started = Instant::now();
    let mut polls = 0;
    let exited: ProcessInfo = loop {
        let asked = Instant::now();
        let (status, body) = server
            .get(&format!(
                "/v1/processes/{}/wait?timeout_ms=30000",
                process.id
            ))
            .await;
        assert_eq!(status, 200, "the proxy answered {status}: {body}");
        assert!(asked.elapsed() < PROXY_TIMEOUT, "{:?}", asked.elapsed());
        let info: ProcessInfo = serde_json::from_value(body).unwrap();
        if info.is_exited() {
            break info;
        }
        polls += 1;
        // The process ends (on our word) after three proxy timeouts.
        if started.elapsed() >= PROXY_TIMEOUT * 3 {
            let (status, _) = server.post_raw_stdin(&process.id, b"go\n").await;
            assert_eq!(status, 204);
        }
        assert!(started.elapsed() < WAIT, "never exited");
    };
    assert_eq!(exited.exit_code, Some(5));
    assert!(polls >= 5, "only {polls} polls before the exit");
}

#[tokio::test]
async fn without_the_wait_maximum_the_proxy_would_time_the_wait_out() {
    // The control for the test above: a long-poll longer than
    // proxy_read_timeout becomes nginx's 504.
    let (server, _nginx) = behind_nginx(&[]).await;
    let process = server.sh("read x", json!({"stdin": true})).await;
    let (status, _) = server
        .get(&format!(
            "/v1/processes/{}/wait?timeout_ms=10000",
            process.id
        ))
        .await;
    assert_eq!(status, 504);
    let (status, _) = server.post_raw_stdin(&process.id, b"x\n").await;
    assert_eq!(status, 204);
    server.wait_exit(&process.id).await;
}
