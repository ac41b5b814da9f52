//! The Kubernetes remote-command framing over WebSocket, with no IO: which
//! subprotocol a client gets, and how messages look on the wire in each.
//!
//! Every message starts with the channel it belongs to (0 stdin, 1 stdout,
//! 2 stderr, 3 error/status, 4 resize). `v5.channel.k8s.io` adds channel
//! 255 to close another channel (`[255, 0]`: end of stdin).
//! `v4.base64.channel.k8s.io` sends text messages: the channel as an ASCII
//! digit, then the payload in base64. As in the API server, the binary
//! protocols take a client's text messages as raw bytes too (the Python
//! client sends `str` stdin that way).

use base64::Engine;

use crate::error::KubeError;

/// Stdin, client to server.
pub const STDIN: u8 = 0;
/// Stdout (and a PTY's output), server to client.
pub const STDOUT: u8 = 1;
/// Stderr, server to client.
pub const STDERR: u8 = 2;
/// The one status document at the end of a session, server to client.
pub const ERROR: u8 = 3;
/// Terminal size as JSON, client to server.
pub const RESIZE: u8 = 4;
/// `v5.channel.k8s.io` only: `[255, N]` closes channel N.
pub const CLOSE: u8 = 255;

/// Largest resize document kept while waiting for the rest of it.
const MAX_RESIZE_JSON: usize = 4096;

/// A Kubernetes streaming subprotocol that tetherd speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Subprotocol {
    /// `v5.channel.k8s.io`: v4 plus the close channel (stdin can end).
    V5,
    /// `v4.channel.k8s.io`: binary; the status is a JSON `Status`.
    V4,
    /// `v4.base64.channel.k8s.io`: v4 in base64 text messages.
    V4Base64,
    /// `channel.k8s.io` (v1): binary; a failure is plain text on channel 3
    /// and a success sends nothing there.
    V1,
}

impl Subprotocol {
    /// Every one, best first: the order in which [`Subprotocol::negotiate`]
    /// prefers them.
    pub const ALL: [Subprotocol; 4] = [
        Subprotocol::V5,
        Subprotocol::V4,
        Subprotocol::V4Base64,
        Subprotocol::V1,
    ];

    /// The `Sec-WebSocket-Protocol` token.
    pub fn name(self) -> &'static str {
        match self {
            Subprotocol::V5 => "v5.channel.k8s.io",
            Subprotocol::V4 => "v4.channel.k8s.io",
            Subprotocol::V4Base64 => "v4.base64.channel.k8s.io",
            Subprotocol::V1 => "channel.k8s.io",
        }
    }

    /// The best subprotocol among those offered (each header value is a
    /// comma-separated list), or a clear error naming what we speak.
    pub fn negotiate<'a>(
        offered: impl IntoIterator<Item = &'a str>,
    ) -> Result<Subprotocol, KubeError> {
        let offered: Vec<&str> = offered
            .into_iter()
            .flat_map(|value| value.split(','))
            .map(str::trim)
            .filter(|token| !token.is_empty())
            .collect();
        Subprotocol::ALL
            .into_iter()
            .find(|p| offered.contains(&p.name()))
            .ok_or_else(|| KubeError::NoSubprotocol(offered.join(", ")))
    }

    /// Messages are base64 text rather than binary.
    pub fn is_base64(self) -> bool {
        self == Subprotocol::V4Base64
    }

    /// The status on channel 3 is a JSON `Status` (v4 and later), rather
    /// than an error text sent only on failure (v1).
    pub fn status_is_json(self) -> bool {
        self != Subprotocol::V1
    }

    /// Channel 255 closes a channel (v5).
    pub fn has_close_channel(self) -> bool {
        self == Subprotocol::V5
    }
}

/// One WebSocket message, before it meets a socket type.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WireMessage {
    /// A binary message.
    Binary(Vec<u8>),
    /// A text message (base64 protocol).
    Text(String),
}

/// Encodes bytes for `channel`, given in several slices (a ring buffer's
/// two halves), copying each byte once.
pub fn encode(protocol: Subprotocol, channel: u8, parts: &[&[u8]]) -> WireMessage {
    let len: usize = parts.iter().map(|p| p.len()).sum();
    if protocol.is_base64() {
        let mut text = String::with_capacity(1 + len.div_ceil(3) * 4);
        text.push(char::from(b'0' + channel.min(9)));
        let mut joined = Vec::with_capacity(len);
        for part in parts {
            joined.extend_from_slice(part);
        }
        base64::engine::general_purpose::STANDARD.encode_string(&joined, &mut text);
        WireMessage::Text(text)
    } else {
        let mut out = Vec::with_capacity(1 + len);
        out.push(channel);
        for part in parts {
            out.extend_from_slice(part);
        }
        WireMessage::Binary(out)
    }
}

/// What a client message asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClientMessage {
    /// Bytes for the program's stdin.
    Stdin(Vec<u8>),
    /// End of stdin (v5 `[255, 0]`).
    CloseStdin,
    /// A piece of the resize channel's JSON stream; feed it to a
    /// [`ResizeDecoder`].
    Resize(Vec<u8>),
    /// Nothing to do: an empty message, a channel the server does not read,
    /// or the close of a channel other than stdin.
    Ignored,
}

/// Decodes a client message, binary or text alike.
pub fn decode(protocol: Subprotocol, payload: &[u8]) -> Result<ClientMessage, KubeError> {
    let decoded;
    let (channel, data) = if protocol.is_base64() {
        let Some((&digit, rest)) = payload.split_first() else {
            return Ok(ClientMessage::Ignored);
        };
        if !digit.is_ascii_digit() {
            return Err(KubeError::Malformed(format!(
                "a {} message starts with the channel as an ASCII digit, got byte {digit}",
                protocol.name()
            )));
        }
        decoded = base64::engine::general_purpose::STANDARD
            .decode(rest)
            .map_err(|e| KubeError::Malformed(format!("invalid base64 payload: {e}")))?;
        (digit - b'0', decoded.as_slice())
    } else {
        match payload.split_first() {
            Some((&channel, data)) => (channel, data),
            None => return Ok(ClientMessage::Ignored),
        }
    };
    Ok(match channel {
        STDIN if data.is_empty() => ClientMessage::Ignored,
        STDIN => ClientMessage::Stdin(data.to_vec()),
        RESIZE => ClientMessage::Resize(data.to_vec()),
        CLOSE if protocol.has_close_channel() => match data {
            [STDIN] => ClientMessage::CloseStdin,
            [_] => ClientMessage::Ignored,
            _ => {
                return Err(KubeError::Malformed(format!(
                    "a close message is [255, channel], got {} bytes after 255",
                    data.len()
                )))
            }
        },
        _ => ClientMessage::Ignored,
    })
}

/// A terminal size from the resize channel.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Deserialize)]
pub struct TerminalSize {
    /// Columns.
    #[serde(rename = "Width")]
    pub width: u32,
    /// Rows.
    #[serde(rename = "Height")]
    pub height: u32,
}

/// The resize channel is a stream of JSON documents
/// (`{"Width":80,"Height":24}`), which a client may split across messages
/// or send several to a message; this keeps the unfinished tail (bounded).
#[derive(Debug, Clone, Default)]
pub struct ResizeDecoder {
    pending: Vec<u8>,
}

impl ResizeDecoder {
    /// Adds bytes of the resize channel; returns the sizes now complete.
    pub fn push(&mut self, bytes: &[u8]) -> Result<Vec<TerminalSize>, KubeError> {
        self.pending.extend_from_slice(bytes);
        let mut sizes = Vec::new();
        let mut stream =
            serde_json::Deserializer::from_slice(&self.pending).into_iter::<TerminalSize>();
        let mut used = 0;
        loop {
            match stream.next() {
                Some(Ok(size)) => {
                    sizes.push(size);
                    used = stream.byte_offset();
                }
                None => {
                    used = stream.byte_offset();
                    break;
                }
                Some(Err(e)) if e.is_eof() => break,
                Some(Err(e)) => {
                    self.pending.clear();
                    return Err(KubeError::Malformed(format!(
                        "the resize channel takes JSON such as {{\"Width\":80,\"Height\":24}}: {e}"
                    )));
                }
            }
        }
        self.pending.drain(..used);
        if self.pending.len() > MAX_RESIZE_JSON {
            self.pending.clear();
            return Err(KubeError::Malformed(format!(
                "resize document longer than {MAX_RESIZE_JSON} bytes"
            )));
        }
        Ok(sizes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn negotiation_picks_the_best_offered_and_refuses_none() {
        let pick = |offers: &[&str]| Subprotocol::negotiate(offers.iter().copied());
        assert_eq!(
            pick(&["v4.channel.k8s.io, v5.channel.k8s.io"]).ok(),
            Some(Subprotocol::V5)
        );
        assert_eq!(
            pick(&["channel.k8s.io", "v4.base64.channel.k8s.io"]).ok(),
            Some(Subprotocol::V4Base64)
        );
        assert_eq!(pick(&["channel.k8s.io"]).ok(), Some(Subprotocol::V1));
        assert_eq!(
            pick(&["v4.channel.k8s.io,v3.channel.k8s.io"]).ok(),
            Some(Subprotocol::V4)
        );
        let refused = pick(&["v3.channel.k8s.io", "tether.v1"]).unwrap_err();
        assert!(
            refused.to_string().contains("v5.channel.k8s.io"),
            "{refused}"
        );
        assert!(pick(&[]).is_err());
    }

    #[test]
    fn binary_frames_carry_the_channel_in_the_first_byte() {
        let sent = encode(Subprotocol::V5, STDERR, &[b"ab", b"c"]);
        assert_eq!(sent, WireMessage::Binary(vec![2, b'a', b'b', b'c']));
        assert_eq!(
            encode(Subprotocol::V1, STDOUT, &[]),
            WireMessage::Binary(vec![1])
        );
    }

    #[test]
    fn base64_frames_are_a_digit_then_base64() {
        let sent = encode(Subprotocol::V4Base64, STDOUT, &[b"hi", b"\xff"]);
        assert_eq!(sent, WireMessage::Text("1aGn/".into()));
        assert_eq!(
            decode(Subprotocol::V4Base64, b"0aGk=").unwrap(),
            ClientMessage::Stdin(b"hi".to_vec())
        );
        assert!(decode(Subprotocol::V4Base64, b"0!!").is_err());
        assert!(decode(Subprotocol::V4Base64, b"xaGk=").is_err());
    }

    #[test]
    fn client_messages_decode_by_channel() {
        let v5 = Subprotocol::V5;
        assert_eq!(
            decode(v5, &[0, b'x']).unwrap(),
            ClientMessage::Stdin(vec![b'x'])
        );
        // The Python client sends str stdin as a text message.
        assert_eq!(
            decode(v5, b"\x00hi").unwrap(),
            ClientMessage::Stdin(b"hi".to_vec())
        );
        assert_eq!(decode(v5, &[]).unwrap(), ClientMessage::Ignored);
        assert_eq!(decode(v5, &[0]).unwrap(), ClientMessage::Ignored);
        assert_eq!(decode(v5, &[1, 2, 3]).unwrap(), ClientMessage::Ignored);
        assert_eq!(
            decode(v5, b"\x04{\"Width\":1").unwrap(),
            ClientMessage::Resize(b"{\"Width\":1".to_vec())
        );
    }

    #[test]
    fn only_v5_closes_stdin_with_channel_255() {
        assert_eq!(
            decode(Subprotocol::V5, &[255, 0]).unwrap(),
            ClientMessage::CloseStdin
        );
        assert_eq!(
            decode(Subprotocol::V5, &[255, 1]).unwrap(),
            ClientMessage::Ignored
        );
        assert!(decode(Subprotocol::V5, &[255]).is_err());
        assert_eq!(
            decode(Subprotocol::V4, &[255, 0]).unwrap(),
            ClientMessage::Ignored
        );
    }

    #[test]
    fn resize_documents_may_be_split_or_joined() {
        let mut decoder = ResizeDecoder::default();
        assert_eq!(decoder.push(b"{\"Width\":100,").unwrap(), vec![]);
        let size = |width, height| TerminalSize { width, height };
        assert_eq!(
            decoder
                .push(b"\"Height\":30}{\"Width\":90,\"Height\":20}\n")
                .unwrap(),
            vec![size(100, 30), size(90, 20)]
        );
        assert_eq!(decoder.push(b"").unwrap(), vec![]);
        assert!(decoder.push(b"{\"Width\":\"wide\"}").is_err());
        // After an error the decoder starts afresh.
        assert_eq!(
            decoder.push(b"{\"Width\":1,\"Height\":2}").unwrap(),
            vec![size(1, 2)]
        );
    }

    #[test]
    fn an_endless_resize_document_is_refused() {
        let mut decoder = ResizeDecoder::default();
        let mut refused = false;
        for _ in 0..MAX_RESIZE_JSON {
            if decoder.push(b"{\"Width\":1,\"Height\":2,\"x\":\"").is_err() {
                refused = true;
                break;
            }
        }
        assert!(refused);
        assert!(decoder.pending.len() <= MAX_RESIZE_JSON);
    }
}
