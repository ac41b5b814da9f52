"""The token of a tetherd on this machine: the runtime entry each server writes with its URL and token, and when a client may use it.

A runtime entry is a secret on disk, so it is trusted as far as the Rust
client trusts it (``client/src/local_token.rs``): read only from folders no
other user controls, only from a file this user owns, only while its server
runs (it holds an exclusive ``flock`` on its entry for its life), and its
token sent only to exactly the origin (scheme, host, port) its URL names,
as ``yarl``, the URL parser aiohttp makes the requests with, reads it.
"""

from __future__ import annotations

import errno
import fcntl
import ipaddress
import json
import os
import stat
from pathlib import Path

from yarl import URL

MAX_ENTRY_BYTES = 16 << 10
"""Largest runtime entry read (a URL and a token)."""


def local_token_path() -> Path | None:
    """The one token file a user named, ``$TETHER_TOKEN_FILE``: read instead of the runtime entries."""
    named = os.environ.get("TETHER_TOKEN_FILE")
    return Path(named) if named else None


def runtime_dir() -> Path | None:
    """Where each local tetherd with a generated token writes its runtime entry (the server's rule).

    ``$XDG_RUNTIME_DIR/tether/servers``, else ``~/.local/state/tether/servers``;
    one ``tetherd-PID-HEX.json`` per server: ``{"url", "token", "pid"}``.
    """
    if os.environ.get("XDG_RUNTIME_DIR"):
        return Path(os.environ["XDG_RUNTIME_DIR"]) / "tether" / "servers"
    home = os.environ.get("HOME")
    return Path(home) / ".local" / "state" / "tether" / "servers" if home else None


def local_token_for(base: str) -> tuple[str | None, str] | None:
    """The token of the local server at ``base`` and where it was looked for; None for a server not on this machine.

    From ``$TETHER_TOKEN_FILE`` if set, else from the runtime entry whose URL
    names exactly ``base``'s origin (the newest, if two do), read only from
    a trusted folder (:func:`runtime_dir` and the two folders above it: real
    folders, this user's, that no other user may write), only from a file
    this user owns, and only while its server runs.
    """
    wanted = origin(base)
    if wanted is None or not is_local_url(base):
        return None
    named = local_token_path()
    if named is not None:
        try:
            lines = named.read_text().splitlines()
        except (OSError, ValueError):
            lines = []
        token = lines[0].strip() if lines else ""
        return (token or None, f"the token file {named} ($TETHER_TOKEN_FILE)")
    directory = runtime_dir()
    if directory is None:
        return (None, "nowhere (no $XDG_RUNTIME_DIR or $HOME)")
    # A folder that is not there holds no entry; one that is must be trusted.
    try:
        os.lstat(directory)
        exists = True
    except OSError:
        exists = False
    why = untrusted_runtime_dir(directory) if exists else None
    if why is not None:
        return (None, f"no runtime entry: {directory} is not trusted ({why})")
    found = _newest_entry(directory, wanted)
    if found is None:
        return (
            None,
            f"no runtime entry for {base} in {directory} (an entry is used only for exactly its own URL's "
            "scheme, host and port, while its server runs)",
        )
    return (found[1], f"the runtime entry {found[0]} for {base}")


def origin(url: str) -> tuple[str, str, int] | None:
    """A URL's origin as the request is made to it: scheme, host as ``yarl`` serialises it, port (the scheme's default when none)."""
    try:
        parsed = URL(url)
        host = parsed.raw_host
        port = parsed.port
    except (ValueError, TypeError):
        return None
    if not host or port is None:
        return None
    return (parsed.scheme, host.lower(), port)


def untrusted_runtime_dir(directory: Path) -> str | None:
    """Why ``directory`` (the runtime entries' folder) cannot be trusted, or None if it can.

    Each of ``servers``, ``tether`` and the runtime root above them must be
    a real folder (not a link), owned by this user (the root may be
    root's), and not writable by group or others unless sticky (``/tmp``):
    another user who can write there could plant an entry, or read one.
    """
    me = os.geteuid()
    folders = [directory, directory.parent, directory.parent.parent]
    for depth, folder in enumerate(folders):
        try:
            meta = os.lstat(folder)
        except OSError as e:
            return f"{folder}: {e.strerror or e}"
        if not stat.S_ISDIR(meta.st_mode):
            return f"{folder} is not a folder"
        is_root_folder = depth == len(folders) - 1
        if meta.st_uid != me and not (is_root_folder and meta.st_uid == 0):
            return f"{folder} belongs to uid {meta.st_uid}"
        sticky = meta.st_mode & stat.S_ISVTX != 0
        if meta.st_mode & 0o022 != 0 and not sticky:
            return f"others may write to {folder}"
    return None


def _newest_entry(directory: Path, wanted: tuple[str, str, int]) -> tuple[Path, str] | None:
    """The newest entry in ``directory`` for exactly ``wanted`` that only this user can have written and whose server still runs."""
    me = os.geteuid()
    try:
        names = sorted(os.listdir(directory))
    except OSError:
        return None
    best: tuple[float, Path, str] | None = None
    for name in names:
        if not (name.startswith("tetherd-") and name.endswith(".json")):
            continue
        path = directory / name
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
        except OSError:
            continue
        try:
            meta = os.fstat(fd)
            if (
                not stat.S_ISREG(meta.st_mode)
                or meta.st_size > MAX_ENTRY_BYTES
                or meta.st_uid != me
                or meta.st_mode & 0o022 != 0
            ):
                continue
            entry = json.loads(_read_at_most(fd, MAX_ENTRY_BYTES))
            if not isinstance(entry, dict):
                continue
            url, token = entry.get("url"), entry.get("token")
            if not isinstance(url, str) or not isinstance(token, str) or not token:
                continue
            if origin(url) != wanted or not _server_holds(fd):
                continue
            if best is None or meta.st_mtime > best[0]:
                best = (meta.st_mtime, path, token)
        except (OSError, ValueError):
            continue
        finally:
            os.close(fd)
    return None if best is None else (best[1], best[2])


def _read_at_most(fd: int, limit: int) -> bytes:
    """The file's bytes, at most ``limit`` of them."""
    data = b""
    while len(data) < limit:
        part = os.read(fd, limit - len(data))
        if not part:
            break
        data += part
    return data


def _server_holds(fd: int) -> bool:
    """True while the entry's server runs: it holds an exclusive ``flock`` on its entry for its life, so a shared one cannot be had.

    (A pid would mean nothing across pid namespaces.) The shared lock, when
    it is had, goes with the file's descriptor.
    """
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except OSError as e:
        return e.errno in (errno.EWOULDBLOCK, errno.EAGAIN)
    # Nobody holds it: the server is gone.
    fcntl.flock(fd, fcntl.LOCK_UN)
    return False


def is_local_url(base: str) -> bool:
    """True for a base URL whose host is a loopback address or ``localhost`` (or a name under it), as ``yarl`` reads it."""
    found = origin(base)
    if found is None:
        return False
    host = found[1]
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
