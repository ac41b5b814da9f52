"""Bad input gets a clear exception carrying the server's code, never a hang."""

from __future__ import annotations

import asyncio
import socket
import time

import pytest

from tether_client import (
    AsyncClient,
    InvalidArgument,
    NotFound,
    NotRunning,
    RetryPolicy,
    StdinUnavailable,
    TransportError,
    Unauthorized,
    Unreachable,
)

from .conftest import FAST_RETRY, WAIT, Tetherd

UNKNOWN = "no-such-process"


async def test_an_unknown_process_id_is_not_found_everywhere_at_once(client: AsyncClient) -> None:
    started = time.monotonic()
    calls = [
        client.get(UNKNOWN),
        client.wait(UNKNOWN),
        client.kill(UNKNOWN),
        client.signal(UNKNOWN, "TERM"),
        client.attach(UNKNOWN).__aenter__(),
    ]
    for call in calls:
        with pytest.raises(NotFound) as caught:
            await asyncio.wait_for(call, WAIT)
        assert (caught.value.status, caught.value.code) == (404, "not_found")
        assert caught.value.message
    assert time.monotonic() - started < 5, "a 404 was retried"


async def test_a_wrong_token_is_unauthorized_and_the_right_one_from_the_environment_works(
    start_server,
    monkeypatch: pytest.MonkeyPatch,  # type: ignore[no-untyped-def]
) -> None:
    daemon: Tetherd = start_server("--token", "s3cret")
    async with AsyncClient(daemon.base, token="wrong", retry=FAST_RETRY) as wrong:
        with pytest.raises(Unauthorized) as caught:
            await asyncio.wait_for(wrong.exec("echo hi"), WAIT)
        assert (caught.value.status, caught.value.code) == (401, "unauthorized")
        with pytest.raises(Unauthorized):
            await asyncio.wait_for(wrong.list(), WAIT)
    async with AsyncClient(daemon.base, retry=FAST_RETRY) as anonymous:
        with pytest.raises(Unauthorized):
            await asyncio.wait_for(anonymous.get(UNKNOWN), WAIT)
    monkeypatch.setenv("TETHER_TOKEN", "s3cret")
    async with AsyncClient(daemon.base, retry=FAST_RETRY) as right:
        assert right.token == "s3cret"
        result = await asyncio.wait_for(right.exec("echo hi"), WAIT)
        assert result.stdout == b"hi\n"
        # The WebSocket carries the token too; a wrong one is refused there.
        process = await right.spawn(["sleep", "5"])
        async with AsyncClient(daemon.base, token="wrong", retry=FAST_RETRY) as wrong:
            with pytest.raises(Unauthorized):
                await asyncio.wait_for(wrong.attach(process.id).__aenter__(), WAIT)
        await right.kill(process.id)


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def test_a_server_that_is_not_running_is_reported_in_well_under_a_second() -> None:
    url = f"http://127.0.0.1:{_closed_port()}"
    # Default policy: a refused connection to a server that never answered
    # is retried for 0.4 s (FIRST_CONTACT_REFUSED), as the Rust client does.
    async with AsyncClient(url) as client:
        calls = (client.exec("echo hi"), client.get("x"), client.attach("x").__aenter__(), client.run("true").__aenter__())
        for call in calls:
            started = time.monotonic()
            with pytest.raises(Unreachable) as caught:
                await asyncio.wait_for(call, WAIT)
            elapsed = time.monotonic() - started
            assert isinstance(caught.value, TransportError) and caught.value.refused
            assert "is tetherd running" in str(caught.value)
            assert caught.value.attempts >= 2
            assert elapsed < 1.0, f"took {elapsed:.1f}s"
    async with AsyncClient(url, retry=RetryPolicy.none()) as client:
        for call in (client.get("x"), client.wait("x"), client.attach("x").__aenter__()):
            with pytest.raises(Unreachable):
                await asyncio.wait_for(call, WAIT)


async def test_requests_the_server_refuses_raise_the_matching_class(client: AsyncClient) -> None:
    done = await client.spawn(["true"])
    await asyncio.wait_for(client.wait(done.id), WAIT)
    with pytest.raises(NotRunning) as not_running:
        await client.signal(done.id, "TERM")
    assert not_running.value.code == "not_running"
    sleeper = await client.spawn(["sleep", "5"])
    with pytest.raises(StdinUnavailable) as no_stdin:
        await client.write_stdin(sleeper.id, b"x")
    assert no_stdin.value.code == "stdin_unavailable"
    await client.kill(sleeper.id)


async def test_bad_arguments_are_refused_before_anything_is_sent(client: AsyncClient) -> None:
    with pytest.raises(InvalidArgument):
        await client.signal("x", "BOGUS")
    with pytest.raises(InvalidArgument):
        await client.resize("x", 0, 10)
    with pytest.raises(InvalidArgument):
        await client.spawn([])
    with pytest.raises(InvalidArgument):
        await client.spawn("true", timeout=0)
    with pytest.raises(InvalidArgument):
        AsyncClient("ftp://example")
    # InvalidArgument is a ValueError too.
    with pytest.raises(ValueError):
        await client.attach("x", window=0).__aenter__()
