"""exec: a command run to completion, its exact streams, exit code and reason; exec_stream with bounded memory."""

from __future__ import annotations

import asyncio
import hashlib
import time

import pytest

from tether_client import AsyncClient, Data, SpawnFailed

from .conftest import WAIT

COMMAND = "echo out; echo err >&2; exit 3"


async def test_exec_returns_the_exact_streams_and_the_exit_code(client: AsyncClient) -> None:
    for command in (COMMAND, ["sh", "-c", COMMAND]):
        result = await asyncio.wait_for(client.exec(command), WAIT)
        assert result.stdout == b"out\n"
        assert result.stderr == b"err\n"
        assert (result.stdout_text, result.stderr_text) == ("out\n", "err\n")
        assert result.exit_code == 3
        assert result.reason == "exit"
        assert not result.ok and not result.timed_out
        assert result.output_incomplete is False
        assert result.dropped == 0
        assert result.process.exited


async def test_a_deadline_gives_reason_timeout_and_124(client: AsyncClient) -> None:
    started = time.monotonic()
    result = await asyncio.wait_for(client.exec("echo before; sleep 30", timeout=0.5), WAIT)
    assert (result.reason, result.exit_code) == ("timeout", 124)
    assert result.timed_out
    assert result.stdout == b"before\n"
    assert time.monotonic() - started < 15, "the deadline did not cut the sleep short"


async def test_a_signal_death_is_not_a_timeout(client: AsyncClient) -> None:
    result = await asyncio.wait_for(client.exec("kill -TERM $$", timeout=30), WAIT)
    assert (result.reason, result.exit_code, result.signal) == ("signal", 143, "TERM")
    assert not result.timed_out


async def test_a_missing_program_raises_spawn_failed(client: AsyncClient) -> None:
    with pytest.raises(SpawnFailed) as caught:
        await asyncio.wait_for(client.exec(["/nonexistent/tether-test-program"]), WAIT)
    assert caught.value.status == 422
    assert caught.value.code == "spawn_failed"
    assert "nonexistent" in str(caught.value) or caught.value.message


async def test_exec_input_is_written_to_stdin_then_closed(client: AsyncClient) -> None:
    result = await asyncio.wait_for(client.exec("tr a-z A-Z; echo done >&2", input="hello\n"), WAIT)
    assert (result.stdout, result.stderr, result.exit_code) == (b"HELLO\n", b"done\n", 0)


async def test_exec_env_and_cwd(client: AsyncClient) -> None:
    result = await asyncio.wait_for(
        client.exec('printf "%s %s" "$GREETING" "$(pwd)"', env={"GREETING": "hi"}, cwd="/tmp"), WAIT
    )
    assert result.stdout_text == "hi /tmp"


def _vm_hwm_kib() -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    raise AssertionError("no VmHWM in /proc/self/status")


SIZE = 64 << 20
# stdout: 64 MiB of random bytes; stderr: their sha256, computed on the
# server's side of the pipe.
RANDOM_WITH_CHECKSUM = f"exec 3>&1; head -c {SIZE} /dev/urandom | tee /dev/fd/3 | sha256sum >&2"


async def test_64_mib_stream_arrives_complete_with_bounded_memory(client: AsyncClient) -> None:
    window = 256 << 10
    # Reset the peak RSS of this process, so VmHWM measures this test alone.
    with open("/proc/self/clear_refs", "w") as refs:
        refs.write("5")
    baseline = _vm_hwm_kib()
    digest = hashlib.sha256()
    received = 0
    stderr = b""
    most_buffered = 0
    async with client.exec_stream(RANDOM_WITH_CHECKSUM, window=window) as run:

        async def consume() -> None:
            nonlocal received, stderr, most_buffered
            async for chunk in run:
                assert isinstance(chunk, Data), f"unexpected {chunk}"
                most_buffered = max(most_buffered, run.buffered + len(chunk.data))
                if chunk.stream == "stdout":
                    digest.update(chunk.data)
                    received += len(chunk.data)
                else:
                    stderr += chunk.data

        await asyncio.wait_for(consume(), 90)
        status = await asyncio.wait_for(run.wait(), WAIT)
    growth_mib = (_vm_hwm_kib() - baseline) / 1024
    print(f"peak RSS growth {growth_mib:.1f} MiB, most buffered {most_buffered}")
    assert status.ok and status.dropped == 0
    assert received == SIZE
    assert stderr.split()[0].decode() == digest.hexdigest(), "checksum mismatch"
    assert most_buffered <= 2 * window, f"buffered {most_buffered} bytes"
    assert growth_mib < 24, f"peak RSS grew by {growth_mib:.1f} MiB while streaming 64 MiB"
