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
/// set, else from the runtime entry whose URL is `base`'s server (the
/// newest, if a killed server left one for the same address). None for a
/// server that is not on this machine: a local token is never sent
/// elsewhere.
pub fn local_token_for(base: &str) -> Option<LocalToken> {
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
    let found = entries_of(&dir, base);
    Some(match found {
        Some((path, token)) => LocalToken {
            token: Some(token),
            looked: format!("the runtime entry {} for {base}", path.display()),
        },
        None => LocalToken {
            token: None,
            looked: format!("no runtime entry for {base} in {}", dir.display()),
        },
    })
}

/// The newest entry in `dir` whose URL is the same server as `base`.
fn entries_of(dir: &Path, base: &str) -> Option<(PathBuf, String)> {
    let mut best: Option<(std::time::SystemTime, PathBuf, String)> = None;
    for entry in std::fs::read_dir(dir).ok()?.flatten() {
        let path = entry.path();
        let name = entry.file_name();
        let name = name.to_string_lossy();
        if !(name.starts_with("tetherd-") && name.ends_with(".json")) {
            continue;
        }
        let Ok(meta) = entry.metadata() else { continue };
        if !meta.is_file() || meta.len() > MAX_ENTRY_BYTES {
            continue;
        }
        let Ok(text) = std::fs::read_to_string(&path) else {
            continue;
        };
        let Ok(value) = serde_json::from_str::<serde_json::Value>(&text) else {
            continue;
        };
        let (Some(url), Some(token)) = (value["url"].as_str(), value["token"].as_str()) else {
            continue;
        };
        if token.is_empty() || !same_server(url, base) {
            continue;
        }
        let modified = meta.modified().unwrap_or(std::time::UNIX_EPOCH);
        if best.as_ref().is_none_or(|(newest, ..)| modified > *newest) {
            best = Some((modified, path, token.to_string()));
        }
    }
    best.map(|(_, path, token)| (path, token))
}

fn first_line(text: &str) -> Option<String> {
    let token = text.lines().next()?.trim();
    (!token.is_empty()).then(|| token.to_string())
}

/// Scheme, host (lowercase, without brackets) and port of a base URL.
fn parts(url: &str) -> Option<(&str, String, u16)> {
    let (scheme, rest) = url.split_once("://")?;
    let authority = rest.split('/').next().unwrap_or("");
    let authority = authority.rsplit_once('@').map_or(authority, |(_, a)| a);
    let (host, port) = match authority.strip_prefix('[') {
        Some(v6) => {
            let (host, after) = v6.split_once(']')?;
            (host, after.strip_prefix(':'))
        }
        None => match authority.rsplit_once(':') {
            Some((host, port)) => (host, Some(port)),
            None => (authority, None),
        },
    };
    let default = match scheme {
        "https" => 443,
        _ => 80,
    };
    let port = match port {
        Some(port) => port.parse().ok()?,
        None => default,
    };
    Some((scheme, host.to_ascii_lowercase(), port))
}

/// True when `entry` (a server's own URL) and `base` (what the client was
/// given) name the same local server: same scheme and port, and the same
/// host or both loopback (`localhost` and `127.0.0.1` are one machine).
fn same_server(entry: &str, base: &str) -> bool {
    if entry.trim_end_matches('/') == base.trim_end_matches('/') {
        return true;
    }
    match (parts(entry), parts(base)) {
        (Some((s1, h1, p1)), Some((s2, h2, p2))) => {
            s1 == s2 && p1 == p2 && (h1 == h2 || (is_local_url(entry) && is_local_url(base)))
        }
        _ => false,
    }
}

/// True for a base URL whose host is a loopback address or `localhost`.
pub fn is_local_url(base: &str) -> bool {
    let rest = base
        .strip_prefix("http://")
        .or_else(|| base.strip_prefix("https://"))
        .unwrap_or(base);
    let authority = rest.split('/').next().unwrap_or("");
    let authority = authority.rsplit_once('@').map_or(authority, |(_, a)| a);
    let host = match authority.strip_prefix('[') {
        Some(v6) => v6.split_once(']').map_or("", |(h, _)| h),
        None => authority.split(':').next().unwrap_or(""),
    };
    let host = host.to_ascii_lowercase();
    host == "localhost"
        || host.ends_with(".localhost")
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_entry_is_for_the_same_scheme_port_and_loopback_host() {
        assert!(same_server(
            "http://127.0.0.1:7420",
            "http://localhost:7420/"
        ));
        assert!(same_server("http://127.0.0.1:7420", "http://[::1]:7420"));
        assert!(!same_server(
            "http://127.0.0.1:7420",
            "http://127.0.0.1:7421"
        ));
        assert!(!same_server("http://127.0.0.1:443", "https://127.0.0.1"));
        assert!(same_server("https://127.0.0.1:443", "https://localhost"));
    }

    #[test]
    fn only_loopback_urls_are_local() {
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
        ] {
            assert!(!is_local_url(url), "{url}");
        }
    }
}
