//! Storage a server can trust: a data directory is owned by a lock (not a
//! pid), is private and follows no link; nothing read back from it is
//! trusted; recovery stays inside the descriptor budget.

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::json;
use tether_tests::{fresh_dir, settle_blocking, tetherd_binary, TestServer};

const MIB: u64 = 1 << 20;

/// GET the raw output of a stream from offset 0 (the process has exited).
async fn raw_output(server: &TestServer, id: &str, stream: &str) -> Vec<u8> {
    let response = server
        .http
        .get(server.url(&format!("/v1/processes/{id}/output?stream={stream}")))
        .timeout(Duration::from_secs(30))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    response.bytes().await.unwrap().to_vec()
}

fn kill9(server: &TestServer) {
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(server.pid() as i32),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
}

/// A directory removed on drop.
struct Scratch(PathBuf);
impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
impl Scratch {
    fn new() -> Scratch {
        let path = fresh_dir();
        std::fs::create_dir_all(&path).unwrap();
        Scratch(path)
    }
    fn arg(&self) -> &str {
        self.0.to_str().unwrap()
    }
}

/// Runs tetherd expecting it to refuse to start; its stderr.
fn refused_start(args: &[&str]) -> String {
    let mut child = Command::new(tetherd_binary())
        .args(["--listen", "127.0.0.1:0", "--no-token"])
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let exited = settle_blocking(
        Duration::from_secs(30),
        || child.try_wait().unwrap(),
        Option::is_some,
    );
    let Some(status) = exited else {
        let _ = child.kill();
        panic!("tetherd {args:?} did not refuse to start");
    };
    assert!(!status.success());
    let mut stderr = String::new();
    use std::io::Read;
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut stderr)
        .unwrap();
    stderr
}

#[tokio::test]
async fn a_server_in_another_pid_namespace_sharing_tmp_never_removes_a_live_servers_logs() {
    let tmp = Scratch::new();
    let env = [("TMPDIR", tmp.arg())];
    let first = TestServer::start_private(&["--retain-memory-bytes", "65536"], &env);
    // In its own pid namespace, the first server's pid does not exist.
    let second = TestServer::start_private_wrapped(
        &["unshare", "--pid", "--fork", "--mount-proc", "--kill-child"],
        &[],
        &env,
    );
    // Its start-up cleanup has run once it answers.
    let (code, _) = second.get("/healthz").await;
    assert_eq!(code, 200);
    let process = first
        .sh("yes 0123456789abcdef | head -c 4194304", json!({}))
        .await;
    let exited = first.wait_exit(&process.id).await;
    assert_eq!(exited.retention_error, None);
    let output = raw_output(&first, &process.id, "stdout").await;
    assert_eq!(output.len() as u64, 4 * MIB);
    assert!(output
        .chunks(17)
        .all(|line| line == &b"0123456789abcdef\n"[..line.len()]));
    drop(second);
    drop(first);
}

#[tokio::test]
async fn a_data_dir_in_use_or_writable_by_others_is_refused_with_the_reason() {
    let dir = Scratch::new();
    std::fs::set_permissions(&dir.0, std::os::unix::fs::PermissionsExt::from_mode(0o700)).unwrap();
    let server = TestServer::start_with(&["--data-dir", dir.arg()]);
    let stderr = refused_start(&["--data-dir", dir.arg()]);
    assert!(stderr.contains("in use by another tetherd"), "{stderr}");
    assert!(stderr.contains("pid "), "names the holder: {stderr}");
    // The first one is untouched.
    let process = server.sh("echo still here", json!({})).await;
    server.wait_exit(&process.id).await;
    assert_eq!(
        raw_output(&server, &process.id, "stdout").await,
        b"still here\n"
    );
    drop(server);

    let open = Scratch::new();
    std::fs::set_permissions(&open.0, std::os::unix::fs::PermissionsExt::from_mode(0o777)).unwrap();
    let stderr = refused_start(&["--data-dir", open.arg()]);
    assert!(stderr.contains("writable by group or others"), "{stderr}");
    assert!(
        stderr.contains("chmod go-w"),
        "says how to fix it: {stderr}"
    );
}

/// FNV-1a, as the log header's checksum: a crafted header that passes it
/// must still be refused on its values.
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |hash, &b| {
        (hash ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

fn crafted_header(capacity: u64, start: u64, end: u64) -> Vec<u8> {
    let mut header = b"TTHRLOG2".to_vec();
    for word in [capacity, start, end] {
        header.extend_from_slice(&word.to_le_bytes());
    }
    let sum = fnv1a(&header);
    header.extend_from_slice(&sum.to_le_bytes());
    header
}

#[tokio::test]
async fn garbage_in_every_file_of_a_killed_server_never_stops_the_restarted_one_answering() {
    let dir = Scratch::new();
    std::fs::set_permissions(&dir.0, std::os::unix::fs::PermissionsExt::from_mode(0o700)).unwrap();
    let args = ["--data-dir", dir.arg(), "--retain-memory-bytes", "65536"];
    let server = TestServer::start_with(&args);
    let mut ids = Vec::new();
    for i in 0..6 {
        let process = server
            .sh(
                &format!("yes line-{i} | head -c 300000; yes err | head -c 1000 >&2"),
                json!({}),
            )
            .await;
        server.wait_exit(&process.id).await;
        ids.push(process.id);
    }
    kill9(&server);
    drop(server);

    // Half the processes: every log garbage (one a crafted header claiming
    // 2^62 bytes in an 11-byte file), records intact. The other half:
    // records garbage.
    for (i, id) in ids.iter().enumerate() {
        for stream in ["stdout", "stderr"] {
            let path = dir.0.join(format!("{id}.{stream}"));
            if i < 3 {
                let garbage = if i == 0 && stream == "stdout" {
                    [crafted_header(1 << 62, 0, 1 << 62), b"hello world".to_vec()].concat()
                } else {
                    let len = std::fs::metadata(&path).unwrap().len() as usize;
                    (0..len).map(|n| (n * 7 + 3) as u8).collect()
                };
                std::fs::write(&path, garbage).unwrap();
            }
        }
        if i >= 3 {
            std::fs::write(dir.0.join(format!("{id}.json")), b"\x00garbage{\"id\":").unwrap();
        }
    }

    let log = dir.0.with_extension("stderr");
    let mut server = TestServer::start_exact(
        &[
            "--no-token",
            "--data-dir",
            dir.arg(),
            "--shutdown-timeout-ms",
            "3000",
        ],
        &[("RUST_LOG", "info")],
        Some(&log),
    );
    let (code, list) = server.get("/v1/processes").await;
    assert_eq!(code, 200);
    assert_eq!(
        list.as_array().unwrap().len(),
        3,
        "garbage records are not processes: {list}"
    );
    // /healthz answers while every corrupt log is read, over and over.
    let readers: Vec<_> = ids[..3]
        .iter()
        .flat_map(|id| ["stdout", "stderr"].map(|s| (id.clone(), s)))
        .map(|(id, stream)| {
            let url = server.url(&format!("/v1/processes/{id}/output?stream={stream}"));
            let http = server.http.clone();
            tokio::spawn(async move {
                for _ in 0..5 {
                    let response = http.get(&url).timeout(Duration::from_secs(30)).send().await;
                    let response = response.expect("a corrupt log's output answers");
                    assert_eq!(response.status(), 200);
                    response.bytes().await.expect("and ends");
                }
            })
        })
        .collect();
    for _ in 0..20 {
        let started = Instant::now();
        let (code, _) = server.get("/healthz").await;
        assert_eq!(code, 200);
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "healthz took {:?}",
            started.elapsed()
        );
    }
    for reader in readers {
        reader.await.unwrap();
    }
    for id in &ids[..3] {
        let info = server.status(id).await;
        let error = info.retention_error.unwrap_or_default();
        assert!(error.starts_with("log corrupt"), "{id}: {error:?}");
        // Its bytes are reported, as dropped: nothing served as data.
        let mut attachment = server.attach(id, "").await;
        let received = attachment.until_exit().await;
        assert!(received.stdout.is_empty());
        assert_eq!(
            received.dropped.iter().map(|d| d.2).sum::<u64>(),
            300_000 + 1000
        );
    }
    let started = Instant::now();
    server.terminate().await;
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "SIGTERM took {:?}",
        started.elapsed()
    );
    let size = std::fs::metadata(&log).unwrap().len();
    assert!(size < 64 << 10, "the server's log grew to {size} bytes");
    let _ = std::fs::remove_file(&log);
}

#[tokio::test]
async fn three_hundred_logs_survive_a_restart_under_a_256_descriptor_limit() {
    const PROCESSES: usize = 300;
    let dir = Scratch::new();
    std::fs::set_permissions(&dir.0, std::os::unix::fs::PermissionsExt::from_mode(0o700)).unwrap();
    let args = ["--data-dir", dir.arg()];
    let expected = |i: usize| format!("process {i} says hello\n").repeat(i % 7 + 1);
    let mut server = TestServer::start_with(&args);
    let mut ids = Vec::new();
    for i in 0..PROCESSES {
        let command = format!("printf '%s' '{}'", expected(i));
        ids.push(server.sh(&command, json!({})).await.id);
    }
    for id in &ids {
        server.wait_exit(id).await;
    }
    server.terminate().await;
    drop(server);

    let check = |server: &TestServer| {
        let server_ids = ids.clone();
        let base = server.base.clone();
        let http = server.http.clone();
        async move {
            for (i, id) in server_ids.iter().enumerate() {
                let url = format!("{base}/v1/processes/{id}/output?stream=stdout");
                let response = http.get(&url).send().await.unwrap();
                assert_eq!(response.status(), 200, "{i}");
                let bytes = response.bytes().await.unwrap();
                assert_eq!(bytes, expected(i).as_bytes(), "process {i}");
            }
        }
    };
    let mut limited = TestServer::start_with_fd_limit(&args, 256, 256);
    let (code, list) = limited.get("/v1/processes").await;
    assert_eq!(code, 200);
    assert_eq!(list.as_array().unwrap().len(), PROCESSES);
    let fds = tether_tests::fd_count(limited.pid());
    assert!(
        fds < 64,
        "recovered logs hold no descriptors at rest: {fds} open"
    );
    check(&limited).await;
    let (code, _) = limited.get("/healthz").await;
    assert_eq!(code, 200);
    limited.terminate().await;
    drop(limited);

    let server = TestServer::start_with(&args);
    check(&server).await;
}
