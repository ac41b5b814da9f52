//! What the server runs with, built once at start from the flags: the
//! flags themselves (never changed after parsing), the descriptor-hungry
//! capacities fitted to the open-file limit, the operator token in force
//! (given, read from a file, or generated), the identity children run as,
//! and the key scoped tokens are signed with. sshx keeps its `Args` apart
//! from its `ServerOptions` the same way: nothing reads a flag that start-up
//! has since overruled.

use std::ops::Deref;

use crate::config::{Capacity, Config};
use crate::secret::Identity;
use crate::token::SigningKey;

/// The flags plus what start-up decided from them. Derefs to the flags;
/// the flags whose value start-up may overrule (the token and the four
/// capacities) are private to `config.rs`, so they can only be read here.
#[derive(Debug)]
pub struct ServerOptions {
    flags: Config,
    /// The capacities in force.
    pub capacity: Capacity,
    /// The operator token in force; `None` serves without one. Replaced
    /// when `--token-file` is read again (SIGHUP).
    pub token: crate::secret::OperatorToken,
    /// With `--user`: the uid and gid children run as, resolved at start.
    pub spawn_identity: Option<Identity>,
    /// The key scoped tokens are signed with: random, drawn at start,
    /// never written out (see `token.rs`).
    pub signing_key: SigningKey,
}

impl ServerOptions {
    /// What the server runs with: `flags` as parsed, and what start-up
    /// decided from them.
    pub fn new(
        flags: Config,
        capacity: Capacity,
        token: Option<String>,
        spawn_identity: Option<Identity>,
    ) -> ServerOptions {
        ServerOptions {
            flags,
            capacity,
            token: crate::secret::OperatorToken::new(token),
            spawn_identity,
            signing_key: SigningKey::default(),
        }
    }

    /// The flags taken as they are: the capacities asked for, the token
    /// given on the command line, no `--user` resolution. For embedders
    /// and tests that start a server without the binary's start-up.
    pub fn from_flags(flags: Config) -> ServerOptions {
        let capacity = flags.asked_capacity();
        let token = flags.given_token().map(str::to_owned);
        ServerOptions::new(flags, capacity, token, None)
    }

    /// The flags as parsed.
    pub fn flags(&self) -> &Config {
        &self.flags
    }
}

impl Deref for ServerOptions {
    type Target = Config;

    fn deref(&self) -> &Config {
        &self.flags
    }
}
