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
    rmp_serde::from_slice::<T>(bytes).map_err(|e| DecodeError::InvalidFields {
        kind,
        message: e.to_string(),
    })
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
