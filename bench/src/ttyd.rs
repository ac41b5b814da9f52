//! Section 12: a keystroke through tetherd next to one through ttyd, the
//! C terminal server with one thread (tsl0922/ttyd), on the same PTY
//! programs in the same run: raw (`stty raw -echo; exec cat`) and cooked
//! (the line discipline echoes), blocks of keystrokes alternating between
//! the two servers, each server's CPU time per keystroke read from
//! `/proc/PID/task/*/schedstat` (nanoseconds, every thread).
//!
//! ttyd is not in Debian: build it from its public source in a scratch
//! folder and pass `--ttyd PATH`; without it the section says so and
//! measures nothing. ttyd starts one program per WebSocket; the client
//! sends `{"AuthToken":"","columns":C,"rows":R}` first, then `'0'` + input;
//! output comes back as `'0'` + bytes (its `src/server.h`).

use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use futures_util::{SinkExt, StreamExt};
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::Message;

use crate::client::{Api, Conn, Ws};
use crate::floors::RelayedEcho;
use crate::latency::{cooked_cat, echo_round, raw_cat, wait_for_output};
use crate::peers::{free_port, wait_listening};
use crate::report::Figure;
use crate::stats::Dist;
use crate::tetherd::{spent, Spent};
use crate::Ctx;

const FRAME_WAIT: Duration = Duration::from_secs(10);

/// A ttyd serving one shell command on loopback, stopped on drop.
struct Ttyd {
    child: Child,
    url: String,
}

impl Ttyd {
    fn start(bin: &Path, script: &str) -> Result<Ttyd> {
        let port = free_port()?;
        let mut cmd = Command::new(bin);
        cmd.args(["-p", &port.to_string(), "-i", "lo", "-W", "-d", "0"])
            .args(["sh", "-c", script])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        // SAFETY: prctl is async-signal-safe and touches no parent memory.
        unsafe {
            cmd.pre_exec(|| {
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM);
                Ok(())
            });
        }
        let child = cmd
            .spawn()
            .with_context(|| format!("start {}", bin.display()))?;
        let ttyd = Ttyd {
            child,
            url: format!("ws://127.0.0.1:{port}/ws"),
        };
        wait_listening("ttyd", port)?;
        Ok(ttyd)
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    /// One terminal (ttyd starts its program now): the `tty` subprotocol
    /// and the opening message.
    async fn open(&self) -> Result<Ws> {
        let mut request = self.url.as_str().into_client_request()?;
        request
            .headers_mut()
            .insert("Sec-WebSocket-Protocol", "tty".parse()?);
        let (mut ws, _) = tokio_tungstenite::connect_async(request).await?;
        ws.send(Message::Binary(
            br#"{"AuthToken":"","columns":80,"rows":24}"#.to_vec().into(),
        ))
        .await?;
        Ok(ws)
    }

    /// [`Ttyd::open`], then the program's first output (`marker`).
    async fn connect(&self, marker: u8) -> Result<Ws> {
        let mut ws = self.open().await?;
        until_output(&mut ws, marker).await?;
        Ok(ws)
    }
}

impl Drop for Ttyd {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Waits for an output message of ttyd's that holds `byte`.
async fn until_output(ws: &mut Ws, byte: u8) -> Result<()> {
    loop {
        let message = tokio::time::timeout(FRAME_WAIT, ws.next())
            .await
            .context("ttyd sent nothing within the bound")?
            .context("ttyd closed the connection")??;
        if let Message::Binary(data) = message {
            if data.first() == Some(&b'0') && data[1..].contains(&byte) {
                return Ok(());
            }
        }
    }
}

/// One keystroke through ttyd, in ms.
async fn ttyd_round(ws: &mut Ws, key: u8) -> Result<f64> {
    let t0 = Instant::now();
    ws.send(Message::Binary(vec![b'0', key].into())).await?;
    until_output(ws, key).await?;
    Ok(t0.elapsed().as_secs_f64() * 1e3)
}

/// CPU time of every thread of `pid` so far, in seconds.
/// One server's samples of one kind of echo: every round trip, and per
/// block (a few hundred keys, alternating with the other server's) the CPU
/// time and context switches per keystroke, so that a burst of load from
/// elsewhere spoils a block, not the figure (medians over blocks).
#[derive(Default)]
struct Side {
    rtt: Vec<f64>,
    cpu_us: Vec<f64>,
    switches: Vec<f64>,
}

impl Side {
    fn block(&mut self, before: Spent, after: Spent, keys: usize) {
        let keys = keys.max(1) as f64;
        self.cpu_us.push((after.cpu_s - before.cpu_s) * 1e6 / keys);
        self.switches
            .push(after.switches.saturating_sub(before.switches) as f64 / keys);
    }
}

/// A keystroke, and in cooked mode a newline (untimed) every 32 keys, as
/// the line discipline's floor does.
const COOKED_LINE: usize = 32;

async fn tetherd_block(
    conn: &mut Conn,
    pid: u32,
    side: &mut Side,
    keys: usize,
    cooked: bool,
) -> Result<()> {
    let before = spent(pid);
    for i in 0..keys {
        side.rtt
            .push(echo_round(conn, b'a' + (i % 26) as u8).await?);
        if cooked && (i + 1) % COOKED_LINE == 0 {
            conn.send(&tether_protocol::ClientFrame::Stdin {
                data: b"\r".to_vec(),
            })
            .await?;
            wait_for_output(conn, b"\n").await?;
        }
    }
    side.block(before, spent(pid), keys);
    Ok(())
}

async fn ttyd_block(
    ws: &mut Ws,
    pid: u32,
    side: &mut Side,
    keys: usize,
    cooked: bool,
) -> Result<()> {
    let before = spent(pid);
    for i in 0..keys {
        side.rtt.push(ttyd_round(ws, b'a' + (i % 26) as u8).await?);
        if cooked && (i + 1) % COOKED_LINE == 0 {
            ws.send(Message::Binary(vec![b'0', b'\r'].into())).await?;
            until_output(ws, b'\n').await?;
        }
    }
    side.block(before, spent(pid), keys);
    Ok(())
}

/// A block of keystrokes through the bare relay thread of
/// [`RelayedEcho`], from the same event loop as the servers' blocks: a
/// byte written, the same byte read back; in cooked mode a `\r`
/// (untimed) every `COOKED_LINE` keys, its `\r\n` read back.
async fn relay_block(
    relay: &RelayedEcho,
    client: &mut tokio::net::TcpStream,
    side: &mut Side,
    keys: usize,
    cooked: bool,
) -> Result<()> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let before = relay.spent();
    let mut back = [0u8; 2];
    for i in 0..keys {
        let key = b'a' + (i % 26) as u8;
        let t0 = Instant::now();
        client.write_all(&[key]).await?;
        tokio::time::timeout(FRAME_WAIT, client.read_exact(&mut back[..1]))
            .await
            .context("the bare relay echoed nothing within the bound")??;
        side.rtt.push(t0.elapsed().as_secs_f64() * 1e3);
        if back[0] != key {
            bail!(
                "the bare relay echoed {:?} for {:?}",
                back[0] as char,
                key as char
            );
        }
        if cooked && (i + 1) % COOKED_LINE == 0 {
            client.write_all(b"\r").await?;
            tokio::time::timeout(FRAME_WAIT, client.read_exact(&mut back))
                .await
                .context("the bare relay echoed no newline within the bound")??;
            if &back != b"\r\n" {
                bail!("the cooked PTY echoed {back:?} for a newline");
            }
        }
    }
    side.block(before, relay.spent(), keys);
    Ok(())
}

/// A PTY printing `bytes` 'x's with no output processing.
fn flood_script(bytes: u64) -> String {
    format!("stty raw -echo; head -c {bytes} /dev/zero | tr '\\0' x")
}

/// One run of the flood through tetherd (`GET /v1/run`, block mode: no
/// byte dropped): seconds until the exit frame, and whether every byte
/// came, each an 'x'.
async fn tetherd_flood(api: &Api, bytes: u64) -> Result<(f64, bool)> {
    let mut request = crate::client::shell(&flood_script(bytes));
    request.tty = true;
    request.overflow = tether_protocol::Overflow::Block;
    let t0 = Instant::now();
    let mut conn = api.run(&request).await?;
    let mut got = 0u64;
    let mut clean = true;
    loop {
        match tokio::time::timeout(FRAME_WAIT, conn.next()).await? {
            Ok(Some(tether_protocol::ServerFrame::Stdout { data, .. })) => {
                got += data.len() as u64;
                clean &= data.iter().all(|b| *b == b'x');
            }
            Ok(Some(tether_protocol::ServerFrame::Exit { .. })) | Ok(None) => break,
            Ok(Some(_)) => clean = false,
            Err(e) => return Err(e),
        }
    }
    Ok((t0.elapsed().as_secs_f64(), clean && got == bytes))
}

/// One run of the flood through ttyd (a connection starts the program;
/// ttyd closes it once the program has gone): seconds until the close,
/// and whether every byte came.
async fn ttyd_flood(ttyd: &Ttyd, bytes: u64) -> Result<(f64, bool)> {
    let t0 = Instant::now();
    let mut ws = ttyd.open().await?;
    let (mut got, mut clean) = (0u64, true);
    loop {
        match tokio::time::timeout(FRAME_WAIT, ws.next()).await? {
            Some(Ok(Message::Binary(data))) if data.first() == Some(&b'0') => {
                got += data.len() as u64 - 1;
                clean &= data[1..].iter().all(|b| *b == b'x');
            }
            Some(Ok(Message::Close(_))) | None | Some(Err(_)) => break,
            Some(Ok(_)) => {}
        }
    }
    Ok((t0.elapsed().as_secs_f64(), clean && got == bytes))
}

/// PTY throughput, rounds alternating between the servers: MB/s of the
/// complete runs, how many were complete, and CPU per MB.
async fn flood(ctx: &mut Ctx, bin: &Path, api: &Api, tetherd_pid: u32) -> Result<()> {
    let quick = ctx.report.mode == "quick";
    let (rounds, bytes) = if quick {
        (3, 4u64 << 20)
    } else {
        (8, 64u64 << 20)
    };
    let peer = Ttyd::start(bin, &flood_script(bytes))?;
    let mb = bytes as f64 / 1e6;
    let (mut ours, mut theirs) = (Vec::new(), Vec::new());
    let (mut ours_cpu, mut theirs_cpu) = (Vec::new(), Vec::new());
    let (mut ours_lost, mut theirs_lost) = (0, 0);
    for _ in 0..rounds {
        let before = spent(tetherd_pid);
        let (secs, whole) = tetherd_flood(api, bytes).await?;
        if whole {
            ours.push(mb / secs);
            ours_cpu.push((spent(tetherd_pid).cpu_s - before.cpu_s) * 1e3 / mb);
        } else {
            ours_lost += 1;
        }
        let before = spent(peer.pid());
        let (secs, whole) = ttyd_flood(&peer, bytes).await?;
        if whole {
            theirs.push(mb / secs);
            theirs_cpu.push((spent(peer.pid()).cpu_s - before.cpu_s) * 1e3 / mb);
        } else {
            theirs_lost += 1;
        }
    }
    let (ours, theirs) = (Dist::new(ours), Dist::new(theirs));
    let ratio = ours.median() / theirs.median();
    ctx.report.push(
        Figure::rate(
            "ttyd.pty.peer",
            12,
            "PTY throughput via ttyd (complete runs)",
            &theirs,
            rounds,
        )
        .note(format!(
            "{theirs_lost} of {rounds} runs lost bytes (not counted)"
        )),
    );
    ctx.report.push(
        Figure::rate(
            "ttyd.pty.tetherd",
            12,
            "PTY throughput via tetherd, block mode, same run",
            &ours,
            rounds,
        )
        .target("≥ 1.3× ttyd's (median)", ratio >= 1.3)
        .note(format!(
            "{ratio:.2}× ttyd; {ours_lost} of {rounds} runs lost bytes"
        )),
    );
    let (ours_cpu, theirs_cpu) = (Dist::new(ours_cpu), Dist::new(theirs_cpu));
    ctx.report.push(Figure::from_dist(
        "ttyd.pty.peer_cpu",
        12,
        "PTY flood: server CPU per MB, ttyd",
        "ms",
        &theirs_cpu,
        rounds,
    ));
    ctx.report.push(
        Figure::from_dist(
            "ttyd.pty.cpu",
            12,
            "PTY flood: server CPU per MB, tetherd",
            "ms",
            &ours_cpu,
            rounds,
        )
        .note(format!(
            "tetherd/ttyd {:.2}×",
            ours_cpu.median() / theirs_cpu.median().max(1e-9)
        )),
    );
    Ok(())
}

/// Section 12. Without `--ttyd` the bare relay and tetherd still run, so
/// the section says how far tetherd is from the floor; the ttyd rows, their
/// targets and the PTY flood (which needs ttyd) are left out, and a row says
/// so.
pub async fn ttyd(ctx: &mut Ctx) -> Result<()> {
    let bin = ctx.ttyd.clone();
    if bin.is_none() {
        eprintln!(
            "   ttyd rows not measured: pass --ttyd PATH (a ttyd built from its public source)"
        );
        ctx.report.push(
            Figure::single("ttyd.skipped", 12, "ttyd peer rows", "runs", 0.0)
                .note("not measured: pass --ttyd PATH (ttyd is not in Debian; build it from tsl0922/ttyd)"),
        );
    }
    let quick = ctx.report.mode == "quick";
    let (blocks, keys) = if quick { (4, 50) } else { (20, 200) };
    let server = ctx.start_server(&[])?;
    let api = Api::new(&server.base)?;
    for (kind, cooked) in [("raw", false), ("cooked", true)] {
        let request = if cooked { cooked_cat() } else { raw_cat() };
        let Some(script) = request.command.clone() else {
            bail!("the echo programs are shell commands");
        };
        let peer = bin.as_ref().map(|b| Ttyd::start(b, &script)).transpose()?;
        let info = api.spawn(&request).await?;
        let mut conn = api.attach(&info.id, "").await?;
        wait_for_output(&mut conn, b"R").await?;
        let mut ws = match &peer {
            Some(peer) => Some(peer.connect(b'R').await?),
            None => None,
        };
        let relay = if cooked {
            RelayedEcho::cooked()?
        } else {
            RelayedEcho::raw()?
        };
        let mut client = tokio::net::TcpStream::from_std(relay.async_client()?)?;
        // Warm each up, then alternate blocks: tetherd, ttyd, the bare
        // relay, tetherd, ...
        let (mut ours, mut theirs, mut floor) = (Side::default(), Side::default(), Side::default());
        for round in 0..=blocks {
            // Round 0 is the warm-up, counted nowhere.
            let mut warm = (Side::default(), Side::default(), Side::default());
            let (ours, theirs, floor) = if round == 0 {
                (&mut warm.0, &mut warm.1, &mut warm.2)
            } else {
                (&mut ours, &mut theirs, &mut floor)
            };
            tetherd_block(&mut conn, server.pid, ours, keys, cooked).await?;
            if let (Some(peer), Some(ws)) = (&peer, &mut ws) {
                ttyd_block(ws, peer.pid(), theirs, keys, cooked).await?;
            }
            relay_block(&relay, &mut client, floor, keys, cooked).await?;
        }
        api.delete(&info.id).await?;
        drop((conn, ws, peer, client, relay));
        let theirs = bin.is_some().then_some(theirs);
        report_echo(ctx, kind, ours, theirs, floor);
    }
    if let Some(bin) = &bin {
        flood(ctx, bin, &api, server.pid).await?;
    }
    server.stop();
    Ok(())
}

/// The rows of one kind of echo: the floor's, tetherd's and, when ttyd
/// ran, ttyd's with the targets against it.
fn report_echo(ctx: &mut Ctx, kind: &str, ours: Side, theirs: Option<Side>, floor: Side) {
    let floor_rtt = Dist::new(floor.rtt);
    let floor_cpu = Dist::new(floor.cpu_us);
    let floor_switches = Dist::new(floor.switches);
    let blocks = ours.cpu_us.len();
    let (our_cpu, our_switches, our_rtt) = (
        Dist::new(ours.cpu_us),
        Dist::new(ours.switches),
        Dist::new(ours.rtt),
    );
    let theirs = theirs.map(|t| (Dist::new(t.rtt), Dist::new(t.cpu_us), Dist::new(t.switches)));
    if let Some((rtt, _, _)) = &theirs {
        ctx.report.push(Figure::from_dist(
            &format!("ttyd.{kind}.peer"),
            12,
            &format!("{kind} keystroke echo via ttyd (PTY `cat`)"),
            "ms",
            rtt,
            1,
        ));
    }
    let over_floor = |d: &Dist| {
        format!(
            "median {:.2}×, p99 {:.2}× the relay",
            d.median() / floor_rtt.median().max(1e-9),
            d.p99() / floor_rtt.p99().max(1e-9)
        )
    };
    ctx.report.push(
        Figure::from_dist(
            &format!("ttyd.{kind}.relay"),
            12,
            &format!("{kind} keystroke echo through a bare TCP relay thread (no server, no WebSocket; floor)"),
            "ms",
            &floor_rtt,
            1,
        )
        .note(match &theirs {
            Some((rtt, _, _)) => format!("ttyd: {}", over_floor(rtt)),
            None => "ttyd not measured".to_string(),
        }),
    );
    let mut row = Figure::from_dist(
        &format!("ttyd.{kind}.tetherd"),
        12,
        &format!("{kind} keystroke echo via tetherd, same run"),
        "ms",
        &our_rtt,
        1,
    )
    .floor(floor_rtt.median());
    row = match &theirs {
        Some((rtt, _, _)) => {
            let median_ratio = our_rtt.median() / rtt.median();
            let p99_ratio = our_rtt.p99() / rtt.p99();
            row.target(
                "median and p99 ≤ 0.9× ttyd's",
                median_ratio <= 0.9 && p99_ratio <= 0.9,
            )
            .note(format!(
                "tetherd/ttyd: median {median_ratio:.2}×, p99 {p99_ratio:.2}×; {}",
                over_floor(&our_rtt)
            ))
        }
        None => row.note(format!("{}; no ttyd, no target", over_floor(&our_rtt))),
    };
    ctx.report.push(row);
    if let Some((_, cpu, _)) = &theirs {
        ctx.report.push(Figure::from_dist(
            &format!("ttyd.{kind}.peer_cpu"),
            12,
            &format!("{kind} echo: server CPU per keystroke, ttyd"),
            "us",
            cpu,
            blocks,
        ));
    }
    ctx.report.push(
        Figure::from_dist(
            &format!("ttyd.{kind}.relay_cpu"),
            12,
            &format!("{kind} echo: CPU per keystroke, the bare relay thread (floor)"),
            "us",
            &floor_cpu,
            blocks,
        )
        .note(format!(
            "its own thread's schedstat: a poll, a read and a write each way; {:.1} context switches per keystroke",
            floor_switches.median()
        )),
    );
    let mut row = Figure::from_dist(
        &format!("ttyd.{kind}.cpu"),
        12,
        &format!("{kind} echo: server CPU per keystroke, tetherd"),
        "us",
        &our_cpu,
        blocks,
    );
    row = match &theirs {
        Some((_, cpu, _)) => {
            let cpu_ratio = our_cpu.median() / cpu.median().max(1e-9);
            row.target("≤ ttyd's", cpu_ratio <= 1.0).note(format!(
                "medians over {blocks} blocks each; tetherd/ttyd {cpu_ratio:.2}×"
            ))
        }
        None => row.note(format!("medians over {blocks} blocks; no ttyd, no target")),
    };
    ctx.report.push(row);
    if let Some((_, _, switches)) = &theirs {
        ctx.report.push(Figure::from_dist(
            &format!("ttyd.{kind}.peer_switches"),
            12,
            &format!("{kind} echo: context switches per keystroke, ttyd"),
            "switches",
            switches,
            blocks,
        ));
    }
    ctx.report.push(
        Figure::from_dist(
            &format!("ttyd.{kind}.switches"),
            12,
            &format!("{kind} echo: context switches per keystroke, tetherd"),
            "switches",
            &our_switches,
            blocks,
        )
        .note("every thread's voluntary + involuntary switches; a voluntary one is a sleep, so a wake-up"),
    );
}
