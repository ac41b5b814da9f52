//! Requests as the operator or as a scoped token, shared by the access
//! tests (`scoped_access.rs`, `scoped_routes.rs`).

use serde_json::{json, Value};

use crate::TestServer;

/// The operator token the access tests start their servers with.
pub const OPERATOR: &str = "operator-secret-0123456789";

/// A request with an optional bearer token and JSON body; status and the
/// body (JSON, else `Null`).
pub async fn call(
    server: &TestServer,
    method: &str,
    path: &str,
    token: Option<&str>,
    body: Option<Value>,
) -> (u16, Value) {
    let (status, text) = call_text(server, method, path, token, body, None).await;
    (status, serde_json::from_str(&text).unwrap_or(Value::Null))
}

/// As [`call`], with an optional `Accept`, the body as text.
pub async fn call_text(
    server: &TestServer,
    method: &str,
    path: &str,
    token: Option<&str>,
    body: Option<Value>,
    accept: Option<&str>,
) -> (u16, String) {
    let method = reqwest::Method::from_bytes(method.as_bytes()).unwrap();
    let mut request = server.http.request(method, server.url(path));
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    if let Some(body) = body {
        request = request.json(&body);
    }
    if let Some(accept) = accept {
        request = request.header("accept", accept);
    }
    let response = request.send().await.unwrap();
    let status = response.status().as_u16();
    (status, response.text().await.unwrap())
}

/// The error code of an error body, or "".
pub fn code(body: &Value) -> &str {
    body["error"]["code"].as_str().unwrap_or("")
}

/// Mints a token for the process `id` (or name) as the operator: the 201
/// answer's body.
pub async fn mint_as_operator(
    server: &TestServer,
    id: &str,
    rights: &[&str],
    ttl_ms: u64,
) -> Value {
    let (status, body) = call(
        server,
        "POST",
        &format!("/v1/processes/{id}/tokens"),
        Some(OPERATOR),
        Some(json!({"rights": rights, "ttl_ms": ttl_ms})),
    )
    .await;
    assert_eq!(status, 201, "{body}");
    body
}

/// Spawns as the operator: the 201 answer's process object.
pub async fn spawn_as_operator(server: &TestServer, body: Value) -> Value {
    let (status, info) = call(server, "POST", "/v1/processes", Some(OPERATOR), Some(body)).await;
    assert_eq!(status, 201, "{info}");
    info
}
