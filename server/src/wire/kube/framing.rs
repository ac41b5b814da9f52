//! One Kubernetes session's view of the attachment machinery: how each
//! thing the attachment writer sends (the opening, output, a `dropped`
//! range, the exit, a fatal error) looks in the negotiated subprotocol,
//! and what each client message asks of the process. The writer, the
//! reader, credit-free pacing and the process queue are the attachment's
//! own (`crate::attach`): this file only frames.

use tether_protocol::{ClientFrame, ProcessInfo, StreamName};

use crate::error::KubeError;

use super::channel::{self, ClientMessage, ResizeDecoder, Subprotocol, WireMessage};
use super::status::Status;

/// The framing of one Kubernetes exec or attach session.
#[derive(Debug, Clone)]
pub struct KubeFraming {
    protocol: Subprotocol,
    /// Which output streams the client asked for (`stdout=`, `stderr=`).
    wants: [bool; 2],
    /// A terminal: `dropped` notices go to stdout, the only stream.
    tty: bool,
    resize: ResizeDecoder,
}

impl KubeFraming {
    /// A session in `protocol` that sends the streams asked for.
    pub fn new(protocol: Subprotocol, stdout: bool, stderr: bool, tty: bool) -> KubeFraming {
        KubeFraming {
            protocol,
            wants: [stdout, stderr && !tty],
            tty,
            resize: ResizeDecoder::default(),
        }
    }

    /// The negotiated subprotocol.
    pub fn protocol(&self) -> Subprotocol {
        self.protocol
    }

    /// Whether the client asked for `stream`. A stream it did not ask for
    /// is still captured and retained (and paces nothing): it is simply not
    /// sent on this session.
    pub fn wants(&self, stream: StreamName) -> bool {
        self.wants[stream.index()]
    }

    fn channel_of(stream: StreamName) -> u8 {
        match stream {
            StreamName::Stdout => channel::STDOUT,
            StreamName::Stderr => channel::STDERR,
        }
    }

    /// As the kubelet does: an empty message on the lowest output channel
    /// the client reads, to say the streams are connected. Nothing when it
    /// reads neither (never an empty status).
    pub fn opening(&self) -> Option<WireMessage> {
        StreamName::ALL
            .into_iter()
            .find(|s| self.wants(*s))
            .map(|s| channel::encode(self.protocol, Self::channel_of(s), &[]))
    }

    /// Output bytes of `stream` (in slices, from the retained ring).
    pub fn data(&self, stream: StreamName, parts: &[&[u8]]) -> WireMessage {
        channel::encode(self.protocol, Self::channel_of(stream), parts)
    }

    /// Bytes evicted before this session was sent them (drop mode only;
    /// an exec runs in block mode and never drops). Kubernetes has no such
    /// message, so it is a line of text on stderr (stdout on a terminal),
    /// never a silent gap.
    pub fn dropped(&self, stream: StreamName, offset: u64, length: u64) -> Option<WireMessage> {
        let notice = format!(
            "\r\n[tether: {length} bytes of {} (offsets {offset}..{}) were dropped from retention before this attach could send them]\r\n",
            stream.as_str(),
            offset + length
        );
        let target = if self.tty || !self.wants(StreamName::Stderr) {
            StreamName::Stdout
        } else {
            StreamName::Stderr
        };
        if !self.wants(target) {
            return None;
        }
        Some(self.data(target, &[notice.as_bytes()]))
    }

    /// The one status after all output: `Success`, or `Failure` with the
    /// exit code (nothing for a v1 success).
    pub fn exit(&self, process: &ProcessInfo) -> Option<WireMessage> {
        Status::of_exit(process).to_channel(self.protocol)
    }

    /// The status that ends a session on a protocol error.
    pub fn fatal(&self, error: &KubeError) -> Option<WireMessage> {
        Status::of_session_error(error).to_channel(self.protocol)
    }

    /// What one client message (binary or text) asks of the process, in
    /// order.
    pub fn decode(&mut self, payload: &[u8]) -> Result<Vec<ClientFrame>, KubeError> {
        Ok(match channel::decode(self.protocol, payload)? {
            ClientMessage::Stdin(data) => vec![ClientFrame::Stdin { data }],
            ClientMessage::CloseStdin => vec![ClientFrame::StdinEof],
            ClientMessage::Resize(bytes) => self
                .resize
                .push(&bytes)?
                .into_iter()
                .map(|size| ClientFrame::Resize {
                    cols: size.width,
                    rows: size.height,
                })
                .collect(),
            ClientMessage::Ignored => Vec::new(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_opening_is_an_empty_message_on_the_first_stream_asked_for() {
        let both = KubeFraming::new(Subprotocol::V5, true, true, false);
        assert_eq!(both.opening(), Some(WireMessage::Binary(vec![1])));
        let stderr_only = KubeFraming::new(Subprotocol::V4Base64, false, true, false);
        assert_eq!(stderr_only.opening(), Some(WireMessage::Text("2".into())));
        let neither = KubeFraming::new(Subprotocol::V5, false, false, false);
        assert_eq!(neither.opening(), None);
    }

    #[test]
    fn a_terminal_has_no_stderr_and_notices_go_to_stdout() {
        let tty = KubeFraming::new(Subprotocol::V5, true, true, true);
        assert!(!tty.wants(StreamName::Stderr));
        match tty.dropped(StreamName::Stdout, 0, 10) {
            Some(WireMessage::Binary(bytes)) => {
                assert_eq!(bytes[0], channel::STDOUT);
                assert!(String::from_utf8_lossy(&bytes).contains("10 bytes of stdout"));
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn client_messages_become_process_frames_in_order() {
        let mut framing = KubeFraming::new(Subprotocol::V5, true, false, true);
        assert_eq!(
            framing.decode(b"\x04{\"Width\":90,\"Height\":9}").unwrap(),
            vec![ClientFrame::Resize { cols: 90, rows: 9 }]
        );
        assert_eq!(
            framing.decode(&[0, b'a']).unwrap(),
            vec![ClientFrame::Stdin { data: vec![b'a'] }]
        );
        assert_eq!(
            framing.decode(&[255, 0]).unwrap(),
            vec![ClientFrame::StdinEof]
        );
        assert!(framing.decode(b"\x04nonsense").is_err());
    }
}
