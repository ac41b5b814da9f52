//! Short streams for each sequence issue 29 names (insert and delete line
//! inside and outside scroll regions, insert mode, tabs at the line end,
//! tab stops, REP, index/line feed at the bottom margin, left and right
//! margins with DECIC/DECDC and horizontal scrolling, reverse wrap) and
//! their neighbours, in the manner of esctest: the streams are ours, the
//! screens they are judged by are real xterm's, never ours.

use super::corpus::Case;

pub const COLS: u16 = 20;
pub const ROWS: u16 = 8;

/// Every row filled with its own letter (`A...` to `H...`), cursor home.
pub fn filled() -> String {
    let mut s = String::new();
    for row in 0..ROWS {
        let letter = char::from(b'A' + row as u8);
        s.push_str(&format!("\x1b[{};1H", row + 1));
        for col in 0..COLS {
            // Column digits make shifts visible.
            if col % 5 == 0 {
                s.push(char::from(b'0' + (col / 5) as u8));
            } else {
                s.push(letter);
            }
        }
    }
    s.push_str("\x1b[H");
    s
}

/// Left and right margins 4..15 (DECLRMM on, DECSLRM), over `filled()`.
fn lr_margins() -> String {
    format!("{}\x1b[?69h\x1b[4;15s", filled())
}

pub fn cases() -> Vec<Case> {
    let fill = filled();
    let lr = lr_margins();
    let list: Vec<(&str, String)> = vec![
        // Insert and delete line.
        ("il_in_region", format!("{fill}\x1b[2;6r\x1b[3;5H\x1b[2L")),
        ("il_above_region", format!("{fill}\x1b[3;6r\x1b[1;1H\x1b[L")),
        ("il_below_region", format!("{fill}\x1b[2;5r\x1b[7;1H\x1b[L")),
        (
            "il_count_past_region",
            format!("{fill}\x1b[2;6r\x1b[4;1H\x1b[9L"),
        ),
        ("il_no_region", format!("{fill}\x1b[4;3H\x1b[2L")),
        ("il_at_bottom_row", format!("{fill}\x1b[8;3H\x1b[L")),
        ("il_pending_wrap", format!("{fill}\x1b[3;20Hx\x1b[Ly")),
        ("dl_in_region", format!("{fill}\x1b[2;6r\x1b[3;5H\x1b[2M")),
        ("dl_above_region", format!("{fill}\x1b[3;6r\x1b[1;1H\x1b[M")),
        ("dl_below_region", format!("{fill}\x1b[2;5r\x1b[7;1H\x1b[M")),
        (
            "dl_count_past_region",
            format!("{fill}\x1b[2;6r\x1b[4;1H\x1b[9M"),
        ),
        ("dl_no_region", format!("{fill}\x1b[4;3H\x1b[3M")),
        (
            "il_dl_origin_mode",
            format!("{fill}\x1b[3;6r\x1b[?6h\x1b[2;1H\x1b[L\x1b[4;1H\x1b[M"),
        ),
        // Insert mode.
        ("irm_insert", format!("{fill}\x1b[4h\x1b[2;3Hxyz\x1b[4l")),
        (
            "irm_pushes_off_the_end",
            format!("{fill}\x1b[4h\x1b[3;18Hxyz\x1b[4l"),
        ),
        (
            "irm_wide_char",
            format!("{fill}\x1b[4h\x1b[4;3H\u{4e2d}\x1b[4l"),
        ),
        (
            "irm_at_last_column",
            format!("{fill}\x1b[4h\x1b[5;20Hxy\x1b[4l"),
        ),
        ("irm_off", format!("{fill}\x1b[4h\x1b[4l\x1b[2;3Hxyz")),
        // Horizontal tabs.
        ("ht_to_line_end", format!("{fill}\x1b[1;15H\t\t\tX")),
        (
            "ht_after_pending_wrap",
            format!("\x1b[2;1H{}\tX", "x".repeat(20)),
        ),
        ("ht_default_stops", "a\tb\tc\td".to_string()),
        (
            "hts_custom_stops",
            "\x1b[3g\x1b[1;4H\x1bH\x1b[1;11H\x1bH\r\tA\tB\tC".to_string(),
        ),
        ("tbc_one_stop", "\x1b[1;9H\x1b[g\r\tA\tB".to_string()),
        ("tbc_all_stops", "\x1b[3g\r\tA".to_string()),
        ("cht", "\x1b[2IA\x1b[IB".to_string()),
        ("cht_past_the_end", "\x1b[9IA".to_string()),
        ("cbt", "\x1b[1;18H\x1b[ZA\x1b[2ZB".to_string()),
        ("cbt_past_the_start", "\x1b[1;18H\x1b[9ZA".to_string()),
        (
            "ht_stops_survive_scroll",
            "\x1b[3g\x1b[1;6H\x1bH\x1b[8;1H\n\n\r\tX".to_string(),
        ),
        // REP.
        ("rep", "A\x1b[5bB".to_string()),
        ("rep_wraps", "\x1b[1;18HA\x1b[5b".to_string()),
        ("rep_wide", "\u{4e2d}\x1b[3b".to_string()),
        ("rep_after_control", "A\r\x1b[3b".to_string()),
        (
            "rep_in_insert_mode",
            format!("{fill}\x1b[4h\x1b[2;3Hx\x1b[3b\x1b[4l"),
        ),
        // Index, line feed, vertical tab, form feed at and past the margins.
        (
            "ind_at_bottom_margin",
            format!("{fill}\x1b[2;5r\x1b[5;1H\x1bDx"),
        ),
        (
            "lf_at_bottom_margin",
            format!("{fill}\x1b[2;5r\x1b[5;1H\nx"),
        ),
        (
            "vt_at_bottom_margin",
            format!("{fill}\x1b[2;5r\x1b[5;1H\x0bx"),
        ),
        (
            "ff_at_bottom_margin",
            format!("{fill}\x1b[2;5r\x1b[5;1H\x0cx"),
        ),
        (
            "lf_below_region",
            format!("{fill}\x1b[2;5r\x1b[7;1H\n\n\nx"),
        ),
        ("lf_at_screen_bottom", format!("{fill}\x1b[8;1H\nx")),
        (
            "nel_at_bottom_margin",
            format!("{fill}\x1b[2;5r\x1b[5;3H\x1bEx"),
        ),
        (
            "ri_at_top_margin",
            format!("{fill}\x1b[3;6r\x1b[3;1H\x1bMx"),
        ),
        (
            "ri_above_region",
            format!("{fill}\x1b[3;6r\x1b[2;1H\x1bM\x1bMx"),
        ),
        (
            "su_sd_in_region",
            format!("{fill}\x1b[2;6r\x1b[2S\x1b[5;1H\x1b[T"),
        ),
        (
            "cuu_cud_stop_at_margins",
            format!("{fill}\x1b[3;6r\x1b[4;1H\x1b[9Ax\x1b[9By"),
        ),
        // Left and right margins.
        ("decslrm_wrap", format!("{lr}\x1b[2;4H{}", "x".repeat(15))),
        ("decic", format!("{lr}\x1b[2;6r\x1b[3;6H\x1b[2'}}")),
        ("decdc", format!("{lr}\x1b[2;6r\x1b[3;6H\x1b[2'~")),
        ("sl", format!("{lr}\x1b[2 @")),
        ("sr", format!("{lr}\x1b[3 A")),
        ("sl_no_margins", format!("{fill}\x1b[3 @")),
        ("ich_in_margins", format!("{lr}\x1b[2;6H\x1b[3@")),
        ("dch_in_margins", format!("{lr}\x1b[2;6H\x1b[3P")),
        ("il_in_margins", format!("{lr}\x1b[3;6H\x1b[2L")),
        ("dl_in_margins", format!("{lr}\x1b[3;6H\x1b[2M")),
        (
            "lf_scrolls_in_margins",
            format!("{lr}\x1b[2;5r\x1b[5;6H\nx"),
        ),
        ("cr_to_left_margin", format!("{lr}\x1b[3;8H\rx")),
        ("ht_stops_at_right_margin", format!("{lr}\x1b[2;6H\t\t\tx")),
        (
            "origin_mode_with_margins",
            format!("{lr}\x1b[2;6r\x1b[?6h\x1b[1;1Hx"),
        ),
        // Reverse wrap.
        (
            "reverse_wrap",
            format!("{fill}\x1b[?7h\x1b[?45h\x1b[3;1H\x08x"),
        ),
        ("reverse_wrap_off", format!("{fill}\x1b[?45l\x1b[3;1H\x08x")),
        (
            "reverse_wrap_extended",
            format!("{fill}\x1b[?7h\x1b[?1045h\x1b[1;1H\x08x"),
        ),
        (
            "bs_after_pending_wrap",
            format!("\x1b[2;1H{}\x08x", "y".repeat(20)),
        ),
        // Neighbours: erase, saved cursor, wide characters, charsets.
        ("ech_pending_wrap", format!("{fill}\x1b[2;20Hx\x1b[3X")),
        ("el_pending_wrap", format!("{fill}\x1b[2;19Hxy\x1b[Kz")),
        (
            "decsc_decrc_origin",
            format!("{fill}\x1b[3;6r\x1b[?6h\x1b[2;2H\x1b7\x1b[?6l\x1b[r\x1b8x"),
        ),
        ("decaln_homes", "\x1b[5;5H\x1b#8x".to_string()),
        (
            "decaln_resets_margins",
            "\x1b[2;4r\x1b#8\x1b[8;1H\nx".to_string(),
        ),
        ("wide_at_last_column", "\x1b[1;20H\u{4e2d}x".to_string()),
        (
            "wide_overwritten_half",
            "\u{4e2d}\u{6587}\x1b[1;2Hx".to_string(),
        ),
        (
            "dec_graphics",
            "\x1b(0lqqk\x1b(Bx\x1b)0\x0eaj\x0fz".to_string(),
        ),
        (
            "decstbm_invalid_ignored",
            format!("{fill}\x1b[2;5r\x1b[6;3r\x1b[5;1H\nx"),
        ),
        (
            "alt_screen_saves_cursor",
            format!("{fill}\x1b[3;4H\x1b[?1049hAB\x1b[?1049lx"),
        ),
    ];
    list.into_iter()
        .map(|(name, stream)| Case {
            name: name.to_string(),
            cols: COLS,
            rows: ROWS,
            recording: stream.into_bytes(),
        })
        .collect()
}
