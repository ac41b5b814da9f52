//! Sections 1 and 2: spawn-to-exit, exit-to-wait and keystroke echo.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use tether_protocol::{ClientFrame, InputAction, ServerFrame};

use crate::client::{argv, shell, Api, Conn};
use crate::ctx::Ctx;
use crate::floors;
use crate::report::Figure;
use crate::stats::Dist;

const FRAME_WAIT: Duration = Duration::from_secs(10);

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// Reads frames until the exit frame; returns the moment it arrived.
async fn until_exit(conn: &mut Conn) -> Result<Instant> {
    for _ in 0..100_000 {
        if let ServerFrame::Exit { .. } = conn.next_within(FRAME_WAIT).await? {
            return Ok(Instant::now());
        }
    }
    bail!("no exit frame in 100000 frames")
}

/// POST `true`, attach, exit frame: (POST round trip, whole path) in ms.
async fn spawn_true(api: &Api) -> Result<(f64, f64)> {
    let t0 = Instant::now();
    let info = api.spawn(&argv(&["true"])).await?;
    let post = t0.elapsed();
    let mut conn = api.attach(&info.id, "").await?;
    let at = until_exit(&mut conn).await?;
    let total = at - t0;
    conn.close().await;
    Ok((ms(post), ms(total)))
}

/// `true` through one WebSocket (`GET /v1/run`) until its exit frame; ms.
pub async fn run_true(api: &Api, program: &str) -> Result<f64> {
    let t0 = Instant::now();
    let mut conn = api.run(&argv(&[program])).await?;
    let at = until_exit(&mut conn).await?;
    let total = at - t0;
    conn.close().await;
    Ok(ms(total))
}

/// pidfd_open(2): an fd that becomes readable the moment `pid` exits.
fn pidfd_open(pid: u32) -> Result<OwnedFd> {
    // SAFETY: a plain syscall with integer arguments.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid as libc::pid_t, 0) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error()).context("pidfd_open");
    }
    // SAFETY: the kernel just returned this new fd, owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) })
}

/// Blocks until the pidfd is readable (the process exited); returns when.
fn wait_pidfd(fd: OwnedFd) -> Option<Instant> {
    let mut pfd = libc::pollfd {
        fd: fd.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one valid pollfd on the stack.
    let n = unsafe { libc::poll(&mut pfd, 1, 10_000) };
    (n == 1).then(Instant::now)
}

/// A process that exits 50 ms after spawn, watched three ways at once: the
/// kernel (pidfd readable), a long-poll wait, and an attachment. Returns
/// (wait return after exit, exit frame after exit) in ms.
async fn exit_observed(api: &Api) -> Result<(f64, f64)> {
    let info = api.spawn(&argv(&["sleep", "0.05"])).await?;
    let pidfd = pidfd_open(info.pid)?;
    let watcher = std::thread::spawn(move || wait_pidfd(pidfd));
    let id = info.id.clone();
    let wait = async {
        let info = api.wait(&id, 10_000).await?;
        if !info.is_exited() {
            bail!("wait returned before exit");
        }
        Ok(Instant::now())
    };
    let attach = async {
        let mut conn = api.attach(&id, "").await?;
        let at = until_exit(&mut conn).await?;
        conn.close().await;
        Ok::<_, anyhow::Error>(at)
    };
    let (waited, framed) = tokio::join!(wait, attach);
    let exited = watcher
        .join()
        .ok()
        .flatten()
        .context("pidfd never became readable")?;
    let (waited, framed) = (waited?, framed?);
    let after = |t: Instant| ms(t.saturating_duration_since(exited));
    Ok((after(waited), after(framed)))
}

/// Issue 16's spawn target: median within floor + 0.5 ms.
fn spawn_target(figure: Figure, dist: &Dist, floor: &Dist, also: &str) -> Figure {
    let over = dist.median() - floor.median();
    figure
        .floor(floor.median())
        .target("≤ floor + 0.5 ms (median)", over <= 0.5)
        .note(format!("median {over:.2} ms over the floor{also}"))
}

/// Section 1.
pub async fn spawn(ctx: &mut Ctx) -> Result<()> {
    let server = ctx.start_server(&[])?;
    let api = Api::new(&server.base)?;
    for _ in 0..5 {
        spawn_true(&api).await?;
    }
    let runs = ctx.p.spawn_runs;
    let (mut post, mut total, mut one) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..runs {
        let (p, t) = spawn_true(&api).await?;
        post.push(p);
        total.push(t);
        one.push(run_true(&api, "true").await?);
    }
    let one = Dist::new(one);
    let floor =
        Dist::new(tokio::task::spawn_blocking(move || floors::fork_exec_true(runs)).await??);
    let total = Dist::new(total);
    let post = Dist::new(post);

    let mut waited = Vec::new();
    let mut framed = Vec::new();
    for _ in 0..ctx.p.wait_runs {
        let (w, f) = exit_observed(&api).await?;
        waited.push(w);
        framed.push(f);
    }
    server.stop();
    let waited = Dist::new(waited);
    let framed = Dist::new(framed);

    ctx.report.push(Figure::from_dist(
        "spawn.floor",
        1,
        "fork+exec+wait `true`, local (floor)",
        "ms",
        &floor,
        runs,
    ));
    ctx.report.push(
        Figure::from_dist(
            "spawn.post",
            1,
            "POST /v1/processes `true` (201 back)",
            "ms",
            &post,
            runs,
        )
        .note("part of the path below"),
    );
    let figure = Figure::from_dist(
        "spawn.exit_frame",
        1,
        "`true`: POST + attach + exit frame",
        "ms",
        &total,
        runs,
    );
    ctx.report.push(spawn_target(figure, &total, &floor, ""));
    let figure = Figure::from_dist(
        "spawn.run",
        1,
        "`true`: one WebSocket (GET /v1/run) + exit frame",
        "ms",
        &one,
        runs,
    );
    ctx.report.push(spawn_target(
        figure,
        &one,
        &floor,
        "; spawn and attach in one round trip",
    ));
    ctx.report.push(
        Figure::from_dist(
            "wait.after_exit",
            1,
            "process exit → wait returns",
            "ms",
            &waited,
            waited.len(),
        )
        .target("≤ 1 ms (median)", waited.median() <= 1.0)
        .note("exit = the child's pidfd turning readable"),
    );
    ctx.report.push(
        Figure::from_dist(
            "exit_frame.after_exit",
            1,
            "process exit → exit frame",
            "ms",
            &framed,
            framed.len(),
        )
        .note("same processes, attached while they ran"),
    );
    ctx.report
        .series
        .insert("fork+exec `true` (local floor)".into(), floor);
    ctx.report
        .series
        .insert("`true` via tetherd: POST→exit frame".into(), total);
    ctx.report
        .series
        .insert("exit → wait returns".into(), waited);
    ctx.report.series.insert("exit → exit frame".into(), framed);
    Ok(())
}

/// Waits until `marker` has appeared in stdout (bounded).
pub async fn wait_for_output(conn: &mut Conn, marker: &[u8]) -> Result<()> {
    let mut seen = Vec::new();
    for _ in 0..10_000 {
        match conn.next_within(FRAME_WAIT).await? {
            ServerFrame::Stdout { data, .. } => {
                seen.extend_from_slice(&data);
                if seen.windows(marker.len()).any(|w| w == marker) {
                    return Ok(());
                }
            }
            ServerFrame::Exit { .. } => bail!("process exited before printing {marker:?}"),
            _ => {}
        }
    }
    bail!("marker never arrived")
}

/// One keystroke: a 1-byte stdin frame until the byte comes back, in ms.
pub async fn echo_round(conn: &mut Conn, key: u8) -> Result<f64> {
    let t0 = Instant::now();
    conn.send(&ClientFrame::Stdin { data: vec![key] }).await?;
    for _ in 0..10_000 {
        match conn.next_within(FRAME_WAIT).await? {
            ServerFrame::Stdout { data, .. } if data.contains(&key) => return Ok(ms(t0.elapsed())),
            ServerFrame::Exit { .. } => bail!("process exited during echo"),
            _ => {}
        }
    }
    bail!("echo never came back")
}

/// One keystroke as numbered input (`input=ID`): an `input` frame at `seq`
/// until the byte comes back (the `input_ack`s on the way are skipped), in ms.
pub async fn numbered_echo_round(conn: &mut Conn, key: u8, seq: u64) -> Result<f64> {
    let t0 = Instant::now();
    let action = InputAction::Stdin { data: vec![key] };
    conn.send(&ClientFrame::Input { seq, action }).await?;
    for _ in 0..10_000 {
        match conn.next_within(FRAME_WAIT).await? {
            ServerFrame::Stdout { data, .. } if data.contains(&key) => return Ok(ms(t0.elapsed())),
            ServerFrame::Exit { .. } => bail!("process exited during echo"),
            _ => {}
        }
    }
    bail!("echo never came back")
}

/// The PTY program of the echo measurements: raw mode, no echo, so every
/// byte back is `cat`'s own output.
pub fn raw_cat() -> tether_protocol::api::SpawnRequest {
    let mut req = shell("stty raw -echo; printf R; exec cat");
    req.tty = true;
    req
}

/// A PTY `cat > /dev/null` in cooked mode: the line discipline echoes.
pub fn cooked_cat() -> tether_protocol::api::SpawnRequest {
    let mut req = shell("printf R; exec cat > /dev/null");
    req.tty = true;
    req
}

/// `rounds` cooked echoes through `conn`, a newline (untimed) every
/// `COOKED_LINE` keys, as the local floor does.
async fn cooked_rounds(conn: &mut Conn, rounds: usize) -> Result<Vec<f64>> {
    let mut rtt = Vec::with_capacity(rounds);
    for i in 0..rounds {
        rtt.push(echo_round(conn, b'a' + (i % 26) as u8).await?);
        if (i + 1) % floors::COOKED_LINE == 0 {
            conn.send(&ClientFrame::Stdin {
                data: b"\n".to_vec(),
            })
            .await?;
            wait_for_output(conn, b"\r\n").await?;
        }
    }
    Ok(rtt)
}

/// The echo target: median within floor + 30 us, p99 within four
/// times the floor's p99.
fn echo_target(figure: Figure, rtt: &Dist, floor: &Dist) -> Figure {
    let over_us = (rtt.median() - floor.median()) * 1e3;
    figure
        .floor(floor.median())
        .target(
            "≤ floor + 30 us (median), p99 ≤ 4× floor p99",
            over_us <= 30.0 && rtt.p99() <= 4.0 * floor.p99(),
        )
        .note(format!(
            "median floor + {over_us:.0} us; p99 {:.1}× the floor's",
            rtt.p99() / floor.p99()
        ))
}

/// Section 2.
pub async fn echo(ctx: &mut Ctx) -> Result<()> {
    let server = ctx.start_server(&[])?;
    let api = Api::new(&server.base)?;
    let info = api.spawn(&raw_cat()).await?;
    let mut conn = api.attach(&info.id, "").await?;
    wait_for_output(&mut conn, b"R").await?;
    // Beside it, the same program typed into with numbered input, the
    // rounds interleaved so that both see the same machine.
    let numbered_info = api.spawn(&raw_cat()).await?;
    let mut numbered = api.attach(&numbered_info.id, "input=bench").await?;
    wait_for_output(&mut numbered, b"R").await?;
    let mut seq = 0;
    for i in 0..50 {
        echo_round(&mut conn, b'a' + (i % 26) as u8).await?;
        numbered_echo_round(&mut numbered, b'a' + (i % 26) as u8, seq).await?;
        seq += 1;
    }
    let rounds = ctx.p.echo_rounds;
    let mut rtt = Vec::with_capacity(rounds);
    let mut numbered_rtt = Vec::with_capacity(rounds);
    for i in 0..rounds {
        let key = b'a' + (i % 26) as u8;
        if i % 2 == 0 {
            rtt.push(echo_round(&mut conn, key).await?);
            numbered_rtt.push(numbered_echo_round(&mut numbered, key, seq).await?);
        } else {
            numbered_rtt.push(numbered_echo_round(&mut numbered, key, seq).await?);
            rtt.push(echo_round(&mut conn, key).await?);
        }
        seq += 1;
    }
    api.delete(&info.id).await?;
    api.delete(&numbered_info.id).await?;
    drop(conn);
    drop(numbered);
    let cooked = api.spawn(&cooked_cat()).await?;
    let mut conn = api.attach(&cooked.id, "").await?;
    wait_for_output(&mut conn, b"R").await?;
    cooked_rounds(&mut conn, 50).await?;
    let cooked_rtt = Dist::new(cooked_rounds(&mut conn, rounds).await?);
    api.delete(&cooked.id).await?;
    drop(conn);
    server.stop();
    let floor = Dist::new(tokio::task::spawn_blocking(move || floors::pty_echo(rounds)).await??);
    let cooked_floor =
        Dist::new(tokio::task::spawn_blocking(move || floors::pty_cooked_echo(rounds)).await??);
    let relayed =
        Dist::new(tokio::task::spawn_blocking(move || floors::pty_echo_relayed(rounds)).await??);
    let rtt = Dist::new(rtt);
    ctx.report.push(Figure::from_dist(
        "echo.floor",
        2,
        "PTY echo, local `cat` on raw PTY (floor)",
        "ms",
        &floor,
        1,
    ));
    let over_us = (relayed.median() - floor.median()) * 1e3;
    ctx.report.push(
        Figure::from_dist(
            "echo.relayed",
            2,
            "PTY echo through a bare TCP relay thread (no server)",
            "ms",
            &relayed,
            1,
        )
        .note(format!(
            "what the network alone adds: floor + {over_us:.0} us; not a target"
        )),
    );
    let figure = Figure::from_dist(
        "echo.rtt",
        2,
        "keystroke echo via tetherd (PTY `cat`)",
        "ms",
        &rtt,
        1,
    );
    ctx.report.push(echo_target(figure, &rtt, &floor));
    let numbered_rtt = Dist::new(numbered_rtt);
    let over_us = (numbered_rtt.median() - rtt.median()) * 1e3;
    ctx.report.push(
        Figure::from_dist(
            "echo.numbered",
            2,
            "keystroke echo with numbered input (`input=ID`, exactly once)",
            "ms",
            &numbered_rtt,
            1,
        )
        .target("≤ echo.rtt + 10 us (median, same run)", over_us <= 10.0)
        .note(format!(
            "median echo.rtt {over_us:+.1} us (rounds interleaved)"
        )),
    );
    ctx.report.push(Figure::from_dist(
        "echo.cooked_floor",
        2,
        "cooked PTY echo, local line discipline (floor)",
        "ms",
        &cooked_floor,
        1,
    ));
    let figure = Figure::from_dist(
        "echo.cooked",
        2,
        "cooked keystroke echo via tetherd (line discipline)",
        "ms",
        &cooked_rtt,
        1,
    );
    ctx.report
        .push(echo_target(figure, &cooked_rtt, &cooked_floor));
    ctx.report
        .series
        .insert("PTY echo, local (floor)".into(), floor);
    ctx.report.series.insert("PTY echo via tetherd".into(), rtt);
    ctx.report
        .series
        .insert("cooked PTY echo via tetherd".into(), cooked_rtt);
    Ok(())
}
