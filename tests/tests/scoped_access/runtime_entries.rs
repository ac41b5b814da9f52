//! A local server's runtime entry (its URL and generated token) is a
//! secret on disk: read only from folders no other user controls, only
//! while its server runs, and its token sent only to exactly the origin
//! it names, as the URL parser that makes the request reads the URL.

use std::io::{Read, Write};
use std::net::TcpListener;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::time::Duration;

use nix::fcntl::{Flock, FlockArg};
use nix::unistd::{chown, Uid};
use tether_tests::TestServer;

use super::{cli, TempDir};

const TOKEN: &str = "entry-token-0123456789";

/// A runtime folder `<root>/tether/servers` (0700) holding one entry for
/// `url`, locked as its server would hold it while it runs.
struct PlantedEntry {
    root: TempDir,
    entry: std::path::PathBuf,
    /// The lock its server would hold for its life.
    _server_lock: Option<Flock<std::fs::File>>,
}

impl PlantedEntry {
    fn new(name: &str, url: &str) -> PlantedEntry {
        let root = TempDir::new(name);
        let servers = root.0.join("tether").join("servers");
        std::fs::create_dir_all(&servers).unwrap();
        for folder in [root.0.join("tether"), servers.clone()] {
            std::fs::set_permissions(&folder, std::fs::Permissions::from_mode(0o700)).unwrap();
        }
        let entry = servers.join("tetherd-1-planted.json");
        let body = format!("{{\"url\": \"{url}\", \"token\": \"{TOKEN}\", \"pid\": 1}}\n");
        std::fs::write(&entry, body).unwrap();
        std::fs::set_permissions(&entry, std::fs::Permissions::from_mode(0o600)).unwrap();
        let file = std::fs::File::open(&entry).unwrap();
        let lock = Flock::lock(file, FlockArg::LockExclusiveNonblock).unwrap();
        PlantedEntry {
            root,
            entry,
            _server_lock: Some(lock),
        }
    }

    fn servers(&self) -> std::path::PathBuf {
        self.root.0.join("tether").join("servers")
    }

    fn xdg(&self) -> &str {
        self.root.0.to_str().unwrap()
    }
}

/// `tether ps` against `server` with `xdg` as the runtime root: whether
/// it got in, and what it said.
fn ps(server: &TestServer, xdg: &str) -> (bool, String) {
    let out = cli(
        &[
            ("XDG_RUNTIME_DIR", xdg),
            ("TETHER_SERVER", server.base.as_str()),
        ],
        &["ps"],
    );
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stderr).into(),
    )
}

#[tokio::test]
async fn an_entry_is_read_only_from_folders_no_other_user_controls_and_while_its_server_runs() {
    let server = TestServer::start_with(&["--token", TOKEN]);
    let nobody = Uid::from_raw(65534);
    let mut planted = PlantedEntry::new("entries", &server.base);
    let (ok, said) = ps(&server, planted.xdg());
    assert!(ok, "a trusted, live entry is used: {said}");

    // Others may write to its folder: they could have planted it.
    std::fs::set_permissions(planted.servers(), std::fs::Permissions::from_mode(0o777)).unwrap();
    let (ok, said) = ps(&server, planted.xdg());
    assert!(!ok && said.contains("others may write"), "{said}");
    std::fs::set_permissions(planted.servers(), std::fs::Permissions::from_mode(0o700)).unwrap();

    // The folder belongs to another user.
    chown(&planted.servers(), Some(nobody), None).unwrap();
    let (ok, said) = ps(&server, planted.xdg());
    assert!(!ok && said.contains("belongs to uid 65534"), "{said}");
    chown(&planted.servers(), Some(Uid::effective()), None).unwrap();

    // The folder is a link (into a folder that is itself trusted).
    let real = planted.root.0.join("tether").join("real");
    std::fs::rename(planted.servers(), &real).unwrap();
    std::os::unix::fs::symlink(&real, planted.servers()).unwrap();
    let (ok, said) = ps(&server, planted.xdg());
    assert!(!ok && said.contains("not a folder"), "{said}");
    std::fs::remove_file(planted.servers()).unwrap();
    std::fs::rename(&real, planted.servers()).unwrap();

    // The entry itself belongs to another user.
    chown(&planted.entry, Some(nobody), None).unwrap();
    let (ok, said) = ps(&server, planted.xdg());
    assert!(!ok && said.contains("no runtime entry for"), "{said}");
    chown(&planted.entry, Some(Uid::effective()), None).unwrap();
    let (ok, said) = ps(&server, planted.xdg());
    assert!(ok, "trusted again: {said}");

    // Its server is gone (nobody holds its lock): a stale entry.
    planted._server_lock = None;
    let (ok, said) = ps(&server, planted.xdg());
    assert!(!ok && said.contains("while its server runs"), "{said}");
}

#[test]
fn tetherd_will_not_write_its_entry_where_another_user_could_read_it() {
    let root = TempDir::new("foreign");
    let tether = root.0.join("tether");
    std::fs::create_dir_all(&tether).unwrap();
    std::fs::set_permissions(&tether, std::fs::Permissions::from_mode(0o777)).unwrap();
    chown(&tether, Some(Uid::from_raw(65534)), None).unwrap();
    // Bounded: were it to start, `timeout` ends it (and the test fails).
    let out = std::process::Command::new("timeout")
        .arg("20")
        .arg(tether_tests::binary("tetherd"))
        .args(["--listen", "127.0.0.1:0"])
        .env("XDG_RUNTIME_DIR", &root.0)
        .env_remove("TETHER_TOKEN")
        .env_remove("TETHER_TOKEN_FILE")
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "tetherd started: {said}");
    assert!(said.contains("belongs to uid 65534"), "{said}");
    let written: Vec<_> = walk(&tether);
    assert!(
        written
            .iter()
            .all(|p| !p.to_string_lossy().ends_with(".json")),
        "an entry was written: {written:?}"
    );
}

fn walk(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let path = entry.path();
        if path.is_dir() {
            found.extend(walk(&path));
        }
        found.push(path);
    }
    found
}

/// A listener on 127.0.0.2 (standing in for another host) that answers
/// 404 to whatever comes and keeps each request head it got.
fn other_host() -> (String, std::sync::mpsc::Receiver<String>) {
    let listener = TcpListener::bind("127.0.0.2:0").unwrap();
    let address = listener.local_addr().unwrap().to_string();
    let (heads, received) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            let mut stream = stream;
            let _ = stream.set_read_timeout(Some(Duration::from_secs(5)));
            let mut head = Vec::new();
            let mut byte = [0u8; 1];
            while !head.ends_with(b"\r\n\r\n") && head.len() < 64 << 10 {
                match stream.read(&mut byte) {
                    Ok(1) => head.push(byte[0]),
                    _ => break,
                }
            }
            let _ = stream.write_all(
                b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\nconnection: close\r\n\r\n",
            );
            if heads
                .send(String::from_utf8_lossy(&head).into_owned())
                .is_err()
            {
                return;
            }
        }
    });
    (address, received)
}

#[tokio::test]
async fn a_local_token_reaches_no_other_host_however_the_url_is_written() {
    let root = TempDir::new("origin");
    let xdg = root.0.to_str().unwrap();
    let local = TestServer::start_exact(&[], &[("XDG_RUNTIME_DIR", xdg)], None);
    let local_authority = local.base.trim_start_matches("http://").to_string();
    let (other, heads) = other_host();
    // What a hand-made "is it local?" check read as the local server, and
    // the URL parser sends to the other host.
    for url in [
        format!("http://{other}#@{local_authority}"),
        format!("http://{other}/?@{local_authority}"),
        format!("http://user@{local_authority}"),
    ] {
        let out = cli(
            &[("XDG_RUNTIME_DIR", xdg), ("TETHER_SERVER", url.as_str())],
            &["ps"],
        );
        let said = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(125), "{url}: {said}");
        assert!(said.contains("server URL"), "{url}: {said}");
    }
    assert!(
        heads.try_recv().is_err(),
        "a request reached the other host"
    );
    // The other host named plainly is reached, without the local token.
    let url = format!("http://{other}");
    let out = cli(
        &[("XDG_RUNTIME_DIR", xdg), ("TETHER_SERVER", url.as_str())],
        &["ps"],
    );
    assert!(!out.status.success());
    let head = heads.recv_timeout(Duration::from_secs(10)).unwrap();
    let later: Vec<String> = heads.try_iter().collect();
    for head in std::iter::once(&head).chain(&later) {
        assert!(head.starts_with("GET /"), "{head}");
        assert!(
            !head.to_ascii_lowercase().contains("authorization"),
            "{head}"
        );
    }
}
