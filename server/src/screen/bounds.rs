//! What one screen may cost: the memory counted against `--retain-total`
//! for a terminal size, and the repeat count (`REP`, `CSI n b`) beyond
//! which a repeat changes nothing more that can be seen.

/// Bounds of one screen.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ScreenLimits {
    /// Lines of primary-screen scrollback kept and sent in snapshots.
    pub scrollback_lines: usize,
}

/// Bytes of one emulator cell (the character, its width, its pen).
const CELL_BYTES: u64 = std::mem::size_of::<super::term::cell::Cell>() as u64;

/// Bytes of one line besides its cells (the cell vector and the wrap
/// flag) plus the allocator's header.
const LINE_BYTES: u64 = std::mem::size_of::<super::term::Line>() as u64 + 32;

/// Most bytes the snapshot of one cell takes: a full SGR (reset, every
/// attribute, three 24-bit colours, the protection) and a 4-byte
/// character; a column's tab stop takes less. Pinned by a test that dumps
/// the worst screen it can draw.
pub(super) const SNAPSHOT_BYTES_PER_CELL: u64 = 96;

/// Most bytes a snapshot takes besides its cells: each line's placing and
/// reset, and (once) the cursors, margins and modes.
const SNAPSHOT_BYTES_PER_LINE: u64 = 32;
const SNAPSHOT_BYTES_FIXED: u64 = 2048;

/// Bytes a screen of `cols x rows` may hold at most: the primary screen
/// with its scrollback and the alternate screen, and one
/// snapshot of them all (the bytes a sleeping screen is reduced to, or a
/// snapshot being sent). The reservation a PTY's screen makes against
/// `--retain-total`, at spawn and at each resize.
pub fn memory_bound(cols: u16, rows: u16, limits: ScreenLimits) -> u64 {
    let (cols64, rows64) = (u64::from(cols.max(1)), u64::from(rows.max(1)));
    let lines = 2 * rows64 + limits.scrollback_lines as u64;
    let grids = lines * (cols64 * CELL_BYTES + LINE_BYTES);
    grids + snapshot_bound(cols, rows, limits)
}

/// Most bytes one snapshot (or one plain-text rendering) of a screen of
/// `cols x rows` takes: what each request for the screen reserves against
/// `--retain-total` while it builds and sends one, beyond the one the
/// screen's own reservation holds.
pub fn snapshot_bound(cols: u16, rows: u16, limits: ScreenLimits) -> u64 {
    let (cols, rows) = (u64::from(cols.max(1)), u64::from(rows.max(1)));
    let lines = 2 * rows + limits.scrollback_lines as u64;
    lines * (cols * SNAPSHOT_BYTES_PER_CELL + SNAPSHOT_BYTES_PER_LINE) + SNAPSHOT_BYTES_FIXED
}

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
pub fn repeat_count(count: u16, cols: u16, rows: u16, wide: bool, limits: ScreenLimits) -> u16 {
    let cols = u64::from(cols.max(1));
    let per_line = if wide { (cols / 2).max(1) } else { cols };
    // A wide character leaves a line's last column as it was: every line
    // that was there must scroll out of the screen and the scrollback, not
    // only be written over (the cursor may start on the top row).
    let lines = 2 * u64::from(rows.max(1)) + limits.scrollback_lines as u64 + 2;
    let fill = per_line.saturating_mul(lines);
    let count64 = u64::from(count);
    if count64 <= fill {
        return count;
    }
    let reduced = fill + (count64 - fill) % per_line;
    // Smaller than `count`, which is a u16.
    u16::try_from(reduced).unwrap_or(count)
}

/// Gives the memory the allocator holds free back to the system, after a
/// large screen was dropped: glibc keeps freed heap pages (and raises its
/// mmap threshold after a large free), so without this the server's RSS
/// stays at its high-water mark after a large terminal is forgotten.
pub(super) fn give_back_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only returns free memory of glibc's arenas to
    // the system; it touches no memory in use and has no preconditions.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// Screens at least this large give their memory back when dropped.
pub(super) const GIVE_BACK_BYTES: u64 = 4 << 20;

#[cfg(test)]
mod tests {
    use super::*;

    const LIMITS: ScreenLimits = ScreenLimits {
        scrollback_lines: 3,
    };

    #[test]
    fn a_cell_is_the_size_the_documents_give() {
        // docs/CONFIGURATION.md and docs/ARCHITECTURE.md: 28-byte cells,
        // 96 snapshot bytes a cell.
        assert_eq!(CELL_BYTES, 28);
        assert_eq!(SNAPSHOT_BYTES_PER_CELL, 96);
    }

    #[test]
    fn a_repeat_is_cut_to_the_fill_and_keeps_its_place_in_the_line() {
        // 4 columns, 2 rows, 3 scrollback lines: 2 x 2 + 3 + 2 = 9 lines
        // of 4 prints.
        assert_eq!(repeat_count(10, 4, 2, false, LIMITS), 10);
        assert_eq!(repeat_count(36, 4, 2, false, LIMITS), 36);
        assert_eq!(repeat_count(37, 4, 2, false, LIMITS), 37);
        assert_eq!(repeat_count(u16::MAX, 4, 2, false, LIMITS), 36 + 3);
        // Wide: two prints fill a line.
        assert_eq!(repeat_count(u16::MAX, 4, 2, true, LIMITS), 18 + 1);
    }
}
