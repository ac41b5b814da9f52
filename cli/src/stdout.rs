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

/// `text` (from the server, or from a program through it) with every
/// control character made visible as an escape (`\u{1b}`, `\n`), so that
/// printing it cannot move the cursor, set the title, write the clipboard
/// (OSC 52) or clear the screen of the terminal tether runs in.
pub fn visible(text: &str) -> std::borrow::Cow<'_, str> {
    if !text.chars().any(char::is_control) {
        return std::borrow::Cow::Borrowed(text);
    }
    let mut shown = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        if c.is_control() {
            shown.extend(c.escape_default());
        } else {
            shown.push(c);
        }
    }
    std::borrow::Cow::Owned(shown)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_characters_are_shown_not_obeyed() {
        assert_eq!(visible("plain text"), "plain text");
        assert_eq!(
            visible("\u{1b}]0;owned\u{7}\u{1b}]52;c;eA==\u{7}\u{1b}[2J\r\n\u{9b}x"),
            "\\u{1b}]0;owned\\u{7}\\u{1b}]52;c;eA==\\u{7}\\u{1b}[2J\\r\\n\\u{9b}x"
        );
    }
}
