//! The web terminal's files (`--web-root`, server/src/http/web.rs): a
//! compressed copy beside a file is served to a client that takes its
//! encoding, with `Content-Encoding` and `Vary: Accept-Encoding`; a copy
//! that is a link out of the root is refused as the file itself would be.

use tether_tests::*;

#[tokio::test]
async fn a_compressed_copy_is_served_to_a_client_that_takes_its_encoding() {
    let root = fresh_dir();
    std::fs::create_dir_all(&root).unwrap();
    // Told apart by their bytes: the server picks a file, it does not
    // compress (the web demo's build writes real copies).
    std::fs::write(root.join("app.js"), "plain").unwrap();
    std::fs::write(root.join("app.js.br"), "brotli copy").unwrap();
    std::fs::write(root.join("app.js.gz"), "gzip copy").unwrap();
    std::fs::write(root.join("only.css"), "no copies").unwrap();
    std::fs::write(root.join("out.js"), "inside").unwrap();
    std::os::unix::fs::symlink("/etc/passwd", root.join("out.js.gz")).unwrap();
    let server = TestServer::start_with(&["--web-root", root.to_str().unwrap()]);
    let get = |path: &str, accept: &str| {
        let request = server
            .http
            .get(server.url(path))
            .header("accept-encoding", accept);
        async move {
            let response = request.send().await.unwrap();
            let header = |name: &str| {
                response
                    .headers()
                    .get(name)
                    .map(|v| v.to_str().unwrap().to_string())
            };
            let (encoding, vary) = (header("content-encoding"), header("vary"));
            let status = response.status().as_u16();
            let body = response.text().await.unwrap();
            (status, encoding, vary, body)
        }
    };
    let vary = Some("accept-encoding".to_string());
    let encoded = |name: &str| Some(name.to_string());
    assert_eq!(
        get("/app.js", "gzip, deflate, br").await,
        (200, encoded("br"), vary.clone(), "brotli copy".into())
    );
    assert_eq!(
        get("/app.js", "gzip").await,
        (200, encoded("gzip"), vary.clone(), "gzip copy".into())
    );
    assert_eq!(
        get("/app.js", "identity").await,
        (200, None, vary.clone(), "plain".into())
    );
    assert_eq!(
        get("/only.css", "br, gzip").await,
        (200, None, vary.clone(), "no copies".into())
    );
    let (status, _, _, body) = get("/out.js", "gzip").await;
    assert_eq!(status, 404, "{body}");
    assert!(!body.contains("root:"), "{body}");
    std::fs::remove_dir_all(&root).unwrap();
}
