//! Containment: every descendant of a process, however it detached
//! (`setsid`, a double fork, a fork loop), ends with it at its deadline, on
//! DELETE and when the server dies; no signal reaches a stranger that reused
//! a number; as PID 1 the server reaps orphans without stealing its own
//! children's statuses.
//!
//! Processes are found by a unique `sleep` duration in their argv
//! (`sleep 300.<nonce>`), so concurrent tests never see each other's.

#![allow(clippy::unwrap_used)]

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use serde_json::json;
use tether_protocol::{Containment, ExitReason};
use tether_tests::{proc_stats, settle, settle_within, TestServer, WAIT};

/// The cgroup containments the project's machines offer (v2 and the v1
/// freezer are both mounted; CI runs as root).
const CGROUP_MODES: [(&str, Containment); 2] = [
    ("cgroup2", Containment::Cgroup2),
    ("cgroup1-freezer", Containment::Cgroup1Freezer),
];

/// A `sleep` argument no other process has: 300.<pid><counter>.
fn mark() -> String {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    format!(
        "300.{}{:04}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    )
}

/// Pids of live (not zombie) processes whose argv is `sleep MARK`.
fn alive(mark: &str) -> Vec<i32> {
    let wanted = format!("sleep\0{mark}\0");
    proc_stats()
        .into_iter()
        .filter(|s| s.state != 'Z')
        .filter(|s| {
            std::fs::read(format!("/proc/{}/cmdline", s.pid)).is_ok_and(|c| c == wanted.as_bytes())
        })
        .map(|s| s.pid)
        .collect()
}

/// Waits (bounded) until each mark has a live process.
async fn wait_alive(marks: &[String]) {
    let missing = settle(
        || {
            marks
                .iter()
                .filter(|m| alive(m).is_empty())
                .cloned()
                .collect::<Vec<_>>()
        },
        |missing| missing.is_empty(),
    )
    .await;
    assert!(missing.is_empty(), "never started: {missing:?}");
}

/// Waits at most `bound` until no mark has a live process; returns the
/// survivors.
async fn survivors(marks: &[String], bound: Duration) -> Vec<(String, Vec<i32>)> {
    settle_within(
        bound,
        || {
            marks
                .iter()
                .map(|m| (m.clone(), alive(m)))
                .filter(|(_, pids)| !pids.is_empty())
                .collect::<Vec<(String, Vec<i32>)>>()
        },
        |left| left.is_empty(),
    )
    .await
}

/// Kills leftovers of a failed test, so they do not outlive the run.
fn cleanup(marks: &[String]) {
    for mark in marks {
        for pid in alive(mark) {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
    }
}

async fn assert_all_gone(marks: &[String], bound: Duration, what: &str) {
    let left = survivors(marks, bound).await;
    cleanup(marks);
    assert!(left.is_empty(), "{what}: survivors {left:?}");
}

/// A shell that leaves a `setsid` escapee and a double-forked one, both
/// ignoring TERM and HUP (so only the KILL round ends them), then waits as
/// a TERM-ignoring leader. Returns the command and the three marks.
fn escapees() -> (String, Vec<String>) {
    let [setsid, double, leader] = [mark(), mark(), mark()];
    let command = format!(
        "trap '' TERM HUP; \
         setsid sleep {setsid} & \
         (sleep {double} &) ; \
         exec sleep {leader}"
    );
    (command, vec![setsid, double, leader])
}

fn start(mode: &str) -> TestServer {
    TestServer::start_with(&["--containment", mode, "--kill-grace-ms", "300"])
}

// --- Escapees end with their process ------------------------------------

#[tokio::test]
async fn the_process_object_says_how_it_is_contained() {
    for (mode, expected) in CGROUP_MODES
        .into_iter()
        .chain([("session", Containment::Session)])
    {
        let server = start(mode);
        let info = server.sh("exit 0", json!({})).await;
        assert_eq!(info.containment, Some(expected), "{mode}");
        let exited = server.wait_exit(&info.id).await;
        assert_eq!(exited.containment, Some(expected), "{mode}");
    }
    // auto picks cgroup v2 where it is writable, as here.
    let server = TestServer::start();
    let info = server.sh("exit 0", json!({})).await;
    assert_eq!(info.containment, Some(Containment::Cgroup2));
}

/// Each line of `/proc/self/cgroup` as a program with `limits` sees it at
/// its first instruction, by controller list (`""` for v2).
async fn own_cgroups(
    server: &TestServer,
    limits: serde_json::Value,
) -> (String, Vec<(String, String)>) {
    let (status, answer): (u16, serde_json::Value) = server
        .post(
            "/v1/exec",
            json!({"argv": ["cat", "/proc/self/cgroup"], "limits": limits}),
        )
        .await;
    assert_eq!(status, 200, "{answer}");
    let id = answer["id"].as_str().unwrap().to_string();
    let text = answer["stdout"]["data"].as_str().unwrap();
    let lines = text
        .lines()
        .filter_map(|line| {
            let mut parts = line.splitn(3, ':');
            let _rank = parts.next()?;
            Some((parts.next()?.to_string(), parts.next()?.to_string()))
        })
        .collect();
    (id, lines)
}

#[tokio::test]
async fn a_program_is_in_its_own_cgroups_from_its_first_instruction() {
    // The server's own: which controllers are v1 hierarchies (a hybrid
    // host, as the project's machines are) and which share one.
    let hierarchies = std::fs::read_to_string("/proc/self/cgroup").unwrap();
    let v1_list = |controller: &str| {
        hierarchies.lines().find_map(|line| {
            let list = line.split(':').nth(1)?;
            list.split(',')
                .any(|c| c == controller)
                .then(|| list.to_string())
        })
    };
    for (mode, kind) in CGROUP_MODES {
        let server = start(mode);
        for cpu_limit in [false, true] {
            let limits = if cpu_limit {
                json!({"cpus": 1.0})
            } else {
                json!({})
            };
            let (id, lines) = own_cgroups(&server, limits).await;
            let path_of = |controller: &str| {
                lines
                    .iter()
                    .find(|(list, _)| list.split(',').any(|c| c == controller))
                    .map(|(_, path)| path.clone())
                    .unwrap_or_default()
            };
            // The containment cell: the v2 cgroup, or the v1 freezer.
            let cell = match kind {
                Containment::Cgroup2 => path_of(""),
                _ => path_of("freezer"),
            };
            assert!(
                cell.ends_with(&id),
                "{mode}: contained in {cell:?}, not {id}'s cell"
            );
            // The v1 hierarchies it is joined to before it execs: memory,
            // cpu and pids, limit or not; cpuacct only where the cell is
            // not a v2 cgroup (whose cpu.stat has the CPU time). A
            // hierarchy several share is joined for any.
            let wanted = |controller: &str| controller != "cpuacct" || kind != Containment::Cgroup2;
            for controller in ["memory", "pids", "cpu", "cpuacct"] {
                let Some(list) = v1_list(controller) else {
                    continue;
                };
                let joined = path_of(controller).ends_with(&id);
                let expected = list.split(',').any(wanted);
                assert_eq!(
                    joined,
                    expected,
                    "{mode}, CPU limit {cpu_limit}: {controller} ({list}) at {:?}",
                    path_of(controller)
                );
            }
        }
    }
}

/// tetherd in a mount namespace of its own where `unmount` is unmounted.
fn start_without(unmount: &[&str]) -> TestServer {
    let script = format!("umount {} && exec \"$0\" \"$@\"", unmount.join(" "));
    TestServer::start_wrapped(
        &[
            "unshare",
            "--mount",
            "--propagation",
            "private",
            "sh",
            "-c",
            &script,
        ],
        &[],
        &[],
    )
}

#[tokio::test]
async fn auto_falls_back_to_the_v1_freezer_then_to_the_session() {
    let server = start_without(&["/sys/fs/cgroup/unified"]);
    let info = server.sh("exit 0", json!({})).await;
    assert_eq!(info.containment, Some(Containment::Cgroup1Freezer));
    let server = start_without(&["/sys/fs/cgroup/unified", "/sys/fs/cgroup/freezer"]);
    let info = server.sh("exit 0", json!({})).await;
    assert_eq!(info.containment, Some(Containment::Session));
    // A containment that was asked for and is not there is refused.
    let status = std::process::Command::new("unshare")
        .args(["--mount", "--propagation", "private", "sh", "-c"])
        .arg("umount /sys/fs/cgroup/unified && exec \"$0\" --listen 127.0.0.1:0 --no-token --containment cgroup2")
        .arg(tether_tests::binary("tetherd"))
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .unwrap();
    assert!(
        !status.success(),
        "started without the cgroup2 it was told to use"
    );
}

#[tokio::test]
async fn setsid_and_double_fork_escapees_are_gone_after_a_deadline() {
    for (mode, _) in CGROUP_MODES {
        let server = start(mode);
        let (command, marks) = escapees();
        let info = server.sh(&command, json!({ "timeout_ms": 1000 })).await;
        wait_alive(&marks).await;
        let exited = server.wait_exit(&info.id).await;
        assert_eq!(exited.reason, Some(ExitReason::Timeout), "{mode}");
        assert_all_gone(&marks, Duration::from_secs(5), mode).await;
    }
}

#[tokio::test]
async fn setsid_and_double_fork_escapees_are_gone_after_delete() {
    for (mode, _) in CGROUP_MODES {
        let server = start(mode);
        let (command, marks) = escapees();
        let info = server.sh(&command, json!({})).await;
        wait_alive(&marks).await;
        let response = server
            .http
            .delete(server.url(&format!("/v1/processes/{}?force=1", info.id)))
            .send()
            .await
            .unwrap();
        assert!(
            response.status().is_success(),
            "{mode}: {}",
            response.status()
        );
        assert_all_gone(&marks, Duration::from_secs(5), mode).await;
    }
}

/// The pid-scan fallback raced a process that keeps forking: half the
/// DELETEs left some of it running. A cgroup holds every fork.
#[tokio::test]
async fn a_fork_loop_is_gone_after_delete_every_time() {
    for (mode, _) in CGROUP_MODES {
        let server = start(mode);
        for round in 0..5 {
            let child = mark();
            let command = format!(
                "while :; do setsid sh -c 'trap \"\" TERM; exec sleep {child}' & sleep 0.005; done"
            );
            let info = server.sh(&command, json!({})).await;
            wait_alive(std::slice::from_ref(&child)).await;
            let response = server
                .http
                .delete(server.url(&format!("/v1/processes/{}?force=1", info.id)))
                .send()
                .await
                .unwrap();
            assert!(response.status().is_success());
            assert_all_gone(
                std::slice::from_ref(&child),
                Duration::from_secs(5),
                &format!("{mode} round {round}"),
            )
            .await;
        }
    }
}

/// A leader that exits by itself may leave descendants; the deadline still
/// holds for them.
#[tokio::test]
async fn descendants_left_by_a_leader_that_exited_end_at_its_deadline() {
    let server = start("auto");
    let left = mark();
    let info = server
        .sh(
            &format!("setsid sleep {left} > /dev/null 2>&1 & exit 0"),
            json!({ "timeout_ms": 1500 }),
        )
        .await;
    wait_alive(std::slice::from_ref(&left)).await;
    let exited = server.wait_exit(&info.id).await;
    assert_eq!(exited.reason, Some(ExitReason::Exit));
    assert_all_gone(std::slice::from_ref(&left), WAIT, "after the deadline").await;
}

// --- Nothing outlives the server -----------------------------------------

/// Pipes, a process with its output closed, a PTY process ignoring SIGHUP,
/// and (with cgroups) a `setsid` escapee: `kill -9` of tetherd leaves none
/// of them alive 5 s later.
#[tokio::test]
async fn after_kill_9_of_tetherd_nothing_it_started_is_alive_5_s_later() {
    for mode in ["cgroup2", "cgroup1-freezer", "session"] {
        let server = TestServer::start_with(&["--containment", mode]);
        let [pipes, closed, pty, escapee] = [mark(), mark(), mark(), mark()];
        server.sh(&format!("exec sleep {pipes}"), json!({})).await;
        server
            .sh(&format!("exec >&- 2>&-; exec sleep {closed}"), json!({}))
            .await;
        server
            .sh(
                &format!("trap '' HUP TERM; exec sleep {pty}"),
                json!({ "tty": true }),
            )
            .await;
        let mut marks = vec![pipes, closed, pty];
        if mode != "session" {
            server
                .sh(&format!("setsid sleep {escapee} & wait"), json!({}))
                .await;
            marks.push(escapee);
        }
        wait_alive(&marks).await;
        nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(server.pid() as i32),
            nix::sys::signal::Signal::SIGKILL,
        )
        .unwrap();
        assert_all_gone(&marks, Duration::from_secs(5), mode).await;
    }
}

/// A crash is still a crash after a handover (issue 43): the new binary
/// holds the guard's pipe the old one carried, so `kill -9` of it ends
/// what either binary started, and a session started after the handover
/// is registered with the same guard.
#[tokio::test]
async fn after_a_handover_kill_9_of_tetherd_still_ends_everything_either_binary_started() {
    for mode in ["cgroup2", "session"] {
        let server = TestServer::start_with(&["--containment", mode]);
        let [before, after] = [mark(), mark()];
        server.sh(&format!("exec sleep {before}"), json!({})).await;
        wait_alive(std::slice::from_ref(&before)).await;
        let (status, answer) = server.post("/v1/admin/upgrade", json!({})).await;
        assert_eq!(status, 202, "{answer}");
        assert!(server
            .next_stdout_line_async()
            .await
            .starts_with("tetherd handed over"));
        server.sh(&format!("exec sleep {after}"), json!({})).await;
        let marks = vec![before, after];
        wait_alive(&marks).await;
        nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(server.pid() as i32),
            nix::sys::signal::Signal::SIGKILL,
        )
        .unwrap();
        assert_all_gone(&marks, Duration::from_secs(5), mode).await;
    }
}

// --- As PID 1 ------------------------------------------------------------

/// tetherd as PID 1 of a pid namespace, as a container entrypoint.
fn start_as_pid_1(args: &[&str]) -> (TestServer, u32) {
    let server = TestServer::start_wrapped(
        &["unshare", "--pid", "--fork", "--mount-proc", "--kill-child"],
        args,
        &[],
    );
    let unshare = server.pid();
    let tetherd = proc_stats()
        .into_iter()
        .find(|s| s.ppid == unshare)
        .map(|s| s.pid as u32)
        .expect("tetherd under unshare");
    (server, tetherd)
}

/// Shuts tetherd down as a container runtime would (SIGTERM to PID 1), so
/// it removes its cgroups: killing PID 1 would take the guard with it.
async fn stop_pid_1(tetherd: u32) {
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(tetherd as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    let gone = settle(
        || std::path::Path::new(&format!("/proc/{tetherd}")).exists(),
        |exists| !exists,
    )
    .await;
    assert!(!gone, "tetherd as PID 1 did not exit on SIGTERM");
}

#[tokio::test]
async fn as_pid_1_orphans_are_reaped_and_exit_statuses_are_not_stolen() {
    let (server, tetherd) = start_as_pid_1(&[]);
    let mut ids = Vec::new();
    for i in 0..50 {
        let code = if i % 5 == 0 { 7 } else { 0 };
        let info = server
            .sh(&format!("sleep 0.1 & exit {code}"), json!({}))
            .await;
        ids.push((info.id, code));
    }
    for (id, code) in &ids {
        let exited = server.wait_exit(id).await;
        assert_eq!(exited.reason, Some(ExitReason::Exit), "{exited:?}");
        assert_eq!(exited.exit_code, Some(*code), "{exited:?}");
    }
    // The 50 orphaned sleeps were reparented to tetherd; once they are
    // gone, only the guard is left as its child, and no zombie.
    let children = settle(
        || {
            proc_stats()
                .into_iter()
                .filter(|s| s.ppid == tetherd)
                .map(|s| (s.pid, s.state))
                .collect::<Vec<_>>()
        },
        |children| children.len() == 1 && children.iter().all(|(_, state)| *state != 'Z'),
    )
    .await;
    let zombies = children.iter().filter(|(_, s)| *s == 'Z').count();
    assert_eq!(zombies, 0, "zombies left: {children:?}");
    assert_eq!(children.len(), 1, "only the guard is left: {children:?}");
    stop_pid_1(tetherd).await;
    drop(server);
}

/// The delayed KILL round of a DELETE must not reach a process that got the
/// leader's number after it was reaped. The pid namespace makes the reuse
/// deterministic: `ns_last_pid` hands the number to the next fork.
#[tokio::test]
async fn a_pid_reused_within_the_kill_grace_is_not_killed() {
    for mode in ["auto", "session"] {
        let (server, tetherd) = start_as_pid_1(&["--containment", mode, "--kill-grace-ms", "1500"]);
        let victim = server
            .sh(&format!("exec sleep {}", mark()), json!({}))
            .await;
        let pid = victim.pid;
        let response = server
            .http
            .delete(server.url(&format!("/v1/processes/{}?force=1", victim.id)))
            .send()
            .await
            .unwrap();
        assert!(response.status().is_success());
        // The leader died from TERM at once and was reaped; the KILL round
        // is still ahead. A stranger session leader now takes its number.
        let stranger_mark = mark();
        let stranger = server
            .sh(
                &format!(
                    "echo {} > /proc/sys/kernel/ns_last_pid; setsid sleep {stranger_mark} & echo $!; wait",
                    pid - 1
                ),
                json!({}),
            )
            .await;
        let mut attachment = server.attach(&stranger.id, "").await;
        let mut received = Default::default();
        attachment.until_stdout_contains("\n", &mut received).await;
        let got: u32 = String::from_utf8_lossy(&received.stdout)
            .trim()
            .parse()
            .unwrap();
        assert_eq!(got, pid, "{mode}: the stranger did not get the reused pid");
        // `$!` is printed before the child has exec'd `sleep`.
        wait_alive(std::slice::from_ref(&stranger_mark)).await;
        // Past the end of the victim's grace (1.5 s from the DELETE), the
        // stranger is untouched; a kill would end the wait early.
        let left = survivors(
            std::slice::from_ref(&stranger_mark),
            Duration::from_millis(2500),
        )
        .await;
        assert!(
            !left.is_empty(),
            "{mode}: the stranger with the reused pid was killed"
        );
        assert!(!server.status(&stranger.id).await.is_exited(), "{mode}");
        stop_pid_1(tetherd).await;
    }
}
