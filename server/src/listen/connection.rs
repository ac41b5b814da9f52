//! One connection: HTTP/1.1 (with upgrades) under the header timeout, each
//! request's body and each response's writes bounded (`deadline.rs`), until
//! it closes, is displaced, or shutdown's phases close it.

use std::convert::Infallible;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use axum::body::{Body, Bytes};
use axum::http::{Request, StatusCode};
use axum::Router;
use http_body::{Body as HttpBody, Frame, SizeHint};
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::sync::watch;
use tower::ServiceExt;

use super::deadline::{DeadlineBody, GuardedIo};
use super::{ClientFinished, ConnState, Connections, Phase, Registration, Settings, WAITING};
use crate::transport::Peer;
use crate::transport::{self, Raw};

/// Largest request head and read buffer per connection: tether's requests
/// are small, and the cap times this bounds the memory a flood can pin.
const MAX_HEAD_BYTES: usize = 64 << 10;

/// Serves HTTP/1.1 on one connection (with upgrades) until it closes, is
/// displaced, or shutdown closes it.
#[allow(clippy::too_many_arguments)]
pub(super) async fn serve_connection(
    raw: Raw,
    peer: Peer,
    tls: Option<tokio_rustls::TlsAcceptor>,
    state: Arc<ConnState>,
    registration: Registration,
    app: Router,
    settings: Settings,
    connections: Arc<Connections>,
    mut phase: watch::Receiver<Phase>,
) {
    // The TLS handshake (bounded) while the connection counts as waiting
    // for a request head: displaceable, and closed by a drain.
    let conn = tokio::select! {
        conn = transport::establish(raw, tls) => match conn {
            Ok(conn) => conn,
            Err(error) => {
                tracing::debug!(%peer, %error, "connection not established");
                return;
            }
        },
        _ = state.displaced.notified() => return,
        _ = phase.wait_for(|p| *p != Phase::Serving) => return,
    };
    let io = TokioIo::new(GuardedIo::new(
        conn,
        state.clone(),
        registration,
        settings.write_stall,
    ));
    let service = {
        let state = state.clone();
        let body_timeout = settings.body_timeout;
        hyper::service::service_fn(move |request: Request<Incoming>| {
            state.begin_request();
            let mut request =
                request.map(|body| DeadlineBody::new(body, body_timeout, state.clone()));
            // Who is asking, for the audit lines.
            request
                .extensions_mut()
                .insert(axum::extract::ConnectInfo(peer.clone()));
            request
                .extensions_mut()
                .insert(ClientFinished(state.client_finished.subscribe()));
            let response = app.clone().oneshot(request);
            let state = state.clone();
            let connections = connections.clone();
            async move {
                let response = match response.await {
                    Ok(response) => response,
                    Err(never) => match never {},
                };
                if response.status() == StatusCode::SWITCHING_PROTOCOLS {
                    state.upgraded();
                    return Ok::<_, Infallible>(response);
                }
                Ok(response.map(|body| {
                    Body::new(EndOfResponse {
                        body,
                        state,
                        connections,
                    })
                }))
            }
        })
    };
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(settings.header_timeout)
        .max_buf_size(MAX_HEAD_BYTES);
    let connection = builder.serve_connection(io, service).with_upgrades();
    tokio::pin!(connection);
    let mut phase_open = true;
    loop {
        tokio::select! {
            result = connection.as_mut() => {
                if let Err(error) = result {
                    tracing::debug!(%error, "connection ended");
                }
                return;
            }
            _ = state.displaced.notified() => return,
            changed = phase.changed(), if phase_open => {
                if changed.is_err() {
                    phase_open = false;
                    continue;
                }
                let now = *phase.borrow_and_update();
                match now {
                    Phase::Serving => {}
                    Phase::Draining if state.is(WAITING) => return,
                    Phase::Draining => connection.as_mut().graceful_shutdown(),
                    Phase::Closing => return,
                }
            }
        }
    }
}

/// Marks the connection as waiting for its next request once the response
/// body has been sent (hyper drops it then) or abandoned.
struct EndOfResponse {
    body: Body,
    state: Arc<ConnState>,
    connections: Arc<Connections>,
}

impl Drop for EndOfResponse {
    fn drop(&mut self) {
        self.state.end_request(self.connections.now_ms());
    }
}

impl HttpBody for EndOfResponse {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        Pin::new(&mut self.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}
