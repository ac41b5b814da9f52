//! The real `kubectl`: exec, attach, cp, and what it reads first.

use super::*;

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
    let tmux = Tmux::start_command("kubectl-it", &line);
    tmux.until("the prompt", |p| p.contains("prompt>"));

    tmux.type_line("stty size");
    tmux.until("the window's size", |p| {
        p.lines().any(|l| l.trim() == "30 100")
    });

    tmux.cmd(&["resize-window", "-t", "main", "-x", "120", "-y", "40"]);
    // kubectl sends the new size when SIGWINCH reaches it; a command typed
    // at once may overtake it, so type again until it shows (bounded).
    let followed = tether_tests::settle_blocking(
        tether_tests::WAIT,
        || {
            tmux.type_line("clear; stty size");
            tmux.shows_within(Duration::from_secs(2), |p| {
                p.lines().any(|l| l.trim() == "40 120")
            })
        },
        |shown| *shown,
    );
    assert!(followed, "size never followed:\n{}", tmux.pane());

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

/// A handover (issue 43) closes kubectl's exec stream with 1012, which
/// kubectl's protocol cannot resume: kubectl ends with an error, the
/// process it started runs on, and `kubectl exec` again reaches the new
/// binary.
#[test]
fn kubectl_exec_ends_with_an_error_at_a_handover_and_its_process_runs_on() {
    use std::io::{BufRead, BufReader};
    use tether_tests::cli::{block_on, wait_output};
    let server = TestServer::start();
    let kube = Kubeconfig::new(&server.base, None, None);
    let mut child = kube
        .kubectl(&[
            "exec",
            "p",
            "--",
            "sh",
            "-c",
            "echo started; exec sleep 600",
        ])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("kubectl");
    let mut stdout = BufReader::new(child.stdout.take().expect("stdout"));
    let mut line = String::new();
    stdout.read_line(&mut line).expect("a line");
    assert_eq!(line, "started\n");
    let (status, answer) = block_on(server.post("/v1/admin/upgrade", serde_json::json!({})));
    assert_eq!(status, 202, "{answer}");
    let out = wait_output(child);
    assert_ne!(
        out.status.code(),
        Some(0),
        "kubectl cannot resume: {}",
        text(&out.stderr)
    );
    // What its user reads: "websocket: close 1012: restarting".
    assert!(
        text(&out.stderr).contains("close 1012: restarting"),
        "{}",
        text(&out.stderr)
    );
    let listed = block_on(server.get("/v1/processes")).1;
    let sleeping = listed
        .as_array()
        .map(|all| all.iter().filter(|p| p["status"] == "running").count());
    assert_eq!(sleeping, Some(1), "{listed}");
    let again = kube.run(&["exec", "p", "--", "echo", "again"], b"");
    assert_eq!(text(&again.stdout), "again\n", "{}", text(&again.stderr));
}
