//! The launch against real programs: session, stdio, environment, and
//! each way it fails.

use std::ffi::OsString;
use std::io::Read;
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::Path;

use super::{launch, Launch, LaunchError};

fn pipe() -> (OwnedFd, OwnedFd) {
    let (r, w) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).expect("pipe");
    (r, w)
}

fn env() -> Vec<(OsString, OsString)> {
    std::env::vars_os().collect()
}

/// `argv` with this test's environment and stdio, no session options.
fn plain(argv: &[String]) -> Launch<'_> {
    Launch {
        argv,
        env: env(),
        cwd: None,
        stdio: [0, 1, 2],
        controlling_tty: false,
        cgroup_procs: None,
        cgroup_dir: None,
        controller_procs: &[],
        identity: None,
        open_file_limit: None,
    }
}

fn wait(pid: u32) -> i32 {
    let mut status = 0;
    // SAFETY: our own child.
    unsafe { libc::waitpid(pid as i32, &mut status, 0) };
    status
}

#[test]
fn runs_the_program_in_a_new_session_with_its_stdio() {
    let (r, w) = pipe();
    let null = std::fs::File::open("/dev/null").expect("null");
    let argv = [
        "sh".to_string(),
        "-c".into(),
        "ps -o sid= -p $$; echo $$; pwd".into(),
    ];
    let pid = launch(&Launch {
        cwd: Some(Path::new("/tmp")),
        stdio: [null.as_raw_fd(), w.as_raw_fd(), w.as_raw_fd()],
        ..plain(&argv)
    })
    .expect("launch");
    drop(w);
    let mut out = String::new();
    std::fs::File::from(r)
        .read_to_string(&mut out)
        .expect("read");
    assert_eq!(wait(pid), 0);
    let lines: Vec<&str> = out.lines().map(str::trim).collect();
    assert_eq!(lines, [pid.to_string(), pid.to_string(), "/tmp".into()]);
}

#[test]
fn the_environment_is_exactly_what_was_given_and_sigpipe_is_default() {
    let (r, w) = pipe();
    let argv = [
        "sh".to_string(),
        "-c".into(),
        "echo \"$ONLY\"; grep SigIgn /proc/self/status".into(),
    ];
    let pid = launch(&Launch {
        env: vec![
            ("ONLY".into(), "this".into()),
            ("PATH".into(), "/usr/bin:/bin".into()),
        ],
        stdio: [w.as_raw_fd(), w.as_raw_fd(), w.as_raw_fd()],
        ..plain(&argv)
    })
    .expect("launch");
    drop(w);
    let mut out = String::new();
    std::fs::File::from(r)
        .read_to_string(&mut out)
        .expect("read");
    wait(pid);
    let mut lines = out.lines();
    assert_eq!(lines.next(), Some("this"));
    let ignored = lines.next().expect("SigIgn line");
    let mask =
        u64::from_str_radix(ignored.split_whitespace().nth(1).expect("mask"), 16).expect("hex");
    assert_eq!(
        mask & (1 << (libc::SIGPIPE - 1)),
        0,
        "SIGPIPE ignored: {ignored}"
    );
}

#[test]
fn a_missing_program_is_not_found_and_leaves_no_child() {
    let argv = ["/no/such/program".to_string()];
    let err = launch(&plain(&argv)).expect_err("missing");
    assert!(matches!(err, LaunchError::NotFound(_)), "{err}");
    let argv = ["no-such-program-anywhere".to_string()];
    let err = launch(&plain(&argv)).expect_err("missing");
    assert!(matches!(err, LaunchError::NotFound(_)), "{err}");
}

#[test]
fn a_failing_chdir_is_reported_with_its_step() {
    let argv = ["true".to_string()];
    let err = launch(&Launch {
        cwd: Some(Path::new("/no/such/dir")),
        ..plain(&argv)
    })
    .expect_err("chdir");
    assert!(err.to_string().contains("chdir"), "{err}");
}
