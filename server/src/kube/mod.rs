//! Kubernetes exec compatibility: enough of the Kubernetes API that
//! `kubectl exec`/`attach` and the Kubernetes client libraries work against
//! a tetherd unchanged (docs/KUBERNETES.md says what is served and why).
//!
//! - [`crate::wire::kube`]: the channel framing, subprotocol negotiation
//!   and `Status` documents (end of session, HTTP errors), no IO;
//! - [`discovery`]: the documents kubectl reads before it execs;
//! - [`query`]: the exec and attach query strings;
//! - [`websocket`]: one kubectl WebSocket, the exec and attach routes,
//!   served by the attachment machinery with Kubernetes framing.
//!
//! Every route that names a process goes through the same token, Host and
//! Origin checks as `/v1` ([`crate::access::grant_for`]) and the same
//! decision of rights ([`crate::grant::Grant`]: exec needs the operator,
//! attach and the pod document a token for that process), answering
//! refusals as a `Status`; the static discovery documents do not (see
//! [`router`]).

pub mod discovery;
pub mod query;
pub mod websocket;

use std::sync::Arc;

use axum::extract::{Extension, Path, Request, State};
use axum::http::{header, Method};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{any, get, MethodRouter};
use axum::Router;
use serde_json::Value;

use crate::error::{ApiError, KubeError};
use crate::grant::{Grant, Need};
use crate::table::ProcessTable;

type AppState = Arc<ProcessTable>;

/// The Kubernetes routes, merged into the server's router.
///
/// The four discovery documents are static and name no process, so they
/// are served without the token (as Kubernetes serves `/version` to
/// anyone): kubectl then gets as far as the pod, whose 401 `Status` it
/// prints with its message. client-go reports a 401 on discovery with a
/// generic message of its own, which would hide ours. Everything that
/// names a process goes through the checks of `/v1`.
pub fn router(table: Arc<ProcessTable>) -> Router<AppState> {
    let discovery = Router::new()
        .route(
            "/version",
            only_get(|| async { document(discovery::version()) }),
        )
        .route(
            "/api",
            only_get(|| async { document(discovery::api_versions()) }),
        )
        .route(
            "/apis",
            only_get(|| async { document(discovery::api_groups()) }),
        )
        .route(
            "/api/v1",
            only_get(|| async { document(discovery::core_v1_resources()) }),
        );
    let pods = Router::new()
        .route("/api/v1/namespaces/{namespace}/pods/{pod}", only_get(pod))
        .route(
            "/api/v1/namespaces/{namespace}/pods/{pod}/exec",
            get(websocket::exec)
                .post(websocket::exec_spdy)
                .fallback(method_not_allowed),
        )
        .route(
            "/api/v1/namespaces/{namespace}/pods/{pod}/attach",
            get(websocket::attach)
                .post(websocket::attach_spdy)
                .fallback(method_not_allowed),
        )
        .route("/api/{*rest}", any(unknown))
        .route("/apis/{*rest}", any(unknown))
        .route_layer(middleware::from_fn_with_state(table, access));
    discovery.merge(pods)
}

/// A GET route whose other methods get a 405 `Status`.
fn only_get<H, T>(handler: H) -> MethodRouter<AppState>
where
    H: axum::handler::Handler<T, AppState>,
    T: 'static,
{
    get(handler).fallback(method_not_allowed)
}

/// The token, Host and Origin checks of `/v1`, answered as a `Status`.
async fn access(State(table): State<AppState>, mut request: Request, next: Next) -> Response {
    match crate::access::grant_for(&table, &request) {
        Ok(grant) => {
            request.extensions_mut().insert(grant);
            next.run(request).await
        }
        Err(error) => KubeError::Api(error).into_response(),
    }
}

fn document(value: Value) -> Response {
    (
        [(header::CONTENT_TYPE, "application/json")],
        value.to_string(),
    )
        .into_response()
}

async fn pod(
    State(table): State<AppState>,
    Extension(grant): Extension<Grant>,
    Path((namespace, pod)): Path<(String, String)>,
) -> Response {
    let process = match grant.process(&table, Need::Read, &pod) {
        Ok(process) => Some(process.info()),
        Err(ApiError::NotFound(_)) => None,
        Err(error) => return KubeError::Api(error).into_response(),
    };
    document(discovery::pod(&namespace, &pod, process.as_ref()))
}

async fn unknown(method: Method, request: Request) -> KubeError {
    KubeError::Api(ApiError::NoRoute(format!(
        "{method} {} (tetherd serves only pods, pods/exec and pods/attach; see docs/KUBERNETES.md)",
        request.uri().path()
    )))
}

async fn method_not_allowed(method: Method, request: Request) -> KubeError {
    KubeError::MethodNotAllowed(format!(
        "{method} {} is not served (GET only: exec and attach are WebSocket upgrades; SPDY is not served)",
        request.uri().path()
    ))
}
