//! The physical floors: the same work done locally, with no server between,
//! measured in the same run as the server figures.

use std::fs::File;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Instant;

use anyhow::{bail, Context, Result};
use nix::fcntl::{fcntl, FcntlArg, FdFlag};
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use nix::pty::{openpty, Winsize};
use nix::sys::termios::{cfmakeraw, tcgetattr, tcsetattr, SetArg, Termios};

use crate::tetherd::{task_spent, Spent};

/// Milliseconds to fork, exec and reap `true`, `runs` times.
pub fn fork_exec_true(runs: usize) -> Result<Vec<f64>> {
    (0..runs).map(|_| fork_exec(&["true"])).collect()
}

/// One fork+exec+wait of `argv` with nothing attached, in ms; an error
/// unless it succeeds.
pub fn fork_exec(argv: &[&str]) -> Result<f64> {
    let Some((program, args)) = argv.split_first() else {
        bail!("nothing to run");
    };
    let t0 = Instant::now();
    let status = Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .with_context(|| format!("run {program}"))?;
    let elapsed = t0.elapsed().as_secs_f64() * 1e3;
    if !status.success() {
        bail!("{argv:?} failed: {status}");
    }
    Ok(elapsed)
}

/// A PTY pair whose master is close-on-exec.
fn pty_pair() -> Result<(OwnedFd, OwnedFd)> {
    let pair = openpty(None::<&Winsize>, None::<&Termios>).context("openpty")?;
    fcntl(&pair.master, FcntlArg::F_SETFD(FdFlag::FD_CLOEXEC))?;
    Ok((pair.master, pair.slave))
}

/// `head -c BYTES /dev/zero` with its stdout on `stdout`. The Command, and
/// its copy of `stdout`, is gone when this returns.
fn spawn_zeros(bytes: u64, stdout: Stdio) -> Result<std::process::Child> {
    Ok(Command::new("head")
        .args(["-c", &bytes.to_string(), "/dev/zero"])
        .stdin(Stdio::null())
        .stdout(stdout)
        .spawn()?)
}

/// Reads everything from `reader`, `chunk` bytes at most at a time, until
/// end of file (or EIO, a PTY master's end), counting bytes and checking
/// they are all zero.
fn drain(mut reader: impl Read, chunk: usize) -> Result<(u64, bool)> {
    let mut buf = vec![0u8; chunk];
    let mut total = 0u64;
    let mut zeros = true;
    loop {
        match reader.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                total += n as u64;
                zeros &= crate::ctx::all_zero(&buf[..n]);
            }
            Err(e) if e.raw_os_error() == Some(libc::EIO) => break,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e.into()),
        }
    }
    Ok((total, zeros))
}

/// Seconds for `head -c BYTES /dev/zero` into a local pipe and a reader.
pub fn pipe_throughput(bytes: u64) -> Result<f64> {
    let t0 = Instant::now();
    let mut child = spawn_zeros(bytes, Stdio::piped())?;
    let stdout = child.stdout.take().context("no stdout")?;
    let (total, zeros) = drain(stdout, 64 << 10)?;
    child.wait()?;
    let secs = t0.elapsed().as_secs_f64();
    if total != bytes || !zeros {
        bail!("local pipe delivered {total} of {bytes} bytes (all zero: {zeros})");
    }
    Ok(secs)
}

/// One run of [`pipe_relay`].
pub struct Relayed {
    /// From the program's spawn until the sink has every byte.
    pub secs: f64,
    /// CPU time of the relay's own thread (its schedstat, as tetherd's is
    /// read): neither the program's nor the sink's.
    pub cpu_s: f64,
}

/// The least any server pays to forward a program's pipe to a client: a
/// thread of the harness spawns `head -c BYTES /dev/zero`, reads its pipe
/// 64 KiB at a time (tetherd's read size) and writes each chunk to a
/// loopback TCP socket that another thread drains, with no framing, no
/// protocol and no event loop. Two copies per byte, both the kernel's.
/// With `ring` it also writes each chunk into a ring file of that many
/// bytes in `$TMPDIR` (where tetherd keeps its logs by default), as exact
/// retention must: a third copy, into the page cache. Not a server, and
/// not a target: it shows how near a CPU target is to what the kernel
/// alone costs on this machine.
pub fn pipe_relay(bytes: u64, ring: Option<u64>) -> Result<Relayed> {
    let listener = TcpListener::bind("127.0.0.1:0")?;
    let addr = listener.local_addr()?;
    let t0 = Instant::now();
    let sink = std::thread::spawn(move || -> Result<(u64, bool)> {
        let (socket, _) = listener.accept()?;
        drain(socket, 1 << 20)
    });
    let relay = std::thread::spawn(move || -> Result<f64> {
        let cpu = thread_cpu_s();
        let log = match ring {
            Some(size) => Some((RingFile::create()?, size)),
            None => None,
        };
        let mut child = spawn_zeros(bytes, Stdio::piped())?;
        let mut stdout = child.stdout.take().context("no stdout")?;
        let mut socket = TcpStream::connect(addr)?;
        socket.set_nodelay(true)?;
        let mut buf = vec![0u8; 64 << 10];
        let mut offset = 0u64;
        loop {
            let n = match stdout.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e.into()),
            };
            if let Some((file, size)) = &log {
                file.write_wrapping(&buf[..n], offset, *size)?;
            }
            offset += n as u64;
            socket.write_all(&buf[..n])?;
        }
        drop(socket);
        child.wait()?;
        Ok(thread_cpu_s() - cpu)
    });
    let relayed = relay
        .join()
        .map_err(|_| anyhow::anyhow!("the relay thread panicked"));
    let sunk = sink
        .join()
        .map_err(|_| anyhow::anyhow!("the sink thread panicked"));
    let secs = t0.elapsed().as_secs_f64();
    let cpu_s = relayed??;
    let (total, zeros) = sunk??;
    if total != bytes || !zeros {
        bail!("the relay delivered {total} of {bytes} bytes (all zero: {zeros})");
    }
    Ok(Relayed { secs, cpu_s })
}

/// The calling thread's CPU time so far, in seconds.
fn thread_cpu_s() -> f64 {
    task_spent(Path::new("/proc/thread-self")).cpu_s
}

/// A scratch ring file, removed when dropped.
struct RingFile {
    file: File,
    path: std::path::PathBuf,
}

impl RingFile {
    fn create() -> Result<RingFile> {
        let path = std::env::temp_dir().join(format!(
            "tether-bench-{}-relay-ring-{:?}",
            std::process::id(),
            std::thread::current().id()
        ));
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(&path)
            .with_context(|| format!("create {}", path.display()))?;
        Ok(RingFile { file, path })
    }

    /// Writes `data`, which starts at stream offset `offset`, at that
    /// offset modulo `size`, in two parts where it wraps.
    fn write_wrapping(&self, mut data: &[u8], mut offset: u64, size: u64) -> Result<()> {
        use std::os::unix::fs::FileExt;
        while !data.is_empty() {
            let at = offset % size;
            let part = data.len().min((size - at) as usize);
            self.file.write_all_at(&data[..part], at)?;
            data = &data[part..];
            offset += part as u64;
        }
        Ok(())
    }
}

impl Drop for RingFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// Seconds for `head -c BYTES /dev/zero` on a local PTY into a reader of
/// the master.
pub fn pty_throughput(bytes: u64) -> Result<f64> {
    let t0 = Instant::now();
    let (master, slave) = pty_pair()?;
    // The Command (and its copy of the slave) is gone: the master reports
    // EIO once head exits.
    let mut child = spawn_zeros(bytes, Stdio::from(slave))?;
    let (total, zeros) = drain(File::from(master), 64 << 10)?;
    child.wait()?;
    let secs = t0.elapsed().as_secs_f64();
    if total != bytes || !zeros {
        bail!("local PTY delivered {total} of {bytes} bytes (all zero: {zeros})");
    }
    Ok(secs)
}

/// Keys per line of the cooked echo measurements.
pub const COOKED_LINE: usize = 50;

/// `cat` on the slave of a new PTY in raw mode; the master is returned.
pub fn raw_cat_pty() -> Result<(OwnedFd, std::process::Child)> {
    pty_program("exec cat", true)
}

/// `cat > /dev/null` on the slave of a new PTY in cooked mode (the line
/// discipline echoes); the master is returned.
pub fn cooked_cat_pty() -> Result<(OwnedFd, std::process::Child)> {
    pty_program("exec cat > /dev/null", false)
}

/// `sh -c SCRIPT` on the slave of a new PTY (raw mode if `raw`, else the
/// default cooked one), as a session leader with the PTY as its
/// controlling terminal, as tetherd and ttyd start their programs: a
/// controlling terminal costs the master's side of every echo too (4-6
/// us of CPU per echo on the machine of docs/BENCHMARKS.md, session 12),
/// so a floor without one would be unfairly kind. The master is returned.
fn pty_program(script: &str, raw: bool) -> Result<(OwnedFd, std::process::Child)> {
    let (master, slave) = pty_pair()?;
    if raw {
        let mut termios = tcgetattr(&slave)?;
        cfmakeraw(&mut termios);
        tcsetattr(&slave, SetArg::TCSANOW, &termios)?;
    }
    let mut command = Command::new("sh");
    command
        .args(["-c", script])
        .stdin(Stdio::from(slave.try_clone()?))
        .stdout(Stdio::from(slave.try_clone()?))
        .stderr(Stdio::from(slave));
    // SAFETY: setsid and ioctl are async-signal-safe system calls on the
    // child's own process and its stdin (the slave, dup'ed there by the
    // Command); nothing of the parent's memory is touched.
    unsafe {
        command.pre_exec(|| {
            if libc::setsid() < 0 || libc::ioctl(0, libc::TIOCSCTTY, 0) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    Ok((master, command.spawn()?))
}

/// Milliseconds for one byte written to a local PTY master to come back from
/// `cat` on the raw slave, `rounds` times.
pub fn pty_echo(rounds: usize) -> Result<Vec<f64>> {
    let (master, child) = raw_cat_pty()?;
    echo_rounds(File::from(master), child, rounds, None)
}

/// Milliseconds for one byte sent over loopback TCP to a relay thread that
/// writes it to the same raw PTY `cat` and sends the echo back, `rounds`
/// times: what any server on the network pays at least (two more socket
/// hops and a thread woken twice), without framing, WebSocket, retention or
/// anything else a server does. Not a target; it shows what part of the
/// distance from the local floor is the network's.
pub fn pty_echo_relayed(rounds: usize) -> Result<Vec<f64>> {
    RelayedEcho::raw()?.keys(rounds, None)
}

/// Starts `body` on a thread named `name` (so that a trace can pick it
/// out: docs/BENCHMARKS.md, per hop) and returns it once it runs, with its
/// "PID/task/TID" under /proc, for its CPU time and context switches.
pub fn floor_thread(
    name: &str,
    body: impl FnOnce() -> Result<()> + Send + 'static,
) -> Result<(std::thread::JoinHandle<Result<()>>, String)> {
    let (tid_tx, tid_rx) = std::sync::mpsc::channel();
    let thread = std::thread::Builder::new()
        .name(name.into())
        .spawn(move || {
            // "/proc/thread-self" links to "PID/task/TID".
            let own = std::fs::read_link("/proc/thread-self")?;
            let _ = tid_tx.send(own.to_string_lossy().into_owned());
            body()
        })?;
    let tid = tid_rx
        .recv_timeout(std::time::Duration::from_secs(10))
        .with_context(|| format!("the {name} thread did not start"))?;
    Ok((thread, tid))
}

/// A relay thread between a loopback TCP socket and a program on a PTY,
/// with the client's end of the socket: [`pty_echo_relayed`], kept open so
/// that its blocks of keystrokes can alternate with servers' in one run.
pub struct RelayedEcho {
    client: TcpStream,
    child: std::process::Child,
    relay: Option<std::thread::JoinHandle<Result<()>>>,
    /// The relay thread's id, for its CPU time and context switches.
    tid: String,
}

impl RelayedEcho {
    /// `cat` on a raw PTY: every byte back is `cat`'s.
    pub fn raw() -> Result<RelayedEcho> {
        let (master, child) = raw_cat_pty()?;
        RelayedEcho::start(master, child)
    }

    /// `cat > /dev/null` on a PTY in cooked mode: the line discipline
    /// echoes.
    pub fn cooked() -> Result<RelayedEcho> {
        let (master, child) = cooked_cat_pty()?;
        RelayedEcho::start(master, child)
    }

    fn start(master: OwnedFd, child: std::process::Child) -> Result<RelayedEcho> {
        let listener = TcpListener::bind("127.0.0.1:0")?;
        let addr = listener.local_addr()?;
        let (relay, tid) = floor_thread("relay-floor", move || {
            let (socket, _) = listener.accept()?;
            socket.set_nodelay(true)?;
            relay_bytes(socket, File::from(master))
        })?;
        let echo = RelayedEcho {
            client: TcpStream::connect(addr)?,
            child,
            relay: Some(relay),
            tid,
        };
        echo.client.set_nodelay(true)?;
        Ok(echo)
    }

    /// `rounds` keystrokes, in ms each; a newline (untimed) every `line`.
    pub fn keys(&mut self, rounds: usize, line: Option<usize>) -> Result<Vec<f64>> {
        timed_keys(&mut self.client, rounds, line)
    }

    /// The client's end as a non-blocking socket for an async client, so
    /// that the relay is timed by the same event loop as the servers. The
    /// blocking end is then non-blocking too: [`RelayedEcho::keys`] is for
    /// one or the other.
    pub fn async_client(&self) -> Result<TcpStream> {
        let client = self.client.try_clone()?;
        client.set_nonblocking(true)?;
        Ok(client)
    }

    /// What the relay thread has spent so far, read as a server's threads
    /// are.
    pub fn spent(&self) -> Spent {
        task_spent(&Path::new("/proc").join(&self.tid))
    }
}

impl Drop for RelayedEcho {
    fn drop(&mut self) {
        // The socket's end ends the relay; the program goes with it.
        let _ = self.client.shutdown(std::net::Shutdown::Both);
        let _ = self.child.kill();
        let _ = self.child.wait();
        if let Some(relay) = self.relay.take() {
            let _ = relay.join();
        }
    }
}

/// Copies bytes both ways between `socket` and `master` until the socket
/// closes (or the PTY ends).
fn relay_bytes(mut socket: TcpStream, mut master: File) -> Result<()> {
    let mut buf = [0u8; 4096];
    loop {
        let ready = {
            let mut fds = [
                PollFd::new(socket.as_fd(), PollFlags::POLLIN),
                PollFd::new(master.as_fd(), PollFlags::POLLIN),
            ];
            poll(&mut fds, PollTimeout::NONE)?;
            fds.map(|fd| fd.revents().is_some_and(|r| !r.is_empty()))
        };
        if ready[0] {
            let n = socket.read(&mut buf)?;
            if n == 0 {
                return Ok(());
            }
            master.write_all(&buf[..n])?;
        }
        if ready[1] {
            let n = match master.read(&mut buf) {
                Ok(n) => n,
                Err(e) if e.raw_os_error() == Some(libc::EIO) => 0,
                Err(e) => return Err(e.into()),
            };
            if n == 0 {
                return Ok(());
            }
            socket.write_all(&buf[..n])?;
        }
    }
}

/// Milliseconds of line-discipline echo on a local PTY in cooked mode
/// (the terminal's default): each key typed is echoed by the kernel while
/// `cat > /dev/null` waits for the line; every `COOKED_LINE` keys a newline
/// (not timed) hands the line over, so the line buffer never fills.
pub fn pty_cooked_echo(rounds: usize) -> Result<Vec<f64>> {
    let (master, child) = cooked_cat_pty()?;
    echo_rounds(File::from(master), child, rounds, Some(COOKED_LINE))
}

/// One key at a time through `master` until it comes back, `rounds`
/// times; a newline (untimed, its `\r\n` echo read) every `line` keys.
fn echo_rounds(
    mut master: File,
    mut child: std::process::Child,
    rounds: usize,
    line: Option<usize>,
) -> Result<Vec<f64>> {
    let result = timed_keys(&mut master, rounds, line);
    let _ = child.kill();
    let _ = child.wait();
    result
}

/// Writes one key at a time to `stream` and reads it back, `rounds` times,
/// in ms; a newline (untimed, its `\r\n` echo read) every `line` keys.
fn timed_keys(
    stream: &mut (impl Read + Write),
    rounds: usize,
    line: Option<usize>,
) -> Result<Vec<f64>> {
    let mut out = Vec::with_capacity(rounds);
    let mut byte = [0u8; 1];
    for i in 0..rounds {
        let key = b'a' + (i % 26) as u8;
        let t0 = Instant::now();
        stream.write_all(&[key])?;
        stream.read_exact(&mut byte)?;
        out.push(t0.elapsed().as_secs_f64() * 1e3);
        if byte[0] != key {
            bail!(
                "the echo returned {:?}, expected {:?}",
                byte[0] as char,
                key as char
            );
        }
        if line.is_some_and(|line| (i + 1) % line == 0) {
            stream.write_all(b"\n")?;
            let mut newline = [0u8; 2];
            stream.read_exact(&mut newline)?;
            if &newline != b"\r\n" {
                bail!("cooked PTY echoed {newline:?} for a newline");
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_ring_file_keeps_the_newest_bytes_at_their_offset_modulo_its_size() {
        let ring = RingFile::create().unwrap();
        ring.write_wrapping(b"abcdef", 0, 8).unwrap();
        ring.write_wrapping(b"ghij", 6, 8).unwrap();
        assert_eq!(std::fs::read(&ring.path).unwrap(), b"ijcdefgh");
        let path = ring.path.clone();
        drop(ring);
        assert!(!path.exists(), "the scratch ring is removed");
    }

    #[test]
    fn the_bare_relay_delivers_every_byte_and_counts_its_own_thread() {
        for ring in [None, Some(256 << 10)] {
            let relayed = pipe_relay(1 << 20, ring).unwrap();
            assert!(relayed.secs > 0.0);
            assert!(relayed.cpu_s > 0.0, "the relay thread's CPU is read");
        }
    }
}
