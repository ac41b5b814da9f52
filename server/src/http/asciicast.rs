//! The lines of an asciicast (`recording.rs` writes them): the header, and
//! each event `[time, code, data]` written straight into its line's bytes,
//! with no `serde_json::Value` and no text made of the output first. The
//! bytes are serde_json's, exactly: the time printed by serde_json (an f64
//! in its shortest form: `0.0`, `1.5`, `0.001`), the data as serde_json
//! escapes a string (`\"`, `\\`, `\b` `\t` `\n` `\f` `\r`, every other
//! control character `\u00XX` in lowercase hex, everything else as it is,
//! U+2028 included); the tests hold it to serde_json.

use axum::body::Bytes;

/// An asciicast header, its fields in the order the format lists them
/// (`version` first).
#[derive(serde::Serialize)]
pub struct Header {
    pub version: u8,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub term: Option<Term>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub width: Option<u16>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub height: Option<u16>,
    pub timestamp: u64,
    pub command: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
}

/// The v3 header's terminal size.
#[derive(serde::Serialize)]
pub struct Term {
    pub cols: u16,
    pub rows: u16,
}

/// The header as its line (one per recording, so through serde_json).
pub fn header_line(header: &Header) -> Bytes {
    let mut text = serde_json::to_vec(header).unwrap_or_default();
    text.push(b'\n');
    Bytes::from(text)
}

/// The line `[seconds,"code","data"]\n` of an event `ms` thousandths of a
/// second from the one before (v3) or from the start (v2). `data` is UTF-8
/// text, each invalid sequence in it written as one U+FFFD as
/// `String::from_utf8_lossy` replaces it.
pub fn event_line(ms: u64, code: &str, data: &[u8]) -> Bytes {
    // The escapes lengthen most text little (a newline each line).
    let mut out = Vec::with_capacity(data.len() + data.len() / 8 + code.len() + 32);
    out.push(b'[');
    // The time through serde_json itself, whose float printing has changed
    // between versions (ryu, then zmij); writing into a Vec cannot fail.
    serde_json::to_writer(&mut out, &(ms as f64 / 1000.0)).unwrap_or_default();
    out.extend_from_slice(b",\"");
    escape_into(&mut out, code.as_bytes());
    out.extend_from_slice(b"\",\"");
    // Validating is fast (a word at a time over ASCII), so valid text,
    // nearly all of it, is never read in `Utf8Chunks`' slower steps.
    match std::str::from_utf8(data) {
        Ok(text) => escape_into(&mut out, text.as_bytes()),
        Err(_) => {
            for chunk in data.utf8_chunks() {
                escape_into(&mut out, chunk.valid().as_bytes());
                if !chunk.invalid().is_empty() {
                    out.extend_from_slice("\u{fffd}".as_bytes());
                }
            }
        }
    }
    out.extend_from_slice(b"\"]\n");
    Bytes::from(out)
}

/// What a byte becomes in a JSON string, as serde_json writes it: `0`
/// itself, `u` a `\u00XX`, else the letter after the backslash.
const ESCAPE: [u8; 256] = {
    let mut table = [0u8; 256];
    let mut byte = 0;
    while byte < 0x20 {
        table[byte] = b'u';
        byte += 1;
    }
    table[0x08] = b'b';
    table[0x09] = b't';
    table[0x0a] = b'n';
    table[0x0c] = b'f';
    table[0x0d] = b'r';
    table[b'"' as usize] = b'"';
    table[b'\\' as usize] = b'\\';
    table
};

const HEX: &[u8; 16] = b"0123456789abcdef";

/// Appends `text` (UTF-8) escaped as a JSON string's contents: the runs
/// between escapes, found eight bytes at a time, are copied whole.
fn escape_into(out: &mut Vec<u8>, text: &[u8]) {
    // `start`: the first byte not copied yet; `at`: the first not looked at.
    let (mut start, mut at) = (0, 0);
    loop {
        let next = match text.get(at..at + 8) {
            Some(eight) => match first_escaped(eight) {
                Some(i) => at + i,
                None => {
                    at += 8;
                    continue;
                }
            },
            None => match text[at..].iter().position(|&b| ESCAPE[usize::from(b)] != 0) {
                Some(i) => at + i,
                None => break,
            },
        };
        out.extend_from_slice(&text[start..next]);
        let byte = text[next];
        match ESCAPE[usize::from(byte)] {
            b'u' => {
                out.extend_from_slice(b"\\u00");
                out.push(HEX[usize::from(byte >> 4)]);
                out.push(HEX[usize::from(byte & 0xf)]);
            }
            0 => out.push(byte),
            short => out.extend_from_slice(&[b'\\', short]),
        }
        (start, at) = (next + 1, next + 1);
    }
    out.extend_from_slice(&text[start..]);
}

/// The first of eight bytes that needs an escape (a control character,
/// `"` or `\`), if one does.
fn first_escaped(eight: &[u8]) -> Option<usize> {
    const ONES: u64 = u64::from_le_bytes([0x01; 8]);
    const HIGH: u64 = u64::from_le_bytes([0x80; 8]);
    let mut bytes = [0u8; 8];
    bytes.copy_from_slice(eight);
    // Little-endian: the first byte is the lowest.
    let word = u64::from_le_bytes(bytes);
    // Each byte of w below n (n <= 0x80) with no borrow from the bytes
    // before it sets its high bit in (w - n*ONES) & !w, and only those
    // do: a borrow starts only at a byte below n, so the lowest high bit
    // set is the first such byte. Below 1 is 0: the xor makes the byte
    // sought 0.
    let below = |w: u64, n: u64| w.wrapping_sub(n * ONES) & !w & HIGH;
    let control = below(word, 0x20);
    let quote = below(word ^ (u64::from(b'"') * ONES), 1);
    let backslash = below(word ^ (u64::from(b'\\') * ONES), 1);
    let found = control | quote | backslash;
    (found != 0).then(|| found.trailing_zeros() as usize / 8)
}

/// Output read chunk by chunk as text: a UTF-8 sequence cut at a chunk's
/// end waits for the next chunk (an asciicast holds text).
#[derive(Default)]
pub struct Utf8Carry {
    carried: Vec<u8>,
}

impl Utf8Carry {
    /// `with` applied to the text of `bytes` after what was carried: whole
    /// UTF-8 sequences, and invalid bytes (which the event line replaces);
    /// an incomplete sequence at the end is kept for the next chunk.
    /// Without a carry, `bytes` are read in place.
    pub fn text<R>(&mut self, bytes: &[u8], with: impl FnOnce(&[u8]) -> R) -> R {
        if self.carried.is_empty() {
            let cut = whole_sequences(bytes);
            let result = with(&bytes[..cut]);
            self.carried.extend_from_slice(&bytes[cut..]);
            return result;
        }
        self.carried.extend_from_slice(bytes);
        let cut = whole_sequences(&self.carried);
        let result = with(&self.carried[..cut]);
        self.carried.drain(..cut);
        result
    }

    /// Whether nothing waits.
    #[cfg(test)]
    fn is_empty(&self) -> bool {
        self.carried.is_empty()
    }
}

/// How much of `bytes` is text to write now: all of it but an incomplete
/// UTF-8 sequence at the end (the first of the last three bytes from which
/// on they are the start of a sequence, and nothing else). Only the end is
/// read: the event line validates the text.
fn whole_sequences(bytes: &[u8]) -> usize {
    let tail = bytes.len().saturating_sub(3);
    (tail..bytes.len())
        .find(|&i| {
            std::str::from_utf8(&bytes[i..])
                .is_err_and(|e| e.error_len().is_none() && e.valid_up_to() == 0)
        })
        .unwrap_or(bytes.len())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

    /// The line as it was made before this module: through a
    /// `serde_json::Value`.
    fn through_serde_json(ms: u64, code: &str, data: &[u8]) -> Vec<u8> {
        let text = String::from_utf8_lossy(data).into_owned();
        let mut line = serde_json::to_vec(&json!([ms as f64 / 1000.0, code, text])).unwrap();
        line.push(b'\n');
        line
    }

    fn same_as_serde_json(ms: u64, code: &str, data: &[u8]) {
        let ours = event_line(ms, code, data);
        let theirs = through_serde_json(ms, code, data);
        assert_eq!(
            ours[..],
            theirs[..],
            "{} against {}",
            String::from_utf8_lossy(&ours),
            String::from_utf8_lossy(&theirs)
        );
    }

    #[test]
    fn an_event_line_is_serde_jsons_byte_for_byte() {
        // Every ASCII character alone, and all of them together.
        let ascii: Vec<u8> = (0u8..0x80).collect();
        for byte in &ascii {
            same_as_serde_json(1, "o", &[*byte]);
            same_as_serde_json(1, "o", &[b'a', *byte, b'z']);
        }
        same_as_serde_json(0, "o", &ascii);
        // Every byte at every place of the eight bytes read together, and
        // across two of them.
        for byte in 0..=255u8 {
            for at in 0..20 {
                let mut text = [b'a'; 24];
                text[at] = byte;
                same_as_serde_json(1, "o", &text);
                text[at + 1] = b'\\';
                same_as_serde_json(1, "o", &text);
            }
        }
        for text in [
            "",
            "\"quoted\" and \\back\\slashed\\",
            "\\\"\\\\\"",
            "line\r\nnext\ttab\x08\x0c\x1b[31mred\x1b[0m\x7f",
            "U+2028 \u{2028} U+2029 \u{2029} are not escaped",
            "é€𝄞 中文 \u{fffd} \u{feff}",
            "\u{0}\u{1}\u{1f}",
        ] {
            same_as_serde_json(1234, "o", text.as_bytes());
        }
        // Invalid UTF-8: one U+FFFD for each invalid sequence.
        for bytes in [
            &b"a\xffb"[..],
            b"\xe2\x82",
            b"\xe2\x82a\xe2\x82\xac",
            b"\xf0\x9f\x98",
            b"\xc0\xafslash",
            b"\xed\xa0\x80 surrogate",
            b"\x80\x80\x80",
        ] {
            same_as_serde_json(5, "o", bytes);
        }
        // The codes and texts the recording writes besides output.
        same_as_serde_json(10, "r", b"120x40");
        same_as_serde_json(10, "x", b"-1");
        same_as_serde_json(10, "m", "tether: 5 bytes \"lost\"".as_bytes());
        // Times: whole seconds, thousandths, and very large.
        for ms in [
            0,
            1,
            9,
            10,
            100,
            999,
            1000,
            1001,
            1500,
            59_999,
            86_400_000,
            1_700_000_000_123,
            u64::from(u32::MAX),
            1 << 53,
            (1 << 53) + 1,
            10u64.pow(19),
            u64::MAX,
        ] {
            same_as_serde_json(ms, "o", b"x");
        }
    }

    #[test]
    fn eight_bytes_at_once_find_the_first_the_table_escapes() {
        let first = |eight: &[u8; 8]| eight.iter().position(|&b| ESCAPE[usize::from(b)] != 0);
        // Every two bytes, in two places, among bytes on either side of
        // every boundary the test draws.
        for filler in [
            b'a', 0x00, 0x1f, 0x20, 0x21, 0x22, 0x5b, 0x5c, 0x7f, 0x80, 0xff,
        ] {
            for (p, q) in [(0, 1), (3, 4), (6, 7), (0, 7), (2, 5)] {
                for one in 0..=255u8 {
                    for other in 0..=255u8 {
                        let mut eight = [filler; 8];
                        (eight[p], eight[q]) = (one, other);
                        assert_eq!(first_escaped(&eight), first(&eight), "{eight:?}");
                    }
                }
            }
        }
    }

    proptest! {
        #[test]
        fn any_bytes_and_time_make_serde_jsons_line(
            ms in any::<u64>(),
            small_ms in 0u64..10_000_000,
            data in proptest::collection::vec(any::<u8>(), 0..300),
            text in "\\PC*",
            controls in proptest::collection::vec(0u8..0x40, 0..100),
            sparse in proptest::collection::vec(
                prop_oneof![
                    8 => 0x20u8..0x7f,
                    1 => prop_oneof![Just(b'"'), Just(b'\\'), Just(0x1fu8), Just(0x7fu8), Just(0x80u8)],
                    1 => 0u8..0x20,
                ],
                0..400,
            ),
        ) {
            same_as_serde_json(ms, "o", &data);
            same_as_serde_json(small_ms, "i", text.as_bytes());
            same_as_serde_json(small_ms, "o", &controls);
            same_as_serde_json(small_ms, "o", &sparse);
        }

        #[test]
        fn text_across_chunks_is_as_it_was(
            data in proptest::collection::vec(
                prop_oneof![any::<u8>(), Just(0xe2u8), Just(0x82u8), Just(0xacu8), Just(0xf0u8)],
                0..200,
            ),
            cuts in proptest::collection::vec(any::<prop::sample::Index>(), 0..6),
        ) {
            let mut cuts: Vec<usize> = cuts.iter().map(|c| c.index(data.len() + 1)).collect();
            cuts.sort_unstable();
            cuts.push(data.len());
            let (mut carry, mut before) = (Utf8Carry::default(), Vec::new());
            let mut from = 0;
            for cut in cuts {
                let chunk = &data[from..cut];
                let ours = carry.text(chunk, |text| String::from_utf8_lossy(text).into_owned());
                prop_assert_eq!(ours, utf8_text_before(&mut before, chunk));
                from = cut;
            }
            prop_assert_eq!(carry.carried, before);
        }

        #[test]
        fn the_cut_is_where_validation_would_put_it(
            text in "\\PC{0,20}",
            end in proptest::collection::vec(
                prop_oneof![
                    any::<u8>().prop_map(|b| vec![b]),
                    // A character cut short.
                    (any::<char>(), 1usize..4).prop_map(|(c, keep)| {
                        let mut bytes = c.to_string().into_bytes();
                        bytes.truncate(keep.min(bytes.len() - 1).max(1));
                        bytes
                    }),
                ],
                0..3,
            ),
        ) {
            let mut bytes = text.into_bytes();
            bytes.extend(end.concat());
            let mut before = Vec::new();
            let mut carry = Utf8Carry::default();
            let ours = carry.text(&bytes, |text| String::from_utf8_lossy(text).into_owned());
            prop_assert_eq!(ours, utf8_text_before(&mut before, &bytes));
            prop_assert_eq!(carry.carried, before);
        }
    }

    /// `recording.rs`'s text of a chunk before this module, the reference
    /// [`Utf8Carry`] is held to: the whole buffer validated, and the cut
    /// made from where validation stopped.
    fn utf8_text_before(carry: &mut Vec<u8>, bytes: &[u8]) -> String {
        carry.extend_from_slice(bytes);
        let cut = match std::str::from_utf8(carry) {
            Ok(_) => carry.len(),
            Err(e) if e.error_len().is_none() => e.valid_up_to(),
            Err(_) => whole_sequences(carry),
        };
        let text = String::from_utf8_lossy(&carry[..cut]).into_owned();
        carry.drain(..cut);
        text
    }

    #[test]
    fn a_character_cut_between_chunks_is_whole_in_the_text() {
        let mut carry = Utf8Carry::default();
        let mut text =
            |bytes: &[u8]| carry.text(bytes, |t| String::from_utf8_lossy(t).into_owned());
        let bytes = "é€".as_bytes();
        assert_eq!(text(&bytes[..1]), "");
        assert_eq!(text(&bytes[1..3]), "é");
        assert_eq!(text(&bytes[3..]), "€");
        assert_eq!(text(b"a\xffb"), "a\u{fffd}b");
        assert!(carry.is_empty());
    }
}
