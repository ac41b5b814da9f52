//! Signal names accepted by the API (`"TERM"`, `"INT"`, ...; a `SIG` prefix
//! and lower case are tolerated) and their Linux numbers.

/// Every signal the API accepts, with its number on Linux.
pub const SIGNALS: &[(&str, i32)] = &[
    ("HUP", 1),
    ("INT", 2),
    ("QUIT", 3),
    ("KILL", 9),
    ("USR1", 10),
    ("USR2", 12),
    // What a process gets when the reader of its output goes away, as in
    // a local pipeline (`tether run -- yes | head -1`).
    ("PIPE", 13),
    ("TERM", 15),
    ("CONT", 18),
    ("STOP", 19),
    ("WINCH", 28),
];

/// Parses a signal name (`TERM`, `SIGTERM`, `term`) or number (`15`) into
/// its canonical name and number. `None` for anything not in [`SIGNALS`].
pub fn parse_signal(text: &str) -> Option<(&'static str, i32)> {
    let upper = text.trim().to_ascii_uppercase();
    let name = upper.strip_prefix("SIG").unwrap_or(&upper);
    if let Ok(number) = name.parse::<i32>() {
        return SIGNALS.iter().copied().find(|(_, n)| *n == number);
    }
    SIGNALS.iter().copied().find(|(n, _)| *n == name)
}

/// A signal the API accepts: parsed once, from a name (`TERM`, `SIGTERM`,
/// `term`) or a number (`15`), wherever a request names one (HTTP `signal`
/// body, `signal` frame), so every entry point accepts the same and refuses
/// with the same message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Signal {
    name: &'static str,
    number: i32,
}

/// A signal name or number that is not in [`SIGNALS`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown signal {0:?}; use one of HUP INT QUIT KILL USR1 USR2 PIPE TERM CONT STOP WINCH (or its number)")]
pub struct UnknownSignal(pub String);

impl Signal {
    /// Parses a name or number; see [`parse_signal`].
    pub fn parse(text: &str) -> Result<Signal, UnknownSignal> {
        parse_signal(text)
            .map(|(name, number)| Signal { name, number })
            .ok_or_else(|| UnknownSignal(text.to_string()))
    }

    /// The canonical name, without `SIG`.
    pub fn name(self) -> &'static str {
        self.name
    }

    /// The Linux signal number.
    pub fn number(self) -> i32 {
        self.number
    }
}

impl std::str::FromStr for Signal {
    type Err = UnknownSignal;
    fn from_str(text: &str) -> Result<Signal, UnknownSignal> {
        Signal::parse(text)
    }
}

/// The name (without `SIG`) of a signal number, for any Linux signal.
pub fn signal_name(number: i32) -> String {
    const ALL: &[&str] = &[
        "", "HUP", "INT", "QUIT", "ILL", "TRAP", "ABRT", "BUS", "FPE", "KILL", "USR1", "SEGV",
        "USR2", "PIPE", "ALRM", "TERM", "STKFLT", "CHLD", "CONT", "STOP", "TSTP", "TTIN", "TTOU",
        "URG", "XCPU", "XFSZ", "VTALRM", "PROF", "WINCH", "IO", "PWR", "SYS",
    ];
    match usize::try_from(number).ok().and_then(|n| ALL.get(n)) {
        Some(name) if !name.is_empty() => (*name).to_string(),
        _ => format!("RT{number}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_names_prefixes_and_numbers() {
        assert_eq!(parse_signal("TERM"), Some(("TERM", 15)));
        assert_eq!(parse_signal("sigint"), Some(("INT", 2)));
        assert_eq!(parse_signal("9"), Some(("KILL", 9)));
        assert_eq!(parse_signal("BOGUS"), None);
        assert_eq!(parse_signal("-1"), None);
        assert_eq!(parse_signal(""), None);
    }

    #[test]
    fn a_signal_parses_once_and_refuses_with_one_message() {
        let term = Signal::parse("sigterm").unwrap();
        assert_eq!((term.name(), term.number()), ("TERM", 15));
        let error = Signal::parse("BOGUS").unwrap_err();
        assert!(error.to_string().contains("use one of HUP INT"), "{error}");
        // The message names every accepted signal.
        for (name, _) in SIGNALS {
            assert!(error.to_string().contains(name), "{name}");
        }
    }

    #[test]
    fn names_signal_numbers() {
        assert_eq!(signal_name(9), "KILL");
        assert_eq!(signal_name(15), "TERM");
        assert_eq!(signal_name(40), "RT40");
    }
}
