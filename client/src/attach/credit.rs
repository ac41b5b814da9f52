//! [`CreditLedger`]: the credit flow control of one output stream.
//!
//! On a connection the server may send a stream's data only within an
//! allowance: the window asked for at attach, plus every credit granted
//! since, minus the data bytes already sent (`dropped` notices are free).
//! The ledger keeps the two numbers that matter to the client, what it
//! holds (`queued`) and what the server may still send (`allowance`), and
//! keeps their sum within `window`, so the client never buffers more than
//! `window` bytes of the stream. Whatever the application consumes (or a
//! dropped reader throws away) becomes credit due, granted in batches.

/// More data arrived than the server was allowed to send.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Overrun {
    /// Bytes in the offending frame.
    pub received: u64,
    /// What the server could still send.
    pub allowance: u64,
}

/// What to do with data bytes that arrived within the allowance.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Receipt {
    /// Queue them for the reader.
    Keep,
    /// The reader is gone: throw them away (they are already credit due).
    Discard,
}

/// The credit bookkeeping of one stream of one attachment.
#[derive(Debug, Clone)]
pub(crate) struct CreditLedger {
    /// The bound on `queued + allowance`.
    window: u64,
    /// Grants smaller than this wait, unless the reader has read everything.
    threshold: u64,
    /// Data bytes received and not yet consumed by the application.
    queued: u64,
    /// Data bytes the server may still send on the current connection.
    allowance: u64,
    /// The reader was dropped: data is credited as soon as it arrives.
    discarding: bool,
}

impl CreditLedger {
    /// A ledger for a stream buffered up to `window` bytes (at least 1).
    /// The allowance is 0 until [`CreditLedger::connected`].
    pub fn new(window: u64) -> CreditLedger {
        let window = window.max(1);
        CreditLedger {
            window,
            threshold: (window / 4).max(1),
            queued: 0,
            allowance: 0,
            discarding: false,
        }
    }

    /// The bound on what the client buffers.
    pub fn window(&self) -> u64 {
        self.window
    }

    /// Data bytes waiting for the reader.
    pub fn queued(&self) -> u64 {
        self.queued
    }

    /// The server may send no more data of this stream on this connection
    /// until more credit is granted.
    pub fn is_exhausted(&self) -> bool {
        self.allowance == 0
    }

    /// The reader was dropped.
    pub fn is_discarding(&self) -> bool {
        self.discarding
    }

    /// The `window` to ask for when (re)attaching. The server counts it
    /// afresh for each stream of a new connection, so it must fit the
    /// fullest buffer; the other stream's ledger then gets its difference
    /// as an immediate grant. At least 1: the server refuses 0.
    pub fn connection_window(ledgers: [&CreditLedger; 2]) -> u64 {
        ledgers
            .iter()
            .map(|l| l.window.saturating_sub(l.queued))
            .min()
            .unwrap_or(1)
            .max(1)
    }

    /// A connection opened with `connection_window`: the server's allowance
    /// starts afresh. Call [`CreditLedger::take_grant`] with `force` next,
    /// so that the allowance is topped up to `window - queued`.
    pub fn connected(&mut self, connection_window: u64) {
        self.allowance = connection_window;
    }

    /// `len` data bytes arrived on the current connection.
    pub fn received(&mut self, len: u64) -> Result<Receipt, Overrun> {
        if len > self.allowance {
            return Err(Overrun {
                received: len,
                allowance: self.allowance,
            });
        }
        self.allowance -= len;
        if self.discarding {
            return Ok(Receipt::Discard);
        }
        self.queued += len;
        Ok(Receipt::Keep)
    }

    /// The application took `n` queued bytes.
    pub fn consumed(&mut self, n: u64) {
        debug_assert!(n <= self.queued, "consumed {n} of {} queued", self.queued);
        self.queued = self.queued.saturating_sub(n);
    }

    /// The reader is gone: what it held is released, and everything that
    /// arrives from now on is credited at once, so an unread stream never
    /// holds the process back.
    pub fn discard(&mut self) {
        self.discarding = true;
        self.queued = 0;
    }

    /// Credit that would bring the allowance back to `window - queued`.
    fn due(&self) -> u64 {
        self.window
            .saturating_sub(self.queued.saturating_add(self.allowance))
    }

    /// Whether a grant is worth a frame now: a quarter of the window is
    /// due, or the reader has consumed everything it had, or it is gone.
    pub fn grant_wanted(&self) -> bool {
        let due = self.due();
        due > 0 && (self.discarding || due >= self.threshold || self.queued == 0)
    }

    /// The credit to send now, if any (with `force`, whatever is due), and
    /// counts it as granted.
    pub fn take_grant(&mut self, force: bool) -> Option<u64> {
        let due = self.due();
        if due == 0 || !(force || self.grant_wanted()) {
            return None;
        }
        self.allowance += due;
        Some(due)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn connected(window: u64) -> CreditLedger {
        let mut ledger = CreditLedger::new(window);
        ledger.connected(CreditLedger::connection_window([&ledger, &ledger]));
        ledger
    }

    #[test]
    fn a_fresh_connection_asks_for_the_whole_window_and_owes_nothing() {
        let mut ledger = connected(100);
        assert_eq!(ledger.take_grant(true), None);
        assert_eq!(ledger.received(100), Ok(Receipt::Keep));
        assert_eq!(ledger.queued(), 100);
    }

    #[test]
    fn more_than_the_allowance_is_an_overrun() {
        let mut ledger = connected(100);
        assert_eq!(ledger.received(60), Ok(Receipt::Keep));
        assert!(!ledger.is_exhausted());
        assert_eq!(
            ledger.received(41),
            Err(Overrun {
                received: 41,
                allowance: 40
            })
        );
    }

    #[test]
    fn consumed_bytes_are_granted_in_batches_of_a_quarter_window() {
        let mut ledger = connected(100);
        ledger.received(100).unwrap();
        assert!(ledger.is_exhausted(), "the whole window arrived");
        ledger.consumed(10);
        assert!(!ledger.grant_wanted(), "10 bytes are below the threshold");
        assert_eq!(ledger.take_grant(false), None);
        ledger.consumed(15);
        assert!(ledger.grant_wanted());
        assert_eq!(ledger.take_grant(false), Some(25));
        assert!(!ledger.is_exhausted(), "the grant is an allowance again");
        // The grant restored the allowance: the server may send 25 more.
        assert_eq!(ledger.received(25), Ok(Receipt::Keep));
        assert!(ledger.received(1).is_err());
    }

    #[test]
    fn a_reader_that_has_read_everything_gets_even_a_small_grant() {
        let mut ledger = connected(100);
        ledger.received(5).unwrap();
        ledger.consumed(5);
        assert!(ledger.grant_wanted());
        assert_eq!(ledger.take_grant(false), Some(5));
    }

    #[test]
    fn a_forced_grant_sends_whatever_is_due() {
        let mut ledger = connected(100);
        ledger.received(100).unwrap();
        ledger.consumed(1);
        assert_eq!(ledger.take_grant(false), None);
        assert_eq!(ledger.take_grant(true), Some(1));
        assert_eq!(ledger.take_grant(true), None, "nothing is granted twice");
    }

    #[test]
    fn a_dropped_reader_releases_its_buffer_and_credits_every_arrival() {
        let mut ledger = connected(100);
        ledger.received(80).unwrap();
        ledger.discard();
        assert_eq!(ledger.queued(), 0);
        assert_eq!(ledger.take_grant(false), Some(80));
        assert_eq!(ledger.received(3), Ok(Receipt::Discard));
        assert!(
            ledger.grant_wanted(),
            "discarded bytes are credited at once"
        );
        assert_eq!(ledger.take_grant(false), Some(3));
    }

    #[test]
    fn a_reconnect_sizes_the_window_to_the_fullest_buffer() {
        let (mut stdout, mut stderr) = (connected(100), connected(100));
        stdout.received(70).unwrap();
        stderr.received(20).unwrap();
        let window = CreditLedger::connection_window([&stdout, &stderr]);
        assert_eq!(window, 30);
        stdout.connected(window);
        stderr.connected(window);
        // stdout may get 30 more (70 + 30 = 100): nothing due.
        assert_eq!(stdout.take_grant(true), None);
        // stderr may get 80 more: 50 granted at once on top of the 30.
        assert_eq!(stderr.take_grant(true), Some(50));
        assert!(stdout.received(31).is_err());
        assert_eq!(stderr.received(80), Ok(Receipt::Keep));
    }

    #[test]
    fn a_full_buffer_still_asks_for_a_window_of_one_and_stays_within_it_plus_one() {
        let mut ledger = connected(10);
        ledger.received(10).unwrap();
        let window = CreditLedger::connection_window([&ledger, &ledger]);
        assert_eq!(window, 1);
        ledger.connected(window);
        assert_eq!(ledger.take_grant(true), None);
        assert_eq!(ledger.received(1), Ok(Receipt::Keep));
        // The byte over the window is paid back before anything is granted.
        ledger.consumed(1);
        assert_eq!(ledger.take_grant(true), None);
        ledger.consumed(1);
        assert_eq!(ledger.take_grant(true), Some(1));
    }
}
