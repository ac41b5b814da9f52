//! Short streams for colours and attributes (issue 45): each SGR
//! attribute set and reset, 16, 256 and direct colours in both their
//! semicolon and colon forms, and what erased, inserted and scrolled-in
//! cells get from the pen (xterm: its colours only). The streams are ours;
//! the attributes they are judged by are the ones real xterm reports for
//! each cell (`XTREPORTSGR`), never ours.

use super::corpus::Case;

const COLS: u16 = 20;
const ROWS: u16 = 6;

/// Six rows of text under the default pen, cursor home.
fn text() -> String {
    let mut s = String::new();
    for row in 0..ROWS {
        let letter = char::from(b'a' + row as u8);
        s.push_str(&format!(
            "\x1b[{};1H{}",
            row + 1,
            letter.to_string().repeat(20)
        ));
    }
    s.push_str("\x1b[H");
    s
}

/// A pen with every attribute xterm fills with or leaves off, and both
/// colours.
const LOUD: &str = "\x1b[1;3;4;5;7;9;31;42m";

pub fn cases() -> Vec<Case> {
    let fill = text();
    let list: Vec<(&str, String)> = vec![
        // Each attribute, then each one's reset.
        (
            "sgr_each_attribute",
            "\x1b[1mB\x1b[0;2mF\x1b[0;3mI\x1b[0;4mU\x1b[0;5mK\x1b[0;7mR\x1b[0;9mS\x1b[0mN".into(),
        ),
        (
            "sgr_each_reset",
            "\x1b[1;3;4;5;7;9mA\x1b[22mB\x1b[23mC\x1b[24mD\x1b[25mE\x1b[27mF\x1b[29mG".into(),
        ),
        (
            "sgr_faint_reset",
            "\x1b[2mA\x1b[22mB\x1b[1mC\x1b[0mD".into(),
        ),
        ("sgr_bold_and_faint", "\x1b[1;2mA\x1b[22mB".into()),
        ("sgr_double_underline", "\x1b[21mA\x1b[24mB".into()),
        ("sgr_invisible", "\x1b[8mhidden\x1b[28m shown".into()),
        // Colours.
        (
            "sgr_8_colours",
            (0..8)
                .map(|i| format!("\x1b[3{i};4{}mX", 7 - i))
                .collect::<String>(),
        ),
        (
            "sgr_bright_colours",
            (0..8)
                .map(|i| format!("\x1b[9{i};10{}mX", 7 - i))
                .collect::<String>(),
        ),
        (
            "sgr_bold_colours",
            "\x1b[1;31mA\x1b[1;91mB\x1b[0;1;38;5;3mC".into(),
        ),
        (
            "sgr_256_colours",
            [0u8, 7, 8, 15, 16, 100, 196, 231, 232, 255]
                .iter()
                .map(|n| format!("\x1b[38;5;{n};48;5;{}mX", 255 - n))
                .collect::<String>(),
        ),
        (
            "sgr_256_colon",
            "\x1b[38:5:200mA\x1b[48:5:17mB\x1b[39;49mC".into(),
        ),
        (
            "sgr_truecolour",
            "\x1b[38;2;1;2;3mA\x1b[48;2;250;128;0mB\x1b[0;38;2;255;255;255;48;2;0;0;0mC".into(),
        ),
        (
            "sgr_truecolour_colon",
            "\x1b[38:2::10:20:30mA\x1b[48:2::40:50:60mB".into(),
        ),
        (
            "sgr_default_colours",
            "\x1b[31;42mA\x1b[39mB\x1b[49mC".into(),
        ),
        (
            "sgr_many_in_one",
            "\x1b[0;1;4;38;5;208;48;2;0;64;128mA\x1b[mB".into(),
        ),
        (
            "sgr_underline_style",
            "\x1b[4:3mA\x1b[4:0mB\x1b[58;5;3;4mC\x1b[59mD".into(),
        ),
        // What erased, inserted and scrolled-in cells get.
        ("el_with_pen", format!("{fill}\x1b[2;5H{LOUD}\x1b[K")),
        ("el_left_with_pen", format!("{fill}\x1b[2;5H{LOUD}\x1b[1K")),
        ("ed_with_pen", format!("{fill}\x1b[4;5H{LOUD}\x1b[J")),
        ("ed_all_with_pen", format!("{fill}{LOUD}\x1b[2J")),
        ("ech_with_pen", format!("{fill}\x1b[2;5H{LOUD}\x1b[3X")),
        ("ich_with_pen", format!("{fill}\x1b[2;5H{LOUD}\x1b[3@")),
        ("dch_with_pen", format!("{fill}\x1b[2;5H{LOUD}\x1b[3P")),
        ("il_with_pen", format!("{fill}\x1b[2;5H{LOUD}\x1b[2L")),
        ("dl_with_pen", format!("{fill}\x1b[2;5H{LOUD}\x1b[2M")),
        ("su_with_pen", format!("{fill}{LOUD}\x1b[2S")),
        ("sd_with_pen", format!("{fill}{LOUD}\x1b[2T")),
        ("lf_scroll_with_pen", format!("{fill}\x1b[6;1H{LOUD}\n\n")),
        (
            "lf_region_scroll_with_pen",
            format!("{fill}\x1b[2;4r\x1b[4;1H{LOUD}\nX"),
        ),
        ("ri_scroll_with_pen", format!("{fill}\x1b[1;1H{LOUD}\x1bM")),
        (
            "nel_scroll_with_pen",
            format!("{fill}\x1b[6;3H{LOUD}\x1bEX"),
        ),
        (
            "wrap_scroll_with_pen",
            format!("{fill}\x1b[6;1H{LOUD}{}Y", "X".repeat(20)),
        ),
        ("alt_screen_with_pen", format!("{fill}{LOUD}\x1b[?1049hA")),
        (
            "alt_screen_back_with_pen",
            format!("{fill}\x1b[32m\x1b[?1049h{LOUD}B\x1b[?1049lC"),
        ),
        (
            "el_with_colours_only",
            format!("{fill}\x1b[2;5H\x1b[33;44m\x1b[K"),
        ),
        ("ed_all_background", "\x1b[44m\x1b[2J\x1b[HA".into()),
        ("decaln_with_pen", format!("{LOUD}\x1b#8X\x1b[1;3mY")),
        ("decaln_with_colours", "\x1b[33;44m\x1b#8X".into()),
        (
            "el_pending_wrap_with_pen",
            format!("{fill}\x1b[2;19H\x1b[7mxy\x1b[0;41m\x1b[K"),
        ),
        // The pen saved and restored, repeated, inserted.
        (
            "decsc_decrc_pen",
            "\x1b[1;31;42m\x1b7\x1b[0mA\x1b8B\x1b[0mC".into(),
        ),
        ("decrc_without_save", "\x1b[1;31mA\x1b8B".into()),
        ("decstr_resets_pen", "\x1b[1;7;33mA\x1b[!pB".into()),
        ("ris_resets_pen", "\x1b[1;7;33mA\x1bcB".into()),
        ("rep_with_pen", "\x1b[4;32mA\x1b[5b".into()),
        (
            "irm_with_pen",
            format!("{fill}\x1b[4h\x1b[2;3H{LOUD}xyz\x1b[4l"),
        ),
        (
            "wide_with_pen",
            "\x1b[7;35m\u{4e2d}\x1b[0m|\x1b[4m\u{6587}x".into(),
        ),
        (
            "overwrite_keeps_new_pen",
            "\x1b[1;31mAAAA\x1b[H\x1b[0mB\x1b[44mC".into(),
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
