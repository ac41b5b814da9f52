//! Kubernetes exec compatibility (issue 17), against real clients: the real
//! `kubectl` (on the PATH) with a kubeconfig written here, the Kubernetes
//! Python client from PyPI (venv made by scripts/test.sh), and a small
//! channel client of our own for each subprotocol.

pub mod support;

use std::time::Duration;

use serde_json::{json, Value};
use support::{text, ChannelClient, Kubeconfig, Session, TlsProxy};
use tether_protocol::{ExitReason, ProcessInfo};
use tether_tests::tmux::Tmux;
use tether_tests::TestServer;

/// `ws://HOST/api/v1/namespaces/{ns}/pods/{pod}/{verb}?{query}`.
fn pod_url(server: &TestServer, ns: &str, pod: &str, verb: &str, query: &str) -> String {
    format!(
        "{}/api/v1/namespaces/{ns}/pods/{pod}/{verb}?{query}",
        server.base.replacen("http://", "ws://", 1)
    )
}

/// `command=a&command=b...` for an argv.
fn command_query(argv: &[&str]) -> String {
    argv.iter()
        .map(|a| {
            let encoded: String = a
                .bytes()
                .map(|b| match b {
                    b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'-' | b'_' | b'.' => {
                        (b as char).to_string()
                    }
                    _ => format!("%{b:02X}"),
                })
                .collect();
            format!("command={encoded}")
        })
        .collect::<Vec<_>>()
        .join("&")
}

const ALL_PROTOCOLS: [&str; 4] = [
    "v5.channel.k8s.io",
    "v4.channel.k8s.io",
    "v4.base64.channel.k8s.io",
    "channel.k8s.io",
];

/// The one process the server knows.
async fn only_process(server: &TestServer) -> ProcessInfo {
    let (_, list) = server.get("/v1/processes").await;
    let list: Vec<ProcessInfo> = serde_json::from_value(list).unwrap();
    assert_eq!(list.len(), 1, "{list:?}");
    server.wait_exit(&list[0].id).await
}

mod exec_process;
mod kubectl;
mod python_client;
mod subprotocols;
