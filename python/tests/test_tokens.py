"""Scoped tokens: ``mint_token`` gives a token that reaches one process with the rights asked for, and nothing else."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterator

import pytest

from tether_client import (
    AsyncClient,
    Client,
    Data,
    Forbidden,
    InvalidArgument,
    InvalidRequest,
    NotFound,
    Unauthorized,
)

from .conftest import FAST_RETRY, WAIT, Tetherd

OPERATOR = "python-operator-token"


@pytest.fixture(scope="module")
def guarded() -> Iterator[Tetherd]:
    """A tetherd with an operator token: the one kind of server that mints."""
    daemon = Tetherd("--token", OPERATOR)
    yield daemon
    daemon.stop()


async def until(condition_met: Callable[[], bool], what: str) -> None:
    """Waits, bounded by WAIT, until ``condition_met()`` is true."""
    deadline = time.monotonic() + WAIT
    while not condition_met():
        assert time.monotonic() < deadline, f"{what} did not happen within {WAIT} s"
        await asyncio.sleep(0.02)


async def test_a_minted_token_names_its_process_its_rights_and_its_expiry(guarded: Tetherd) -> None:
    async with AsyncClient(guarded.base, token=OPERATOR, retry=FAST_RETRY) as operator:
        process = await operator.spawn("sleep 30")
        before_ms = time.time() * 1000
        minted = await operator.mint_token(process.id, ["read", "write"], ttl=60)
        assert minted.process == process.id
        assert set(minted.rights) >= {"read", "write"} and "kill" not in minted.rights
        assert minted.token.startswith("tether1.") and minted.token_id
        assert before_ms + 55_000 <= minted.expires_at_ms <= time.time() * 1000 + 65_000
        await operator.kill(process.id)


async def test_a_read_only_token_reads_the_output_but_is_refused_stdin(guarded: Tetherd) -> None:
    async with AsyncClient(guarded.base, token=OPERATOR, retry=FAST_RETRY) as operator:
        process = await operator.spawn("echo visible; read -r line; echo \"after:$line\"", stdin=True)
        minted = await operator.mint_token(process.id, ["read"])
        async with AsyncClient(guarded.base, token=minted.token, retry=FAST_RETRY) as reader:
            assert (await reader.get(process.id)).id == process.id
            with pytest.raises(Forbidden) as caught:
                await reader.write_stdin(process.id, "scoped\n")
            assert (caught.value.status, caught.value.code) == (403, "missing_right")
            async with reader.attach(process.id) as attachment:
                # Over the WebSocket the stdin frame gets an error frame, and
                # the attachment carries on.
                await attachment.write("scoped\n")
                await until(lambda: attachment.last_rejection is not None, "the refusal of stdin")
                assert attachment.last_rejection is not None
                assert attachment.last_rejection[0] == "missing_right"
                # Only the operator's line reaches the program.
                await operator.write_stdin(process.id, "operator\n")
                out = b""
                async for chunk in attachment.stdout:
                    if isinstance(chunk, Data):
                        out += chunk.data
                info = await asyncio.wait_for(attachment.wait(), WAIT)
        assert out == b"visible\nafter:operator\n"
        assert info.exit_code == 0


async def test_a_token_for_one_process_is_out_of_scope_for_any_other(guarded: Tetherd) -> None:
    async with AsyncClient(guarded.base, token=OPERATOR, retry=FAST_RETRY) as operator:
        mine = await operator.spawn("sleep 30")
        other = await operator.spawn("sleep 30")
        minted = await operator.mint_token(mine.id, ["read", "write", "kill"])
        async with AsyncClient(guarded.base, token=minted.token, retry=FAST_RETRY) as scoped:
            refused = [
                scoped.get(other.id),
                scoped.wait(other.id, timeout=0.1),
                scoped.signal(other.id, "TERM"),
                scoped.kill(other.id),
                scoped.attach(other.id).__aenter__(),
                scoped.list(),
                scoped.spawn("true"),
                scoped.mint_token(mine.id, ["read"]),
            ]
            for call in refused:
                with pytest.raises(Forbidden) as caught:
                    await asyncio.wait_for(call, WAIT)
                assert (caught.value.status, caught.value.code) == (403, "out_of_scope")
            # Its own process it reaches, with every right it was given.
            assert (await scoped.get(mine.id)).status == "running"
            killed = await scoped.kill(mine.id)
            assert killed.reason == "killed"
        assert (await operator.get(other.id)).status == "running"
        await operator.kill(other.id)


async def test_an_expired_or_unknown_token_is_unauthorized(guarded: Tetherd) -> None:
    async with AsyncClient(guarded.base, token=OPERATOR, retry=FAST_RETRY) as operator:
        process = await operator.spawn("sleep 30")
        minted = await operator.mint_token(process.id, ["read"], ttl=0.5)
        async with AsyncClient(guarded.base, token=minted.token, retry=FAST_RETRY) as scoped:
            assert (await scoped.get(process.id)).status == "running"
            expired: list[Unauthorized] = []

            async def refused() -> bool:
                try:
                    await scoped.get(process.id)
                except Unauthorized as e:
                    expired.append(e)
                    return True
                return False

            deadline = time.monotonic() + WAIT
            while not await refused():
                assert time.monotonic() < deadline, "the token never expired"
                await asyncio.sleep(0.05)
            assert (expired[0].status, expired[0].code) == (401, "token_expired")
            with pytest.raises(Unauthorized) as caught:
                await scoped.attach(process.id).__aenter__()
            assert caught.value.code == "token_expired"
        async with AsyncClient(guarded.base, token="tether1.not.minted", retry=FAST_RETRY) as stranger:
            with pytest.raises(Unauthorized) as caught:
                await stranger.get(process.id)
            assert (caught.value.status, caught.value.code) == (401, "unauthorized")
        assert (await operator.get(process.id)).status == "running"
        await operator.kill(process.id)


async def test_mint_checks_its_request(guarded: Tetherd) -> None:
    async with AsyncClient(guarded.base, token=OPERATOR, retry=FAST_RETRY) as operator:
        process = await operator.spawn("sleep 30")
        for rights, ttl in [("read", None), (["read"], 0.0), (["read"], -1.0), (["read"], float("inf"))]:
            with pytest.raises(InvalidArgument):
                await operator.mint_token(process.id, rights, ttl)
        with pytest.raises(InvalidRequest) as bad:
            await operator.mint_token(process.id, ["fly"])
        assert bad.value.status == 400
        with pytest.raises(NotFound):
            await operator.mint_token("no-such-process", ["read"])
        await operator.kill(process.id)


def test_the_blocking_client_mints_too(guarded: Tetherd) -> None:
    with Client(guarded.base, token=OPERATOR, retry=FAST_RETRY) as operator:
        process = operator.spawn("echo minted-output")
        minted = operator.mint_token(process.id, ["read"], ttl=60)
        with Client(guarded.base, token=minted.token, retry=FAST_RETRY) as scoped:
            assert scoped.wait(process.id).exit_code == 0
            with scoped.attach(process.id) as attachment:
                assert attachment.stdout.read() == b"minted-output\n"
            with pytest.raises(Forbidden) as caught:
                scoped.list()
            assert caught.value.code == "out_of_scope"
