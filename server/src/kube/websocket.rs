//! The exec and attach subresources: checks before the upgrade (query,
//! subprotocol, the pod of an attach), then a session served by the
//! attachment machinery (`crate::attach::serve_framed`) with Kubernetes
//! framing. An exec is a spawn through the table like any other
//! (`ProcessTable::spawn_named`), in block mode so that the client paces
//! the program and nothing is lost.
//!
//! Refusals before the upgrade are HTTP `Status` responses. A spawn that
//! fails after it (no such program, limits) is a `Failure` status on
//! channel 3, as the kubelet reports a failed exec: kubectl falls back to
//! SPDY on any refused upgrade, which would hide the reason.

use std::sync::Arc;

use axum::extract::ws::rejection::WebSocketUpgradeRejection;
use axum::extract::ws::{CloseFrame, Message, WebSocket, WebSocketUpgrade};
use axum::extract::{Extension, Path, RawQuery, State};
use axum::http::{header, HeaderMap};
use axum::response::Response;
use futures_util::StreamExt;
use tether_protocol::api::SpawnRequest;
use tether_protocol::{ExitReason, KubernetesNames, Overflow};

use crate::attach::{self, Admission, AttachOptions};
use crate::config::Config;
use crate::error::{ApiError, KubeError};
use crate::grant::{Grant, Need};
use crate::process::Process;
use crate::table::ProcessTable;
use crate::wire::framing::{Decoder, Framing};

use super::query::StreamQuery;
use crate::wire::kube::channel::{Subprotocol, WireMessage};
use crate::wire::kube::framing::KubeFraming;
use crate::wire::kube::status::Status;

type AppState = Arc<ProcessTable>;

/// The subprotocol from the upgrade request's offers.
fn negotiate(headers: &HeaderMap) -> Result<Subprotocol, KubeError> {
    Subprotocol::negotiate(
        headers
            .get_all(header::SEC_WEBSOCKET_PROTOCOL)
            .iter()
            .filter_map(|value| value.to_str().ok()),
    )
}

fn upgrade_of(
    upgrade: Result<WebSocketUpgrade, WebSocketUpgradeRejection>,
    what: &str,
) -> Result<WebSocketUpgrade, KubeError> {
    upgrade.map_err(|e| {
        KubeError::NotUpgrade(format!(
            "{what} is a WebSocket upgrade offering v5.channel.k8s.io (or v4, v4.base64, channel.k8s.io); SPDY is not served: {}",
            e.body_text()
        ))
    })
}

/// `GET /api/v1/namespaces/{ns}/pods/{pod}/exec?command=...`.
pub async fn exec(
    State(table): State<AppState>,
    Extension(grant): Extension<Grant>,
    Path((namespace, pod)): Path<(String, String)>,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
    upgrade: Result<WebSocketUpgrade, WebSocketUpgradeRejection>,
) -> Result<Response, KubeError> {
    grant.require(&table, Need::Spawn)?;
    let query = StreamQuery::parse_exec(query.as_deref())?;
    let upgrade = upgrade_of(upgrade, "exec")?;
    let protocol = negotiate(&headers)?;
    let config = table.config().clone();
    let names = KubernetesNames {
        namespace,
        pod,
        container: query.container.clone(),
    };
    let request = SpawnRequest {
        argv: Some(query.command.clone()),
        tty: query.tty,
        stdin: query.stdin,
        overflow: Overflow::Block,
        timeout_ms: Some(config.kube_exec_timeout_ms).filter(|ms| *ms > 0),
        ..SpawnRequest::default()
    };
    let framing = KubeFraming::new(protocol, query.stdout, query.stderr, query.tty);
    Ok(
        crate::attach::configure_upgrade(upgrade, &config, protocol.name()).on_upgrade(
            move |socket| async move {
                let admitted = match table.spawn_named(request, None, Some(names)).await {
                    Ok((process, _)) => match attach::admit(&table, &process, true) {
                        Ok(admission) => Ok((process, admission)),
                        Err(error) => {
                            process.kill(ExitReason::Killed).await;
                            Err(error)
                        }
                    },
                    Err(error) => Err(error),
                };
                match admitted {
                    Ok((process, admission)) => {
                        grant.audit("spawn", &process.id);
                        serve(socket, process, admission, framing, false, grant).await
                    }
                    Err(error) => refuse(socket, &config, protocol, error).await,
                }
            },
        ),
    )
}

/// `GET /api/v1/namespaces/{ns}/pods/{pod}/attach`: `pod` is a tether
/// process id.
pub async fn attach(
    State(table): State<AppState>,
    Extension(grant): Extension<Grant>,
    Path((_namespace, pod)): Path<(String, String)>,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
    upgrade: Result<WebSocketUpgrade, WebSocketUpgradeRejection>,
) -> Result<Response, KubeError> {
    let query = StreamQuery::parse(query.as_deref())?;
    let process = grant.process(&table, Need::Read, &pod)?;
    let upgrade = upgrade_of(upgrade, "attach")?;
    let protocol = negotiate(&headers)?;
    let admission = attach::admit(&table, &process, true)?;
    let config = table.config().clone();
    let framing = KubeFraming::new(protocol, query.stdout, query.stderr, process.tty);
    let readonly = !query.stdin;
    Ok(
        crate::attach::configure_upgrade(upgrade, &config, protocol.name())
            .on_upgrade(move |socket| serve(socket, process, admission, framing, readonly, grant)),
    )
}

/// `POST .../exec`: SPDY, which is not served (the query and pod checks first, then 405).
pub async fn exec_spdy(
    State(table): State<AppState>,
    Extension(grant): Extension<Grant>,
    Path((_namespace, pod)): Path<(String, String)>,
    RawQuery(query): RawQuery,
) -> KubeError {
    spdy(&table, &grant, "exec", &pod, query.as_deref())
}

/// `POST .../attach`: SPDY, which is not served (the query and pod checks first, then 405).
pub async fn attach_spdy(
    State(table): State<AppState>,
    Extension(grant): Extension<Grant>,
    Path((_namespace, pod)): Path<(String, String)>,
    RawQuery(query): RawQuery,
) -> KubeError {
    spdy(&table, &grant, "attach", &pod, query.as_deref())
}

/// SPDY is not served. The checks that the WebSocket request would fail
/// are answered first, so a client that falls back to SPDY after a refused
/// upgrade (kubectl does) still shows the real reason.
fn spdy(
    table: &ProcessTable,
    grant: &Grant,
    verb: &str,
    pod: &str,
    query: Option<&str>,
) -> KubeError {
    let checked = match verb {
        "exec" => grant
            .require(table, Need::Spawn)
            .map_err(KubeError::from)
            .and_then(|_| StreamQuery::parse_exec(query).map(|_| ())),
        _ => StreamQuery::parse(query).and_then(|_| {
            grant
                .process(table, Need::Read, pod)
                .map(|_| ())
                .map_err(KubeError::from)
        }),
    };
    match checked {
        Err(error) => error,
        Ok(()) => KubeError::MethodNotAllowed(format!(
            "POST .../pods/{pod}/{verb} (SPDY) is not served; use a client that speaks the WebSocket protocol (kubectl 1.30 and later do)"
        )),
    }
}

async fn serve(
    socket: WebSocket,
    process: Arc<Process>,
    admission: Admission,
    framing: KubeFraming,
    readonly: bool,
    grant: Grant,
) {
    // No span: see http/attach.rs (one would be entered at every poll).
    let options = AttachOptions {
        start: [0, 0],
        window: None,
        readonly,
        screen: crate::attach::ScreenStart::Never,
    };
    let id = process.id.clone();
    grant.audit("attach", &id);
    attach::serve_framed(
        socket,
        admission,
        options,
        grant.clone(),
        Framing::Kube(framing.clone()),
        Decoder::Kube(framing),
    )
    .await;
    grant.audit("detach", &id);
}

/// Ends a session that could not start: one `Failure` status, Close 1000,
/// and a bounded wait for the client's Close.
async fn refuse(mut socket: WebSocket, config: &Config, protocol: Subprotocol, error: ApiError) {
    tracing::info!(%error, "kubernetes exec refused");
    let status = Status::of_session_error(&KubeError::Api(error));
    if let Some(message) = status.to_channel(protocol) {
        let message = match message {
            WireMessage::Binary(bytes) => Message::Binary(bytes.into()),
            WireMessage::Text(text) => Message::Text(text.into()),
        };
        if socket.send(message).await.is_err() {
            return;
        }
    }
    let close = CloseFrame {
        code: 1000,
        reason: "exec failed".into(),
    };
    if socket.send(Message::Close(Some(close))).await.is_ok() {
        let _ = tokio::time::timeout(config.close_timeout(), async {
            while let Some(Ok(message)) = socket.next().await {
                if matches!(message, Message::Close(_)) {
                    break;
                }
            }
        })
        .await;
    }
}
