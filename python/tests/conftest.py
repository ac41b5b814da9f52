"""The test harness: a real tetherd on an ephemeral loopback port, killed at teardown.

The binary is ``$TETHERD_BIN``, else ``../target/debug/tetherd`` (build it
with ``cargo build -p tether-server --bin tetherd``). A missing binary fails
the tests; nothing is skipped.
"""

from __future__ import annotations

import os
import select
import subprocess
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path

import pytest

from tether_client import AsyncClient, RetryPolicy

REPO = Path(__file__).resolve().parents[2]
WAIT = 20.0
"""The bound on every wait in these tests, in seconds."""


def tetherd_binary() -> Path:
    path = Path(os.environ.get("TETHERD_BIN") or REPO / "target" / "debug" / "tetherd")
    if not path.is_file():
        pytest.fail(
            f"tetherd not found at {path}: run `cargo build -p tether-server --bin tetherd` "
            "or set TETHERD_BIN"
        )
    return path


class Tetherd:
    """A running tetherd; ``base`` is ``http://127.0.0.1:PORT``."""

    def __init__(self, *args: str, env: dict[str, str] | None = None, tokenless: bool | None = None) -> None:
        environ = {k: v for k, v in os.environ.items() if k not in ("TETHER_TOKEN", "TETHER_LISTEN", "TETHER_TOKEN_FILE")}
        environ["RUST_LOG"] = "warn"
        environ.update(env or {})
        if tokenless is None:
            tokenless = "--token" not in args
        self.process = subprocess.Popen(
            # Tests that are not about tokens run without one (tetherd would generate one).
            [
                str(tetherd_binary()),
                "--listen",
                "127.0.0.1:0",
                *(["--no-token"] if tokenless else []),
                *args,
            ],
            stdout=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
            env=environ,
        )
        assert self.process.stdout is not None
        ready, _, _ = select.select([self.process.stdout], [], [], WAIT)
        if not ready:
            self.stop()
            raise RuntimeError("tetherd printed no address in time")
        line = self.process.stdout.readline().decode().strip()
        prefix = "tetherd listening on "
        if not line.startswith(prefix):
            self.stop()
            raise RuntimeError(f"unexpected first line from tetherd: {line!r}")
        self.base = line[len(prefix) :]
        self.port = int(self.base.rsplit(":", 1)[1])
        # Keep draining stdout so that the server can never block on it.
        threading.Thread(target=self.process.stdout.read, daemon=True).start()

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait(timeout=WAIT)


@pytest.fixture(autouse=True)
def _no_ambient_config(monkeypatch: pytest.MonkeyPatch) -> None:
    """The developer's own TETHER_TOKEN / TETHER_SERVER must not leak into the tests."""
    monkeypatch.delenv("TETHER_TOKEN", raising=False)
    monkeypatch.delenv("TETHER_SERVER", raising=False)


@pytest.fixture(scope="session")
def server() -> Iterator[Tetherd]:
    """One tetherd with default flags, shared by the tests that need nothing special."""
    daemon = Tetherd()
    yield daemon
    daemon.stop()


@pytest.fixture
def start_server() -> Iterator[Callable[..., Tetherd]]:
    """Starts a tetherd with extra flags; every one is killed at teardown."""
    started: list[Tetherd] = []

    def start(*args: str) -> Tetherd:
        daemon = Tetherd(*args)
        started.append(daemon)
        return daemon

    yield start
    for daemon in started:
        daemon.stop()


FAST_RETRY = RetryPolicy(budget=5.0, initial_backoff=0.02, max_backoff=0.1, unreachable_budget=2.0)


@pytest.fixture
async def client(server: Tetherd) -> AsyncIterator[AsyncClient]:
    """An async client of the shared server."""
    async with AsyncClient(server.base, retry=FAST_RETRY) as c:
        yield c
