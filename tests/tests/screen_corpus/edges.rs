//! Short streams for the behaviours issue 45 names, each with its
//! neighbours: movement and scrolling right after a character was printed
//! in the last column (the pending wrap: IND, VT, FF, VPR, VPA, CHT, CBT,
//! REP, EL, ED, SU, SD, cursor moves, DECSC/DECRC), with and without origin
//! mode and scroll regions; insert mode at the right edge (wide characters
//! too); SL, SR, DECIC and DECDC in scroll regions; DECSTBM's edge cases;
//! CBT; reverse wrap. The streams are ours, the screens they are judged by
//! are real xterm's, never ours.

use super::corpus::Case;

// The same size and filled screen as `sequences.rs`: every row its own
// letter, column digits every five, cursor home.
use super::sequences::{filled, COLS, ROWS};

pub fn cases() -> Vec<Case> {
    let fill = filled();
    // A character printed in the last column of row 3: a wrap is pending.
    let pw = format!("{fill}\x1b[3;20Hx");
    // The same on the bottom margin of a region 2-5.
    let pw_region = format!("{fill}\x1b[2;5r\x1b[5;20Hx");
    // The same in origin mode, region 2-5 (row 4 of the region).
    let pw_origin = format!("{fill}\x1b[2;5r\x1b[?6h\x1b[4;20Hx");
    let mut list: Vec<(String, String)> = Vec::new();
    let movements: [(&str, &str); 22] = [
        ("ind", "\x1bD"),
        ("lf", "\n"),
        ("vt", "\x0b"),
        ("ff", "\x0c"),
        ("nel", "\x1bE"),
        ("ri", "\x1bM"),
        ("vpr", "\x1b[2e"),
        ("vpa", "\x1b[6d"),
        ("cht", "\x1b[I"),
        ("cbt", "\x1b[Z"),
        ("rep", "\x1b[2b"),
        ("el0", "\x1b[K"),
        ("el1", "\x1b[1K"),
        ("el2", "\x1b[2K"),
        ("ed0", "\x1b[J"),
        ("su", "\x1b[S"),
        ("sd", "\x1b[T"),
        ("cuf", "\x1b[C"),
        ("cub", "\x1b[D"),
        ("cuu", "\x1b[A"),
        ("cud", "\x1b[B"),
        ("decsc_decrc", "\x1b7\x1b8"),
    ];
    for (name, seq) in movements {
        for (place, before) in [("", &pw), ("_region", &pw_region), ("_origin", &pw_origin)] {
            list.push((format!("pw_{name}{place}"), format!("{before}{seq}y")));
        }
    }
    let more: Vec<(&str, String)> = vec![
        // Insert mode at and near the right edge.
        ("irm_last_column", format!("{fill}\x1b[4h\x1b[2;20Hx")),
        ("irm_last_column_then", format!("{fill}\x1b[4h\x1b[2;20Hxy")),
        ("irm_before_last", format!("{fill}\x1b[4h\x1b[2;19Hxyz")),
        (
            "irm_pending_wrap",
            format!("{fill}\x1b[2;20Hx\x1b[4hy\x1b[4l"),
        ),
        ("irm_wide_middle", format!("{fill}\x1b[4h\x1b[2;5H\u{4e2d}")),
        (
            "irm_wide_near_edge",
            format!("{fill}\x1b[4h\x1b[2;19H\u{4e2d}"),
        ),
        (
            "irm_wide_last_column",
            format!("{fill}\x1b[4h\x1b[2;20H\u{4e2d}"),
        ),
        (
            "irm_wide_over_wide",
            "\u{4e2d}\u{6587}\x1b[4h\x1b[1;1Hx".to_string(),
        ),
        ("irm_no_wrap", format!("{fill}\x1b[?7l\x1b[4h\x1b[2;19Hxyz")),
        // SL, SR, DECIC, DECDC with scroll regions, no left/right margins.
        ("sl_in_region", format!("{fill}\x1b[3;5r\x1b[2 @")),
        ("sr_in_region", format!("{fill}\x1b[3;5r\x1b[2 A")),
        ("sr_no_margins", format!("{fill}\x1b[3 A")),
        (
            "decic_in_region",
            format!("{fill}\x1b[3;5r\x1b[4;6H\x1b[2'}}"),
        ),
        (
            "decdc_in_region",
            format!("{fill}\x1b[3;5r\x1b[4;6H\x1b[2'~"),
        ),
        (
            "decic_outside_region",
            format!("{fill}\x1b[3;5r\x1b[7;6H\x1b[2'}}"),
        ),
        ("decdc_no_region", format!("{fill}\x1b[4;6H\x1b[3'~")),
        // DECSTBM's edge cases.
        ("decstbm_homes", format!("{fill}\x1b[5;5H\x1b[2;6rx")),
        (
            "decstbm_homes_origin",
            format!("{fill}\x1b[?6h\x1b[5;5H\x1b[3;6rx"),
        ),
        (
            "decstbm_reversed",
            format!("{fill}\x1b[5;5H\x1b[6;2rx\x1b[8;1H\ny"),
        ),
        ("decstbm_equal", format!("{fill}\x1b[4;4r\x1b[4;1H\nx")),
        (
            "decstbm_bottom_past_screen",
            format!("{fill}\x1b[3;99r\x1b[8;1H\nx"),
        ),
        ("decstbm_zero_top", format!("{fill}\x1b[0;4r\x1b[4;1H\nx")),
        (
            "decstbm_default",
            format!("{fill}\x1b[3;5r\x1b[r\x1b[8;1H\nx"),
        ),
        ("decstbm_one_row", format!("{fill}\x1b[3;4r\x1b[4;1H\n\nx")),
        (
            "decstbm_pending_wrap",
            format!("{fill}\x1b[3;20Hx\x1b[2;5ry"),
        ),
        // CBT.
        ("cbt_from_first_column", "\x1b[1;1H\x1b[ZA".to_string()),
        (
            "cbt_custom_stops",
            "\x1b[3g\x1b[1;5H\x1bH\x1b[1;12H\x1bH\x1b[1;18H\x1b[ZA\x1b[ZB".to_string(),
        ),
        ("cbt_on_a_stop", "\x1b[1;17H\x1b[ZA".to_string()),
        ("cht_cbt_count", "\x1b[3IA\x1b[2ZB".to_string()),
        // Reverse wrap (mode 45) and its neighbours.
        (
            "reverse_wrap_top_left",
            format!("{fill}\x1b[?45h\x1b[1;1H\x08x"),
        ),
        (
            "reverse_wrap_two",
            format!("{fill}\x1b[?45h\x1b[3;2H\x08\x08\x08x"),
        ),
        (
            "reverse_wrap_no_autowrap",
            format!("{fill}\x1b[?7l\x1b[?45h\x1b[3;1H\x08x"),
        ),
        (
            "reverse_wrap_pending",
            format!("{fill}\x1b[?45h\x1b[3;20Hx\x08y"),
        ),
        (
            "reverse_wrap_in_region",
            format!("{fill}\x1b[?45h\x1b[3;6r\x1b[3;1H\x08x"),
        ),
        (
            "reverse_wrap_cub",
            format!("{fill}\x1b[?45h\x1b[3;1H\x1b[Dx"),
        ),
    ];
    list.extend(more.into_iter().map(|(n, s)| (n.to_string(), s)));
    list.into_iter()
        .map(|(name, stream)| Case {
            name,
            cols: COLS,
            rows: ROWS,
            recording: stream.into_bytes(),
        })
        .collect()
}
