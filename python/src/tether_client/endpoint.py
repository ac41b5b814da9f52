""":class:`Endpoint`: where one tetherd is and how to reach it, shared by the HTTP calls and the attachments.

It sits below both, so that an attachment gets what it needs of its client
(the URLs, the headers with the token, the TLS context, whether the server
has answered yet) without importing the client.
"""

from __future__ import annotations

import ssl as _ssl
from urllib.parse import quote


def segment(process_id: str) -> str:
    """``process_id`` percent-encoded as one path segment."""
    return quote(process_id, safe="")


class Endpoint:
    """One server: its base URL, the headers of every request, the TLS context, and whether it has answered."""

    def __init__(self, base_url: str, headers: dict[str, str], ssl: _ssl.SSLContext | None) -> None:
        self.base_url = base_url
        """The server's base URL, without a trailing slash."""
        self.headers = headers
        """Headers sent with every request (the token among them)."""
        self.ssl = ssl
        """The TLS context for an https:// server, if one was given."""
        self.contacted = False
        """True once the server has answered at least once: a later connection refused is then transient."""

    def note_contact(self) -> None:
        """Records that the server answered."""
        self.contacted = True

    def ws_url(self, path: str) -> str:
        """The ``ws://`` or ``wss://`` URL of an API path."""
        if self.base_url.startswith("https://"):
            return "wss://" + self.base_url[len("https://") :] + path
        return "ws://" + self.base_url[len("http://") :] + path
