//! Property tests of the frame decoders: no panic and no unbounded
//! allocation whatever the bytes, and every frame survives a round trip.

use proptest::prelude::*;
use tether_protocol::{ClientFrame, ServerFrame, StreamName};

fn client_frame() -> impl Strategy<Value = ClientFrame> {
    prop_oneof![
        proptest::collection::vec(any::<u8>(), 0..300).prop_map(|data| ClientFrame::Stdin { data }),
        Just(ClientFrame::StdinEof),
        ".{0,10}".prop_map(|signal| ClientFrame::Signal { signal }),
        (any::<u32>(), any::<u32>()).prop_map(|(cols, rows)| ClientFrame::Resize { cols, rows }),
        (any::<bool>(), any::<u64>()).prop_map(|(out, bytes)| ClientFrame::Credit {
            stream: if out {
                StreamName::Stdout
            } else {
                StreamName::Stderr
            },
            bytes,
        }),
    ]
}

proptest! {
    #[test]
    fn decoding_arbitrary_bytes_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..256)) {
        let _ = ClientFrame::decode(&bytes);
        let _ = ServerFrame::decode(&bytes);
    }

    #[test]
    fn decoding_mutated_frames_never_panics(frame in client_frame(), flips in proptest::collection::vec((any::<usize>(), any::<u8>()), 1..6)) {
        let mut bytes = frame.encode();
        for (at, value) in flips {
            if !bytes.is_empty() {
                let i = at % bytes.len();
                bytes[i] = value;
            }
        }
        let _ = ClientFrame::decode(&bytes);
    }

    #[test]
    fn client_frames_round_trip(frame in client_frame()) {
        prop_assert_eq!(ClientFrame::decode(&frame.encode()).ok(), Some(frame));
    }

    #[test]
    fn data_frames_round_trip(offset in any::<u64>(), data in proptest::collection::vec(any::<u8>(), 0..5000)) {
        let bytes = ServerFrame::encode_data(StreamName::Stderr, offset, &data);
        prop_assert_eq!(ServerFrame::decode(&bytes).ok(), Some(ServerFrame::Stderr { offset, data }));
    }
}
