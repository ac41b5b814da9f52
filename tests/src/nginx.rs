//! Debian's nginx in the foreground, for the tests that put a real proxy in
//! front of tetherd: a private prefix directory, a free loopback port, and a
//! bounded wait until it accepts. Killed on drop.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

/// A running nginx; killed on drop.
pub struct Nginx {
    child: Child,
    dir: PathBuf,
    /// The port of its `listen` directive.
    pub port: u16,
    /// `http://127.0.0.1:PORT`
    pub base: String,
}

impl Nginx {
    /// Starts nginx with `site` inside its `http` block. `site` is given the
    /// prefix directory and the port to listen on (`listen 127.0.0.1:PORT`),
    /// and returns the server blocks, upstreams and maps. Waits, bounded,
    /// until nginx accepts connections.
    pub async fn start(site: impl FnOnce(&Path, u16) -> String) -> Nginx {
        let dir =
            std::env::temp_dir().join(format!("tether-nginx-{}-{}", std::process::id(), unique()));
        std::fs::create_dir_all(&dir).expect("nginx prefix directory");
        let port = crate::free_port();
        let d = dir.display();
        let conf = format!(
            "daemon off;\nmaster_process off;\nworker_processes 1;\npid {d}/nginx.pid;\n\
             error_log {d}/error.log warn;\nevents {{ worker_connections 1024; }}\n\
             http {{\n    access_log off;\n    client_body_temp_path {d}/client_body;\n\
             proxy_temp_path {d}/proxy;\n    fastcgi_temp_path {d}/fastcgi;\n\
             uwsgi_temp_path {d}/uwsgi;\n    scgi_temp_path {d}/scgi;\n{}\n}}\n",
            site(&dir, port)
        );
        let path = dir.join("nginx.conf");
        std::fs::write(&path, conf).expect("write nginx.conf");
        let child = Command::new(binary())
            .arg("-p")
            .arg(&dir)
            .arg("-e")
            .arg(dir.join("error.log"))
            .arg("-c")
            .arg(&path)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start nginx (apt-get install nginx)");
        let mut nginx = Nginx {
            child,
            dir,
            port,
            base: format!("http://127.0.0.1:{port}"),
        };
        nginx.wait_accepting().await;
        nginx
    }

    /// Bounded retry of connect: the event is nginx accepting (or exiting).
    async fn wait_accepting(&mut self) {
        let port = self.port;
        let child = &mut self.child;
        let state = crate::settle_async(
            || {
                let exited = child.try_wait().expect("try_wait nginx");
                async move {
                    match exited {
                        Some(status) => Err(status),
                        None => Ok(tokio::net::TcpStream::connect(("127.0.0.1", port))
                            .await
                            .is_ok()),
                    }
                }
            },
            |state| !matches!(state, Ok(false)),
        )
        .await;
        match state {
            Ok(true) => {}
            Ok(false) => panic!("nginx never accepted: {}", self.error_log()),
            Err(status) => panic!("nginx exited with {status}: {}", self.error_log()),
        }
    }

    /// Its prefix directory (removed on drop): where a site keeps its files.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// What nginx logged (errors and warnings).
    pub fn error_log(&self) -> String {
        std::fs::read_to_string(self.dir.join("error.log")).unwrap_or_default()
    }
}

impl Drop for Nginx {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Debian installs nginx in /usr/sbin, which is not on every PATH.
pub fn binary() -> &'static str {
    if Path::new("/usr/sbin/nginx").exists() {
        "/usr/sbin/nginx"
    } else {
        "nginx"
    }
}

fn unique() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    NEXT.fetch_add(1, Ordering::Relaxed)
}
