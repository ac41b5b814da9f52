//! `tether cp` as a `docker cp` user meets it (issue 46): files and trees
//! both ways, byte-exact with their modes, times and links; a relative
//! path taken from the process's own working directory; the copy done as
//! the process's user; large files in bounded memory on both sides; clear
//! failures.

#![allow(clippy::unwrap_used)]

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;
use std::process::{Command, Stdio};

use tether_tests::cli::{tether, text};
use tether_tests::{fresh_dir, tether_binary, TestServer};

/// A process that sleeps in `dir`, named `name`.
fn sleeper(server: &TestServer, name: &str, dir: &Path, user: Option<&str>) {
    let dir = dir.to_str().unwrap();
    let mut args = vec!["run", "-d", "--name", name, "-w", dir];
    if let Some(user) = user {
        args.extend(["-u", user]);
    }
    args.extend(["--", "sleep", "600"]);
    let out = tether(&server.base, &args, b"");
    assert!(out.status.success(), "{}", text(&out.stderr));
}

fn cp(server: &TestServer, from: &str, to: &str) -> std::process::Output {
    tether(&server.base, &["cp", from, to], b"")
}

fn assert_copied(out: &std::process::Output) {
    assert_eq!(
        out.status.code(),
        Some(0),
        "stdout {} stderr {}",
        text(&out.stdout),
        text(&out.stderr)
    );
}

#[test]
fn a_tree_goes_both_ways_with_its_modes_times_and_links() {
    let server = TestServer::start();
    let work = fresh_dir();
    let tree = work.join("tree");
    std::fs::create_dir_all(tree.join("sub")).unwrap();
    std::fs::write(tree.join("secret.txt"), b"only mine\n").unwrap();
    std::fs::set_permissions(tree.join("secret.txt"), PermissionsExt::from_mode(0o600)).unwrap();
    std::fs::write(tree.join("sub/run.sh"), b"#!/bin/sh\necho hi\n").unwrap();
    std::fs::set_permissions(tree.join("sub/run.sh"), PermissionsExt::from_mode(0o755)).unwrap();
    std::os::unix::fs::symlink("secret.txt", tree.join("link")).unwrap();
    let old = std::time::SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(1_600_000_000);
    std::fs::File::options()
        .write(true)
        .open(tree.join("sub/run.sh"))
        .unwrap()
        .set_modified(old)
        .unwrap();
    let remote = work.join("remote");
    std::fs::create_dir_all(&remote).unwrap();
    sleeper(&server, "box", &remote, None);

    // Into an existing directory, the source keeps its name.
    assert_copied(&cp(&server, tree.to_str().unwrap(), "box:."));
    // Back under a new name.
    let back = work.join("back");
    assert_copied(&cp(&server, "box:tree", back.to_str().unwrap()));

    for copy in [remote.join("tree"), back.clone()] {
        assert_eq!(
            std::fs::read(copy.join("secret.txt")).unwrap(),
            b"only mine\n"
        );
        let mode = |p: &str| std::fs::metadata(copy.join(p)).unwrap().mode() & 0o7777;
        assert_eq!(mode("secret.txt"), 0o600, "{}", copy.display());
        assert_eq!(mode("sub/run.sh"), 0o755, "{}", copy.display());
        assert_eq!(
            std::fs::read_link(copy.join("link")).unwrap(),
            Path::new("secret.txt"),
            "a link is copied as a link"
        );
        assert_eq!(
            std::fs::metadata(copy.join("sub/run.sh"))
                .unwrap()
                .modified()
                .unwrap(),
            old,
            "times kept"
        );
    }

    // One file to a new name, and back into a directory.
    assert_copied(&cp(
        &server,
        tree.join("secret.txt").to_str().unwrap(),
        "box:renamed.txt",
    ));
    assert_eq!(
        std::fs::read(remote.join("renamed.txt")).unwrap(),
        b"only mine\n"
    );
    let into = work.join("into");
    std::fs::create_dir(&into).unwrap();
    assert_copied(&cp(&server, "box:renamed.txt", into.to_str().unwrap()));
    assert_eq!(
        std::fs::read(into.join("renamed.txt")).unwrap(),
        b"only mine\n"
    );
    let _ = std::fs::remove_dir_all(&work);
}

#[test]
fn dash_is_a_tar_archive_on_stdin_or_stdout() {
    let server = TestServer::start();
    let work = fresh_dir();
    std::fs::create_dir_all(work.join("remote")).unwrap();
    std::fs::write(work.join("remote/notes.txt"), b"remote notes\n").unwrap();
    sleeper(&server, "box", &work.join("remote"), None);

    let out = cp(&server, "box:notes.txt", "-");
    assert_copied(&out);
    let listing = Command::new("tar")
        .args(["-t", "-v", "-f", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    {
        use std::io::Write;
        listing
            .stdin
            .as_ref()
            .unwrap()
            .write_all(&out.stdout)
            .unwrap();
    }
    let listing = listing.wait_with_output().unwrap();
    assert!(
        text(&listing.stdout).contains("notes.txt"),
        "{}",
        text(&listing.stdout)
    );

    // The same archive back into another directory, as it is.
    std::fs::create_dir_all(work.join("remote/again")).unwrap();
    let out = tether(&server.base, &["cp", "-", "box:again"], &out.stdout);
    assert_copied(&out);
    assert_eq!(
        std::fs::read(work.join("remote/again/notes.txt")).unwrap(),
        b"remote notes\n"
    );
    let _ = std::fs::remove_dir_all(&work);
}

/// A relative path means what it means to the process: its working
/// directory now, after its own `cd`, not the one it started in.
#[test]
fn a_relative_path_is_the_process_s_working_directory_after_its_cd() {
    let server = TestServer::start();
    let work = fresh_dir();
    std::fs::create_dir_all(work.join("inner")).unwrap();
    let out = tether(
        &server.base,
        &[
            "run",
            "-d",
            "--name",
            "moved",
            "-w",
            work.to_str().unwrap(),
            "--",
            "sh",
            "-c",
            "cd inner && echo ready > ready && exec sleep 600",
        ],
        b"",
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    tether_tests::cli::wait_file(&work.join("inner/ready"));
    let local = work.join("hello.txt");
    std::fs::write(&local, b"hello\n").unwrap();
    assert_copied(&cp(
        &server,
        local.to_str().unwrap(),
        "moved:hello-there.txt",
    ));
    assert_eq!(
        std::fs::read(work.join("inner/hello-there.txt")).unwrap(),
        b"hello\n"
    );
    let _ = std::fs::remove_dir_all(&work);
}

/// The copy has the process's rights, not the server's: as `nobody` it
/// cannot write where `nobody` cannot, and what it writes is `nobody`'s.
#[test]
fn the_copy_runs_as_the_process_s_user() {
    assert!(
        nix::unistd::Uid::effective().is_root(),
        "run the tests as root"
    );
    let server = TestServer::start();
    let work = fresh_dir();
    let theirs = work.join("theirs");
    std::fs::create_dir_all(&theirs).unwrap();
    std::fs::set_permissions(&work, PermissionsExt::from_mode(0o755)).unwrap();
    let nobody = nix::unistd::User::from_name("nobody").unwrap().unwrap();
    nix::unistd::chown(&theirs, Some(nobody.uid), Some(nobody.gid)).unwrap();
    sleeper(&server, "guest", &theirs, Some("nobody"));
    let local = work.join("payload.txt");
    std::fs::write(&local, b"payload\n").unwrap();

    assert_copied(&cp(&server, local.to_str().unwrap(), "guest:."));
    let written = std::fs::metadata(theirs.join("payload.txt")).unwrap();
    assert_eq!(
        written.uid(),
        nobody.uid.as_raw(),
        "owned by the process's user"
    );

    // The parent directory is root's: nobody may not write there.
    let out = cp(&server, local.to_str().unwrap(), "guest:../payload2.txt");
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("Permission denied"),
        "{}",
        text(&out.stderr)
    );
    assert!(!work.join("payload2.txt").exists());
    let _ = std::fs::remove_dir_all(&work);
}

#[test]
fn a_missing_file_or_directory_fails_with_exit_1_and_says_which() {
    let server = TestServer::start();
    let work = fresh_dir();
    std::fs::create_dir_all(&work).unwrap();
    sleeper(&server, "box", &work, None);

    let out = cp(
        &server,
        "box:no-such-file",
        work.join("x").to_str().unwrap(),
    );
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("no-such-file"),
        "{}",
        text(&out.stderr)
    );
    assert!(!work.join("x").exists());

    let out = cp(&server, "/no/such/local", "box:.");
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("/no/such/local"),
        "{}",
        text(&out.stderr)
    );

    let local = work.join("f");
    std::fs::write(&local, b"f").unwrap();
    let out = cp(&server, local.to_str().unwrap(), "box:missing-dir/");
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("no such directory"),
        "{}",
        text(&out.stderr)
    );

    // Both sides local, or both remote: a usage error, nothing runs.
    let out = cp(&server, local.to_str().unwrap(), "/tmp/elsewhere");
    assert_eq!(out.status.code(), Some(125), "{}", text(&out.stderr));
    let _ = std::fs::remove_dir_all(&work);
}

/// A token scoped to one process cannot spawn, so it cannot copy: the
/// copy has no more rights than the token.
#[test]
fn a_token_scoped_to_one_process_cannot_copy() {
    let server = TestServer::start_with(&["--token", "operator-secret"]);
    let work = fresh_dir();
    std::fs::create_dir_all(&work).unwrap();
    let out = tether_tests::cli::tether_env(
        &server.base,
        &[
            "run",
            "-d",
            "--name",
            "box",
            "-w",
            work.to_str().unwrap(),
            "--",
            "sleep",
            "600",
        ],
        &[("TETHER_TOKEN", "operator-secret")],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let share = tether_tests::cli::tether_env(
        &server.base,
        &["share", "--write", "box"],
        &[("TETHER_TOKEN", "operator-secret")],
    );
    let link = text(&share.stdout);
    let token = link.trim().rsplit_once("token=").unwrap().1.to_string();
    let local = work.join("f");
    std::fs::write(&local, b"f").unwrap();
    let out = tether_tests::cli::tether_env(
        &server.base,
        &["cp", local.to_str().unwrap(), "box:copied"],
        &[("TETHER_TOKEN", &token)],
    );
    assert_eq!(out.status.code(), Some(125), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("403"), "{}", text(&out.stderr));
    assert!(!work.join("copied").exists());
    let _ = std::fs::remove_dir_all(&work);
}

/// The peak resident memory of `tether ARGS`, from `/usr/bin/time -v`.
fn peak_of(server: &TestServer, args: &[&str]) -> u64 {
    let out = Command::new("/usr/bin/time")
        .arg("-v")
        .arg(tether_binary())
        .args(args)
        .env("TETHER_SERVER", &server.base)
        .env_remove("TETHER_TOKEN")
        .stdin(Stdio::null())
        .output()
        .expect("/usr/bin/time (Debian package `time`, installed by scripts/test.sh)");
    let report = text(&out.stderr);
    assert!(out.status.success(), "{report}");
    let kib: u64 = report
        .lines()
        .find_map(|l| {
            l.trim()
                .strip_prefix("Maximum resident set size (kbytes): ")
        })
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no peak in {report}"));
    kib << 10
}

fn server_peak(server: &TestServer) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{}/status", server.pid())).unwrap();
    let kib: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap();
    kib << 10
}

/// 200 MB each way, byte-exact, with the client's and the server's
/// memory far below the file's size: the archive streams.
#[test]
fn a_large_file_streams_both_ways_in_bounded_memory() {
    const SIZE: usize = 200_000_000;
    const BOUND: u64 = 96 << 20;
    let server = TestServer::start();
    let work = fresh_dir();
    std::fs::create_dir_all(work.join("remote")).unwrap();
    std::fs::create_dir_all(work.join("down")).unwrap();
    // Not compressible, not a repeated pattern.
    let mut data = vec![0u8; SIZE];
    let mut state = 0x9E37_79B9_7F4A_7C15u64;
    for chunk in data.chunks_mut(8) {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        chunk.copy_from_slice(&state.to_le_bytes()[..chunk.len()]);
    }
    std::fs::write(work.join("big.bin"), &data).unwrap();
    sleeper(&server, "box", &work.join("remote"), None);

    let up = peak_of(
        &server,
        &["cp", work.join("big.bin").to_str().unwrap(), "box:."],
    );
    let down = peak_of(
        &server,
        &["cp", "box:big.bin", work.join("down").to_str().unwrap()],
    );
    assert!(
        std::fs::read(work.join("remote/big.bin")).unwrap() == data,
        "uploaded byte-exact"
    );
    assert!(
        std::fs::read(work.join("down/big.bin")).unwrap() == data,
        "downloaded byte-exact"
    );
    assert!(up < BOUND && down < BOUND, "client peaks {up} and {down}");
    let peak = server_peak(&server);
    assert!(peak < BOUND, "server peak {peak}");
    let _ = std::fs::remove_dir_all(&work);
}

/// `beside` in a spawn request: with `user` or `group` it is a 400 that
/// says why, and an unknown process a 404.
#[test]
fn a_spawn_beside_takes_no_user_and_needs_a_known_process() {
    let server = TestServer::start();
    tether_tests::cli::block_on(async {
        let box_ = server.sh("sleep 600", serde_json::json!({})).await;
        let (status, body) = server
            .post(
                "/v1/processes",
                serde_json::json!({"argv": ["true"], "beside": box_.id, "user": "nobody"}),
            )
            .await;
        assert_eq!(status, 400, "{body}");
        assert!(body.to_string().contains("beside"), "{body}");
        let (status, body) = server
            .post(
                "/v1/processes",
                serde_json::json!({"argv": ["true"], "beside": "no-such-process"}),
            )
            .await;
        assert_eq!(status, 404, "{body}");
    });
}
