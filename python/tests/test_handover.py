"""The server hands over to a new binary in place (issue 43) under an attached Python client: the client is closed with 1012, reconnects by itself, and every output byte and input line arrives once, in order."""

from __future__ import annotations

import asyncio
import json
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path

from tether_client import AsyncClient, RetryPolicy

from .conftest import WAIT, Tetherd

PATIENT = RetryPolicy(budget=30.0, initial_backoff=0.01, max_backoff=0.1, unreachable_budget=30.0)


def hand_over(base: str) -> dict[str, object]:
    """``POST /v1/admin/upgrade`` to the binary the server was started from; its answer (202)."""
    request = urllib.request.Request(f"{base}/v1/admin/upgrade", data=b"{}", method="POST")
    with urllib.request.urlopen(request, timeout=WAIT) as response:
        assert response.status == 202
        answer: dict[str, object] = json.loads(response.read())
        return answer


def handovers(base: str) -> int:
    """The server's handover count, or -1 while a call finds no server: a connection the old binary accepted as it stopped is closed unanswered, as any HTTP server may close one, and the call is simply asked again (the client library retries the same way)."""
    try:
        with urllib.request.urlopen(f"{base}/v1/admin/server", timeout=WAIT) as response:
            return int(json.loads(response.read())["handovers"])
    except (ConnectionError, urllib.error.URLError):
        return -1


async def test_output_and_input_cross_two_handovers_once_each_in_order(
    start_server: Callable[..., Tetherd], tmp_path: Path
) -> None:
    server = start_server()
    got = tmp_path / "got"
    lines = [b"line %04d\n" % i for i in range(400)]
    async with AsyncClient(server.base, retry=PATIENT) as client:
        counter = await client.spawn(["sh", "-c", "i=1; while [ $i -le 300 ]; do echo $i; i=$((i+1)); sleep 0.01; done"])
        cat = await client.spawn(["sh", "-c", f"cat > '{got}'"], stdin=True)
        async with client.attach(counter.id) as reading, client.attach(cat.id) as writing:

            reader = asyncio.create_task(reading.stdout.read())

            async def hand_over_and_wait(round_: int) -> None:
                await asyncio.to_thread(hand_over, server.base)

                async def served() -> None:
                    while await asyncio.to_thread(handovers, server.base) < round_:
                        await asyncio.sleep(0.01)

                # The new binary serves once its count has moved (bounded).
                await asyncio.wait_for(served(), WAIT)

            # Half the lines before the first handover, the rest while it runs.
            for line in lines[:200]:
                await writing.write(line)
            first = asyncio.create_task(hand_over_and_wait(1))
            for line in lines[200:]:
                await writing.write(line)
            await first
            await hand_over_and_wait(2)
            await writing.close_stdin()
            output = await asyncio.wait_for(reader, WAIT)
            assert (await asyncio.wait_for(writing.wait(), WAIT)).exit_code == 0
            assert (await asyncio.wait_for(reading.wait(), WAIT)).exit_code == 0
    assert output == b"".join(b"%d\n" % i for i in range(1, 301))
    assert got.read_bytes() == b"".join(lines)
