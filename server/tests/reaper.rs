//! The orphan reaper, in a test binary of its own: it waits for any child,
//! so no other test may run children in the same process.

#![allow(clippy::unwrap_used)]

use std::time::{Duration, Instant};

use tether_server::contain::reaper::{enable, forget, reap_orphans, register_while};

fn stat(pid: i32) -> std::io::Result<String> {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
}

fn zombie(pid: i32) -> bool {
    stat(pid).is_ok_and(|s| s.contains(") Z "))
}

#[test]
fn reaps_only_children_that_are_not_registered() {
    enable();
    let ours = register_while(|| {
        std::process::Command::new("true").spawn().map(|c| {
            let id = c.id();
            std::mem::forget(c);
            id
        })
    })
    .unwrap() as i32;
    let stranger = std::process::Command::new("true").spawn().unwrap();
    let stranger_pid = stranger.id() as i32;
    std::mem::forget(stranger);
    let start = Instant::now();
    while !(zombie(ours) && zombie(stranger_pid)) {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "children never exited"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    // Ours is older, so first in the kernel's list of children: the reaper
    // stops at it and takes nothing, its status stays for supervision.
    assert_eq!(reap_orphans(), 0);
    assert!(zombie(ours));
    let mut status = 0;
    // SAFETY: reaping our own child, as supervision would.
    let reaped = unsafe { libc::waitpid(ours, &mut status, 0) };
    assert_eq!(reaped, ours);
    assert!(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0);
    forget(ours as u32);
    // Now the stranger is first, and reaped.
    assert_eq!(reap_orphans(), 1);
    assert!(stat(stranger_pid).is_err(), "stranger still there");
}
