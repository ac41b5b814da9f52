//! Every HTTP route, in one folder: the router and the small routes
//! (`routes.rs`), the WebSocket upgrades for attach and `GET /v1/run`
//! (`attach.rs`), output as a raw body or Server-Sent Events (`output.rs`),
//! one-shot exec (`exec.rs`), token minting (`mint.rs`), the web root
//! (`web.rs`), the query parameters and headers several routes read
//! (`params.rs`), `follow.rs`, the reader that output and exec share, and
//! `asciicast.rs`, the lines a recording (`recording.rs`) is made of.
//! Route files import `params`, `follow` and `asciicast`, never each other.

pub mod admin;
pub mod asciicast;
pub mod attach;
pub mod exec;
pub mod follow;
pub mod mint;
pub mod output;
pub mod params;
pub mod recording;
pub mod routes;
pub mod screen;
pub mod web;

pub use routes::router;
