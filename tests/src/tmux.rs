//! [`Tmux`]: a tmux server of a test's own, to drive `tether run -t` and
//! `tether attach` through a real terminal and read back what it shows.

use std::path::PathBuf;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use crate::cli::{poll, text};
use crate::tether_binary;

/// How long [`Tmux::type_until`] waits for a typed line to show before it
/// types it again.
const RETYPE: Duration = Duration::from_secs(2);

/// A tmux server of its own, killed on drop.
pub struct Tmux {
    socket: String,
    dir: PathBuf,
}

impl Tmux {
    pub fn cmd(&self, args: &[&str]) -> Output {
        Command::new("tmux")
            .args([
                "-L",
                &self.socket,
                "-f",
                self.dir.join("tmux.conf").to_str().unwrap(),
            ])
            .args(args)
            .output()
            .unwrap()
    }

    pub fn pane(&self) -> String {
        text(&self.cmd(&["capture-pane", "-p", "-t", "main"]).stdout)
    }

    pub fn pane_size(&self) -> String {
        let out = self.cmd(&[
            "display-message",
            "-p",
            "-t",
            "main",
            "#{pane_height} #{pane_width}",
        ]);
        text(&out.stdout).trim().to_string()
    }

    /// Polls (bounded) until the pane satisfies `done`.
    pub fn until(&self, what: &str, done: impl Fn(&str) -> bool) {
        poll(what, || {
            let pane = self.pane();
            if done(&pane) {
                Ok(())
            } else {
                Err(format!("never showed; pane:\n{pane}"))
            }
        })
    }

    /// Types `line` until the pane satisfies `done` (bounded): a line
    /// typed while `tether attach` still drops the terminal's replies to
    /// what it replayed (a few milliseconds after the replay shows) is
    /// discarded, not delayed.
    pub fn type_until(&self, line: &str, what: &str, done: impl Fn(&str) -> bool) {
        let mut typed: Option<Instant> = None;
        poll(what, || {
            if typed.is_none_or(|at| at.elapsed() >= RETYPE) {
                self.type_line(line);
                typed = Some(Instant::now());
            }
            let pane = self.pane();
            if done(&pane) {
                Ok(())
            } else {
                Err(format!("never showed; pane:\n{pane}"))
            }
        })
    }

    /// Like [`Tmux::until`], but true within `within` or false.
    pub fn shows_within(&self, within: Duration, done: impl Fn(&str) -> bool) -> bool {
        done(&crate::settle_blocking(within, || self.pane(), |p| done(p)))
    }

    pub fn type_line(&self, line: &str) {
        self.cmd(&["send-keys", "-t", "main", "-l", line]);
        self.cmd(&["send-keys", "-t", "main", "Enter"]);
    }

    /// The exit status a session's script wrote to `rc` in its directory
    /// (as [`Tmux::start_command`]'s does), once written (bounded).
    pub fn exit_status(&self) -> String {
        let path = self.dir.join("rc");
        let written = |c: &Option<String>| c.as_ref().is_some_and(|c| c.ends_with('\n'));
        let content =
            crate::settle_blocking(crate::WAIT, || std::fs::read_to_string(&path).ok(), written);
        match content {
            Some(content) if content.ends_with('\n') => content.trim().to_string(),
            _ => panic!("the command never ended; pane:\n{}", self.pane()),
        }
    }
}

impl Tmux {
    /// A detached tmux session running `tether run -t -- bash --norc -i`
    /// in a 100x30 window, recording the outer terminal's mode before and
    /// after (`stty -g`) and tether's exit status in files of `dir`.
    pub fn start(name: &str, server: &str, env: &str) -> (Tmux, PathBuf) {
        let tether = tether_binary();
        Tmux::start_script(name, |d| {
            format!(
                "stty -g > {d}/before; {env} TETHER_SERVER={server} {tether} run -t --env 'PS1=prompt> ' -- bash --norc -i; echo $? > {d}/rc; stty -g > {d}/after; exec sleep 600",
                tether = tether.display(),
            )
        })
    }

    /// A detached tmux session (100x30) running `line`, then writing its
    /// exit status to `rc` in the session's directory ([`Tmux::exit_status`]).
    pub fn start_command(name: &str, line: &str) -> Tmux {
        let (tmux, _) = Tmux::start_script(name, |d| {
            format!("{line}; echo $? > {d}/rc; exec sleep 600")
        });
        tmux
    }

    /// A detached tmux session (100x30) running the shell script that
    /// `script` makes from the session's directory.
    pub fn start_script(name: &str, script: impl FnOnce(&str) -> String) -> (Tmux, PathBuf) {
        let dir = std::env::temp_dir().join(format!("tether-cli-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("tmux.conf"), "set -g status off\n").unwrap();
        let tmux = Tmux {
            socket: format!("tether-test-{name}-{}", std::process::id()),
            dir: dir.clone(),
        };
        let script = script(&dir.display().to_string());
        let out = tmux.cmd(&[
            "new-session",
            "-d",
            "-s",
            "main",
            "-x",
            "100",
            "-y",
            "30",
            &script,
        ]);
        assert!(out.status.success(), "{}", text(&out.stderr));
        (tmux, dir)
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = self.cmd(&["kill-server"]);
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
