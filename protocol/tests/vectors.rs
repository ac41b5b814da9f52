//! Golden bytes: every vector in `protocol/vectors/frames.json` decodes to
//! its stated meaning and re-encodes to the very same bytes. The TypeScript
//! client runs the same vectors, so the two sides cannot drift.

#![allow(clippy::unwrap_used)]

use serde_json::Value;
use tether_protocol::{ClientFrame, ServerFrame, StreamName};

fn unhex(hex: &str) -> Vec<u8> {
    (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap())
        .collect()
}

/// Turns `{"$bin": "<hex>"}` into a JSON array of numbers, which is how
/// serde reads bytes from JSON.
fn with_bytes(value: Value) -> Value {
    match value {
        Value::Object(map) => match map.get("$bin") {
            Some(Value::String(hex)) => {
                Value::Array(unhex(hex).into_iter().map(Value::from).collect())
            }
            _ => Value::Object(map.into_iter().map(|(k, v)| (k, with_bytes(v))).collect()),
        },
        Value::Array(items) => Value::Array(items.into_iter().map(with_bytes).collect()),
        other => other,
    }
}

fn vectors() -> Vec<Value> {
    let text = include_str!("../vectors/frames.json");
    serde_json::from_str(text).unwrap()
}

#[test]
fn every_vector_decodes_to_its_meaning_and_reencodes_to_the_same_bytes() {
    let all = vectors();
    assert!(all.len() >= 20);
    for vector in all {
        let name = vector["name"].as_str().unwrap();
        let bytes = unhex(vector["hex"].as_str().unwrap());
        let meaning = with_bytes(vector["frame"].clone());
        match vector["direction"].as_str().unwrap() {
            "server" => {
                let expected: ServerFrame = serde_json::from_value(meaning).unwrap();
                assert_eq!(ServerFrame::decode(&bytes).unwrap(), expected, "{name}");
                assert_eq!(expected.encode(), bytes, "{name}");
                if let ServerFrame::Stdout { offset, data } = &expected {
                    let fast = ServerFrame::encode_data(StreamName::Stdout, *offset, data);
                    assert_eq!(fast, bytes, "{name} (encode_data)");
                }
            }
            "client" => {
                let expected: ClientFrame = serde_json::from_value(meaning).unwrap();
                assert_eq!(ClientFrame::decode(&bytes).unwrap(), expected, "{name}");
                assert_eq!(expected.encode(), bytes, "{name}");
            }
            other => panic!("{name}: unknown direction {other}"),
        }
    }
}

#[test]
fn every_frame_type_has_a_vector() {
    let all = vectors();
    let types: Vec<(String, String)> = all
        .iter()
        .map(|v| {
            (
                v["direction"].as_str().unwrap().to_string(),
                v["frame"]["type"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    for (direction, kind) in [
        ("server", "hello"),
        ("server", "stdout"),
        ("server", "stderr"),
        ("server", "dropped"),
        ("server", "screen"),
        ("server", "input_ack"),
        ("server", "exit"),
        ("server", "error"),
        ("client", "stdin"),
        ("client", "stdin_eof"),
        ("client", "signal"),
        ("client", "resize"),
        ("client", "input"),
        ("client", "credit"),
    ] {
        assert!(
            types.contains(&(direction.to_string(), kind.to_string())),
            "no vector for {direction} {kind}"
        );
    }
}

#[test]
fn decoding_tells_malformed_unknown_and_invalid_apart() {
    use tether_protocol::DecodeError;
    assert!(matches!(
        ClientFrame::decode(&[0xc1]),
        Err(DecodeError::Malformed(_))
    ));
    assert!(matches!(
        ClientFrame::decode(&[]),
        Err(DecodeError::Malformed(_))
    ));
    // {"type": "nope"}
    let unknown = [
        0x81, 0xa4, b't', b'y', b'p', b'e', 0xa4, b'n', b'o', b'p', b'e',
    ];
    assert!(matches!(
        ClientFrame::decode(&unknown),
        Err(DecodeError::UnknownType(_))
    ));
    // {"type": "credit", "stream": "stdout", "bytes": -1}
    let mut negative = vec![0x83, 0xa4, b't', b'y', b'p', b'e', 0xa6];
    negative.extend_from_slice(b"credit");
    negative.push(0xa6);
    negative.extend_from_slice(b"stream");
    negative.push(0xa6);
    negative.extend_from_slice(b"stdout");
    negative.push(0xa5);
    negative.extend_from_slice(b"bytes");
    negative.push(0xff);
    assert!(matches!(
        ClientFrame::decode(&negative),
        Err(DecodeError::InvalidFields { .. })
    ));
    // A bin header claiming 4 GiB in a 10-byte message: an error, not an
    // allocation.
    let mut huge = vec![0x82, 0xa4, b't', b'y', b'p', b'e', 0xa5];
    huge.extend_from_slice(b"stdin");
    huge.push(0xa4);
    huge.extend_from_slice(b"data");
    huge.extend_from_slice(&[0xc6, 0xff, 0xff, 0xff, 0xff]);
    assert!(ClientFrame::decode(&huge).is_err());
}
