"""The bounds of issue 48 one by one, beyond the shared hostile list (test_hostile.py): each against the real tetherd where it is normal behaviour, against a fake server where the point is a lying one."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

import msgpack
import pytest

from tether_client import (
    DEFAULT_MAX_ANSWER_BYTES,
    AsyncClient,
    Client,
    InvalidArgument,
    ProtocolError,
    RetryPolicy,
    TransportError,
)
from tether_client import http_api
from tether_client.output import StreamState
from tether_client.protocol import MAX_ITEMS, Data, ErrorFrame, FrameDecodeError, decode_server_frame, too_many_items

from .conftest import FAST_RETRY, REPO, WAIT, Tetherd
from .hostile_server import ACTS, PROCESS, HostileServer, Peer, hello_with_argv


async def test_an_answer_over_the_bound_is_a_protocol_error_and_not_retried(server: Tetherd) -> None:
    assert DEFAULT_MAX_ANSWER_BYTES == 64 << 20
    async with AsyncClient(server.base, retry=FAST_RETRY) as client:
        process = await client.spawn(["true"])
        assert (await client.get(process.id)).id == process.id  # the default bound reads it
    # A process object is a few hundred bytes: 64 is too few.
    async with AsyncClient(server.base, retry=FAST_RETRY, max_answer_bytes=64) as small:
        started = time.monotonic()
        with pytest.raises(ProtocolError, match="longer than 64 bytes"):
            await small.get(process.id)
        assert time.monotonic() - started < 1.0, "retried as if transient"
    with Client(server.base, retry=FAST_RETRY, max_answer_bytes=64) as blocking:
        with pytest.raises(ProtocolError, match="max_answer_bytes"):
            blocking.list()
    with pytest.raises(InvalidArgument):
        AsyncClient(server.base, max_answer_bytes=0)


async def test_read_output_reads_what_is_retained_and_ends_at_its_timeout(server: Tetherd) -> None:
    async with AsyncClient(server.base, retry=FAST_RETRY) as client:
        done = await client.spawn(["sh", "-c", "printf abc; printf err >&2"])
        await asyncio.wait_for(client.wait(done.id), WAIT)
        assert await client.read_output(done.id) == b"abc"
        assert await client.read_output(done.id, "stderr", 1, timeout=5) == b"rr"
    trickle = await HostileServer("http_trickle").start()
    try:
        with Client(trickle.base, token="t", retry=RetryPolicy.none()) as blocking:
            started = time.monotonic()
            with pytest.raises(TransportError) as caught:
                blocking.read_output(done.id, timeout=0.5)
            assert caught.value.timeout
            assert time.monotonic() - started < 2.0
    finally:
        await trickle.stop()


async def test_exec_without_a_deadline_is_bounded_by_the_silence_of_its_answer(
    start_server: Callable[..., Tetherd], monkeypatch: pytest.MonkeyPatch
) -> None:
    # The silence allowed is the request timeout plus a grace of 60 s; with
    # no grace and a request timeout of 1 s, a silent server fails the call
    # in about 1 s...
    monkeypatch.setattr(http_api, "EXEC_SILENCE_GRACE", 0.0)
    silent = await HostileServer("http_silent").start()
    try:
        async with AsyncClient(silent.base, token="t", retry=FAST_RETRY, request_timeout=1.0) as client:
            started = time.monotonic()
            with pytest.raises(TransportError, match="stopped for 1s"):
                await asyncio.wait_for(client.exec("true"), WAIT)
            assert time.monotonic() - started < 3.0
    finally:
        await silent.stop()
    # ...while a command that runs longer than that is answered, because
    # the real server sends a space every ping interval until the document.
    spaced = start_server("--ping-interval-ms", "200")
    async with AsyncClient(spaced.base, retry=FAST_RETRY, request_timeout=1.0) as client:
        result = await asyncio.wait_for(client.exec("sleep 2.5; echo late"), WAIT)
        assert (result.stdout, result.exit_code) == (b"late\n", 0)


async def test_the_hello_and_its_input_ack_come_within_the_connect_timeout() -> None:
    async def hello_without_ack(server: HostileServer, peer: Peer, target: str) -> None:
        await peer.frame({"type": "hello", "version": 1, "process": PROCESS, "stdout": 0, "stderr": 0})
        await peer.hold()  # no input_ack, although the URL asks for numbered input

    fake = await HostileServer("ws_hello_without_ack", {"ws_hello_without_ack": hello_without_ack}).start()
    try:
        async with AsyncClient(fake.base, token="t", retry=FAST_RETRY) as client:
            started = time.monotonic()
            with pytest.raises(TransportError, match="no hello within"):
                await client.attach(
                    PROCESS["id"], connect_timeout=0.5, reconnect=RetryPolicy(budget=0.5)
                ).__aenter__()
            assert time.monotonic() - started < 2.5
    finally:
        await fake.stop()


def test_data_beyond_the_credit_granted_is_refused_even_once_consumed() -> None:
    async def check() -> None:
        state = StreamState("stdout", 0, 8, asyncio.Event(), lambda: None)
        state.push_data(Data("stdout", 0, b"12345678"))
        assert state.pop() is not None  # consumed: 8 bytes owed, not yet granted
        with pytest.raises(ProtocolError, match="credit window"):
            state.push_data(Data("stdout", 8, b"9"))
        assert state.take_credit() == 8  # granted: the server may send 8 more
        state.push_data(Data("stdout", 8, b"9"))

    asyncio.run(check())


def test_decoded_counts_are_bounded_not_only_bytes() -> None:
    # Counted from the headers, all levels together, before decoding: a
    # declared count is enough.
    before, after = hello_with_argv(MAX_ITEMS + 1)
    assert too_many_items(before) is not None
    with pytest.raises(FrameDecodeError) as too_many:
        decode_server_frame(before + b"\xa0" * (MAX_ITEMS + 1) + after)
    assert too_many.value.code == "invalid_frame"
    assert "items" in str(too_many.value)
    before, after = hello_with_argv(1000)
    assert len(decode_server_frame(before + b"\xa0" * 1000 + after).process.argv) == 1000  # type: ignore[union-attr]
    # Map entries count too, at any level: a field the client ignores holds
    # as many as the argv would.
    half = MAX_ITEMS // 2
    wide = msgpack.packb({"type": "error", "code": "x", "message": "y", "a": [0] * half, "b": {str(i): 0 for i in range(half)}})
    with pytest.raises(FrameDecodeError, match="items"):
        decode_server_frame(wide)
    ignored = msgpack.packb({"type": "error", "code": "x", "message": "y", "a": [0] * half})
    assert isinstance(decode_server_frame(ignored), ErrorFrame)
    with pytest.raises(FrameDecodeError):
        decode_server_frame(b"\x91" * 100_000 + b"\xc0")


def test_the_acts_of_the_fake_server_are_the_lists() -> None:
    # Every act the suite's fake server performs is one the list documents.
    readme = (REPO / "tests" / "hostile" / "README.md").read_text()
    for act in [*ACTS, "tcp_refused"]:
        assert f"`{act}`" in readme, act
