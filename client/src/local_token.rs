//! The token a local tetherd generated, where it wrote it: clients on the
//! same machine use it when nobody gave them one, and only for a server on
//! this machine (a loopback address or `localhost`), so it is never sent
//! anywhere else.

use std::path::PathBuf;

/// Where tetherd writes a token it generated: `$TETHER_TOKEN_FILE`, else
/// `$XDG_RUNTIME_DIR/tether/token`, else `$HOME/.local/state/tether/token`
/// (the server's rule, in `server/src/token.rs`).
pub fn local_token_path() -> Option<PathBuf> {
    let env = |name: &str| std::env::var_os(name).filter(|v| !v.is_empty());
    if let Some(path) = env("TETHER_TOKEN_FILE") {
        return Some(PathBuf::from(path));
    }
    if let Some(dir) = env("XDG_RUNTIME_DIR") {
        return Some(PathBuf::from(dir).join("tether").join("token"));
    }
    env("HOME").map(|home| PathBuf::from(home).join(".local/state/tether/token"))
}

/// The token in [`local_token_path`], if the file exists and holds one.
pub fn local_token() -> Option<String> {
    let text = std::fs::read_to_string(local_token_path()?).ok()?;
    let token = text.lines().next()?.trim();
    (!token.is_empty()).then(|| token.to_string())
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
