"""run: spawn and attach in one WebSocket (GET /v1/run): output from the first byte, the exit, stdin, refusals with the server's code, the idempotency key, reconnects by id."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any
from urllib.parse import urlencode

import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import InvalidStatus

from tether_client import (
    AsyncClient,
    Client,
    InvalidArgument,
    InvalidRequest,
    NameTaken,
    NotFound,
    SpawnFailed,
    Unauthorized,
    Unreachable,
)
from tether_client.protocol import SUBPROTOCOL, Hello, decode_server_frame

from .conftest import FAST_RETRY, WAIT, Tetherd
from .proxies import AnswerLosingFront, CuttingProxy

# 6 KiB with every character a query string must escape, and more.
PAYLOAD = "".join(f"{i:04d} &+%=#?é/\\ ok\n" for i in range(256))


async def started(client: AsyncClient, marker: str) -> int:
    """How many processes the server knows whose argv mentions ``marker``."""
    return sum(1 for p in await client.list() if marker in " ".join(p.argv))


async def test_run_reads_a_command_that_exits_at_once_from_its_first_byte(client: AsyncClient) -> None:
    marker = "run-first-byte"
    command = f"printf '%s' '{PAYLOAD}'; printf '%s' '{PAYLOAD}' >&2; exit 7 # {marker}"
    async with client.run(command) as attachment:
        assert attachment.connections == 1
        assert attachment.process is not None
        assert attachment.id == attachment.process.id
        assert len(attachment.id) == 32
        out, err = await asyncio.wait_for(
            asyncio.gather(attachment.stdout.read(), attachment.stderr.read()), WAIT
        )
        assert out == PAYLOAD.encode(), f"stdout: {len(out)} bytes, every byte checked"
        assert err == PAYLOAD.encode(), "stderr complete too"
        info = await asyncio.wait_for(attachment.wait(), WAIT)
        assert (info.exit_code, info.reason, info.id) == (7, "exit", attachment.id)
        assert (attachment.stdout.dropped, attachment.stderr.dropped) == (0, 0)
    assert await started(client, marker) == 1


async def test_run_stdin_reaches_cat_and_its_close_ends_it(client: AsyncClient) -> None:
    async with client.run(["cat"], stdin=True) as attachment:
        await attachment.write("through cat\n")
        await attachment.write(PAYLOAD)
        await attachment.close_stdin()
        out = await asyncio.wait_for(attachment.stdout.read(), WAIT)
        assert out == ("through cat\n" + PAYLOAD).encode()
        info = await asyncio.wait_for(attachment.wait(), WAIT)
        assert (info.exit_code, info.reason) == (0, "exit")


@pytest.mark.parametrize(
    ("body", "error", "status", "code"),
    [
        ({"argv": ["/nonexistent/tether-run-test"]}, SpawnFailed, 422, "spawn_failed"),
        ({"argv": ["/etc"]}, SpawnFailed, 422, "cannot_execute"),
        ({"command": "true", "bogus": 1}, InvalidRequest, 400, "invalid_request"),
        ({"argv": []}, InvalidRequest, 400, "invalid_request"),
    ],
)
async def test_a_refused_spawn_raises_the_servers_error_and_code(
    client: AsyncClient, body: dict[str, Any], error: type[Exception], status: int, code: str
) -> None:
    with pytest.raises(error) as caught:
        await asyncio.wait_for(client.run_request(body), WAIT)
    assert (caught.value.status, caught.value.code) == (status, code)  # type: ignore[attr-defined]


async def test_a_name_in_use_is_name_taken_and_the_first_process_is_untouched(client: AsyncClient) -> None:
    async with client.run_request({"argv": ["cat"], "stdin": True, "name": "py-run-name"}) as first:
        with pytest.raises(NameTaken) as caught:
            await asyncio.wait_for(client.run_request({"command": "true", "name": "py-run-name"}), WAIT)
        assert (caught.value.status, caught.value.code) == (409, "name_taken")
        await first.close_stdin()
        assert (await asyncio.wait_for(first.wait(), WAIT)).exit_code == 0


async def test_the_same_idempotency_key_on_two_run_connections_starts_one_process(
    server: Tetherd, client: AsyncClient
) -> None:
    marker = "py-run-same-key"
    request = {"command": f"printf 'once\\n'; cat # {marker}", "stdin": True}
    key = f"py-key-{time.time_ns()}"

    def url(body: dict[str, Any]) -> str:
        query = urlencode({"request": json.dumps(body), "window": 65536})
        return f"ws://127.0.0.1:{server.port}/v1/run?{query}"

    async def hello(body: dict[str, Any]) -> Hello:
        async with connect(
            url(body), subprotocols=[SUBPROTOCOL], additional_headers={"Idempotency-Key": key}  # type: ignore[list-item]
        ) as ws:
            frame = decode_server_frame(await asyncio.wait_for(ws.recv(), WAIT))  # type: ignore[arg-type]
            assert isinstance(frame, Hello)
            return frame

    first = await hello(request)
    second = await hello(request)
    assert second.process.id == first.process.id, "the second attaches to the first's process"
    assert (second.stdout, second.stderr) == (0, 0)
    assert await started(client, marker) == 1
    # The same key with another request is refused before the upgrade.
    with pytest.raises(InvalidStatus) as caught:
        await hello({"command": "true"})
    assert caught.value.response.status_code == 422
    assert json.loads(bytes(caught.value.response.body or b""))["error"]["code"] == "idempotency_conflict"
    await client.kill(first.process.id)


async def test_a_run_whose_answer_is_lost_is_retried_with_the_same_key_and_starts_once(
    server: Tetherd, client: AsyncClient
) -> None:
    front = await AnswerLosingFront(server.port, 1).start()
    marker = "py-run-lost-answer"
    try:
        async with AsyncClient(front.base, retry=FAST_RETRY) as via_front:
            async with via_front.run(f"printf '%s' '{PAYLOAD}' # {marker}") as attachment:
                runs = [r for r in front.requests if r.startswith("GET /v1/run?")]
                assert len(runs) == 2, f"two attempts: {front.requests}"
                out = await asyncio.wait_for(attachment.stdout.read(), WAIT)
                assert out == PAYLOAD.encode(), "output from the first byte"
                assert (await asyncio.wait_for(attachment.wait(), WAIT)).exit_code == 0
        assert await started(client, marker) == 1, "one process for both attempts"
    finally:
        await front.stop()


async def test_a_runs_reconnect_attaches_to_its_process_by_id(server: Tetherd, client: AsyncClient) -> None:
    proxy = await CuttingProxy(server.port).start()
    marker = "py-run-reconnect"
    try:
        async with AsyncClient(proxy.base, retry=FAST_RETRY) as via_proxy:
            async with via_proxy.run(f"cat # {marker}", stdin=True) as attachment:
                await attachment.write("before the cut\n")
                assert await asyncio.wait_for(attachment.stdout.read(15), WAIT) == b"before the cut\n"
                assert proxy.cut() > 0
                # Input handed to the connection that broke may be lost (never
                # repeated): write once the resume has happened.
                async def resumed() -> None:
                    while attachment.connections < 2:
                        await asyncio.sleep(0.01)

                await asyncio.wait_for(resumed(), WAIT)
                await attachment.write("after the cut\n")
                assert await asyncio.wait_for(attachment.stdout.read(14), WAIT) == b"after the cut\n"
                run_line, *rest = proxy.requests
                assert run_line.startswith("GET /v1/run?")
                assert rest, "a reconnect"
                for line in rest:
                    if "/wait" in line:
                        continue  # the exit poll
                    assert line.startswith(f"GET /v1/processes/{attachment.id}/attach?stdout="), line
                assert await started(client, marker) == 1
                await attachment.close_stdin()
                assert (await asyncio.wait_for(attachment.wait(), WAIT)).exit_code == 0
    finally:
        await proxy.stop()


async def test_readonly_is_refused_before_anything_starts(client: AsyncClient) -> None:
    marker = "py-run-readonly"
    with pytest.raises(InvalidArgument):
        await client.run(f"true # {marker}", readonly=True)
    assert await started(client, marker) == 0


async def test_run_carries_the_token_as_attach_does(start_server: Any) -> None:
    secured = start_server("--token", "py-run-secret")
    async with AsyncClient(secured.base, token="py-run-secret", retry=FAST_RETRY) as right:
        async with right.run("printf token-ok") as attachment:
            assert await asyncio.wait_for(attachment.stdout.read(), WAIT) == b"token-ok"
    async with AsyncClient(secured.base, token="wrong", retry=FAST_RETRY) as wrong:
        with pytest.raises(Unauthorized) as caught:
            await asyncio.wait_for(wrong.run("true"), WAIT)
        assert (caught.value.status, caught.value.code) == (401, "unauthorized")


def test_the_blocking_client_runs_too(server: Tetherd) -> None:
    with Client(server.base) as client:
        with client.run(["cat"], stdin=True) as attachment:
            attachment.write("blocking\n")
            attachment.close_stdin()
            assert attachment.stdout.read() == b"blocking\n"
            assert attachment.wait().exit_code == 0
        with pytest.raises(SpawnFailed):
            client.run(["/nonexistent/tether-run-test"])


async def test_leaving_a_runs_block_before_the_exit_kills_its_process_and_an_attach_leaves_it(
    client: AsyncClient,
) -> None:
    async with client.run(["sleep", "600"]) as attachment:
        run_id = attachment.id
        assert attachment.process is not None and attachment.process.id == run_id
    # kill forgets the process once it has exited: it is gone, not running.
    with pytest.raises(NotFound):
        await client.get(run_id)
    spawned = await client.spawn(["sleep", "600"])
    async with client.attach(spawned.id):
        pass
    assert (await client.get(spawned.id)).status == "running"
    await client.kill(spawned.id)


def test_the_blocking_run_has_an_id_and_its_block_kills_an_unexited_process(server: Tetherd) -> None:
    with Client(server.base) as client:
        with client.run(["sleep", "600"]) as attachment:
            run_id = attachment.id
            assert attachment.process is not None and attachment.process.id == run_id
            assert client.get(run_id).status == "running"
        with pytest.raises(NotFound):
            client.get(run_id)
        with client.run(["echo", "done"]) as finished:
            assert finished.stdout.read() == b"done\n"
            finished.wait()
        assert client.get(finished.id).reason == "exit"


async def test_a_run_that_cannot_connect_is_unreachable_without_its_request_in_the_message() -> None:
    from .test_errors import _closed_port

    async with AsyncClient(f"http://127.0.0.1:{_closed_port()}", retry=FAST_RETRY) as nobody:
        with pytest.raises(Unreachable) as caught:
            await asyncio.wait_for(nobody.run(["echo", "secret-argument"]), WAIT)
    assert "/v1/run?request=…" in str(caught.value)
    assert "secret-argument" not in str(caught.value)
