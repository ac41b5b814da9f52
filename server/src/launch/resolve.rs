//! Before the clone: the program looked up as `execvp` would, and the C
//! strings the child reads (made here because the child may not allocate).

use std::ffi::{CString, OsStr, OsString};
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use super::error::LaunchError;

/// Finds the program as execvp would, but in the child's PATH (not the
/// server's), before the clone.
pub(super) fn resolve(
    name: &str,
    env: &[(OsString, OsString)],
    cwd: Option<&Path>,
) -> Result<PathBuf, LaunchError> {
    if name.is_empty() {
        return Err(LaunchError::NotFound(name.into()));
    }
    if name.contains('/') {
        // Relative to the child's working directory, as exec will see it.
        let path = match cwd {
            Some(dir) if !name.starts_with('/') => dir.join(name),
            _ => PathBuf::from(name),
        };
        return check_executable(name, &path).map(|()| PathBuf::from(name));
    }
    let path = env
        .iter()
        .find(|(k, _)| k == OsStr::new("PATH"))
        .map(|(_, v)| v.clone())
        .unwrap_or_else(|| OsString::from("/usr/local/bin:/usr/bin:/bin"));
    let mut denied = None;
    for dir in std::env::split_paths(&path) {
        let dir = if dir.as_os_str().is_empty() {
            PathBuf::from(".")
        } else {
            dir
        };
        let candidate = dir.join(name);
        match check_executable(name, &candidate) {
            Ok(()) => return Ok(candidate),
            Err(e @ LaunchError::NotExecutable(..)) => denied = Some(e),
            Err(_) => {}
        }
    }
    Err(denied.unwrap_or_else(|| LaunchError::NotFound(name.into())))
}

fn check_executable(name: &str, path: &Path) -> Result<(), LaunchError> {
    let meta = std::fs::metadata(path).map_err(|_| LaunchError::NotFound(name.into()))?;
    if meta.is_dir() {
        return Err(LaunchError::NotExecutable(
            name.into(),
            io::Error::from_raw_os_error(libc::EISDIR),
        ));
    }
    let c =
        c_string(path.as_os_str().as_bytes()).map_err(|_| LaunchError::NotFound(name.into()))?;
    // SAFETY: access(2) reads a valid C string.
    if unsafe { libc::access(c.as_ptr(), libc::X_OK) } != 0 {
        return Err(LaunchError::NotExecutable(
            name.into(),
            io::Error::last_os_error(),
        ));
    }
    Ok(())
}

pub(super) fn c_string(bytes: &[u8]) -> io::Result<CString> {
    CString::new(bytes).map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "contains NUL"))
}

pub(super) fn c_strings<B: AsRef<[u8]>>(
    items: impl Iterator<Item = B>,
) -> io::Result<Vec<CString>> {
    items.map(|b| c_string(b.as_ref())).collect()
}

pub(super) fn null_terminated(strings: &[CString]) -> Vec<*const libc::c_char> {
    strings
        .iter()
        .map(|s| s.as_ptr())
        .chain(std::iter::once(std::ptr::null()))
        .collect()
}
