//! Fidelity of the server's screen (issue 29): the emulator behind
//! `GET .../screen` (avt 0.19 behind `server/src/screen/`) and the other
//! candidates judged by corpora nobody here wrote the answers of.
//!
//! - `alacritty_own`: the recordings alacritty_terminal 0.26.0 publishes
//!   with its crate, against the screens Alacritty showed.
//! - `judge` (real xterm under Xvfb): the same recordings, recordings of real
//!   programs made here through a real tetherd PTY (`programs`), and short
//!   streams for each sequence issue 29 names (`sequences`), against the
//!   screens real xterm shows for them.
//!
//! Each test writes its corpus with xterm's screens to
//! `target/screen-judge/corpus/` for `tests/screen/judge.test.mjs`, which
//! scores xterm.js on the same cases and holds the server to at least its
//! count. The counts are in docs/BENCHMARKS.md.

mod alacritty_own;
mod attributes;
mod candidates;
mod corpus;
mod judge;
mod programs;
mod sequences;

use judge::{judge, CANDIDATES};

/// Cases of each corpus the server shows as real xterm does, today. Raise
/// them when the emulator gets better: the judge fails on fewer.
const TETHER_ALACRITTY_REF: usize = 36;
const TETHER_SEQUENCES: usize = 57;
const TETHER_PROGRAMS: usize = 53;

fn assert_at_least(judged: &judge::Judged, tether: usize, least_judged: usize) {
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
    assert_at_least(&judged, TETHER_ALACRITTY_REF, 40);
}

#[test]
fn colours_and_attributes_show_as_real_xterm_shows_them() {
    let cases = attributes::cases();
    let judged = judge(
        "colours and attributes (streams written here), judged by real xterm",
        "xterm_attributes",
        &cases,
    );
    assert_at_least(&judged, 0, cases.len());
}

#[test]
fn named_sequences_show_as_real_xterm_shows_them() {
    let cases = sequences::cases();
    let judged = judge(
        "issue 29's sequences (streams written here), judged by real xterm",
        "xterm_sequences",
        &cases,
    );
    assert_at_least(&judged, TETHER_SEQUENCES, cases.len() - 5);
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
    assert_at_least(&judged, TETHER_PROGRAMS, 30);
}
