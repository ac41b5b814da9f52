//! Names are their own namespace: a name never equals or looks like a
//! process id (plain or `NODE.HEX32`), so a lookup never confuses them;
//! names are kept in the records and survive a restart, still unique.

use serde_json::json;
use tether_tests::{fresh_dir, TestServer};

#[tokio::test]
async fn a_name_that_looks_like_any_process_id_is_refused() {
    let server = TestServer::start_with(&["--node", "n1"]);
    let victim = server.sh("sleep 600", json!({})).await;
    let random = victim.id.rsplit_once('.').map(|(_, r)| r).unwrap();
    for name in [
        victim.id.clone(),
        random.to_string(),
        format!("n1.{random}"),
        format!("other.{}", "a".repeat(32)),
        "F".repeat(32),
    ] {
        let (code, body) = server
            .post("/v1/processes", json!({"argv": ["true"], "name": name}))
            .await;
        assert_eq!(code, 400, "{name}: {body}");
        assert!(
            body.to_string().contains("looks like a process id"),
            "{body}"
        );
    }
    // The victim is reached by its id, and only it.
    let (code, killed) = server
        .post(&format!("/v1/processes/{}/kill", victim.id), json!({}))
        .await;
    assert_eq!(code, 200, "{killed}");
    let exited = server.wait_exit(&victim.id).await;
    assert_eq!(exited.id, victim.id);
    // A name with dots that is not an id is a name.
    let (code, body) = server
        .post(
            "/v1/processes",
            json!({"argv": ["true"], "name": "n1.build-7"}),
        )
        .await;
    assert_eq!(code, 201, "{body}");
    let (code, found) = server.get("/v1/processes/n1.build-7").await;
    assert_eq!((code, &found["id"]), (200, &body["id"]));
}

#[tokio::test]
async fn names_survive_a_sigkill_and_restart_and_stay_unique() {
    let dir = fresh_dir();
    let dir_arg = dir.to_str().unwrap().to_string();
    let args = ["--data-dir", dir_arg.as_str()];
    let server = TestServer::start_with(&args);
    let (code, job) = server
        .post(
            "/v1/processes",
            json!({"argv": ["sh", "-c", "echo seven"], "name": "job-7"}),
        )
        .await;
    assert_eq!(code, 201, "{job}");
    let id = job["id"].as_str().unwrap().to_string();
    server.wait_exit(&id).await;
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(server.pid() as i32),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    drop(server);

    let server = TestServer::start_with(&args);
    let (code, found) = server.get("/v1/processes/job-7").await;
    assert_eq!(code, 200, "{found}");
    assert_eq!(found["id"], id.as_str());
    assert_eq!(found["name"], "job-7");
    let (code, body) = server
        .post("/v1/processes", json!({"argv": ["true"], "name": "job-7"}))
        .await;
    assert_eq!(code, 409, "{body}");
    let (_, list) = server.get("/v1/processes").await;
    let named = list
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["name"] == "job-7")
        .count();
    assert_eq!(named, 1, "{list}");
    drop(server);
    let _ = std::fs::remove_dir_all(&dir);
}
