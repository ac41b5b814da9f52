"""Files as a process sees them: ``upload`` and ``download`` run beside it (``beside``), with its user and its working directory."""

from __future__ import annotations

import asyncio
import hashlib
import io
import os
from collections.abc import AsyncIterator, Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from tether_client import (
    AsyncClient,
    Client,
    Data,
    Dropped,
    FileTooLarge,
    FileTransferFailed,
    Forbidden,
    InvalidArgument,
    InvalidRequest,
    NotFound,
    ProcessInfo,
)

from tether_client.files import download

from .conftest import FAST_RETRY, WAIT, Tetherd

OPERATOR = "python-files-operator"


def binary(size: int) -> bytes:
    """``size`` random bytes with runs of NULs, a lone CR and invalid UTF-8 in them."""
    data = bytearray(os.urandom(size))
    for at in range(0, size, 4096):
        data[at : at + 16] = b"\0" * 16
    data[-5:] = b"\xff\r\0\n\0"
    return bytes(data)


async def target(client: AsyncClient, directory: Path, name: str | None = None) -> ProcessInfo:
    """A process that makes ``d`` in ``directory``, ``cd``s into it and waits; returned once it said so (its cwd is then ``directory/d``)."""
    body: dict[str, object] = {
        "command": "mkdir -p d && cd d && echo ready && exec sleep 60",
        "cwd": str(directory),
    }
    if name is not None:
        body["name"] = name
    process = await client.spawn_request(body)
    async with client.attach(process.id) as attachment:
        seen = b""

        async def until_ready() -> None:
            nonlocal seen
            while b"ready\n" not in seen:
                piece = await attachment.stdout.read(64)
                assert piece, f"the target ended before it was ready: {seen!r}"
                seen += piece

        await asyncio.wait_for(until_ready(), WAIT)
    return process


@pytest.fixture
async def cwd_target(client: AsyncClient, tmp_path: Path) -> AsyncIterator[ProcessInfo]:
    process = await target(client, tmp_path)
    yield process
    await client.remove(process.id, force=True)


async def test_upload_then_download_is_byte_exact_for_a_few_mib_of_binary(
    client: AsyncClient, cwd_target: ProcessInfo, tmp_path: Path
) -> None:
    data = binary(3 << 20)
    where = tmp_path / "blob.bin"
    written = await asyncio.wait_for(client.upload(cwd_target.id, str(where), data), WAIT)
    assert written == len(data)
    assert where.read_bytes() == data, "the file on disk is what was sent"
    back = await asyncio.wait_for(client.download(cwd_target.id, str(where)), WAIT)
    assert len(back) == len(data) and hashlib.sha256(back).digest() == hashlib.sha256(data).digest()
    # An empty file both ways.
    assert await client.upload(cwd_target.id, str(tmp_path / "empty"), b"") == 0
    assert (tmp_path / "empty").read_bytes() == b""
    assert await client.download(cwd_target.id, str(tmp_path / "empty")) == b""


async def test_a_relative_path_resolves_against_the_directory_the_process_cd_into(
    client: AsyncClient, tmp_path: Path
) -> None:
    name = f"files-target-{os.getpid()}"
    process = await target(client, tmp_path, name=name)
    try:
        # By id, then by name: both are the process the path is relative to.
        await client.upload(process.id, "x.txt", "made beside\n")
        assert (tmp_path / "d" / "x.txt").read_text() == "made beside\n"
        assert not (tmp_path / "x.txt").exists(), "not the directory it started in"
        assert await client.download(name, "x.txt") == b"made beside\n"
        assert await client.download(name, "../d/x.txt") == b"made beside\n"
        # beside for anything: exec and spawn run in that directory.
        assert (await client.exec(["pwd"], beside=name, timeout=10)).stdout_text == f"{tmp_path / 'd'}\n"
        # cwd still wins over the process's directory.
        other = tmp_path / "elsewhere"
        other.mkdir()
        spawned = await client.spawn(["sh", "-c", "pwd > where"], beside=process.id, cwd=str(other))
        assert (await client.wait(spawned.id, timeout=WAIT)).exit_code == 0
        assert (other / "where").read_text() == f"{other}\n"
    finally:
        await client.remove(process.id, force=True)


async def test_a_missing_file_is_an_error_with_cats_own_words(client: AsyncClient, cwd_target: ProcessInfo) -> None:
    with pytest.raises(FileTransferFailed) as failed:
        await asyncio.wait_for(client.download(cwd_target.id, "no-such-file"), WAIT)
    assert not isinstance(failed.value, FileTooLarge)
    assert failed.value.exit_code == 1 and failed.value.reason == "exit"
    assert "No such file or directory" in failed.value.stderr
    assert "no-such-file" in str(failed.value) and "No such file or directory" in str(failed.value)
    # A directory is no file either.
    with pytest.raises(FileTransferFailed, match="Is a directory"):
        await asyncio.wait_for(client.download(cwd_target.id, "."), WAIT)


async def test_an_upload_into_a_missing_directory_is_an_error_and_creates_nothing(
    client: AsyncClient, cwd_target: ProcessInfo, tmp_path: Path
) -> None:
    with pytest.raises(FileTransferFailed) as failed:
        # More than the 1 MiB sent ahead of acknowledgements: the shell has
        # ended while the data is still going.
        await asyncio.wait_for(client.upload(cwd_target.id, "no-dir/x.txt", binary(3 << 20)), WAIT)
    assert failed.value.exit_code not in (None, 0)
    assert "no-dir/x.txt" in failed.value.stderr
    assert "nonexistent" in failed.value.stderr or "No such file" in failed.value.stderr
    assert not (tmp_path / "d" / "no-dir").exists()
    # A small one, which the shell has whole before it fails.
    with pytest.raises(FileTransferFailed, match="no-dir"):
        await asyncio.wait_for(client.upload(cwd_target.id, "no-dir/y.txt", b"small"), WAIT)


async def test_a_download_over_max_bytes_is_an_error_not_a_short_file(
    client: AsyncClient, cwd_target: ProcessInfo, tmp_path: Path
) -> None:
    data = binary(300 << 10)
    (tmp_path / "d" / "big").write_bytes(data)
    with pytest.raises(FileTooLarge) as failed:
        await asyncio.wait_for(client.download(cwd_target.id, "big", max_bytes=len(data) - 1), WAIT)
    assert failed.value.max_bytes == len(data) - 1
    assert await client.download(cwd_target.id, "big", max_bytes=len(data)) == data, "exactly the bound is fine"
    sink = io.BytesIO()
    with pytest.raises(FileTooLarge):
        await asyncio.wait_for(client.download_to(cwd_target.id, "big", sink, max_bytes=100 << 10), WAIT)
    # The remote cat was killed and forgotten, not left running.
    assert not [p for p in await client.list() if p.argv[:1] == ["cat"] and p.status == "running"]


async def test_download_to_streams_into_a_path_or_a_file_object_with_the_window_bounded(
    client: AsyncClient, cwd_target: ProcessInfo, tmp_path: Path
) -> None:
    data = binary(8 << 20)
    (tmp_path / "d" / "large").write_bytes(data)
    local = tmp_path / "copy"
    written = await asyncio.wait_for(client.download_to(cwd_target.id, "large", local, window=64 << 10), WAIT)
    assert written == len(data) and local.read_bytes() == data

    class Sink(io.RawIOBase):
        """Records the largest write: each is one data frame, so at most the window."""

        def __init__(self) -> None:
            self.digest = hashlib.sha256()
            self.largest = 0

        def writable(self) -> bool:
            return True

        def write(self, b: object) -> int:
            view = memoryview(b)  # type: ignore[arg-type]
            self.largest = max(self.largest, len(view))
            self.digest.update(view)
            return len(view)

    sink = Sink()
    assert await asyncio.wait_for(client.download_to(cwd_target.id, "large", sink, window=64 << 10), WAIT) == len(data)
    assert sink.digest.digest() == hashlib.sha256(data).digest()
    assert 0 < sink.largest <= 64 << 10
    # A file that cannot be read leaves the local one as it was.
    keep = tmp_path / "keep"
    keep.write_bytes(b"mine")
    with pytest.raises(FileTransferFailed, match="No such file"):
        await client.download_to(cwd_target.id, "missing", keep)
    assert keep.read_bytes() == b"mine"
    with pytest.raises(FileTransferFailed):
        await client.download_to(cwd_target.id, "missing", tmp_path / "never")
    assert not (tmp_path / "never").exists()


async def test_upload_takes_a_path_a_file_object_an_async_iterable_and_a_mode(
    client: AsyncClient, cwd_target: ProcessInfo, tmp_path: Path
) -> None:
    source = tmp_path / "source.bin"
    data = binary(200 << 10)
    source.write_bytes(data)
    remote = tmp_path / "d"
    assert await client.upload(cwd_target.id, "from-path", source, mode=0o751) == len(data)
    assert (remote / "from-path").read_bytes() == data
    assert (remote / "from-path").stat().st_mode & 0o7777 == 0o751
    with source.open("rb") as f:
        assert await client.upload(cwd_target.id, "from-file", f) == len(data)
    assert (remote / "from-file").read_bytes() == data

    async def pieces() -> AsyncIterator[bytes]:
        for start in range(0, len(data), 100_000):
            yield data[start : start + 100_000]

    assert await client.upload(cwd_target.id, "from-iterable", pieces()) == len(data)
    assert (remote / "from-iterable").read_bytes() == data
    # A local file that cannot be read: refused before anything runs, so
    # the remote file keeps its content.
    with pytest.raises(FileNotFoundError):
        await client.upload(cwd_target.id, "from-path", tmp_path / "no-such-local-file")
    assert (remote / "from-path").read_bytes() == data
    with pytest.raises(InvalidArgument):
        await client.upload(cwd_target.id, "x", 42)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgument):
        await client.upload(cwd_target.id, "x", b"", mode=0o10000)
    with pytest.raises(InvalidArgument):
        await client.download(cwd_target.id, "")


async def test_beside_with_a_user_is_a_400_and_an_unknown_process_a_404(
    client: AsyncClient, cwd_target: ProcessInfo
) -> None:
    body = {"argv": ["true"], "beside": cwd_target.id, "user": "nobody"}
    with pytest.raises(InvalidRequest) as refused:
        await client.spawn_request(body)
    assert (refused.value.status, refused.value.code) == (400, "invalid_request")
    assert "beside" in refused.value.message
    with pytest.raises(InvalidRequest):
        await client.run_request(body)  # the same over GET /v1/run
    with pytest.raises(NotFound):
        await client.upload("no-such-process", "x", b"data")
    with pytest.raises(NotFound):
        await client.download("no-such-process", "x")


@pytest.fixture(scope="module")
def guarded() -> Iterator[Tetherd]:
    daemon = Tetherd("--token", OPERATOR)
    yield daemon
    daemon.stop()


async def test_a_token_scoped_to_the_process_cannot_copy_files(guarded: Tetherd, tmp_path: Path) -> None:
    async with AsyncClient(guarded.base, token=OPERATOR, retry=FAST_RETRY) as operator:
        process = await target(operator, tmp_path)
        try:
            minted = await operator.mint_token(process.id, ["read", "write", "kill"])
            async with AsyncClient(guarded.base, token=minted.token, retry=FAST_RETRY) as scoped:
                with pytest.raises(Forbidden) as refused:
                    await scoped.upload(process.id, "x.txt", b"no")
                assert refused.value.status == 403
                with pytest.raises(Forbidden):
                    await scoped.download(process.id, "x.txt")
            assert not (tmp_path / "d" / "x.txt").exists()
            await operator.upload(process.id, "x.txt", b"yes")
            assert (tmp_path / "d" / "x.txt").read_bytes() == b"yes"
        finally:
            await operator.remove(process.id, force=True)


def test_the_blocking_client_uploads_and_downloads(server: Tetherd, tmp_path: Path) -> None:
    with Client(server.base, retry=FAST_RETRY) as client:
        process = client.spawn(["sleep", "60"], cwd=str(tmp_path))
        try:
            data = binary(1 << 20)
            assert client.upload(process.id, "sync.bin", data) == len(data)
            assert (tmp_path / "sync.bin").read_bytes() == data
            assert client.download(process.id, "sync.bin") == data
            assert client.download_to(process.id, "sync.bin", tmp_path / "back.bin") == len(data)
            assert (tmp_path / "back.bin").read_bytes() == data
            with pytest.raises(FileTransferFailed, match="No such file"):
                client.download(process.id, "nothing-here")
        finally:
            client.remove(process.id, force=True)


class _Told:
    """A fake run of ``cat`` whose stdout says what a lying server would: the chunks given, then the exit given."""

    def __init__(self, chunks: list[Data | Dropped], stdout_bytes: int) -> None:
        self.chunks = chunks
        self.info = ProcessInfo.from_wire(
            {
                "id": "f" * 32,
                "pid": 1,
                "argv": ["cat"],
                "tty": False,
                "overflow": "block",
                "status": "exited",
                "started_at": "2026-01-01T00:00:00Z",
                "exit_code": 0,
                "reason": "exit",
                "stdout_bytes": stdout_bytes,
                "stderr_bytes": 0,
                "output_incomplete": False,
            }
        )

    def run_request(self, body: Mapping[str, Any], *, window: int = 0) -> _Told:
        assert body["beside"] == "target" and body["argv"] == ["cat", "--", "f"]
        return self

    async def __aenter__(self) -> _Told:
        return self

    async def __aexit__(self, *exc: object) -> None:
        return None

    @property
    def stdout(self) -> _Told:
        return self

    @property
    def stderr(self) -> _Told:
        return self

    async def __aiter__(self) -> AsyncIterator[Data | Dropped]:
        for chunk in self.chunks:
            yield chunk

    async def read(self, n: int = -1) -> bytes:
        return b""

    async def wait(self) -> ProcessInfo:
        return self.info


async def test_a_loss_the_server_reports_is_an_error_never_a_short_file() -> None:
    host = _Told([Data("stdout", 0, b"abc"), Dropped("stdout", 3, 5), Data("stdout", 8, b"xyz")], 11)
    with pytest.raises(FileTransferFailed, match="lost 5 bytes at offset 3"):
        await download(host, "target", "f")  # type: ignore[arg-type]
    # Fewer bytes than the exit says cat wrote: a loss too.
    host = _Told([Data("stdout", 0, b"abc")], 4)
    with pytest.raises(FileTransferFailed, match="3 bytes came of the 4"):
        await download(host, "target", "f")  # type: ignore[arg-type]
    assert await download(_Told([Data("stdout", 0, b"abcd")], 4), "target", "f") == b"abcd"  # type: ignore[arg-type]
