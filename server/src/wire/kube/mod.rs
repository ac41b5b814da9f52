//! The Kubernetes remote-command wire format: channels and subprotocols
//! (`channel.rs`), one session's framing of the attachment's messages
//! (`framing.rs`), and the `Status` document that ends a session or
//! answers a refusal (`status.rs`).

pub mod channel;
pub mod framing;
pub mod status;
