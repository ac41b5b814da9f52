//! The harness of `kube.rs`: a kubeconfig for a real `kubectl`, the
//! Kubernetes Python client in its venv, tmux for `kubectl exec -it`, nginx
//! with TLS (kubectl sends a token only over https), and a small
//! Kubernetes channel client of our own for each subprotocol.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};

use futures_util::{SinkExt, StreamExt};
use serde_json::Value;
use tether_tests::nginx::Nginx;
use tether_tests::WAIT;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::http::HeaderValue;
use tokio_tungstenite::tungstenite::Message;

pub fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn unique_dir(what: &str) -> PathBuf {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let dir = std::env::temp_dir().join(format!(
        "tether-kube-{what}-{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// A kubeconfig (and discovery cache of its own) pointing at a server.
pub struct Kubeconfig {
    pub dir: PathBuf,
}

impl Kubeconfig {
    /// `server` is the tetherd (or proxy) URL; `token` goes in the user
    /// entry; `ca` is the certificate to trust for https.
    pub fn new(server: &str, token: Option<&str>, ca: Option<&Path>) -> Kubeconfig {
        let dir = unique_dir("kubeconfig");
        let user = match token {
            Some(token) => format!("{{token: {token}}}"),
            None => "{}".to_string(),
        };
        let ca = match ca {
            Some(ca) => format!("\n    certificate-authority: {}", ca.display()),
            None => String::new(),
        };
        let config = format!(
            "apiVersion: v1
kind: Config
clusters:
- name: tetherd
  cluster:
    server: {server}{ca}
contexts:
- name: tetherd
  context: {{cluster: tetherd, user: tester, namespace: default}}
current-context: tetherd
users:
- name: tester
  user: {user}
"
        );
        std::fs::write(dir.join("config"), config).unwrap();
        Kubeconfig { dir }
    }

    /// `kubectl` with this kubeconfig, its own cache and no inherited
    /// configuration.
    pub fn kubectl(&self, args: &[&str]) -> Command {
        let mut command = Command::new("kubectl");
        command
            .arg("--kubeconfig")
            .arg(self.dir.join("config"))
            .arg("--cache-dir")
            .arg(self.dir.join("cache"))
            .args(args)
            .env_remove("KUBECONFIG")
            .env("HOME", &self.dir);
        command
    }

    /// Runs kubectl to completion with `stdin` (bounded by [`WAIT`]).
    pub fn run(&self, args: &[&str], stdin: &[u8]) -> Output {
        let mut child = self
            .kubectl(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("run kubectl (it must be on the PATH)");
        let mut input = child.stdin.take().unwrap();
        let stdin = stdin.to_vec();
        let writer = std::thread::spawn(move || {
            use std::io::Write;
            let _ = input.write_all(&stdin);
        });
        let output = wait_output(child, "kubectl");
        writer.join().unwrap();
        output
    }

    /// The shell line that runs this kubectl (for tmux).
    pub fn shell_line(&self, args: &str) -> String {
        format!(
            "HOME={d} kubectl --kubeconfig {d}/config --cache-dir {d}/cache {args}",
            d = self.dir.display()
        )
    }
}

impl Drop for Kubeconfig {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Waits, bounded, for a child's output (read as it comes, so a full pipe
/// never stalls it); kills it past the bound.
pub fn wait_output(child: Child, what: &str) -> Output {
    let pid = child.id();
    let (done, outcome) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = done.send(child.wait_with_output());
    });
    match outcome.recv_timeout(WAIT) {
        Ok(output) => output.unwrap(),
        Err(_) => {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid as i32),
                nix::sys::signal::Signal::SIGKILL,
            );
            let output = outcome.recv().unwrap().unwrap();
            panic!(
                "{what} did not finish in time; stdout {:?}, stderr {:?}",
                text(&output.stdout),
                text(&output.stderr)
            );
        }
    }
}

/// Runs `tests/kube/python_client.py SERVER SCENARIO [TOKEN]` with the
/// venv's Python (made by scripts/test.sh) and returns what it observed.
pub fn python_client(server: &str, scenario: &str, token: Option<&str>) -> Value {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let python = std::env::var_os("TETHER_KUBE_PYTHON")
        .map(PathBuf::from)
        .unwrap_or_else(|| root.join("target/kube-venv/bin/python"));
    assert!(
        python.exists(),
        "{} is missing: create the venv with `python3 -m venv target/kube-venv && \
         target/kube-venv/bin/pip install kubernetes==37.0.2` (scripts/test.sh does), \
         or set TETHER_KUBE_PYTHON",
        python.display()
    );
    let mut command = Command::new(python);
    command
        .arg(root.join("tests/kube/python_client.py"))
        .arg(server)
        .arg(scenario)
        .args(token)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let output = wait_output(command.spawn().unwrap(), "python_client.py");
    assert!(
        output.status.success(),
        "python_client.py {scenario} failed: {}",
        text(&output.stderr)
    );
    serde_json::from_slice(&output.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", text(&output.stdout)))
}

/// nginx terminating TLS (a self-signed certificate for 127.0.0.1) in
/// front of a tetherd, as a deployment with a token must be for kubectl.
pub struct TlsProxy {
    /// Kept for its lifetime: nginx stops when the proxy is dropped.
    _nginx: Nginx,
    certificate: PathBuf,
    /// `https://127.0.0.1:PORT`
    pub base: String,
}

impl TlsProxy {
    pub async fn start(upstream: &str) -> TlsProxy {
        let upstream = upstream.trim_start_matches("http://").to_string();
        let nginx = Nginx::start(|dir, port| {
            let made = Command::new("openssl")
                .args([
                    "req",
                    "-x509",
                    "-newkey",
                    "rsa:2048",
                    "-nodes",
                    "-days",
                    "1",
                    "-subj",
                    "/CN=127.0.0.1",
                    "-addext",
                    "subjectAltName=IP:127.0.0.1",
                    "-keyout",
                ])
                .arg(dir.join("key.pem"))
                .arg("-out")
                .arg(dir.join("cert.pem"))
                .output()
                .expect("run openssl");
            assert!(made.status.success(), "openssl: {}", text(&made.stderr));
            let d = dir.display();
            format!(
                r#"
    map $http_upgrade $connection_upgrade {{
        default upgrade;
        ''      close;
    }}
    server {{
        listen 127.0.0.1:{port} ssl;
        ssl_certificate {d}/cert.pem;
        ssl_certificate_key {d}/key.pem;
        location / {{
            proxy_pass http://{upstream};
            proxy_http_version 1.1;
            proxy_set_header Upgrade $http_upgrade;
            proxy_set_header Connection $connection_upgrade;
            proxy_set_header Host $http_host;
            proxy_buffering off;
        }}
    }}
"#
            )
        })
        .await;
        TlsProxy {
            certificate: nginx.dir().join("cert.pem"),
            base: format!("https://127.0.0.1:{}", nginx.port),
            _nginx: nginx,
        }
    }

    pub fn certificate(&self) -> PathBuf {
        self.certificate.clone()
    }
}

/// What a Kubernetes channel session received until the server closed.
#[derive(Debug, Default)]
pub struct Session {
    pub stdout: Vec<u8>,
    pub stderr: Vec<u8>,
    /// Every message on channel 3, decoded.
    pub statuses: Vec<Vec<u8>>,
    /// Messages on channels other than 1, 2, 3.
    pub other: Vec<Vec<u8>>,
    /// The server's close code.
    pub close_code: Option<u16>,
}

impl Session {
    /// The one status, as JSON.
    pub fn status(&self) -> Value {
        assert_eq!(self.statuses.len(), 1, "statuses: {:?}", self.statuses);
        serde_json::from_slice(&self.statuses[0])
            .unwrap_or_else(|e| panic!("{e}: {}", text(&self.statuses[0])))
    }
}

type Socket =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

/// A small Kubernetes channel client: offers subprotocols, frames
/// messages by channel (base64 text for `v4.base64.channel.k8s.io`).
pub struct ChannelClient {
    socket: Socket,
    /// The subprotocol the server picked.
    pub protocol: String,
}

impl ChannelClient {
    /// Opens `url` (`ws://...`) offering `protocols` (comma-joined).
    pub async fn connect(url: &str, protocols: &str) -> ChannelClient {
        let mut request = url.into_client_request().unwrap();
        request.headers_mut().insert(
            "Sec-WebSocket-Protocol",
            HeaderValue::from_str(protocols).unwrap(),
        );
        let (socket, response) =
            tokio::time::timeout(WAIT, tokio_tungstenite::connect_async(request))
                .await
                .expect("connect in time")
                .expect("websocket upgrade");
        let protocol = response
            .headers()
            .get("sec-websocket-protocol")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_string();
        ChannelClient { socket, protocol }
    }

    fn base64(&self) -> bool {
        self.protocol == "v4.base64.channel.k8s.io"
    }

    /// Sends `data` on `channel`.
    pub async fn send(&mut self, channel: u8, data: &[u8]) {
        let message = if self.base64() {
            use base64::Engine;
            let mut text = String::from(char::from(b'0' + channel));
            base64::engine::general_purpose::STANDARD.encode_string(data, &mut text);
            Message::Text(text.into())
        } else {
            let mut bytes = vec![channel];
            bytes.extend_from_slice(data);
            Message::Binary(bytes.into())
        };
        self.socket.send(message).await.unwrap();
    }

    /// Sends raw bytes as one binary message.
    pub async fn send_raw(&mut self, bytes: &[u8]) {
        self.socket
            .send(Message::Binary(bytes.to_vec().into()))
            .await
            .unwrap();
    }

    /// v5: `[255, 0]`, end of stdin.
    pub async fn close_stdin(&mut self) {
        self.send_raw(&[255, 0]).await;
    }

    /// Reads one data message: (channel, payload), or None at Close.
    pub async fn next(&mut self, session: &mut Session) -> Option<(u8, Vec<u8>)> {
        loop {
            let message = tokio::time::timeout(WAIT, self.socket.next())
                .await
                .expect("a message in time")?;
            let bytes: Vec<u8> = match message.expect("websocket message") {
                Message::Binary(bytes) => bytes.to_vec(),
                Message::Text(text) if self.base64() => {
                    use base64::Engine;
                    let text = text.as_bytes();
                    let mut bytes = vec![text[0] - b'0'];
                    bytes.extend(
                        base64::engine::general_purpose::STANDARD
                            .decode(&text[1..])
                            .expect("valid base64 from the server"),
                    );
                    bytes
                }
                Message::Text(text) => panic!("text message in {}: {text}", self.protocol),
                Message::Close(frame) => {
                    session.close_code = frame.map(|f| u16::from(f.code));
                    return None;
                }
                _ => continue,
            };
            let (&channel, payload) = bytes.split_first().expect("a channel byte");
            return Some((channel, payload.to_vec()));
        }
    }

    /// Reads everything until the server's Close, then answers it.
    pub async fn finish(mut self, mut session: Session) -> Session {
        while let Some((channel, payload)) = self.next(&mut session).await {
            match channel {
                1 => session.stdout.extend(payload),
                2 => session.stderr.extend(payload),
                3 => session.statuses.push(payload),
                _ => session.other.push(payload),
            }
        }
        let _ = self.socket.close(None).await;
        session
    }

    /// Reads until stdout contains `needle` (bounded by [`WAIT`] per message).
    pub async fn read_until(&mut self, session: &mut Session, needle: &str) {
        while !text(&session.stdout).contains(needle) {
            match self.next(session).await {
                Some((1, payload)) => session.stdout.extend(payload),
                Some((2, payload)) => session.stderr.extend(payload),
                Some((3, payload)) => session.statuses.push(payload),
                Some((_, payload)) => session.other.push(payload),
                None => panic!("closed before {needle:?}: {}", text(&session.stdout)),
            }
        }
    }
}
