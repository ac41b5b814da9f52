//! The audit trail: who did what to which process, never the secret.

use super::*;

/// The audit lines of a JSON log: (event, identity, process, rights
/// field or reason).
fn audit_lines(log: &str) -> Vec<(String, String, String, String)> {
    log.lines()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .filter(|v| v["target"] == "audit")
        .map(|v| {
            let f = &v["fields"];
            let s = |k: &str| f[k].as_str().unwrap_or("").to_string();
            let detail = if s("event") == "refused" {
                s("reason")
            } else {
                s("rights")
            };
            (s("event"), s("identity"), s("process"), detail)
        })
        .collect()
}

#[tokio::test]
async fn a_sequence_of_actions_leaves_exactly_its_audit_lines_and_no_token_anywhere() {
    let dir = TempDir::new("audit");
    let path = dir.0.join("stderr");
    let server = TestServer::start_exact(
        &["--token", OPERATOR, "--log-json"],
        &[("RUST_LOG", "warn,audit=info")],
        Some(&path),
    );
    let a = spawn_as_operator(&server, json!({"argv": ["sleep", "30"], "stdin": true})).await;
    let (_, minted) = call(
        &server,
        "POST",
        &format!("/v1/processes/{a}/tokens"),
        Some(OPERATOR),
        Some(json!({"rights": ["read"], "ttl_ms": 60000})),
    )
    .await;
    let token = minted["token"].as_str().unwrap().to_string();
    let id = minted["token_id"].as_str().unwrap().to_string();
    let scoped = format!("token:{id}");

    let attachment = server.attach(&a, &format!("access_token={token}")).await;
    drop(attachment);
    let lines = settle(
        || audit_lines(&std::fs::read_to_string(&path).unwrap()),
        |l| l.iter().any(|e| e.0 == "detach"),
    )
    .await;
    assert!(lines.iter().any(|e| e.0 == "detach"), "{lines:?}");
    call(
        &server,
        "POST",
        &format!("/v1/processes/{a}/stdin"),
        Some(&token),
        None,
    )
    .await;
    call(&server, "GET", "/v1/processes", Some("wrong-token"), None).await;
    call(
        &server,
        "POST",
        &format!("/v1/processes/{a}/signal"),
        Some(OPERATOR),
        Some(json!({"signal": "CONT"})),
    )
    .await;
    call(
        &server,
        "DELETE",
        &format!("/v1/processes/{a}?force=1"),
        Some(OPERATOR),
        None,
    )
    .await;

    let log = std::fs::read_to_string(&path).unwrap();
    let o = "operator".to_string();
    let e = |event: &str, who: &str, process: &str, detail: &str| {
        (
            event.to_string(),
            who.to_string(),
            process.to_string(),
            detail.to_string(),
        )
    };
    assert_eq!(
        audit_lines(&log),
        vec![
            e("spawn", &o, &a, "operator"),
            e("mint", &o, &a, "operator"),
            e("attach", &scoped, &a, "read"),
            e("detach", &scoped, &a, "read"),
            e("refused", &scoped, &a, "missing_right"),
            e("refused", "anonymous", "", "unauthorized"),
            e("signal", &o, &a, "operator"),
            e("kill", &o, &a, "operator"),
            e("forget", &o, &a, "operator"),
        ],
        "{log}"
    );
    // Peers are named; secrets never.
    assert!(log.contains("127.0.0.1:"), "{log}");
    let metrics = server.metrics().await;
    assert!(
        metrics.contains("tether_refusals_total{reason=\"missing_right\"} 1"),
        "{metrics}"
    );
    assert!(
        metrics.contains("tether_refusals_total{reason=\"unauthorized\"} 1"),
        "{metrics}"
    );
    for secret in [OPERATOR, token.as_str(), "wrong-token"] {
        assert!(!log.contains(secret), "the log holds a token");
        assert!(!metrics.contains(secret), "the metrics hold a token");
    }
}
