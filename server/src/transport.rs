//! What the server listens on and what each connection is: TCP, TLS over
//! TCP (HTTPS and WSS on the same port), or a Unix socket. The accept loop
//! (`listen/accept.rs`) takes a [`Transport`], accepts a [`Raw`] connection and
//! its [`Peer`], counts it against the connection cap, and in the
//! connection's own task turns it into a [`Conn`] with [`establish`]: for
//! TLS, the handshake, bounded by [`HANDSHAKE_TIMEOUT`], so a client that
//! never finishes one holds back no one else. A client that speaks plain
//! HTTP to the TLS port gets a plain `400` saying to use https, and the
//! connection is closed.

use std::io;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::{TcpListener, TcpStream, UnixListener, UnixStream};
use tokio_rustls::rustls;
use tokio_rustls::server::TlsStream;
use tokio_rustls::TlsAcceptor;

use crate::config::ListenAddr;

/// Where a request came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Peer {
    /// A TCP (or TLS) client.
    Tcp(std::net::SocketAddr),
    /// A client of the Unix socket listener.
    Unix,
    /// Unknown (a router served without connection info, in unit tests).
    Unknown,
}

impl std::fmt::Display for Peer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Peer::Tcp(addr) => write!(f, "{addr}"),
            Peer::Unix => f.write_str("unix"),
            Peer::Unknown => f.write_str("unknown"),
        }
    }
}

/// How long a TLS client may take to finish its handshake.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// Why the listener cannot start; each says what to fix.
#[derive(Debug, thiserror::Error)]
pub enum TransportError {
    #[error("cannot listen on {0}: {1}")]
    Bind(String, io::Error),
    #[error("--tls-cert {0}: {1}")]
    Cert(PathBuf, String),
    #[error("--tls-key {0}: {1}")]
    Key(PathBuf, String),
    #[error("--tls-key {key} does not match the certificate in --tls-cert {cert}: {reason}")]
    Mismatch {
        cert: PathBuf,
        key: PathBuf,
        reason: String,
    },
    #[error("--listen-group {0}: {1}")]
    Group(String, String),
}

/// A bound listener.
pub enum Transport {
    Tcp {
        listener: TcpListener,
        tls: Option<TlsAcceptor>,
    },
    Unix {
        listener: UnixListener,
        path: PathBuf,
        /// Removes the socket file when the server stops listening.
        _remove: RemoveOnDrop,
    },
}

impl Transport {
    /// Binds `addr`. A Unix socket is created with mode 0600 (0660 and
    /// owned by `group` if given); a stale socket file at the path is
    /// replaced, anything else there is an error.
    pub async fn bind(
        addr: &ListenAddr,
        tls: Option<TlsAcceptor>,
        group: Option<&str>,
    ) -> Result<Transport, TransportError> {
        match addr {
            ListenAddr::Tcp(socket) => {
                let listener = TcpListener::bind(socket)
                    .await
                    .map_err(|e| TransportError::Bind(addr.to_string(), e))?;
                Ok(Transport::Tcp { listener, tls })
            }
            ListenAddr::Unix(path) => bind_unix(path, group).map(|listener| Transport::Unix {
                listener,
                path: path.clone(),
                _remove: RemoveOnDrop(path.clone()),
            }),
        }
    }

    /// A second descriptor of the listening socket, and a Unix socket's
    /// path, for a handover (issue 43): the new binary accepts on the same
    /// socket, so no connection is refused meanwhile (the kernel queues
    /// them).
    pub fn carry(&self) -> io::Result<(std::os::fd::OwnedFd, Option<PathBuf>)> {
        use std::os::fd::AsFd;
        match self {
            Transport::Tcp { listener, .. } => Ok((listener.as_fd().try_clone_to_owned()?, None)),
            Transport::Unix { listener, path, .. } => {
                Ok((listener.as_fd().try_clone_to_owned()?, Some(path.clone())))
            }
        }
    }

    /// The listener a handover carried. Must run inside the runtime.
    pub fn adopt(
        fd: std::os::fd::OwnedFd,
        unix: Option<PathBuf>,
        tls: Option<TlsAcceptor>,
    ) -> io::Result<Transport> {
        match unix {
            None => {
                let listener = std::net::TcpListener::from(fd);
                listener.set_nonblocking(true)?;
                Ok(Transport::Tcp {
                    listener: TcpListener::from_std(listener)?,
                    tls,
                })
            }
            Some(path) => {
                let listener = std::os::unix::net::UnixListener::from(fd);
                listener.set_nonblocking(true)?;
                Ok(Transport::Unix {
                    listener: UnixListener::from_std(listener)?,
                    _remove: RemoveOnDrop(path.clone()),
                    path,
                })
            }
        }
    }

    /// The address as clients name it: `http://IP:PORT`,
    /// `https://IP:PORT` or `unix:PATH`.
    pub fn url(&self) -> io::Result<String> {
        match self {
            Transport::Tcp { listener, tls } => {
                let scheme = if tls.is_some() { "https" } else { "http" };
                Ok(format!("{scheme}://{}", listener.local_addr()?))
            }
            Transport::Unix { path, .. } => Ok(format!("unix:{}", path.display())),
        }
    }

    /// The next connection, as accepted (before any TLS handshake).
    pub async fn accept(&self) -> io::Result<(Raw, Peer)> {
        match self {
            Transport::Tcp { listener, .. } => {
                let (tcp, addr) = listener.accept().await?;
                Ok((Raw::Tcp(tcp), Peer::Tcp(addr)))
            }
            Transport::Unix { listener, .. } => {
                let (unix, _) = listener.accept().await?;
                Ok((Raw::Unix(unix), Peer::Unix))
            }
        }
    }

    /// The TLS acceptor, when the listener speaks TLS.
    pub fn tls(&self) -> Option<TlsAcceptor> {
        match self {
            Transport::Tcp { tls, .. } => tls.clone(),
            Transport::Unix { .. } => None,
        }
    }
}

/// An accepted connection before any TLS handshake.
pub enum Raw {
    Tcp(TcpStream),
    Unix(UnixStream),
}

impl Raw {
    /// The TCP socket, if it is one.
    pub fn tcp(&self) -> Option<&TcpStream> {
        match self {
            Raw::Tcp(tcp) => Some(tcp),
            Raw::Unix(_) => None,
        }
    }

    /// A non-blocking write.
    pub fn try_write(&self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Raw::Tcp(s) => s.try_write(buf),
            Raw::Unix(s) => s.try_write(buf),
        }
    }

    /// A non-blocking read.
    pub fn try_read(&self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Raw::Tcp(s) => s.try_read(buf),
            Raw::Unix(s) => s.try_read(buf),
        }
    }

    /// Waits until it may be readable.
    pub async fn readable(&self) -> io::Result<()> {
        match self {
            Raw::Tcp(s) => s.readable().await,
            Raw::Unix(s) => s.readable().await,
        }
    }

    /// Shuts down the write side.
    pub async fn shutdown(&mut self) -> io::Result<()> {
        match self {
            Raw::Tcp(s) => s.shutdown().await,
            Raw::Unix(s) => s.shutdown().await,
        }
    }
}

/// The connection to serve: a TLS one once its handshake is done (bounded
/// by [`HANDSHAKE_TIMEOUT`]), else the socket itself.
pub async fn establish(raw: Raw, tls: Option<TlsAcceptor>) -> io::Result<Conn> {
    match (raw, tls) {
        (Raw::Tcp(tcp), Some(acceptor)) => {
            match tokio::time::timeout(HANDSHAKE_TIMEOUT, handshake(acceptor, tcp)).await {
                Ok(stream) => stream.map(|s| Conn::Tls(Box::new(s))),
                Err(_) => Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    "TLS handshake timed out",
                )),
            }
        }
        (Raw::Tcp(tcp), None) => Ok(Conn::Tcp(tcp)),
        (Raw::Unix(unix), _) => Ok(Conn::Unix(unix)),
    }
}

fn bind_unix(path: &Path, group: Option<&str>) -> Result<UnixListener, TransportError> {
    use std::os::unix::fs::{FileTypeExt, PermissionsExt};
    let err = |e: io::Error| TransportError::Bind(format!("unix:{}", path.display()), e);
    if let Ok(meta) = std::fs::symlink_metadata(path) {
        if !meta.file_type().is_socket() {
            return Err(err(io::Error::new(
                io::ErrorKind::AlreadyExists,
                "the path exists and is not a socket",
            )));
        }
        std::fs::remove_file(path).map_err(err)?;
    }
    let gid = match group {
        None => None,
        Some(group) => Some(resolve_group(group)?),
    };
    // Bind under a umask that leaves no window where others may connect,
    // then set the mode the flags ask for.
    let mask = nix::sys::stat::Mode::from_bits_truncate(0o177);
    let old = nix::sys::stat::umask(mask);
    let bound = UnixListener::bind(path);
    nix::sys::stat::umask(old);
    let listener = bound.map_err(err)?;
    if let Some(gid) = gid {
        nix::unistd::chown(path, None, Some(nix::unistd::Gid::from_raw(gid)))
            .map_err(|e| err(io::Error::from(e)))?;
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o660)).map_err(err)?;
    } else {
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)).map_err(err)?;
    }
    Ok(listener)
}

fn resolve_group(group: &str) -> Result<u32, TransportError> {
    if let Ok(gid) = group.parse::<u32>() {
        return Ok(gid);
    }
    match nix::unistd::Group::from_name(group) {
        Ok(Some(g)) => Ok(g.gid.as_raw()),
        Ok(None) => Err(TransportError::Group(group.into(), "no such group".into())),
        Err(e) => Err(TransportError::Group(group.into(), e.to_string())),
    }
}

/// The certificate in force, which a reload replaces: new handshakes get
/// the new one, connections made get to keep theirs.
#[derive(Debug, Clone)]
pub struct TlsReload {
    slot: Arc<SingleCert>,
    cert: PathBuf,
    key: PathBuf,
}

impl TlsReload {
    /// Reads `--tls-cert` and `--tls-key` again; on any error the
    /// certificate in force stays.
    pub fn reload(&self) -> Result<(), TransportError> {
        let certified = load_certified(&self.cert, &self.key)?;
        *crate::sync::recover(self.slot.0.write()) = Arc::new(certified);
        Ok(())
    }
}

/// Loads a PEM certificate chain and key into a TLS acceptor that speaks
/// HTTP/1.1 (WebSocket upgrades need it), checking that they belong
/// together; with the handle that reloads them.
pub fn load_tls(cert: &Path, key: &Path) -> Result<(TlsAcceptor, TlsReload), TransportError> {
    let certified = load_certified(cert, key)?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let slot = Arc::new(SingleCert(std::sync::RwLock::new(Arc::new(certified))));
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| TransportError::Cert(cert.into(), e.to_string()))?
        .with_no_client_auth()
        .with_cert_resolver(slot.clone());
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    let reload = TlsReload {
        slot,
        cert: cert.into(),
        key: key.into(),
    };
    Ok((TlsAcceptor::from(Arc::new(config)), reload))
}

/// A certificate chain and its key, checked to belong together.
fn load_certified(cert: &Path, key: &Path) -> Result<rustls::sign::CertifiedKey, TransportError> {
    use rustls_pki_types::pem::PemObject;
    use rustls_pki_types::{CertificateDer, PrivateKeyDer};
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(cert)
        .map_err(|e| TransportError::Cert(cert.into(), e.to_string()))?
        .collect::<Result<_, _>>()
        .map_err(|e| TransportError::Cert(cert.into(), e.to_string()))?;
    if certs.is_empty() {
        return Err(TransportError::Cert(
            cert.into(),
            "no PEM CERTIFICATE in the file".into(),
        ));
    }
    let private = PrivateKeyDer::from_pem_file(key)
        .map_err(|e| TransportError::Key(key.into(), e.to_string()))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let signing = provider
        .key_provider
        .load_private_key(private)
        .map_err(|e| TransportError::Key(key.into(), e.to_string()))?;
    let certified = rustls::sign::CertifiedKey::new(certs, signing);
    certified
        .keys_match()
        .map_err(|e| TransportError::Mismatch {
            cert: cert.into(),
            key: key.into(),
            reason: e.to_string(),
        })?;
    Ok(certified)
}

/// The one certificate, whatever name the client asks for; replaced by a
/// reload.
#[derive(Debug)]
struct SingleCert(std::sync::RwLock<Arc<rustls::sign::CertifiedKey>>);

impl rustls::server::ResolvesServerCert for SingleCert {
    fn resolve(
        &self,
        _hello: rustls::server::ClientHello<'_>,
    ) -> Option<Arc<rustls::sign::CertifiedKey>> {
        Some(crate::sync::recover(self.0.read()).clone())
    }
}

/// The TLS handshake; a connection that opens with anything but a TLS
/// record (plain HTTP, most likely) is told so in plain HTTP and closed.
async fn handshake(acceptor: TlsAcceptor, tcp: TcpStream) -> io::Result<TlsStream<TcpStream>> {
    const TLS_HANDSHAKE_RECORD: u8 = 0x16;
    let mut first = [0u8; 1];
    let n = tcp.peek(&mut first).await?;
    if n == 1 && first[0] != TLS_HANDSHAKE_RECORD {
        let body = r#"{"error":{"code":"tls_required","message":"this port speaks TLS: use https:// or wss://"}}"#;
        let response = format!(
            "HTTP/1.1 400 Bad Request\r\ncontent-type: application/json\r\n{}: tls_required\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
            tether_protocol::api::ERROR_CODE_HEADER,
            body.len()
        );
        let _ = tcp.try_write(response.as_bytes());
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "plain HTTP on the TLS port",
        ));
    }
    acceptor.accept(tcp).await
}

/// Removes the Unix socket file when the server stops listening.
pub struct RemoveOnDrop(PathBuf);

impl Drop for RemoveOnDrop {
    fn drop(&mut self) {
        if !KEEP_SOCKET_FILE.load(std::sync::atomic::Ordering::SeqCst) {
            let _ = std::fs::remove_file(&self.0);
        }
    }
}

/// Set when the server hands over (issue 43): the socket file is the new
/// binary's, and stays.
static KEEP_SOCKET_FILE: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// The listening socket's file outlives this binary (a handover).
pub fn keep_socket_file() {
    KEEP_SOCKET_FILE.store(true, std::sync::atomic::Ordering::SeqCst);
}

/// One connection, whatever carries it.
pub enum Conn {
    Tcp(TcpStream),
    Tls(Box<TlsStream<TcpStream>>),
    Unix(UnixStream),
}

impl AsyncRead for Conn {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Conn::Tcp(s) => Pin::new(s).poll_read(cx, buf),
            Conn::Tls(s) => Pin::new(s.as_mut()).poll_read(cx, buf),
            Conn::Unix(s) => Pin::new(s).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Conn {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Conn::Tcp(s) => Pin::new(s).poll_write(cx, buf),
            Conn::Tls(s) => Pin::new(s.as_mut()).poll_write(cx, buf),
            Conn::Unix(s) => Pin::new(s).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Conn::Tcp(s) => Pin::new(s).poll_flush(cx),
            Conn::Tls(s) => Pin::new(s.as_mut()).poll_flush(cx),
            Conn::Unix(s) => Pin::new(s).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Conn::Tcp(s) => Pin::new(s).poll_shutdown(cx),
            Conn::Tls(s) => Pin::new(s.as_mut()).poll_shutdown(cx),
            Conn::Unix(s) => Pin::new(s).poll_shutdown(cx),
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Conn::Tcp(s) => Pin::new(s).poll_write_vectored(cx, bufs),
            Conn::Tls(s) => Pin::new(s.as_mut()).poll_write_vectored(cx, bufs),
            Conn::Unix(s) => Pin::new(s).poll_write_vectored(cx, bufs),
        }
    }

    fn is_write_vectored(&self) -> bool {
        match self {
            Conn::Tcp(s) => s.is_write_vectored(),
            Conn::Tls(s) => s.is_write_vectored(),
            Conn::Unix(s) => s.is_write_vectored(),
        }
    }
}
