//! A TCP forwarder whose connections can all be cut at once: the network
//! failure of the resume tests, between a client and a server or a proxy.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use tokio::net::{TcpListener, TcpStream};
use tokio::sync::broadcast;

/// A TCP forwarder whose connections can all be cut at once.
pub struct CuttingProxy {
    /// `http://127.0.0.1:PORT`
    pub base: String,
    cut: broadcast::Sender<()>,
    /// Connections accepted so far.
    pub accepted: Arc<AtomicUsize>,
    listener: tokio::task::JoinHandle<()>,
    /// While true, new connections are accepted but held, not forwarded.
    paused: tokio::sync::watch::Sender<bool>,
}

impl CuttingProxy {
    /// Forwards a free loopback port to `target`.
    pub async fn start(target: SocketAddr) -> CuttingProxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let (cut, _) = broadcast::channel(4);
        let accepted = Arc::new(AtomicUsize::new(0));
        let (cut_tx, count) = (cut.clone(), accepted.clone());
        let (paused, paused_rx) = tokio::sync::watch::channel(false);
        let listener = tokio::spawn(async move {
            while let Ok((mut inbound, _)) = listener.accept().await {
                count.fetch_add(1, Ordering::SeqCst);
                let mut cut_rx = cut_tx.subscribe();
                let mut paused = paused_rx.clone();
                tokio::spawn(async move {
                    if paused.wait_for(|p| !*p).await.is_err() {
                        return;
                    }
                    let Ok(mut outbound) = TcpStream::connect(target).await else {
                        return;
                    };
                    tokio::select! {
                        _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound) => {}
                        _ = cut_rx.recv() => {}
                    }
                    // Dropping both ends cuts the connection mid-stream.
                });
            }
        });
        CuttingProxy {
            base,
            cut,
            accepted,
            listener,
            paused,
        }
    }

    /// Holds new connections until [`CuttingProxy::resume`].
    pub fn pause(&self) {
        self.paused.send_replace(true);
    }

    /// Forwards connections again.
    pub fn resume(&self) {
        self.paused.send_replace(false);
    }

    /// Stops listening (new connections are refused) and cuts the rest.
    pub async fn stop(&self) {
        self.listener.abort();
        while !self.listener.is_finished() {
            tokio::task::yield_now().await;
        }
        self.cut();
    }

    /// Cuts every open connection; returns how many there were.
    pub fn cut(&self) -> usize {
        self.cut.send(()).unwrap_or(0)
    }
}
