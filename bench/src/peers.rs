//! Section 9: tetherd next to websocketd (Debian's `websocketd`), the usual
//! way to put a program's pipes on a WebSocket, on the same work in the same
//! run: output throughput with every byte checked, `true` from request to
//! "it ended", and a line echoed through `cat`.
//!
//! websocketd runs one program per connection and ends the connection when
//! it exits; in its default (line) mode every stdout line is a text message
//! and every message a stdin line, in `--binary` mode every read of stdout is
//! a binary message. Both servers run the same executables (scripts written
//! to a temporary directory, served by websocketd with `--dir`), both are
//! driven by tokio-tungstenite from this process, and the runs alternate.

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use futures_util::{SinkExt, StreamExt};
use tether_protocol::api::SpawnRequest;
use tether_protocol::{ClientFrame, Overflow, ServerFrame};
use tokio_tungstenite::tungstenite::error::ProtocolError;
use tokio_tungstenite::tungstenite::protocol::WebSocketConfig;
use tokio_tungstenite::tungstenite::{Error as WsError, Message};

use crate::client::{argv, Api, Conn, Ws};
use crate::ctx::Ctx;
use crate::report::Figure;
use crate::stats::Dist;
use crate::tetherd::{dies_with_harness, spent};

/// Bytes a `base64 -w 76` line encodes: 57 in, 76 out plus a newline.
const LINE_IN: u64 = 57;
const LINE_OUT: u64 = 77;
/// Per-stream retention of the tetherd runs (as in section 3).
const RETAIN: u64 = 8 << 20;
const BOUND: Duration = Duration::from_secs(120);

/// A websocketd serving the scripts of `dir` on 127.0.0.1, stopped on drop.
struct Websocketd {
    child: Child,
    base: String,
}

impl Websocketd {
    fn start(dir: &Path, binary: bool) -> Result<Websocketd> {
        let port = free_port()?;
        let mut cmd = Command::new("websocketd");
        cmd.arg("--address=127.0.0.1")
            .arg(format!("--port={port}"))
            .arg(format!("--dir={}", dir.display()))
            // Its default `access` level logs every connection; quieter is
            // faster, so this favours the peer.
            .arg("--loglevel=error");
        if binary {
            cmd.arg("--binary");
        }
        cmd.stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        dies_with_harness(&mut cmd);
        let child = cmd
            .spawn()
            .context("start websocketd (apt-get install websocketd)")?;
        let peer = Websocketd {
            child,
            base: format!("ws://127.0.0.1:{port}"),
        };
        wait_listening("websocketd", port)?;
        eprintln!(
            "   websocketd pid {} on {}{}",
            peer.child.id(),
            peer.base,
            if binary { " (--binary)" } else { "" }
        );
        Ok(peer)
    }

    async fn connect(&self, script: &str) -> Result<Ws> {
        let config = WebSocketConfig::default()
            .read_buffer_size(crate::client::READ_BUFFER)
            .max_message_size(Some(64 << 20));
        let url = format!("{}/{script}", self.base);
        let (ws, _) =
            tokio_tungstenite::connect_async_with_config(url.as_str(), Some(config), true)
                .await
                .with_context(|| format!("connect {url}"))?;
        Ok(ws)
    }
}

/// The next message from websocketd; `None` once it ended the connection,
/// with a Close or (as it may when its program exits) by closing the TCP
/// connection without one.
async fn next_message(ws: &mut Ws) -> Result<Option<Message>> {
    match tokio::time::timeout(BOUND, ws.next()).await {
        Err(_) => bail!("websocketd sent nothing for {BOUND:?}"),
        Ok(None) | Ok(Some(Ok(Message::Close(_)))) => Ok(None),
        Ok(Some(Err(WsError::Protocol(ProtocolError::ResetWithoutClosingHandshake)))) => Ok(None),
        Ok(Some(Err(e))) => Err(e.into()),
        Ok(Some(Ok(msg))) => Ok(Some(msg)),
    }
}

impl Drop for Websocketd {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A port nobody listens on right now (bound, read and released).
pub(crate) fn free_port() -> Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

/// Waits (at most 10 s) until a peer server `name` accepts on loopback
/// `port`.
pub(crate) fn wait_listening(name: &str, port: u16) -> Result<()> {
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let deadline = Instant::now() + Duration::from_secs(10);
    while TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_err() {
        if Instant::now() > deadline {
            bail!("{name} did not listen on {addr} within 10 s");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok(())
}

/// The executables both servers run.
struct Scripts {
    dir: PathBuf,
    zero_bytes: u64,
    lines: u64,
}

impl Scripts {
    fn write(zero_bytes: u64, lines: u64) -> Result<Scripts> {
        let dir = std::env::temp_dir().join(format!("tether-bench-{}-peers", std::process::id()));
        std::fs::create_dir_all(&dir)?;
        let script = |name: &str, body: String| -> Result<()> {
            let path = dir.join(name);
            std::fs::write(&path, format!("#!/bin/sh\n{body}\n"))?;
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755))?;
            Ok(())
        };
        script("zeros", format!("exec head -c {zero_bytes} /dev/zero"))?;
        script(
            "lines",
            format!("head -c {} /dev/zero | base64 -w 76", lines * LINE_IN),
        )?;
        script("true", "exec true".into())?;
        script("cat", "exec cat".into())?;
        Ok(Scripts {
            dir,
            zero_bytes,
            lines,
        })
    }

    fn path(&self, name: &str) -> String {
        self.dir.join(name).display().to_string()
    }
}

impl Drop for Scripts {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Which output a throughput run carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Work {
    /// `head -c N /dev/zero`: websocketd `--binary`.
    Zeros,
    /// `base64 -w 76` lines of zeros: websocketd's line mode.
    Lines,
}

/// The byte expected at absolute `offset` of the `lines` output.
fn line_byte(offset: u64) -> u8 {
    if offset % LINE_OUT == LINE_OUT - 1 {
        b'\n'
    } else {
        b'A'
    }
}

/// The script through tetherd (pipes, block mode, no window), every offset
/// and byte checked; seconds from the POST to the exit frame.
async fn tetherd_output(api: &Api, s: &Scripts, work: Work) -> Result<f64> {
    let (name, total) = match work {
        Work::Zeros => ("zeros", s.zero_bytes),
        Work::Lines => ("lines", s.lines * LINE_OUT),
    };
    let mut req = argv(&[&s.path(name)]);
    req.retain_bytes = Some(RETAIN);
    req.overflow = Overflow::Block;
    let t0 = Instant::now();
    let info = api.spawn(&req).await?;
    let mut conn = api.attach(&info.id, "").await?;
    let mut next = conn.hello.1;
    let exit = loop {
        match conn.next_within(BOUND).await? {
            ServerFrame::Stdout { offset, data } => {
                if offset != next {
                    bail!("stdout frame at {offset}, expected {next}");
                }
                let good = match work {
                    Work::Zeros => crate::ctx::all_zero(&data),
                    Work::Lines => data
                        .iter()
                        .enumerate()
                        .all(|(i, &b)| b == line_byte(offset + i as u64)),
                };
                if !good {
                    bail!("unexpected bytes in the stdout frame at {offset}");
                }
                next += data.len() as u64;
            }
            ServerFrame::Exit { process } => break process,
            other => bail!("unexpected frame {other:?}"),
        }
    };
    let secs = t0.elapsed().as_secs_f64();
    conn.close().await;
    if next != total || exit.stdout_bytes != total {
        bail!(
            "tetherd delivered {next} bytes, exit says {}, expected {total}",
            exit.stdout_bytes
        );
    }
    Ok(secs)
}

/// The script through websocketd, every message checked; seconds from the
/// connect to the close.
async fn websocketd_output(peer: &Websocketd, s: &Scripts, work: Work) -> Result<f64> {
    let t0 = Instant::now();
    let (name, want) = match work {
        Work::Zeros => ("zeros", s.zero_bytes),
        Work::Lines => ("lines", s.lines),
    };
    let mut ws = peer.connect(name).await?;
    let mut got = 0u64;
    while let Some(msg) = next_message(&mut ws).await? {
        match (work, msg) {
            (Work::Zeros, Message::Binary(data)) => {
                if !crate::ctx::all_zero(&data) {
                    bail!("unexpected bytes from websocketd at {got}");
                }
                got += data.len() as u64;
            }
            (Work::Lines, Message::Text(line)) => {
                if line.len() != 76 || !line.bytes().all(|b| b == b'A') {
                    bail!("unexpected line {got} from websocketd: {:?}", line.as_str());
                }
                got += 1;
            }
            (_, Message::Ping(_) | Message::Pong(_)) => {}
            (_, other) => bail!("unexpected message from websocketd: {other:?}"),
        }
    }
    let secs = t0.elapsed().as_secs_f64();
    if got != want {
        bail!("websocketd delivered {got}, expected {want}");
    }
    Ok(secs)
}

/// `true` via tetherd: POST, attach, until the exit frame; ms.
async fn tetherd_true(api: &Api, s: &Scripts) -> Result<f64> {
    let t0 = Instant::now();
    let info = api.spawn(&argv(&[&s.path("true")])).await?;
    let mut conn = api.attach(&info.id, "").await?;
    loop {
        if let ServerFrame::Exit { .. } = conn.next_within(BOUND).await? {
            break;
        }
    }
    let ms = t0.elapsed().as_secs_f64() * 1e3;
    conn.close().await;
    Ok(ms)
}

/// `true` via websocketd: connect until the server closes; ms.
async fn websocketd_true(peer: &Websocketd) -> Result<f64> {
    let t0 = Instant::now();
    let mut ws = peer.connect("true").await?;
    for _ in 0..1000 {
        if next_message(&mut ws).await?.is_none() {
            return Ok(t0.elapsed().as_secs_f64() * 1e3);
        }
    }
    bail!("websocketd sent 1000 messages for `true`")
}

/// A tetherd `cat` on pipes, attached.
async fn tetherd_cat(api: &Api, s: &Scripts) -> Result<(String, Conn)> {
    let mut req: SpawnRequest = argv(&[&s.path("cat")]);
    req.stdin = true;
    let info = api.spawn(&req).await?;
    let conn = api.attach(&info.id, "").await?;
    Ok((info.id, conn))
}

/// One line through tetherd's `cat`: a stdin frame until it is back; ms.
async fn tetherd_echo(conn: &mut Conn, line: &str) -> Result<f64> {
    let t0 = Instant::now();
    let want = format!("{line}\n");
    conn.send(&ClientFrame::Stdin {
        data: want.clone().into_bytes(),
    })
    .await?;
    let mut seen = Vec::new();
    while seen.len() < want.len() {
        match conn.next_within(BOUND).await? {
            ServerFrame::Stdout { data, .. } => seen.extend_from_slice(&data),
            ServerFrame::Exit { .. } => bail!("cat exited during echo"),
            _ => {}
        }
    }
    if seen != want.as_bytes() {
        bail!("tetherd echoed {seen:?}, sent {want:?}");
    }
    Ok(t0.elapsed().as_secs_f64() * 1e3)
}

/// One line through websocketd's `cat`: a text message until it is back; ms.
async fn websocketd_echo(ws: &mut Ws, line: &str) -> Result<f64> {
    let t0 = Instant::now();
    ws.send(Message::Text(line.into())).await?;
    loop {
        match next_message(ws).await? {
            None => bail!("websocketd closed during echo"),
            Some(Message::Text(back)) if back.as_str() == line => {
                return Ok(t0.elapsed().as_secs_f64() * 1e3)
            }
            Some(Message::Text(back)) => bail!("websocketd echoed {back:?}, sent {line:?}"),
            Some(_) => {}
        }
    }
}

/// The bare relays of [`crate::floors::pipe_relay`], without and with a
/// retention ring, run in turn with the servers.
#[derive(Default)]
struct Relays {
    /// MB/s and CPU ms per MB, per run: bare, then with a ring.
    rates: [Vec<f64>; 2],
    cpu_s: [Vec<f64>; 2],
}

impl Relays {
    async fn run(&mut self, bytes: u64) -> Result<()> {
        // tetherd's default `retain_bytes`: its ring file per stream.
        for (i, ring) in [None, Some(64u64 << 20)].into_iter().enumerate() {
            let r = tokio::task::spawn_blocking(move || crate::floors::pipe_relay(bytes, ring))
                .await?
                .context("the bare relay")?;
            self.rates[i].push(mbps(bytes, r.secs));
            self.cpu_s[i].push(r.cpu_s);
        }
        Ok(())
    }

    /// Pushes the relays' rows (nothing if none ran); returns the CPU per
    /// MB of the relay with a ring, tetherd's floor.
    fn report(
        self,
        ctx: &mut Ctx,
        label: &str,
        mb: f64,
        runs: usize,
        websocketd_cpu: &Dist,
    ) -> Option<f64> {
        if self.rates[0].is_empty() {
            return None;
        }
        let names = [
            (
                "relay",
                "a bare relay (pipe to TCP, no framing, no retention)",
            ),
            (
                "relay_ring",
                "the bare relay also writing a 64 MiB ring file",
            ),
        ];
        let mut cpu_per_mb = [0.0; 2];
        for (i, (key, what)) in names.into_iter().enumerate() {
            let cpu = Dist::new(self.cpu_s[i].iter().map(|s| s * 1e3 / mb).collect());
            let rate = Dist::new(self.rates[i].clone());
            let ratio = cpu.median() / websocketd_cpu.median().max(1e-9);
            ctx.report.push(
                Figure::from_dist(
                    &format!("peers.cpu.zeros.{key}"),
                    9,
                    &format!("{label}: CPU per MB, {what} (floor)"),
                    "ms",
                    &cpu,
                    runs,
                )
                .note(format!(
                    "{ratio:.2}× websocketd's; its own thread's schedstat"
                )),
            );
            ctx.report.push(
                Figure::rate(
                    &format!("peers.throughput.zeros.{key}"),
                    9,
                    &format!("{label}: {what} (floor)"),
                    &rate,
                    runs,
                )
                .note(spread(&rate, "MB/s")),
            );
            cpu_per_mb[i] = cpu.median();
        }
        Some(cpu_per_mb[1])
    }
}

fn mbps(bytes: u64, secs: f64) -> f64 {
    bytes as f64 / secs / 1e6
}

/// The two rows of one comparison: websocketd's, then tetherd's with its
/// ratio against the target (`target` times websocketd; 1.0 if none).
#[allow(clippy::too_many_arguments)]
fn push_pair(
    ctx: &mut Ctx,
    key: &str,
    what: &str,
    unit: &str,
    ours: &Dist,
    theirs: &Dist,
    runs: usize,
    target: Option<f64>,
) {
    ctx.report.push(
        peer_figure(
            format!("peers.{key}.websocketd"),
            format!("{what}: websocketd"),
            unit,
            theirs,
            runs,
        )
        .note(spread(theirs, unit)),
    );
    let side = Side {
        key: format!("peers.{key}.tetherd"),
        name: format!("{what}: tetherd"),
    };
    push_ours(ctx, side, unit, ours, theirs, runs, target.unwrap_or(1.0));
}

/// A tetherd row's id and name.
struct Side {
    key: String,
    name: String,
}

/// One tetherd row against websocketd's figures: the ratio (how many times
/// better, whichever way "better" points) against `need`.
fn push_ours(
    ctx: &mut Ctx,
    side: Side,
    unit: &str,
    ours: &Dist,
    theirs: &Dist,
    runs: usize,
    need: f64,
) {
    let ratio = if unit == "MB/s" {
        ours.median() / theirs.median()
    } else {
        theirs.median() / ours.median()
    };
    ctx.report.push(
        peer_figure(side.key, side.name, unit, ours, runs)
            .target(&format!("≥ {need:.1}× websocketd (median)"), ratio >= need)
            .note(format!("{ratio:.2}× websocketd; {}", spread(ours, unit))),
    );
}

fn peer_figure(id: String, name: String, unit: &str, d: &Dist, runs: usize) -> Figure {
    if unit == "MB/s" {
        Figure::rate(&id, 9, &name, d, runs)
    } else {
        Figure::from_dist(&id, 9, &name, unit, d, runs)
    }
}

fn spread(d: &Dist, unit: &str) -> String {
    format!(
        "spread {} – {}",
        crate::report::fmt_value(d.min(), unit),
        crate::report::fmt_value(d.max(), unit)
    )
}

/// Section 9.
pub async fn peers(ctx: &mut Ctx) -> Result<()> {
    let quick = ctx.report.mode == "quick";
    let (zero_bytes, lines, runs, samples) = if quick {
        (16u64 << 20, 100_000u64, 2usize, 30usize)
    } else {
        (256 << 20, 1_500_000, 5, 300)
    };
    let scripts = Scripts::write(zero_bytes, lines)?;
    let server = ctx.start_server(&[])?;
    let api = Api::new(&server.base)?;
    // The same work through a server that, like websocketd, keeps nothing
    // on disk: what exact retention costs, apart from the rest.
    let lean = ctx.start_server(&["--memory-only".to_string()])?;
    let lean_api = Api::new(&lean.base)?;
    let binary = Websocketd::start(&scripts.dir, true)?;
    let text = Websocketd::start(&scripts.dir, false)?;

    // Throughput, interleaved: tetherd, websocketd, tetherd, ...
    for work in [Work::Zeros, Work::Lines] {
        let (bytes, peer, label, key) = match work {
            Work::Zeros => (
                zero_bytes,
                &binary,
                format!(
                    "{} MiB `head -c N /dev/zero` (websocketd --binary)",
                    zero_bytes >> 20
                ),
                "zeros",
            ),
            Work::Lines => (
                lines * LINE_OUT,
                &text,
                format!(
                    "{:.0} MB of `base64 -w 76` lines (websocketd line mode)",
                    (lines * LINE_OUT) as f64 / 1e6
                ),
                "lines",
            ),
        };
        // One warm-up each.
        tetherd_output(&api, &scripts, work).await?;
        websocketd_output(peer, &scripts, work).await?;
        let (mut ours, mut theirs) = (Vec::new(), Vec::new());
        let (mut ours_cpu, mut theirs_cpu) = (Vec::new(), Vec::new());
        let mut relays = Relays::default();
        let (mut lean_cpu, mut lean_rates) = (Vec::new(), Vec::new());
        let mb = bytes as f64 / 1e6;
        for _ in 0..runs {
            if matches!(work, Work::Zeros) {
                relays.run(bytes).await?;
                let cpu = spent(lean.pid).cpu_s;
                let t = tetherd_output(&lean_api, &scripts, work)
                    .await
                    .context("tetherd --memory-only, zeros")?;
                lean_cpu.push((spent(lean.pid).cpu_s - cpu) * 1e3 / mb);
                lean_rates.push(mbps(bytes, t));
            }
            let cpu = spent(server.pid).cpu_s;
            let t = tetherd_output(&api, &scripts, work)
                .await
                .with_context(|| format!("tetherd, {key}"))?;
            ours_cpu.push((spent(server.pid).cpu_s - cpu) * 1e3 / mb);
            ours.push(mbps(bytes, t));
            let cpu = spent(peer.child.id()).cpu_s;
            let w = websocketd_output(peer, &scripts, work)
                .await
                .with_context(|| format!("websocketd, {key}"))?;
            theirs_cpu.push((spent(peer.child.id()).cpu_s - cpu) * 1e3 / mb);
            theirs.push(mbps(bytes, w));
        }
        let (ours_cpu, theirs_cpu) = (Dist::new(ours_cpu), Dist::new(theirs_cpu));
        let cpu_ratio = ours_cpu.median() / theirs_cpu.median().max(1e-9);
        let relay_floor = relays.report(ctx, &label, mb, runs, &theirs_cpu);
        ctx.report.push(Figure::from_dist(
            &format!("peers.cpu.{key}.websocketd"),
            9,
            &format!("{label}: server CPU per MB, websocketd"),
            "ms",
            &theirs_cpu,
            runs,
        ));
        let mut note = format!("tetherd/websocketd {cpu_ratio:.2}× (every thread's schedstat; the programs' own CPU is neither's)");
        let mut cpu_row = Figure::from_dist(
            &format!("peers.cpu.{key}.tetherd"),
            9,
            &format!("{label}: server CPU per MB, tetherd"),
            "ms",
            &ours_cpu,
            runs,
        )
        .target("≤ 0.5× websocketd's (median)", cpu_ratio <= 0.5);
        if let Some(floor) = relay_floor {
            let to_floor = ours_cpu.median() / floor.max(1e-9);
            note += &format!("; {to_floor:.2}× the bare relay with a retention ring");
            cpu_row = cpu_row.floor(floor);
        }
        let cpu_row = cpu_row.note(note);
        ctx.report.push(cpu_row);
        if !lean_cpu.is_empty() {
            let lean_cpu = Dist::new(lean_cpu);
            let ratio = lean_cpu.median() / theirs_cpu.median().max(1e-9);
            ctx.report.push(
                Figure::from_dist(
                    &format!("peers.cpu.{key}.tetherd_memory_only"),
                    9,
                    &format!("{label}: server CPU per MB, tetherd --memory-only"),
                    "ms",
                    &lean_cpu,
                    runs,
                )
                .target("≤ 0.5× websocketd's (median)", ratio <= 0.5)
                .note(format!(
                    "tetherd/websocketd {ratio:.2}×, neither keeping the bytes on disk"
                )),
            );
            let side = Side {
                key: format!("peers.throughput.{key}.tetherd_memory_only"),
                name: format!("{label}: tetherd --memory-only"),
            };
            let theirs = Dist::new(theirs.clone());
            push_ours(
                ctx,
                side,
                "MB/s",
                &Dist::new(lean_rates),
                &theirs,
                runs,
                1.6,
            );
        }
        push_pair(
            ctx,
            &format!("throughput.{key}"),
            &label,
            "MB/s",
            &Dist::new(ours),
            &Dist::new(theirs),
            runs,
            Some(1.6),
        );
    }

    // `true`, alternating.
    for _ in 0..5 {
        tetherd_true(&api, &scripts).await?;
        websocketd_true(&text).await?;
    }
    let (mut ours, mut theirs, mut one) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..samples {
        ours.push(tetherd_true(&api, &scripts).await?);
        theirs.push(websocketd_true(&text).await?);
        one.push(crate::latency::run_true(&api, &scripts.path("true")).await?);
    }
    let (ours, theirs, one) = (Dist::new(ours), Dist::new(theirs), Dist::new(one));
    push_pair(
        ctx,
        "true",
        "`true` until the client knows it ended",
        "ms",
        &ours,
        &theirs,
        samples,
        None,
    );
    // The same with spawn and attach in one WebSocket, as websocketd's
    // one connection is.
    let side = Side {
        key: "peers.true.tetherd_run".into(),
        name: "`true` until the client knows it ended: tetherd, one WebSocket (GET /v1/run)".into(),
    };
    push_ours(ctx, side, "ms", &one, &theirs, samples, 1.0);
    ctx.report
        .series
        .insert("`true` via tetherd: GET /v1/run→exit frame".into(), one);
    ctx.report
        .series
        .insert("`true` via websocketd: connect→close".into(), theirs);
    ctx.report
        .series
        .insert("`true` via tetherd: POST→exit frame (peers)".into(), ours);

    // A line through `cat` on pipes, alternating between two live sessions.
    let (id, mut conn) = tetherd_cat(&api, &scripts).await?;
    let mut ws = text.connect("cat").await?;
    let rounds = samples * 10;
    let (mut ours, mut theirs) = (Vec::new(), Vec::new());
    for i in 0..(rounds + 50) {
        let line = format!("line {i} of the echo through cat");
        let (t, w) = (
            tetherd_echo(&mut conn, &line).await?,
            websocketd_echo(&mut ws, &line).await?,
        );
        if i >= 50 {
            ours.push(t);
            theirs.push(w);
        }
    }
    api.delete(&id).await?;
    conn.close().await;
    let _ = ws.close(None).await;
    let (ours, theirs) = (Dist::new(ours), Dist::new(theirs));
    push_pair(
        ctx,
        "echo",
        "one line through `cat` on pipes, round trip",
        "ms",
        &ours,
        &theirs,
        1,
        None,
    );
    ctx.report
        .series
        .insert("pipe `cat` line echo via websocketd".into(), theirs);
    ctx.report
        .series
        .insert("pipe `cat` line echo via tetherd".into(), ours);
    drop((binary, text));
    lean.stop();
    server.stop();
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn line_bytes_follow_base64_w76_of_zeros() {
        let mut expected = "A".repeat(76);
        expected.push('\n');
        let got: Vec<u8> = (0..LINE_OUT).map(line_byte).collect();
        assert_eq!(got, expected.as_bytes());
        assert_eq!(line_byte(LINE_OUT), b'A');
    }
}
