//! Recordings of real programs, made now through a real tetherd PTY
//! (80x24, `TERM=xterm`): vim editing and splitting, less paging back and
//! forth, top, htop, tmux with split panes inside the session, and the
//! screens of vttest's menus 1 (cursor movement), 2 (screen features) and 8
//! (VT102 insert/delete); and, for colours and attributes (issue 45), with
//! `TERM=xterm-256color`: vim with syntax colours on a shell script, htop,
//! `ls --color`, a 256-colour and a truecolour chart. Each program is driven by keys sent when a piece
//! of text shows; the output up to each such point is a case (as a viewer
//! attaching then would need it drawn), and so is the whole output.

use serde_json::{json, Value};
use tether_protocol::ClientFrame;
use tether_tests::{Attachment, Received, TestServer};

use super::corpus::Case;

pub const COLS: u16 = 80;
pub const ROWS: u16 = 24;

/// Wait for `needle` in the output after the last step, then type `keys`.
/// The output up to the needle is a case.
struct Step(&'static str, &'static str);

struct Program {
    name: &'static str,
    argv: Vec<String>,
    env: Value,
    steps: Vec<Step>,
}

/// A file of 200 numbered lines for vim and less.
fn lines_file() -> String {
    let dir = tether_tests::fresh_dir();
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("lines.txt");
    let text: String = (1..=200)
        .map(|n| format!("line {n:03} of the screen judge's file, some words to wrap\n"))
        .collect();
    std::fs::write(&path, text).unwrap();
    path.display().to_string()
}

/// A shell script for vim's syntax colours: comments, strings, keywords,
/// numbers, variables.
fn script_file() -> String {
    let dir = tether_tests::fresh_dir();
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("judge.sh");
    let mut text =
        String::from("#!/bin/sh\n# The screen judge's script, for syntax colours.\nset -eu\n");
    for n in 1..=60 {
        text.push_str(&format!(
            "if [ \"$count\" -gt {n} ]; then\n  echo \"line {n}: $HOME\" # note {n}\nfi\n"
        ));
    }
    std::fs::write(&path, text).unwrap();
    path.display().to_string()
}

/// bash running `script` (no rc files).
fn bash(script: &str) -> Vec<String> {
    argv(&["bash", "--norc", "--noprofile", "-c", script])
}

/// Every 256-colour index as a background, then as a foreground, bold and
/// underlined every few.
const CHART_256: &str = r#"for i in $(seq 0 255); do printf '\033[48;5;%dm%4d\033[0m' $i $i; [ $((i % 16)) = 15 ] && echo; done; for i in $(seq 0 255); do a=0; [ $((i % 3)) = 0 ] && a=1; [ $((i % 5)) = 0 ] && a="4;$a"; printf '\033[%s;38;5;%dm%02x\033[0m' "$a" $i $i; [ $((i % 32)) = 31 ] && echo; done; echo"#;

/// Truecolour gradients: backgrounds and foregrounds, with italic and
/// strikethrough on some.
const CHART_TRUECOLOUR: &str = r#"for r in 0 64 128 192 255; do for g in $(seq 0 16 255); do printf '\033[48;2;%d;%d;%dm \033[0m' $r $g $((255 - g)); done; echo; done; for g in $(seq 0 4 255); do printf '\033[3;38;2;%d;%d;%dmx' $((255 - g)) $g 128; done; printf '\033[0m\n'; for b in $(seq 0 8 255); do printf '\033[9;38;2;0;%d;%d;48;2;%d;0;0m#' $b $b $b; done; printf '\033[0m\n'"#;

/// An empty home directory (htop and mc write their settings there).
fn home() -> String {
    let dir = tether_tests::fresh_dir();
    std::fs::create_dir_all(&dir).unwrap();
    dir.display().to_string()
}

fn argv(words: &[&str]) -> Vec<String> {
    words.iter().map(|w| w.to_string()).collect()
}

fn programs() -> Vec<Program> {
    let file = lines_file();
    let inner_tmux = format!("tether-judge-inner-{}", std::process::id());
    // vim echoes a marker built by concatenation, so the typed command
    // line never contains it.
    vec![
        Program {
            name: "vim",
            argv: argv(&["vim", "-u", "DEFAULTS", "-i", "NONE", "-n", &file]),
            env: json!({}),
            steps: vec![
                Step("line 001", "50G:echo 'st'.'ep1'\r"),
                Step("step1", "dd3ddOinserted above\x1b:echo 'st'.'ep2'\r"),
                Step("step2", "\x05\x05\x05\x19:echo 'st'.'ep3'\r"),
                Step("step3", ":split\r:echo 'st'.'ep4'\r"),
                Step("step4", "\x17j10j\x05\x05\x05:echo 'st'.'ep5'\r"),
                Step("step5", "\x17kyyP5p:echo 'st'.'ep6'\r"),
                Step("step6", ":qa!\r"),
            ],
        },
        Program {
            name: "less",
            argv: argv(&["less", &file]),
            env: json!({"LESS": "", "LESSHISTFILE": "-"}),
            steps: vec![
                Step("line 001", " "),
                Step("line 046", "jjj"),
                Step("line 049", "kkkkk"),
                Step("line 022", "G"),
                Step("line 200", "g"),
                Step("line 001", "q"),
            ],
        },
        Program {
            name: "top",
            argv: argv(&["top", "-n", "2", "-d", "0.2"]),
            env: json!({}),
            steps: vec![],
        },
        Program {
            name: "htop",
            argv: argv(&["htop"]),
            env: json!({"HOME": home()}),
            steps: vec![Step("Quit", "q")],
        },
        Program {
            name: "tmux",
            argv: vec![
                "tmux".into(),
                "-L".into(),
                inner_tmux.clone(),
                "-f".into(),
                "/dev/null".into(),
                "new-session".into(),
                "bash --norc --noprofile".into(),
            ],
            env: json!({}),
            steps: vec![
                Step("0:bash", "seq 1 40; echo mar''kA\r"),
                Step("markA", "\x02%seq 100 160; echo mar''kB\r"),
                Step("markB", "\x02\"ls -l /usr/lib | head -50; echo mar''kC\r"),
                Step("markC", "\x02oclear; echo mar''kD\r"),
                // Inside the session, tmux finds its own server ($TMUX).
                Step("markD", "tmux kill-server\r"),
            ],
        },
        Program {
            name: "vim_syntax",
            argv: argv(&["vim", "-u", "DEFAULTS", "-i", "NONE", "-n", &script_file()]),
            env: json!({"TERM": "xterm-256color"}),
            steps: vec![
                Step("syntax colours", "30G:echo 'st'.'ep1'\r"),
                Step("step1", "\x06:echo 'st'.'ep2'\r"),
                Step("step2", "Vjj:\x15echo 'st'.'ep3'\r"),
                Step("step3", "\x1b:qa!\r"),
            ],
        },
        Program {
            name: "htop_256",
            argv: argv(&["htop"]),
            env: json!({"HOME": home(), "TERM": "xterm-256color"}),
            steps: vec![Step("Quit", "q")],
        },
        Program {
            name: "ls_color",
            argv: bash("ls -l --color=always /dev /usr/bin | head -60"),
            env: json!({"TERM": "xterm-256color"}),
            steps: vec![],
        },
        Program {
            name: "chart_256",
            argv: bash(CHART_256),
            env: json!({"TERM": "xterm-256color"}),
            steps: vec![],
        },
        Program {
            name: "chart_truecolour",
            argv: bash(CHART_TRUECOLOUR),
            env: json!({"TERM": "xterm-256color", "COLORTERM": "truecolor"}),
            steps: vec![],
        },
        Program {
            name: "vttest",
            argv: argv(&["vttest"]),
            env: json!({}),
            steps: vttest_steps(),
        },
    ]
}

/// vttest answered as a VT102 would when it asks what the terminal is
/// (DA), then at its main menu.
fn vttest_steps() -> Vec<Step> {
    vec![Step("\x1b[0c", "\x1b[?6c")]
}

/// vttest's menus 1 (cursor movement), 2 (screen features) and 8 (VT102
/// insert and delete): every screen (each waits for RETURN), then exit.
const VTTEST_MENUS: [&str; 3] = ["1\r", "2\r", "8\r"];
const VTTEST_MENU: &str = "Enter choice number";
const VTTEST_SCREEN: &str = "Push <RETURN>";

/// Reads frames until `needle` (or one of its `|`-separated pieces) shows
/// after `from` in stdout (bounded), or the program ends (false).
async fn until_after(
    attachment: &mut Attachment,
    received: &mut Received,
    from: usize,
    needle: &str,
) -> bool {
    let deadline = std::time::Instant::now() + tether_tests::WAIT;
    loop {
        assert!(
            std::time::Instant::now() < deadline,
            "{needle:?} never showed after {from}"
        );
        let after = &received.stdout[from.min(received.stdout.len())..];
        if needle
            .split('|')
            .any(|n| String::from_utf8_lossy(after).contains(n))
        {
            return true;
        }
        if received.exit.is_some() {
            return false;
        }
        let frame = attachment.frame().await.expect("closed before exit");
        attachment.record(frame, received);
    }
}

/// Runs `program` in a tetherd PTY: its whole output and the offsets of
/// its steps.
async fn record(server: &TestServer, program: &Program) -> (Vec<u8>, Vec<usize>, String) {
    let mut env = program.env.clone();
    if env.get("TERM").is_none() {
        env["TERM"] = json!("xterm");
    }
    let process = server
        .spawn(json!({
            "argv": program.argv, "tty": true, "cols": COLS, "rows": ROWS,
            "env": env, "retain_bytes": 8 << 20,
        }))
        .await;
    let mut attachment = server.attach(&process.id, "stdout=0").await;
    let mut received = Received::default();
    let mut marks = Vec::new();
    let mut from = 0;
    for Step(needle, keys) in &program.steps {
        let shown = until_after(&mut attachment, &mut received, from, needle).await;
        assert!(
            shown,
            "{}: ended before {needle:?} showed after {from}: {:?}",
            program.name,
            String::from_utf8_lossy(&received.stdout[from..])
        );
        from = received.stdout.len();
        marks.push(from);
        attachment
            .send(ClientFrame::Stdin {
                data: keys.as_bytes().to_vec(),
            })
            .await;
    }
    if program.name == "vttest" {
        for menu in VTTEST_MENUS.iter().chain(&["0\r"]) {
            let either = format!("{VTTEST_MENU}|{VTTEST_SCREEN}");
            loop {
                assert!(until_after(&mut attachment, &mut received, from, &either).await);
                let after = String::from_utf8_lossy(&received.stdout[from..]).into_owned();
                from = received.stdout.len();
                marks.push(from);
                if after.contains(VTTEST_MENU) {
                    break;
                }
                attachment
                    .send(ClientFrame::Stdin {
                        data: b"\r".to_vec(),
                    })
                    .await;
            }
            attachment
                .send(ClientFrame::Stdin {
                    data: menu.as_bytes().to_vec(),
                })
                .await;
        }
    }
    while received.exit.is_none() {
        let frame = attachment.frame().await.expect("closed before exit");
        attachment.record(frame, &mut received);
    }
    assert!(received.dropped.is_empty(), "{}: lost output", program.name);
    (received.stdout, marks, process.id)
}

/// The server's own view of a process's screen now (`GET .../screen`), once
/// it has caught up with `len` bytes.
async fn server_screen(server: &TestServer, id: &str, len: usize) -> Vec<String> {
    let fetch = || async {
        let response = server
            .http
            .get(server.url(&format!("/v1/processes/{id}/screen")))
            .send()
            .await
            .unwrap();
        let offset: usize = response.headers()["tether-offset"]
            .to_str()
            .unwrap()
            .parse()
            .unwrap();
        (offset, response.text().await.unwrap())
    };
    let (offset, text) = tether_tests::settle_async(fetch, |(offset, _)| *offset == len).await;
    assert_eq!(offset, len, "the screen never caught up");
    text.lines().map(|l| l.trim_end().to_string()).collect()
}

/// Every program's cases (the output up to each step, and the whole), and
/// for each program the server's `GET .../screen` at its end with the
/// name of the case it must equal.
pub async fn cases(server: &TestServer) -> (Vec<Case>, Vec<(String, Vec<String>)>) {
    let mut cases = Vec::new();
    let mut server_screens = Vec::new();
    for program in programs() {
        let (stream, marks, id) = record(server, &program).await;
        let mut ends: Vec<usize> = marks.into_iter().filter(|&m| m > 0).collect();
        ends.push(stream.len());
        ends.dedup();
        for (k, end) in ends.iter().enumerate() {
            let name = if *end == stream.len() {
                format!("{}_end", program.name)
            } else {
                format!("{}_{k:02}", program.name)
            };
            cases.push(Case {
                name,
                cols: COLS,
                rows: ROWS,
                recording: stream[..*end].to_vec(),
            });
        }
        let screen = server_screen(server, &id, stream.len()).await;
        server_screens.push((format!("{}_end", program.name), screen));
    }
    (cases, server_screens)
}
