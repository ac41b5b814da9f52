//! `run(transport, config, shutdown)`: serve on a bound listener until the
//! shutdown future completes, then shut down within a deadline. Tests bind
//! port 0 and never wait for a port.
//!
//! Shutdown: first the drain (at most `--drain-grace-ms`: spawns refused,
//! `/healthz` 503, everything else served), then, all of it within
//! `--shutdown-timeout-ms`:
//! 1. stop accepting; HTTP connections waiting for a request close, those
//!    with one in flight finish it ([`Phase::Draining`]);
//! 2. kill every process (reason `killed`), which answers pending waits and
//!    lets every attachment, slow or fast, send its remaining output, the
//!    exit frame and a Close;
//! 3. wait until every connection, attachments included, has closed;
//! 4. at the deadline, close what is still open ([`Phase::Closing`]) and
//!    return: the caller exits, which closes any WebSocket left.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;

use crate::datadir::DataDir;
use crate::listen::{self, Connections, Phase, Settings};
use crate::options::ServerOptions;
use crate::table::ProcessTable;
use crate::transport::Transport;

/// Serves until `shutdown` completes, then shuts down within the bound.
pub async fn run(
    transport: Transport,
    config: ServerOptions,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    Ready::prepare(transport, config)?
        .serve(shutdown, crate::handover::Lifetime::default())
        .await
}

/// How long a handover lets connections finish (attachments their Close,
/// requests in flight their answer) before it carries the state.
const HANDOVER_GRACE: Duration = Duration::from_secs(3);

/// A server that has passed every check at start (containment, limits,
/// the data directory, the processes it recovers) and is about to accept:
/// what `tetherd` announces as "listening", so that a supervisor waiting
/// for that line never sees it from a server that then exits.
pub struct Ready {
    transport: Transport,
    config: Arc<ServerOptions>,
    containment: &'static crate::contain::Containment,
    data_dir: Option<Arc<DataDir>>,
    table: Arc<ProcessTable>,
}

impl Ready {
    /// Every check and set-up step that can refuse a start, in order.
    pub fn prepare(transport: Transport, config: ServerOptions) -> std::io::Result<Ready> {
        let config = Arc::new(config);
        let containment = crate::contain::install(config.containment)?;
        // Default limits the server cannot apply would leave every process
        // unlimited while the operator believes otherwise: refuse to start.
        config.limits.check().map_err(std::io::Error::other)?;
        // What a request that gives no limits gets (the defaults, else the
        // maxima): the server must be able to apply it.
        let floor = config.limits.resolve(None).map_err(std::io::Error::other)?;
        if let Some(why) = containment.limits_refusal(&floor) {
            return Err(std::io::Error::other(format!(
                "--default-* and --max-* limits: {why}"
            )));
        }
        reap_orphans_as_init();
        let data_dir = DataDir::open(&config).map_err(std::io::Error::other)?;
        let table = ProcessTable::with_data_dir(config.clone(), data_dir.clone());
        table.recover();
        Ok(Ready {
            transport,
            config,
            containment,
            data_dir,
            table,
        })
    }

    /// The server a handover's new binary starts as (issue 43): the
    /// containment, data directory and table the old binary carried in
    /// `state`, read before anything is served. The processes run on.
    pub fn adopt(
        transport: Transport,
        config: ServerOptions,
        state: crate::handover::State,
        document: &crate::handover::DocumentReader,
        fds: &mut crate::handover::TakenFds,
    ) -> std::io::Result<Ready> {
        let config = Arc::new(config);
        let containment = crate::contain::current();
        reap_orphans_as_init();
        let data_dir = match state.data_dir {
            Some((carried, lock)) => Some(
                DataDir::adopt(&carried, fds.take(lock)?, &config)
                    .map_err(std::io::Error::other)?,
            ),
            None => None,
        };
        let table = ProcessTable::with_data_dir(config.clone(), data_dir.clone());
        table.adopt(state.table, &mut |blob| document.take(blob), &mut |fd| {
            fds.take(fd)
        })?;
        Ok(Ready {
            transport,
            config,
            containment,
            data_dir,
            table,
        })
    }

    /// Where handover requests go (SIGUSR2).
    pub fn handover_requests(&self) -> tokio::sync::mpsc::Sender<crate::table::HandoverRequest> {
        self.table.handover_requests()
    }

    /// Accepts and serves until `shutdown` completes, then shuts down
    /// within the bound; or hands over to a new binary when asked
    /// (`lifetime` is what the binary's start-up made, for it).
    pub async fn serve(
        self,
        shutdown: impl Future<Output = ()> + Send + 'static,
        lifetime: crate::handover::Lifetime,
    ) -> std::io::Result<()> {
        let Ready {
            transport,
            config,
            containment,
            data_dir,
            table,
        } = self;
        let app = crate::http::router(table.clone());
        let connections = Connections::new(table.metrics.clone());
        let (phase, phase_rx) = watch::channel(Phase::Serving);
        // Kept for a handover: the new binary accepts on this socket.
        let listener = transport.carry()?;
        let mut accept = tokio::spawn(listen::serve(
            transport,
            app,
            Settings::from_config(&config),
            connections.clone(),
            phase_rx,
        ));
        let mut requests = table.take_handover_requests();
        tokio::pin!(shutdown);
        loop {
            let request = tokio::select! {
                () = &mut shutdown => break,
                Some(request) = async { requests.as_mut()?.recv().await } => request,
            };
            let binary = match request.binary.clone().or_else(|| lifetime.binary.clone()) {
                Some(binary) => binary,
                None => {
                    refuse(
                        request,
                        "this server was not started from a binary it can name".into(),
                    );
                    continue;
                }
            };
            // What a handover cannot change is refused before anything stops.
            let generated = lifetime.generated_token.is_some();
            let next =
                crate::handover::next_args(&lifetime.args, &request.flags).and_then(|args| {
                    crate::handover::keeps_generated_token(&args, generated).map(|()| args)
                });
            let args = match next {
                Ok(args) => args,
                Err(why) => {
                    tracing::error!(why, "handover refused: serving on");
                    refuse(request, why);
                    continue;
                }
            };
            let running = table.list().iter().filter(|p| p.is_running()).count();
            let checked = match crate::handover::check_descriptors(running) {
                Ok(()) => {
                    let new_flags = !request.flags.is_empty();
                    crate::handover::preflight(&binary, &args, &lifetime.args, new_flags).await
                }
                Err(why) => Err(why),
            };
            let preflight = match checked {
                Ok(preflight) => preflight,
                Err(why) => {
                    tracing::error!(why, "handover refused: serving on");
                    refuse(request, why);
                    continue;
                }
            };
            if let Some(reply) = request.reply {
                let _ = reply.send(Ok(tether_protocol::api::UpgradeStarted {
                    binary: preflight.binary.display().to_string(),
                    version: preflight.version.clone(),
                    from_version: env!("CARGO_PKG_VERSION").to_string(),
                    pid: std::process::id(),
                    handovers: table.handovers.load(std::sync::atomic::Ordering::SeqCst),
                }));
            }
            tracing::info!(binary = %binary.display(), version = preflight.version, "handover: closing attachments, stopping capture");
            crate::transport::keep_socket_file();
            table.begin_handover().await;
            phase.send_replace(Phase::Draining);
            let _ = (&mut accept).await;
            let _ = tokio::time::timeout(HANDOVER_GRACE, connections.all_closed()).await;
            tracing::info!(
                open = connections.len(),
                "handover: connections closed or out of time"
            );
            let (fd, unix) = listener;
            let error = crate::handover::give(
                &table,
                fd,
                unix,
                data_dir.as_deref(),
                &lifetime,
                &config,
                (&binary, &args),
            )
            .await;
            // Nothing can serve now: every process was stopped for the
            // exec. Exit; the guard ends them.
            tracing::error!(%error, "handover failed, and so did executing this binary again: exiting");
            return Err(error);
        }
        table.drain(config.drain_grace()).await;
        let deadline = tokio::time::Instant::now() + config.shutdown_timeout();
        tracing::info!("shutting down: killing every process");
        phase.send_replace(Phase::Draining);
        let _ = accept.await;
        drop(listener);
        let bound = config.kill_grace() + config.drain_timeout() + Duration::from_secs(1);
        let _ = tokio::time::timeout_at(deadline, table.shutdown(bound)).await;
        // Descendants of processes that had already exited.
        let _ = tokio::task::spawn_blocking(move || containment.kill_everything()).await;
        if tokio::time::timeout_at(deadline, connections.all_closed())
            .await
            .is_err()
        {
            tracing::warn!(
                open = connections.len(),
                "shutdown deadline reached: closing the connections still open"
            );
        }
        phase.send_replace(Phase::Closing);
        // Before the table (and with it every log) is dropped: a private
        // directory goes, `--data-dir` keeps its files for the next run.
        if let Some(dir) = &data_dir {
            dir.close();
        }
        Ok(())
    }
}

/// Answers a handover request with why it was refused.
fn refuse(request: crate::table::HandoverRequest, why: String) {
    if let Some(reply) = request.reply {
        let _ = reply.send(Err(why));
    }
}

/// PID 1 of a container: orphans are reparented to us, and reaped.
fn reap_orphans_as_init() {
    if crate::contain::reaper::is_init() {
        crate::contain::reaper::enable();
        tokio::spawn(crate::contain::reaper::run());
    }
}
