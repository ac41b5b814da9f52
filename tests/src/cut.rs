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

/// A TCP forwarder that cuts each connection after a random number of
/// bytes in either direction, forwarding only part of the read that crosses
/// the limit: cuts land anywhere, in the middle of a frame or of the
/// WebSocket handshake included. Deterministic for a seed.
pub struct RandomCuts {
    /// `http://127.0.0.1:PORT`
    pub base: String,
    /// Connections cut so far.
    pub cuts: Arc<AtomicUsize>,
    /// Whether connections are cut at all (off: a plain forwarder).
    pub cutting: Arc<std::sync::atomic::AtomicBool>,
    listener: tokio::task::JoinHandle<()>,
}

impl RandomCuts {
    /// Forwards a free loopback port to `target`; each connection lives
    /// for `min..max` bytes of each direction (drawn at random).
    pub async fn start(target: SocketAddr, seed: u64, min: u64, max: u64) -> RandomCuts {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let cuts = Arc::new(AtomicUsize::new(0));
        let cutting = Arc::new(std::sync::atomic::AtomicBool::new(true));
        let (count, on) = (cuts.clone(), cutting.clone());
        let listener = tokio::spawn(async move {
            let mut random = Xorshift(seed | 1);
            while let Ok((inbound, _)) = listener.accept().await {
                let span = max.saturating_sub(min).max(1);
                let limits = [min + random.next() % span, min + random.next() % span];
                let (count, on) = (count.clone(), on.clone());
                tokio::spawn(async move {
                    let Ok(outbound) = TcpStream::connect(target).await else {
                        return;
                    };
                    let _ = inbound.set_nodelay(true);
                    let _ = outbound.set_nodelay(true);
                    let (in_read, in_write) = inbound.into_split();
                    let (out_read, out_write) = outbound.into_split();
                    let up = pump(in_read, out_write, limits[0], on.clone());
                    let down = pump(out_read, in_write, limits[1], on);
                    // Whichever direction reaches its limit (or ends) first
                    // ends both: dropping the halves cuts the connection.
                    let cut = tokio::select! {
                        cut = up => cut,
                        cut = down => cut,
                    };
                    if cut {
                        count.fetch_add(1, Ordering::SeqCst);
                    }
                });
            }
        });
        RandomCuts {
            base,
            cuts,
            cutting,
            listener,
        }
    }

    /// Connections cut so far.
    pub fn cut_count(&self) -> usize {
        self.cuts.load(Ordering::SeqCst)
    }
}

impl Drop for RandomCuts {
    fn drop(&mut self) {
        self.listener.abort();
    }
}

/// Copies `from` to `to` until `limit` bytes have passed (true: cut) or
/// either side ends (false). The read that crosses the limit is forwarded
/// only up to it, so a cut lands inside whatever that read held.
async fn pump(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    limit: u64,
    cutting: Arc<std::sync::atomic::AtomicBool>,
) -> bool {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut passed = 0u64;
    let mut buf = vec![0u8; 16 << 10];
    loop {
        let n = match from.read(&mut buf).await {
            Ok(0) | Err(_) => return false,
            Ok(n) => n,
        };
        let on = cutting.load(Ordering::SeqCst);
        let room = if on {
            (limit.saturating_sub(passed)).min(n as u64) as usize
        } else {
            n
        };
        if to.write_all(&buf[..room]).await.is_err() {
            return false;
        }
        passed += room as u64;
        if on && passed >= limit {
            return true;
        }
    }
}

/// A small deterministic generator (xorshift64).
struct Xorshift(u64);

impl Xorshift {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}
