"""The token of a tetherd on this machine: where it writes one it generated, and when a client may use it (loopback only)."""

from __future__ import annotations

import ipaddress
import os
from pathlib import Path

import httpx


def local_token_path() -> Path | None:
    """Where a tetherd on this machine writes a token it generated (the server's rule).

    ``$TETHER_TOKEN_FILE``, else ``$XDG_RUNTIME_DIR/tether/token``, else
    ``~/.local/state/tether/token``.
    """
    if os.environ.get("TETHER_TOKEN_FILE"):
        return Path(os.environ["TETHER_TOKEN_FILE"])
    if os.environ.get("XDG_RUNTIME_DIR"):
        return Path(os.environ["XDG_RUNTIME_DIR"]) / "tether" / "token"
    home = os.environ.get("HOME")
    return Path(home) / ".local" / "state" / "tether" / "token" if home else None


def local_token() -> str | None:
    """The token in :func:`local_token_path`, if the file exists and holds one."""
    path = local_token_path()
    try:
        text = path.read_text() if path else ""
    except OSError:
        return None
    first = text.splitlines()[0].strip() if text.strip() else ""
    return first or None


def is_local_url(base: str) -> bool:
    """True for a base URL whose host is a loopback address or ``localhost``."""
    host = (httpx.URL(base).host or "").lower()
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
