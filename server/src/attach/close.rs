//! How an attachment ends: a Close with the code that says why, or a
//! socket too far gone for one. Every close code the attachment sends is
//! named here, and only here.

use axum::extract::ws::{CloseFrame, Utf8Bytes};
use tether_protocol::DecodeError;

use crate::error::{AttachError, KubeError};

/// The Close the attachment sends, by close code (RFC 6455, 7.4.1), each
/// with the reason that goes with it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Close {
    /// 1000, normal: the process exited and the exit frame was sent.
    Normal(&'static str),
    /// 1001, going away: the client answered no ping for the idle timeout.
    GoingAway(&'static str),
    /// 1002, protocol error: the client's messages could not be read.
    ProtocolError(&'static str),
    /// 1003, unsupported data: a text message where only binary is taken.
    Unsupported(&'static str),
    /// 1007, invalid payload: a message that does not decode.
    InvalidPayload(&'static str),
    /// 1008, policy violation: refused after `hello`, or a frame the
    /// protocol does not allow.
    Policy(&'static str),
    /// 1009, too big: a message over `--max-frame-bytes`.
    TooBig(&'static str),
    /// 1012, service restart: the server hands over to a new binary in
    /// place (issue 43); the client reconnects and resumes.
    Restart(&'static str),
}

impl Close {
    /// The Close after a protocol error, with its error code as the reason.
    pub fn after(error: &AttachError) -> Close {
        let reason = error.code();
        match error {
            AttachError::Decode(DecodeError::Malformed(_))
            | AttachError::Kube(KubeError::Malformed(_)) => Close::InvalidPayload(reason),
            AttachError::Decode(
                DecodeError::UnknownType(_) | DecodeError::InvalidFields { .. },
            ) => Close::Policy(reason),
            AttachError::TextMessage => Close::Unsupported(reason),
            AttachError::TooLarge(_) | AttachError::Kube(KubeError::TooLarge(_)) => {
                Close::TooBig(reason)
            }
            AttachError::Socket(_) => Close::ProtocolError(reason),
            AttachError::Kube(_) | AttachError::PingFlood(_) => Close::Policy(reason),
        }
    }

    /// The close code.
    pub fn code(self) -> u16 {
        match self {
            Close::Normal(_) => 1000,
            Close::GoingAway(_) => 1001,
            Close::ProtocolError(_) => 1002,
            Close::Unsupported(_) => 1003,
            Close::InvalidPayload(_) => 1007,
            Close::Policy(_) => 1008,
            Close::TooBig(_) => 1009,
            Close::Restart(_) => 1012,
        }
    }

    /// The reason sent with the code.
    pub fn reason(self) -> &'static str {
        match self {
            Close::Normal(reason)
            | Close::GoingAway(reason)
            | Close::ProtocolError(reason)
            | Close::Unsupported(reason)
            | Close::InvalidPayload(reason)
            | Close::Policy(reason)
            | Close::TooBig(reason)
            | Close::Restart(reason) => reason,
        }
    }

    /// The Close frame to send.
    pub fn frame(self) -> CloseFrame {
        CloseFrame {
            code: self.code(),
            reason: Utf8Bytes::from_static(self.reason()),
        }
    }
}

/// The socket is unusable: it failed, or took nothing for the send
/// timeout. Nothing more is sent on it, not even a Close.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SocketGone;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_decode_error_closes_with_the_code_the_protocol_gives_it() {
        let errors = [
            DecodeError::Malformed("x".into()),
            DecodeError::UnknownType("x".into()),
            DecodeError::InvalidFields {
                kind: "x".into(),
                message: "y".into(),
            },
        ];
        for error in errors {
            let code = error.close_code();
            assert_eq!(Close::after(&AttachError::Decode(error)).code(), code);
        }
    }

    #[test]
    fn each_protocol_error_has_its_close_code_and_its_error_code_as_reason() {
        let cases = [
            (AttachError::TextMessage, 1003),
            (AttachError::TooLarge(1), 1009),
            (AttachError::Socket("x".into()), 1002),
            (AttachError::Kube(KubeError::Malformed("x".into())), 1007),
            (AttachError::Kube(KubeError::TooLarge(1)), 1009),
            (AttachError::Kube(KubeError::InvalidQuery("x".into())), 1008),
        ];
        for (error, code) in cases {
            let close = Close::after(&error);
            assert_eq!((close.code(), close.reason()), (code, error.code()));
        }
    }
}
