//! The shared hostile list (`tests/hostile/cases.json`, issue 48) against
//! the Rust library, as the Python and TypeScript suites run it against
//! theirs: each case's act played by a fake server of ours
//! (`tests/src/hostile.rs`), each call in a process of its own
//! (`src/bin/hostile_call.rs`) measured for time and memory. A case this
//! suite cannot run fails it: no case is skipped.

use std::process::Command;
use std::sync::atomic::Ordering;

use serde_json::Value;
use tether_tests::hostile::{serve, ACTS};
use tether_tests::{binary, TestServer};

const CALLS: &[&str] = &["list", "get", "read_output", "exec", "attach_read"];
const CLIENT_KEYS: &[&str] = &[
    "request_timeout_ms",
    "retry_budget_ms",
    "reconnect_budget_ms",
    "connect_timeout_ms",
    "max_answer_bytes",
    "window",
];
const EXPECT_KEYS: &[&str] = &[
    "outcome",
    "error_contains",
    "deadline_ms",
    "memory_mb",
    "requests_max",
];

fn cases() -> Vec<Value> {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/hostile/cases.json");
    let list: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    assert_eq!(list["format"], 1, "a format this suite does not know");
    list["cases"].as_array().unwrap().clone()
}

#[test]
fn the_list_holds_nothing_this_suite_cannot_run() {
    for case in cases() {
        let id = &case["id"];
        assert!(ACTS.contains(&case["act"].as_str().unwrap()), "{id}: act");
        assert!(
            CALLS.contains(&case["call"].as_str().unwrap()),
            "{id}: call"
        );
        for key in case["client"].as_object().unwrap().keys() {
            assert!(
                CLIENT_KEYS.contains(&key.as_str()),
                "{id}: client key {key}"
            );
        }
        for key in case["expect"].as_object().unwrap().keys() {
            assert!(
                EXPECT_KEYS.contains(&key.as_str()),
                "{id}: expect key {key}"
            );
        }
        let outcome = case["expect"]["outcome"].as_str().unwrap();
        assert!(
            matches!(outcome, "error" | "bounded"),
            "{id}: outcome {outcome}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_hostile_case_ends_in_time_and_in_bounded_memory() {
    let real = TestServer::start();
    let process = real
        .spawn(serde_json::json!({"argv": ["sleep", "60"]}))
        .await;
    let caller = binary("hostile-call");
    let mut failures = Vec::new();
    for case in cases() {
        let id = case["id"].as_str().unwrap().to_string();
        let expect = &case["expect"];
        let deadline = expect["deadline_ms"].as_u64().unwrap();
        let fake = serve(case["act"].as_str().unwrap(), process.clone()).await;
        let spec = serde_json::json!({
            "base": fake.base,
            "call": case["call"],
            "client": case["client"],
            "stop_after_ms": deadline,
        });
        let caller = caller.clone();
        let output = tokio::task::spawn_blocking(move || {
            Command::new(caller).arg(spec.to_string()).output().unwrap()
        })
        .await
        .unwrap();
        let line = String::from_utf8_lossy(&output.stdout).to_string();
        let Ok(report) = serde_json::from_str::<Value>(line.trim()) else {
            failures.push(format!(
                "{id}: no report ({})",
                String::from_utf8_lossy(&output.stderr)
            ));
            continue;
        };
        let outcome = report["outcome"].as_str().unwrap_or("");
        let error = report["error"].as_str().unwrap_or("").to_lowercase();
        match expect["outcome"].as_str().unwrap() {
            "error" if outcome != "error" => failures.push(format!(
                "{id}: {outcome}, not an error, within {deadline} ms"
            )),
            "bounded" if outcome == "ok" => failures.push(format!("{id}: a success")),
            _ => {}
        }
        for needle in expect["error_contains"].as_array().into_iter().flatten() {
            let needle = needle.as_str().unwrap().to_lowercase();
            if outcome == "error" && !error.contains(&needle) {
                failures.push(format!("{id}: the error {error:?} does not say {needle:?}"));
            }
        }
        if let Some(memory) = expect["memory_mb"].as_f64() {
            let growth = report["growth_mb"].as_f64().unwrap_or(f64::MAX);
            if growth >= memory {
                failures.push(format!("{id}: grew {growth:.0} MiB (bound {memory})"));
            }
        }
        if let Some(most) = expect["requests_max"].as_u64() {
            let seen = fake.requests.load(Ordering::Relaxed) as u64;
            if seen > most {
                failures.push(format!("{id}: {seen} requests (at most {most})"));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
