"""exec in one request (POST /v1/exec): output past the answer's cap read back from retention, what retention lost counted, cancellation kills."""

from __future__ import annotations

import asyncio
import hashlib
import time
from collections.abc import Callable

from tether_client import AsyncClient, ProcessInfo
from tether_client.exec_once import OUTPUT_CAP

from .conftest import FAST_RETRY, WAIT, Tetherd


async def test_output_past_the_cap_arrives_complete_on_both_streams(client: AsyncClient) -> None:
    size = 3 * OUTPUT_CAP + 12345
    # stdout: random bytes (not text, so the answer carries base64); stderr:
    # their sha256 computed on the server's side of the pipe, then 2 MiB of
    # text, so both streams pass the cap.
    command = (
        f"exec 3>&1; head -c {size} /dev/urandom | tee /dev/fd/3 | sha256sum >&2; "
        "yes stderr-line | head -c 2097152 >&2"
    )
    result = await asyncio.wait_for(client.exec(command), WAIT)
    assert result.ok and result.dropped == 0
    assert len(result.stdout) == size
    checksum = f"{hashlib.sha256(result.stdout).hexdigest()}  -\n".encode()
    assert result.stderr[: len(checksum)] == checksum, "stdout is not what was written"
    assert result.stderr[len(checksum) :] == (b"stderr-line\n" * 200_000)[:2097152]


async def test_a_stream_longer_than_cap_and_retention_loses_its_middle_counted_in_dropped(
    start_server: Callable[..., Tetherd],
) -> None:
    retain = 64 << 10
    server = start_server("--retain-bytes", str(retain))
    expected = "".join(f"{n}\n" for n in range(1, 400_001)).encode()
    async with AsyncClient(server.base, retry=FAST_RETRY) as client:
        result = await asyncio.wait_for(client.exec("seq 1 400000"), WAIT)
        assert result.ok
        tail = len(result.stdout) - OUTPUT_CAP
        assert tail >= retain, f"only {tail} bytes of the retained end came back"
        assert result.stdout == expected[:OUTPUT_CAP] + expected[-tail:]
        assert result.dropped == len(expected) - len(result.stdout) > 0
        # Given a retention, exec paces the program through an attachment
        # instead: every byte arrives whatever the retention.
        paced = await asyncio.wait_for(client.exec("seq 1 400000", retain_bytes=retain), WAIT)
        assert (paced.stdout, paced.dropped) == (expected, 0)


async def test_cancelling_exec_kills_the_command(client: AsyncClient) -> None:
    marker = f"tether-cancel-{time.monotonic_ns()}"
    task = asyncio.ensure_future(client.exec(["sh", "-c", "sleep 60; echo never", marker]))

    async def running() -> ProcessInfo:
        deadline = time.monotonic() + WAIT
        while time.monotonic() < deadline:
            found = [p for p in await client.list() if marker in p.argv]
            if found:
                return found[0]
            await asyncio.sleep(0.02)
        raise AssertionError("the exec's process never appeared")

    process = await running()
    task.cancel()
    final = await asyncio.wait_for(client.wait(process.id), WAIT)
    assert final.reason == "killed", final


async def test_bytes_input_and_a_pty_in_one_request(client: AsyncClient) -> None:
    raw = await asyncio.wait_for(client.exec("cat", input=b"\x00\xff\x01 bytes"), WAIT)
    assert (raw.stdout, raw.exit_code) == (b"\x00\xff\x01 bytes", 0)
    tty = await asyncio.wait_for(client.exec("read x; echo got $x; exit 4", tty=True, input="hi\n"), WAIT)
    assert b"got hi" in tty.stdout and tty.exit_code == 4
    assert tty.process.tty


async def test_a_server_with_a_smaller_answer_cap_still_gives_the_whole_output(
    start_server: Callable[..., Tetherd],
) -> None:
    server = start_server("--max-exec-output-bytes", "65536")
    expected = "".join(f"{n}\n" for n in range(1, 40_001)).encode()
    async with AsyncClient(server.base, retry=FAST_RETRY) as client:
        result = await asyncio.wait_for(client.exec("seq 1 40000"), WAIT)
    assert (result.stdout, result.dropped, result.exit_code) == (expected, 0, 0)


async def test_input_too_large_for_one_request_is_streamed_instead(
    start_server: Callable[..., Tetherd],
) -> None:
    async with AsyncClient(start_server().base, retry=FAST_RETRY) as client:
        # 2 MiB: over the server's default --max-body-bytes (1 MiB) even
        # before base64; exec attaches and streams it.
        big = bytes(range(256)) * 8192
        result = await asyncio.wait_for(client.exec("sha256sum", input=big), WAIT)
        assert result.stdout.split()[0].decode() == hashlib.sha256(big).hexdigest()
    # A server with a smaller bound refuses the body before starting
    # anything (413): exec attaches instead.
    small = start_server("--max-body-bytes", "4096")
    async with AsyncClient(small.base, retry=FAST_RETRY) as client:
        result = await asyncio.wait_for(client.exec("wc -c", input="x" * 5000), WAIT)
        assert (result.stdout.strip(), result.exit_code) == (b"5000", 0)
        assert len([p for p in await client.list() if p.argv[-1] == "wc -c"]) == 1, "started once"


async def test_an_answer_that_starts_before_the_exit_is_read_whole(start_server: Callable[..., Tetherd]) -> None:
    # Past a ping interval the server answers at once and sends spaces
    # until the document (for proxies' read timeouts).
    server = start_server("--ping-interval-ms", "200")
    async with AsyncClient(server.base, retry=FAST_RETRY) as client:
        result = await asyncio.wait_for(client.exec("sleep 1; echo late; exit 3"), WAIT)
    assert (result.stdout, result.exit_code, result.reason) == (b"late\n", 3, "exit")
