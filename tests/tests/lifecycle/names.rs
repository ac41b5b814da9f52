//! Names (issue 13).

use super::*;

#[tokio::test]
async fn a_name_is_unique_and_works_wherever_the_id_does() {
    let server = TestServer::start();
    let process = server
        .spawn(json!({"command": "echo hi; read x", "stdin": true, "name": "build-1"}))
        .await;
    assert_eq!(process.name.as_deref(), Some("build-1"));
    let by_name = server.status("build-1").await;
    assert_eq!(by_name.id, process.id);
    let (status, body) = server
        .post(
            "/v1/processes",
            json!({"argv": ["true"], "name": "build-1"}),
        )
        .await;
    assert_eq!(
        (status, &body["error"]["code"]),
        (409, &json!("name_taken")),
        "{body}"
    );
    for bad in ["", "has space", "a/b", &"x".repeat(65), &"0".repeat(32)] {
        let (status, body) = server
            .post("/v1/processes", json!({"argv": ["true"], "name": bad}))
            .await;
        assert_eq!(status, 400, "{bad:?}: {body}");
    }
    // stdin, attach and wait by name.
    let (status, _) = server.post_raw_stdin("build-1", b"go\n").await;
    assert_eq!(status, 204);
    let received = server.attach("build-1", "").await.until_exit().await;
    assert_eq!(received.stdout, b"hi\n");
    let (status, waited) = server.get("/v1/processes/build-1/wait").await;
    assert_eq!((status, &waited["exit_code"]), (200, &json!(0)));
    // Forgotten, the name is free.
    let response = server
        .http
        .delete(server.url("/v1/processes/build-1"))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let again = server
        .spawn(json!({"argv": ["true"], "name": "build-1"}))
        .await;
    assert_ne!(again.id, process.id);
}
