"""The token of a tetherd on this machine: the runtime entry each server writes with its URL and token, and when a client may use it (loopback only)."""

from __future__ import annotations

import ipaddress
import json
import os
from pathlib import Path
from urllib.parse import urlsplit

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
    """The token of the local server at ``base`` and where it was looked for; None for a remote server.

    From ``$TETHER_TOKEN_FILE`` if set, else from the runtime entry whose URL
    is ``base``'s server (the newest, if a killed server left one behind).
    """
    if not is_local_url(base):
        return None
    named = local_token_path()
    if named is not None:
        try:
            lines = named.read_text().splitlines()
        except OSError:
            lines = []
        token = lines[0].strip() if lines else ""
        return (token or None, f"the token file {named} ($TETHER_TOKEN_FILE)")
    directory = runtime_dir()
    if directory is None:
        return (None, "nowhere (no $XDG_RUNTIME_DIR or $HOME)")
    best: tuple[float, Path, str] | None = None
    try:
        candidates = list(directory.glob("tetherd-*.json"))
    except OSError:
        candidates = []
    for path in candidates:
        try:
            stat = path.stat()
            if stat.st_size > MAX_ENTRY_BYTES:
                continue
            entry = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if not isinstance(entry, dict):
            continue
        entry_url, entry_token = entry.get("url"), entry.get("token")
        if not isinstance(entry_url, str) or not isinstance(entry_token, str) or not entry_token:
            continue
        if same_server(entry_url, base) and (best is None or stat.st_mtime > best[0]):
            best = (stat.st_mtime, path, entry_token)
    if best is None:
        return (None, f"no runtime entry for {base} in {directory}")
    return (best[2], f"the runtime entry {best[1]} for {base}")


def same_server(entry: str, base: str) -> bool:
    """True when a runtime entry's URL and ``base`` name one local server: scheme, port, and host alike or both loopback."""
    if entry.rstrip("/") == base.rstrip("/"):
        return True
    try:
        a, b = urlsplit(entry), urlsplit(base)
        default = {"http": 80, "https": 443}
        ports = (a.port or default.get(a.scheme), b.port or default.get(b.scheme))
    except (ValueError, TypeError):
        return False
    hosts_alike = (a.hostname or "") == (b.hostname or "") or (is_local_url(entry) and is_local_url(base))
    return a.scheme == b.scheme and ports[0] == ports[1] and hosts_alike


def is_local_url(base: str) -> bool:
    """True for a base URL whose host is a loopback address or ``localhost``."""
    try:
        host = urlsplit(base).hostname or ""
    except ValueError:
        return False
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
