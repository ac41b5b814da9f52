//! The writer's opening: what goes out before any output, in this order.
//! `hello` (the process, and the offsets the attachment starts from); for
//! a refused attachment its `error`, and then only the Close; where a
//! numbered input stream stands (`input_ack`); the screen snapshot that
//! `screen=` asked for.

use super::close::{Close, SocketGone};
use super::writer::Writer;

/// How the opening ended.
pub enum Opening {
    /// Sent: output may follow.
    Open,
    /// Refused after `hello`: the attachment ends with this Close.
    Refused(Close),
}

impl Writer {
    /// Sends the opening.
    pub async fn open(&mut self) -> Result<Opening, SocketGone> {
        let start = [self.cursors[0].next, self.cursors[1].next];
        if let Some(hello) = self.framing.hello(self.process.info(), start) {
            self.send(hello).await?;
        }
        if let Some(error) = self.refusal.take() {
            if let Some(message) = self.framing.rejected(&error) {
                self.send(message).await?;
            }
            return Ok(Opening::Refused(Close::Policy(error.status_and_code().1)));
        }
        self.acknowledge().await?;
        if let Some(screen) = self
            .screen
            .take()
            .and_then(|s| self.framing.screen(s.offset, s.cols, s.rows, s.data))
        {
            self.send(screen).await?;
        }
        self.screen_reserved = None;
        Ok(Opening::Open)
    }
}
