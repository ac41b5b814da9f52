""":class:`HttpTransport`: one request to tetherd over aiohttp's keep-alive pool, failures mapped to :class:`TransportError`.

aiohttp rather than httpx: with 50 requests in flight httpx reached a third
of the server's rate on this machine (its pool, encode/httpx#3215) where
aiohttp kept up (docs/BENCHMARKS.md, "Client exec throughput"), and an
agent platform runs many commands at once.

The session is made on the first request, inside the running loop (an
aiohttp session belongs to the loop it was made in; a client may be built
before any loop runs).
"""

from __future__ import annotations

import asyncio
import errno
import os
import ssl as _ssl
import urllib.request
from urllib.parse import urlsplit

import aiohttp
from yarl import URL

from .errors import ProtocolError, TransportError

KEEPALIVE_IDLE = 4.0
"""Seconds a pooled connection may sit idle before it is closed here: below tetherd's ``--header-timeout-ms`` (10 s by default), so a request never goes out on a connection the server is closing."""

POOL_SIZE = 256
"""Connections open at once (more requests wait for one); tetherd's own bound is ``--max-connections``."""

CONNECT_TIMEOUT = 10.0
"""The longest a connection may take to be made, in seconds (less when the request's own timeout is less)."""

DEFAULT_MAX_ANSWER_BYTES = 64 << 20
"""The largest HTTP answer body read by default (64 MiB, as the Rust client's ``DEFAULT_MAX_ANSWER_BYTES``): tetherd's largest answers are far below (a page of the process list stops past 4 MiB; an exec answer holds at most a few times ``--max-exec-output-bytes``). A longer answer is an error, read no further."""

_READ_PIECE = 64 * 1024


class HttpTransport:
    """The HTTP connections of one client: a keep-alive pool, default headers, the TLS context and the default timeout."""

    def __init__(
        self,
        headers: dict[str, str],
        ssl: _ssl.SSLContext | None,
        request_timeout: float,
        max_answer_bytes: int = DEFAULT_MAX_ANSWER_BYTES,
    ) -> None:
        self._headers = headers
        self._ssl: _ssl.SSLContext | bool = ssl if ssl is not None else True
        self._request_timeout = request_timeout
        self._max_answer_bytes = max_answer_bytes
        self._session: aiohttp.ClientSession | None = None

    def _pool(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            connector = aiohttp.TCPConnector(
                limit=POOL_SIZE, limit_per_host=0, keepalive_timeout=KEEPALIVE_IDLE, ssl=self._ssl
            )
            # Not trust_env: it would also read ~/.netrc, whose Basic
            # credentials aiohttp refuses beside our bearer token. Proxies
            # come from the environment all the same (_proxy_for).
            self._session = aiohttp.ClientSession(headers=self._headers, connector=connector, auto_decompress=False)
        return self._session

    async def request(
        self,
        method: str,
        url: str,
        *,
        content: bytes | None,
        headers: dict[str, str],
        timeout: float | None | bool = True,
        idle: float | None = None,
        connect: float | None = None,
    ) -> tuple[int, bytes]:
        """Sends one request and reads the whole answer: ``(status, body)``.

        ``timeout``: seconds for the whole exchange, ``True`` for the
        client's ``request_timeout``, ``None`` for no total bound (a request
        that lasts as long as a command): then ``idle`` bounds the silence
        between two pieces of the answer. Connecting takes at most
        ``connect`` seconds (default: 10, or the timeout if less). The body
        is read up to the client's ``max_answer_bytes``: a longer one raises
        :class:`ProtocolError`, read no further. Raises
        :class:`TransportError`; its ``unsent`` is true when no connection
        was made, so nothing reached the server.
        """
        total = self._request_timeout if timeout is True else timeout
        assert total is not False
        if connect is None:
            connect = min(self._request_timeout, CONNECT_TIMEOUT) if total is None else min(total, CONNECT_TIMEOUT)
        bounds = aiohttp.ClientTimeout(total=total, sock_connect=connect, sock_read=idle if total is None else None)
        try:
            async with self._pool().request(
                method,
                URL(url, encoded=True),
                data=content,
                headers=headers,
                timeout=bounds,
                proxy=_proxy_for(url),
            ) as response:
                return response.status, await self._body(url, response)
        except aiohttp.TooManyRedirects as e:
            # Not "cannot reach": the server answered, with redirects in a loop.
            last = e.history[-1] if e.history else None
            where = f", the last a {last.status} to {last.headers.get('Location', '?')}" if last is not None else ""
            raise ProtocolError(f"too many redirects from {url} ({len(e.history)}{where}): a redirect loop") from None
        except aiohttp.ClientConnectorError as e:
            refused = e.os_error.errno == errno.ECONNREFUSED
            raise TransportError(url, _describe(e), unsent=True, refused=refused) from e
        except aiohttp.ConnectionTimeoutError as e:
            raise TransportError(url, f"could not connect within {connect:.3g}s", timeout=True, unsent=True) from e
        except aiohttp.SocketTimeoutError as e:
            raise TransportError(url, f"the answer stopped for {idle:.3g}s", timeout=True) from e
        except asyncio.TimeoutError as e:
            raise TransportError(url, f"no answer within {total:.3g}s", timeout=True) from e
        except aiohttp.ClientError as e:
            raise TransportError(url, _describe(e)) from e

    async def _body(self, url: str, response: aiohttp.ClientResponse) -> bytes:
        """The answer's body, read up to the bound: past it an error, and not a byte more is read (the declared length is checked first)."""
        bound = self._max_answer_bytes

        def too_long() -> ProtocolError:
            return ProtocolError(
                f"the answer from {url} is longer than {bound} bytes (max_answer_bytes): not read"
            )

        if response.content_length is not None and response.content_length > bound:
            raise too_long()
        body = bytearray()
        while piece := await response.content.read(_READ_PIECE):
            if len(body) + len(piece) > bound:
                raise too_long()
            body += piece
        return bytes(body)

    async def close(self) -> None:
        """Closes the pool's connections."""
        if self._session is not None:
            await self._session.close()
            self._session = None


def _proxy_for(url: str) -> str | None:
    """The proxy the environment names for ``url`` (``HTTP_PROXY``, ``HTTPS_PROXY``, minus ``NO_PROXY``), as the WebSocket library finds its own."""
    parts = urlsplit(url)
    if not parts.hostname or urllib.request.proxy_bypass(parts.hostname):
        return None
    return urllib.request.getproxies().get(parts.scheme)


def _describe(error: BaseException) -> str:
    """The innermost cause of an error, which says what happened ("Connection refused")."""
    if isinstance(error, aiohttp.ClientConnectorError):
        # "Cannot connect to host H:P ssl:default [Connect call failed ...]":
        # the OS's own words say more.
        inner = error.os_error
        if inner.errno:
            return os.strerror(inner.errno)
        return str(inner) or str(error)
    cause: BaseException = error
    while cause.__cause__ is not None or cause.__context__ is not None:
        cause = cause.__cause__ or cause.__context__  # type: ignore[assignment]
    return str(cause) or str(error) or type(error).__name__
