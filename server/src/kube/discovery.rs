//! The documents kubectl reads before it opens an exec or attach stream,
//! answered minimally and truthfully: tetherd is not a cluster, serves one
//! resource (`pods`, for `get`) and its `exec` and `attach` subresources
//! (WebSocket `GET` only), and has no API groups. kubectl asks for:
//!
//! - `GET /version` (kubectl-dispatcher, to pick a kubectl build): tetherd's
//!   own version, with no Kubernetes major/minor to claim;
//! - `GET /api`, `GET /apis`, `GET /api/v1` (discovery, to resolve `pods`);
//! - `GET /api/v1/namespaces/{ns}/pods/{pod}` (to check the phase and pick
//!   the container): a pod document built from the request (below).
//!
//! Anything else under `/api` and `/apis` is a 404 `Status`.

use serde_json::{json, Value};
use tether_protocol::{ExitReason, ProcessInfo};

/// The one container of a pod document when the pod is not a process.
pub const DEFAULT_CONTAINER: &str = "tether";

/// Annotation that says what a pod document is.
const NOTE_KEY: &str = "tether.dev/note";

/// `GET /version`: `version.Info` with tetherd's version. `major` and
/// `minor` stay empty: tetherd implements no Kubernetes release.
pub fn version() -> Value {
    json!({
        "major": "",
        "minor": "",
        "gitVersion": concat!("v", env!("CARGO_PKG_VERSION"), "+tetherd"),
        "platform": format!("{}/{}", std::env::consts::OS, go_arch()),
    })
}

/// Go's name for this architecture, as `version.Info.platform` uses.
fn go_arch() -> &'static str {
    match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        other => other,
    }
}

/// `GET /api`: the core group, version `v1` only.
pub fn api_versions() -> Value {
    json!({"kind": "APIVersions", "versions": ["v1"], "serverAddressByClientCIDRs": []})
}

/// `GET /apis`: no API groups.
pub fn api_groups() -> Value {
    json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": []})
}

/// `GET /api/v1`: pods (get) and their exec and attach subresources, which
/// are served as WebSocket `GET`s (the `create` verb would be SPDY's POST).
pub fn core_v1_resources() -> Value {
    json!({
        "kind": "APIResourceList",
        "groupVersion": "v1",
        "resources": [
            {"name": "pods", "singularName": "pod", "namespaced": true, "kind": "Pod",
             "verbs": ["get"], "shortNames": ["po"]},
            {"name": "pods/exec", "singularName": "", "namespaced": true,
             "kind": "PodExecOptions", "verbs": ["get"]},
            {"name": "pods/attach", "singularName": "", "namespaced": true,
             "kind": "PodAttachOptions", "verbs": ["get"]},
        ],
    })
}

/// `GET /api/v1/namespaces/{ns}/pods/{pod}`.
///
/// When `pod` is the id of a tether process, the document describes it:
/// its container (the one recorded at exec, else [`DEFAULT_CONTAINER`]),
/// whether it has a terminal (kubectl attach needs to know), and its phase
/// (`Running`, `Succeeded` for exit code 0, else `Failed`). Any other name
/// is the place where `exec` starts a new process: a `Running` pod with one
/// container, [`DEFAULT_CONTAINER`].
pub fn pod(namespace: &str, name: &str, process: Option<&ProcessInfo>) -> Value {
    let (container, tty, phase, note) = match process {
        Some(process) => {
            let container = process
                .kubernetes
                .as_ref()
                .and_then(|k| k.container.clone())
                .unwrap_or_else(|| DEFAULT_CONTAINER.to_string());
            let phase = match (process.is_exited(), process.exit_code, process.reason) {
                (false, _, _) => "Running",
                (true, Some(0), Some(ExitReason::Exit)) => "Succeeded",
                (true, _, _) => "Failed",
            };
            let note = format!(
                "tether process {}: attach attaches to it; exec starts a new process",
                process.id
            );
            (container, process.tty, phase, note)
        }
        None => (
            DEFAULT_CONTAINER.to_string(),
            false,
            "Running",
            "tetherd has no pods: exec here starts a new tether process, \
             recorded under this namespace, pod and container"
                .to_string(),
        ),
    };
    json!({
        "kind": "Pod",
        "apiVersion": "v1",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "annotations": {NOTE_KEY: note},
        },
        "spec": {"containers": [{"name": container, "tty": tty, "stdin": true}]},
        "status": {"phase": phase},
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn discovery_names_pods_with_exec_and_attach_only() {
        let resources = core_v1_resources();
        let names: Vec<&str> = resources["resources"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["name"].as_str().unwrap())
            .collect();
        assert_eq!(names, ["pods", "pods/exec", "pods/attach"]);
        assert_eq!(api_groups()["groups"], json!([]));
        assert_eq!(api_versions()["versions"], json!(["v1"]));
        assert!(version()["gitVersion"]
            .as_str()
            .unwrap()
            .ends_with("+tetherd"));
    }

    #[test]
    fn any_pod_name_is_a_running_pod_with_one_container() {
        let pod = pod("ns", "anything", None);
        assert_eq!(pod["metadata"]["name"], "anything");
        assert_eq!(pod["metadata"]["namespace"], "ns");
        assert_eq!(pod["status"]["phase"], "Running");
        assert_eq!(pod["spec"]["containers"][0]["name"], DEFAULT_CONTAINER);
    }
}
