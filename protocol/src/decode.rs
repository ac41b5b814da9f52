//! Decoding the frames of `tether.v1`: the keystroke's and the echo's
//! frames in place (`in_place.rs`), every other frame by the general
//! two-step decoder here, which tells malformed MessagePack, an unknown
//! `type` and a bad field apart so that each gets its own error code.

use serde::de::DeserializeOwned;
use serde::Deserialize;

use crate::frame::{ClientFrame, DecodeError, ServerFrame};
use crate::in_place;

impl ServerFrame {
    /// Decodes a frame sent by a server.
    ///
    /// A data frame (`stdout`, `stderr`) is read in place by
    /// `in_place.rs`; every other frame by the general decoder.
    pub fn decode(bytes: &[u8]) -> Result<ServerFrame, DecodeError> {
        match in_place::server(bytes) {
            Some(frame) => Ok(frame),
            None => decode_server_general(bytes),
        }
    }
}

impl ClientFrame {
    /// Decodes a frame sent by a client. A keystroke's frame (`stdin`, or
    /// `input` with a stdin action) is read in place by
    /// `in_place.rs`; every other frame, and any keystroke frame of
    /// an unusual shape, by the general decoder.
    pub fn decode(bytes: &[u8]) -> Result<ClientFrame, DecodeError> {
        match in_place::client(bytes) {
            Some(frame) => Ok(frame),
            None => decode_client_general(bytes),
        }
    }
}

/// A client frame through serde (the reference the in-place decoder is
/// held to).
pub(crate) fn decode_client_general(bytes: &[u8]) -> Result<ClientFrame, DecodeError> {
    decode(bytes, ClientFrame::TYPES)
}

/// A server frame through serde (likewise).
pub(crate) fn decode_server_general(bytes: &[u8]) -> Result<ServerFrame, DecodeError> {
    decode(bytes, ServerFrame::TYPES)
}

#[derive(Deserialize)]
struct TypeOnly {
    #[serde(rename = "type")]
    kind: String,
}

/// Step one of decoding: the `type` of a frame, or why there is none.
fn frame_type(bytes: &[u8]) -> Result<String, DecodeError> {
    rmp_serde::from_slice::<TypeOnly>(bytes)
        .map(|t| t.kind)
        .map_err(|e| DecodeError::Malformed(e.to_string()))
}

/// Both steps: the `type` first, so that an unknown one is told apart
/// from bad fields of a known one; then the whole frame through its serde
/// derive (the `type` tag picks the variant), so the enum above is the only
/// description of each frame's fields.
fn decode<T: DeserializeOwned>(bytes: &[u8], known: &[&str]) -> Result<T, DecodeError> {
    let kind = frame_type(bytes)?;
    if !known.contains(&kind.as_str()) {
        return Err(DecodeError::UnknownType(kind));
    }
    if let Some(items) = too_many_items(bytes) {
        return Err(DecodeError::InvalidFields {
            kind,
            message: format!(
                "it holds {items} or more items (array elements and map entries); the most a frame may hold is {MAX_ITEMS}"
            ),
        });
    }
    rmp_serde::from_slice::<T>(bytes).map_err(|e| DecodeError::InvalidFields {
        kind,
        message: e.to_string(),
    })
}

/// The most items (array elements and map entries) a frame decoded by the
/// general decoder may hold. A frame's size alone does not bound what it
/// decodes into: an empty string is one byte on the wire and 24 in a
/// `Vec<String>`, so a 60 MiB `hello` whose argv is 60 million empty
/// strings would decode into gigabytes. 2^20 items bound that at a few
/// tens of MiB, past any argv the kernel runs (its 2 MiB `ARG_MAX` with
/// the terminating NULs) and any process object tetherd sends.
pub const MAX_ITEMS: u64 = 1 << 20;

/// The count of items at which `bytes` passes [`MAX_ITEMS`], read from the
/// MessagePack headers alone (nothing is allocated), or `None` when it
/// does not; malformed bytes are left to the decoder to name.
fn too_many_items(bytes: &[u8]) -> Option<u64> {
    let mut at = 0usize;
    // Values still to be read: one, the frame, and then the items of every
    // array and map begun.
    let mut pending: u64 = 1;
    let mut items: u64 = 0;
    let length = |at: usize, width: usize| -> Option<u64> {
        let field = bytes.get(at..at.checked_add(width)?)?;
        Some(field.iter().fold(0u64, |n, b| (n << 8) | u64::from(*b)))
    };
    while pending > 0 {
        pending -= 1;
        let marker = *bytes.get(at)?;
        at += 1;
        // (bytes to skip, items begun, values each item holds)
        let (skip, begun, per_item): (u64, u64, u64) = match marker {
            0x00..=0x7f | 0xe0..=0xff | 0xc0..=0xc3 => (0, 0, 0),
            0x80..=0x8f => (0, u64::from(marker & 0x0f), 2),
            0x90..=0x9f => (0, u64::from(marker & 0x0f), 1),
            0xa0..=0xbf => (u64::from(marker & 0x1f), 0, 0),
            0xcc | 0xd0 => (1, 0, 0),
            0xcd | 0xd1 => (2, 0, 0),
            0xca | 0xce | 0xd2 => (4, 0, 0),
            0xcb | 0xcf | 0xd3 => (8, 0, 0),
            0xd4..=0xd8 => (1 + (1u64 << (marker - 0xd4)), 0, 0),
            0xc4 | 0xd9 => (1 + length(at, 1)?, 0, 0),
            0xc5 | 0xda => (2 + length(at, 2)?, 0, 0),
            0xc6 | 0xdb => (4 + length(at, 4)?, 0, 0),
            0xc7 => (2 + length(at, 1)?, 0, 0),
            0xc8 => (3 + length(at, 2)?, 0, 0),
            0xc9 => (5 + length(at, 4)?, 0, 0),
            0xdc => (2, length(at, 2)?, 1),
            0xdd => (4, length(at, 4)?, 1),
            0xde => (2, length(at, 2)?, 2),
            0xdf => (4, length(at, 4)?, 2),
        };
        items += begun;
        if items > MAX_ITEMS {
            return Some(items);
        }
        pending += begun * per_item;
        at = at.checked_add(usize::try_from(skip).ok()?)?;
    }
    None
}

#[cfg(test)]
mod bounds {
    use super::*;

    /// A `hello` whose argv is more empty strings than any process has:
    /// refused from its headers, before anything is allocated.
    #[test]
    fn a_small_frame_that_would_decode_huge_is_refused() {
        let mut bytes = vec![0x82, 0xa4];
        bytes.extend_from_slice(b"type");
        bytes.push(0xa5);
        bytes.extend_from_slice(b"hello");
        bytes.push(0xa4);
        bytes.extend_from_slice(b"argv");
        let count = MAX_ITEMS as u32 + 1;
        bytes.push(0xdd);
        bytes.extend_from_slice(&count.to_be_bytes());
        bytes.extend(std::iter::repeat_n(0xa0, count as usize));
        let error = ServerFrame::decode(&bytes).unwrap_err();
        assert!(error.to_string().contains("items"), "{error}");
        // Declared but absent: counted from the header alone.
        assert!(too_many_items(&bytes[..22]) >= Some(u64::from(count)));
    }

    proptest::proptest! {
        /// Whatever the bytes, the count ends (no panic, no overflow).
        #[test]
        fn counting_items_never_panics(bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..256)) {
            let _ = too_many_items(&bytes);
        }
    }
}

/// The in-place decoder held to the general one: whatever the bytes, the
/// same answer.
#[cfg(test)]
mod in_place_agrees {
    use super::*;
    use crate::frame::InputAction;
    use crate::in_place::{client, server};
    use proptest::prelude::*;

    use crate::StreamName;

    fn general(bytes: &[u8]) -> Option<ClientFrame> {
        decode_client_general(bytes).ok()
    }

    fn general_server(bytes: &[u8]) -> Option<ServerFrame> {
        decode_server_general(bytes).ok()
    }

    fn data_frame() -> impl Strategy<Value = ServerFrame> {
        let data = proptest::collection::vec(any::<u8>(), 0..100);
        prop_oneof![
            (any::<u64>(), data.clone())
                .prop_map(|(offset, data)| ServerFrame::Stdout { offset, data }),
            (any::<u64>(), data).prop_map(|(offset, data)| ServerFrame::Stderr { offset, data }),
            any::<u64>().prop_map(|offset| ServerFrame::Dropped {
                stream: StreamName::Stdout,
                offset,
                length: 3
            }),
        ]
    }

    /// The frame's bytes changed at a few places, cut short, or extended.
    fn variants(
        bytes: Vec<u8>,
        flips: Vec<(usize, u8)>,
        cut: usize,
        extra: Vec<u8>,
    ) -> [Vec<u8>; 3] {
        let mut bytes = bytes;
        for (at, value) in flips {
            if !bytes.is_empty() {
                let i = at % bytes.len();
                bytes[i] = value;
            }
        }
        let short = bytes[..cut % (bytes.len() + 1)].to_vec();
        let long = [bytes.clone(), extra].concat();
        [bytes, short, long]
    }

    fn keystroke_frame() -> impl Strategy<Value = ClientFrame> {
        let data = proptest::collection::vec(any::<u8>(), 0..100);
        prop_oneof![
            data.clone().prop_map(|data| ClientFrame::Stdin { data }),
            (any::<u64>(), data).prop_map(|(seq, data)| ClientFrame::Input {
                seq,
                action: InputAction::Stdin { data },
            }),
            any::<u64>().prop_map(|seq| ClientFrame::Input {
                seq,
                action: InputAction::StdinEof,
            }),
            Just(ClientFrame::StdinEof),
        ]
    }

    #[test]
    fn both_shapes_decode_here_and_others_are_left_to_the_general_decoder() {
        let stdin = ClientFrame::Stdin {
            data: b"a".to_vec(),
        };
        assert_eq!(client(&stdin.encode()), Some(stdin));
        let input = ClientFrame::Input {
            seq: 7,
            action: InputAction::Stdin {
                data: b"ls\r".to_vec(),
            },
        };
        assert_eq!(client(&input.encode()), Some(input));
        let eof = ClientFrame::Input {
            seq: 7,
            action: InputAction::StdinEof,
        };
        assert_eq!(client(&eof.encode()), None);
        assert_eq!(client(&ClientFrame::StdinEof.encode()), None);
    }

    proptest! {
        #[test]
        fn whatever_it_decodes_the_general_decoder_decodes_the_same(
            frame in keystroke_frame(),
            flips in proptest::collection::vec((any::<usize>(), any::<u8>()), 0..4),
            cut in any::<usize>(),
            extra in proptest::collection::vec(any::<u8>(), 0..3),
        ) {
            for variant in variants(frame.encode(), flips, cut, extra) {
                if let Some(fast) = client(&variant) {
                    prop_assert_eq!(Some(fast), general(&variant));
                }
            }
        }

        #[test]
        fn whatever_it_decodes_of_a_server_the_general_decoder_decodes_the_same(
            frame in data_frame(),
            flips in proptest::collection::vec((any::<usize>(), any::<u8>()), 0..4),
            cut in any::<usize>(),
            extra in proptest::collection::vec(any::<u8>(), 0..3),
        ) {
            for variant in variants(frame.encode(), flips, cut, extra) {
                if let Some(fast) = server(&variant) {
                    prop_assert_eq!(Some(fast), general_server(&variant));
                }
            }
        }

        #[test]
        fn every_data_frame_the_server_makes_takes_this_path(offset in any::<u64>(), data in proptest::collection::vec(any::<u8>(), 0..300)) {
            let bytes = ServerFrame::encode_data(StreamName::Stdout, offset, &data);
            prop_assert_eq!(server(&bytes), Some(ServerFrame::Stdout { offset, data }));
        }

        #[test]
        fn every_plain_keystroke_frame_takes_this_path(frame in keystroke_frame()) {
            let bytes = frame.encode();
            let expected = matches!(&frame, ClientFrame::Stdin { .. } | ClientFrame::Input { action: InputAction::Stdin { .. }, .. });
            prop_assert_eq!(client(&bytes).is_some(), expected);
            if expected {
                prop_assert_eq!(client(&bytes), Some(frame));
            }
        }
    }
}
