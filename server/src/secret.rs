//! Keeping the bearer token away from children: reading it from a file,
//! scrubbing it from tetherd's own command line and environment, and the
//! user spawned processes run as.
//!
//! `/proc/PID/cmdline` and `/proc/PID/environ` show the memory the kernel
//! set up at exec: the argument and environment strings at the top of the
//! initial stack. `unsetenv` only unlinks a string from `environ`; the bytes
//! stay where `/proc` reads them. So tetherd overwrites every occurrence of
//! the token in those two areas, through `/proc/self/mem` (its own memory,
//! no pointer arithmetic, no re-exec), before any thread starts, and then
//! removes `TETHER_TOKEN` from its environment. Between exec and that
//! moment, a few milliseconds, the token given by flag or environment is
//! visible to the server's own user; `--token-file` never is.

use std::fs::OpenOptions;
use std::io;
use std::os::unix::fs::FileExt;
use std::path::Path;

use nix::unistd::{Gid, Group, Uid, User};

/// The environment variable the token may come from.
pub const TOKEN_ENV: &str = "TETHER_TOKEN";

/// The operator token in force: `None` on a `--no-token` server. Read on
/// every request; replaced when `--token-file` is read again (SIGHUP), so
/// a rotated token takes effect for new requests while attachments made
/// with the old one carry on (a token is checked when a request arrives).
/// Clones share the one token.
#[derive(Debug, Default, Clone)]
pub struct OperatorToken(std::sync::Arc<std::sync::RwLock<Option<std::sync::Arc<str>>>>);

impl OperatorToken {
    /// The token given or generated at start.
    pub fn new(token: Option<String>) -> OperatorToken {
        OperatorToken(std::sync::Arc::new(std::sync::RwLock::new(
            token.map(Into::into),
        )))
    }

    /// The token now.
    pub fn get(&self) -> Option<std::sync::Arc<str>> {
        crate::sync::recover(self.0.read()).clone()
    }

    /// True when the server has one.
    pub fn is_some(&self) -> bool {
        self.get().is_some()
    }

    /// Replaces the token (a server without one keeps serving without).
    pub fn replace(&self, token: String) {
        let mut slot = crate::sync::recover(self.0.write());
        if slot.is_some() {
            *slot = Some(token.into());
        }
    }
}

/// Reads the token from a file: the first line, surrounding whitespace
/// trimmed. Empty or unreadable is an error.
pub fn read_token_file(path: &Path) -> anyhow::Result<String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| anyhow::anyhow!("--token-file {}: {e}", path.display()))?;
    let token = text.lines().next().unwrap_or("").trim().to_string();
    if token.is_empty() {
        anyhow::bail!("--token-file {}: the file holds no token", path.display());
    }
    Ok(token)
}

/// Overwrites every occurrence of `token` in this process's argument and
/// environment areas with `*`, then removes [`TOKEN_ENV`] from the
/// environment. Returns how many occurrences were overwritten. Must run
/// before any other thread exists (it edits the environment).
pub fn scrub_own_token(token: &str) -> io::Result<usize> {
    let mut overwritten = 0;
    if !token.is_empty() {
        let stat = std::fs::read_to_string("/proc/self/stat")?;
        let areas = memory_areas(&stat).ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::InvalidData,
                "no argument/environment addresses in /proc/self/stat",
            )
        })?;
        let mem = OpenOptions::new()
            .read(true)
            .write(true)
            .open("/proc/self/mem")?;
        for (start, end) in areas {
            overwritten += scrub_area(&mem, start, end, token.as_bytes())?;
        }
    }
    // Edition 2021: safe, and no other thread exists yet to race it.
    std::env::remove_var(TOKEN_ENV);
    Ok(overwritten)
}

/// `(arg_start, arg_end)` and `(env_start, env_end)`: fields 48 to 51 of
/// /proc/PID/stat, counted after the command name (which may hold spaces
/// and parentheses, hence the last `)`).
fn memory_areas(stat: &str) -> Option<[(u64, u64); 2]> {
    let rest = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<u64> = rest
        .split_whitespace()
        .skip(1) // state, the only non-numeric field after the name
        .map(|f| f.parse::<i64>().map(|n| n as u64).unwrap_or(0))
        .collect();
    // Field n (1-based) is at index n - 4 here (pid, name, state skipped).
    let field = |n: usize| fields.get(n - 4).copied();
    Some([(field(48)?, field(49)?), (field(50)?, field(51)?)])
}

fn scrub_area(mem: &std::fs::File, start: u64, end: u64, token: &[u8]) -> io::Result<usize> {
    if end <= start || end - start > 16 << 20 {
        return Ok(0);
    }
    let mut area = vec![0u8; (end - start) as usize];
    mem.read_exact_at(&mut area, start)?;
    let mut found = 0;
    let mut i = 0;
    while i + token.len() <= area.len() {
        if &area[i..i + token.len()] == token {
            area[i..i + token.len()].fill(b'*');
            found += 1;
            i += token.len();
        } else {
            i += 1;
        }
    }
    if found > 0 {
        mem.write_all_at(&area, start)?;
    }
    Ok(found)
}

/// The user and group spawned processes run as (`--user`, `--group`, or a
/// spawn's `user`/`group`), with what the child's environment says of the
/// user (`HOME`, `USER`, `LOGNAME`, `SHELL`), from the user database.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Identity {
    /// The user as given (a name or a uid).
    pub user: String,
    pub uid: u32,
    pub gid: u32,
    /// The login name, when the user database has one.
    pub name: Option<String>,
    /// The home directory, when the user database has one.
    pub home: Option<std::path::PathBuf>,
    /// The login shell, when the user database has one.
    pub shell: Option<std::path::PathBuf>,
}

impl Identity {
    /// The variables a login as this user would have, as `su -` and
    /// `docker exec -u` set them: `HOME`, `USER`, `LOGNAME`, `SHELL`.
    pub fn environment(&self) -> Vec<(&'static str, std::ffi::OsString)> {
        let mut env = Vec::new();
        if let Some(home) = &self.home {
            env.push(("HOME", home.clone().into_os_string()));
        }
        let name = self.name.clone().unwrap_or_else(|| self.user.clone());
        env.push(("USER", name.clone().into()));
        env.push(("LOGNAME", name.into()));
        if let Some(shell) = &self.shell {
            env.push(("SHELL", shell.clone().into_os_string()));
        }
        env
    }
}

/// Resolves `--user` (name or uid) and `--group` (name or gid; the user's
/// primary group when absent). Only root can switch users, so anything
/// else is an error at start rather than a failure at every spawn. A
/// group in `denied` (names or gids: `--denied-groups`, root's among them
/// by default) is refused: membership would give what root has (`disk`
/// reads every file system, `shadow` the password hashes).
pub fn resolve_identity(
    user: &str,
    group: Option<&str>,
    denied: &[String],
) -> anyhow::Result<Identity> {
    if !Uid::effective().is_root() {
        anyhow::bail!("--user needs tetherd to run as root (it switches user for each process)");
    }
    let found = match user.parse::<u32>() {
        Ok(uid) => User::from_uid(Uid::from_raw(uid))?,
        Err(_) => User::from_name(user)?,
    };
    let (uid, primary) = match (&found, user.parse::<u32>()) {
        (Some(u), _) => (u.uid.as_raw(), Some(u.gid.as_raw())),
        (None, Ok(uid)) => (uid, None),
        (None, Err(_)) => anyhow::bail!("--user {user:?}: no such user"),
    };
    if uid == 0 {
        anyhow::bail!("--user {user:?} is root: children would read the server's /proc entries");
    }
    let gid = match group {
        Some(group) => match group.parse::<u32>() {
            Ok(gid) => gid,
            Err(_) => match Group::from_name(group)? {
                Some(g) => g.gid.as_raw(),
                None => anyhow::bail!("--group {group:?}: no such group"),
            },
        },
        None => primary.ok_or_else(|| {
            anyhow::anyhow!("--user {user}: not in the user database; give --group too")
        })?,
    };
    if Gid::from_raw(gid) == Gid::from_raw(0) && group.is_none() {
        anyhow::bail!("--user {user:?} has group root; give --group");
    }
    if let Some(name) = denied_group(gid, denied) {
        anyhow::bail!(
            "group {name} (gid {gid}) gives what root has; tetherd refuses it (--denied-groups)"
        );
    }
    Ok(Identity {
        user: user.to_string(),
        uid,
        gid,
        name: found.as_ref().map(|u| u.name.clone()),
        home: found.as_ref().map(|u| u.dir.clone()),
        shell: found.as_ref().map(|u| u.shell.clone()),
    })
}

/// The entry of `denied` (a group name or gid) that is `gid`, if any;
/// names this host does not have are skipped.
fn denied_group(gid: u32, denied: &[String]) -> Option<String> {
    denied.iter().find_map(|entry| {
        let entry = entry.trim();
        let denied_gid = match entry.parse::<u32>() {
            Ok(number) => Some(number),
            Err(_) => Group::from_name(entry)
                .ok()
                .flatten()
                .map(|g| g.gid.as_raw()),
        };
        (denied_gid == Some(gid)).then(|| entry.to_string())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_the_areas_after_a_name_with_spaces() {
        let mut stat = String::from("42 (a b) c) S");
        for n in 4..=52 {
            stat.push_str(&format!(" {n}"));
        }
        assert_eq!(memory_areas(&stat), Some([(48, 49), (50, 51)]));
    }

    #[test]
    fn scrubs_a_token_in_its_own_memory() {
        // Our own arguments hold no token; the areas are still found and
        // readable, which is what the server relies on at start.
        let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
        let areas = memory_areas(&stat).unwrap_or_default();
        assert!(areas[0].1 > areas[0].0, "{areas:?}");
    }
}
