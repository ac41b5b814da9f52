//! What an attachment's messages look like on the wire, with no IO and
//! nothing of the server above `error`: `framing.rs` chooses between
//! `tether.v1` MessagePack frames and the Kubernetes channel protocols
//! (`kube/`), so `attach/` (which runs every attachment) and `kube/` (the
//! Kubernetes routes) both build on it and neither imports the other's
//! framing.

pub mod framing;
pub mod kube;
