//! Retention on disk: whole logs kept with bounded memory. A stream keeps
//! its retention in a ring file under `--data-dir` and only its newest
//! bytes in memory; a full disk costs exact `dropped` ranges and a
//! `retention_error`, never the exit; a restarted server lists the
//! processes of the previous run and serves their output.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::json;
use tether_protocol::{ExitReason, StreamName};
use tether_tests::{fresh_dir, kill_session, settle, Received, TestServer};

const MIB: u64 = 1 << 20;

/// The bytes `yes LINE | head -c LEN` prints.
fn yes_output(line: &str, len: usize) -> Vec<u8> {
    let line = format!("{line}\n");
    line.bytes().cycle().take(len).collect()
}

/// GET the raw output of a stream from offset 0 (the process has exited).
async fn raw_output(server: &TestServer, id: &str, stream: &str) -> Vec<u8> {
    let response = server
        .http
        .get(server.url(&format!("/v1/processes/{id}/output?stream={stream}")))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    response.bytes().await.unwrap().to_vec()
}

fn peak_rss(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|kb| kb.parse::<u64>().ok())
        .unwrap()
        * 1024
}

#[tokio::test]
async fn four_mib_read_after_the_exit_arrives_whole_then_the_exit_with_default_settings() {
    let server = TestServer::start();
    let process = server
        .sh(
            "head -c 4194304 /dev/urandom | od -An -v | head -c 4194304",
            json!({}),
        )
        .await;
    let exited = server.wait_exit(&process.id).await;
    assert_eq!(exited.stdout_bytes, 4 * MIB);
    assert_eq!(exited.retention_error, None);
    // Read well after the exit, by nobody who was attached: every byte.
    let mut attachment = server.attach(&process.id, "").await;
    let received = attachment.until_exit().await;
    assert!(received.dropped.is_empty(), "{:?}", received.dropped);
    assert_eq!(received.stdout.len() as u64, 4 * MIB);
    assert_eq!(received.exit.unwrap(), exited);
    // The same bytes over plain HTTP.
    assert_eq!(
        raw_output(&server, &process.id, "stdout").await,
        received.stdout
    );
}

/// 1000 processes of 16 MiB each would need 16 GB of disk and many minutes
/// of the two shared cores CI has; 100 of 2 MiB per stream (400 MiB) keep
/// the point in about a minute: memory stays at the windows plus a fixed
/// overhead while the disk holds every byte.
/// The log files in the private data directory the server made in `tmp`.
fn private_logs(tmp: &Path) -> Vec<String> {
    let mut names = Vec::new();
    for dir in std::fs::read_dir(tmp).unwrap().flatten() {
        for file in std::fs::read_dir(dir.path())
            .into_iter()
            .flatten()
            .flatten()
        {
            let name = file.file_name().to_string_lossy().into_owned();
            // The directory's lock file is not a log.
            if name != "tetherd.lock" {
                names.push(name);
            }
        }
    }
    names
}

#[tokio::test]
async fn output_that_fits_its_window_never_costs_a_file_and_output_past_it_is_kept_whole() {
    let tmp = fresh_dir();
    std::fs::create_dir_all(&tmp).unwrap();
    let tmp_arg = tmp.to_str().unwrap().to_string();
    let server = TestServer::start_private(
        &["--retain-memory-bytes", "65536"],
        &[("TMPDIR", tmp_arg.as_str())],
    );
    let small = server.sh("yes small | head -c 65536", json!({})).await;
    let exited = server.wait_exit(&small.id).await;
    assert_eq!(exited.stdout_bytes, 65536);
    assert_eq!(private_logs(&tmp), Vec::<String>::new());
    assert_eq!(
        raw_output(&server, &small.id, "stdout").await,
        yes_output("small", 65536)
    );

    let large = server.sh("yes large | head -c 1048576", json!({})).await;
    server.wait_exit(&large.id).await;
    assert_eq!(private_logs(&tmp), vec![format!("{}.stdout", large.id)]);
    let mut attachment = server.attach(&large.id, "").await;
    let received = attachment.until_exit().await;
    assert!(received.dropped.is_empty(), "{:?}", received.dropped);
    assert!(received.stdout == yes_output("large", 1 << 20));
    drop((attachment, server));
    let _ = std::fs::remove_dir_all(&tmp);
}

#[tokio::test]
async fn many_processes_keep_whole_logs_on_disk_while_memory_stays_at_the_windows() {
    const PROCESSES: usize = 100;
    const EACH: usize = 2 << 20;
    const WINDOW: u64 = 64 << 10;
    let server = TestServer::start_with(&["--retain-memory-bytes", "65536"]);
    let mut ids = Vec::new();
    for batch in 0..PROCESSES / 25 {
        let mut started = Vec::new();
        for i in batch * 25..(batch + 1) * 25 {
            let command = format!("yes out-{i} | head -c {EACH}; yes err-{i} | head -c {EACH} >&2");
            started.push(server.sh(&command, json!({})).await.id);
        }
        for id in &started {
            let exited = server.wait_exit(id).await;
            assert_eq!(exited.stdout_bytes, EACH as u64);
            assert_eq!(exited.retention_error, None);
        }
        ids.extend(started);
    }
    for (i, id) in ids.iter().enumerate() {
        let stdout = raw_output(&server, id, "stdout").await;
        assert!(
            stdout == yes_output(&format!("out-{i}"), EACH),
            "stdout of {i}"
        );
        let stderr = raw_output(&server, id, "stderr").await;
        assert!(
            stderr == yes_output(&format!("err-{i}"), EACH),
            "stderr of {i}"
        );
    }
    // In memory the 100 processes would hold 400 MiB of output; the
    // server's peak is the windows (100 x 2 x 64 KiB) plus a fixed overhead.
    let windows = PROCESSES as u64 * 2 * WINDOW;
    let peak = peak_rss(server.pid());
    assert!(
        peak < windows + 96 * MIB,
        "peak RSS {} MiB for {} MiB of windows",
        peak / MIB,
        windows / MIB
    );
}

/// A 2 MiB tmpfs mounted for one test, unmounted on drop.
struct SmallDisk(PathBuf);

impl SmallDisk {
    fn mount() -> SmallDisk {
        let path = fresh_dir();
        std::fs::create_dir(&path).unwrap();
        let status = Command::new("mount")
            .args(["-t", "tmpfs", "-o", "size=2m,mode=0700", "tmpfs"])
            .arg(&path)
            .status()
            .unwrap();
        assert!(
            status.success(),
            "mounting a tmpfs needs root (tests run as root)"
        );
        SmallDisk(path)
    }

    fn used(&self) -> u64 {
        let out = Command::new("df")
            .args(["--output=used", "-B1"])
            .arg(&self.0)
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .nth(1)
            .and_then(|l| l.trim().parse().ok())
            .unwrap()
    }

    fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
        let _ = std::fs::remove_dir(&self.0);
    }
}

#[tokio::test]
async fn a_full_disk_costs_exact_dropped_ranges_and_a_retention_error_never_the_exit() {
    let disk = SmallDisk::mount();
    let dir = disk.path().to_str().unwrap().to_string();
    let mut server =
        TestServer::start_with(&["--data-dir", &dir, "--retain-memory-bytes", "65536"]);
    let process = server
        .sh(
            "yes 0123456789abcdef | head -c 4194304; echo done",
            json!({}),
        )
        .await;
    let exited = server.wait_exit(&process.id).await;
    assert_eq!(
        (exited.reason, exited.exit_code),
        (Some(ExitReason::Exit), Some(0))
    );
    assert_eq!(exited.stdout_bytes, 4 * MIB + 5);
    assert_eq!(exited.retention_error.as_deref(), Some("disk full"));

    let expected = [yes_output("0123456789abcdef", 4 << 20), b"done\n".to_vec()].concat();
    let mut attachment = server.attach(&process.id, "").await;
    let received = attachment.until_exit().await;
    // What reached the disk, then one exact gap, then the memory window.
    assert_eq!(received.dropped.len(), 1, "{:?}", received.dropped);
    let (stream, gap, length) = received.dropped[0];
    assert_eq!(stream, StreamName::Stdout);
    assert!(gap > 0 && gap < 2 * MIB, "disk part {gap}");
    assert_eq!(gap + length, exited.stdout_bytes - 65536);
    assert_eq!(received.stdout[..gap as usize], expected[..gap as usize]);
    assert_eq!(
        received.stdout[gap as usize..],
        expected[(gap + length) as usize..]
    );
    // And a reader from inside the disk part still reads it.
    let mut late = server.attach(&process.id, "stdout=100").await;
    let again = late.until_exit().await;
    assert_eq!(again.stdout[..100], expected[100..200]);

    // Forgetting the process frees its files; then a new one retains to
    // disk again: a late reader gets all of 1 MiB with a 64 KiB window.
    let deleted = server
        .http
        .delete(server.url(&format!("/v1/processes/{}", process.id)))
        .send()
        .await
        .unwrap();
    assert_eq!(deleted.status(), 200);
    drop((attachment, late));
    let used = settle(|| disk.used(), |used| *used < 512 << 10).await;
    assert!(
        used < 512 << 10,
        "files of the forgotten process still use {used} bytes"
    );
    let next = server.sh("yes again | head -c 1048576", json!({})).await;
    let exited = server.wait_exit(&next.id).await;
    assert_eq!(exited.retention_error, None);
    let mut attachment = server.attach(&next.id, "").await;
    let received = attachment.until_exit().await;
    assert!(received.dropped.is_empty());
    assert_eq!(received.stdout, yes_output("again", 1 << 20));
    assert_eq!(server.terminate().await, Some(0));
}

#[tokio::test]
async fn a_server_killed_and_restarted_on_its_data_dir_lists_the_old_processes_with_their_output() {
    let dir = fresh_dir();
    let dir_arg = dir.to_str().unwrap().to_string();
    let args = ["--data-dir", dir_arg.as_str()];
    let server = TestServer::start_with(&args);
    let finished = server.sh("echo finished; exit 7", json!({})).await;
    server.wait_exit(&finished.id).await;
    let running = server
        .sh(
            "yes logged | head -c 2097152; echo END; sleep 600",
            json!({}),
        )
        .await;
    let mut attachment = server.attach(&running.id, "").await;
    let mut received = Received::default();
    attachment
        .until_stdout_contains("END\n", &mut received)
        .await;
    drop(attachment);

    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(server.pid() as i32),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    drop(server);
    // The orphaned program is not the new server's to touch; clean it up.
    kill_session(running.pid);

    let server = TestServer::start_with(&args);
    let (code, list) = server.get("/v1/processes").await;
    assert_eq!(code, 200);
    assert_eq!(list.as_array().unwrap().len(), 2, "{list}");
    let lost = server.status(&running.id).await;
    assert!(lost.is_exited());
    assert_eq!(lost.reason, Some(ExitReason::Lost));
    assert_eq!(lost.exit_code, None);
    let expected = [yes_output("logged", 2 << 20), b"END\n".to_vec()].concat();
    assert_eq!(lost.stdout_bytes, expected.len() as u64);
    assert!(raw_output(&server, &running.id, "stdout").await == expected);
    let mut attachment = server.attach(&running.id, "").await;
    let received = attachment.until_exit().await;
    assert!(received.stdout == expected && received.dropped.is_empty());
    assert_eq!(received.exit.unwrap().reason, Some(ExitReason::Lost));

    let earlier = server.status(&finished.id).await;
    assert_eq!(
        (earlier.reason, earlier.exit_code),
        (Some(ExitReason::Exit), Some(7))
    );
    assert_eq!(
        raw_output(&server, &finished.id, "stdout").await,
        b"finished\n"
    );
    // A lost process is not signalled: its pid may be someone else's now.
    let (code, _) = server
        .post(
            &format!("/v1/processes/{}/signal", running.id),
            json!({"signal": "TERM"}),
        )
        .await;
    assert_eq!(code, 409);
    drop(server);
    let _ = std::fs::remove_dir_all(&dir);
}
