//! The token a local tetherd generated, where it wrote it: clients on the
//! same machine use it when nobody gave them one, and only for a server on
//! this machine (a loopback address or `localhost`), so it is never sent
//! anywhere else. Each server writes its own runtime entry (its URL and
//! token), so a client finds the token of the server it talks to, however
//! many run.

use std::path::{Path, PathBuf};

/// Largest runtime entry read (a URL and a token).
const MAX_ENTRY_BYTES: u64 = 16 << 10;

/// The one token file a user named (`$TETHER_TOKEN_FILE`): read instead of
/// the runtime entries (the server writes a generated token there too).
pub fn local_token_path() -> Option<PathBuf> {
    std::env::var_os("TETHER_TOKEN_FILE")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
}

/// Where each local tetherd with a generated token writes its runtime
/// entry (`tetherd-PID-HEX.json`: its URL and token):
/// `$XDG_RUNTIME_DIR/tether/servers`, else
/// `$HOME/.local/state/tether/servers` (the server's rule, in
/// `server/src/token.rs`).
pub fn runtime_dir() -> Option<PathBuf> {
    let env = |name: &str| std::env::var_os(name).filter(|v| !v.is_empty());
    if let Some(dir) = env("XDG_RUNTIME_DIR") {
        return Some(PathBuf::from(dir).join("tether").join("servers"));
    }
    env("HOME").map(|home| PathBuf::from(home).join(".local/state/tether/servers"))
}

/// A token found for a server, and where it was looked for (said with a
/// 401, so the user knows which file was guessed from).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LocalToken {
    /// The token, if one was found.
    pub token: Option<String>,
    /// Where it came from, or where it was looked for in vain.
    pub looked: String,
}

/// The token of the local server at `base`: from `$TETHER_TOKEN_FILE` if
/// set, else from the runtime entry whose URL names exactly `base`'s
/// origin (the newest, if two do). None for a server that is not on this
/// machine: a local token is never sent elsewhere. `base` is parsed by the
/// URL parser that makes the requests, so what is judged local is what is
/// reached.
pub fn local_token_for(base: &str) -> Option<LocalToken> {
    let base_origin = origin(base)?;
    if !is_local_url(base) {
        return None;
    }
    if let Some(path) = local_token_path() {
        let token = std::fs::read_to_string(&path)
            .ok()
            .and_then(|text| first_line(&text));
        return Some(LocalToken {
            token,
            looked: format!("the token file {} ($TETHER_TOKEN_FILE)", path.display()),
        });
    }
    let Some(dir) = runtime_dir() else {
        return Some(LocalToken {
            token: None,
            looked: "nowhere (no $XDG_RUNTIME_DIR or $HOME)".into(),
        });
    };
    // A folder that is not there holds no entry; one that is must be trusted.
    let exists = std::fs::symlink_metadata(&dir).is_ok();
    if let Some(why) = exists.then(|| trusted_runtime_dir(&dir).err()).flatten() {
        return Some(LocalToken {
            token: None,
            looked: format!("no runtime entry: {} is not trusted ({why})", dir.display()),
        });
    }
    let found = entries_of(&dir, &base_origin);
    Some(match found {
        Some((path, token)) => LocalToken {
            token: Some(token),
            looked: format!("the runtime entry {} for {base}", path.display()),
        },
        None => LocalToken {
            token: None,
            looked: format!(
                "no runtime entry for {base} in {} (an entry is used only for exactly its own URL's scheme, host and port, while its server runs)",
                dir.display()
            ),
        },
    })
}

/// A URL's origin as the request is made to it: scheme, host as the URL
/// parser serialises it, and port (the scheme's default when none).
pub(crate) fn origin(url: &str) -> Option<(String, String, u16)> {
    let url = reqwest::Url::parse(url).ok()?;
    let host = url.host_str()?.to_string();
    let port = url.port_or_known_default()?;
    Some((url.scheme().to_string(), host, port))
}

/// Why `dir` (the runtime entries' folder) cannot be trusted, if it
/// cannot: every folder from the runtime root down to it must be a real
/// folder (not a link), owned by this user (the root folder may be
/// root's), and not writable by others, unless sticky (`/tmp`). Another
/// user who can write there could plant an entry, or read one.
fn trusted_runtime_dir(dir: &Path) -> Result<(), String> {
    use std::os::unix::fs::MetadataExt;
    let me = nix::unistd::geteuid().as_raw();
    // `servers`, `tether`, and the root they are made in.
    let folders: Vec<&Path> = dir.ancestors().take(3).collect();
    for (depth, folder) in folders.iter().enumerate() {
        let meta =
            std::fs::symlink_metadata(folder).map_err(|e| format!("{}: {e}", folder.display()))?;
        if !meta.file_type().is_dir() {
            return Err(format!("{} is not a folder", folder.display()));
        }
        let is_root_folder = depth == folders.len() - 1;
        if meta.uid() != me && !(is_root_folder && meta.uid() == 0) {
            return Err(format!(
                "{} belongs to uid {}",
                folder.display(),
                meta.uid()
            ));
        }
        let sticky = meta.mode() & 0o1000 != 0;
        if meta.mode() & 0o022 != 0 && !sticky {
            return Err(format!("others may write to {}", folder.display()));
        }
    }
    Ok(())
}

/// The newest entry in `dir` for exactly `origin` whose server still runs
/// (it holds a lock on its entry for its life), and that only this user
/// can have written.
fn entries_of(dir: &Path, origin_wanted: &(String, String, u16)) -> Option<(PathBuf, String)> {
    use std::io::Read;
    use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
    let me = nix::unistd::geteuid().as_raw();
    let mut best: Option<(std::time::SystemTime, PathBuf, String)> = None;
    for entry in std::fs::read_dir(dir).ok()?.flatten() {
        let path = entry.path();
        let name = entry.file_name();
        let name = name.to_string_lossy();
        if !(name.starts_with("tetherd-") && name.ends_with(".json")) {
            continue;
        }
        let Ok(mut file) = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(nix::libc::O_NOFOLLOW | nix::libc::O_NONBLOCK | nix::libc::O_CLOEXEC)
            .open(&path)
        else {
            continue;
        };
        let Ok(meta) = file.metadata() else { continue };
        if !meta.is_file()
            || meta.len() > MAX_ENTRY_BYTES
            || meta.uid() != me
            || meta.mode() & 0o022 != 0
        {
            continue;
        }
        let mut text = String::new();
        if (&mut file)
            .take(MAX_ENTRY_BYTES)
            .read_to_string(&mut text)
            .is_err()
        {
            continue;
        }
        let Ok(value) = serde_json::from_str::<serde_json::Value>(&text) else {
            continue;
        };
        let (Some(url), Some(token)) = (value["url"].as_str(), value["token"].as_str()) else {
            continue;
        };
        if token.is_empty() || origin(url).as_ref() != Some(origin_wanted) {
            continue;
        }
        if !server_holds(file) {
            continue;
        }
        let modified = meta.modified().unwrap_or(std::time::UNIX_EPOCH);
        if best.as_ref().is_none_or(|(newest, ..)| modified > *newest) {
            best = Some((modified, path, token.to_string()));
        }
    }
    best.map(|(_, path, token)| (path, token))
}

/// True while the entry's server runs: it holds an exclusive `flock` on
/// its entry for its whole life, so a shared lock cannot be had (a pid
/// would mean nothing across pid namespaces).
fn server_holds(file: std::fs::File) -> bool {
    use nix::fcntl::{Flock, FlockArg};
    match Flock::lock(file, FlockArg::LockSharedNonblock) {
        // Nobody holds it: the server is gone (the lock goes with `_free`).
        Ok(_free) => false,
        Err((_, errno)) => errno == nix::errno::Errno::EWOULDBLOCK,
    }
}

fn first_line(text: &str) -> Option<String> {
    let token = text.lines().next()?.trim();
    (!token.is_empty()).then(|| token.to_string())
}

/// True for a base URL whose host is a loopback address or `localhost`,
/// as the URL parser that makes the request reads it.
pub fn is_local_url(base: &str) -> bool {
    let Ok(url) = reqwest::Url::parse(base) else {
        return false;
    };
    let Some(host) = url.host_str() else {
        return false;
    };
    let host = host.trim_start_matches('[').trim_end_matches(']');
    match host.parse::<std::net::IpAddr>() {
        Ok(ip) => ip.is_loopback(),
        Err(_) => {
            let name = host.to_ascii_lowercase();
            name == "localhost" || name.ends_with(".localhost")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_entry_is_for_exactly_one_origin() {
        let o = |u: &str| origin(u);
        assert_eq!(o("http://127.0.0.1:7420"), o("http://127.0.0.1:7420/"));
        assert_eq!(o("https://127.0.0.1:443"), o("https://127.0.0.1"));
        assert_ne!(o("http://127.0.0.1:7420"), o("http://localhost:7420"));
        assert_ne!(o("http://127.0.0.1:7420"), o("http://127.0.0.1:7421"));
        assert_ne!(o("http://127.0.0.1:443"), o("https://127.0.0.1"));
    }

    #[test]
    fn only_loopback_urls_are_local_as_the_request_parser_reads_them() {
        for url in [
            "http://127.0.0.1:7420",
            "http://localhost",
            "https://[::1]:1/x",
        ] {
            assert!(is_local_url(url), "{url}");
        }
        for url in [
            "http://10.0.0.1:7420",
            "https://example.com",
            "http://127.0.0.1.evil.example",
            "http://example.com\\@127.0.0.1:7420",
        ] {
            assert!(!is_local_url(url), "{url}");
        }
        // The old hand parser took the authority after the last `@`: these
        // reach 127.0.0.2:9, whatever follows the `#` or `?`.
        for url in [
            "http://127.0.0.2:9#@127.0.0.1:7420",
            "http://127.0.0.2:9/?@127.0.0.1:7420",
        ] {
            assert_eq!(
                origin(url),
                Some(("http".into(), "127.0.0.2".into(), 9)),
                "{url}"
            );
        }
    }
}
