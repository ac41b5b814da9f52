//! `run(listener, config, shutdown)`: serve on a bound listener until the
//! shutdown future completes, then kill every process (reason `killed`),
//! let attachments receive their exit frames, answer pending waits, and
//! return. Tests bind port 0 and never wait for a port.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;

use crate::config::Config;
use crate::datadir::DataDir;
use crate::table::ProcessTable;

/// Serves until `shutdown` completes, then shuts down gracefully.
pub async fn run(
    listener: TcpListener,
    config: Config,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let config = Arc::new(config);
    let containment = crate::contain::install(config.containment)?;
    if crate::contain::reaper::is_init() {
        // PID 1 of a container: orphans are reparented to us.
        crate::contain::reaper::enable();
        tokio::spawn(crate::contain::reaper::run());
    }
    let data_dir = DataDir::open(&config)?;
    let table = ProcessTable::with_data_dir(config.clone(), data_dir.clone());
    table.recover();
    let app = crate::http::router(table.clone());
    let bound = config.kill_grace() + config.drain_timeout() + Duration::from_secs(1);
    let graceful = {
        let table = table.clone();
        async move {
            shutdown.await;
            table.drain(table.config().drain_grace()).await;
            tracing::info!("shutting down: killing every process");
            table.shutdown(bound).await;
            // Descendants of processes that had already exited.
            let _ = tokio::task::spawn_blocking(|| containment.kill_everything()).await;
        }
    };
    // Attachments finish on their own once their process exited: the exit
    // frame, then a close handshake bounded by --close-timeout-ms, and any
    // stuck socket by --send-timeout-ms.
    let listener = axum::serve::ListenerExt::tap_io(listener, tune_socket);
    let served = axum::serve(listener, app)
        .with_graceful_shutdown(graceful)
        .await;
    // Before the table (and with it every log) is dropped: a private
    // directory goes, `--data-dir` keeps its files for the next run.
    if let Some(dir) = &data_dir {
        dir.close();
    }
    served
}

/// Interactive traffic must not wait for Nagle's algorithm. And the kernel
/// should hold little output that is not yet sent: what it holds cannot be
/// overtaken by another stream or evicted with a `dropped` notice, so a big
/// socket buffer would add latency to stderr behind a stdout flood.
fn tune_socket(tcp: &mut tokio::net::TcpStream) {
    let _ = tcp.set_nodelay(true);
    let lowat: libc::c_int = NOTSENT_LOWAT;
    // SAFETY: setsockopt reads `size_of::<c_int>()` bytes from a live local;
    // the fd is a connected TCP socket owned by `tcp`.
    let _ = unsafe {
        libc::setsockopt(
            std::os::fd::AsRawFd::as_raw_fd(tcp),
            libc::IPPROTO_TCP,
            libc::TCP_NOTSENT_LOWAT,
            (&lowat as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
}

/// Unsent bytes the kernel may hold per connection before the socket stops
/// being writable.
const NOTSENT_LOWAT: libc::c_int = 256 * 1024;
