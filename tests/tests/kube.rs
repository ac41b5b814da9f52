//! Kubernetes exec compatibility (issue 17), against real clients: the real
//! `kubectl` (on the PATH) with a kubeconfig written here, the Kubernetes
//! Python client from PyPI (venv made by scripts/test.sh), and a small
//! channel client of our own for each subprotocol.

#[path = "kube/support.rs"]
mod support;

use std::time::Duration;

use serde_json::{json, Value};
use support::{text, ChannelClient, Kubeconfig, Session, TlsProxy, Tmux};
use tether_protocol::{ExitReason, ProcessInfo};
use tether_tests::TestServer;

/// `ws://HOST/api/v1/namespaces/{ns}/pods/{pod}/{verb}?{query}`.
fn pod_url(server: &TestServer, ns: &str, pod: &str, verb: &str, query: &str) -> String {
    format!(
        "{}/api/v1/namespaces/{ns}/pods/{pod}/{verb}?{query}",
        server.base.replacen("http://", "ws://", 1)
    )
}

/// `command=a&command=b...` for an argv.
fn command_query(argv: &[&str]) -> String {
    argv.iter()
        .map(|a| {
            let encoded: String = a
                .bytes()
                .map(|b| match b {
                    b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'-' | b'_' | b'.' => {
                        (b as char).to_string()
                    }
                    _ => format!("%{b:02X}"),
                })
                .collect();
            format!("command={encoded}")
        })
        .collect::<Vec<_>>()
        .join("&")
}

const ALL_PROTOCOLS: [&str; 4] = [
    "v5.channel.k8s.io",
    "v4.channel.k8s.io",
    "v4.base64.channel.k8s.io",
    "channel.k8s.io",
];

/// The one process the server knows.
async fn only_process(server: &TestServer) -> ProcessInfo {
    let (_, list) = server.get("/v1/processes").await;
    let list: Vec<ProcessInfo> = serde_json::from_value(list).unwrap();
    assert_eq!(list.len(), 1, "{list:?}");
    server.wait_exit(&list[0].id).await
}

// --- kubectl -------------------------------------------------------------

#[test]
fn kubectl_exec_keeps_stdout_and_stderr_apart_and_exits_with_the_code() {
    let server = TestServer::start();
    let kube = Kubeconfig::new(&server.base, None, None);
    let out = kube.run(
        &[
            "exec",
            "p",
            "--",
            "sh",
            "-c",
            "echo out; echo err >&2; exit 3",
        ],
        b"",
    );
    assert_eq!(text(&out.stdout), "out\n");
    assert!(
        text(&out.stderr).starts_with("err\n"),
        "stderr: {:?}",
        text(&out.stderr)
    );
    assert_eq!(out.status.code(), Some(3), "{}", text(&out.stderr));
}

#[test]
fn kubectl_exec_i_passes_stdin_and_ends_with_it() {
    let server = TestServer::start();
    let kube = Kubeconfig::new(&server.base, None, None);
    let out = kube.run(&["exec", "-i", "p", "--", "cat"], b"hi");
    assert_eq!(text(&out.stdout), "hi");
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
}

#[test]
fn kubectl_exec_delivers_a_megabyte_complete() {
    let server = TestServer::start();
    let kube = Kubeconfig::new(&server.base, None, None);
    let out = kube.run(&["exec", "p", "--", "seq", "1", "200000"], b"");
    let expected = std::process::Command::new("seq")
        .args(["1", "200000"])
        .output()
        .unwrap()
        .stdout;
    assert!(expected.len() > 1 << 20);
    assert_eq!(out.stdout.len(), expected.len());
    assert!(out.stdout == expected, "output differs");
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
}

#[test]
fn kubectl_exec_it_is_a_terminal_that_follows_the_window_and_takes_ctrl_c() {
    let server = TestServer::start();
    let kube = Kubeconfig::new(&server.base, None, None);
    let line = kube.shell_line("exec -it p -- env PS1='prompt> ' bash --norc -i");
    let tmux = Tmux::start(&line, 100, 30);
    tmux.until("the prompt", |p| p.contains("prompt>"));

    tmux.type_line("stty size");
    tmux.until("the window's size", |p| {
        p.lines().any(|l| l.trim() == "30 100")
    });

    tmux.cmd(&["resize-window", "-t", "main", "-x", "120", "-y", "40"]);
    // kubectl sends the new size when SIGWINCH reaches it; a command typed
    // at once may overtake it, so type again until it shows (bounded).
    let deadline = std::time::Instant::now() + tether_tests::WAIT;
    loop {
        tmux.type_line("clear; stty size");
        if tmux.shows_within(Duration::from_secs(2), |p| {
            p.lines().any(|l| l.trim() == "40 120")
        }) {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "size never followed:\n{}",
            tmux.pane()
        );
    }

    tmux.type_line("echo sleeping; sleep 100");
    tmux.until("the job", |p| p.lines().any(|l| l.trim() == "sleeping"));
    tmux.cmd(&["send-keys", "-t", "main", "C-c"]);
    tmux.type_line("echo after-$?");
    tmux.until("the shell after Ctrl-C", |p| {
        p.lines().any(|l| l.trim() == "after-130")
    });

    tmux.type_line("exit 4");
    assert_eq!(tmux.exit_status(), "4", "pane:\n{}", tmux.pane());
}

#[test]
fn a_tether_deadline_ends_kubectl_exec_with_124() {
    let server = TestServer::start_with(&["--kube-exec-timeout-ms", "300"]);
    let kube = Kubeconfig::new(&server.base, None, None);
    let out = kube.run(
        &["exec", "p", "--", "sh", "-c", "echo started; sleep 30"],
        b"",
    );
    assert_eq!(text(&out.stdout), "started\n");
    assert_eq!(out.status.code(), Some(124), "{}", text(&out.stderr));
}

/// kubectl sends a kubeconfig's token only to an https:// server, so a
/// tetherd with a token is used through TLS (nginx here).
#[tokio::test]
async fn with_a_token_kubectl_needs_it_over_tls_and_is_told_clearly_otherwise() {
    let server = TestServer::start_with(&["--token", "kube-s3cret"]);
    let proxy = TlsProxy::start(&server.base).await;
    let ca = proxy.certificate();
    let exec = |kube: Kubeconfig| {
        tokio::task::spawn_blocking(move || {
            kube.run(&["exec", "p", "--", "sh", "-c", "echo in; exit 2"], b"")
        })
    };
    let refused = |out: &std::process::Output| {
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{stderr}");
        assert!(out.stdout.is_empty());
        assert!(
            stderr.contains("logged in") && stderr.contains("bearer token"),
            "a clear reason: {stderr}"
        );
    };

    let wrong = Kubeconfig::new(&proxy.base, Some("not-it"), Some(&ca));
    refused(&exec(wrong).await.unwrap());
    // Over plain http kubectl drops the token; the message says why.
    let plain = Kubeconfig::new(&server.base, Some("kube-s3cret"), None);
    let out = exec(plain).await.unwrap();
    refused(&out);
    assert!(text(&out.stderr).contains("https://"));

    let right = Kubeconfig::new(&proxy.base, Some("kube-s3cret"), Some(&ca));
    let out = exec(right).await.unwrap();
    assert_eq!(text(&out.stdout), "in\n");
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
}

#[tokio::test]
async fn kubectl_exec_takes_any_namespace_and_container_and_records_them() {
    let server = TestServer::start();
    let kube = Kubeconfig::new(&server.base, None, None);
    let out = tokio::task::spawn_blocking(move || {
        kube.run(
            &[
                "exec", "-n", "team-a", "-c", "sidecar", "box-7", "--", "true",
            ],
            b"",
        )
    })
    .await
    .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let names = only_process(&server).await.kubernetes.expect("names");
    assert_eq!(names.namespace, "team-a");
    assert_eq!(names.pod, "box-7");
    assert_eq!(names.container.as_deref(), Some("sidecar"));
}

#[test]
fn kubectl_exec_of_a_missing_program_says_why() {
    let server = TestServer::start();
    let kube = Kubeconfig::new(&server.base, None, None);
    let out = kube.run(&["exec", "p", "--", "/no/such/program"], b"");
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("/no/such/program") && text(&out.stderr).contains("not found"),
        "{}",
        text(&out.stderr)
    );
}

#[tokio::test]
async fn kubectl_attach_joins_a_tether_process_by_id() {
    let server = TestServer::start();
    let process = server
        .sh(
            "echo ready; read x; echo got $x; exit 5",
            json!({"stdin": true}),
        )
        .await;
    let kube = Kubeconfig::new(&server.base, None, None);
    let id = process.id.clone();
    let out = tokio::task::spawn_blocking(move || {
        let attached = kube.run(&["attach", "-i", &id], b"hi\n");
        let unknown = kube.run(&["attach", "no-such-process"], b"");
        (attached, unknown)
    })
    .await
    .unwrap();
    let (attached, unknown) = out;
    assert_eq!(text(&attached.stdout), "ready\ngot hi\n");
    assert_eq!(
        attached.status.code(),
        Some(5),
        "{}",
        text(&attached.stderr)
    );
    assert_eq!(unknown.status.code(), Some(1));
    assert!(
        text(&unknown.stderr).contains("NotFound"),
        "{}",
        text(&unknown.stderr)
    );
}

#[test]
fn kubectl_cp_copies_both_ways_through_exec() {
    let server = TestServer::start();
    let kube = Kubeconfig::new(&server.base, None, None);
    let local = kube.dir.join("local.txt");
    std::fs::write(&local, "copied by kubectl\n").unwrap();
    let remote = kube.dir.join("remote.txt");
    let target = format!("default/anything:{}", remote.display());
    let out = kube.run(&["cp", local.to_str().unwrap(), &target], b"");
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(
        std::fs::read_to_string(&remote).unwrap(),
        "copied by kubectl\n"
    );
    let back = kube.dir.join("back.txt");
    let out = kube.run(&["cp", &target, back.to_str().unwrap()], b"");
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(
        std::fs::read_to_string(&back).unwrap(),
        "copied by kubectl\n"
    );
}

#[test]
fn kubectl_reads_only_truthful_minimal_documents() {
    let server = TestServer::start();
    let kube = Kubeconfig::new(&server.base, None, None);
    let out = kube.run(&["get", "pod", "anything", "-n", "ns1", "-o", "json"], b"");
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let pod: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(pod["metadata"]["name"], "anything");
    assert_eq!(pod["status"]["phase"], "Running");
    let out = kube.run(&["get", "deployments"], b"");
    assert_ne!(out.status.code(), Some(0), "no apps group is claimed");
    let out = kube.run(&["version", "-o", "json"], b"");
    let version: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(
        version["serverVersion"]["gitVersion"]
            .as_str()
            .unwrap()
            .ends_with("+tetherd"),
        "{version}"
    );
}

// --- the process behind an exec ----------------------------------------

#[tokio::test]
async fn an_exec_is_a_tether_process_with_its_names_retention_and_exit() {
    let server = TestServer::start();
    let query = format!(
        "{}&container=web&stdout=true&stderr=true",
        command_query(&["sh", "-c", "echo kept; exit 3"])
    );
    let client = ChannelClient::connect(
        &pod_url(&server, "prod", "web-1", "exec", &query),
        ALL_PROTOCOLS[0],
    )
    .await;
    let session = client.finish(Session::default()).await;
    assert_eq!(text(&session.stdout), "kept\n");

    let process = only_process(&server).await;
    assert_eq!(process.exit_code, Some(3));
    assert_eq!(process.reason, Some(ExitReason::Exit));
    let names = process.kubernetes.clone().expect("kubernetes names");
    assert_eq!(
        (names.namespace.as_str(), names.pod.as_str()),
        ("prod", "web-1")
    );
    assert_eq!(names.container.as_deref(), Some("web"));
    // Its output stays retained and replayable through /v1.
    let replay = server.attach(&process.id, "").await.until_exit().await;
    assert_eq!(replay.stdout, b"kept\n");
}

#[tokio::test]
async fn signals_and_deadlines_end_with_their_exit_codes_and_say_so() {
    let server = TestServer::start_with(&["--kube-exec-timeout-ms", "300"]);
    let run = |argv: &'static [&'static str]| {
        let url = pod_url(
            &server,
            "n",
            "p",
            "exec",
            &format!("{}&stdout=true", command_query(argv)),
        );
        async move {
            let client = ChannelClient::connect(&url, "v5.channel.k8s.io").await;
            client.finish(Session::default()).await.status()
        }
    };
    let killed = run(&["sh", "-c", "kill -TERM $$"]).await;
    assert_eq!(killed["reason"], "NonZeroExitCode");
    assert_eq!(killed["details"]["causes"][0]["message"], "143");
    assert!(killed["message"].as_str().unwrap().contains("signal TERM"));
    let timed_out = run(&["sleep", "30"]).await;
    assert_eq!(timed_out["status"], "Failure");
    assert_eq!(timed_out["details"]["causes"][0]["message"], "124");
    assert!(
        timed_out["message"].as_str().unwrap().contains("timed out"),
        "{timed_out}"
    );
}

#[tokio::test]
async fn an_exec_that_cannot_start_is_one_failure_status_then_close_1000() {
    let server = TestServer::start();
    let query = format!("{}&stdout=true", command_query(&["/no/such/program"]));
    let client = ChannelClient::connect(
        &pod_url(&server, "n", "p", "exec", &query),
        ALL_PROTOCOLS[0],
    )
    .await;
    let session = client.finish(Session::default()).await;
    let status = session.status();
    assert_eq!(status["status"], "Failure");
    assert!(
        status["message"].as_str().unwrap().contains("not found"),
        "{status}"
    );
    assert_eq!(session.close_code, Some(1000));
}

#[tokio::test]
async fn a_foreign_origin_is_refused_with_a_status() {
    let server = TestServer::start();
    let response = server
        .http
        .get(server.url("/api/v1/namespaces/n/pods/p/exec?command=true&stdout=1"))
        .header("Origin", "https://evil.example")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 403);
    let status: Value = response.json().await.unwrap();
    assert_eq!(status["kind"], "Status");
    assert_eq!(status["reason"], "Forbidden");
    let (_, list) = server.get("/v1/processes").await;
    assert_eq!(list, json!([]), "nothing was started");
}

#[tokio::test]
async fn attach_reports_output_dropped_before_it_as_text_never_a_silent_gap() {
    let server = TestServer::start();
    let process = server
        .sh(
            "head -c 5000 /dev/zero | tr '\\0' a; echo; echo tail",
            json!({"retain_bytes": 1024}),
        )
        .await;
    server.wait_exit(&process.id).await;
    let url = pod_url(
        &server,
        "default",
        &process.id,
        "attach",
        "stdout=true&stderr=true",
    );
    let client = ChannelClient::connect(&url, "v5.channel.k8s.io").await;
    let session = client.finish(Session::default()).await;
    assert!(text(&session.stdout).ends_with("a\ntail\n"));
    let notice = text(&session.stderr);
    assert!(
        notice.contains("bytes of stdout") && notice.contains("dropped"),
        "{notice}"
    );
    let dropped: u64 = notice
        .split("[tether: ")
        .nth(1)
        .and_then(|rest| rest.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap();
    assert_eq!(dropped + session.stdout.len() as u64, 5006);
}

#[tokio::test]
async fn attach_joins_an_existing_process_and_an_unknown_pod_is_a_404_status() {
    let server = TestServer::start();
    let process = server
        .sh(
            "echo ready; read x; echo got $x; exit 5",
            json!({"stdin": true}),
        )
        .await;
    let url = pod_url(
        &server,
        "default",
        &process.id,
        "attach",
        "stdin=true&stdout=true&stderr=true",
    );
    let mut client = ChannelClient::connect(&url, ALL_PROTOCOLS[0]).await;
    let mut session = Session::default();
    client.read_until(&mut session, "ready\n").await;
    client.send(0, b"hi\n").await;
    let session = client.finish(session).await;
    assert_eq!(text(&session.stdout), "ready\ngot hi\n");
    assert_eq!(session.status()["details"]["causes"][0]["message"], "5");

    let response = server
        .http
        .get(server.url("/api/v1/namespaces/default/pods/nope/attach?stdout=true"))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 404);
    let status: Value = response.json().await.unwrap();
    assert_eq!(status["kind"], "Status");
    assert_eq!(status["reason"], "NotFound");
    assert_eq!(status["code"], 404);
}

#[tokio::test]
async fn a_client_that_stops_reading_paces_the_program_and_loses_nothing() {
    // Retention far below the output, so that block mode must pace it.
    let server = TestServer::start_with(&["--retain-bytes", "1048576"]);
    let total: usize = 48 << 20;
    let query = format!(
        "{}&stdout=true",
        command_query(&["head", "-c", &total.to_string(), "/dev/zero"])
    );
    let mut client = ChannelClient::connect(
        &pod_url(&server, "d", "p", "exec", &query),
        ALL_PROTOCOLS[0],
    )
    .await;
    let mut session = Session::default();
    client.next(&mut session).await;
    // Not reading: retention and the socket buffers fill, and the program
    // waits on its write instead of finishing. (Drop mode would finish in
    // milliseconds; a second is a generous bound.)
    let (_, list) = server.get("/v1/processes").await;
    let id = list[0]["id"].as_str().unwrap().to_string();
    let (_, waited) = server
        .get(&format!("/v1/processes/{id}/wait?timeout_ms=1000"))
        .await;
    assert_eq!(waited["status"], "running", "{waited}");
    let session = client.finish(session).await;
    assert_eq!(session.stdout.len(), total);
    assert_eq!(
        session.status(),
        json!({"metadata": {}, "status": "Success"})
    );
}

// --- each subprotocol, with our own client -----------------------------

#[tokio::test]
async fn each_subprotocol_frames_streams_and_ends_with_one_status_then_close_1000() {
    let server = TestServer::start();
    let query = format!(
        "{}&stdout=true&stderr=true",
        command_query(&["sh", "-c", "echo out; echo err >&2; exit 3"])
    );
    for protocol in ALL_PROTOCOLS {
        let client =
            ChannelClient::connect(&pod_url(&server, "n", "p", "exec", &query), protocol).await;
        assert_eq!(client.protocol, protocol);
        let session = client.finish(Session::default()).await;
        assert_eq!(text(&session.stdout), "out\n", "{protocol}");
        assert_eq!(text(&session.stderr), "err\n", "{protocol}");
        assert_eq!(session.close_code, Some(1000), "{protocol}");
        assert_eq!(session.statuses.len(), 1, "{protocol}: {session:?}");
        if protocol == "channel.k8s.io" {
            // v1 carries a failure as text.
            assert!(text(&session.statuses[0]).contains("exit code 3"));
        } else {
            let status = session.status();
            assert_eq!(status["status"], "Failure", "{protocol}");
            assert_eq!(status["reason"], "NonZeroExitCode");
            assert_eq!(
                status["details"]["causes"],
                json!([{"reason": "ExitCode", "message": "3"}])
            );
        }
    }
}

#[tokio::test]
async fn success_is_a_success_status_except_in_v1_where_it_is_silence() {
    let server = TestServer::start();
    let query = format!("{}&stdout=true", command_query(&["true"]));
    for protocol in ALL_PROTOCOLS {
        let client =
            ChannelClient::connect(&pod_url(&server, "n", "p", "exec", &query), protocol).await;
        let session = client.finish(Session::default()).await;
        assert_eq!(session.close_code, Some(1000), "{protocol}");
        if protocol == "channel.k8s.io" {
            assert!(session.statuses.is_empty(), "{session:?}");
        } else {
            assert_eq!(
                session.status(),
                json!({"metadata": {}, "status": "Success"}),
                "{protocol}"
            );
        }
    }
}

#[tokio::test]
async fn the_best_offered_subprotocol_wins_and_none_is_refused() {
    let server = TestServer::start();
    let query = format!("{}&stdout=true", command_query(&["true"]));
    let url = pod_url(&server, "n", "p", "exec", &query);
    let client = ChannelClient::connect(&url, "channel.k8s.io, v4.channel.k8s.io").await;
    assert_eq!(client.protocol, "v4.channel.k8s.io");
    client.finish(Session::default()).await;

    let response = server
        .http
        .get(server.url(&format!("/api/v1/namespaces/n/pods/p/exec?{query}")))
        .header("Connection", "Upgrade")
        .header("Upgrade", "websocket")
        .header("Sec-WebSocket-Version", "13")
        .header("Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ==")
        .header("Sec-WebSocket-Protocol", "tether.v1")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 400);
    let status: Value = response.json().await.unwrap();
    assert!(
        status["message"]
            .as_str()
            .unwrap()
            .contains("v5.channel.k8s.io"),
        "{status}"
    );
}

#[tokio::test]
async fn v5_closes_stdin_with_channel_255_and_base64_carries_stdin() {
    let server = TestServer::start();
    let query = format!("{}&stdin=true&stdout=true", command_query(&["cat"]));
    let url = pod_url(&server, "n", "p", "exec", &query);
    let mut client = ChannelClient::connect(&url, "v5.channel.k8s.io").await;
    client.send(0, b"through v5").await;
    client.close_stdin().await;
    let session = client.finish(Session::default()).await;
    assert_eq!(text(&session.stdout), "through v5");

    // v4 has no way to end stdin; the program ends it itself.
    let query = format!(
        "{}&stdin=true&stdout=true",
        command_query(&["head", "-c", "11"])
    );
    let url = pod_url(&server, "n", "p", "exec", &query);
    let mut client = ChannelClient::connect(&url, "v4.base64.channel.k8s.io").await;
    client.send(0, b"\x00\xffbase64 in").await;
    let session = client.finish(Session::default()).await;
    assert_eq!(session.stdout, b"\x00\xffbase64 in");
}

#[tokio::test]
async fn a_tty_exec_takes_resizes_on_channel_4_and_bad_ones_end_it_clearly() {
    let server = TestServer::start();
    let query = format!(
        "{}&stdin=true&stdout=true&tty=true",
        command_query(&["sh", "-c", "read a; stty size"])
    );
    let url = pod_url(&server, "n", "p", "exec", &query);
    let mut client = ChannelClient::connect(&url, "v5.channel.k8s.io").await;
    client.send(4, br#"{"Width":77,"Height":22}"#).await;
    client.send(0, b"go\r").await;
    let session = client.finish(Session::default()).await;
    assert!(text(&session.stdout).contains("22 77"), "{session:?}");

    let query = format!(
        "{}&stdin=true&stdout=true&tty=true",
        command_query(&["cat"])
    );
    let url = pod_url(&server, "n", "p", "exec", &query);
    let mut client = ChannelClient::connect(&url, "v5.channel.k8s.io").await;
    client.send(4, b"{\"Width\": \"wide\"}").await;
    let session = client.finish(Session::default()).await;
    let status = session.status();
    assert_eq!(status["status"], "Failure");
    assert!(
        status["message"].as_str().unwrap().contains("resize"),
        "{status}"
    );
    assert_eq!(session.close_code, Some(1007));
}

// --- the Python client -------------------------------------------------

#[test]
fn python_client_exec_with_separate_streams_stdin_and_return_code() {
    let server = TestServer::start();
    let seen = support::python_client(&server.base, "pipes", None);
    assert_eq!(seen["subprotocol"], "v5.channel.k8s.io", "{seen}");
    assert_eq!(seen["stdout"], "out\nhello from python\n", "{seen}");
    assert_eq!(seen["stderr"], "err\n", "{seen}");
    assert_eq!(seen["returncode"], 3, "{seen}");
}

#[test]
fn python_client_tty_session_is_resized_through_channel_4() {
    let server = TestServer::start();
    let seen = support::python_client(&server.base, "tty", None);
    assert!(seen["first"].as_str().unwrap().contains("30 100"), "{seen}");
    assert!(
        seen["second"].as_str().unwrap().contains("40 120"),
        "{seen}"
    );
    assert_eq!(seen["returncode"], 0, "{seen}");
}
