//! Why a process the table no longer knows is gone: the last
//! [`KEPT`] forgotten ids (and names), each with its reason and when, so a
//! 404 can say "removed", "expired" or "forgotten to make room" instead of
//! leaving the user to guess. Bounded, memory only (a restart forgets it).

use std::collections::VecDeque;
use std::time::SystemTime;

/// How many forgotten processes are remembered (about 150 bytes each).
pub const KEPT: usize = 1024;

/// Why a process was forgotten.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum Why {
    /// `DELETE` (`tether rm`).
    Removed,
    /// Its `--exited-ttl-ms` passed.
    Expired,
    /// The retention budget or `--max-known-processes` needed its room
    /// (oldest exit first).
    ForRoom,
}

impl Why {
    fn words(self) -> &'static str {
        match self {
            Why::Removed => "it was removed (DELETE, `tether rm`)",
            Why::Expired => "its --exited-ttl-ms passed after it exited",
            Why::ForRoom => {
                "it was forgotten to make room for newer processes (--retain-total, --max-known-processes)"
            }
        }
    }
}

/// One forgotten process (a handover carries the list as it is).
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct Gone {
    id: String,
    name: Option<String>,
    why: Why,
    at: SystemTime,
}

/// The last [`KEPT`] forgotten processes, newest last.
#[derive(Default)]
pub struct Forgotten(VecDeque<Gone>);

impl Forgotten {
    /// The list, for a handover to carry.
    pub fn carried(&self) -> Vec<Gone> {
        self.0.iter().cloned().collect()
    }

    /// The list a handover carried (at most [`KEPT`]).
    pub fn adopted(gone: Vec<Gone>) -> Forgotten {
        let skip = gone.len().saturating_sub(KEPT);
        Forgotten(gone.into_iter().skip(skip).collect())
    }

    /// Notes that `id` (named `name`) was forgotten, and why.
    pub fn note(&mut self, id: &str, name: Option<&str>, why: Why) {
        if self.0.len() >= KEPT {
            self.0.pop_front();
        }
        self.0.push_back(Gone {
            id: id.to_string(),
            name: name.map(str::to_string),
            why,
            at: SystemTime::now(),
        });
    }

    /// Why the process with this id or name is gone, in words, if it is
    /// among the last forgotten (the newest first: a name may be reused).
    pub fn why(&self, id_or_name: &str) -> Option<String> {
        let gone = self
            .0
            .iter()
            .rev()
            .find(|g| g.id == id_or_name || g.name.as_deref() == Some(id_or_name))?;
        let secs = gone.at.elapsed().map_or(0, |d| d.as_secs());
        Some(format!("{}, {secs} s ago", gone.why.words()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_newest_reason_is_told_and_the_oldest_go_first() {
        let mut forgotten = Forgotten::default();
        forgotten.note("a", Some("web"), Why::Expired);
        forgotten.note("b", Some("web"), Why::Removed);
        assert!(forgotten.why("web").is_some_and(|w| w.contains("removed")));
        assert!(forgotten.why("a").is_some_and(|w| w.contains("exited-ttl")));
        for i in 0..KEPT {
            forgotten.note(&format!("x{i}"), None, Why::ForRoom);
        }
        assert_eq!(forgotten.why("a"), None);
        assert!(forgotten.why("x5").is_some_and(|w| w.contains("make room")));
    }
}
