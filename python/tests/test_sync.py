"""The synchronous API: the same calls without await, on a private event loop."""

from __future__ import annotations

import hashlib
import subprocess
import sys

import pytest

from tether_client import Client, Data, NotFound

from .conftest import FAST_RETRY, Tetherd


def test_sync_exec_returns_streams_code_and_reason(server: Tetherd) -> None:
    with Client(server.base, retry=FAST_RETRY) as client:
        result = client.exec("echo out; echo err >&2; exit 3")
        assert (result.stdout, result.stderr, result.exit_code, result.reason) == (
            b"out\n",
            b"err\n",
            3,
            "exit",
        )
        timed_out = client.exec("sleep 30", timeout=0.3)
        assert (timed_out.reason, timed_out.exit_code) == ("timeout", 124)
        with pytest.raises(NotFound):
            client.get("no-such-process")


def test_sync_streaming_reads_chunks_as_they_come(server: Tetherd) -> None:
    size = 8 << 20
    with Client(server.base, retry=FAST_RETRY) as client:
        command = f"exec 3>&1; head -c {size} /dev/urandom | tee /dev/fd/3 | sha256sum >&2"
        digest = hashlib.sha256()
        received = 0
        stderr = b""
        chunks = 0
        with client.exec_stream(command, window=64 << 10) as run:
            for chunk in run:
                assert isinstance(chunk, Data)
                assert run.buffered <= 2 * (64 << 10)
                chunks += 1
                if chunk.stream == "stdout":
                    digest.update(chunk.data)
                    received += len(chunk.data)
                else:
                    stderr += chunk.data
            status = run.wait()
        assert status.ok
        assert received == size and chunks > 8
        assert stderr.split()[0].decode() == digest.hexdigest()


def test_sync_attach_wait_and_terminal(server: Tetherd) -> None:
    with Client(server.base, retry=FAST_RETRY) as client:
        process = client.spawn("cat", stdin=True)
        with client.attach(process.id) as attachment:
            attachment.write("ping\n")
            assert attachment.stdout.read(5) == b"ping\n"
            attachment.close_stdin()
            assert attachment.stdout.read() == b""
        assert client.wait(process.id).exit_code == 0
        with client.terminal(["bash", "--norc", "-i"], env={"PS1": "$ "}) as term:  # xterm-256color
            term.write("echo $((6*7))\r")
            term.expect(rb"42\r\n")  # the typed line shows 6*7, not 42
            term.write("exit 2\r")
            assert term.wait().exit_code == 2


def test_closing_the_blocking_client_leaves_no_task_pending(server: Tetherd) -> None:
    """Leaving ``with Client()`` right after an exec ends the connections' own tasks too.

    The loop used to be stopped under websockets' keepalive task, and a
    script printed "Task was destroyed but it is pending!" at exit about
    one run in five (found by the docs runner on python/README.md's quick
    start); twelve scripts all exit silently.
    """
    script = f"""
from tether_client import Client
with Client({server.base!r}) as client:
    result = client.exec("echo out; echo err >&2; exit 3", timeout=60)
print(result.exit_code)
"""
    for _ in range(12):
        ran = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
        assert (ran.returncode, ran.stdout, ran.stderr) == (0, "3\n", "")


def test_a_client_never_closed_is_closed_quietly_at_exit(server: Tetherd) -> None:
    script = (
        "import sys\n"
        "from tether_client import Client\n"
        "client = Client(sys.argv[1])\n"
        "print(client.exec('echo unclosed').stdout_text, end='')\n"
    )
    done = subprocess.run([sys.executable, "-c", script, server.base], capture_output=True, text=True, timeout=60)
    assert (done.returncode, done.stdout) == (0, "unclosed\n"), done.stderr
    assert done.stderr == "", f"a client left open complained at exit: {done.stderr}"
