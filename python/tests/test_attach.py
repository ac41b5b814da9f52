"""attach: per-stream credit, resume after a cut connection with no repeat and no gap, dropped notices, stdin, signals, kill."""

from __future__ import annotations

import asyncio

import pytest

from tether_client import (
    AsyncClient,
    Data,
    Dropped,
    InvalidArgument,
    NotFound,
    RetryPolicy,
    StillRunning,
)

from .conftest import FAST_RETRY, WAIT, Tetherd
from .proxies import CuttingProxy


def seq_bytes(n: int) -> bytes:
    """What `seq n` prints."""
    return b"".join(b"%d\n" % i for i in range(1, n + 1))


async def test_a_cut_connection_resumes_with_every_byte_once(server: Tetherd) -> None:
    proxy = await CuttingProxy(server.port).start()
    lines = 200_000
    expected = seq_bytes(lines)
    try:
        async with AsyncClient(proxy.base, retry=FAST_RETRY) as client:
            # Block mode with small retention: the program is paced by this
            # attachment, so plenty is still unsent whenever a cut comes.
            process = await client.spawn(
                f"seq {lines}; seq {lines} >&2", overflow="block", retain_bytes=64 * 1024
            )
            async with client.attach(process.id, window=16 * 1024) as attachment:
                cuts = [100_000, 400_000, 900_000]
                received = bytearray()

                async def read_stdout() -> None:
                    # In block mode stdout ends only after stderr is read too:
                    # read stdout up to its known length.
                    while len(received) < len(expected):
                        data = await attachment.stdout.read(8192)
                        assert data, f"stdout ended early at {len(received)}"
                        received.extend(data)
                        if cuts and len(received) >= cuts[0]:
                            assert proxy.cut() > 0, "nothing to cut"
                            cuts.pop(0)

                await asyncio.wait_for(read_stdout(), WAIT)
                assert not cuts, "every cut happened mid-stream"
                assert bytes(received) == expected, "stdout: no gap, no duplicate"
                # One more cut while stderr is pending, then read it all.
                proxy.cut()
                err = await asyncio.wait_for(attachment.stderr.read(), WAIT)
                assert err == expected, "stderr: no gap, no duplicate"
                assert await asyncio.wait_for(attachment.stdout.read(), WAIT) == b""
                info = await asyncio.wait_for(attachment.wait(), WAIT)
                assert info.exit_code == 0
                assert (attachment.stdout.dropped, attachment.stderr.dropped) == (0, 0)
                assert attachment.connections >= 5, f"resumed {attachment.connections - 1} times"
        assert proxy.accepted >= 5
    finally:
        await proxy.stop()


async def test_stderr_keeps_arriving_while_stdout_is_not_read(client: AsyncClient) -> None:
    size = 8 << 20
    window = 64 << 10
    # Both streams write at once; block mode with a small retention means
    # unread stdout really does wait on the server.
    process = await client.spawn(
        f"yes out | head -c {size} & yes err | head -c {size} >&2; wait",
        overflow="block",
        retain_bytes=256 << 10,
    )
    async with client.attach(process.id, window=window) as attachment:
        got = 0

        async def read_stderr() -> None:
            nonlocal got
            while got < size:
                data = await attachment.stderr.read(65536)
                assert data, "stderr ended early"
                assert set(data) <= set(b"err\n")
                got += len(data)
                assert attachment.stdout.buffered <= window, "stdout overflowed its window"

        await asyncio.wait_for(read_stderr(), WAIT)
        assert got == size
        # stdout was held on the server meanwhile, and is all still there.
        assert attachment.stdout.offset == 0
        out = await asyncio.wait_for(attachment.stdout.read(), WAIT)
        assert len(out) == size and set(out) <= set(b"out\n")
        assert (await asyncio.wait_for(attachment.wait(), WAIT)).exit_code == 0


async def test_evicted_output_is_reported_as_one_dropped_notice(client: AsyncClient) -> None:
    lines = 50_000
    expected = seq_bytes(lines)
    process = await client.spawn(f"seq {lines}", retain_bytes=4096)
    info = await asyncio.wait_for(client.wait(process.id), WAIT)
    assert info.stdout_bytes == len(expected)
    async with client.attach(process.id) as attachment:
        items = [c async for c in attachment.stdout]
    first = items[0]
    assert isinstance(first, Dropped)
    assert (first.stream, first.offset) == ("stdout", 0)
    tail = b"".join(c.data for c in items[1:] if isinstance(c, Data))
    assert all(isinstance(c, Data) for c in items[1:])
    assert first.length + len(tail) == len(expected)
    assert tail == expected[first.length :]
    assert 0 < len(tail) <= 4096


async def test_a_late_attach_from_saved_offsets_gets_only_new_bytes(client: AsyncClient) -> None:
    process = await client.spawn("printf 'hello world'")
    await asyncio.wait_for(client.wait(process.id), WAIT)
    async with client.attach(process.id, stdout_offset=6) as attachment:
        assert await asyncio.wait_for(attachment.stdout.read(), WAIT) == b"world"


async def test_stdin_over_the_attachment_and_over_http(client: AsyncClient) -> None:
    process = await client.spawn("cat; echo end >&2", stdin=True)
    async with client.attach(process.id) as attachment:
        await attachment.write(b"via websocket\n")
        await client.write_stdin(process.id, "via http\n")
        first = await asyncio.wait_for(attachment.stdout.read(100), WAIT)
        await attachment.close_stdin()
        rest = await asyncio.wait_for(attachment.stdout.read(), WAIT)
        text = first + rest
        assert b"via websocket\n" in text and b"via http\n" in text
        assert await asyncio.wait_for(attachment.stderr.read(), WAIT) == b"end\n"
        assert (await attachment.wait()).exit_code == 0


async def test_signals_reach_the_process_and_kill_reports_killed(client: AsyncClient) -> None:
    process = await client.spawn(
        "trap 'echo got TERM; exit 7' TERM; echo ready; while :; do sleep 0.05; done"
    )
    async with client.attach(process.id) as attachment:
        assert await asyncio.wait_for(attachment.stdout.read(6), WAIT) == b"ready\n"
        await attachment.signal("SIGTERM")
        assert await asyncio.wait_for(attachment.stdout.read(), WAIT) == b"got TERM\n"
        assert (await attachment.wait()).exit_code == 7
    sleeper = await client.spawn(["sleep", "30"])
    assert (await client.get(sleeper.id)).status == "running"
    assert sleeper.id in {p.id for p in await client.list()}
    info = await asyncio.wait_for(client.kill(sleeper.id), WAIT)
    assert (info.reason, info.status) == ("killed", "exited")
    # kill keeps the process, as `tether kill` does; remove forgets it.
    assert (await client.get(sleeper.id)).reason == "killed"
    await client.remove(sleeper.id)
    with pytest.raises(NotFound):
        await client.get(sleeper.id)


async def test_remove_refuses_a_running_process_unless_forced(client: AsyncClient) -> None:
    sleeper = await client.spawn(["sleep", "30"])
    with pytest.raises(StillRunning) as refused:
        await client.remove(sleeper.id)
    assert refused.value.code == "still_running"
    info = await asyncio.wait_for(client.remove(sleeper.id, force=True), WAIT)
    assert info.reason == "killed"
    assert sleeper.id not in {p.id for p in await client.list()}


async def test_a_read_only_attachment_refuses_input_locally(client: AsyncClient) -> None:
    process = await client.spawn("sleep 5", stdin=True)
    try:
        async with client.attach(process.id, readonly=True) as attachment:
            with pytest.raises(InvalidArgument):
                await attachment.write(b"x")
            with pytest.raises(InvalidArgument):
                await attachment.signal("INT")
            with pytest.raises(InvalidArgument):
                await attachment.resize(0, 10)
    finally:
        await client.kill(process.id)


async def test_an_attachment_fails_clearly_when_its_server_is_gone(start_server) -> None:  # type: ignore[no-untyped-def]
    daemon = start_server()
    retry = RetryPolicy(budget=1.0, initial_backoff=0.05, max_backoff=0.2, unreachable_budget=1.0)
    async with AsyncClient(daemon.base, retry=retry) as client:
        process = await client.spawn("echo hi; sleep 30")
        attachment = await client.attach(process.id)
        assert await asyncio.wait_for(attachment.stdout.read(3), WAIT) == b"hi\n"
        daemon.stop()
        from tether_client import RetriesExhausted

        with pytest.raises(RetriesExhausted):
            await asyncio.wait_for(attachment.stdout.read(), WAIT)
        with pytest.raises(RetriesExhausted):
            await asyncio.wait_for(attachment.wait(), WAIT)
        await attachment.close()


async def test_a_discarded_stream_never_holds_the_process_back(client: AsyncClient) -> None:
    size = 4 << 20
    # Block mode: unread stderr would stop the program once its retention
    # filled; discarded, it is credited and thrown away.
    process = await client.spawn(
        f"head -c {size} /dev/zero >&2; echo done", overflow="block", retain_bytes=64 << 10
    )
    async with client.attach(process.id, window=16 << 10) as attachment:
        attachment.stderr.discard()
        assert await asyncio.wait_for(attachment.stdout.read(), WAIT) == b"done\n"
        info = await asyncio.wait_for(attachment.wait(), WAIT)
        assert (info.exit_code, info.stderr_bytes) == (0, size)
        assert attachment.stderr.buffered == 0


async def test_stdin_to_a_process_that_stopped_reading_fails_once_it_exits(client: AsyncClient) -> None:
    from tether_client import AttachmentClosed

    # The process never reads stdin and exits after a moment: writes fill
    # every queue on the way, and must then fail, not wait forever.
    process = await client.spawn("sleep 1", stdin=True)
    async with client.attach(process.id) as attachment:
        with pytest.raises(AttachmentClosed):

            async def flood() -> None:
                while True:
                    await attachment.write(b"x" * 65536)

            await asyncio.wait_for(flood(), WAIT)
        assert (await asyncio.wait_for(attachment.wait(), WAIT)).exit_code == 0
