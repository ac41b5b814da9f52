//! Incremental UTF-8 decoding of one output stream.

use crate::attach::Chunk;

/// Decodes one stream's bytes into text as they arrive. A code point split
/// across chunks is held back until its last byte comes; invalid bytes
/// become U+FFFD. Use one decoder per stream: a `dropped` notice or a split
/// code point on stderr then never affects stdout, and the reverse.
///
/// At a gap (a [`Chunk::Dropped`]), the partial code point before it cannot
/// be completed by the bytes after it, so it becomes U+FFFD and decoding
/// starts afresh.
///
/// ```
/// use tether_client::{Chunk, Utf8Decoder};
///
/// let mut out = Utf8Decoder::new();
/// let euro = "€".as_bytes(); // e2 82 ac
/// assert_eq!(out.decode(&euro[..2]), "");
/// assert_eq!(out.decode(&euro[2..]), "€");
/// assert_eq!(out.decode(b"ok\xe2"), "ok");
/// assert_eq!(out.push(&Chunk::Dropped { offset: 9, length: 4 }), "\u{FFFD}");
/// assert_eq!(out.finish(), "");
/// ```
#[derive(Debug, Default, Clone)]
pub struct Utf8Decoder {
    /// The start of an incomplete code point (at most 3 bytes).
    pending: Vec<u8>,
}

impl Utf8Decoder {
    /// A decoder with nothing pending.
    pub fn new() -> Utf8Decoder {
        Utf8Decoder::default()
    }

    /// Decodes the next bytes of the stream; returns the text that is
    /// complete so far.
    pub fn decode(&mut self, bytes: &[u8]) -> String {
        let mut input = std::mem::take(&mut self.pending);
        input.extend_from_slice(bytes);
        let mut out = String::with_capacity(input.len());
        let mut rest = &input[..];
        loop {
            match std::str::from_utf8(rest) {
                Ok(text) => {
                    out.push_str(text);
                    break;
                }
                Err(e) => {
                    let (valid, after) = rest.split_at(e.valid_up_to());
                    // `valid` is valid UTF-8 by the error's contract.
                    out.push_str(std::str::from_utf8(valid).unwrap_or_default());
                    match e.error_len() {
                        Some(bad) => {
                            out.push(char::REPLACEMENT_CHARACTER);
                            rest = &after[bad..];
                        }
                        None => {
                            // An incomplete code point at the end: keep it.
                            self.pending = after.to_vec();
                            break;
                        }
                    }
                }
            }
        }
        out
    }

    /// A gap in the stream: a pending partial code point can never be
    /// completed, so it becomes U+FFFD (returned) and decoding restarts.
    pub fn gap(&mut self) -> String {
        if self.pending.is_empty() {
            String::new()
        } else {
            self.pending.clear();
            char::REPLACEMENT_CHARACTER.to_string()
        }
    }

    /// Decodes a chunk from [`crate::OutputReader::chunk`]: data is decoded,
    /// a `dropped` notice is a [`Utf8Decoder::gap`].
    pub fn push(&mut self, chunk: &Chunk) -> String {
        match chunk {
            Chunk::Data { data, .. } => self.decode(data),
            Chunk::Dropped { .. } => self.gap(),
            // A screen replaces what came before it: start afresh.
            Chunk::Screen { data, .. } => {
                self.pending.clear();
                self.decode(data)
            }
        }
    }

    /// End of the stream: whatever is pending becomes U+FFFD.
    pub fn finish(&mut self) -> String {
        self.gap()
    }

    /// True when part of a code point is held back.
    pub fn has_pending(&self) -> bool {
        !self.pending.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_and_invalid_bytes() {
        let mut d = Utf8Decoder::new();
        let text = "héllo wörld 😀";
        let mut out = String::new();
        for b in text.as_bytes() {
            out.push_str(&d.decode(std::slice::from_ref(b)));
        }
        assert_eq!(out, text);
        assert_eq!(d.decode(b"a\xffb"), "a\u{FFFD}b");
        assert_eq!(d.decode(b"\xf0\x9f"), "");
        assert!(d.has_pending());
        assert_eq!(d.finish(), "\u{FFFD}");
        assert_eq!(d.decode(b"x"), "x");
    }

    #[test]
    fn a_gap_on_one_stream_leaves_the_other_alone() {
        let mut stdout = Utf8Decoder::new();
        let mut stderr = Utf8Decoder::new();
        let snow = "☃".as_bytes();
        assert_eq!(stdout.decode(&snow[..1]), "");
        assert_eq!(stderr.decode(&snow[..2]), "");
        assert_eq!(
            stderr.push(&Chunk::Dropped {
                offset: 2,
                length: 10
            }),
            "\u{FFFD}"
        );
        assert_eq!(stderr.decode(b"after"), "after");
        assert_eq!(stdout.decode(&snow[1..]), "☃");
    }
}
