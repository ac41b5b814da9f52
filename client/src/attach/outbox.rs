//! Numbered input (`input=ID`): the input the connection task has numbered
//! and sent but the server has not yet acknowledged. It is kept across
//! reconnects and resent from where the server says it stands, so each
//! keystroke, signal and resize is applied once however often the
//! connection drops. Its size is bounded ([`MAX_UNACKNOWLEDGED`]): the
//! task takes no more commands past it, so writes wait (back-pressure).

use std::collections::VecDeque;

use tether_protocol::{ClientFrame, InputAction};

use super::input::Command;

/// Most input units (stdin bytes, plus one per other action) held
/// unacknowledged; one more command (at most 64 KiB) may be taken while
/// under it.
pub(crate) const MAX_UNACKNOWLEDGED: u64 = 1 << 20;

/// Numbered input not yet acknowledged, oldest first.
#[derive(Debug, Default)]
pub(crate) struct Outbox {
    /// `(seq, action)`: each action's first unit's position.
    pending: VecDeque<(u64, InputAction)>,
    /// The position the next new action gets.
    next: u64,
    /// Where the server said it stands: every unit before it is applied.
    acknowledged: u64,
}

impl Outbox {
    /// Numbers a command and keeps it until acknowledged; returns the frame
    /// that sends it.
    pub fn push(&mut self, command: Command) -> ClientFrame {
        let action = command.into_action();
        let seq = self.next;
        self.next += action.units();
        self.pending.push_back((seq, action.clone()));
        ClientFrame::Input { seq, action }
    }

    /// The server has applied every unit before `applied`: forget them. A
    /// position the client never sent (a server of another stream) is
    /// capped at what was sent.
    pub fn acknowledge(&mut self, applied: u64) {
        let applied = applied.min(self.next);
        if applied <= self.acknowledged {
            return;
        }
        self.acknowledged = applied;
        while let Some((seq, action)) = self.pending.front_mut() {
            let end = *seq + action.units();
            if end <= applied && !(action.units() == 0 && *seq == applied) {
                self.pending.pop_front();
                continue;
            }
            if *seq < applied {
                // A stdin action applied in part: keep its tail.
                if let InputAction::Stdin { data } = action {
                    let skip = (applied - *seq) as usize;
                    data.drain(..skip.min(data.len()));
                    *seq = applied;
                }
            }
            break;
        }
    }

    /// The frames to resend on a new connection, once the server said where
    /// it stands: only what it has not applied.
    pub fn unacknowledged(&self) -> impl Iterator<Item = ClientFrame> + '_ {
        self.pending.iter().map(|(seq, action)| ClientFrame::Input {
            seq: *seq,
            action: action.clone(),
        })
    }

    /// True once anything was numbered: a new connection then resumes the
    /// stream (`input_resume=1`) rather than starting it.
    pub fn started(&self) -> bool {
        self.next > 0
    }

    /// True while another command may be taken.
    pub fn has_room(&self) -> bool {
        self.next - self.acknowledged < MAX_UNACKNOWLEDGED
    }
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;

    use super::*;

    fn seqs(outbox: &Outbox) -> Vec<u64> {
        outbox
            .unacknowledged()
            .map(|f| match f {
                ClientFrame::Input { seq, .. } => seq,
                _ => u64::MAX,
            })
            .collect()
    }

    #[test]
    fn numbers_by_byte_and_event_and_resends_only_the_unapplied_tail() {
        let mut outbox = Outbox::default();
        outbox.push(Command::Stdin(Bytes::from_static(b"abc")));
        outbox.push(Command::Signal("INT".into()));
        outbox.push(Command::Stdin(Bytes::from_static(b"de")));
        outbox.push(Command::Eof);
        assert_eq!(seqs(&outbox), vec![0, 3, 4, 6]);
        outbox.acknowledge(2);
        let first = outbox.unacknowledged().next();
        assert_eq!(
            first,
            Some(ClientFrame::Input {
                seq: 2,
                action: InputAction::Stdin {
                    data: b"c".to_vec()
                }
            })
        );
        outbox.acknowledge(5);
        assert_eq!(seqs(&outbox), vec![5, 6]);
        outbox.acknowledge(99);
        assert!(outbox.unacknowledged().next().is_none() && outbox.started());
    }
}
