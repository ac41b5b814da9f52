//! The `tether` CLI's commands around a process: `ps`, `logs`, `wait`,
//! `status`, `signal`, `kill`, `rm`, `attach` of a pipe process, names and
//! id prefixes, the token, argument errors and the help.

#![allow(clippy::unwrap_used)]

use serde_json::json;
use tether_tests::cli::{block_on, poll, ps, tether, tether_env, tether_lines, text, wait_output};
use tether_tests::{TestServer, WAIT};

#[test]
fn subcommands_detach_wait_logs_ps_signal_kill() {
    let server = TestServer::start();
    let base = server.base.as_str();
    // A detached process that waits for a signal.
    let out = tether(
        base,
        &[
            "run",
            "-d",
            "--",
            "sh",
            "-c",
            "trap 'echo got-usr1; exit 3' USR1; echo ready; while :; do sleep 0.05; done",
        ],
        b"",
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let id = text(&out.stdout).trim().to_string();
    assert!(!id.is_empty());
    // Wait (bounded) until it is ready, through `logs`.
    poll("ready, through `logs`", || {
        let logs = text(&tether(base, &["logs", &id], b"").stdout);
        if logs == "ready\n" {
            Ok(())
        } else {
            Err(format!("never ready: {logs:?}"))
        }
    });
    let ps = tether(base, &["ps"], b"");
    let ps_text = text(&ps.stdout);
    assert!(
        ps_text
            .lines()
            .any(|l| l.starts_with(&id[..12]) && l.contains(" up ")),
        "{ps_text}"
    );
    let out = tether(base, &["signal", &id, "BOGUS"], b"");
    assert_eq!(out.status.code(), Some(125));
    let out = tether(base, &["signal", &id, "USR1"], b"");
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let out = tether(base, &["wait", &id], b"");
    assert_eq!(
        (text(&out.stdout).trim(), out.status.code()),
        ("3", Some(3))
    );
    let logs = tether(base, &["logs", "--follow", &id], b"");
    assert_eq!(text(&logs.stdout), "ready\ngot-usr1\n");
    let status = tether(base, &["status", &id], b"");
    let info: serde_json::Value = serde_json::from_slice(&status.stdout).unwrap();
    assert_eq!(info["exit_code"], 3);
    // Killing an exited process changes nothing; `rm` forgets it.
    let out = tether(base, &["kill", &id], b"");
    assert_eq!(out.status.code(), Some(0));
    let status = tether(base, &["status", &id], b"");
    let info: serde_json::Value = serde_json::from_slice(&status.stdout).unwrap();
    assert_eq!(
        (&info["exit_code"], &info["reason"]),
        (&json!(3), &json!("exit"))
    );
    let out = tether(base, &["rm", &id], b"");
    assert_eq!(out.status.code(), Some(0));
    let out = tether(base, &["status", &id], b"");
    assert_eq!(out.status.code(), Some(125));
    assert!(
        text(&out.stderr).contains("not_found"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn attach_replays_and_follows_a_running_process() {
    let server = TestServer::start();
    let base = server.base.as_str();
    let out = tether(
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
        b"",
    );
    let id = text(&out.stdout).trim().to_string();
    let out = tether(base, &["attach", "-i", &id], b"now\n");
    assert_eq!(text(&out.stdout), "before\nafter now\n");
    assert_eq!(out.status.code(), Some(4));
}

#[test]
fn the_token_comes_from_the_flag_or_the_environment() {
    let server = TestServer::start_with(&["--token", "s3cret"]);
    let out = tether_env(&server.base, &["ps"], &[]);
    assert_eq!(out.status.code(), Some(125));
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("401") && stderr.contains("--token"),
        "{stderr}"
    );
    let out = tether_env(&server.base, &["--token", "s3cret", "ps"], &[]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    // The attachment (a WebSocket) carries it too.
    let out = tether_env(
        &server.base,
        &["run", "--", "sh", "-c", "echo authorised; exit 2"],
        &[("TETHER_TOKEN", "s3cret")],
    );
    assert_eq!(
        (text(&out.stdout).as_str(), out.status.code()),
        ("authorised\n", Some(2))
    );
}

#[test]
fn argument_errors_exit_125_with_the_usage_and_start_nothing() {
    let server = TestServer::start();
    let cases: [(&[&str], &str); 5] = [
        (
            &["run", "--timeout", "1", "--", "sleep", "3"],
            "Usage: tether run",
        ),
        (&["bogus"], "Usage: tether"),
        (&["run"], "Usage: tether run"),
        (&["attach"], "Usage: tether attach"),
        (
            &["run", "--detach-keys", "ctrl-1", "--", "true"],
            "Usage: tether run",
        ),
    ];
    for (args, usage) in cases {
        let out = tether(&server.base, args, b"");
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(125), "{args:?}: {stderr}");
        assert!(stderr.contains(usage), "{args:?}: {stderr}");
        assert!(stderr.starts_with("error: "), "{args:?}: {stderr}");
    }
    assert!(
        ps(&server.base).is_empty(),
        "a bad command line started something"
    );
}

#[test]
fn help_says_what_the_cli_does() {
    let out = tether("http://127.0.0.1:1", &["--help"], b"");
    assert_eq!(out.status.code(), Some(0));
    let help = text(&out.stdout);
    assert!(
        help.starts_with("Run commands on a tetherd server and attach to them"),
        "{help}"
    );
    for needle in ["tether run -t -- bash", "Ctrl-P Ctrl-Q", "126", "127"] {
        assert!(help.contains(needle), "{needle:?} missing from:\n{help}");
    }
    let out = tether("http://127.0.0.1:1", &["run", "--help"], b"");
    assert_eq!(out.status.code(), Some(0));
    assert!(text(&out.stdout).contains("--detach-keys"));
}

#[test]
fn ids_may_be_shortened_to_any_unique_prefix() {
    let server = TestServer::start();
    let base = server.base.as_str();
    // Seventeen ids: two of them share a first hex digit.
    let ids: Vec<String> = (0..17)
        .map(|i| {
            let out = tether(
                base,
                &["run", "-d", "--", "sh", "-c", &format!("echo p{i}")],
                b"",
            );
            assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
            text(&out.stdout).trim().to_string()
        })
        .collect();
    let matching = |prefix: &str| ids.iter().filter(|id| id.starts_with(prefix)).count();

    // The shortest prefix of the first id that no other id shares.
    let id = &ids[0];
    let prefix = (1..=id.len())
        .map(|n| &id[..n])
        .find(|p| matching(p) == 1)
        .unwrap();
    let out = tether(base, &["wait", prefix], b"");
    assert_eq!(
        (text(&out.stdout).trim(), out.status.code()),
        ("0", Some(0))
    );
    let out = tether(base, &["logs", prefix], b"");
    assert_eq!(text(&out.stdout), "p0\n");
    let out = tether(base, &["status", prefix], b"");
    let info: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(info["id"], id.as_str());

    // A prefix of several ids is refused, listing them.
    let shared = ids
        .iter()
        .map(|id| &id[..1])
        .find(|p| matching(p) > 1)
        .unwrap();
    let out = tether(base, &["status", shared], b"");
    assert_eq!(out.status.code(), Some(125));
    let stderr = text(&out.stderr);
    assert!(stderr.contains("ambiguous"), "{stderr}");
    for candidate in ids.iter().filter(|id| id.starts_with(shared)) {
        assert!(
            stderr.contains(candidate.as_str()),
            "{candidate} not listed: {stderr}"
        );
    }
    assert!(out.stdout.is_empty());

    // No match at all is the server's 404.
    let out = tether(base, &["status", "nothex"], b"");
    assert_eq!(out.status.code(), Some(125));
    assert!(
        text(&out.stderr).contains("not_found"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn kill_keeps_the_process_for_wait_and_logs_until_rm_forgets_it() {
    let server = TestServer::start();
    let base = server.base.as_str();
    let out = tether(
        base,
        &["run", "-d", "--", "sh", "-c", "echo started; exec sleep 60"],
        b"",
    );
    let id = text(&out.stdout).trim().to_string();
    poll("the start, through `logs`", || {
        let logs = text(&tether(base, &["logs", &id], b"").stdout);
        if logs == "started\n" {
            Ok(())
        } else {
            Err(format!("never started: {logs:?}"))
        }
    });
    // A running process is not forgotten without -f.
    let out = tether(base, &["rm", &id], b"");
    assert_eq!(out.status.code(), Some(125));
    let stderr = text(&out.stderr);
    assert!(stderr.contains("still_running"), "{stderr}");
    // The advice names the command that does it.
    assert!(stderr.contains("tether rm -f"), "{stderr}");
    assert!(!stderr.contains("force=1"), "{stderr}");

    let out = tether(base, &["kill", &id], b"");
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    // As after `docker kill`: SIGKILL, and wait reports 137.
    let out = tether(base, &["wait", &id], b"");
    assert_eq!(
        (text(&out.stdout).trim(), out.status.code()),
        ("137", Some(137))
    );
    let out = tether(base, &["logs", &id], b"");
    assert_eq!(text(&out.stdout), "started\n");
    let status = tether(base, &["status", &id], b"");
    let info: serde_json::Value = serde_json::from_slice(&status.stdout).unwrap();
    assert_eq!(
        (info["reason"].as_str(), info["signal"].as_str()),
        (Some("killed"), Some("KILL"))
    );

    let out = tether(base, &["rm", &id], b"");
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let out = tether(base, &["status", &id], b"");
    assert_eq!(out.status.code(), Some(125));
    assert!(text(&out.stderr).contains("not_found"));

    // rm -f kills and forgets a running one.
    let out = tether(base, &["run", "-d", "--", "sleep", "60"], b"");
    let id = text(&out.stdout).trim().to_string();
    let out = tether(base, &["rm", "-f", &id], b"");
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(ps(base).iter().all(|p| p["id"] != id.as_str()));
}

#[test]
fn a_name_works_wherever_an_id_does() {
    let server = TestServer::start();
    let base = server.base.as_str();
    let out = tether(
        base,
        &[
            "run",
            "-d",
            "--name",
            "web",
            "--",
            "sh",
            "-c",
            "echo serving; exec sleep 60",
        ],
        b"",
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let id = text(&out.stdout).trim().to_string();
    let status = tether(base, &["status", "web"], b"");
    let info: serde_json::Value = serde_json::from_slice(&status.stdout).unwrap();
    assert_eq!(
        (info["id"].as_str(), info["name"].as_str()),
        (Some(id.as_str()), Some("web"))
    );
    let ps_text = text(&tether(base, &["ps"], b"").stdout);
    assert!(
        ps_text
            .lines()
            .any(|l| l.starts_with(&id[..12]) && l.contains(" web ")),
        "{ps_text}"
    );
    // Unique among known processes.
    let out = tether(base, &["run", "-d", "--name", "web", "--", "true"], b"");
    assert_eq!(out.status.code(), Some(125));
    assert!(
        text(&out.stderr).contains("name_taken"),
        "{}",
        text(&out.stderr)
    );
    let out = tether(base, &["kill", "web"], b"");
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let out = tether(base, &["wait", "web"], b"");
    assert_eq!(out.status.code(), Some(137));
    let out = tether(base, &["logs", "web"], b"");
    assert_eq!(text(&out.stdout), "serving\n");
    let out = tether(base, &["rm", "web"], b"");
    assert_eq!(out.status.code(), Some(0));
    // Forgotten, the name is free again.
    let out = tether(base, &["run", "--name", "web", "--", "echo", "again"], b"");
    assert_eq!(
        (text(&out.stdout).as_str(), out.status.code()),
        ("again\n", Some(0))
    );
}

#[test]
fn an_unattached_timeout_ends_a_process_nobody_attaches_to() {
    let server = TestServer::start();
    let base = server.base.as_str();
    let out = tether(
        base,
        &[
            "run",
            "-d",
            "--unattached-timeout",
            "300ms",
            "--",
            "sleep",
            "30",
        ],
        b"",
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let id = text(&out.stdout).trim().to_string();
    let out = tether(base, &["wait", &id], b"");
    assert_eq!(out.status.code(), Some(143));
    let status = tether(base, &["status", &id], b"");
    let info: serde_json::Value = serde_json::from_slice(&status.stdout).unwrap();
    assert_eq!(info["reason"], "unattached");
}

#[test]
fn ps_lists_ids_alone_filters_by_status_and_shows_a_tty_column() {
    let server = TestServer::start();
    let base = server.base.as_str();
    let out = tether(base, &["run", "-d", "--", "sleep", "30"], b"");
    let running = text(&out.stdout).trim().to_string();
    let out = tether(base, &["run", "--", "true"], b"");
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let exited = ps(base)
        .iter()
        .find(|p| p["id"] != running.as_str())
        .map(|p| p["id"].as_str().unwrap().to_string())
        .unwrap();

    let ids = |args: &[&str]| -> Vec<String> {
        let out = tether(base, args, b"");
        assert_eq!(
            out.status.code(),
            Some(0),
            "{args:?}: {}",
            text(&out.stderr)
        );
        text(&out.stdout).lines().map(str::to_string).collect()
    };
    // Running ones by default, as `docker ps`; `-a` for all.
    assert_eq!(ids(&["ps", "-q"]), std::slice::from_ref(&running));
    let mut all = ids(&["ps", "-q", "-a"]);
    all.sort();
    let mut expected = vec![running.clone(), exited.clone()];
    expected.sort();
    assert_eq!(all, expected);
    assert_eq!(
        ids(&["ps", "-q", "--filter", "status=running"]),
        std::slice::from_ref(&running)
    );
    assert_eq!(
        ids(&["ps", "-q", "--filter", "status=exited"]),
        std::slice::from_ref(&exited)
    );
    let table = ids(&["ps", "--filter", "status=running"]);
    assert_eq!(table.len(), 2, "{table:?}");
    assert!(table[0].contains(" STATUS "), "{table:?}");
    assert!(
        table[1].starts_with(&running[..12]) && !table[1].contains("(tty)"),
        "{table:?}"
    );
    // Every column whole with --no-trunc: the full id, the TTY column.
    let whole = ids(&["ps", "--no-trunc"]);
    assert!(whole[0].contains(" TTY "), "{whole:?}");
    assert!(
        whole[1].starts_with(&running) && whole[1].contains(" no "),
        "{whole:?}"
    );
    // The compact table fits 80 columns, whatever the command's length.
    let out = tether(
        base,
        &[
            "run",
            "-d",
            "--",
            "sh",
            "-c",
            &format!("sleep 60; : {}", "x".repeat(200)),
        ],
        b"",
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    for line in ids(&["ps", "-a"]) {
        assert!(
            line.chars().count() <= 80,
            "{} columns: {line}",
            line.chars().count()
        );
    }

    let out = tether(base, &["ps", "--filter", "state=up"], b"");
    assert_eq!(out.status.code(), Some(125));
    assert!(
        text(&out.stderr).contains("status=running"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn logs_tail_prints_the_last_lines_then_follows() {
    let server = TestServer::start();
    let base = server.base.as_str();
    let out = tether(
        base,
        &[
            "run",
            "--",
            "sh",
            "-c",
            "seq 1 10; echo e1 >&2; echo e2 >&2",
        ],
        b"",
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let id = ps(base)[0]["id"].as_str().unwrap().to_string();
    let out = tether(base, &["logs", "--tail", "3", &id], b"");
    assert_eq!(
        (text(&out.stdout).as_str(), text(&out.stderr).as_str()),
        ("8\n9\n10\n", "e1\ne2\n")
    );
    let out = tether(base, &["logs", "-n", "0", &id], b"");
    assert_eq!(text(&out.stdout), "");

    // A running process: the tail, then what it writes next.
    let out = tether(
        base,
        &[
            "run",
            "-d",
            "-i",
            "--",
            "sh",
            "-c",
            "seq 1 5; read x; echo after $x",
        ],
        b"",
    );
    let id = text(&out.stdout).trim().to_string();
    poll("the first lines", || {
        let logs = text(&tether(base, &["logs", &id], b"").stdout);
        (logs == "1\n2\n3\n4\n5\n").then_some(()).ok_or(logs)
    });
    let (child, lines) = tether_lines(base, &["logs", "-n", "2", "-f", &id]);
    assert_eq!(lines.recv_timeout(WAIT).unwrap(), "4");
    assert_eq!(lines.recv_timeout(WAIT).unwrap(), "5");
    block_on(server.say(&id, "now\n"));
    assert_eq!(lines.recv_timeout(WAIT).unwrap(), "after now");
    let out = wait_output(child);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
}

#[test]
fn run_takes_w_for_the_directory_and_d_t_needs_no_local_terminal() {
    let server = TestServer::start();
    let base = server.base.as_str();
    let out = tether(base, &["run", "-w", "/tmp", "--", "pwd"], b"");
    assert_eq!(text(&out.stdout), "/tmp\n", "{}", text(&out.stderr));
    // From a script (stdin a pipe): a PTY of 80x24, started detached.
    let out = tether(base, &["run", "-d", "-t", "--", "stty", "size"], b"");
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let id = text(&out.stdout).trim().to_string();
    let out = tether(base, &["wait", &id], b"");
    assert_eq!(out.status.code(), Some(0));
    let out = tether(base, &["logs", &id], b"");
    assert_eq!(text(&out.stdout), "24 80\r\n");
    // Attached, -t still needs one.
    let out = tether(base, &["run", "-t", "--", "true"], b"");
    assert_eq!(out.status.code(), Some(125));
    assert!(text(&out.stderr).contains("-t needs a terminal"));
}
