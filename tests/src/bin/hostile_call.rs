//! Runs one call of a hostile case (`tests/hostile/cases.json`) with the
//! Rust library, in a process of its own, and prints what happened as one
//! JSON line: `outcome` (`ok`, `error`, `running`), `error`, `elapsed_ms`
//! and `growth_mb` (its `VmHWM` after the call against its `VmRSS`
//! before). Argument: JSON with `base`, `call`, `client` and
//! `stop_after_ms`. Run by `tests/tests/hostile_list.rs`.

use std::time::{Duration, Instant};

use serde_json::{json, Value};
use tether_client::{AttachOptions, Client, RetryPolicy, SpawnRequest};
use tether_protocol::StreamName;

const PROCESS_ID: &str = "0123456789abcdef0123456789abcdef";

fn status_kib(field: &str) -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .unwrap_or_default()
        .lines()
        .find_map(|l| {
            l.strip_prefix(field)?
                .trim()
                .trim_end_matches("kB")
                .trim()
                .parse()
                .ok()
        })
        .unwrap_or(0)
}

fn millis(settings: &Value, key: &str) -> Option<Duration> {
    settings.get(key)?.as_u64().map(Duration::from_millis)
}

async fn call(name: &str, settings: &Value, base: &str) -> Result<(), tether_client::Error> {
    let mut client = Client::new(base)?.without_token();
    if let Some(timeout) = millis(settings, "request_timeout_ms") {
        client = client.with_request_timeout(timeout);
    }
    if let Some(budget) = millis(settings, "retry_budget_ms") {
        client = client.with_retry(RetryPolicy {
            budget,
            ..RetryPolicy::default()
        });
    }
    if let Some(bytes) = settings.get("max_answer_bytes").and_then(Value::as_u64) {
        client = client.with_max_answer_bytes(bytes as usize);
    }
    match name {
        "list" => client.list().await.map(drop),
        "get" => client.get(PROCESS_ID).await.map(drop),
        "read_output" => client
            .read_output(PROCESS_ID, StreamName::Stdout, 0)
            .await
            .map(drop),
        "exec" => {
            let spec = SpawnRequest {
                argv: Some(vec!["true".into()]),
                ..SpawnRequest::default()
            };
            client.exec(spec).await.map(drop)
        }
        "attach_read" => {
            let mut options = AttachOptions::default();
            if let Some(window) = settings.get("window").and_then(Value::as_u64) {
                options.window = window;
            }
            if let Some(timeout) = millis(settings, "connect_timeout_ms") {
                options.connect_timeout = timeout;
            }
            let reconnect = millis(settings, "reconnect_budget_ms")
                .or_else(|| millis(settings, "retry_budget_ms"));
            if let Some(budget) = reconnect {
                options.reconnect = RetryPolicy {
                    budget,
                    ..RetryPolicy::default()
                };
            }
            let attachment = client.attach(PROCESS_ID, options).await?;
            let tether_client::Attachment {
                mut stdout, exit, ..
            } = attachment;
            while let Some(chunk) = stdout.chunk().await {
                chunk?;
            }
            exit.await.map(drop)
        }
        other => panic!("no call {other}"),
    }
}

fn main() {
    let spec: Value =
        serde_json::from_str(&std::env::args().nth(1).expect("a JSON argument")).expect("JSON");
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    let before = status_kib("VmRSS:");
    let started = Instant::now();
    let stop = Duration::from_millis(spec["stop_after_ms"].as_u64().unwrap_or(10_000));
    let base = spec["base"].as_str().unwrap_or_default().to_string();
    let name = spec["call"].as_str().unwrap_or_default().to_string();
    let settings = spec["client"].clone();
    let result =
        runtime.block_on(async { tokio::time::timeout(stop, call(&name, &settings, &base)).await });
    let elapsed_ms = started.elapsed().as_millis() as u64;
    let growth_mb = status_kib("VmHWM:").saturating_sub(before) as f64 / 1024.0;
    let (outcome, error) = match result {
        Ok(Ok(())) => ("ok", String::new()),
        Ok(Err(error)) => ("error", error.to_string()),
        Err(_) => ("running", String::new()),
    };
    println!(
        "{}",
        json!({"outcome": outcome, "error": error, "elapsed_ms": elapsed_ms, "growth_mb": growth_mb})
    );
    // Whatever is still running (a flood) must not hold the exit.
    std::process::exit(0);
}
