//! The detach key sequence (docker's `--detach-keys`): typed on a forwarded
//! terminal, it ends `tether run -t` / `tether attach` and leaves the
//! process running.

/// A parsed `--detach-keys` value: the bytes to watch for (none: disabled).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DetachKeys(Vec<u8>);

impl DetachKeys {
    /// Parses docker's syntax: comma-separated keys, each a single
    /// character or `ctrl-X` with X one of `a`-`z`, `@`, `[`, `\`, `]`,
    /// `^`, `_`. The empty string disables detaching.
    pub fn parse(text: &str) -> Result<DetachKeys, String> {
        if text.is_empty() {
            return Ok(DetachKeys(Vec::new()));
        }
        text.split(',')
            .map(key)
            .collect::<Result<_, _>>()
            .map(DetachKeys)
    }

    /// No detach keys.
    pub fn none() -> DetachKeys {
        DetachKeys(Vec::new())
    }

    /// A watcher over a stream of typed bytes.
    pub fn watcher(&self) -> DetachWatcher {
        DetachWatcher {
            keys: self.0.clone(),
            matched: 0,
        }
    }
}

fn key(text: &str) -> Result<u8, String> {
    let bad = || {
        format!("invalid detach key {text:?}: expected a character or ctrl-X (X: a-z, @, [, \\, ], ^, _)")
    };
    if let Some(rest) = text.strip_prefix("ctrl-") {
        let mut chars = rest.chars();
        return match (chars.next(), chars.next()) {
            (Some(c @ ('a'..='z' | 'A'..='Z' | '@' | '[' | '\\' | ']' | '^' | '_')), None) => {
                Ok((c.to_ascii_uppercase() as u8) & 0x1f)
            }
            _ => Err(bad()),
        };
    }
    match text.as_bytes() {
        [byte] if byte.is_ascii() => Ok(*byte),
        _ => Err(bad()),
    }
}

/// Watches typed bytes for the detach sequence. A partial match is held
/// back (so the remote side never sees the sequence) and forwarded as soon
/// as a byte shows it was not the sequence after all.
#[derive(Debug)]
pub struct DetachWatcher {
    keys: Vec<u8>,
    matched: usize,
}

/// What to do with one read of local input.
#[derive(Debug, PartialEq, Eq)]
pub enum Typed {
    /// Forward these bytes (possibly none: a partial match is held).
    Forward(Vec<u8>),
    /// The sequence was typed: forward these bytes, then detach.
    Detach(Vec<u8>),
}

impl DetachWatcher {
    /// Feeds one read of local input.
    pub fn feed(&mut self, input: &[u8]) -> Typed {
        if self.keys.is_empty() {
            return Typed::Forward(input.to_vec());
        }
        let mut forward = Vec::with_capacity(input.len());
        for &byte in input {
            if byte == self.keys[self.matched] {
                self.matched += 1;
                if self.matched == self.keys.len() {
                    self.matched = 0;
                    return Typed::Detach(forward);
                }
                continue;
            }
            // Not the sequence: what was held goes out, and this byte may
            // start the sequence afresh.
            forward.extend_from_slice(&self.keys[..self.matched]);
            self.matched = 0;
            // (A one-key sequence never gets here: its key matched above.)
            if byte == self.keys[0] {
                self.matched = 1;
            } else {
                forward.push(byte);
            }
        }
        Typed::Forward(forward)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CTRL_P: u8 = 0x10;
    const CTRL_Q: u8 = 0x11;

    #[test]
    fn docker_syntax_parses_to_control_bytes() {
        assert_eq!(
            DetachKeys::parse("ctrl-p,ctrl-q"),
            Ok(DetachKeys(vec![CTRL_P, CTRL_Q]))
        );
        assert_eq!(
            DetachKeys::parse("ctrl-@,ctrl-[,ctrl-_"),
            Ok(DetachKeys(vec![0, 0x1b, 0x1f]))
        );
        assert_eq!(DetachKeys::parse("a,ctrl-a"), Ok(DetachKeys(vec![b'a', 1])));
        assert_eq!(DetachKeys::parse(""), Ok(DetachKeys::none()));
        for bad in ["ctrl-", "ctrl-pp", "ctrl-1", "ab", "a,,b", "é"] {
            assert!(DetachKeys::parse(bad).is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn the_sequence_detaches_and_is_never_forwarded() {
        let keys = DetachKeys::parse("ctrl-p,ctrl-q").unwrap();
        let mut watcher = keys.watcher();
        assert_eq!(watcher.feed(b"ls\r"), Typed::Forward(b"ls\r".to_vec()));
        assert_eq!(watcher.feed(&[b'x', CTRL_P]), Typed::Forward(b"x".to_vec()));
        assert_eq!(watcher.feed(&[CTRL_Q, b'y']), Typed::Detach(Vec::new()));
    }

    #[test]
    fn a_partial_match_is_forwarded_once_it_turns_out_not_to_match() {
        let mut watcher = DetachKeys::parse("ctrl-p,ctrl-q").unwrap().watcher();
        assert_eq!(watcher.feed(&[CTRL_P]), Typed::Forward(Vec::new()));
        assert_eq!(watcher.feed(b"k"), Typed::Forward(vec![CTRL_P, b'k']));
        // Ctrl-P Ctrl-P Ctrl-Q: the first is typed, the last two detach.
        assert_eq!(
            watcher.feed(&[CTRL_P, CTRL_P, CTRL_Q]),
            Typed::Detach(vec![CTRL_P])
        );
    }

    #[test]
    fn disabled_keys_forward_everything() {
        let mut watcher = DetachKeys::parse("").unwrap().watcher();
        assert_eq!(
            watcher.feed(&[CTRL_P, CTRL_Q]),
            Typed::Forward(vec![CTRL_P, CTRL_Q])
        );
    }

    #[test]
    fn a_single_key_detaches_at_once() {
        let mut watcher = DetachKeys::parse("ctrl-x").unwrap().watcher();
        assert_eq!(watcher.feed(b"ab\x18cd"), Typed::Detach(b"ab".to_vec()));
    }
}
