//! The screen's emulator alone, in process (docs/BENCHMARKS.md, "Terminal
//! screen emulator"): `cargo run --release -p tether-server --example
//! emulator_speed`. Feeds an 80x24 `Screen` with 200 lines of scrollback,
//! in 64 KiB chunks for two seconds each: coloured `ls -l`-like lines,
//! plain text lines, and a full-screen program's redraws (cursor moves and
//! colours on the alternate screen).

use std::time::Instant;

use tether_server::screen::{Screen, ScreenLimits};

fn coloured() -> Vec<u8> {
    (0..2000u32)
        .flat_map(|i| {
            format!(
                "\x1b[01;34mdrwxr-xr-x\x1b[0m  2 root root  4096 Dec  6 14:{:02} \x1b[38;5;208mfile{i}.txt\x1b[0m and some plain text\r\n",
                i % 60
            )
            .into_bytes()
        })
        .collect()
}

fn plain() -> Vec<u8> {
    (0..2000u32)
        .flat_map(|i| {
            format!("plain text line number {i} with some words in it to fill a row\r\n")
                .into_bytes()
        })
        .collect()
}

fn redraws() -> Vec<u8> {
    let mut out = b"\x1b[?1049h".to_vec();
    for frame in 0..200u32 {
        for row in 1..=24u32 {
            out.extend_from_slice(
                format!(
                    "\x1b[{row};1H\x1b[3{}m{:>6} \x1b[1mPID USER  {frame:>4}%\x1b[0m \x1b[7mcommand line\x1b[27m\x1b[K",
                    row % 8,
                    row * frame
                )
                .as_bytes(),
            );
        }
    }
    out
}

fn main() {
    for (name, data) in [
        ("coloured lines", coloured()),
        ("plain lines", plain()),
        ("redraws", redraws()),
    ] {
        let limits = ScreenLimits {
            scrollback_lines: 200,
        };
        let mut screen = Screen::new(80, 24, limits);
        let start = Instant::now();
        let mut total = 0usize;
        while start.elapsed().as_secs_f64() < 2.0 {
            for chunk in data.chunks(65536) {
                screen.feed(chunk);
            }
            total += data.len();
        }
        let rate = total as f64 / start.elapsed().as_secs_f64() / 1e6;
        println!("{name}: {rate:.0} MB/s");
    }
}
