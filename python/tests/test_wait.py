"""wait returns the real exit across server-side long-poll expiries and across 503 answers from a proxy, never a failure dressed up as an exit; the unattached timeout set while a process runs."""

from __future__ import annotations

import asyncio
import time

import pytest

from tether_client import AsyncClient, InvalidArgument, NotRunning, RetriesExhausted, RetryPolicy

from .conftest import FAST_RETRY, WAIT, Tetherd
from .proxies import AnswerLosingFront, CuttingProxy, FlakyFront


async def test_wait_outlasts_server_side_long_poll_expiries(start_server) -> None:  # type: ignore[no-untyped-def]
    daemon: Tetherd = start_server("--max-wait-ms", "200")
    async with AsyncClient(daemon.base, retry=FAST_RETRY) as client:
        process = await client.spawn("sleep 1.5; exit 4")
        # One long-poll: the server caps it at 200 ms and says "running".
        started = time.monotonic()
        early = await client.wait(process.id, timeout=0.1)
        assert early.status == "running"
        assert time.monotonic() - started < 1.0
        # wait() asks for 25 s each time and gets 200 ms: it loops across
        # several expiries to the real exit.
        info = await asyncio.wait_for(client.wait(process.id), WAIT)
        assert (info.status, info.exit_code, info.reason) == ("exited", 4, "exit")
        assert time.monotonic() - started >= 1.0


async def test_wait_retries_503s_and_returns_the_real_exit(server: Tetherd, client: AsyncClient) -> None:
    process = await client.spawn("read line; exit 5", stdin=True)
    front = await FlakyFront(server.port, failures=3).start()
    try:
        async with AsyncClient(front.base, retry=FAST_RETRY) as flaky:
            waiter = asyncio.create_task(flaky.wait(process.id))
            deadline = time.monotonic() + WAIT
            # Once the 503s are through, the long-poll reaches the server.
            while front.seen < 4:
                assert time.monotonic() < deadline, "wait did not retry"
                assert not waiter.done(), f"wait ended early: {waiter}"
                await asyncio.sleep(0.01)
            assert not waiter.done(), "a 503 was reported as the exit"
            await client.close_stdin(process.id)
            info = await asyncio.wait_for(waiter, WAIT)
            assert (info.exit_code, info.reason) == (5, "exit")
    finally:
        await front.stop()


async def test_wait_gives_up_on_a_proxy_that_only_answers_503(server: Tetherd, client: AsyncClient) -> None:
    process = await client.spawn(["sleep", "30"])
    front = await FlakyFront(server.port, failures=10**9).start()
    retry = RetryPolicy(budget=0.5, initial_backoff=0.02, max_backoff=0.1)
    try:
        async with AsyncClient(front.base, retry=retry) as flaky:
            with pytest.raises(RetriesExhausted) as caught:
                await asyncio.wait_for(flaky.wait(process.id), WAIT)
            assert (caught.value.status, caught.value.code) == (503, "overloaded")
            assert caught.value.attempts >= 2
    finally:
        await front.stop()
        await client.kill(process.id)


async def test_wait_survives_a_connection_reset_mid_long_poll(server: Tetherd, client: AsyncClient) -> None:
    process = await client.spawn("read line; exit 6", stdin=True)
    proxy = await CuttingProxy(server.port).start()
    try:
        async with AsyncClient(proxy.base, retry=FAST_RETRY) as through:
            waiter = asyncio.create_task(through.wait(process.id))
            deadline = time.monotonic() + WAIT
            for expected in (1, 2):
                # A long-poll is open: reset it.
                while proxy.accepted < expected or not proxy.cut():
                    assert time.monotonic() < deadline, "no long-poll to cut"
                    assert not waiter.done(), f"wait ended early: {waiter}"
                    await asyncio.sleep(0.01)
            while proxy.accepted < 3:
                assert time.monotonic() < deadline, "wait did not retry after the reset"
                await asyncio.sleep(0.01)
            assert not waiter.done(), "a reset was reported as the exit"
            await client.close_stdin(process.id)
            info = await asyncio.wait_for(waiter, WAIT)
            assert (info.exit_code, info.reason) == (6, "exit")
    finally:
        await proxy.stop()


async def test_a_spawn_whose_answer_is_lost_is_retried_and_starts_once(
    server: Tetherd, client: AsyncClient
) -> None:
    marker = f"spawn-once-{time.monotonic_ns()}"
    front = await AnswerLosingFront(server.port, lose=1).start()
    try:
        async with AsyncClient(front.base, retry=FAST_RETRY) as lossy:
            process = await asyncio.wait_for(lossy.spawn(["sh", "-c", f"echo {marker}"]), WAIT)
        assert front.seen >= 2, "the first answer was not lost"
        matching = [p for p in await client.list() if marker in " ".join(p.argv)]
        assert [p.id for p in matching] == [process.id], "the command started more than once"
    finally:
        await front.stop()


async def test_set_unattached_timeout_ends_an_unattached_process_and_none_keeps_one(client: AsyncClient) -> None:
    ending = await client.spawn(["sleep", "30"])
    assert (await client.set_unattached_timeout(ending.id, 0.2)).id == ending.id
    final = await asyncio.wait_for(client.wait(ending.id), WAIT)
    assert final.reason == "unattached"
    kept = await client.spawn_request({"argv": ["sleep", "30"], "unattached_timeout_ms": 1000})
    await client.set_unattached_timeout(kept.id, None)
    assert (await client.wait(kept.id, timeout=2.0)).status == "running"
    await client.remove(kept.id, force=True)
    with pytest.raises(NotRunning):
        await client.set_unattached_timeout(ending.id, None)
    with pytest.raises(InvalidArgument):
        await client.set_unattached_timeout(ending.id, 0)
