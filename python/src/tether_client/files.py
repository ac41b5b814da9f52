"""Files as a process sees them: :func:`upload` and :func:`download`, run beside the process.

Built as ``tether cp`` is, on what the server already offers: a small
program spawned *beside* the target process (the spawn request's
``beside``: that process's user and group, and its working directory, its
current one while it runs, so a shell's ``cd`` counts). A relative path
means what it means to the process, and the copy has no more rights than
the process's user. An upload is ``/bin/sh -c 'cat > "$1"'`` with the data
on its stdin (numbered input: at most 1 MiB unacknowledged, so memory stays
bounded whatever the size); a download is ``cat -- PATH`` read from its
stdout in block mode, with the attachment's credit window (the server
paces ``cat`` to this client). Spawning needs the operator's token: a
token scoped to one process gets :class:`~tether_client.Forbidden`.

It is given the one call it makes (``run_request``), never the client, so
it sits below the client.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import AsyncGenerator, AsyncIterable, AsyncIterator, Awaitable, Callable, Mapping
from typing import IO, Any, BinaryIO, Protocol, Union

from .attach import AttachContext
from .errors import AttachmentClosed, FileTooLarge, FileTransferFailed, InvalidArgument
from .output import OutputReader
from .protocol import Dropped, ProcessInfo
from .spawn import spawn_body

DEFAULT_MAX_DOWNLOAD = 64 << 20
"""What :meth:`AsyncClient.download` reads into memory at most by default (64 MiB): a longer file is a :class:`FileTooLarge`, never cut short."""

UPLOAD_CHUNK = 64 << 10
"""Bytes read from an upload's source and written to stdin at a time."""

MAX_ERROR_BYTES = 16 << 10
"""The most of the remote program's stderr kept for the error message (the rest is read and dropped)."""

UPLOAD_SCRIPT = 'cat > "$1"'
"""What an upload runs (``/bin/sh -c SCRIPT tether-upload PATH``): the path is an argument, never shell text."""

UPLOAD_MODE_SCRIPT = 'cat > "$1" && chmod "$2" "$1"'
"""An upload with a ``mode``: the same, then ``chmod`` (as the process's user)."""

UploadData = Union[bytes, bytearray, memoryview, str, "os.PathLike[str]", BinaryIO, AsyncIterable[bytes]]
"""What :func:`upload` sends: bytes, text (as UTF-8), a local file (a :class:`os.PathLike`, such as a :class:`pathlib.Path`), a binary file object (read in chunks), or an async iterable of bytes."""

_Source = Union[bytes, bytearray, memoryview, str, BinaryIO, IO[bytes], AsyncIterable[bytes]]
"""An upload's source once a local path is opened."""

DownloadTarget = Union[str, "os.PathLike[str]", BinaryIO]
"""Where :func:`download_to` writes: a local path, or a binary file object."""


class FilesHost(Protocol):
    """What the file calls need of the client (:class:`~tether_client.AsyncClient` is one)."""

    def run_request(self, body: Mapping[str, Any], *, window: int = ...) -> AttachContext: ...


def _check(process: str, path: str) -> None:
    if not isinstance(process, str) or not process:
        raise InvalidArgument("name the process (an id or a name)")
    if not isinstance(path, str) or not path:
        raise InvalidArgument("the path is empty")
    if "\0" in path:
        raise InvalidArgument("a path cannot hold a NUL byte")


async def upload(
    client: FilesHost,
    process: str,
    path: str,
    data: UploadData,
    *,
    mode: int | None = None,
    timeout: float | None = None,
) -> int:
    """Writes ``data`` to ``path`` as ``process`` sees it, as its user; returns the bytes written.

    A relative ``path`` resolves against the process's working directory
    (its current one). The file is created or truncated; its directory must
    exist. ``mode`` (such as ``0o755``) is set with ``chmod`` afterwards.
    ``timeout`` (seconds) is the server-side deadline of the whole copy.
    Raises :class:`FileTransferFailed` with the shell's stderr when the
    file cannot be written (a missing directory, ``Permission denied``),
    :class:`NotFound` for an unknown process, :class:`Forbidden` for a
    token scoped to one process.
    """
    _check(process, path)
    argv = ["/bin/sh", "-c", UPLOAD_SCRIPT, "tether-upload", path]
    if mode is not None:
        if isinstance(mode, bool) or not isinstance(mode, int) or not 0 <= mode <= 0o7777:
            raise InvalidArgument(f"mode must be 0 to 0o7777, not {mode!r}")
        argv = ["/bin/sh", "-c", UPLOAD_MODE_SCRIPT, "tether-upload", path, format(mode, "o")]
    if not isinstance(data, (bytes, bytearray, memoryview, str, os.PathLike, AsyncIterable)) and not callable(
        getattr(data, "read", None)
    ):
        raise InvalidArgument(
            "upload data must be bytes, str, a path, a binary file or an async iterable of bytes, "
            f"not {type(data).__name__}"
        )
    body = spawn_body(argv, stdin=True, overflow="block", beside=process, timeout=timeout)
    # A local file is opened before anything runs: one that cannot be read
    # must not truncate the remote one.
    local: IO[bytes] | None = None
    source: _Source
    if isinstance(data, os.PathLike):
        local = source = await asyncio.to_thread(open, os.fspath(data), "rb")
    else:
        source = data
    try:
        return await _upload(client, process, path, body, _chunks(source))
    finally:
        if local is not None:
            await asyncio.to_thread(local.close)


async def _upload(
    client: FilesHost, process: str, path: str, body: Mapping[str, Any], chunks: AsyncGenerator[bytes, None]
) -> int:
    written = 0
    fed = False
    async with client.run_request(body) as attachment:
        attachment.stdout.discard()
        errors = asyncio.ensure_future(_read_bounded(attachment.stderr))
        try:
            try:
                async for chunk in chunks:
                    await attachment.write(chunk)
                    written += len(chunk)
                await attachment.close_stdin()
                fed = True
            except AttachmentClosed:
                # The shell ended before it had everything (it could not
                # create the file): its exit says why.
                pass
            info = await attachment.wait()
            stderr = await errors
        finally:
            errors.cancel()
            with contextlib.suppress(Exception):
                await chunks.aclose()
    _raise_for_exit("upload to", process, path, info, stderr)
    if not fed:
        raise FileTransferFailed(
            f"upload to {process}:{path}: the shell ended before it had all the data",
            process=process,
            path=path,
            exit_code=info.exit_code,
            reason=info.reason,
            stderr=stderr,
        )
    return written


async def download(
    client: FilesHost,
    process: str,
    path: str,
    *,
    max_bytes: int = DEFAULT_MAX_DOWNLOAD,
    timeout: float | None = None,
    window: int = 256 * 1024,
) -> bytes:
    """The content of ``path`` as ``process`` sees it, read as its user.

    At most ``max_bytes`` (64 MiB by default) are read into memory: a
    longer file raises :class:`FileTooLarge` (never a cut-short result);
    :func:`download_to` streams one of any size. Raises
    :class:`FileTransferFailed` with ``cat``'s stderr when the file cannot
    be read (``No such file or directory``, ``Is a directory``,
    ``Permission denied``).
    """
    if isinstance(max_bytes, bool) or not isinstance(max_bytes, int) or max_bytes < 0:
        raise InvalidArgument(f"max_bytes must be 0 or more, not {max_bytes!r}")
    parts: list[bytes] = []

    async def keep(data: bytes) -> None:
        parts.append(data)

    await _download(client, process, path, keep, max_bytes=max_bytes, timeout=timeout, window=window)
    return b"".join(parts)


async def download_to(
    client: FilesHost,
    process: str,
    path: str,
    dest: DownloadTarget,
    *,
    max_bytes: int | None = None,
    timeout: float | None = None,
    window: int = 256 * 1024,
) -> int:
    """Streams ``path`` as ``process`` sees it into ``dest`` (a local path or a binary file object); returns the bytes written.

    Memory stays bounded by the credit window (``window``) whatever the
    size; ``max_bytes`` (default: none) bounds the length. A local path is
    created (or truncated) once the first byte has come, or at the end for
    an empty file, so a file that cannot be read leaves it untouched; a
    failure after that removes it. A file object gets what came before a
    failure.
    """
    if max_bytes is not None and (isinstance(max_bytes, bool) or not isinstance(max_bytes, int) or max_bytes < 0):
        raise InvalidArgument(f"max_bytes must be 0 or more, not {max_bytes!r}")
    if isinstance(dest, (str, os.PathLike)):
        local = os.fspath(dest)
        opened: list[IO[bytes]] = []

        async def write_file(data: bytes) -> None:
            if not opened:
                opened.append(await asyncio.to_thread(open, local, "wb"))
            await asyncio.to_thread(opened[0].write, data)

        try:
            total = await _download(
                client, process, path, write_file, max_bytes=max_bytes, timeout=timeout, window=window
            )
            if not opened:
                opened.append(await asyncio.to_thread(open, local, "wb"))
            await asyncio.to_thread(opened[0].close)
        except BaseException:
            if opened:
                with contextlib.suppress(OSError):
                    await asyncio.to_thread(opened[0].close)
                with contextlib.suppress(OSError):
                    await asyncio.to_thread(os.unlink, local)
            raise
        return total
    if not callable(getattr(dest, "write", None)):
        raise InvalidArgument("dest must be a local path or a binary file object")
    target = dest

    async def write_object(data: bytes) -> None:
        await asyncio.to_thread(target.write, data)

    return await _download(client, process, path, write_object, max_bytes=max_bytes, timeout=timeout, window=window)


async def _download(
    client: FilesHost,
    process: str,
    path: str,
    sink: Callable[[bytes], Awaitable[None]],
    *,
    max_bytes: int | None,
    timeout: float | None,
    window: int,
) -> int:
    """Runs ``cat -- PATH`` beside ``process`` and hands its stdout to ``sink``; the bytes read."""
    _check(process, path)
    body = spawn_body(["cat", "--", path], overflow="block", beside=process, timeout=timeout)
    total = 0
    async with client.run_request(body, window=window) as attachment:
        errors = asyncio.ensure_future(_read_bounded(attachment.stderr))
        try:
            async for chunk in attachment.stdout:
                if isinstance(chunk, Dropped):
                    # Block mode loses nothing; a server that says it did is not believed to have the whole file.
                    raise FileTransferFailed(
                        f"download of {process}:{path}: the server lost {chunk.length} bytes at offset {chunk.offset}",
                        process=process,
                        path=path,
                    )
                total += len(chunk.data)
                if max_bytes is not None and total > max_bytes:
                    raise FileTooLarge(process=process, path=path, max_bytes=max_bytes)
                await sink(chunk.data)
            info = await attachment.wait()
            stderr = await errors
        finally:
            # Leaving the block early kills the remote cat (the context's exit).
            errors.cancel()
    _raise_for_exit("download of", process, path, info, stderr)
    if info.stdout_bytes != total:
        raise FileTransferFailed(
            f"download of {process}:{path}: {total} bytes came of the {info.stdout_bytes} cat wrote",
            process=process,
            path=path,
            exit_code=info.exit_code,
            reason=info.reason,
            stderr=stderr,
        )
    return total


def _raise_for_exit(what: str, process: str, path: str, info: ProcessInfo, stderr: str) -> None:
    if info.exit_code == 0 and info.reason == "exit":
        return
    said = stderr.strip() or "(nothing on stderr)"
    how = f"exit {info.exit_code}" if info.reason == "exit" else f"{info.reason}, exit {info.exit_code}"
    raise FileTransferFailed(
        f"{what} {process}:{path} failed ({how}): {said}",
        process=process,
        path=path,
        exit_code=info.exit_code,
        reason=info.reason,
        stderr=stderr,
    )


async def _read_bounded(reader: OutputReader) -> str:
    """Up to :data:`MAX_ERROR_BYTES` of a stream; the rest is read (and so credited) and dropped."""
    kept = bytearray()
    while piece := await reader.read(64 << 10):
        kept += piece[: max(0, MAX_ERROR_BYTES - len(kept))]
    return kept.decode("utf-8", "replace")


async def _chunks(data: _Source) -> AsyncGenerator[bytes, None]:
    """The upload's source in chunks of at most :data:`UPLOAD_CHUNK` bytes; a file object is read off the event loop."""
    if isinstance(data, str):
        data = data.encode()
    if isinstance(data, (bytes, bytearray, memoryview)):
        view = memoryview(data).cast("B")
        for start in range(0, len(view), UPLOAD_CHUNK):
            yield bytes(view[start : start + UPLOAD_CHUNK])
        return
    if isinstance(data, AsyncIterable):
        async for piece in data:
            if not isinstance(piece, (bytes, bytearray, memoryview)):
                raise InvalidArgument(f"an upload's async iterable must yield bytes, not {type(piece).__name__}")
            view = memoryview(piece).cast("B")
            for start in range(0, len(view), UPLOAD_CHUNK):
                yield bytes(view[start : start + UPLOAD_CHUNK])
        return
    if callable(getattr(data, "read", None)):
        async for chunk in _read_file(data):
            yield chunk
        return
    raise InvalidArgument(f"upload data cannot be a {type(data).__name__}")


async def _read_file(file: IO[bytes]) -> AsyncIterator[bytes]:
    while True:
        chunk = await asyncio.to_thread(file.read, UPLOAD_CHUNK)
        if not chunk:
            return
        if not isinstance(chunk, (bytes, bytearray)):
            raise InvalidArgument("open the file to upload in binary mode ('rb')")
        yield bytes(chunk)


__all__ = [
    "DEFAULT_MAX_DOWNLOAD",
    "DownloadTarget",
    "FileTooLarge",
    "FileTransferFailed",
    "UploadData",
    "download",
    "download_to",
    "upload",
]
