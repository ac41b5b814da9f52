//! Fidelity of the server's screen (issue 29): the emulator behind
//! `GET .../screen` (`server/src/screen/term/`, our own) and the other
//! candidates judged by corpora nobody here wrote the answers of.
//!
//! - `alacritty_own`: the recordings alacritty_terminal 0.26.0 publishes
//!   with its crate, against the screens Alacritty showed.
//! - `judge` (real xterm under Xvfb): the same recordings, recordings of real
//!   programs made here through a real tetherd PTY (`programs`), short
//!   streams for each sequence issue 29 names (`sequences`), for the edges
//!   issue 45 names (`edges`) and for colours and attributes
//!   (`attributes`), against the screens real xterm shows for them: text,
//!   cursor and every cell's attributes; and each case's snapshot written
//!   to a fresh xterm must show the server's screen.
//!
//! Each test writes its corpus with xterm's screens to
//! `target/screen-judge/corpus/` for `tests/screen/judge.test.mjs`, which
//! scores xterm.js on the same cases and holds the server to at least its
//! count. The counts are in docs/BENCHMARKS.md.

mod alacritty_own;
mod attributes;
mod candidates;
mod corpus;
mod edges;
mod judge;
mod programs;
mod sequences;

use judge::{judge, CANDIDATES};

/// Cases of each corpus the server shows as real xterm does (text and
/// cursor), today. Raise them when the emulator gets better: the judge
/// fails on fewer.
const TETHER_ALACRITTY_REF: usize = 40;
const TETHER_SEQUENCES: usize = 73;
const TETHER_PROGRAMS: usize = 63;
const TETHER_EDGES: usize = 101;
const TETHER_ATTRIBUTES: usize = 47;

/// Cases whose every cell has the attributes real xterm reports for it
/// (docs/BENCHMARKS.md lists the ones that do not, with the reason).
const STYLES_ALACRITTY_REF: usize = 38;
const STYLES_SEQUENCES: usize = 73;
const STYLES_PROGRAMS: usize = 64;
const STYLES_EDGES: usize = 101;
const STYLES_ATTRIBUTES: usize = 46;

/// Cases whose snapshot, written to a fresh real xterm, does not show the
/// server's screen: `sgr_underline_style` (xterm 379 has no underline
/// styles and reads the snapshot's `4:3` as other parameters, as it read
/// the case's own) and `colored_underline` (its `4:3` too).
const ROUND_TRIP_KNOWN: [&str; 2] = ["sgr_underline_style", "colored_underline"];

fn assert_at_least(judged: &judge::Judged, tether: usize, styles: usize, least_judged: usize) {
    assert!(
        judged.judged >= least_judged,
        "only {} cases judged",
        judged.judged
    );
    assert!(
        judged.passes("tether") >= tether,
        "tether passes {} < {tether} (fails {:?})",
        judged.passes("tether"),
        judged.fails["tether"]
    );
    assert!(
        judged.styles_passes >= styles,
        "tether's attributes are xterm's in {} < {styles} cases (differ: {:?})",
        judged.styles_passes,
        judged.styles_fails
    );
    let unknown: Vec<&String> = judged
        .round_trip_fails
        .iter()
        .filter(|fail| {
            !ROUND_TRIP_KNOWN
                .iter()
                .any(|k| fail.starts_with(&format!("{k}:")))
        })
        .collect();
    assert!(
        unknown.is_empty(),
        "snapshots real xterm shows otherwise: {unknown:?}"
    );
    let _ = CANDIDATES;
}

#[test]
fn alacritty_recordings_show_as_real_xterm_shows_them() {
    let cases: Vec<_> = corpus::alacritty_ref()
        .into_iter()
        .map(|(case, _)| case)
        .collect();
    let judged = judge(
        "alacritty_terminal 0.26.0 tests/ref, judged by real xterm",
        "xterm_alacritty_ref",
        &cases,
    );
    assert_at_least(&judged, TETHER_ALACRITTY_REF, STYLES_ALACRITTY_REF, 40);
}

#[test]
fn colours_and_attributes_show_as_real_xterm_shows_them() {
    let cases = attributes::cases();
    let judged = judge(
        "colours and attributes (streams written here), judged by real xterm",
        "xterm_attributes",
        &cases,
    );
    assert_at_least(&judged, TETHER_ATTRIBUTES, STYLES_ATTRIBUTES, cases.len());
}

#[test]
fn issue_45_edges_show_as_real_xterm_shows_them() {
    let cases = edges::cases();
    let judged = judge(
        "issue 45's edges (streams written here), judged by real xterm",
        "xterm_edges",
        &cases,
    );
    assert_at_least(&judged, TETHER_EDGES, STYLES_EDGES, cases.len());
}

#[test]
fn named_sequences_show_as_real_xterm_shows_them() {
    let cases = sequences::cases();
    let judged = judge(
        "issue 29's sequences (streams written here), judged by real xterm",
        "xterm_sequences",
        &cases,
    );
    assert_at_least(&judged, TETHER_SEQUENCES, STYLES_SEQUENCES, cases.len() - 5);
}

#[tokio::test]
async fn real_programs_show_as_real_xterm_shows_them() {
    let server = tether_tests::TestServer::start();
    let (cases, server_screens) = programs::cases(&server).await;
    // What `GET .../screen` answered at each program's end is what the
    // server's emulator, fed the same bytes here, shows.
    for (name, screen) in &server_screens {
        let case = cases.iter().find(|c| &c.name == name).unwrap();
        assert_eq!(
            screen,
            &candidates::tether(case).lines,
            "{name}: GET .../screen"
        );
    }
    let judged = tokio::task::spawn_blocking(move || {
        judge(
            "real programs recorded through tetherd, judged by real xterm",
            "xterm_programs",
            &cases,
        )
    })
    .await
    .unwrap();
    assert_at_least(&judged, TETHER_PROGRAMS, STYLES_PROGRAMS, 30);
}
