//! `tether run -u USER [-g GROUP]`: a process of another user, with that
//! user's login environment, where the server is root; the groups that
//! give what root has refused; a clear refusal from a server that is not.

#![allow(clippy::unwrap_used)]

use tether_tests::cli::{block_on, ps, tether, text};
use tether_tests::TestServer;

/// Run as another user, a process has that user's login environment
/// (`HOME`, `USER`, `LOGNAME`, `SHELL` from the user database, as `su -`
/// and `docker exec -u` give it) and, without `--cwd`, starts in that
/// home, or in `/` when the home is no directory.
#[test]
fn a_process_of_another_user_has_its_home_name_and_shell() {
    // Only root switches users; the suite runs as root (CI does).
    assert!(
        nix::unistd::Uid::effective().is_root(),
        "run the tests as root"
    );
    let server = TestServer::start();
    let show = "echo $HOME $USER $LOGNAME $SHELL; pwd";
    let out = tether(
        &server.base,
        &["run", "-u", "nobody", "--", "sh", "-c", show],
        b"",
    );
    assert_eq!(
        text(&out.stdout),
        "/nonexistent nobody nobody /usr/sbin/nologin\n/\n",
        "{}",
        text(&out.stderr)
    );
    let out = tether(
        &server.base,
        &["run", "-u", "daemon", "--", "sh", "-c", show],
        b"",
    );
    assert_eq!(
        text(&out.stdout),
        "/usr/sbin daemon daemon /usr/sbin/nologin\n/usr/sbin\n",
        "{}",
        text(&out.stderr)
    );
    // The spawn's own env and cwd still win.
    let out = tether(
        &server.base,
        &[
            "run",
            "-u",
            "daemon",
            "-e",
            "HOME=/tmp",
            "--cwd",
            "/tmp",
            "--",
            "sh",
            "-c",
            show,
        ],
        b"",
    );
    assert_eq!(
        text(&out.stdout),
        "/tmp daemon daemon /usr/sbin/nologin\n/tmp\n",
        "{}",
        text(&out.stderr)
    );
    // An operator may allow every group.
    let open = TestServer::start_with(&["--denied-groups", ""]);
    let out = tether(
        &open.base,
        &["run", "-u", "nobody", "-g", "0", "--", "id", "-g"],
        b"",
    );
    assert_eq!(text(&out.stdout), "0\n", "{}", text(&out.stderr));
}

#[test]
fn run_as_another_user_where_the_server_is_root_else_a_clear_refusal() {
    let server = TestServer::start();
    let root = nix::unistd::Uid::effective().is_root();
    if root {
        // The tests run tetherd as their own user: root here.
        let out = tether(
            &server.base,
            &["run", "-u", "nobody", "--", "id", "-un"],
            b"",
        );
        assert_eq!(
            (text(&out.stdout).as_str(), out.status.code()),
            ("nobody\n", Some(0)),
            "{}",
            text(&out.stderr)
        );
        let out = tether(&server.base, &["run", "--user", "root", "--", "true"], b"");
        assert_eq!(out.status.code(), Some(125));
        assert!(
            text(&out.stderr).contains("invalid_request"),
            "{}",
            text(&out.stderr)
        );
        let out = tether(
            &server.base,
            &["run", "-u", "no-such-user-xyz", "--", "true"],
            b"",
        );
        assert_eq!(out.status.code(), Some(125));
        // A group instead of the user's primary one (nobody's is nogroup
        // on Debian: `users`, 100, shows the choice was made).
        let out = tether(
            &server.base,
            &["run", "-u", "nobody", "-g", "users", "--", "id", "-g"],
            b"",
        );
        assert_eq!(
            (text(&out.stdout).as_str(), out.status.code()),
            ("100\n", Some(0)),
            "{}",
            text(&out.stderr)
        );
        // Groups that give what root has are refused, by name or number.
        for group in ["0", "root", "disk", "shadow"] {
            let out = tether(
                &server.base,
                &["run", "-u", "nobody", "-g", group, "--", "id", "-g"],
                b"",
            );
            assert_eq!(
                out.status.code(),
                Some(125),
                "-g {group}: {}",
                text(&out.stdout)
            );
            assert!(
                text(&out.stderr).contains("--denied-groups"),
                "{}",
                text(&out.stderr)
            );
        }
        let out = tether(
            &server.base,
            &[
                "run",
                "-u",
                "nobody",
                "--group",
                "no-such-group-xyz",
                "--",
                "true",
            ],
            b"",
        );
        assert_eq!(out.status.code(), Some(125));
        assert!(
            text(&out.stderr).contains("no such group"),
            "{}",
            text(&out.stderr)
        );
    }
    // A group needs a user: refused by the CLI (usage) and the server.
    let out = tether(&server.base, &["run", "-g", "0", "--", "true"], b"");
    assert_eq!(out.status.code(), Some(125), "{}", text(&out.stderr));
    let (status, body) = block_on(server.post(
        "/v1/processes",
        serde_json::json!({"argv": ["true"], "group": "0"}),
    ));
    assert_eq!(
        (status, &body["error"]["code"]),
        (400, &serde_json::json!("invalid_request")),
        "{body}"
    );
    // A server that is not root cannot switch user: a clear refusal (as
    // root, one run as nobody shows it).
    let unprivileged = if root {
        TestServer::start_wrapped(
            &[
                "setpriv",
                "--reuid=65534",
                "--regid=65534",
                "--clear-groups",
            ],
            &[],
            &[],
        )
    } else {
        server
    };
    let out = tether(
        &unprivileged.base,
        &["run", "-u", "nobody", "--", "true"],
        b"",
    );
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(125), "{stderr}");
    assert!(
        stderr.contains("403 user_unavailable") && stderr.contains("root"),
        "{stderr}"
    );
    assert!(
        ps(&unprivileged.base).is_empty(),
        "a refused spawn started something"
    );
}
