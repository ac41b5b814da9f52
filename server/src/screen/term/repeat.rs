//! REP (`CSI n b`) cut to what can still be seen: a repeat of 65,535
//! characters costs at most a screen and its scrollback of prints.

/// The repeat count that leaves the emulator exactly as `count` would,
/// at most one screen and its scrollback of printed cells (plus a line).
///
/// A repeat prints one character `count` times. Once it has printed
/// enough to scroll every line that was there out of the screen and the
/// scrollback (a wide character does not write a line's last column), each
/// further line's worth of prints scrolls one identical
/// line in and one out: nothing changes but the cursor's place in its
/// line, which repeats every `per_line` prints (`cols` for a narrow
/// character, `cols / 2` for a wide one, one column then left unused).
/// So any count past that fill that agrees with `count` modulo `per_line`
/// gives the same screen, scrollback and cursor. With auto-wrap off the
/// cursor stays in the last column and the fill is one line: the same
/// bound holds.
pub fn repeat_count(count: u16, cols: u16, rows: u16, wide: bool, scrollback_lines: usize) -> u16 {
    let cols = u64::from(cols.max(1));
    let per_line = if wide { (cols / 2).max(1) } else { cols };
    // A wide character leaves a line's last column as it was: every line
    // that was there must scroll out of the screen and the scrollback, not
    // only be written over (the cursor may start on the top row).
    let lines = 2 * u64::from(rows.max(1)) + scrollback_lines as u64 + 2;
    let fill = per_line.saturating_mul(lines);
    let count64 = u64::from(count);
    if count64 <= fill {
        return count;
    }
    let reduced = fill + (count64 - fill) % per_line;
    // Smaller than `count`, which is a u16.
    u16::try_from(reduced).unwrap_or(count)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_repeat_is_cut_to_the_fill_and_keeps_its_place_in_the_line() {
        // 4 columns, 2 rows, 3 scrollback lines: 2 x 2 + 3 + 2 = 9 lines
        // of 4 prints.
        assert_eq!(repeat_count(10, 4, 2, false, 3), 10);
        assert_eq!(repeat_count(36, 4, 2, false, 3), 36);
        assert_eq!(repeat_count(37, 4, 2, false, 3), 37);
        assert_eq!(repeat_count(u16::MAX, 4, 2, false, 3), 36 + 3);
        // Wide: two prints fill a line.
        assert_eq!(repeat_count(u16::MAX, 4, 2, true, 3), 18 + 1);
    }
}
