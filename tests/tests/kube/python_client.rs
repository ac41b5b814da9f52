//! The Kubernetes Python client from PyPI.

use super::*;

#[test]
fn python_client_exec_with_separate_streams_stdin_and_return_code() {
    let server = TestServer::start();
    let seen = support::python_client(&server.base, "pipes", None);
    assert_eq!(seen["subprotocol"], "v5.channel.k8s.io", "{seen}");
    assert_eq!(seen["stdout"], "out\nhello from python\n", "{seen}");
    assert_eq!(seen["stderr"], "err\n", "{seen}");
    assert_eq!(seen["returncode"], 3, "{seen}");
}

#[test]
fn python_client_tty_session_is_resized_through_channel_4() {
    let server = TestServer::start();
    let seen = support::python_client(&server.base, "tty", None);
    assert!(seen["first"].as_str().unwrap().contains("30 100"), "{seen}");
    assert!(
        seen["second"].as_str().unwrap().contains("40 120"),
        "{seen}"
    );
    assert_eq!(seen["returncode"], 0, "{seen}");
}
