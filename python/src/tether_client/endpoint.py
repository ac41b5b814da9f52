""":class:`Endpoint`: where one tetherd is and how to reach it, shared by the HTTP calls and the attachments.

It sits below both, so that an attachment gets what it needs of its client
(the URLs, the headers with the token, the TLS context, whether the server
has answered yet) without importing the client.
"""

from __future__ import annotations

import ssl as _ssl
from urllib.parse import quote

from yarl import URL

from .errors import InvalidArgument


def segment(process_id: str) -> str:
    """``process_id`` percent-encoded as one path segment."""
    return quote(process_id, safe="")


def base_url_of(given: str) -> str:
    """The base URL of the server at ``given``, as ``yarl`` (the URL parser aiohttp makes the requests with) serialises it, without a trailing slash.

    Raises :class:`InvalidArgument` for a URL that is not ``http://`` or
    ``https://`` with a host, or that holds a user or password, a query
    (``?``) or a fragment (``#``): what is judged local, and which server a
    local token is for, is then the host the requests reach (a hand parser
    once read ``http://127.0.0.2:9#@127.0.0.1:7420`` as 127.0.0.1).
    """

    def invalid(why: str) -> InvalidArgument:
        return InvalidArgument(f"server URL {given!r} {why}")

    text = given.strip()
    try:
        url = URL(text)
        host = url.raw_host
    except (ValueError, TypeError) as e:
        raise invalid(f"is not a URL: {e}") from None
    if url.scheme not in ("http", "https"):
        raise invalid("must start with http:// or https://")
    if not host:
        raise invalid("has no host")
    if url.user is not None or url.password is not None:
        raise invalid("may not hold a user or password (pass token= instead)")
    # yarl drops an empty query or fragment; a `?` or `#` can stand nowhere
    # else in a URL with neither, and one would swallow the paths appended.
    if url.raw_query_string or url.raw_fragment or "?" in text or "#" in text:
        raise invalid("may not hold a query (`?`) or a fragment (`#`)")
    return str(url).rstrip("/")


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
