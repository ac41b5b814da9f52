//! The web terminal's files at `/` (`--web-root`), served by tower-http's
//! `ServeDir` after one more check: the file a path resolves to, symlinks
//! followed, must lie inside the root, so a link such as
//! `link.txt -> /etc/passwd` is a 404 rather than a way out. Links inside
//! the root keep working. (A link swapped between the check and the open
//! could still escape: the root is the operator's directory, and whoever
//! can change links in it can change the files too.)
//!
//! Compressed copies made beside a file (`app.js.br`, `app.js.gz`: the web
//! demo's build writes them) are served instead of it to a client whose
//! `Accept-Encoding` takes them, brotli first, with `Content-Encoding`
//! saying which; every answer says `Vary: Accept-Encoding`, so a cache in
//! between keeps the copies apart. Nothing is compressed per request. A
//! copy is checked as its file is: a link out of the root is a 404.

use std::path::{Component, Path, PathBuf};

use axum::body::Body;
use axum::extract::Request;
use axum::http::header::{HeaderValue, VARY};
use axum::response::{IntoResponse, Response};
use percent_encoding::percent_decode_str;
use tower::ServiceExt;
use tower_http::services::ServeDir;

use crate::error::ApiError;

/// Static files from a directory, never from outside it.
#[derive(Clone)]
pub struct StaticFiles {
    /// The root as given (ServeDir joins request paths to it).
    root: PathBuf,
    files: ServeDir,
}

impl StaticFiles {
    pub fn new(root: &Path) -> StaticFiles {
        StaticFiles {
            root: root.to_path_buf(),
            files: ServeDir::new(root).precompressed_br().precompressed_gzip(),
        }
    }

    /// Serves a request, or 404 when its file lies outside the root.
    pub async fn serve(self, request: Request) -> Response {
        if !self.inside_root(request.uri().path()).await {
            return ApiError::NoRoute(format!("{} {}", request.method(), request.uri().path()))
                .into_response();
        }
        let mut response = match self.files.oneshot(request).await {
            Ok(response) => response.map(Body::new),
            Err(never) => match never {},
        };
        response
            .headers_mut()
            .insert(VARY, HeaderValue::from_static("accept-encoding"));
        response
    }

    /// Whether the path, resolved as ServeDir resolves it and with every
    /// symlink followed, stays inside the root. A path that does not exist
    /// passes: ServeDir answers it with a 404 of its own.
    async fn inside_root(&self, path: &str) -> bool {
        let Ok(decoded) = percent_decode_str(path.trim_start_matches('/')).decode_utf8() else {
            return true;
        };
        let mut file = self.root.clone();
        for component in Path::new(&*decoded).components() {
            match component {
                Component::Normal(part) => file.push(part),
                // ServeDir refuses these itself.
                _ => return true,
            }
        }
        if tokio::fs::metadata(&file).await.is_ok_and(|m| m.is_dir()) {
            file.push("index.html");
        }
        let Ok(root) = tokio::fs::canonicalize(&self.root).await else {
            return true;
        };
        // The file and the compressed copies that may be served for it.
        for suffix in ["", ".br", ".gz"] {
            let mut variant = file.clone().into_os_string();
            variant.push(suffix);
            if let Ok(real) = tokio::fs::canonicalize(&variant).await {
                if !real.starts_with(&root) {
                    return false;
                }
            }
        }
        true
    }
}
