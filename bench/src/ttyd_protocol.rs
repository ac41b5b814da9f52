//! ttyd's protocol from the client's side (the `tty` subprotocol, its
//! opening message, a keystroke and its echo), spoken to ttyd and to the
//! tokio floor, which serves the same messages.

use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use futures_util::{SinkExt, StreamExt};
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::Message;

use crate::client::Ws;

/// How long any one message may take before the server counts as stuck.
pub(crate) const FRAME_WAIT: Duration = Duration::from_secs(10);

/// One terminal of ttyd's protocol at `url`: the `tty` subprotocol and the
/// opening message (spoken by ttyd and by the tokio floor).
pub(crate) async fn open_tty(url: &str) -> Result<Ws> {
    let mut request = url.into_client_request()?;
    request
        .headers_mut()
        .insert("Sec-WebSocket-Protocol", "tty".parse()?);
    let (mut ws, _) = tokio_tungstenite::connect_async(request).await?;
    ws.send(Message::Binary(
        br#"{"AuthToken":"","columns":80,"rows":24}"#.to_vec().into(),
    ))
    .await?;
    Ok(ws)
}

/// Waits for an output message in ttyd's format that holds `byte`.
pub(crate) async fn until_output(ws: &mut Ws, byte: u8) -> Result<()> {
    loop {
        let message = tokio::time::timeout(FRAME_WAIT, ws.next())
            .await
            .context("the server sent nothing within the bound")?
            .context("the server closed the connection")??;
        if let Message::Binary(data) = message {
            if data.first() == Some(&b'0') && data[1..].contains(&byte) {
                return Ok(());
            }
        }
    }
}

/// One keystroke in ttyd's protocol, in ms.
pub(crate) async fn ttyd_round(ws: &mut Ws, key: u8) -> Result<f64> {
    let t0 = Instant::now();
    ws.send(Message::Binary(vec![b'0', key].into())).await?;
    until_output(ws, key).await?;
    Ok(t0.elapsed().as_secs_f64() * 1e3)
}
