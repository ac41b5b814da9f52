//! Arbitrary bytes and sizes: no panic, the snapshot round trip holds
//! (a snapshot at N fed to a fresh screen, then the bytes from N, equals
//! the screen fed everything), snapshots stay inside the memory bound, and
//! a repeat cut short (`term/repeat.rs`) leaves exactly what the
//! emulator makes of the full count.

use proptest::prelude::*;

use super::bounds::SNAPSHOT_BYTES_PER_CELL;
use super::tests::primary_lines;
use super::*;

/// Bytes that reach the emulator's interesting states often: escape and
/// control characters, CSI parameters and finals, UTF-8 lead and
/// continuation bytes, and whole sequences that move, erase, repeat,
/// scroll, switch screens and set modes.
fn terminal_bytes() -> impl Strategy<Value = Vec<u8>> {
    let piece = prop_oneof![
        4 => proptest::collection::vec(any::<u8>(), 1..8),
        4 => proptest::collection::vec(
            prop_oneof![
                Just(0x1bu8), Just(b'['), Just(b']'), Just(b'P'), Just(b'?'), Just(b';'),
                Just(b'\r'), Just(b'\n'), Just(b'\t'), Just(0x07), Just(0x18), Just(0x9b),
                Just(0xe4), Just(0xb8), Just(0x96), b'0'..=b'9', b'@'..=b'~',
            ],
            1..12,
        ),
        3 => (0u16..3000, prop_oneof![
            Just("b"), Just("@"), Just("P"), Just("X"), Just("L"), Just("M"), Just("S"),
            Just("T"), Just("I"), Just("Z"), Just("J"), Just("K"), Just("G"), Just("d"),
            Just("e"), Just("D"),
        ]).prop_map(|(n, fin)| format!("\x1b[{n}{fin}").into_bytes()),
        2 => prop_oneof![
            Just(&b"\x1b[?1049h"[..]), Just(&b"\x1b[?1049l"[..]), Just(&b"\x1b[?7l"[..]),
            Just(&b"\x1b[?7h"[..]), Just(&b"\x1b[4h"[..]), Just(&b"\x1b[4l"[..]),
            Just(&b"\x1b[2;3r"[..]), Just(&b"\x1b[r"[..]), Just(&b"\x1b[?6h"[..]),
            Just(&b"\x1bH"[..]), Just(&b"\x1b[3g"[..]), Just(&b"\x1b(0"[..]),
            Just(&b"\x1b[1;31;48;2;1;2;3m"[..]), Just(&b"\x1b[2;4;7;38;5;200m"[..]),
            Just(&b"\x1b[0m"[..]), Just(&b"\x1b[22;3;9m"[..]), Just("\u{4e16}".as_bytes()),
            Just(&b"\x1bc"[..]), Just(&b"\x1b7"[..]), Just(&b"\x1b8"[..]),
            Just(&b"\x1b#8"[..]), Just(&b"\x1b)0\x0e"[..]), Just(&b"\x0f\x1b[s"[..]),
            Just(&b"\x1b[u"[..]), Just(&b"\x1b[2 @"[..]), Just(&b"\x1b[ A"[..]),
            Just(&b"\x1b[3'}"[..]), Just(&b"\x1b['~"[..]), Just(&b"\x1b[?45h"[..]),
            Just(&b"\x1b[?45l"[..]), Just(&b"\x08"[..]), Just(&b"\x1b[3D"[..]), Just(&b"\x1b[?1048h"[..]), Just(&b"\x1b[?1048l"[..]), Just(&b"\x1b[3;4r\x1b[3;1H\x1b[2L"[..]),
            Just(&b"\x1b[1;2;8;21;4:3;58:2::1:2:3m"[..]), Just(&b"\x1b[1\"q"[..]),
            Just(&b"\x1b[0\"q"[..]), Just(&b"\x1b[?1J"[..]), Just(&b"\x1b[?2K"[..]),
            Just(&b"\x1b[?69h\x1b[2;5s"[..]), Just(&b"\x1b[?69l"[..]), Just("e\u{301}".as_bytes()),
            Just(&b"\x1b[20h"[..]), Just(&b"\x1b[?47h"[..]), Just(&b"\x1b[?47l"[..]),
            Just(&b"\x1b*0\x1bN"[..]), Just(&b"\x1b+A\x1bO"[..]), Just("e\u{301}\u{302}\u{303}".as_bytes()),
        ].prop_map(<[u8]>::to_vec),
    ];
    proptest::collection::vec(piece, 0..60).prop_map(|pieces| pieces.concat())
}

fn limits(scrollback_lines: usize) -> ScreenLimits {
    ScreenLimits { scrollback_lines }
}

fn live(screen: &mut Screen) -> String {
    wake(
        &mut screen.emulator,
        screen.cols,
        screen.rows,
        screen.limits,
    )
    .dump()
}

/// The same emulator, every repeat at its full count.
fn uncut(cols: u16, rows: u16, limits: ScreenLimits) -> Vt {
    let mut vt = Vt::new(
        usize::from(cols),
        usize::from(rows),
        limits.scrollback_lines,
    );
    vt.terminal.repeat_cut = false;
    vt
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    #[test]
    fn any_bytes_at_any_size_round_trip_through_a_snapshot(
        bytes in terminal_bytes(),
        cols in 2u16..20,
        rows in 2u16..8,
        scrollback in 0usize..6,
        cut in any::<prop::sample::Index>(),
    ) {
        let limits = limits(scrollback);
        let mut whole = Screen::new(cols, rows, limits);
        whole.feed(&bytes);
        let n = cut.index(bytes.len() + 1);
        let mut first = Screen::new(cols, rows, limits);
        first.feed(&bytes[..n]);
        let snapshot = first.snapshot();
        let bound = snapshot_bound(cols, rows, limits);
        // Beside the cells: the modes, the title (at most 1 KiB), an
        // unfinished sequence.
        prop_assert!(snapshot.data.len() as u64 <= bound + 4096, "{} bytes", snapshot.data.len());
        // The snapshot alone rebuilds the primary screen and its scrollback:
        // text, attributes and wrap flags of every line.
        let mut alone = Screen::new(cols, rows, limits);
        alone.feed(&snapshot.data);
        prop_assert_eq!(primary_lines(&mut alone), primary_lines(&mut first));
        let mut again = Screen::new(cols, rows, limits);
        again.feed(&snapshot.data);
        again.feed(&bytes[n..]);
        prop_assert_eq!(again.text(), whole.text());
        // The screens, modes and cursor exactly.
        let visible = |screen: &mut Screen| live(screen);
        prop_assert_eq!(visible(&mut again), visible(&mut whole));
    }

    #[test]
    fn a_repeat_cut_short_leaves_what_the_full_count_leaves(
        bytes in terminal_bytes(),
        cols in 1u16..14,
        rows in 1u16..6,
        scrollback in 0usize..5,
    ) {
        let limits = limits(scrollback);
        // Whole characters: the screen holds an unfinished one back.
        let text = String::from_utf8_lossy(&bytes).into_owned();
        let mut screen = Screen::new(cols, rows, limits);
        screen.feed(text.as_bytes());
        let mut raw = uncut(cols, rows, limits);
        raw.feed_str(&text, &mut ClientModes::default());
        prop_assert_eq!(live(&mut screen), raw.dump());
    }
}

#[test]
fn the_costliest_cells_fit_the_snapshot_bound() {
    // Every cell its own colours and attributes and a 4-byte character.
    let (cols, rows) = (40u16, 10u16);
    let mut bytes = Vec::new();
    for i in 0..u32::from(cols) * u32::from(rows) {
        let (r, g, b) = (i % 251, i * 7 % 253, i * 13 % 255);
        // Every attribute, three direct colours, the protection, a 4-byte
        // narrow character and a 4-byte combining mark.
        let attrs = if i % 2 == 0 {
            "1;2;3;4:5;5;7;9"
        } else {
            "1;2;3;4:4;5;7;9"
        };
        bytes.extend_from_slice(
            format!(
                "\x1b[0;{attrs};38;2;{r};{g};{b};48;2;{b};{r};{g};58:2::{g}:{b}:{r}m\x1b[{}\"q\u{1d400}\u{e0100}",
                i % 2
            )
            .as_bytes(),
        );
    }
    let mut screen = Screen::new(cols, rows, limits(0));
    screen.feed(&bytes);
    let per_cell = screen.snapshot().data.len() as u64 / (u64::from(cols) * u64::from(rows));
    assert!(
        per_cell <= SNAPSHOT_BYTES_PER_CELL,
        "{per_cell} bytes per cell"
    );
}

#[test]
fn a_flood_of_repeats_costs_what_the_screen_can_show() {
    // `CSI 65535 b` 64 times: 4 million cells uncut, 64 screens and
    // scrollbacks cut.
    let mut screen = Screen::new(80, 24, limits(200));
    screen.feed(b"x");
    let flood = b"\x1b[65535b".repeat(64);
    screen.feed(&flood);
    let mut raw = uncut(80, 24, limits(200));
    raw.feed_str("x", &mut ClientModes::default());
    raw.feed_str(
        &String::from_utf8_lossy(&flood),
        &mut ClientModes::default(),
    );
    assert_eq!(live(&mut screen), raw.dump());
}
