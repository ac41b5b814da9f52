//! Screen behaviour, judged by the emulator itself: a screen rebuilt from a
//! snapshot at N and fed the bytes after N must snapshot exactly as one fed
//! everything. (The cross-check against an emulator nobody here wrote,
//! xterm.js, is in tests/screen.)

use super::*;

const LIMITS: ScreenLimits = ScreenLimits {
    scrollback_lines: 50,
};

fn fed(bytes: &[u8]) -> Screen {
    let mut screen = Screen::new(80, 24, LIMITS);
    screen.feed(bytes);
    screen
}

/// A stream with colours, a title, modes, scrolling past the scrollback,
/// the alternate screen with margins and a split UTF-8 character.
fn session() -> Vec<u8> {
    let mut s = Vec::new();
    s.extend_from_slice(b"\x1b]0;user@host: ~\x07\x1b[?2004huser@host:~$ ls --color\r\n");
    for i in 0..120 {
        s.extend_from_slice(
            format!("\x1b[01;34mdir{i}\x1b[0m  \x1b[38;5;208mfile{i}\x1b[0m \x1b[48;2;1;2;3mrgb\x1b[m caf\u{e9} \u{4e16}\u{754c}\r\n").as_bytes(),
        );
    }
    s.extend_from_slice(b"\x1b[?1049h\x1b[22;0;0t\x1b[1;23r\x1b[?1h\x1b=\x1b[H\x1b[2J\x1b[?25l");
    for row in 1..23 {
        s.extend_from_slice(format!("\x1b[{row};1H~\x1b[K").as_bytes());
    }
    s.extend_from_slice(
        b"\x1b[1;1H\x1b[7m\"file\" 3L, 20B\x1b[m\x1b[?1002h\x1b[?1006h\x1b[?25h\x1b[5;3H",
    );
    s
}

fn rebuilt(snapshot: &Snapshot, rest: &[u8]) -> Screen {
    let mut screen = Screen::new(snapshot.cols, snapshot.rows, LIMITS);
    screen.feed(&snapshot.data);
    screen.feed(rest);
    screen
}

#[test]
fn snapshot_plus_the_bytes_after_it_equals_the_whole_stream_at_every_cut() {
    let stream = session();
    let whole = fed(&stream).snapshot().data;
    // Every cut, including inside escape sequences and UTF-8 characters.
    for n in (0..stream.len()).step_by(7).chain([stream.len()]) {
        let snapshot = fed(&stream[..n]).snapshot();
        assert_eq!(snapshot.offset, n as u64);
        let again = rebuilt(&snapshot, &stream[n..]).snapshot().data;
        assert!(
            again == whole,
            "cut at {n}: {:?}\n!=\n{:?}",
            String::from_utf8_lossy(&again),
            String::from_utf8_lossy(&whole)
        );
    }
}

#[test]
fn a_sleeping_screen_wakes_exactly_where_it_was() {
    let stream = session();
    let whole = fed(&stream);
    for n in (0..stream.len()).step_by(61) {
        let mut screen = fed(&stream[..n]);
        screen.sleep();
        assert!(screen.is_asleep());
        assert_eq!(screen.snapshot(), fed(&stream[..n]).snapshot());
        screen.feed(&stream[n..]);
        assert_eq!(screen.snapshot(), whole.snapshot(), "slept at {n}");
        assert_eq!(screen.text(), whole.text());
    }
}

#[test]
fn text_shows_what_a_person_sees() {
    // printf 'a\nb\n'; tput cup 5 10; printf X  (through a PTY: \n is \r\n)
    let screen = fed(b"a\r\nb\r\n\x1b[6;11HX");
    let text = screen.text();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 24);
    assert_eq!(lines[0], "a");
    assert_eq!(lines[1], "b");
    assert_eq!(lines[5], format!("{}X", " ".repeat(10)));
}

#[test]
fn resizes_take_effect_in_order_with_the_output() {
    let mut screen = fed(b"hello");
    screen.resize(120, 40);
    screen.feed(b"\x1b[40;120HZ");
    let snapshot = screen.snapshot();
    assert_eq!((snapshot.cols, snapshot.rows), (120, 40));
    let lines: Vec<String> = screen.text().lines().map(str::to_string).collect();
    assert_eq!(lines.len(), 40);
    assert_eq!(lines[39], format!("{}Z", " ".repeat(119)));
    assert_eq!(lines[0], "hello");
}

#[test]
fn a_snapshot_carries_no_terminal_query() {
    // What vim and bash ask a terminal: cursor position, device attributes,
    // colours, versions, modes.
    let screen = fed(
        b"\x1b[6n\x1b[c\x1b[>c\x1b[>0q\x1b]10;?\x07\x1b]11;?\x1b\\\x1b[?u\x1b[?2026$p\x1bP$qm\x1b\\\x1b[14t\x1b[18tdone",
    );
    let data = screen.snapshot().data;
    let text = String::from_utf8_lossy(&data);
    for query in [
        "[6n", "[c", "[>c", "[>0q", "]10;?", "]11;?", "[?u", "$p", "$q", "[14t", "[18t",
    ] {
        assert!(!text.contains(query), "{query:?} in {text:?}");
    }
    assert!(text.contains("done"));
}

#[test]
fn a_never_fed_screen_holds_no_emulator_and_an_empty_snapshot() {
    let screen = Screen::new(80, 24, LIMITS);
    assert!(screen.is_asleep());
    let snapshot = screen.snapshot();
    assert_eq!(snapshot.offset, 0);
    assert!(snapshot.data.is_empty());
    assert_eq!(screen.text(), "\n".repeat(24));
}

#[test]
fn invalid_utf8_becomes_replacement_characters() {
    let screen = fed(b"a\xffb\xe4\xb8c");
    assert_eq!(screen.text().lines().next(), Some("a\u{fffd}b\u{fffd}c"));
}

#[test]
fn scrollback_is_bounded() {
    let mut stream = Vec::new();
    for i in 0..500 {
        stream.extend_from_slice(format!("line {i}\r\n").as_bytes());
    }
    let data = fed(&stream).snapshot().data;
    let text = String::from_utf8_lossy(&data);
    let lines = text.matches("line ").count();
    assert_eq!(lines, LIMITS.scrollback_lines + 23);
    assert!(text.contains("line 499"));
}

#[test]
fn skipped_bytes_make_the_screen_stale_until_the_program_erases_it() {
    let mut screen = fed(b"before");
    assert!(!screen.is_stale());
    screen.skip_to(100);
    assert_eq!(screen.offset(), 100);
    assert!(screen.is_stale());
    screen.feed(b"\x1b[2Kstill partial");
    assert!(screen.is_stale());
    screen.feed(b"\x1b[H\x1b[2Jwhole");
    assert!(!screen.is_stale());
    screen.skip_to(50);
    assert!(!screen.is_stale(), "skipping backwards is no skip");
    screen.skip_to(200);
    screen.feed(b"\x1bc");
    assert!(!screen.is_stale(), "a full reset makes it whole");
    assert_eq!(screen.text().lines().next(), Some(""));
}

#[test]
fn reverse_index_in_origin_mode_moves_up_one_row() {
    // vttest's "soft scroll down region": origin mode, a two-row region,
    // text written with CR LF then RI RI.
    let mut screen = Screen::new(
        80,
        24,
        ScreenLimits {
            scrollback_lines: 0,
        },
    );
    let mut bytes = b"\x1b[?6h\x1b[12;13r\x1b[24A".to_vec();
    for i in 1..4 {
        bytes.extend_from_slice(format!("D{i}\r\n\x1bM\x1bM").as_bytes());
    }
    bytes.extend_from_slice(b"Push");
    screen.feed(&bytes);
    let rows: Vec<String> = screen
        .text()
        .lines()
        .skip(11)
        .take(2)
        .map(String::from)
        .collect();
    assert_eq!(rows, ["Push", "D3"]);
    assert_eq!(screen.cursor(), (4, 11));
}

#[test]
fn a_restored_cursor_brings_back_its_character_sets_and_a_snapshot_keeps_them() {
    // vttest's character set screen: line drawing saved with the cursor,
    // ASCII written elsewhere, the cursor restored.
    let limits = ScreenLimits {
        scrollback_lines: 0,
    };
    let before = "\x1b(0qq\x1b7\x1b[2;1H\x1b(BA";
    let after = "\x1b8qq\x1b[3;1H\x1b[?1049h\x1b(0\x1b[?1049lqq";
    let mut whole = Screen::new(10, 4, limits);
    whole.feed(format!("{before}{after}").as_bytes());
    let rows: Vec<String> = whole.text().lines().take(3).map(String::from).collect();
    assert_eq!(
        rows,
        ["\u{2500}\u{2500}\u{2500}\u{2500}", "A", "\u{2500}\u{2500}"]
    );
    // A snapshot between the save and the restore carries the saved sets.
    let mut cut = Screen::new(10, 4, limits);
    cut.feed(before.as_bytes());
    let snapshot = cut.snapshot();
    let mut again = Screen::new(10, 4, limits);
    again.feed(&snapshot.data);
    again.feed(after.as_bytes());
    assert_eq!(again.text(), whole.text());
    assert_eq!(again.snapshot().data, whole.snapshot().data);
}

/// Every line of the primary screen, scrollback first: its cells' text and
/// canonical attributes, and whether it wraps into the next.
pub(super) fn primary_lines(screen: &mut Screen) -> Vec<(String, Vec<String>, bool)> {
    let vt = wake(
        &mut screen.emulator,
        screen.cols,
        screen.rows,
        screen.limits,
    );
    let terminal = &vt.terminal;
    terminal
        .scrollback
        .iter()
        .chain(terminal.primary())
        .map(|line| {
            let text: String = line.cells.iter().map(|c| c.ch).collect();
            let styles = line
                .cells
                .iter()
                .map(|c| render::canonical_sgr(&c.pen))
                .collect();
            (text, styles, line.wrapped)
        })
        .collect()
}

#[test]
fn the_scrollback_round_trip_keeps_wrap_flags_blank_lines_and_attributes() {
    let long = "0123456789".repeat(5);
    let streams: Vec<(&str, String)> = vec![
        (
            "blank lines first",
            format!("\r\n\r\n\r\nafter blanks\r\n{}", "\n".repeat(12)),
        ),
        (
            "wrapped lines",
            format!("{long}\r\n\x1b[4;31m{long}\x1b[m\r\n{}", "\r\n".repeat(12)),
        ),
        (
            // The last scrollback line wraps; its continuation, on the
            // top row, is erased, then deleted.
            "wrapped last line, continuation erased",
            format!(
                "{}{long}{}\x1b[H\x1b[2K",
                "x\r\n".repeat(9),
                "\r\n".repeat(8)
            ),
        ),
        (
            "wrapped last line, continuation deleted",
            format!(
                "{}{long}{}\x1b[H\x1b[M",
                "x\r\n".repeat(9),
                "\r\n".repeat(8)
            ),
        ),
        (
            "wrapped last line, continuation rewritten",
            format!("{}{long}{}\x1b[Hnew", "x\r\n".repeat(9), "\r\n".repeat(8)),
        ),
        (
            "blank coloured lines",
            format!("\x1b[44m\x1b[K\r\n\r\n\x1b[0mtext\r\n{}", "\r\n".repeat(12)),
        ),
    ];
    for (name, stream) in streams {
        let mut screen = Screen::new(20, 10, LIMITS);
        screen.feed(stream.as_bytes());
        let mut again = Screen::new(20, 10, LIMITS);
        again.feed(&screen.snapshot().data);
        let (ours, theirs) = (primary_lines(&mut screen), primary_lines(&mut again));
        assert!(ours.len() > 10, "{name}: no scrollback made");
        let first = (0..ours.len().max(theirs.len())).find(|&i| ours.get(i) != theirs.get(i));
        assert!(
            first.is_none(),
            "{name}: {} lines rebuilt as {}, line {first:?}: {:?} became {:?}",
            ours.len(),
            theirs.len(),
            first.and_then(|i| ours.get(i)).map(|l| (&l.0, l.2)),
            first.and_then(|i| theirs.get(i)).map(|l| (&l.0, l.2)),
        );
    }
}

/// Cuts anywhere in `stream` rebuild the screen fed it whole (text, and
/// the visible dump: screens, pen, cursor, modes).
fn round_trips_at_every_cut(cols: u16, rows: u16, stream: &[u8]) {
    let limits = ScreenLimits {
        scrollback_lines: 0,
    };
    let mut whole = Screen::new(cols, rows, limits);
    whole.feed(stream);
    for n in 0..=stream.len() {
        let mut first = Screen::new(cols, rows, limits);
        first.feed(&stream[..n]);
        let mut again = Screen::new(cols, rows, limits);
        again.feed(&first.snapshot().data);
        again.feed(&stream[n..]);
        assert_eq!(again.text(), whole.text(), "cut at {n}");
        assert_eq!(again.snapshot().data, whole.snapshot().data, "cut at {n}");
    }
}

#[test]
fn a_control_inside_a_sequence_acts_and_the_sequence_goes_on() {
    // A tab and a line feed with a wrap pending, in the middle of an
    // escape sequence: they act (as in xterm) and the sequence goes on
    // after them (`ESC ]` starts an OSC).
    round_trips_at_every_cut(2, 2, b"ab\x1b\t]0;t\x07cd\x1b\n]0;u\x07e");
}

#[test]
fn the_alternate_screen_entered_with_a_loud_pen_keeps_that_pen_saved() {
    // `?1049h` saves the cursor with the whole pen, then fills the new
    // screen with its colours only (as xterm); `?1049l` brings the whole
    // pen back.
    let stream = b"\x1b[1;4;31mA\x1b[?1049hB\x1b[?1049lC\x1b[@";
    round_trips_at_every_cut(4, 2, stream);
    let mut screen = Screen::new(4, 2, LIMITS);
    screen.feed(stream);
    let styles = screen.styles();
    assert_eq!(styles[0][0], "1;4;38:5:1");
    assert_eq!(
        styles[0][1], "1;4;38:5:1",
        "C is written with the restored pen"
    );
    assert_eq!(
        styles[0][2], "38:5:1",
        "the inserted blank takes the colours only"
    );
}

#[test]
fn scroll_left_right_and_columns_round_trip_at_every_cut() {
    // SL, SR, DECIC, DECDC with counts, in a scroll region, under a loud
    // pen.
    let mut stream = b"abcdef\r\nghijkl\r\nmnopqr\r\nstuvwx\x1b[2;3r\x1b[2;3H\x1b[1;4;41m".to_vec();
    stream.extend_from_slice(b"\x1b[2 @\x1b[12 A\x1b[2'}\x1b[3'~\x1b[r\x1b[ @x");
    round_trips_at_every_cut(6, 4, &stream);
    let mut screen = Screen::new(6, 4, LIMITS);
    screen.feed(&stream);
    assert_eq!(screen.text(), "xcdef\n\n\ntuvwx\n");
    assert_eq!(
        screen.styles()[1][0],
        "48:5:1",
        "blanks take the colours only"
    );
}

#[test]
fn reverse_wrap_goes_back_to_the_row_above_and_round_trips() {
    let stream = b"abcd\r\nefgh\r\nijkl\x1b[?45h\x1b[3;1H\x08X\x1b[2;1H\x1b[2DY\x1b[1;1H\x08Z\x1b[?45l\x1b[3;1H\x08W";
    round_trips_at_every_cut(4, 3, stream);
    let mut screen = Screen::new(4, 3, LIMITS);
    screen.feed(stream);
    // X at the end of row 2, Y two cells back from row 2's start, Z from
    // the top row to the bottom one; without the mode W stays on row 3.
    assert_eq!(screen.text(), "abYd\nefgX\nWjkZ\n");
}

/// The first row's text and each of its cells' canonical attributes.
fn first_row(screen: &Screen) -> (String, Vec<String>) {
    let text = screen.text().lines().next().unwrap_or_default().to_string();
    let styles = screen.styles().into_iter().next().unwrap_or_default();
    (text, styles)
}

#[test]
fn bold_and_faint_are_two_attributes_and_21_is_a_double_underline() {
    let screen = fed(b"\x1b[1;2mA\x1b[22;2mB\x1b[0;21mC\x1b[24;4:3mD");
    let (text, styles) = first_row(&screen);
    assert_eq!(text, "ABCD");
    assert_eq!(styles[..4], ["1;2", "2", "21", "4"]);
    round_trips_at_every_cut(
        8,
        2,
        b"\x1b[1;2mA\x1b[22;2mB\x1b[0;21mC\x1b[24;4:3;58:5:9mD",
    );
}

#[test]
fn invisible_text_is_kept_as_blanks_as_xterm_keeps_it() {
    let screen = fed(b"\x1b[8msecret\x1b[28mshown");
    assert_eq!(first_row(&screen).0, "      shown");
}

#[test]
fn insert_mode_makes_room_for_a_wide_character_and_wraps_at_the_last_column() {
    // Two columns for a wide character (the `d` pushed out); at the last
    // column the character is written over the last one there and the
    // next one wraps, as xterm does.
    let mut screen = Screen::new(6, 2, LIMITS);
    screen.feed("abcd\r\x1b[4h\u{4e16}\x1b[1;6Hxy".as_bytes());
    assert_eq!(screen.text(), "\u{4e16}abcx\ny\n");
    round_trips_at_every_cut(6, 2, "abcd\r\x1b[4h\u{4e16}\x1b[1;6Hxy".as_bytes());
}

#[test]
fn a_saved_cursor_keeps_its_pending_wrap() {
    // Saved right after a print in the last column, restored elsewhere:
    // the next character wraps to the row below (xterm's DECSC).
    let mut screen = Screen::new(4, 3, LIMITS);
    screen.feed(b"abcd\x1b7\x1b[3;1H\x1b8x");
    assert_eq!(screen.text(), "abcd\nx\n\n");
    round_trips_at_every_cut(4, 3, b"abcd\x1b7\x1b[3;1H\x1b8x");
}

#[test]
fn left_and_right_margins_hold_text_and_round_trip() {
    // Columns 2 to 4: the text wraps inside them, scrolls only them at the
    // bottom, and ICH shifts only them.
    let stream = b"\x1b[?69h\x1b[2;4s\x1b[1;2Hwrapped text\x1b[2;3H\x1b[2@";
    let mut screen = Screen::new(6, 3, LIMITS);
    screen.feed(stream);
    assert_eq!(screen.text(), " ppe\n d\n ext\n");
    round_trips_at_every_cut(6, 3, stream);
}

#[test]
fn selective_erase_keeps_protected_cells() {
    let screen = fed(b"ab\x1b[1\"qcd\x1b[0\"qef\x1b[?2K");
    assert_eq!(first_row(&screen).0, "  cd");
    round_trips_at_every_cut(8, 2, b"ab\x1b[1\"qcd\x1b[0\"qef\x1b[?2K\x1b[1\"q");
}

#[test]
fn combining_marks_join_their_character_two_at_most() {
    let screen = fed("e\u{301}o\u{302}\u{303}\u{304}".as_bytes());
    assert_eq!(first_row(&screen).0, "e\u{301}o\u{302}\u{303}");
    round_trips_at_every_cut(4, 2, "e\u{301}o\u{302}\u{303}\u{304}x\x1b[2b".as_bytes());
}
