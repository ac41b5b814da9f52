//! Every black-box integration test of tether, in one test binary: each
//! binary links the whole dependency graph, and on a two-core machine
//! forty of them cost minutes of every CI run and every edit-test loop.
//! Each module is one behaviour (docs/TESTING.md names them); run one
//! with `cargo test -p tether-tests --test integration MODULE::`.
//!
//! `latency.rs` stays a binary of its own: its tests hold time bounds, and no other test
//! may compete for the CPU while it does.

mod access;
mod architecture;
mod block_mode;
mod budgets;
mod cli_admin;
mod cli_copy;
mod cli_detached;
mod cli_run;
mod cli_signals;
mod cli_terminal;
mod cli_users;
mod client_requests;
mod client_run;
mod client_streams;
mod configuration_doc;
mod containment;
mod exec;
mod faults;
mod fleet;
mod flow_control;
mod handover;
mod handover_flags;
mod handover_hop;
mod hostile;
mod hostile_list;
mod hostile_server;
mod http_output;
mod idempotency_records;
mod input_exactly_once;
mod input_http;
mod kube;
mod lifecycle;
mod limits;
mod names;
mod operations;
mod output;
mod protocol;
mod proxy;
mod pty;
mod recording;
mod recording_input;
mod recording_players;
mod retention;
mod scoped_access;
mod scoped_routes;
mod screen;
mod screen_bounds;
mod screen_corpus;
mod soak;
mod startup;
mod state_ledger;
mod storage;
mod tls;
mod tls_clients;
mod web_files;
