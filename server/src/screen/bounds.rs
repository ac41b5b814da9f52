//! What one screen may cost: the memory counted against `--retain-total`
//! for a terminal size (the repeat count beyond which a `REP` changes
//! nothing more is `term/repeat.rs`'s).

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

    #[test]
    fn a_cell_is_the_size_the_documents_give() {
        // docs/CONFIGURATION.md and docs/ARCHITECTURE.md: 28-byte cells,
        // 96 snapshot bytes a cell.
        assert_eq!(CELL_BYTES, 28);
        assert_eq!(SNAPSHOT_BYTES_PER_CELL, 96);
    }
}
