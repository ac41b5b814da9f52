//! A fleet of hosts behind one endpoint (issue 20): three tetherd hosts on
//! 127.0.0.2, .3 and .4, each with `--node tetherd-N`, behind Debian's
//! nginx running `deploy/nginx/fleet.conf` as it is, with only the upstream
//! addresses and the listen port replaced. Every client call goes through
//! nginx; routing is by the path alone.

use std::collections::HashMap;

use futures_util::stream::{self, StreamExt};
use serde_json::{json, Value};
use tether_client::{
    AttachOptions, Attachment as ClientAttachment, Client, ExitReason, Overflow, SpawnRequest,
    SpawnSpec,
};
use tether_protocol::ProcessInfo;
use tether_tests::cut::CuttingProxy;
use tether_tests::nginx::Nginx;
use tether_tests::{binary, Attachment, TestServer, WAIT};

const NODES: [&str; 3] = ["tetherd-0", "tetherd-1", "tetherd-2"];
/// The upstream addresses written in deploy/nginx/fleet.conf, in node order.
const CONF_ADDRS: [&str; 3] = ["10.0.0.10:7420", "10.0.0.11:7420", "10.0.0.12:7420"];

struct Fleet {
    hosts: Vec<Option<TestServer>>,
    nginx: Nginx,
    http: reqwest::Client,
}

impl Fleet {
    /// Three hosts (`extra` flags on each) and nginx in front of them.
    async fn start(extra: &[&str]) -> Fleet {
        let hosts: Vec<TestServer> = NODES
            .iter()
            .enumerate()
            .map(|(i, node)| {
                let listen = format!("127.0.0.{}:0", i + 2);
                let mut args = vec!["--node", node];
                args.extend_from_slice(extra);
                TestServer::start_at(&listen, &args, &[])
            })
            .collect();
        let addrs: Vec<String> = hosts
            .iter()
            .map(|h| h.base.trim_start_matches("http://").to_string())
            .collect();
        let nginx = Nginx::start(|_, port| fleet_conf(&addrs, port)).await;
        Fleet {
            hosts: hosts.into_iter().map(Some).collect(),
            nginx,
            http: reqwest::Client::new(),
        }
    }

    fn url(&self, path: &str) -> String {
        format!("{}{path}", self.nginx.base)
    }

    async fn request(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<Value>,
    ) -> (u16, Value) {
        let mut request = self.http.request(method, self.url(path));
        if let Some(body) = body {
            request = request.json(&body);
        }
        let response = tokio::time::timeout(WAIT, request.send())
            .await
            .expect("request through nginx timed out")
            .expect("request through nginx");
        let status = response.status().as_u16();
        let text = response.text().await.unwrap_or_default();
        (
            status,
            serde_json::from_str(&text).unwrap_or(Value::String(text)),
        )
    }

    async fn get(&self, path: &str) -> (u16, Value) {
        self.request(reqwest::Method::GET, path, None).await
    }

    async fn post(&self, path: &str, body: Value) -> (u16, Value) {
        self.request(reqwest::Method::POST, path, Some(body)).await
    }

    /// The library, pointed at nginx.
    fn client(&self) -> Client {
        Client::new(&self.nginx.base).expect("client")
    }
}

/// deploy/nginx/fleet.conf with the test's addresses and port. Fails if the
/// file no longer has the lines the test replaces, so the file and the test
/// cannot drift apart.
fn fleet_conf(addrs: &[String], port: u16) -> String {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../deploy/nginx/fleet.conf");
    let mut conf = std::fs::read_to_string(path).expect("read deploy/nginx/fleet.conf");
    for (from, to) in CONF_ADDRS.iter().zip(addrs) {
        assert_eq!(conf.matches(from).count(), 2, "{from} in fleet.conf");
        conf = conf.replace(from, to);
    }
    assert!(conf.contains("    listen 80;"), "listen 80 in fleet.conf");
    conf.replace("    listen 80;", &format!("    listen 127.0.0.1:{port};"))
}

fn node_of(id: &str) -> &str {
    id.split_once('.')
        .map(|(node, _)| node)
        .expect("id NODE.HEX")
}

#[tokio::test]
async fn spawns_spread_over_every_host_and_each_process_is_always_served_by_its_own() {
    let fleet = Fleet::start(&[]).await;
    let client = fleet.client();
    // 300 spawns through the proxy, 16 at a time, through the library
    // (which sends an Idempotency-Key with each).
    let spawned: Vec<ProcessInfo> = stream::iter(0..300)
        .map(|i| {
            let client = client.clone();
            async move {
                client
                    .spawn(SpawnRequest::command(format!(
                        "echo out-{i}; exit {}",
                        i % 7
                    )))
                    .await
                    .expect("spawn through the fleet")
            }
        })
        .buffer_unordered(16)
        .collect()
        .await;
    let mut per_node: HashMap<String, usize> = HashMap::new();
    for process in &spawned {
        let node = node_of(&process.id);
        assert_eq!(
            process.node.as_deref(),
            Some(node),
            "node field agrees with the id"
        );
        assert_eq!(process.id.len(), node.len() + 1 + 32, "{}", process.id);
        *per_node.entry(node.to_string()).or_default() += 1;
    }
    for node in NODES {
        assert!(
            per_node.get(node).copied().unwrap_or(0) >= 30,
            "spawns reached every host: {per_node:?}"
        );
    }
    // Every process is waited through the proxy and answers with its own
    // exit; each host knows only its own.
    for process in &spawned {
        let exited = client
            .wait(&process.id)
            .await
            .expect("wait through the fleet");
        let i: i32 = exited.argv[2]
            .trim_start_matches("echo out-")
            .split(';')
            .next()
            .and_then(|n| n.parse().ok())
            .expect("i in the command");
        assert_eq!(exited.exit_code, Some(i % 7), "{}", exited.id);
        assert_eq!(exited.node, process.node);
    }
    // A sample is attached through the proxy and replays its output.
    for process in spawned.iter().step_by(25) {
        let url = format!(
            "{}/v1/processes/{}/attach",
            fleet.nginx.base.replace("http://", "ws://"),
            process.id
        );
        let received = Attachment::connect(&url).await.until_exit().await;
        let i = process.argv[2].trim_start_matches("echo out-");
        let i = i.split(';').next().expect("i");
        assert_eq!(received.stdout, format!("out-{i}\n").into_bytes());
    }
    // A host's list holds its processes only: /nodes/NAME/ reaches it.
    for node in NODES {
        let (status, list) = fleet.get(&format!("/nodes/{node}/v1/processes")).await;
        assert_eq!(status, 200, "{list}");
        let ids: Vec<&str> = list
            .as_array()
            .expect("a list")
            .iter()
            .filter_map(|p| p["id"].as_str())
            .collect();
        assert_eq!(ids.len(), per_node[node], "{node}");
        assert!(ids.iter().all(|id| node_of(id) == node));
    }
    // The fleet root has no single list to give.
    let (status, body) = fleet.get("/v1/processes").await;
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (400, Some("list_per_node"))
    );
}

#[tokio::test]
async fn signal_kill_and_a_resumed_attachment_reach_the_host_named_in_the_id() {
    let fleet = Fleet::start(&[]).await;
    let client = fleet.client();
    for node in NODES {
        // Spawned on a named host.
        let (status, signalled) = fleet
            .post(
                &format!("/nodes/{node}/v1/processes"),
                json!({"argv": ["sleep", "100"]}),
            )
            .await;
        assert_eq!(status, 201, "{signalled}");
        let id = signalled["id"].as_str().expect("id").to_string();
        assert_eq!(node_of(&id), node);
        client
            .signal(&id, "TERM")
            .await
            .expect("signal through the fleet");
        let exited = client.wait(&id).await.expect("wait");
        assert_eq!(
            (exited.reason, exited.signal.as_deref()),
            (Some(ExitReason::Signal), Some("TERM"))
        );

        let killed = client
            .spawn(SpawnRequest::argv(["sleep", "100"]))
            .await
            .expect("spawn");
        let killed = client
            .kill(&killed.id)
            .await
            .expect("kill through the fleet");
        assert_eq!(killed.reason, Some(ExitReason::Killed));
    }
    // Resume across a cut connection, through nginx: every byte once.
    let target = fleet
        .nginx
        .base
        .trim_start_matches("http://")
        .parse()
        .expect("addr");
    let cutter = CuttingProxy::start(target).await;
    let through_cut = Client::new(&cutter.base).expect("client");
    let lines = 200_000u64;
    let process = through_cut
        .spawn(
            SpawnRequest::command(format!("seq {lines}"))
                .overflow(Overflow::Block)
                .retain_bytes(64 * 1024),
        )
        .await
        .expect("spawn");
    let options = AttachOptions {
        window: 16 * 1024,
        ..AttachOptions::default()
    };
    let ClientAttachment {
        mut stdout,
        control,
        exit,
        ..
    } = through_cut
        .attach(&process.id, options)
        .await
        .expect("attach");
    let expected: Vec<u8> = (1..=lines)
        .flat_map(|n| format!("{n}\n").into_bytes())
        .collect();
    let mut all = Vec::new();
    let mut buf = vec![0u8; 8 * 1024];
    let cuts = [100_000usize, 400_000, 800_000];
    let mut next_cut = 0;
    tokio::time::timeout(WAIT * 3, async {
        use tokio::io::AsyncReadExt;
        loop {
            let n = stdout.read(&mut buf).await.expect("read stdout");
            if n == 0 {
                break;
            }
            all.extend_from_slice(&buf[..n]);
            if next_cut < cuts.len() && all.len() >= cuts[next_cut] {
                assert!(cutter.cut() > 0, "nothing to cut");
                next_cut += 1;
            }
        }
    })
    .await
    .expect("stdout in time");
    assert_eq!(next_cut, cuts.len(), "every cut happened mid-stream");
    assert!(
        all == expected,
        "every byte once across the cuts ({} bytes)",
        all.len()
    );
    let info = tokio::time::timeout(WAIT, exit)
        .await
        .expect("exit in time")
        .expect("exit");
    assert_eq!(info.exit_code, Some(0));
    assert!(
        control.connections() >= 4,
        "resumed {} times",
        control.connections() - 1
    );
}

#[tokio::test]
async fn the_cli_works_through_the_fleet_unchanged() {
    let fleet = Fleet::start(&[]).await;
    let output = tokio::time::timeout(
        WAIT,
        tokio::process::Command::new(binary("tether"))
            .args([
                "--server",
                &fleet.nginx.base,
                "run",
                "--",
                "sh",
                "-c",
                "echo via-fleet; exit 5",
            ])
            .env_remove("TETHER_TOKEN")
            .output(),
    )
    .await
    .expect("tether run in time")
    .expect("tether run");
    assert_eq!(String::from_utf8_lossy(&output.stdout), "via-fleet\n");
    assert_eq!(output.status.code(), Some(5));
}

#[tokio::test]
async fn a_lost_host_answers_clearly_and_the_others_carry_on() {
    let mut fleet = Fleet::start(&[]).await;
    let client = fleet.client();
    let mut on = HashMap::new();
    for node in NODES {
        let (status, p) = fleet
            .post(
                &format!("/nodes/{node}/v1/processes"),
                json!({"argv": ["sleep", "100"]}),
            )
            .await;
        assert_eq!(status, 201, "{p}");
        on.insert(node, p["id"].as_str().expect("id").to_string());
    }
    // An attachment on a surviving host stays open through the loss.
    let url = format!(
        "{}/v1/processes/{}/attach",
        fleet.nginx.base.replace("http://", "ws://"),
        on["tetherd-1"]
    );
    let mut survivor = Attachment::connect(&url).await;
    drop(fleet.hosts[0].take()); // tetherd-0 is killed (SIGKILL on drop)

    let (status, body) = fleet
        .get(&format!("/v1/processes/{}", on["tetherd-0"]))
        .await;
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (503, Some("node_unavailable")),
        "{body}"
    );
    let (status, body) = fleet
        .get(&format!("/v1/processes/{}/wait", on["tetherd-0"]))
        .await;
    assert_eq!(status, 503, "{body}");
    // A node nobody runs is not mistaken for a missing process either.
    let (status, body) = fleet
        .get(&format!("/v1/processes/tetherd-9.{}", "0".repeat(32)))
        .await;
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (404, Some("unknown_node"))
    );

    for node in ["tetherd-1", "tetherd-2"] {
        let info = client.get(&on[node]).await.expect("the other hosts answer");
        assert!(!info.is_exited(), "{node}");
    }
    // New spawns go to the hosts that are left.
    for _ in 0..30 {
        let p = client
            .spawn(SpawnRequest::argv(["true"]))
            .await
            .expect("spawn after the loss");
        assert_ne!(node_of(&p.id), "tetherd-0");
    }
    client.kill(&on["tetherd-1"]).await.expect("kill");
    let received = survivor.until_exit().await;
    assert_eq!(
        received.exit.and_then(|e| e.reason),
        Some(ExitReason::Killed)
    );
}

#[tokio::test]
async fn a_draining_host_takes_no_spawns_and_lets_its_processes_finish() {
    let fleet = Fleet::start(&["--drain-grace-ms", "20000"]).await;
    let client = fleet.client();
    // A process on tetherd-2 that finishes when told to.
    let (status, p) = fleet
        .post(
            "/nodes/tetherd-2/v1/processes",
            json!({"command": "read line; echo finished-$line", "stdin": true}),
        )
        .await;
    assert_eq!(status, 201, "{p}");
    let id = p["id"].as_str().expect("id").to_string();
    let host = fleet.hosts[2].as_ref().expect("tetherd-2");
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(host.pid() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .expect("SIGTERM tetherd-2");
    // Readiness turns to 503 (the event the proxy and Kubernetes watch).
    let health = tether_tests::settle_async(
        || fleet.get("/nodes/tetherd-2/healthz"),
        |(status, _)| *status == 503,
    )
    .await;
    assert_eq!(health, (503, Value::String("draining\n".into())));
    // A spawn sent to it is refused with a Retry-After ...
    let refused = fleet
        .http
        .post(fleet.url("/nodes/tetherd-2/v1/processes"))
        .json(&json!({"argv": ["true"]}))
        .send()
        .await
        .expect("post");
    assert_eq!(refused.status().as_u16(), 503);
    let retry_after = refused.headers().get("retry-after").cloned();
    let body = refused.text().await.unwrap_or_default();
    assert!(body.contains("\"draining\""), "{body}");
    assert!(retry_after.is_some(), "Retry-After with {body}");
    // ... and spawns through the fleet go elsewhere.
    for _ in 0..30 {
        let p = client
            .spawn(SpawnRequest::argv(["true"]))
            .await
            .expect("spawn while draining");
        assert_ne!(node_of(&p.id), "tetherd-2");
    }
    // Its running process is still served, and finishes on its own. Once
    // its last process has exited the drain is over and the host shuts
    // down, so a client learns of the exit by being there when it happens:
    // here an attachment (connected, its hello read, before the stdin that
    // ends the process), which the shutdown lets send the exit frame.
    let url = format!(
        "{}/v1/processes/{id}/attach",
        fleet.nginx.base.replace("http://", "ws://")
    );
    let mut attachment = Attachment::connect(&url).await;
    client
        .write_stdin(&id, b"ok\n".to_vec())
        .await
        .unwrap_or_else(|e| {
            panic!(
                "stdin to the draining host: {e:?}\n{}",
                fleet.nginx.error_log()
            )
        });
    let received = attachment.until_exit().await;
    assert_eq!(received.stdout, b"finished-ok\n");
    let exited = received.exit.expect("an exit frame");
    assert_eq!(
        (exited.reason, exited.exit_code),
        (Some(ExitReason::Exit), Some(0))
    );
}
