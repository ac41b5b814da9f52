//! New flags at a handover (issue 43). The new binary runs with the
//! server's own flags followed by the ones the request gives; tetherd's
//! flags override themselves (the last one wins), so a limit, a capacity,
//! a timeout or `--token-file` can change in place. What a handover cannot
//! change is refused before anything stops: where the server listens, its
//! data directory and `--memory-only`, its node name, its containment, TLS
//! on or off, the screen on or off, running without a token (either way:
//! a server started with `--no-token` is not given a `--token-file`
//! either), a generated token. The new binary parses the whole command
//! line in its preflight (`--handover-check`) and reports those, which the
//! running server compares with its own.

use std::ffi::OsString;

use clap::{Parser, ValueEnum};
use serde_json::{json, Value};

use crate::config::Config;

/// Flags a request may never give, and why.
const REFUSED: &[(&str, &str)] = &[
    ("--handover-fd", "it is tetherd's own"),
    ("--handover-check", "it is tetherd's own"),
    (
        "--token",
        "a token never goes on a command line: give --token-file, or rotate its file with SIGHUP",
    ),
];

/// The command line of the new binary: the server's flags (without its
/// token), then `flags`; refused for a flag no request may give.
pub fn next_args(own: &[OsString], flags: &[String]) -> Result<Vec<OsString>, String> {
    for flag in flags {
        for (name, why) in REFUSED {
            if flag == name || flag.starts_with(&format!("{name}=")) {
                return Err(format!("{name} cannot be given to a handover: {why}"));
            }
        }
    }
    Ok(own
        .iter()
        .cloned()
        .chain(flags.iter().map(OsString::from))
        .collect())
}

/// Refused when the server's token was generated (`generated`) and the
/// new command line `next` gives a `--token-file`. The new binary would
/// read the file (as for another token file: the token rotates) while the
/// generated token's runtime entry (or its `$TETHER_TOKEN_FILE` or
/// `--generated-token-file`) went on holding the old token: `tether` on
/// this machine would send it and be refused, and so would every client
/// given it (the `open:` link); and the file would be removed at exit if
/// it was that very one. Said from what the server has, not from its
/// flags: `TETHER_TOKEN`, scrubbed at start, leaves no trace in them.
/// A command line that does not parse is left to the preflight to refuse.
pub fn keeps_generated_token(next: &[OsString], generated: bool) -> Result<(), String> {
    if !generated {
        return Ok(());
    }
    let parsed = Config::try_parse_from(
        std::iter::once(OsString::from("tetherd")).chain(next.iter().cloned()),
    );
    match parsed.ok().and_then(|config| config.token_file) {
        Some(_) => Err(
            "--token-file cannot be given at a handover to a server whose token was generated: \
             its runtime entry (or token file) and its clients hold the generated token, which would be refused; \
             restart tetherd with --token-file to use one"
                .into(),
        ),
        None => Ok(()),
    }
}

/// What a handover cannot change, as the flags say it (each key a flag's
/// name with `_` for `-`).
pub fn identity(config: &Config) -> Value {
    json!({
        "listen": config.listen.to_string(),
        "listen_group": config.listen_group,
        "data_dir": config.data_dir,
        "memory_only": config.memory_only,
        "node": config.node,
        "containment": config
            .containment
            .to_possible_value()
            .map(|v| v.get_name().to_string()),
        "tls_cert": config.tls_cert.is_some(),
        "no_screen": config.no_screen,
        "no_token": no_token(config),
        "generated_token_file": config.generated_token_file,
    })
}

/// Whether the flags run the server without a token: `true` or `false`;
/// or, when they say `--no-token` and give a token too (which a fresh
/// start refuses: `settle_token` in `main.rs`), what contradicts it, which
/// is never what a running server has. A server started with `--no-token`
/// and handed `--token-file` would otherwise come up with a token (the
/// handover reads the file, as SIGHUP does) and every client that
/// reconnects without one refused, `--no-token` still among its flags.
fn no_token(config: &Config) -> Value {
    let tokenless = config.no_token || config.insecure_no_token;
    let given = if config.token_file.is_some() {
        Some("--token-file")
    } else {
        config.given_token().map(|_| "--token")
    };
    match given {
        Some(flag) if tokenless => json!(format!("contradicted by {flag}")),
        _ => json!(tokenless),
    }
}

/// The running server's own [`identity`], from the flags it was started
/// with (its environment is the new binary's too).
pub fn own_identity(own: &[OsString]) -> Result<Value, String> {
    Config::try_parse_from(std::iter::once(OsString::from("tetherd")).chain(own.iter().cloned()))
        .map(|config| identity(&config))
        .map_err(|e| format!("this server's own flags do not parse again: {e}"))
}

/// Whether the new binary's [`identity`] (from its preflight) is this
/// server's: the first flag that differs, said, if one does.
pub fn same_identity(own: &Value, theirs: &Value) -> Result<(), String> {
    let Some(own) = own.as_object() else {
        return Ok(());
    };
    for (key, value) in own {
        let new = theirs.get(key).unwrap_or(&Value::Null);
        if new != value {
            return Err(format!(
                "--{} cannot change at a handover ({value} now, {new} with the new flags): restart tetherd to change it",
                key.replace('_', "-")
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(list: &[&str]) -> Vec<OsString> {
        list.iter().map(OsString::from).collect()
    }

    #[test]
    fn the_new_flags_come_after_the_servers_and_the_last_one_wins() {
        let own = args(&["--listen", "127.0.0.1:0", "--exited-ttl-ms", "10"]);
        let next = next_args(&own, &["--exited-ttl-ms".into(), "3".into()]).unwrap();
        let config = Config::try_parse_from(
            std::iter::once(OsString::from("tetherd")).chain(next.iter().cloned()),
        )
        .unwrap();
        assert_eq!(config.exited_ttl_ms, 3);
    }

    #[test]
    fn a_repeatable_flag_keeps_every_value() {
        let config = Config::try_parse_from([
            "tetherd",
            "--allow-origin",
            "https://a.example",
            "--allow-origin",
            "https://b.example",
        ])
        .unwrap();
        assert_eq!(config.allow_origins.len(), 2, "{:?}", config.allow_origins);
    }

    #[test]
    fn a_token_or_an_internal_flag_is_refused() {
        for flag in [
            "--token",
            "--token=x",
            "--handover-fd=3",
            "--handover-check",
        ] {
            assert!(next_args(&[], &[flag.into()]).is_err(), "{flag}");
        }
        assert!(next_args(&[], &["--token-file=/run/t".into()]).is_ok());
    }

    #[test]
    fn another_data_directory_or_listen_address_is_not_the_same_server() {
        let own = own_identity(&args(&["--listen", "127.0.0.1:7000"])).unwrap();
        let same = own_identity(&args(&[
            "--listen",
            "127.0.0.1:7000",
            "--max-processes",
            "2",
        ]))
        .unwrap();
        assert!(same_identity(&own, &same).is_ok());
        let moved = own_identity(&args(&["--listen", "127.0.0.1:7001"])).unwrap();
        let why = same_identity(&own, &moved).unwrap_err();
        assert!(why.contains("--listen"), "{why}");
        let dir = own_identity(&args(&["--listen", "127.0.0.1:7000", "--data-dir", "/x"])).unwrap();
        assert!(same_identity(&own, &dir)
            .unwrap_err()
            .contains("--data-dir"));
    }

    #[test]
    fn a_token_is_neither_taken_away_nor_given_at_a_handover() {
        let tokenless = own_identity(&args(&["--no-token"])).unwrap();
        let given = own_identity(&args(&["--no-token", "--token-file", "/t"])).unwrap();
        let why = same_identity(&tokenless, &given).unwrap_err();
        assert!(
            why.contains("--no-token") && why.contains("--token-file"),
            "{why}"
        );
        let insecure = own_identity(&args(&["--insecure-no-token", "--token-file=/t"])).unwrap();
        assert!(same_identity(&tokenless, &insecure).is_err());
        let tokened = own_identity(&args(&["--token-file", "/t"])).unwrap();
        for taken in [
            args(&["--token-file", "/t", "--no-token"]),
            args(&["--no-token"]),
        ] {
            let theirs = own_identity(&taken).unwrap();
            let why = same_identity(&tokened, &theirs).unwrap_err();
            assert!(why.contains("--no-token"), "{why}");
        }
        // What the flags let change: another token file, a generated token
        // for one (which `keeps_generated_token` refuses, from what the
        // server has).
        let other = own_identity(&args(&["--token-file", "/t", "--token-file", "/u"])).unwrap();
        assert!(same_identity(&tokened, &other).is_ok());
        let generated = own_identity(&args(&[])).unwrap();
        assert!(same_identity(&generated, &tokened).is_ok());
        assert!(same_identity(
            &tokenless,
            &own_identity(&args(&["--no-token", "--no-token"])).unwrap()
        )
        .is_ok());
    }

    #[test]
    fn a_generated_token_is_not_replaced_by_a_token_file() {
        for flags in [
            args(&["--token-file", "/t"]),
            args(&["--token-file=/t"]),
            args(&["--max-processes", "2", "--token-file", "/t"]),
        ] {
            let why = keeps_generated_token(&flags, true).unwrap_err();
            assert!(
                why.contains("--token-file") && why.contains("generated"),
                "{why}"
            );
            assert!(keeps_generated_token(&flags, false).is_ok());
        }
        assert!(keeps_generated_token(&args(&["--max-processes", "2"]), true).is_ok());
        assert!(keeps_generated_token(&args(&[]), true).is_ok());
    }
}
