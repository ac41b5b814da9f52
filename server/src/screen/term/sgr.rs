//! SGR: the pen's colours and attributes, in both the colon form
//! (`38:2::R:G:B`, `4:3`) and the semicolon form (`38;5;N`).

use super::cell::{attr, Color, Pen};
use super::parser::Params;
use super::Terminal;

impl Terminal {
    pub(super) fn sgr(&mut self, params: &Params) {
        let pen = &mut self.cursor.pen;
        if params.is_empty() {
            reset(pen);
            return;
        }
        let groups: Vec<&[u16]> = params.groups().collect();
        let mut i = 0;
        while i < groups.len() {
            let group = groups[i];
            i += 1;
            match group[0] {
                0 => reset(pen),
                1 => pen.set(attr::BOLD, true),
                2 => pen.set(attr::FAINT, true),
                3 => pen.set(attr::ITALIC, true),
                4 => pen.set_underline(match group.get(1) {
                    Some(&style) => style,
                    None => 1,
                }),
                5 | 6 => pen.set(attr::BLINK, true),
                7 => pen.set(attr::INVERSE, true),
                8 => pen.set(attr::INVISIBLE, true),
                9 => pen.set(attr::STRIKE, true),
                21 => pen.set_underline(2),
                22 => {
                    pen.set(attr::BOLD, false);
                    pen.set(attr::FAINT, false);
                }
                23 => pen.set(attr::ITALIC, false),
                24 => pen.set_underline(0),
                25 => pen.set(attr::BLINK, false),
                27 => pen.set(attr::INVERSE, false),
                28 => pen.set(attr::INVISIBLE, false),
                29 => pen.set(attr::STRIKE, false),
                n @ 30..=37 => pen.fg = Color::Indexed((n - 30) as u8),
                39 => pen.fg = Color::Default,
                n @ 40..=47 => pen.bg = Color::Indexed((n - 40) as u8),
                49 => pen.bg = Color::Default,
                59 => pen.underline_color = Color::Default,
                n @ 90..=97 => pen.fg = Color::Indexed((n - 90 + 8) as u8),
                n @ 100..=107 => pen.bg = Color::Indexed((n - 100 + 8) as u8),
                which @ (38 | 48 | 58) => {
                    let color = if group.len() > 1 {
                        colon_color(&group[1..])
                    } else {
                        // Semicolon form: the next parameters.
                        let (color, used) = semicolon_color(&groups[i..]);
                        i += used;
                        color
                    };
                    if let Some(color) = color {
                        match which {
                            38 => pen.fg = color,
                            48 => pen.bg = color,
                            _ => pen.underline_color = color,
                        }
                    }
                }
                _ => {}
            }
        }
    }
}

fn reset(pen: &mut Pen) {
    let protected = pen.has(attr::PROTECTED);
    *pen = Pen::default();
    pen.set(attr::PROTECTED, protected);
}

fn byte(v: u16) -> u8 {
    u8::try_from(v).unwrap_or(u8::MAX)
}

/// `5:N` or `2:[space]:R:G:B` (the colour space may be left out).
fn colon_color(args: &[u16]) -> Option<Color> {
    match args {
        [5, n, ..] => Some(Color::Indexed(byte(*n))),
        [2, _, r, g, b, ..] => Some(Color::Rgb(byte(*r), byte(*g), byte(*b))),
        [2, r, g, b] => Some(Color::Rgb(byte(*r), byte(*g), byte(*b))),
        _ => None,
    }
}

/// `;5;N` or `;2;R;G;B`, with how many parameters it took.
fn semicolon_color(rest: &[&[u16]]) -> (Option<Color>, usize) {
    let first = |i: usize| rest.get(i).map(|g| g[0]);
    match first(0) {
        Some(5) => match first(1) {
            Some(n) => (Some(Color::Indexed(byte(n))), 2),
            None => (None, 1),
        },
        Some(2) => match (first(1), first(2), first(3)) {
            (Some(r), Some(g), Some(b)) => (Some(Color::Rgb(byte(r), byte(g), byte(b))), 4),
            _ => (None, rest.len()),
        },
        _ => (None, 0),
    }
}
