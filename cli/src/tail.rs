//! `tether logs --tail N`: the last N lines of a stream, kept while the
//! retained output streams past (memory: those N lines, however long the
//! output).

use std::collections::VecDeque;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::AsyncWrite;

/// Keeps the last `n` lines written to it (a last line without its
/// newline counts as one).
pub struct TailLines {
    n: usize,
    lines: VecDeque<Vec<u8>>,
}

impl TailLines {
    pub fn new(n: usize) -> TailLines {
        TailLines {
            n,
            lines: VecDeque::new(),
        }
    }

    fn push(&mut self, mut bytes: &[u8]) {
        while !bytes.is_empty() {
            let end = bytes
                .iter()
                .position(|&b| b == b'\n')
                .map_or(bytes.len(), |i| i + 1);
            let (piece, rest) = bytes.split_at(end);
            match self.lines.back_mut() {
                Some(last) if last.last() != Some(&b'\n') => last.extend_from_slice(piece),
                _ => self.lines.push_back(piece.to_vec()),
            }
            while self.lines.len() > self.n {
                self.lines.pop_front();
            }
            bytes = rest;
        }
    }

    /// The kept lines, in order.
    pub fn into_bytes(self) -> Vec<u8> {
        self.lines.into_iter().flatten().collect()
    }
}

impl AsyncWrite for TailLines {
    fn poll_write(
        self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        self.get_mut().push(buf);
        Poll::Ready(Ok(buf.len()))
    }

    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

#[cfg(test)]
mod tests {
    use super::TailLines;

    fn tail(n: usize, writes: &[&str]) -> String {
        let mut t = TailLines::new(n);
        for w in writes {
            t.push(w.as_bytes());
        }
        String::from_utf8(t.into_bytes()).unwrap_or_default()
    }

    #[test]
    fn keeps_the_last_lines_across_any_split_of_the_writes() {
        assert_eq!(tail(2, &["a\nb\nc\n"]), "b\nc\n");
        assert_eq!(tail(2, &["a\nb", "\nc", "\n"]), "b\nc\n");
        assert_eq!(tail(2, &["a\nb\nc"]), "b\nc");
        assert_eq!(tail(5, &["a\n"]), "a\n");
        assert_eq!(tail(0, &["a\nb\n"]), "");
        assert_eq!(tail(1, &["", "x", "y", "\n"]), "xy\n");
    }
}
