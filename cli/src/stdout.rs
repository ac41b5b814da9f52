//! Printing to the CLI's own stdout.

/// Writes `text` and a newline to stdout. A closed stdout (`tether ps |
/// head -1`) is no failure: the reader has what it wanted, and the rest is
/// dropped quietly (no panic, the command's own exit status).
pub fn print_line(text: &str) {
    use std::io::Write as _;
    let mut out = std::io::stdout().lock();
    if let Err(e) = writeln!(out, "{text}").and_then(|()| out.flush()) {
        if e.kind() != std::io::ErrorKind::BrokenPipe {
            eprintln!("tether: cannot write to stdout: {e}");
        }
    }
}
