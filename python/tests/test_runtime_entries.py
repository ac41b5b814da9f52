"""A local server's runtime entry (its URL and token) is a secret on disk: read only from folders no other user controls, only while its server runs, and its token sent only to exactly the origin it names, as the URL parser that makes the request reads the URL.

The same rules as the Rust client's (``tests/tests/scoped_access/runtime_entries.rs``).
"""

from __future__ import annotations

import fcntl
import json
import os
import select
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from tether_client import AsyncClient, Client, InvalidArgument, TetherError, Unauthorized, local_token_for

from .conftest import FAST_RETRY, Tetherd

TOKEN = "entry-token-0123456789"
NOBODY = 65534


class PlantedEntry:
    """A runtime folder ``<root>/tether/servers`` (0700) holding one entry for ``url``, locked as its server would hold it while it runs."""

    def __init__(self, root: Path, url: str) -> None:
        self.root = root
        self.servers = root / "tether" / "servers"
        self.servers.mkdir(parents=True)
        for folder in (root, root / "tether", self.servers):
            folder.chmod(0o700)
        self.entry = self.servers / "tetherd-1-planted.json"
        self.entry.write_text(json.dumps({"url": url, "token": TOKEN, "pid": 1}) + "\n")
        self.entry.chmod(0o600)
        self._lock: int | None = os.open(self.entry, os.O_RDONLY)
        fcntl.flock(self._lock, fcntl.LOCK_EX | fcntl.LOCK_NB)

    def release(self) -> None:
        """Its server is gone: nobody holds the lock."""
        if self._lock is not None:
            os.close(self._lock)
            self._lock = None


Planted = tuple[Tetherd, PlantedEntry]
"""A running tetherd and the entry planted for it."""


@pytest.fixture
def planted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Planted]:
    """A tetherd with ``--token TOKEN``, and an entry for it planted in this test's ``$XDG_RUNTIME_DIR``."""
    daemon = Tetherd("--token", TOKEN)
    root = tmp_path / "xdg"
    root.mkdir()
    entry = PlantedEntry(root, daemon.base)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(root))
    monkeypatch.delenv("TETHER_TOKEN_FILE", raising=False)
    try:
        yield daemon, entry
    finally:
        entry.release()
        daemon.stop()


async def gets_in(url: str) -> tuple[bool, str]:
    """Whether a client of ``url`` with no token given gets in, and what the server's refusal said."""
    async with AsyncClient(url, retry=FAST_RETRY) as client:
        try:
            await client.list()
        except Unauthorized as e:
            assert client.token is None, "a token was found yet refused"
            return False, str(e)
        assert client.token == TOKEN
        return True, ""


async def test_a_trusted_entry_of_a_running_server_is_used(planted: Planted) -> None:
    daemon, entry = planted
    ok, said = await gets_in(daemon.base)
    assert ok, said
    found = local_token_for(daemon.base)
    assert found == (TOKEN, f"the runtime entry {entry.entry} for {daemon.base}")
    # A trailing slash names the same origin.
    slash = daemon.base + "/"
    assert local_token_for(slash) == (TOKEN, f"the runtime entry {entry.entry} for {slash}")


async def test_an_entry_in_a_folder_others_may_write_is_not_used(planted: Planted) -> None:
    daemon, entry = planted
    entry.servers.chmod(0o777)
    ok, said = await gets_in(daemon.base)
    assert not ok and "not trusted" in said and f"others may write to {entry.servers}" in said, said
    # The sticky bit (as /tmp has) makes a folder others may write trusted.
    entry.servers.chmod(0o1777)
    ok, said = await gets_in(daemon.base)
    assert ok, said
    # Each folder up to the runtime root counts.
    entry.servers.chmod(0o700)
    (entry.root / "tether").chmod(0o770)
    ok, said = await gets_in(daemon.base)
    assert not ok and f"others may write to {entry.root / 'tether'}" in said, said


async def test_an_entry_in_a_folder_of_another_user_is_not_used(planted: Planted) -> None:
    daemon, entry = planted
    os.chown(entry.servers, NOBODY, -1)
    ok, said = await gets_in(daemon.base)
    assert not ok and "not trusted" in said and f"{entry.servers} belongs to uid {NOBODY}" in said, said
    os.chown(entry.servers, os.geteuid(), -1)
    ok, said = await gets_in(daemon.base)
    assert ok, said


async def test_an_entry_in_a_folder_that_is_a_link_is_not_used(planted: Planted) -> None:
    daemon, entry = planted
    # A link into a folder that is itself trusted.
    real = entry.root / "tether" / "real"
    entry.servers.rename(real)
    entry.servers.symlink_to(real)
    ok, said = await gets_in(daemon.base)
    assert not ok and "not trusted" in said and f"{entry.servers} is not a folder" in said, said


async def test_an_entry_file_of_another_user_is_not_used(planted: Planted) -> None:
    daemon, entry = planted
    os.chown(entry.entry, NOBODY, -1)
    ok, said = await gets_in(daemon.base)
    assert not ok and "no runtime entry for" in said, said
    os.chown(entry.entry, os.geteuid(), -1)
    # Nor one others may write.
    entry.entry.chmod(0o622)
    ok, said = await gets_in(daemon.base)
    assert not ok and "no runtime entry for" in said, said
    entry.entry.chmod(0o600)
    ok, said = await gets_in(daemon.base)
    assert ok, said


async def test_an_entry_that_is_a_link_is_not_used(planted: Planted) -> None:
    daemon, entry = planted
    real = entry.root / "tether" / "elsewhere.json"
    entry.entry.rename(real)
    entry.entry.symlink_to(real)
    ok, said = await gets_in(daemon.base)
    assert not ok and "no runtime entry for" in said, said


async def test_a_stale_entry_is_not_used(planted: Planted) -> None:
    daemon, entry = planted
    entry.release()
    ok, said = await gets_in(daemon.base)
    assert not ok and "while its server runs" in said, said


async def test_an_entry_is_used_only_for_exactly_its_own_origin(planted: Planted) -> None:
    daemon, _ = planted
    assert daemon.base.startswith("http://127.0.0.1:")
    # localhost may be another listener (on ::1): not the entry's origin.
    as_localhost = daemon.base.replace("127.0.0.1", "localhost")
    ok, said = await gets_in(as_localhost)
    assert not ok and f"no runtime entry for {as_localhost}" in said, said
    for other in (
        daemon.base.replace("127.0.0.1", "127.0.0.2"),
        daemon.base.replace("http://", "https://"),
        f"http://127.0.0.1:{daemon.port - 1}",
    ):
        found = local_token_for(other)
        assert found is not None and found[0] is None, (other, found)


class OtherHost:
    """A listener on 127.0.0.2 (standing in for another host) that answers 404 to whatever comes and keeps each request head it got."""

    def __init__(self) -> None:
        self.listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.listener.bind(("127.0.0.2", 0))
        self.listener.listen(16)
        self.address = "127.0.0.2:%d" % self.listener.getsockname()[1]
        self.heads: list[bytes] = []
        self.accepted = 0
        self._closed = False
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while not self._closed:
            ready, _, _ = select.select([self.listener], [], [], 0.1)
            if not ready:
                continue
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            self.accepted += 1
            with conn:
                conn.settimeout(5)
                head = b""
                while b"\r\n\r\n" not in head and len(head) < 64 << 10:
                    try:
                        part = conn.recv(4096)
                    except OSError:
                        break
                    if not part:
                        break
                    head += part
                self.heads.append(head)
                try:
                    conn.sendall(b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\nconnection: close\r\n\r\n")
                except OSError:
                    pass

    def close(self) -> None:
        self._closed = True
        self._thread.join(timeout=5)
        self.listener.close()


async def test_a_local_token_reaches_no_other_host_however_the_url_is_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path / "xdg"
    root.mkdir(mode=0o700)
    local = Tetherd(env={"XDG_RUNTIME_DIR": str(root)}, tokenless=False)
    other = OtherHost()
    try:
        monkeypatch.setenv("XDG_RUNTIME_DIR", str(root))
        monkeypatch.delenv("TETHER_TOKEN_FILE", raising=False)
        local_authority = local.base.removeprefix("http://")
        # Its own generated token is found for it.
        async with AsyncClient(local.base, retry=FAST_RETRY) as client:
            assert client.token is not None
            await client.list()
        # What a hand-made "is it local?" check read as the local server,
        # and the URL parser sends to the other host.
        for url, why in (
            (f"http://{other.address}#@{local_authority}", "may not hold a query (`?`) or a fragment (`#`)"),
            (f"http://{other.address}/?@{local_authority}", "may not hold a query (`?`) or a fragment (`#`)"),
            (f"http://{other.address}?@{local_authority}", "may not hold a query (`?`) or a fragment (`#`)"),
            (f"http://user@{local_authority}", "may not hold a user or password"),
            (f"http://user:secret@{local_authority}", "may not hold a user or password"),
        ):
            with pytest.raises(InvalidArgument, match="server URL") as refused:
                AsyncClient(url, retry=FAST_RETRY)
            assert why in str(refused.value), (url, refused.value)
            with pytest.raises(InvalidArgument, match="server URL"):
                Client(url, retry=FAST_RETRY)
            # Nor from the environment.
            monkeypatch.setenv("TETHER_SERVER", url)
            with pytest.raises(InvalidArgument, match="server URL"):
                AsyncClient(retry=FAST_RETRY)
            monkeypatch.delenv("TETHER_SERVER")
        # Nor does a lookup read them as the local server: 127.0.0.2 is
        # loopback, but no entry names it.
        for url in (
            f"http://{other.address}#@{local_authority}",
            f"http://{other.address}/?@{local_authority}",
        ):
            found = local_token_for(url)
            assert found is not None and found[0] is None, (url, found)
        assert other.accepted == 0, "a connection reached the other host"
        # The other host named plainly is reached, without the local token.
        async with AsyncClient(f"http://{other.address}", retry=FAST_RETRY) as client:
            assert client.token is None
            with pytest.raises(TetherError):
                await client.list()
        assert other.accepted >= 1 and other.heads
        for head in other.heads:
            assert head.startswith(b"GET /"), head
            assert b"authorization" not in head.lower(), head
    finally:
        other.close()
        local.stop()
