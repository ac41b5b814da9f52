//! A process of an earlier run of the server, read back from `--data-dir`
//! (see [`crate::datadir`]): exited, with its retained output on disk and
//! nothing else. It is never signalled (its pid may belong to someone else
//! by now): signal and resize answer `not_running`, and a kill is a no-op.

use std::sync::Arc;
use std::time::SystemTime;

use tokio::sync::{mpsc, watch};

use super::reservation::Reservation;
use super::stdin::StdinQueue;
use super::supervise::{Control, Exited};
use super::Process;
use crate::config::Config;
use crate::contain::Contained;
use crate::datadir::Recovered;
use crate::metrics::Metrics;
use crate::retained::RetainedOutput;
use crate::slots::Slots;

impl Process {
    /// The process object and output of an earlier run, as an exited
    /// process of this one.
    /// `reservation` is its share of the disk budget (its logs).
    pub fn recovered(
        recovered: Recovered,
        reservation: Reservation,
        config: &Config,
        metrics: Arc<Metrics>,
    ) -> Arc<Process> {
        let Recovered {
            info,
            logs,
            record,
            times,
            ..
        } = recovered;
        let time = |s: &Option<String>| {
            s.as_deref()
                .and_then(|s| humantime::parse_rfc3339(s).ok())
                .unwrap_or_else(SystemTime::now)
        };
        let started_at = time(&Some(info.started_at.clone()));
        let finished_at = time(&info.finished_at);
        let output = RetainedOutput::with_logs(logs, info.overflow, Some(record), None);
        if let Some(times) = times {
            output.restore_times(times);
        }
        // Kill requests are answered (there is nothing to kill), so that
        // nothing falls back to signalling what is left of an old session.
        let (control, mut requests) = mpsc::channel(1);
        tokio::spawn(async move {
            while let Some(request) = requests.recv().await {
                match request {
                    Control::Kill(_, _, reply) => {
                        let _ = reply.send(());
                    }
                    // Dropping the reply reports `not_running`.
                    Control::Signal(..) | Control::SetUnattached(..) | Control::HandOver(..) => {}
                }
            }
        });
        let (_, exit) = watch::channel(Some(Exited {
            info: info.clone(),
            finished_at,
        }));
        Arc::new(Process {
            id: info.id,
            // Kept across a restart (checked and unique: the table's
            // recovery), so a name never points at two processes.
            name: info.name.clone(),
            pid: info.pid,
            argv: info.argv,
            tty: info.tty,
            started_at,
            reservation: Arc::new(reservation),
            attachment_slots: Slots::new(config.max_attachments_per_process),
            metrics,
            output: Arc::new(output),
            exit,
            control,
            stdin: StdinQueue::none(),
            pty: None,
            kill_grace: config.kill_grace(),
            kubernetes: info.kubernetes,
            inputs: Default::default(),
            // Not kept across a restart: nothing runs beside it.
            identity: None,
            start_dir: None,
            recovered: true,
            // No cell and no session (0 names none): nothing of the old run
            // is ever signalled, and kill requests are answered above.
            contained: {
                let contained = Contained::new(None, None, Default::default(), 0, info.tty);
                contained.set_reaped();
                Arc::new(contained)
            },
        })
    }
}
