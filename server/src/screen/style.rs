//! What each visible cell looks like beside its character, in one written
//! form that a judge can compare with what another terminal reports
//! (`tests/tests/screen_corpus/`, where real xterm's `XTREPORTSGR` answers
//! are brought to the same form).

use std::fmt::Write as _;

use avt::{Color, Pen};

/// A pen's SGR parameters in a canonical order: the attributes by number
/// (1 bold, 2 faint, 3 italic, 4 underline, 5 blink, 7 inverse, 9
/// strikethrough), then the foreground and the background each as an
/// indexed (`38:5:N`, `48:5:N`, N 0-255 whichever way it was set) or a
/// direct colour (`38:2:R:G:B`); empty for the default pen.
pub fn canonical_sgr(pen: &Pen) -> String {
    let mut parts: Vec<String> = Vec::new();
    let flags = [
        (pen.is_bold(), 1),
        (pen.is_faint(), 2),
        (pen.is_italic(), 3),
        (pen.is_underline(), 4),
        (pen.is_blink(), 5),
        (pen.is_inverse(), 7),
        (pen.is_strikethrough(), 9),
    ];
    for (set, number) in flags {
        if set {
            parts.push(number.to_string());
        }
    }
    for (color, base) in [(pen.foreground(), 38), (pen.background(), 48)] {
        let mut part = String::new();
        match color {
            None => continue,
            Some(Color::Indexed(n)) => {
                let _ = write!(part, "{base}:5:{n}");
            }
            Some(Color::RGB(rgb)) => {
                let _ = write!(part, "{base}:2:{}:{}:{}", rgb.r, rgb.g, rgb.b);
            }
        }
        parts.push(part);
    }
    parts.join(";")
}

/// The canonical SGR of every cell of the visible rows (see
/// [`canonical_sgr`]); the second half of a wide character has its own.
pub fn visible_styles<'a>(lines: impl Iterator<Item = &'a avt::Line>) -> Vec<Vec<String>> {
    lines
        .map(|line| {
            line.cells()
                .iter()
                .map(|cell| canonical_sgr(cell.pen()))
                .collect()
        })
        .collect()
}

/// avt's dump with each SGR's intensity made absolute: avt keeps one
/// intensity, so its `1` (bold) and `2` (faint) each replace the other,
/// where in xterm (and most terminals) they add up; a dump that went from
/// a bold cell to a faint one wrote `2` alone, and a fresh xterm showed
/// that cell bold and faint. Each becomes `22;1` or `22;2`, which means
/// the same to avt. avt writes its colours as single colon-separated
/// parameters (`38:5:N`), so no other parameter is a `1` or a `2`; a
/// sequence with a semicolon-separated colour is left as it is.
pub fn absolute_intensity(dump: &str) -> std::borrow::Cow<'_, str> {
    if !dump.contains("\x1b[") {
        return std::borrow::Cow::Borrowed(dump);
    }
    let mut out = String::with_capacity(dump.len() + 64);
    let mut rest = dump;
    while let Some(at) = rest.find("\x1b[") {
        out.push_str(&rest[..at]);
        let after = &rest[at + 2..];
        let len = after
            .find(|c: char| !(c.is_ascii_digit() || c == ';' || c == ':'))
            .unwrap_or(after.len());
        let params = &after[..len];
        let plain = !params.split(';').any(|p| p == "38" || p == "48");
        if after[len..].starts_with('m') && plain {
            out.push_str("\x1b[");
            let mut first = true;
            for param in params.split(';') {
                if !first {
                    out.push(';');
                }
                first = false;
                match param {
                    "1" => out.push_str("22;1"),
                    "2" => out.push_str("22;2"),
                    other => out.push_str(other),
                }
            }
            out.push('m');
            rest = &after[len + 1..];
        } else {
            out.push_str("\x1b[");
            rest = after;
        }
    }
    out.push_str(rest);
    std::borrow::Cow::Owned(out)
}
