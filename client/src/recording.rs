//! Reading output over plain HTTP: [`Client::read_output`] (the bytes
//! retained of one stream now), [`Client::offsets_since`] (where the output
//! written from a time on starts) and [`Client::recording_to`] (a process's
//! recording, an asciicast, written out as it comes, in bounded memory
//! whatever its length).

use std::time::Duration;

use reqwest::Method;
use tether_protocol::StreamName;
use tokio::io::{AsyncWrite, AsyncWriteExt};

use crate::base_url::path_segment;
use crate::client::Client;
use crate::error::{Error, Result};

/// Which asciicast, and whether to follow a running process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecordingOptions {
    /// 3 (asciinema 3, asciinema-player 3.10+) or 2 (older players).
    pub version: u8,
    /// Stream a running process until its exit.
    pub follow: bool,
}

impl Default for RecordingOptions {
    fn default() -> Self {
        RecordingOptions {
            version: 3,
            follow: false,
        }
    }
}

impl Client {
    /// `GET /v1/processes/{id}/output?stream=S&offset=N`: what the server
    /// retains of one stream now, from `offset` (bytes before it, and
    /// bytes already evicted, are not in the answer). Bounded as every
    /// answer is (`with_max_answer_bytes`) and retried when transient,
    /// within the call's deadline; for output as it comes, attach.
    pub async fn read_output(&self, id: &str, stream: StreamName, offset: u64) -> Result<Vec<u8>> {
        let path = format!(
            "/v1/processes/{}/output?stream={}&offset={offset}",
            path_segment(id),
            stream.as_str()
        );
        let mut backoff = self.backoff(self.retry_policy());
        loop {
            let attempt = self
                .send(
                    Method::GET,
                    &path,
                    None,
                    None,
                    backoff.attempt_timeout(self.request_timeout()),
                )
                .await;
            match attempt {
                Ok((_, body)) => return Ok(body.to_vec()),
                Err(e) => backoff.failed(e).await?,
            }
        }
    }

    /// `GET /v1/processes/{id}/offsets?since=T`: where the output each
    /// stream wrote from `since` on starts (from the server's time index:
    /// at most one mark's spacing early or late), `[stdout, stderr]`; attach
    /// from there for the output since a time.
    pub async fn offsets_since(&self, id: &str, since: std::time::SystemTime) -> Result<[u64; 2]> {
        let ms = since
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_millis() as u64)
            .unwrap_or(0);
        #[derive(serde::Deserialize)]
        struct Offsets {
            stdout: u64,
            stderr: u64,
        }
        let offsets: Offsets = self
            .retried(
                Method::GET,
                &format!("/v1/processes/{}/offsets?since={ms}", path_segment(id)),
            )
            .await?;
        Ok([offsets.stdout, offsets.stderr])
    }

    /// `GET /v1/processes/{id}/times`: the server's time index of each
    /// stream, `[stdout, stderr]`, each mark `(offset, ms since the
    /// epoch)`, oldest first (at most 1,024 a stream): the bytes from a
    /// mark's offset on were written at its time or after, before the next
    /// mark's.
    pub async fn time_marks(&self, id: &str) -> Result<[Vec<(u64, u64)>; 2]> {
        #[derive(serde::Deserialize)]
        struct Marks {
            stdout: Vec<(u64, u64)>,
            stderr: Vec<(u64, u64)>,
        }
        let marks: Marks = self
            .retried(
                Method::GET,
                &format!("/v1/processes/{}/times", path_segment(id)),
            )
            .await?;
        Ok([marks.stdout, marks.stderr])
    }

    /// Writes the recording of process `id` to `out` as the server sends
    /// it, and returns the bytes written. Without `follow` each read waits
    /// at most the request timeout; following, a silent process may keep
    /// the recording open as long as it runs (the server ends it at the
    /// exit). Not retried: a recording is a stream.
    ///
    /// ```no_run
    /// # async fn demo(client: tether_client::Client) -> Result<(), tether_client::Error> {
    /// let mut file = tokio::fs::File::create("session.cast").await.map_err(|e| tether_client::Error::Closed(e.to_string()))?;
    /// client.recording_to("web", tether_client::RecordingOptions::default(), &mut file).await?;
    /// # Ok(()) }
    /// ```
    pub async fn recording_to(
        &self,
        id: &str,
        options: RecordingOptions,
        out: &mut (impl AsyncWrite + Unpin),
    ) -> Result<u64> {
        let path = format!(
            "/v1/processes/{}/recording?version={}&follow={}",
            path_segment(id),
            options.version,
            u8::from(options.follow)
        );
        let mut response = self.get_streamed(&path, None).await?;
        let idle = (!options.follow).then(|| self.request_timeout());
        let mut written = 0u64;
        loop {
            let chunk = match idle {
                Some(idle) => tokio::time::timeout(idle, response.chunk())
                    .await
                    .map_err(|_| self.stalled(idle))?,
                None => response.chunk().await,
            };
            let chunk =
                chunk.map_err(|e| Error::Closed(format!("the recording broke off: {e}")))?;
            let Some(chunk) = chunk else { break };
            out.write_all(&chunk)
                .await
                .map_err(|e| Error::Closed(format!("cannot write the recording: {e}")))?;
            written += chunk.len() as u64;
        }
        out.flush()
            .await
            .map_err(|e| Error::Closed(format!("cannot write the recording: {e}")))?;
        Ok(written)
    }

    fn stalled(&self, idle: Duration) -> Error {
        Error::Closed(format!("the recording stalled: nothing for {idle:?}"))
    }
}
