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
import os
import ssl as _ssl
import urllib.request
from urllib.parse import urlsplit

import aiohttp
from yarl import URL

from .errors import TransportError

KEEPALIVE_IDLE = 4.0
"""Seconds a pooled connection may sit idle before it is closed here: below tetherd's ``--header-timeout-ms`` (10 s by default), so a request never goes out on a connection the server is closing."""

POOL_SIZE = 256
"""Connections open at once (more requests wait for one); tetherd's own bound is ``--max-connections``."""


class HttpTransport:
    """The HTTP connections of one client: a keep-alive pool, default headers, the TLS context and the default timeout."""

    def __init__(self, headers: dict[str, str], ssl: _ssl.SSLContext | None, request_timeout: float) -> None:
        self._headers = headers
        self._ssl: _ssl.SSLContext | bool = ssl if ssl is not None else True
        self._request_timeout = request_timeout
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
    ) -> tuple[int, bytes]:
        """Sends one request and reads the whole answer: ``(status, body)``.

        ``timeout``: seconds for the whole exchange, ``None`` for no bound
        (a request that lasts as long as a command), ``True`` for the
        client's ``request_timeout``. Connecting is always bounded (10 s at
        most). Raises :class:`TransportError`; its ``unsent`` is true when
        no connection was made, so nothing reached the server.
        """
        total = self._request_timeout if timeout is True else timeout
        assert total is not False
        connect = min(self._request_timeout, 10.0) if total is None else min(total, 10.0)
        bounds = aiohttp.ClientTimeout(total=total, sock_connect=connect)
        try:
            async with self._pool().request(
                method,
                URL(url, encoded=True),
                data=content,
                headers=headers,
                timeout=bounds,
                proxy=_proxy_for(url),
            ) as response:
                return response.status, await response.read()
        except aiohttp.ClientConnectorError as e:
            raise TransportError(url, _describe(e), unsent=True) from e
        except aiohttp.ConnectionTimeoutError as e:
            raise TransportError(url, f"could not connect within {connect:g}s", timeout=True, unsent=True) from e
        except asyncio.TimeoutError as e:
            raise TransportError(url, f"no answer within {total:g}s", timeout=True) from e
        except aiohttp.ClientError as e:
            raise TransportError(url, _describe(e)) from e

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
