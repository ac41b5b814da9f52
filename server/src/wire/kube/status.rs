//! Kubernetes `Status` documents: the one status at the end of an exec or
//! attach session (channel 3), and the body of every HTTP error under
//! `/api`, in the shapes the API server and the kubelet use.

use axum::http::header;
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use tether_protocol::{ExitReason, ProcessInfo};

use crate::error::{ApiError, KubeError};

use super::channel::{self, Subprotocol, WireMessage};

/// `metav1.Status`, with only the fields tetherd fills.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Status {
    /// `Status` on HTTP responses; absent on channel 3, as the kubelet
    /// writes it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kind: Option<&'static str>,
    /// `v1` with `kind`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub api_version: Option<&'static str>,
    /// Always empty.
    pub metadata: Metadata,
    /// `Success` or `Failure`.
    pub status: &'static str,
    /// For people.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub message: String,
    /// For programs: `NonZeroExitCode`, `NotFound`, ...
    #[serde(skip_serializing_if = "str::is_empty")]
    pub reason: &'static str,
    /// The exit code cause, or the object not found.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub details: Option<Details>,
    /// The HTTP status, on HTTP responses.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub code: Option<u16>,
}

/// `metav1.ListMeta`, empty.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Metadata {}

/// `metav1.StatusDetails`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Details {
    /// Name of the object concerned.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Its kind (`pods`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kind: Option<&'static str>,
    /// Why, in detail.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub causes: Vec<Cause>,
}

/// `metav1.StatusCause`; its type is serialized as `reason`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Cause {
    /// `ExitCode` for the exit code of an exec.
    pub reason: &'static str,
    /// The exit code in decimal.
    pub message: String,
}

impl Status {
    /// `{"metadata":{},"status":"Success"}`.
    pub fn success() -> Status {
        Status {
            kind: None,
            api_version: None,
            metadata: Metadata {},
            status: "Success",
            message: String::new(),
            reason: "",
            details: None,
            code: None,
        }
    }

    fn failure(reason: &'static str, message: String) -> Status {
        Status {
            status: "Failure",
            message,
            reason,
            ..Status::success()
        }
    }

    /// The end of a session: `Success` for exit code 0, else `Failure`
    /// with reason `NonZeroExitCode` and the exit code as an `ExitCode`
    /// cause (clients turn it into their own exit code: 128+N after signal
    /// N, 124 after the tether deadline), with a message that says how it
    /// ended.
    pub fn of_exit(process: &ProcessInfo) -> Status {
        let code = process.exit_code.unwrap_or(-1);
        let reason = process.reason.unwrap_or(ExitReason::Exit);
        if reason == ExitReason::Exit && code == 0 {
            return Status::success();
        }
        let command = format!("[{}]", process.argv.join(" "));
        let signal = process.signal.as_deref().unwrap_or("?");
        let how = match reason {
            ExitReason::Exit => format!(
                "command terminated with non-zero exit code: error executing command {command}, exit code {code}"
            ),
            ExitReason::Signal => format!(
                "command terminated with non-zero exit code: command {command} was killed by signal {signal}, exit code {code}"
            ),
            ExitReason::Timeout => format!(
                "command timed out: the tether deadline killed command {command} after {} ms, exit code {code}",
                process.duration_ms.unwrap_or(0)
            ),
            ExitReason::Killed => format!(
                "command killed by tetherd (a kill request or shutdown): command {command}, exit code {code}"
            ),
            ExitReason::Unattached => format!(
                "command ended by tetherd: nothing attached for its unattached_timeout_ms: command {command}, exit code {code}"
            ),
            ExitReason::Lost => format!(
                "command lost: tetherd restarted while command {command} ran; its exit is unknown"
            ),
            ExitReason::Oom => format!(
                "command terminated with non-zero exit code: command {command} ran out of memory (the kernel's OOM killer ended it at its memory limit), exit code {code}"
            ),
        };
        let mut message = how;
        if process.output_incomplete {
            message.push_str(
                "; output incomplete: a descendant held an output open past the drain bound",
            );
        }
        Status {
            details: Some(Details {
                causes: vec![Cause {
                    reason: "ExitCode",
                    message: code.to_string(),
                }],
                ..Details::default()
            }),
            ..Status::failure("NonZeroExitCode", message)
        }
    }

    /// A failure that ends a session early (a protocol error).
    pub fn of_session_error(error: &KubeError) -> Status {
        let (_, reason) = error.status_and_reason();
        Status::failure(reason, error.to_string())
    }

    /// The body of an HTTP error response.
    pub fn of_http_error(error: &KubeError) -> Status {
        let (status, reason) = error.status_and_reason();
        let mut message = error.to_string();
        let mut details = None;
        match error {
            KubeError::Api(ApiError::Unauthorized) => message.push_str(
                "; note that kubectl sends a kubeconfig's token only to an https:// server \
                 (put tetherd behind a TLS proxy)",
            ),
            KubeError::Api(ApiError::NotFound(id)) => {
                details = Some(Details {
                    name: Some(id.clone()),
                    kind: Some("pods"),
                    ..Details::default()
                })
            }
            _ => {}
        }
        Status {
            kind: Some("Status"),
            api_version: Some("v1"),
            code: Some(status.as_u16()),
            details,
            ..Status::failure(reason, message)
        }
    }

    /// JSON, as sent.
    pub fn to_json(&self) -> String {
        // Serializing plain strings and numbers cannot fail.
        serde_json::to_string(self).unwrap_or_default()
    }

    /// The channel 3 message for this status in `protocol`: the JSON
    /// document from v4 on; in v1 the message text of a failure and nothing
    /// for a success (what v1 clients expect).
    pub fn to_channel(&self, protocol: Subprotocol) -> Option<WireMessage> {
        let payload = if protocol.status_is_json() {
            self.to_json()
        } else if self.status == "Success" {
            return None;
        } else {
            self.message.clone()
        };
        Some(channel::encode(
            protocol,
            channel::ERROR,
            &[payload.as_bytes()],
        ))
    }
}

impl IntoResponse for KubeError {
    fn into_response(self) -> Response {
        let (status, _) = self.status_and_reason();
        (
            status,
            [(header::CONTENT_TYPE, "application/json")],
            Status::of_http_error(&self).to_json(),
        )
            .into_response()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{json, Value};
    use tether_protocol::{Overflow, ProcessStatus};

    fn exited(code: i32, signal: Option<&str>, reason: ExitReason) -> ProcessInfo {
        ProcessInfo {
            name: None,
            id: "p1".into(),
            pid: 1,
            argv: vec!["sh".into(), "-c".into(), "exit 3".into()],
            tty: false,
            overflow: Overflow::Block,
            status: ProcessStatus::Exited,
            started_at: String::new(),
            exit_code: Some(code),
            signal: signal.map(str::to_string),
            reason: Some(reason),
            finished_at: None,
            duration_ms: Some(2000),
            stdout_bytes: 0,
            stderr_bytes: 0,
            output_incomplete: false,
            first_retained_at: None,
            last_retained_at: None,
            records_input: false,
            retention_error: None,
            kubernetes: None,
            node: None,
            containment: None,
            limits: None,
            usage: None,
            pids_limit_hit: false,
        }
    }

    fn json_of(status: &Status) -> Value {
        serde_json::from_str(&status.to_json()).unwrap()
    }

    #[test]
    fn success_is_the_kubelets_document() {
        let status = Status::of_exit(&exited(0, None, ExitReason::Exit));
        assert_eq!(
            json_of(&status),
            json!({"metadata": {}, "status": "Success"})
        );
    }

    #[test]
    fn a_non_zero_exit_carries_the_exit_code_cause() {
        let status = json_of(&Status::of_exit(&exited(3, None, ExitReason::Exit)));
        assert_eq!(status["status"], "Failure");
        assert_eq!(status["reason"], "NonZeroExitCode");
        assert_eq!(
            status["details"]["causes"],
            json!([{"reason": "ExitCode", "message": "3"}])
        );
        assert!(status.get("kind").is_none());
    }

    #[test]
    fn signals_and_deadlines_say_so_with_their_exit_codes() {
        let signal = json_of(&Status::of_exit(&exited(
            137,
            Some("KILL"),
            ExitReason::Signal,
        )));
        assert_eq!(signal["details"]["causes"][0]["message"], "137");
        assert!(signal["message"].as_str().unwrap().contains("signal KILL"));
        let timeout = json_of(&Status::of_exit(&exited(
            124,
            Some("TERM"),
            ExitReason::Timeout,
        )));
        assert_eq!(timeout["reason"], "NonZeroExitCode");
        assert_eq!(timeout["details"]["causes"][0]["message"], "124");
        assert!(timeout["message"].as_str().unwrap().contains("timed out"));
    }

    #[test]
    fn v1_sends_failures_as_text_and_successes_not_at_all() {
        let failure = Status::of_exit(&exited(3, None, ExitReason::Exit));
        match failure.to_channel(Subprotocol::V1) {
            Some(WireMessage::Binary(bytes)) => {
                assert_eq!(bytes[0], channel::ERROR);
                assert!(String::from_utf8_lossy(&bytes[1..]).contains("exit code 3"));
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(Status::success().to_channel(Subprotocol::V1), None);
        let v5 = Status::success().to_channel(Subprotocol::V5);
        let mut expected = vec![channel::ERROR];
        expected.extend_from_slice(br#"{"metadata":{},"status":"Success"}"#);
        assert_eq!(v5, Some(WireMessage::Binary(expected)));
    }

    #[test]
    fn http_errors_are_status_objects() {
        let error = KubeError::Api(ApiError::NotFound("nope".into()));
        let status = json_of(&Status::of_http_error(&error));
        assert_eq!(status["kind"], "Status");
        assert_eq!(status["apiVersion"], "v1");
        assert_eq!(status["code"], 404);
        assert_eq!(status["reason"], "NotFound");
        assert_eq!(status["details"]["name"], "nope");
        let unauthorized = json_of(&Status::of_http_error(&KubeError::Api(
            ApiError::Unauthorized,
        )));
        assert_eq!(unauthorized["code"], 401);
        assert_eq!(unauthorized["reason"], "Unauthorized");
    }
}
