"""A fake tetherd that lies, on loopback: each act of ``tests/hostile/cases.json`` (see its README), written by hand down to the WebSocket frames, so that it can send what no library would.

It counts the request heads it reads (HTTP requests and WebSocket
upgrades) in :attr:`HostileServer.requests`.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import struct
from collections.abc import Awaitable, Callable
from urllib.parse import parse_qs, urlsplit

import msgpack

PROCESS = {
    "id": "0123456789abcdef0123456789abcdef",
    "pid": 4242,
    "argv": ["sleep", "30"],
    "tty": False,
    "overflow": "drop",
    "status": "running",
    "started_at": "2024-01-01T00:00:00.000Z",
    "exit_code": None,
    "signal": None,
    "reason": None,
    "finished_at": None,
    "duration_ms": None,
    "stdout_bytes": 0,
    "stderr_bytes": 0,
    "output_incomplete": False,
}
"""The running process every hello describes."""

_GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
_PIECE = 1 << 20


def exited(stdout_bytes: int) -> dict[str, object]:
    """The process object of an exit frame: exited 0 with reason ``exit``, ``stdout_bytes`` written."""
    return {
        **PROCESS,
        "status": "exited",
        "exit_code": 0,
        "reason": "exit",
        "finished_at": "2024-01-01T00:00:01.000Z",
        "duration_ms": 1000,
        "stdout_bytes": stdout_bytes,
    }


def pack(value: dict[str, object]) -> bytes:
    return bytes(msgpack.packb(value, use_bin_type=True))


def ws_frame(opcode: int, payload: bytes, *, fin: bool = True) -> bytes:
    """One server frame (unmasked): ``opcode`` 0 continuation, 1 text, 2 binary, 8 close, 9 ping."""
    head = bytes([(0x80 if fin else 0) | opcode])
    n = len(payload)
    if n < 126:
        head += bytes([n])
    elif n < 1 << 16:
        head += bytes([126]) + struct.pack(">H", n)
    else:
        head += bytes([127]) + struct.pack(">Q", n)
    return head + payload


def ws_head(opcode: int, length: int) -> bytes:
    """The head of a final frame whose ``length`` bytes of payload follow separately."""
    return bytes([0x80 | opcode, 127]) + struct.pack(">Q", length)


def hello_with_argv(count: int) -> tuple[bytes, bytes]:
    """A hello whose argv is ``count`` empty strings, as the MessagePack bytes before and after the items (``count`` bytes of ``0xa0``)."""
    whole = pack({"type": "hello", "version": 1, "process": {**PROCESS, "argv": []}, "stdout": 0, "stderr": 0})
    marker = b"\xa4argv\x90"
    at = whole.index(marker) + len(marker) - 1
    return whole[:at] + b"\xdd" + struct.pack(">I", count), whole[at + 1 :]


class Peer:
    """One connection of the fake server."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer

    async def send(self, data: bytes) -> None:
        self.writer.write(data)
        await self.writer.drain()

    async def message(self, payload: bytes) -> None:
        await self.send(ws_frame(2, payload))

    async def frame(self, value: dict[str, object]) -> None:
        await self.message(pack(value))

    async def hold(self) -> None:
        """Reads and discards until the client goes away."""
        while await self.reader.read(65536):
            pass


class HostileServer:
    """Serves one act on an ephemeral loopback port; ``base`` is its ``http://`` URL."""

    def __init__(self, act: str, acts: dict[str, Act] | None = None) -> None:
        self.acts = ACTS if acts is None else acts
        """The acts it knows: the list's, or a test's own."""
        if act not in self.acts:
            raise KeyError(act)
        self.act = act
        self.requests = 0
        self.base = ""
        self._server: asyncio.Server | None = None
        self._peers: set[asyncio.StreamWriter] = set()

    async def start(self) -> HostileServer:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.base = f"http://127.0.0.1:{self._server.sockets[0].getsockname()[1]}"
        return self

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
        for writer in list(self._peers):
            writer.transport.abort()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._peers.add(writer)
        peer = Peer(reader, writer)
        try:
            # The client going away, or the server stopping, ends the act.
            with contextlib.suppress(Exception, asyncio.CancelledError):
                target, headers = await self._head(peer)
                if headers.get("upgrade", "").lower() == "websocket":
                    await self._upgrade(peer, headers)
                    await self.acts[self.act](self, peer, target)
                elif self.act.startswith("http_"):
                    await self.acts[self.act](self, peer, target)
                else:
                    # Beside a WebSocket act: a wait long-poll, a GET.
                    await peer.hold()
        finally:
            self._peers.discard(writer)
            writer.transport.abort()

    async def _head(self, peer: Peer) -> tuple[str, dict[str, str]]:
        """Reads one request head: its target and its headers (names in lower case)."""
        raw = await peer.reader.readuntil(b"\r\n\r\n")
        self.requests += 1
        lines = raw.decode("latin-1").split("\r\n")
        target = lines[0].split(" ")[1]
        headers = {}
        for line in lines[1:]:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
        return target, headers

    async def _upgrade(self, peer: Peer, headers: dict[str, str]) -> None:
        accept = base64.b64encode(hashlib.sha1(headers["sec-websocket-key"].encode() + _GUID).digest()).decode()
        await peer.send(
            b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
            + f"Sec-WebSocket-Accept: {accept}\r\nSec-WebSocket-Protocol: tether.v1\r\n\r\n".encode()
        )

    # ---------------------------------------------------------------- HTTP acts

    async def http_silent(self, peer: Peer, target: str) -> None:
        await peer.hold()

    async def http_trickle(self, peer: Peer, target: str) -> None:
        await peer.send(b"HTTP/1.1 200 OK\r\ncontent-type: application/octet-stream\r\ncontent-length: 1000000\r\n\r\n")
        while True:
            await peer.send(b"[")
            await asyncio.sleep(1.0)  # the act itself: a byte a second

    async def http_endless_body(self, peer: Peer, target: str) -> None:
        await peer.send(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\n\r\n")
        data = b"[" * 65536
        chunk = f"{len(data):x}\r\n".encode() + data + b"\r\n"
        while True:
            await peer.send(chunk)

    async def http_endless_headers(self, peer: Peer, target: str) -> None:
        await peer.send(b"HTTP/1.1 200 OK\r\n")
        line = b"x-filler: " + b"a" * 88 + b"\r\n"
        while True:
            await peer.send(line * 64)

    async def http_redirect_loop(self, peer: Peer, target: str) -> None:
        while True:
            await peer.send(
                b"HTTP/1.1 307 Temporary Redirect\r\n"
                + f"location: {target}\r\ncontent-length: 0\r\n\r\n".encode()
            )
            target, _ = await self._head(peer)

    # ---------------------------------------------------------------- WebSocket acts

    async def hello(self, peer: Peer, target: str) -> None:
        """A valid hello, and the input_ack that numbered input (``input=``) waits for."""
        await peer.frame({"type": "hello", "version": 1, "process": PROCESS, "stdout": 0, "stderr": 0})
        if "input" in parse_qs(urlsplit(target).query):
            await peer.frame({"type": "input_ack", "applied": 0})

    async def ws_silent(self, peer: Peer, target: str) -> None:
        await peer.hold()

    async def ws_hello_then_close(self, peer: Peer, target: str) -> None:
        await self.hello(peer, target)
        await peer.send(ws_frame(8, struct.pack(">H", 1000)))

    async def ws_ping_flood(self, peer: Peer, target: str) -> None:
        await self.hello(peer, target)
        pings = ws_frame(9, b"p" * 125) * 1024
        while True:  # never reads
            await peer.send(pings)

    async def ws_huge_hello(self, peer: Peer, target: str) -> None:
        before, after = hello_with_argv(1_500_000)
        await peer.message(before + b"\xa0" * 1_500_000 + after)
        await peer.hold()

    async def ws_oversized_message(self, peer: Peer, target: str) -> None:
        count = 60_000_000
        before, after = hello_with_argv(count)
        await peer.send(ws_head(2, len(before) + count + len(after)) + before)
        for _ in range(count // _PIECE):
            await peer.send(b"\xa0" * _PIECE)
        await peer.send(b"\xa0" * (count % _PIECE) + after)
        await peer.hold()

    async def ws_endless_fragments(self, peer: Peer, target: str) -> None:
        await self.hello(peer, target)
        piece = b"\x00" * 65536
        await peer.send(ws_frame(2, piece, fin=False))
        continuation = ws_frame(0, piece, fin=False)
        while True:
            await peer.send(continuation)

    async def ws_deep_nesting(self, peer: Peer, target: str) -> None:
        await self.hello(peer, target)
        await peer.message(b"\x91" * 2_000_000 + b"\xc0")
        await peer.hold()

    async def ws_text_frame(self, peer: Peer, target: str) -> None:
        await self.hello(peer, target)
        await peer.send(ws_frame(1, b"hello"))
        await peer.hold()

    async def ws_unsolicited_screen(self, peer: Peer, target: str) -> None:
        await self.hello(peer, target)
        await peer.frame({"type": "stdout", "offset": 0, "data": b"abc"})
        await peer.frame({"type": "screen", "offset": 3, "cols": 80, "rows": 24, "data": b"SCREEN"})
        await peer.frame({"type": "exit", "process": exited(3)})
        await peer.hold()

    async def ws_dropped_past_2_64(self, peer: Peer, target: str) -> None:
        top = (1 << 64) - 1
        await self.hello(peer, target)
        await peer.frame({"type": "dropped", "stream": "stdout", "offset": 0, "length": top})
        await peer.frame({"type": "stdout", "offset": top, "data": b"wrapped"})
        await peer.frame({"type": "exit", "process": exited(7)})
        await peer.hold()

    async def ws_offset_backwards(self, peer: Peer, target: str) -> None:
        await self.hello(peer, target)
        await peer.frame({"type": "stdout", "offset": 0, "data": b"abc"})
        await peer.frame({"type": "stdout", "offset": 1, "data": b"bc"})
        await peer.frame({"type": "exit", "process": exited(3)})
        await peer.hold()

    async def ws_data_beyond_credit(self, peer: Peer, target: str) -> None:
        window = int(parse_qs(urlsplit(target).query)["window"][0])
        size = 2 * window + 1
        await self.hello(peer, target)
        await peer.frame({"type": "stdout", "offset": 0, "data": b"x" * size})
        await peer.frame({"type": "exit", "process": exited(size)})
        await peer.hold()


Act = Callable[[HostileServer, Peer, str], Awaitable[None]]

ACTS: dict[str, Act] = {
    name: getattr(HostileServer, name)
    for name in (
        "http_silent",
        "http_trickle",
        "http_endless_body",
        "http_endless_headers",
        "http_redirect_loop",
        "ws_silent",
        "ws_hello_then_close",
        "ws_ping_flood",
        "ws_huge_hello",
        "ws_oversized_message",
        "ws_endless_fragments",
        "ws_deep_nesting",
        "ws_text_frame",
        "ws_unsolicited_screen",
        "ws_dropped_past_2_64",
        "ws_offset_backwards",
        "ws_data_beyond_credit",
    )
}
"""Every act this fake server performs (``tcp_refused`` needs no server: the suite gives a closed port)."""
