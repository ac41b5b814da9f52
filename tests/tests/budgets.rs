//! Every byte the server holds on a client's or a process's behalf is
//! bounded: list answers, retained buffers, request metadata, queued stdin.

use serde_json::{json, Value};
use tether_tests::*;

async fn list_page(server: &TestServer, query: &str) -> (u16, Value, Option<String>, usize) {
    let response = server
        .http
        .get(server.url(&format!("/v1/processes?{query}")))
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    let next = response
        .headers()
        .get("tether-next-after")
        .map(|v| v.to_str().unwrap().to_string());
    let text = response.text().await.unwrap();
    let size = text.len();
    (
        status,
        serde_json::from_str(&text).unwrap_or(Value::Null),
        next,
        size,
    )
}

#[tokio::test]
async fn the_process_list_comes_in_pages_that_follow_on() {
    let server = TestServer::start();
    let mut ids = Vec::new();
    for _ in 0..5 {
        let process = server.spawn(json!({"argv": ["true"]})).await;
        server.wait_exit(&process.id).await;
        ids.push(process.id);
    }
    let mut seen = Vec::new();
    let mut query = "limit=2".to_string();
    let mut pages = 0;
    loop {
        let (status, page, next, _) = list_page(&server, &query).await;
        assert_eq!(status, 200, "{page}");
        let page = page.as_array().unwrap().clone();
        assert!(page.len() <= 2);
        seen.extend(page.iter().map(|p| p["id"].as_str().unwrap().to_string()));
        pages += 1;
        match next {
            Some(after) => {
                assert_eq!(Some(&after), seen.last());
                query = format!("limit=2&after={after}");
            }
            None => break,
        }
        assert!(pages < 10, "pages never end");
    }
    assert_eq!(seen, ids, "every process once, oldest first");
    assert_eq!(pages, 3);
    for bad in ["limit=0", "limit=1001", "limit=x"] {
        assert_eq!(list_page(&server, bad).await.0, 400, "{bad}");
    }
    assert_eq!(list_page(&server, "after=nosuchid").await.0, 404);
}

#[tokio::test]
async fn a_list_of_processes_with_huge_argv_is_cut_at_the_byte_bound() {
    let server = TestServer::start();
    // 7 x 120 KB: each argument under Linux's 128 KiB per-string limit.
    let mut argv = vec!["true".to_string()];
    argv.extend(std::iter::repeat_n("x".repeat(120_000), 7));
    for _ in 0..6 {
        let process = server.spawn(json!({ "argv": argv })).await;
        server.wait_exit(&process.id).await;
    }
    let (status, page, next, size) = list_page(&server, "").await;
    assert_eq!(status, 200);
    let listed = page.as_array().unwrap().len();
    assert!(listed < 6, "{listed} processes in one answer");
    assert!(size <= (4 << 20) + 1_000_000, "{size} bytes");
    let after = next.expect("a next page");
    let (_, rest, next, _) = list_page(&server, &format!("after={after}")).await;
    assert_eq!(listed + rest.as_array().unwrap().len(), 6);
    assert!(next.is_none());
}
