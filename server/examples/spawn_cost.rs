//! Spawn cost with a big server heap: `fork` (what `Command::pre_exec`
//! forces) against the launcher's `clone(CLONE_VM | CLONE_VFORK)`.
//!
//! `cargo run --release -p tether-server --example spawn_cost -- 700`
//! (the argument is the heap to touch first, in MiB).

use std::os::fd::AsRawFd;
use std::os::unix::process::CommandExt;
use std::time::Instant;

use tether_server::launch::{launch, Launch};

const RUNS: u32 = 200;

fn main() {
    let mib: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(700);
    // Touch every page, as a server full of retained output would have.
    let heap: Vec<Vec<u8>> = (0..mib).map(|i| vec![i as u8 | 1; 1 << 20]).collect();
    let argv = ["true".to_string()];
    let env: Vec<_> = std::env::vars_os().collect();
    let null = std::fs::File::open("/dev/null").expect("/dev/null");
    let fd = null.as_raw_fd();

    let start = Instant::now();
    for _ in 0..RUNS {
        let mut cmd = std::process::Command::new("true");
        // SAFETY: setsid is async-signal-safe.
        unsafe {
            cmd.pre_exec(|| {
                nix::unistd::setsid()?;
                Ok(())
            });
        }
        cmd.spawn().expect("fork").wait().expect("wait");
    }
    let fork = start.elapsed() / RUNS;

    let start = Instant::now();
    for _ in 0..RUNS {
        let pid = launch(&Launch {
            argv: &argv,
            env: env.clone(),
            cwd: None,
            stdio: [fd, fd, fd],
            controlling_tty: false,
            cgroup_procs: None,
            cgroup_dir: None,
            controller_procs: &[],
            identity: None,
            open_file_limit: None,
        })
        .expect("launch");
        let mut status = 0;
        // SAFETY: reaps our own child.
        unsafe { libc::waitpid(pid as i32, &mut status, 0) };
    }
    let clone = start.elapsed() / RUNS;
    println!(
        "heap {mib} MiB: fork+exec+wait {fork:?}, clone(VM|VFORK)+exec+wait {clone:?} (mean of {RUNS}; {} pages kept)",
        heap.len()
    );
}
