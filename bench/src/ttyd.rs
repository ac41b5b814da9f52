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

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Instant;

use anyhow::{bail, Context, Result};
use futures_util::{SinkExt, StreamExt};
use tokio_tungstenite::tungstenite::Message;

use crate::client::{Api, Conn, Ws};
use crate::ctx::Ctx;
use crate::echo_report::{report_echo, Side, Sides};
use crate::floors::RelayedEcho;
use crate::latency::{cooked_cat, echo_round, raw_cat, wait_for_output};
use crate::peers::{free_port, wait_listening};
use crate::report::Figure;
use crate::stats::Dist;
use crate::tetherd::{dies_with_harness, spent, Spent};
use crate::tokio_echo::TokioEcho;
use crate::ttyd_protocol::{open_tty, ttyd_round, until_output, FRAME_WAIT};

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
        dies_with_harness(&mut cmd);
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

    /// [`open_tty`] (ttyd starts its program now), then the program's
    /// first output (`marker`).
    async fn connect(&self, marker: u8) -> Result<Ws> {
        let mut ws = open_tty(&self.url).await?;
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
        side.push(echo_round(conn, b'a' + (i % 26) as u8).await?);
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

/// A block of keystrokes in ttyd's protocol (to ttyd, or to the tokio
/// floor), `spent` reading the server's CPU time.
async fn ttyd_block(
    ws: &mut Ws,
    spent: impl Fn() -> Spent,
    side: &mut Side,
    keys: usize,
    cooked: bool,
) -> Result<()> {
    let before = spent();
    for i in 0..keys {
        side.push(ttyd_round(ws, b'a' + (i % 26) as u8).await?);
        if cooked && (i + 1) % COOKED_LINE == 0 {
            ws.send(Message::Binary(vec![b'0', b'\r'].into())).await?;
            until_output(ws, b'\n').await?;
        }
    }
    side.block(before, spent(), keys);
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
        side.push(t0.elapsed().as_secs_f64() * 1e3);
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
    let mut ws = open_tty(&ttyd.url).await?;
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
        let tokio_floor = if cooked {
            TokioEcho::cooked()?
        } else {
            TokioEcho::raw()?
        };
        let mut tokio_ws = open_tty(tokio_floor.url()).await?;
        // Warm each up, then alternate blocks: tetherd, ttyd, the bare
        // relay, the tokio floor, tetherd, ...
        let mut sides = Sides::default();
        for round in 0..=blocks {
            // Round 0 is the warm-up, counted nowhere.
            let mut warm = Sides::default();
            let sides = if round == 0 { &mut warm } else { &mut sides };
            tetherd_block(&mut conn, server.pid, &mut sides.ours, keys, cooked).await?;
            if let (Some(peer), Some(ws)) = (&peer, &mut ws) {
                let pid = peer.pid();
                ttyd_block(ws, || spent(pid), &mut sides.theirs, keys, cooked).await?;
            }
            relay_block(&relay, &mut client, &mut sides.relay, keys, cooked).await?;
            let tokio_spent = || tokio_floor.spent();
            ttyd_block(&mut tokio_ws, tokio_spent, &mut sides.tokio, keys, cooked).await?;
        }
        api.delete(&info.id).await?;
        drop((conn, ws, peer, client, relay, tokio_ws, tokio_floor));
        report_echo(ctx, kind, sides, bin.is_some());
    }
    if let Some(bin) = &bin {
        flood(ctx, bin, &api, server.pid).await?;
    }
    server.stop();
    Ok(())
}
