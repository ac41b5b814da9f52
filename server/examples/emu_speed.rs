use std::time::Instant;
use tether_server::screen::{Screen, ScreenLimits};
fn main() {
    let mut line = Vec::new();
    for i in 0..2000u32 {
        line.extend_from_slice(format!("\x1b[01;34mdrwxr-xr-x\x1b[0m  2 root root  4096 Dec  6 14:{:02} \x1b[38;5;208mfile{i}.txt\x1b[0m and some plain text here\r\n", i % 60).as_bytes());
    }
    let plain: Vec<u8> = (0..2000)
        .flat_map(|i| {
            format!("plain text line number {i} with some words in it to fill a terminal row\r\n")
                .into_bytes()
        })
        .collect();
    for (name, data) in [("colour", &line), ("plain", &plain)] {
        let mut screen = Screen::new(
            80,
            24,
            ScreenLimits {
                scrollback_lines: 200,
            },
        );
        let start = Instant::now();
        let mut total = 0usize;
        while start.elapsed().as_secs_f64() < 2.0 {
            for chunk in data.chunks(65536) {
                screen.feed(chunk);
            }
            total += data.len();
        }
        let secs = start.elapsed().as_secs_f64();
        println!("{name}: {:.1} MB/s", total as f64 / secs / 1e6);
    }
}
