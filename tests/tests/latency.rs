//! No fixed tail latency (issue 2): the exit frame and the wait response go
//! out as soon as the process has exited and its output is captured. In a
//! test binary of its own so that no other test competes for the CPU while
//! it measures.

use std::time::{Duration, Instant};

use serde_json::json;
use tether_protocol::ExitReason;
use tether_tests::TestServer;

#[tokio::test]
async fn true_exits_with_no_tail_latency_on_attach_and_wait() {
    let server = TestServer::start();
    let started = Instant::now();
    let process = server.spawn(json!({"argv": ["true"]})).await;
    let waiter = {
        let url = server.url(&format!(
            "/v1/processes/{}/wait?timeout_ms=10000",
            process.id
        ));
        let http = server.http.clone();
        tokio::spawn(async move {
            let info: serde_json::Value = http.get(url).send().await.unwrap().json().await.unwrap();
            (Instant::now(), info)
        })
    };
    let mut attachment = server.attach(&process.id, "").await;
    let received = attachment.until_exit().await;
    let exit_frame_at = started.elapsed();
    let exit = received.exit.unwrap();
    assert_eq!(exit.exit_code, Some(0));
    assert_eq!(exit.reason, Some(ExitReason::Exit));
    assert!(
        exit_frame_at < Duration::from_millis(50),
        "exit frame took {exit_frame_at:?}"
    );
    let (returned, info) = waiter.await.unwrap();
    assert_eq!(info["status"], "exited");
    assert!(
        returned.duration_since(started) < Duration::from_millis(50),
        "wait returned after {:?}",
        returned.duration_since(started)
    );
}
