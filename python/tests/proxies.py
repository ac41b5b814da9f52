"""TCP fronts for the tests, on loopback: one that cuts connections on demand, one that answers 503 before forwarding."""

from __future__ import annotations

import asyncio
import contextlib


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    with contextlib.suppress(Exception):
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    with contextlib.suppress(Exception):
        writer.close()


async def _first_line(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, lines: list[str]) -> None:
    """Forwards the first line (an HTTP request line), noting it in ``lines``."""
    with contextlib.suppress(Exception):
        line = await reader.readline()
        lines.append(line.decode("latin-1").rstrip("\r\n"))
        writer.write(line)


class CuttingProxy:
    """Forwards every connection to ``target_port``; :meth:`cut` aborts all open ones at once (a reset, mid-stream)."""

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.accepted = 0
        self.requests: list[str] = []
        """The request line of every connection, in order."""
        self._open: set[tuple[asyncio.StreamWriter, asyncio.StreamWriter]] = set()
        self._server: asyncio.Server | None = None
        self.base = ""

    async def start(self) -> CuttingProxy:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        port = self._server.sockets[0].getsockname()[1]
        self.base = f"http://127.0.0.1:{port}"
        return self

    async def _serve(self, in_r: asyncio.StreamReader, in_w: asyncio.StreamWriter) -> None:
        self.accepted += 1
        try:
            out_r, out_w = await asyncio.open_connection("127.0.0.1", self.target_port)
        except OSError:
            in_w.transport.abort()
            return
        pair = (in_w, out_w)
        self._open.add(pair)
        try:
            await _first_line(in_r, out_w, self.requests)
            await asyncio.gather(_pipe(in_r, out_w), _pipe(out_r, in_w))
        finally:
            self._open.discard(pair)

    def cut(self) -> int:
        """Aborts every open connection; returns how many there were."""
        pairs = list(self._open)
        for a, b in pairs:
            a.transport.abort()
            b.transport.abort()
        self._open.clear()
        return len(pairs)

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
        self.cut()


class FlakyFront:
    """Answers the first ``failures`` requests with ``503`` (as an overloaded proxy does), then forwards connections to ``target_port``. ``seen`` counts connections."""

    def __init__(self, target_port: int, failures: int) -> None:
        self.target_port = target_port
        self.failures = failures
        self.seen = 0
        self.base = ""
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    async def start(self) -> FlakyFront:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        port = self._server.sockets[0].getsockname()[1]
        self.base = f"http://127.0.0.1:{port}"
        return self

    async def _serve(self, in_r: asyncio.StreamReader, in_w: asyncio.StreamWriter) -> None:
        self.seen += 1
        try:
            head = await in_r.readuntil(b"\r\n\r\n")
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError):
            in_w.close()
            return
        if self.seen <= self.failures:
            body = b'{"error":{"code":"overloaded","message":"try again"}}'
            in_w.write(
                b"HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\n"
                + f"content-length: {len(body)}\r\nconnection: close\r\n\r\n".encode()
                + body
            )
            with contextlib.suppress(Exception):
                await in_w.drain()
            in_w.close()
            return
        out_r, out_w = await asyncio.open_connection("127.0.0.1", self.target_port)
        out_w.write(head)
        await asyncio.gather(_pipe(in_r, out_w), _pipe(out_r, in_w))

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()


class AnswerLosingFront:
    """Forwards connections to ``target_port``, but on the first ``lose`` of them throws the server's answer away and resets the client's connection: the request was carried out, its answer lost."""

    def __init__(self, target_port: int, lose: int) -> None:
        self.target_port = target_port
        self.lose = lose
        self.seen = 0
        self.requests: list[str] = []
        """The request line of every connection, in order."""
        self.base = ""
        self._server: asyncio.Server | None = None

    async def start(self) -> AnswerLosingFront:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        port = self._server.sockets[0].getsockname()[1]
        self.base = f"http://127.0.0.1:{port}"
        return self

    async def _serve(self, in_r: asyncio.StreamReader, in_w: asyncio.StreamWriter) -> None:
        self.seen += 1
        out_r, out_w = await asyncio.open_connection("127.0.0.1", self.target_port)
        await _first_line(in_r, out_w, self.requests)
        if self.seen > self.lose:
            await asyncio.gather(_pipe(in_r, out_w), _pipe(out_r, in_w))
            return
        upstream = asyncio.ensure_future(_pipe(in_r, out_w))
        with contextlib.suppress(Exception):
            await out_r.read(1)  # the server has answered: it acted
        in_w.transport.abort()
        out_w.transport.abort()
        upstream.cancel()

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
