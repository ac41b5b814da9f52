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
