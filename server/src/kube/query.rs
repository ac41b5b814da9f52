//! The query strings of the exec and attach subresources, read as the API
//! server reads them: `command` repeats, and a boolean is false only when
//! absent, `false` or `0` (so `stdin=` is true).

use crate::error::KubeError;

/// `?command=...&command=...&container=&stdin=&stdout=&stderr=&tty=`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StreamQuery {
    /// Program and arguments (exec only).
    pub command: Vec<String>,
    /// The container named by the client.
    pub container: Option<String>,
    /// The client sends stdin.
    pub stdin: bool,
    /// The client wants stdout.
    pub stdout: bool,
    /// The client wants stderr.
    pub stderr: bool,
    /// A terminal: one output stream, resize on channel 4.
    pub tty: bool,
}

impl StreamQuery {
    /// Parses a raw query string.
    pub fn parse(query: Option<&str>) -> Result<StreamQuery, KubeError> {
        let pairs: Vec<(String, String)> = serde_urlencoded::from_str(query.unwrap_or(""))
            .map_err(|e| KubeError::InvalidQuery(format!("invalid query string: {e}")))?;
        let mut parsed = StreamQuery::default();
        for (key, value) in pairs {
            let flag = !matches!(value.to_ascii_lowercase().as_str(), "false" | "0");
            match key.as_str() {
                "command" => parsed.command.push(value),
                "container" if !value.is_empty() => parsed.container = Some(value),
                "stdin" => parsed.stdin = flag,
                "stdout" => parsed.stdout = flag,
                "stderr" => parsed.stderr = flag,
                "tty" => parsed.tty = flag,
                // Unknown parameters (`timeout`, `access_token`, ...) are
                // not ours to refuse.
                _ => {}
            }
        }
        if !(parsed.stdin || parsed.stdout || parsed.stderr) {
            return Err(KubeError::InvalidQuery(
                "you must specify at least 1 of stdin, stdout, stderr".into(),
            ));
        }
        Ok(parsed)
    }

    /// Parses the query of an exec, which must name a command.
    pub fn parse_exec(query: Option<&str>) -> Result<StreamQuery, KubeError> {
        let parsed = StreamQuery::parse(query)?;
        if parsed.command.is_empty() {
            return Err(KubeError::InvalidQuery(
                "you must specify at least one command for the container (command=...)".into(),
            ));
        }
        Ok(parsed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commands_repeat_and_booleans_follow_the_api_server() {
        let q = StreamQuery::parse_exec(Some(
            "command=sh&command=-c&command=echo%20a%26b&container=main&stdin=&stdout=true&stderr=0&tty=1",
        ))
        .unwrap();
        assert_eq!(q.command, ["sh", "-c", "echo a&b"]);
        assert_eq!(q.container.as_deref(), Some("main"));
        assert!(q.stdin && q.stdout && !q.stderr && q.tty);
    }

    #[test]
    fn an_exec_needs_a_command_and_a_stream() {
        let refused = StreamQuery::parse_exec(Some("stdout=true")).unwrap_err();
        assert!(refused.to_string().contains("command"), "{refused}");
        let refused = StreamQuery::parse_exec(Some("command=true&stdout=false")).unwrap_err();
        assert!(refused.to_string().contains("stdin, stdout, stderr"));
        assert!(StreamQuery::parse(Some("stdout=1")).is_ok());
    }
}
