//! Access that fits real deployments: a generated token by default, scoped
//! tokens (one process, some rights, an expiry, dead with their process),
//! the audit trail, the CLI's share links.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::{json, Value};
use tether_protocol::{ClientFrame, ServerFrame};
use tether_tests::scoped::{call, code, mint_as_operator, OPERATOR};
use tether_tests::*;

/// A fresh directory under the system temp dir, removed by the caller's
/// `TempDir` drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new(name: &str) -> TempDir {
        let path = std::env::temp_dir().join(format!(
            "tether-access-{name}-{}-{}",
            std::process::id(),
            uuid_like()
        ));
        std::fs::create_dir_all(&path).unwrap();
        // Others may traverse it: only the modes tetherd sets keep them out.
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
        TempDir(path)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn uuid_like() -> u64 {
    use std::time::{SystemTime, UNIX_EPOCH};
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .subsec_nanos() as u64
}

/// Mints a token for `id` with the operator token.
async fn mint(server: &TestServer, id: &str, rights: &[&str], ttl_ms: u64) -> String {
    let body = mint_as_operator(server, id, rights, ttl_ms).await;
    assert_eq!(body["process"], id);
    body["token"].as_str().unwrap().to_string()
}

async fn spawn_as_operator(server: &TestServer, body: Value) -> String {
    let info = tether_tests::scoped::spawn_as_operator(server, body).await;
    info["id"].as_str().unwrap().to_string()
}

fn cli(env: &[(&str, &str)], args: &[&str]) -> std::process::Output {
    Command::new(binary("tether"))
        .args(args)
        .env_remove("TETHER_TOKEN")
        .env_remove("TETHER_TOKEN_FILE")
        .envs(env.iter().copied())
        .output()
        .unwrap()
}

mod audit;
mod runtime_entries;
mod scoped_tokens;
mod secure_by_default;
