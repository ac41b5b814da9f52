"""Numbered input (the default): lines written through connections cut at random byte counts (mid-frame included) reach the program once each, in order; a resume after the server forgot the input stream fails with ``InputExpired`` and applies nothing twice."""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
import urllib.request
from collections.abc import Callable
from pathlib import Path

import pytest

from tether_client import AsyncClient, InputExpired, RetryPolicy

from .conftest import WAIT, Tetherd

CUT_TOLERANT = RetryPolicy(budget=60.0, initial_backoff=0.002, max_backoff=0.04, unreachable_budget=60.0)


class RandomCuts:
    """Forwards to ``target_port``, cutting each connection after a random number of bytes (``low..high``, or never without them) in either direction; the chunk that crosses it is forwarded only in part. :meth:`cut` aborts every open connection; while ``refusing``, new ones are aborted at once."""

    def __init__(self, target_port: int, low: int | None = None, high: int | None = None) -> None:
        self.target_port = target_port
        self.low, self.high = low, high
        self.cuts = 0
        self.refusing = False
        self.random = random.Random(0x7E7E)
        self.base = ""
        self._open: set[tuple[asyncio.StreamWriter, asyncio.StreamWriter]] = set()
        self._server: asyncio.Server | None = None

    async def start(self) -> RandomCuts:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.base = f"http://127.0.0.1:{self._server.sockets[0].getsockname()[1]}"
        return self

    async def _pump(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
        left = self.random.randrange(self.low, self.high) if self.low and self.high else -1
        with contextlib.suppress(Exception):
            while data := await reader.read(65536):
                part = data[:left] if left >= 0 else data
                writer.write(part)
                await writer.drain()
                if left >= 0:
                    left -= len(part)
                    if left <= 0:
                        return True
        return False

    async def _serve(self, in_r: asyncio.StreamReader, in_w: asyncio.StreamWriter) -> None:
        if self.refusing:
            in_w.transport.abort()
            return
        try:
            out_r, out_w = await asyncio.open_connection("127.0.0.1", self.target_port)
        except OSError:
            in_w.transport.abort()
            return
        pair = (in_w, out_w)
        self._open.add(pair)
        up = asyncio.ensure_future(self._pump(in_r, out_w))
        down = asyncio.ensure_future(self._pump(out_r, in_w))
        done, pending = await asyncio.wait({up, down}, return_when=asyncio.FIRST_COMPLETED)
        for task in pending:
            task.cancel()
        if any(t.result() for t in done):
            self.cuts += 1
        self._open.discard(pair)
        in_w.transport.abort()
        out_w.transport.abort()

    def cut(self) -> None:
        """Aborts every open connection."""
        for a, b in list(self._open):
            a.transport.abort()
            b.transport.abort()

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
        self.cut()


async def test_lines_written_through_random_cuts_reach_cat_once_each_in_order(server: Tetherd, tmp_path: Path) -> None:
    got = tmp_path / "got"
    proxy = await RandomCuts(server.port, 600, 5000).start()
    lines = [b"line %05d typed through the cuts\n" % i for i in range(3000)]
    try:
        async with AsyncClient(server.base) as direct:
            process = await direct.spawn(["sh", "-c", f"cat > '{got}'"], stdin=True)
        async with AsyncClient(proxy.base, retry=CUT_TOLERANT) as client:
            async with client.attach(process.id) as attachment:

                async def send() -> None:
                    for line in lines:
                        await attachment.write(line)
                    await attachment.close_stdin()

                await asyncio.wait_for(send(), 60)
                info = await asyncio.wait_for(attachment.wait(), 60)
        assert info.exit_code == 0
        assert got.read_bytes() == b"".join(lines), f"cat did not get each line once in order after {proxy.cuts} cuts"
        assert proxy.cuts >= 40, f"only {proxy.cuts} cuts"
    finally:
        await proxy.stop()


async def test_recorded_input_has_each_line_written_through_random_cuts_once_in_order(server: Tetherd) -> None:
    """With ``record_input``, the recording's ``i`` events are the input as applied: once each, in order, whatever the cuts resent."""
    proxy = await RandomCuts(server.port, 600, 5000).start()
    lines = [b"key %04d\n" % i for i in range(1500)]
    try:
        async with AsyncClient(server.base) as direct:
            process = await direct.spawn(["sh", "-c", "cat > /dev/null"], stdin=True, record_input=True)
        assert process.records_input
        async with AsyncClient(proxy.base, retry=CUT_TOLERANT) as client:
            async with client.attach(process.id) as attachment:

                async def send() -> None:
                    for line in lines:
                        await attachment.write(line)
                    await attachment.close_stdin()

                await asyncio.wait_for(send(), 60)
                await asyncio.wait_for(attachment.wait(), 60)
        url = f"{server.base}/v1/processes/{process.id}/recording"
        text = await asyncio.to_thread(lambda: urllib.request.urlopen(url, timeout=WAIT).read().decode())
        events = [json.loads(line) for line in text.splitlines()[1:]]
        typed = "".join(e[2] for e in events if e[1] == "i")
        assert typed == b"".join(lines).decode(), f"input not once each in order after {proxy.cuts} cuts"
        assert proxy.cuts >= 5, f"only {proxy.cuts} cuts"
    finally:
        await proxy.stop()


async def test_a_resume_after_the_stream_expired_fails_and_applies_nothing_twice(
    start_server: Callable[..., Tetherd], tmp_path: Path
) -> None:
    server = start_server("--input-ttl-ms", "300")
    got = tmp_path / "once"
    proxy = await RandomCuts(server.port).start()
    try:
        async with AsyncClient(server.base) as direct:
            process = await direct.spawn(["sh", "-c", f"cat > '{got}'"], stdin=True)
        async with AsyncClient(proxy.base, retry=CUT_TOLERANT) as client:
            async with client.attach(process.id) as attachment:
                await attachment.write(b"once\n")

                async def written() -> None:
                    while not (got.exists() and got.read_bytes() == b"once\n"):
                        await asyncio.sleep(0.02)

                await asyncio.wait_for(written(), WAIT)
                # Away longer than the stream's TTL (300 ms): only time passing shows it.
                proxy.refusing = True
                proxy.cut()
                await asyncio.sleep(1.0)
                proxy.refusing = False
                with pytest.raises(InputExpired) as caught:
                    await asyncio.wait_for(attachment.wait(), WAIT)
                assert caught.value.code == "input_expired"
        assert got.read_bytes() == b"once\n"
    finally:
        await proxy.stop()
