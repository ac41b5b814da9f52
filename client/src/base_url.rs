//! The base URL a client makes its requests under, checked once, and
//! the path segments put after it.

use crate::error::{Error, Result};

/// The base URL requests are made under, as the URL parser that makes
/// them reads it: `http` or `https`, a host, maybe a port and a path
/// prefix; no user info, query or fragment, which would move the host the
/// client believes it talks to (`http://a#@b`) or swallow every path.
pub(crate) fn base_url_of(given: &str) -> Result<String> {
    let invalid = |why: &str| Error::InvalidArgument(format!("server URL {given:?} {why}"));
    let url =
        reqwest::Url::parse(given.trim()).map_err(|e| invalid(&format!("is not a URL: {e}")))?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(invalid("must start with http:// or https://"));
    }
    if url.host_str().is_none_or(str::is_empty) {
        return Err(invalid("has no host"));
    }
    if !url.username().is_empty() || url.password().is_some() {
        return Err(invalid(
            "may not hold a user or password (give a token with --token)",
        ));
    }
    if url.query().is_some() || url.fragment().is_some() {
        return Err(invalid("may not hold a query (`?`) or a fragment (`#`)"));
    }
    Ok(url.as_str().trim_end_matches('/').to_string())
}

/// Percent-encodes an id for use as one path segment.
pub(crate) fn path_segment(id: &str) -> String {
    let mut out = String::with_capacity(id.len());
    for b in id.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}
