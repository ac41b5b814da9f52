//! `tether run -t` and `tether attach` driven through a real terminal
//! (tmux): raw mode, resizes, Ctrl-C, detach keys, the local terminal's
//! modes given back, and re-attaching (screen or bytes) without typing
//! anything into the shell.

#![allow(clippy::unwrap_used)]

use std::path::{Path, PathBuf};

use tether_tests::cli::{block_on, get_bytes, poll, text, wait_file};
use tether_tests::tmux::Tmux;
use tether_tests::{tether_binary, TestServer};

#[test]
fn run_t_drives_an_interactive_shell_in_a_real_terminal() {
    let server = TestServer::start();
    let (tmux, dir) = Tmux::start("shell", &server.base, "");
    tmux.until("the prompt", |p| p.contains("prompt>"));

    tmux.type_line("echo $((6*7))");
    tmux.until("42", |p| p.lines().any(|l| l.trim() == "42"));
    // Raw mode: only the remote terminal echoes what is typed.
    assert_eq!(
        tmux.pane().matches("echo $((6*7))").count(),
        1,
        "{}",
        tmux.pane()
    );

    // The PTY has the size of the outer terminal, and follows its resizes.
    let size = tmux.pane_size();
    tmux.type_line("stty size");
    tmux.until("the initial size", |p| p.lines().any(|l| l.trim() == size));
    tmux.cmd(&["resize-window", "-t", "main", "-x", "120", "-y", "40"]);
    let resized = tmux.pane_size();
    assert_ne!(resized, size);
    // The resize travels as SIGWINCH -> resize frame; the typed command
    // may overtake it, so type again until the new size shows (bounded).
    tmux.type_until("clear; stty size", "the new size", |p| {
        p.lines().any(|l| l.trim() == resized)
    });

    // Ctrl-C reaches the remote foreground job, not tether. (Wait until
    // the job runs: a 0x03 in the same burst as the Enter that starts it
    // would make the remote line discipline flush that Enter.)
    tmux.type_line("echo sleeping; sleep 100");
    tmux.until("the job", |p| p.lines().any(|l| l.trim() == "sleeping"));
    tmux.cmd(&["send-keys", "-t", "main", "C-c"]);
    tmux.type_line("echo alive-$((1+1))");
    tmux.until("the shell after Ctrl-C", |p| {
        p.contains("alive-2\n") || p.lines().any(|l| l.trim() == "alive-2")
    });

    tmux.type_line("exit 3");
    assert_eq!(wait_file(&dir.join("rc")), "3\n");
    let before = wait_file(&dir.join("before"));
    let after = wait_file(&dir.join("after"));
    assert_eq!(before, after, "terminal mode restored");
}

#[test]
fn a_panic_in_raw_mode_restores_the_terminal() {
    let server = TestServer::start();
    let (_tmux, dir) = Tmux::start("panic", &server.base, "TETHER_TEST_PANIC_IN_RAW_MODE=1");
    assert_eq!(wait_file(&dir.join("rc")), "101\n", "tether panicked");
    let before = wait_file(&dir.join("before"));
    let after = wait_file(&dir.join("after"));
    assert_eq!(before, after, "terminal mode restored after the panic");
}

#[test]
fn detach_keys_leave_the_process_running_and_attach_resumes_it() {
    let server = TestServer::start();
    let tether = tether_binary();
    let base = server.base.clone();
    // run -t, detached with Ctrl-P Ctrl-Q; then attach by an 8-character
    // prefix with other keys (Ctrl-X), detached again; then attach again
    // and exit the shell.
    let (tmux, dir) = Tmux::start_script("detach", |d| {
        format!(
            "stty -g > {d}/before; export TETHER_SERVER={base}; \
             {t} run -t --env 'PS1=prompt> ' -- bash --norc -i 2> {d}/detached; echo $? > {d}/rc1; \
             id=$(sed -n 's/.*tether attach \\([0-9a-f]*\\).*/\\1/p' {d}/detached | cut -c1-8); \
             {t} attach --detach-keys ctrl-x $id; echo $? > {d}/rc2; \
             {t} attach $id; echo $? > {d}/rc3; stty -g > {d}/after; exec sleep 600",
            t = tether.display(),
        )
    });
    tmux.until("the prompt", |p| p.contains("prompt>"));
    tmux.type_line("echo one-$((1+1))");
    tmux.until("one-2", |p| p.lines().any(|l| l.trim() == "one-2"));

    tmux.cmd(&["send-keys", "-t", "main", "C-p", "C-q"]);
    assert_eq!(wait_file(&dir.join("rc1")), "0\n", "a detach exits 0");
    let message = std::fs::read_to_string(dir.join("detached")).unwrap();
    let id = message
        .split("tether attach ")
        .nth(1)
        .map(|rest| rest.trim_end_matches(|c: char| !c.is_ascii_hexdigit()))
        .unwrap_or_else(|| panic!("no re-attach hint in {message:?}"))
        .to_string();
    assert_eq!(id.len(), 32, "{message}");
    let info = block_on(server.status(&id));
    assert!(!info.is_exited(), "the process was ended by the detach");

    // Re-attached (by prefix): the terminal shows the shell's screen, which
    // replaces the detach message (so the attachment is live and the
    // terminal raw; typed earlier, a line would be flushed by the switch
    // to raw mode), and the shell takes input again.
    let reattached = |p: &str, line: &str| {
        !p.contains("tether: detached") && p.lines().any(|l| l.trim() == line)
    };
    tmux.until("the screen", |p| reattached(p, "one-2"));
    tmux.type_until("echo two-$((2+2))", "two-4", |p| {
        p.lines().any(|l| l.trim() == "two-4")
    });
    tmux.cmd(&["send-keys", "-t", "main", "C-x"]);
    assert_eq!(wait_file(&dir.join("rc2")), "0\n", "--detach-keys ctrl-x");
    assert!(!block_on(server.status(&id)).is_exited());

    tmux.until("the second screen", |p| reattached(p, "two-4"));
    tmux.type_until("echo three-$((3+3)); exit 5", "the exit", |_| {
        dir.join("rc3").exists()
    });
    assert_eq!(wait_file(&dir.join("rc3")), "5\n");
    assert!(tmux.pane().lines().any(|l| l.trim() == "three-6"));
    assert_eq!(
        wait_file(&dir.join("before")),
        wait_file(&dir.join("after")),
        "terminal mode restored"
    );
}

/// The modes a terminal program turns on, as tmux sees them in the pane:
/// alternate screen, mouse reporting (any, SGR), application cursor keys,
/// application keypad, and the cursor shown (1) or hidden (0).
fn pane_modes(tmux: &Tmux) -> String {
    let out = tmux.cmd(&[
        "display-message",
        "-p",
        "-t",
        "main",
        "#{alternate_on} #{mouse_any_flag} #{mouse_sgr_flag} #{keypad_cursor_flag} #{keypad_flag} #{cursor_flag}",
    ]);
    text(&out.stdout).trim().to_string()
}

/// Polls (bounded) until the pane's modes are `expected`: tmux reads what
/// was written to the pane a moment after the writer may have exited.
fn until_modes(tmux: &Tmux, expected: &str, what: &str) {
    poll(what, || match pane_modes(tmux) {
        modes if modes == expected => Ok(()),
        modes => Err(format!(
            "modes {modes:?}, not {expected:?}; pane:\n{}",
            tmux.pane()
        )),
    })
}

/// A program that is still on the alternate screen with the mouse and
/// application keys on when the user detaches (vim, less), or one killed
/// before it cleaned up, would leave the user's own shell getting escape
/// sequences for every click and arrow key: tether gives the terminal its
/// usual modes back at the end of the session.
#[test]
fn detaching_or_a_killed_program_gives_the_local_terminal_its_modes_back() {
    let server = TestServer::start();
    let tether = tether_binary();
    let base = server.base.clone();
    const NORMAL: &str = "0 0 0 0 0 1";
    const TUI: &str = "1 1 1 1 1 0";
    let (tmux, dir) = Tmux::start_script("modes", |d| {
        // The TUI's modes, then a line to wait for; the second run kills
        // itself once told to, without cleaning up.
        let modes = r"\033[?1049h\033[?1000h\033[?1006h\033[?1h\033=\033[?2004h\033[?25l";
        std::fs::write(
            format!("{d}/tui.sh"),
            format!("printf '{modes}TUI-UP\\n'; exec sleep 600\n"),
        )
        .unwrap();
        std::fs::write(
            format!("{d}/dies.sh"),
            format!("printf '{modes}DYING\\n'; read line; kill -9 $$\n"),
        )
        .unwrap();
        format!(
            "export TETHER_SERVER={base}; echo SHELL-READY; \
             {t} run -t -- sh {d}/tui.sh 2> {d}/detached; echo $? > {d}/rc1; read go; \
             {t} run -t -- sh {d}/dies.sh 2> {d}/died; echo $? > {d}/rc2; exec sleep 600",
            t = tether.display(),
        )
    });
    tmux.until("the program", |p| p.contains("TUI-UP"));
    until_modes(&tmux, TUI, "the program set its modes");
    tmux.cmd(&["send-keys", "-t", "main", "C-p", "C-q"]);
    assert_eq!(wait_file(&dir.join("rc1")), "0\n", "a detach exits 0");
    until_modes(&tmux, NORMAL, "after the detach");
    tmux.cmd(&["send-keys", "-t", "main", "Enter"]);
    tmux.until("the second program", |p| p.contains("DYING"));
    until_modes(&tmux, TUI, "the second program set them");
    tmux.cmd(&["send-keys", "-t", "main", "Enter"]);
    assert_eq!(wait_file(&dir.join("rc2")), "137\n", "killed by SIGKILL");
    until_modes(&tmux, NORMAL, "after the killed program");
    // The shell's screen is back, with what was on it before the runs.
    tmux.until("the shell's screen", |p| p.contains("SHELL-READY"));
}

/// The id in the "re-attach with: tether attach ID" line of a detach.
fn detached_id(path: &Path) -> String {
    poll("the re-attach hint", || {
        let message = std::fs::read_to_string(path).unwrap_or_default();
        message
            .split("tether attach ")
            .nth(1)
            .map(|rest| {
                rest.chars()
                    .take_while(char::is_ascii_hexdigit)
                    .collect::<String>()
            })
            .filter(|id| id.len() == 32)
            .ok_or_else(|| format!("no re-attach hint in {message:?}"))
    })
}

/// A tmux session running a PTY shell with `tether run -t` (extra `run`
/// flags in `flags`), then, after each detach (its message goes to
/// `detached1..3`), printing `between-N` and waiting for the file `goN`
/// before `tether attach`, twice.
fn shell_attached_three_times(name: &str, server: &str, flags: &str) -> (Tmux, PathBuf) {
    let tether = tether_binary();
    Tmux::start_script(name, |d| {
        let attach = |n: u32| {
            format!(
                "echo between-{n}; until [ -e {d}/go{n} ]; do sleep 0.05; done; \
                 {t} attach $id 2> {d}/detached{next}; ",
                t = tether.display(),
                next = n + 1,
            )
        };
        format!(
            "export TETHER_SERVER={server}; \
             {t} run -t {flags} --env 'PS1=prompt> ' --env TERM=xterm-256color -- bash --norc -i 2> {d}/detached1; \
             id=$(sed -n 's/.*tether attach \\([0-9a-f]*\\).*/\\1/p' {d}/detached1); \
             {a1}{a2}echo $? > {d}/rc; exec sleep 600",
            t = tether.display(),
            a1 = attach(1),
            a2 = attach(2),
        )
    })
}

/// Detaches (Ctrl-P Ctrl-Q) attachment `n` and attaches again; returns
/// the id from the detach message once the new attachment has rendered
/// what it replays: the screen (its reset wipes `between-N` from the pane)
/// or the retained bytes (the shell's last prompt follows `between-N`).
fn detach_and_reattach(tmux: &Tmux, dir: &Path, n: u32) -> String {
    tmux.cmd(&["send-keys", "-t", "main", "C-p", "C-q"]);
    let id = detached_id(&dir.join(format!("detached{n}")));
    let between = format!("between-{n}");
    tmux.until(&between, |p| p.contains(&between));
    std::fs::write(dir.join(format!("go{n}")), "").unwrap();
    tmux.until("the replay", |p| {
        let after = p.rsplit(&between).next().unwrap_or(p);
        after
            .lines()
            .rev()
            .find(|l| !l.trim().is_empty())
            .map(str::trim)
            == Some("prompt>")
            && (!p.contains(&between) || after.lines().count() > 2)
    });
    id
}

/// Types a line that proves the shell has read nothing but what was typed:
/// anything injected before it turns `read` into another command (exit 127)
/// and a reply arriving later is what `read` gets; with nothing injected,
/// `read` times out (exit 142) with nothing read.
fn assert_nothing_was_injected(tmux: &Tmux, tag: &str) {
    let line = format!("read -t 1 x; echo \"{tag}[$x] rc[$?]\"");
    tmux.type_until(&line, tag, |p| {
        p.lines().any(|l| l.starts_with(&format!("{tag}[")))
    });
    let pane = tmux.pane();
    assert!(
        pane.lines().any(|l| l.trim() == format!("{tag}[] rc[142]")),
        "the shell read input nobody typed:\n{pane}"
    );
    assert!(
        pane.lines().any(|l| l.trim() == format!("prompt> {line}")),
        "the command line was not what was typed:\n{pane}"
    );
}

#[test]
fn reattaching_after_vim_types_nothing_into_the_shell() {
    // From the screen (which carries no query): only the bytes after it
    // are replayed.
    vim_then_reattach_twice("replies-screen", &[], "");
}

#[test]
fn reattaching_after_vim_by_replaying_its_bytes_types_nothing_into_the_shell() {
    // Without screens every retained byte is replayed, vim's queries too:
    // the terminal answers them, and tether must drop the answers.
    vim_then_reattach_twice("replies-bytes", &["--no-screen"], "");
}

#[test]
fn reattaching_after_vim_in_drop_mode_types_nothing_into_the_shell() {
    vim_then_reattach_twice("replies-drop", &[], "--drop");
    vim_then_reattach_twice("replies-drop-bytes", &["--no-screen"], "--drop");
}

fn vim_then_reattach_twice(name: &str, server_args: &[&str], run_flags: &str) {
    let server = TestServer::start_with(server_args);
    let (tmux, dir) = shell_attached_three_times(name, &server.base, run_flags);
    tmux.until("the prompt", |p| p.contains("prompt>"));
    // vim asks the terminal for its version, cursor position, colours...:
    // queries that stay in the retained output.
    tmux.type_line("vim -N -u NONE -i NONE");
    tmux.until("vim", |p| p.contains("VIM - Vi IMproved"));
    tmux.type_line(":q");
    tmux.until("the shell after vim", |p| {
        p.lines().filter(|l| l.trim() == "prompt>").count() == 1
    });
    let id = detach_and_reattach(&tmux, &dir, 1);
    let output = get_bytes(&server, &format!("/v1/processes/{id}/output"));
    let queries = [&b"\x1b[>c"[..], b"\x1b[6n", b"\x1b]11;?", b"$p"];
    assert!(
        queries
            .iter()
            .any(|q| output.windows(q.len()).any(|w| w == *q)),
        "vim wrote no terminal query, the test proves nothing: {:?}",
        String::from_utf8_lossy(&output)
    );
    assert_nothing_was_injected(&tmux, "round1");
    assert_eq!(detach_and_reattach(&tmux, &dir, 2), id);
    assert_nothing_was_injected(&tmux, "round2");
    tmux.type_line("exit 7");
    assert_eq!(wait_file(&dir.join("rc")), "7\n");
}

#[test]
fn attach_to_a_pty_whose_start_was_evicted_shows_its_screen() {
    let server = TestServer::start();
    let (tmux, dir) = shell_attached_three_times("evicted", &server.base, "--retain 4096");
    tmux.until("the prompt", |p| p.contains("prompt>"));
    // Colours, a title, and far more than the retention: the start of the
    // output (the first prompt) is evicted.
    tmux.type_line(
        "printf '\\033]0;evicted title\\007'; seq 1 3000; printf '\\033[1;31mred\\033[0m\\n'",
    );
    tmux.until("the output", |p| p.lines().any(|l| l.trim() == "red"));
    let id = detach_and_reattach(&tmux, &dir, 1);
    let info = block_on(server.status(&id));
    assert!(info.stdout_bytes > 3 * 4096, "{}", info.stdout_bytes);

    let screen = || {
        let text = get_bytes(&server, &format!("/v1/processes/{id}/screen"));
        String::from_utf8_lossy(&text).into_owned()
    };
    let expected = screen();
    assert!(expected.contains("2999\n3000\nred\n"), "{expected}");
    // The pane is the screen, row for row, with no notice of lost bytes.
    let rows = |text: &str| -> Vec<String> {
        let mut rows: Vec<String> = text.lines().map(|l| l.trim_end().to_string()).collect();
        while rows.last().is_some_and(String::is_empty) {
            rows.pop();
        }
        rows
    };
    tmux.until("the screen in the pane", |p| rows(p) == rows(&expected));
    assert!(!tmux.pane().contains("lost at offset"));
    let title = tmux.cmd(&["display-message", "-p", "-t", "main", "#{pane_title}"]);
    assert_eq!(text(&title.stdout).trim(), "evicted title");
    tmux.type_until("echo \"after[$((2+3))]\"", "the shell takes input", |p| {
        p.lines().any(|l| l.trim() == "after[5]")
    });
    assert!(rows(&screen()).contains(&"after[5]".to_string()));
}

// `tether run` starts and attaches in one WebSocket (`GET /v1/run`).

/// Watching a pipe process from a terminal: `attach --no-signals` turns
/// Ctrl-C into a detach (docker's --sig-proxy=false), and the detach keys
/// work without -i (the terminal is watched for them alone); the process
/// runs on after both.
#[test]
fn watching_a_pipe_process_detaches_by_ctrl_c_or_the_keys_and_leaves_it_running() {
    let server = TestServer::start();
    let tether = tether_binary();
    let base = server.base.clone();
    let id = block_on(server.sh(
        "trap 'echo got-int' INT; echo watched; while :; do sleep 0.05; done",
        serde_json::json!({}),
    ))
    .id;
    let (tmux, dir) = Tmux::start_script("watch", |d| {
        format!(
            "export TETHER_SERVER={base}; \
             {t} attach --no-signals {id} 2> {d}/detached1; echo $? > {d}/rc1; \
             {t} attach {id} 2> {d}/detached2; echo $? > {d}/rc2; exec sleep 600",
            t = tether.display(),
        )
    });
    tmux.until("the output", |p| p.contains("watched"));
    tmux.cmd(&["send-keys", "-t", "main", "C-c"]);
    assert_eq!(wait_file(&dir.join("rc1")), "0\n", "Ctrl-C detached");
    let message = std::fs::read_to_string(dir.join("detached1")).unwrap();
    assert!(message.contains("tether: detached"), "{message}");
    assert!(!block_on(server.status(&id)).is_exited());

    // The second attachment (without -i) replays "watched" below the
    // first; typed text goes nowhere, the keys detach.
    tmux.until("the second attachment", |p| {
        p.matches("watched").count() == 2
    });
    tmux.cmd(&["send-keys", "-t", "main", "-l", "typed"]);
    tmux.cmd(&["send-keys", "-t", "main", "C-p", "C-q"]);
    assert_eq!(wait_file(&dir.join("rc2")), "0\n", "the detach keys");
    let info = block_on(server.status(&id));
    assert!(!info.is_exited(), "{info:?}");
    let output = get_bytes(&server, &format!("/v1/processes/{id}/output"));
    assert_eq!(
        String::from_utf8_lossy(&output),
        "watched\n",
        "no signal, nothing typed reached it"
    );
    assert!(!tmux.pane().contains("typed"), "{}", tmux.pane());
}
