"""Terminal.interact() in a real terminal (tmux): typed commands run remotely, the local size and its changes reach the remote PTY, the exit code comes back, and the local terminal's mode is restored."""

from __future__ import annotations

import shlex
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from .conftest import WAIT, Tetherd

SCRIPT = """
import asyncio, sys
from tether_client import AsyncClient

async def main() -> int:
    async with AsyncClient(sys.argv[1]) as client:
        async with client.terminal(["bash", "--norc", "-i"], env={"PS1": "prompt> "}) as term:
            status = await term.interact()
    return status.exit_code

sys.exit(asyncio.run(main()))
"""


class Tmux:
    """A tmux server of its own, on its own socket."""

    def __init__(self, directory: Path) -> None:
        self.socket = f"tether-py-{directory.name}"
        self.conf = directory / "tmux.conf"
        self.conf.write_text("set -g status off\n")

    def cmd(self, *args: str) -> str:
        done = subprocess.run(
            ["tmux", "-L", self.socket, "-f", str(self.conf), *args],
            capture_output=True,
            text=True,
            timeout=WAIT,
        )
        assert done.returncode == 0, done.stderr
        return done.stdout

    def pane(self) -> str:
        return self.cmd("capture-pane", "-p", "-t", "main")

    def until(self, what: str, done: Callable[[str], bool]) -> None:
        """Polls the pane (bounded) until ``done`` holds."""
        deadline = time.monotonic() + WAIT
        while not done(pane := self.pane()):
            assert time.monotonic() < deadline, f"{what} never showed; pane:\n{pane}"
            time.sleep(0.05)

    def type_line(self, line: str) -> None:
        self.cmd("send-keys", "-t", "main", "-l", line)
        self.cmd("send-keys", "-t", "main", "Enter")


@pytest.fixture
def tmux(tmp_path: Path) -> Iterator[Tmux]:
    t = Tmux(tmp_path)
    yield t
    subprocess.run(["tmux", "-L", t.socket, "kill-server"], capture_output=True, timeout=WAIT)


def _wait_file(path: Path) -> str:
    deadline = time.monotonic() + WAIT
    while not (path.exists() and path.read_text().endswith("\n")):
        assert time.monotonic() < deadline, f"{path} never written"
        time.sleep(0.05)
    return path.read_text()


def _has_line(pane: str, text: str) -> bool:
    return any(line.strip() == text for line in pane.splitlines())


def test_interact_bridges_a_real_terminal(server: Tetherd, tmux: Tmux, tmp_path: Path) -> None:
    script = tmp_path / "interact.py"
    script.write_text(SCRIPT)
    d = shlex.quote(str(tmp_path))
    shell = (
        f"stty -g > {d}/before; {shlex.quote(sys.executable)} {shlex.quote(str(script))} {server.base}; "
        f"echo $? > {d}/rc; stty -g > {d}/after; exec sleep 600"
    )
    tmux.cmd("new-session", "-d", "-s", "main", "-x", "100", "-y", "30", shell)
    tmux.until("the prompt", lambda p: "prompt>" in p)
    tmux.type_line("echo $((6*7))")
    tmux.until("42", lambda p: _has_line(p, "42"))
    # The remote terminal has the local one's size, and follows it.
    tmux.type_line("stty size")
    tmux.until("the local size", lambda p: _has_line(p, "30 100"))
    tmux.cmd("resize-window", "-t", "main", "-x", "120", "-y", "40")
    deadline = time.monotonic() + WAIT
    while True:
        # SIGWINCH is asynchronous: ask again until the new size shows.
        tmux.type_line("clear; stty size")
        time.sleep(0.2)
        if _has_line(tmux.pane(), "40 120"):
            break
        assert time.monotonic() < deadline, f"the resize never arrived; pane:\n{tmux.pane()}"
    tmux.type_line("exit 3")
    assert _wait_file(tmp_path / "rc").strip() == "3"
    assert _wait_file(tmp_path / "after") == _wait_file(tmp_path / "before"), "terminal mode not restored"
