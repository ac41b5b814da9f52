//! Tokens: the operator's token (generated at start when none is given,
//! and the file it is written to), and scoped tokens, signed so the server
//! verifies them without a database.
//!
//! A scoped token is `tether1.<claims>.<mac>`: the claims (token id,
//! process id, the process's start instant, rights, expiry) as base64url
//! JSON, and HMAC-SHA256 over them with a key of 32 random bytes the server
//! draws at start and keeps only in memory ([`SigningKey`]). Why a key of its
//! own, in memory: a scoped token names a process, and processes live only
//! in this server's memory, so a key that dies with the server kills every
//! token together with the processes they name; nothing on disk to steal or
//! rotate; a server started with `--no-token` can still sign share links;
//! and rotating the operator token does not need to touch scoped ones.
//! The process's start instant inside the claims means a token never
//! outlives the process it names, even if its id were ever seen again.

use std::fmt;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use hmac::{Hmac, Mac};
use serde::{Deserialize, Serialize};
use sha2::Sha256;

/// How every scoped token begins; anything else is compared with the
/// operator token.
pub const SCOPED_PREFIX: &str = "tether1.";

/// The environment variable that names the token file (server and clients).
pub const TOKEN_FILE_ENV: &str = "TETHER_TOKEN_FILE";

/// Longest scoped token accepted, so a huge header costs nothing to reject.
const MAX_SCOPED_LEN: usize = 1024;

type HmacSha256 = Hmac<Sha256>;

/// Rights a scoped token can carry. The operator has all of them and more
/// (spawn, list, mint).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Rights {
    /// Attach (also `screen=1`), output and its events, screen, status, wait.
    #[serde(default)]
    pub read: bool,
    /// stdin, stdin close, resize, signal.
    #[serde(default)]
    pub write: bool,
    /// kill, DELETE (with or without `force`).
    #[serde(default)]
    pub kill: bool,
}

impl Rights {
    /// Parses `["read", "write", "kill"]`; read is implied by any right.
    pub fn from_names(names: &[String]) -> Result<Rights, String> {
        let mut rights = Rights {
            read: true,
            ..Rights::default()
        };
        for name in names {
            match name.as_str() {
                "read" => {}
                "write" => rights.write = true,
                "kill" => rights.kill = true,
                other => {
                    return Err(format!(
                        "unknown right {other:?} (rights are read, write, kill)"
                    ))
                }
            }
        }
        Ok(rights)
    }

    /// The rights' names, for answers and audit lines.
    pub fn names(&self) -> Vec<&'static str> {
        let mut names = Vec::new();
        if self.read {
            names.push("read");
        }
        if self.write {
            names.push("write");
        }
        if self.kill {
            names.push("kill");
        }
        names
    }
}

/// What a scoped token says, signed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Claims {
    /// Token id: names the token in audit lines (never the secret).
    #[serde(rename = "t")]
    pub token_id: String,
    /// The one process it reaches.
    #[serde(rename = "p")]
    pub process: String,
    /// That process's start instant (ns since the epoch).
    #[serde(rename = "i")]
    pub instance: u64,
    #[serde(rename = "r")]
    pub rights: Rights,
    /// Expiry, ms since the epoch.
    #[serde(rename = "e")]
    pub expires_ms: u64,
}

/// Why a scoped token is not accepted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Invalid {
    /// Not a token this server signed (or altered).
    BadToken,
    /// Past its expiry.
    Expired,
}

/// The server's signing key: random, drawn at start, never written out.
#[derive(Clone)]
pub struct SigningKey([u8; 32]);

impl Default for SigningKey {
    fn default() -> Self {
        SigningKey(random_bytes())
    }
}

impl fmt::Debug for SigningKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("SigningKey(..)")
    }
}

impl SigningKey {
    /// The key's bytes, for a handover to carry (issue 43): every scoped
    /// token keeps working in the new binary.
    pub fn to_bytes(&self) -> [u8; 32] {
        self.0
    }

    /// The key a handover carried.
    pub fn from_bytes(bytes: [u8; 32]) -> SigningKey {
        SigningKey(bytes)
    }

    fn mac(&self, claims_b64: &str) -> HmacSha256 {
        // A key of any length is accepted by HMAC.
        let mut mac = <HmacSha256 as Mac>::new_from_slice(&self.0)
            .unwrap_or_else(|_| unreachable!("HMAC takes keys of any length"));
        mac.update(b"tether.scoped.v1\n");
        mac.update(claims_b64.as_bytes());
        mac
    }

    /// Signs the claims into a token.
    pub fn sign(&self, claims: &Claims) -> String {
        let json = serde_json::to_vec(claims).unwrap_or_default();
        let body = URL_SAFE_NO_PAD.encode(json);
        let tag = self.mac(&body).finalize().into_bytes();
        format!("{SCOPED_PREFIX}{body}.{}", URL_SAFE_NO_PAD.encode(tag))
    }

    /// Verifies a `tether1.` token: the signature (in constant time), then
    /// the expiry against `now_ms`.
    pub fn verify(&self, token: &str, now_ms: u64) -> Result<Claims, Invalid> {
        if token.len() > MAX_SCOPED_LEN {
            return Err(Invalid::BadToken);
        }
        let rest = token.strip_prefix(SCOPED_PREFIX).ok_or(Invalid::BadToken)?;
        let (body, tag) = rest.split_once('.').ok_or(Invalid::BadToken)?;
        let tag = URL_SAFE_NO_PAD.decode(tag).map_err(|_| Invalid::BadToken)?;
        self.mac(body)
            .verify_slice(&tag)
            .map_err(|_| Invalid::BadToken)?;
        let json = URL_SAFE_NO_PAD
            .decode(body)
            .map_err(|_| Invalid::BadToken)?;
        let claims: Claims = serde_json::from_slice(&json).map_err(|_| Invalid::BadToken)?;
        if now_ms >= claims.expires_ms {
            return Err(Invalid::Expired);
        }
        Ok(claims)
    }
}

/// 32 bytes from the OS's random source (keys drawn at start: the signing
/// key, the idempotency fingerprints' key).
pub fn random_bytes() -> [u8; 32] {
    let mut bytes = [0u8; 32];
    if getrandom::fill(&mut bytes).is_err() {
        // No randomness is no safe way to run: refuse rather than sign
        // with a guessable key.
        panic!("the OS random source (getrandom) is unavailable");
    }
    bytes
}

/// A new operator token: 32 random bytes, base64url (43 characters).
pub fn generate_operator_token() -> String {
    URL_SAFE_NO_PAD.encode(random_bytes())
}

/// A new token id: 8 random bytes in hex.
pub fn new_token_id() -> String {
    random_bytes()[..8]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// Now, in ms since the epoch.
pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// A process's start instant as it goes into claims.
pub fn instance_of(started_at: SystemTime) -> u64 {
    started_at
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

/// The one token file a user named (`$TETHER_TOKEN_FILE`): a generated
/// token is written there, and clients read it from there, instead of the
/// per-server runtime entries of [`runtime_dir`].
pub fn named_token_path() -> Option<PathBuf> {
    std::env::var_os(TOKEN_FILE_ENV)
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
}

/// Where each server with a generated token writes its runtime entry (one
/// file per server with its URL and token, as Jupyter's runtime files):
/// `$XDG_RUNTIME_DIR/tether/servers` (a per-user tmpfs directory, gone at
/// logout), else `$HOME/.local/state/tether/servers`. Clients read the
/// entry of the server URL they talk to.
pub fn runtime_dir() -> Option<PathBuf> {
    let env = |name: &str| std::env::var_os(name).filter(|v| !v.is_empty());
    if let Some(dir) = env("XDG_RUNTIME_DIR") {
        return Some(PathBuf::from(dir).join("tether").join("servers"));
    }
    env("HOME").map(|home| PathBuf::from(home).join(".local/state/tether/servers"))
}

/// One server's runtime entry, `tetherd-PID-HEX.json` in [`runtime_dir`]:
/// `{"url", "token", "pid"}`, mode 0600 in a 0700 directory. The server
/// holds a `flock` on it for its life and removes it when it exits; the
/// entry of a server killed before it could is removed by the next server
/// that can take its lock (never by pid: a pid means nothing across pid
/// namespaces). Only its own server removes a live entry.
#[derive(Debug)]
pub struct RuntimeEntry {
    path: PathBuf,
    _lock: nix::fcntl::Flock<std::fs::File>,
}

impl RuntimeEntry {
    /// What a handover carries: its path and a second descriptor of its
    /// locked file (the lock belongs to the open file, which the exec
    /// keeps).
    pub fn carry(&self) -> std::io::Result<(PathBuf, std::os::fd::OwnedFd)> {
        use std::os::fd::AsFd;
        Ok((self.path.clone(), self._lock.as_fd().try_clone_to_owned()?))
    }

    /// The entry a handover carried: the same file, the same lock.
    pub fn adopt(path: PathBuf, fd: std::os::fd::OwnedFd) -> std::io::Result<RuntimeEntry> {
        let lock = nix::fcntl::Flock::lock(
            std::fs::File::from(fd),
            nix::fcntl::FlockArg::LockExclusiveNonblock,
        )
        .map_err(|(_, errno)| std::io::Error::from(errno))?;
        Ok(RuntimeEntry { path, _lock: lock })
    }

    /// Writes the entry of the server at `url` with `token` into `dir`
    /// (created 0700), after removing the entries of servers that are gone.
    pub fn write(dir: &Path, url: &str, token: &str) -> std::io::Result<RuntimeEntry> {
        use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)?;
        trusted_runtime_dir(dir)?;
        remove_stale_entries(dir);
        let stem = format!("tetherd-{}-{}", std::process::id(), new_token_id());
        let temporary = dir.join(format!(".{stem}.tmp"));
        let path = dir.join(format!("{stem}.json"));
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(&temporary)?;
        file.set_permissions(std::fs::Permissions::from_mode(0o600))?;
        let body = serde_json::json!({"url": url, "token": token, "pid": std::process::id()});
        let written = file
            .write_all(format!("{body}\n").as_bytes())
            .and_then(|()| file.sync_all());
        // Locked before it has its name: a cleanup never sees it unlocked.
        let locked = written.and_then(|()| {
            nix::fcntl::Flock::lock(file, nix::fcntl::FlockArg::LockExclusiveNonblock)
                .map_err(|(_, e)| std::io::Error::from(e))
        });
        let locked = locked.and_then(|locked| {
            std::fs::rename(&temporary, &path)?;
            Ok(locked)
        });
        match locked {
            Ok(lock) => Ok(RuntimeEntry { path, _lock: lock }),
            Err(e) => {
                let _ = std::fs::remove_file(&temporary);
                Err(e)
            }
        }
    }

    /// Where it is.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for RuntimeEntry {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// An error unless every folder from the runtime root down to `dir` is a
/// real folder (not a link), owned by this user (the root folder may be
/// root's), and not writable by others unless sticky (`/tmp`): another
/// user who can write there could read the entry, token and all, or swap
/// it (`su` keeps the first user's `$XDG_RUNTIME_DIR`). The clients apply
/// the same rule before they read an entry (`client/src/local_token.rs`).
fn trusted_runtime_dir(dir: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::MetadataExt;
    let me = nix::unistd::geteuid().as_raw();
    let untrusted = |why: String| std::io::Error::new(std::io::ErrorKind::PermissionDenied, why);
    // `servers`, `tether`, and the root they are made in.
    let folders: Vec<&Path> = dir.ancestors().take(3).collect();
    for (depth, folder) in folders.iter().enumerate() {
        let meta = std::fs::symlink_metadata(folder)?;
        if !meta.file_type().is_dir() {
            return Err(untrusted(format!(
                "{} is not a folder (a link?)",
                folder.display()
            )));
        }
        let is_root_folder = depth == folders.len() - 1;
        if meta.uid() != me && !(is_root_folder && meta.uid() == 0) {
            return Err(untrusted(format!(
                "{} belongs to uid {}, not to this user (uid {me})",
                folder.display(),
                meta.uid()
            )));
        }
        if meta.mode() & 0o022 != 0 && meta.mode() & 0o1000 == 0 {
            return Err(untrusted(format!(
                "others may write to {}",
                folder.display()
            )));
        }
    }
    Ok(())
}

/// Removes the entries (`tetherd-*.json`) in `dir` whose lock can be taken:
/// their servers are gone.
fn remove_stale_entries(dir: &Path) {
    use std::os::unix::fs::OpenOptionsExt;
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        if !(name.starts_with("tetherd-") && name.ends_with(".json")) {
            continue;
        }
        let Ok(file) = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC)
            .open(entry.path())
        else {
            continue;
        };
        if let Ok(_held) =
            nix::fcntl::Flock::lock(file, nix::fcntl::FlockArg::LockExclusiveNonblock)
        {
            let _ = std::fs::remove_file(entry.path());
        }
    }
}

/// Writes the token to `path`, readable and writable only by this user:
/// the directory is created with mode 0700 if missing, the file is written
/// under a temporary name created with mode 0600 and renamed into place,
/// so no other user ever sees a moment where it is readable.
pub fn write_token_file(path: &Path, token: &str) -> std::io::Result<()> {
    use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
    let dir = path.parent().unwrap_or(Path::new("."));
    if !dir.as_os_str().is_empty() && !dir.exists() {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)?;
    }
    let temporary = path.with_extension(format!("tmp{}", std::process::id()));
    let _ = std::fs::remove_file(&temporary);
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&temporary)?;
    // The umask cannot widen 0600, but a pre-set ACL default could: say it
    // again.
    file.set_permissions(std::fs::Permissions::from_mode(0o600))?;
    file.write_all(format!("{token}\n").as_bytes())?;
    file.sync_all()?;
    std::fs::rename(&temporary, path)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn claims(expires_ms: u64) -> Claims {
        Claims {
            token_id: "abc".into(),
            process: "p1".into(),
            instance: 7,
            rights: Rights {
                read: true,
                write: false,
                kill: false,
            },
            expires_ms,
        }
    }

    #[test]
    fn a_signed_token_verifies_until_it_expires() {
        let key = SigningKey::default();
        let token = key.sign(&claims(1000));
        assert_eq!(key.verify(&token, 999), Ok(claims(1000)));
        assert_eq!(key.verify(&token, 1000), Err(Invalid::Expired));
    }

    #[test]
    fn another_key_or_an_altered_token_is_refused() {
        let key = SigningKey::default();
        let token = key.sign(&claims(1000));
        assert_eq!(
            SigningKey::default().verify(&token, 0),
            Err(Invalid::BadToken)
        );
        // Claims of a wider token with the old signature.
        let wider = SigningKey::default().sign(&Claims {
            rights: Rights {
                read: true,
                write: true,
                kill: true,
            },
            ..claims(1000)
        });
        let body = wider
            .rsplit_once('.')
            .map(|(b, _)| b.to_string())
            .unwrap_or_default();
        let tag = token
            .rsplit_once('.')
            .map(|(_, t)| t.to_string())
            .unwrap_or_default();
        assert_eq!(
            key.verify(&format!("{body}.{tag}"), 0),
            Err(Invalid::BadToken)
        );
        assert_eq!(key.verify("tether1.garbage", 0), Err(Invalid::BadToken));
        assert_eq!(key.verify("operator-token", 0), Err(Invalid::BadToken));
    }

    #[test]
    fn rights_parse_with_read_implied() {
        let rights = Rights::from_names(&["write".into()]).unwrap_or_default();
        assert_eq!(rights.names(), ["read", "write"]);
        assert!(Rights::from_names(&["root".into()]).is_err());
    }
}
