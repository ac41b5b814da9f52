//! `run(listener, config, shutdown)`: serve on a bound listener until the
//! shutdown future completes, then kill every process (reason `killed`),
//! let attachments receive their exit frames, answer pending waits, and
//! return. Tests bind port 0 and never wait for a port.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;

use crate::config::Config;
use crate::table::ProcessTable;

/// Serves until `shutdown` completes, then shuts down gracefully.
pub async fn run(
    listener: TcpListener,
    config: Config,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let config = Arc::new(config);
    let table = ProcessTable::new(config.clone());
    let app = crate::http::router(table.clone());
    let bound = config.kill_grace() + config.drain_timeout() + Duration::from_secs(1);
    let graceful = {
        let table = table.clone();
        async move {
            shutdown.await;
            tracing::info!("shutting down: killing every process");
            table.shutdown(bound).await;
        }
    };
    // Attachments finish on their own once their process exited: the exit
    // frame, then a close handshake bounded by --close-timeout-ms, and any
    // stuck socket by --send-timeout-ms.
    axum::serve(listener, app)
        .with_graceful_shutdown(graceful)
        .await
}
