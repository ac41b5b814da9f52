"""Running a command to completion: :func:`exec_command` (collects the output) and :class:`Run` (streams it)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Protocol

from .attach import AttachContext, Attachment, Chunk, OutputReader
from .errors import BodyTooLarge, ProtocolError, TetherError
from .exec_once import ExecHost, exec_once, fits_one_request
from .protocol import Data, ExitReason, Limits, ProcessInfo
from .spawn import spawn_body

EXIT_GRACE = 60.0
"""Seconds to wait for the exit once the output has ended (it normally comes at once)."""


class ProcessHost(ExecHost, Protocol):
    """What running a command needs of the client: :class:`~tether_client.AsyncClient` is one.

    A protocol rather than the class, so that this layer sits below the
    client and never imports it.
    """

    async def spawn_request(self, body: Mapping[str, Any]) -> ProcessInfo: ...

    def attach(self, process_id: str, *, window: int = ...) -> AttachContext: ...

    async def remove(self, process_id: str, *, force: bool = False) -> ProcessInfo: ...


@dataclass(frozen=True)
class ExitStatus:
    """How a process ended.

    ``exit_code`` is the program's own code, 128+N after signal N, or 124
    when the server's deadline fired (``reason == "timeout"``, distinct from
    ``"signal"``, a death by a signal the server did not send for a
    deadline, and ``"killed"``, by ``kill``). ``output_incomplete`` is true
    when a descendant kept an output open past the server's drain bound, so
    capture stopped before end of file. ``dropped`` counts bytes lost to
    ``dropped`` gaps (always 0 in block mode, which ``exec`` uses).
    """

    exit_code: int
    reason: ExitReason
    signal: str | None
    output_incomplete: bool
    dropped: int
    process: ProcessInfo

    @property
    def ok(self) -> bool:
        """True for exit code 0 with reason ``exit``."""
        return self.exit_code == 0 and self.reason == "exit"

    @property
    def timed_out(self) -> bool:
        """True when the server's deadline killed the process."""
        return self.reason == "timeout"

    @classmethod
    def of(cls, info: ProcessInfo, dropped: int) -> ExitStatus:
        """The status of an exited process object."""
        if info.exit_code is None or info.reason is None:
            raise ProtocolError("an exited process without an exit code or a reason")
        return cls(
            exit_code=info.exit_code,
            reason=info.reason,
            signal=info.signal,
            output_incomplete=info.output_incomplete,
            dropped=dropped,
            process=info,
        )


@dataclass(frozen=True)
class ExecResult(ExitStatus):
    """What :meth:`AsyncClient.exec` returns: the :class:`ExitStatus` and everything the process wrote.

    ``stdout`` and ``stderr`` are bytes (on a PTY, the whole output is in
    ``stdout``); ``stdout_text`` and ``stderr_text`` decode them as UTF-8,
    replacing invalid sequences.
    """

    stdout: bytes = b""
    stderr: bytes = b""

    @property
    def stdout_text(self) -> str:
        """stdout decoded as UTF-8 (invalid bytes become U+FFFD)."""
        return self.stdout.decode("utf-8", "replace")

    @property
    def stderr_text(self) -> str:
        """stderr decoded as UTF-8 (invalid bytes become U+FFFD)."""
        return self.stderr.decode("utf-8", "replace")


def _exec_window(window: int, retain_bytes: int | None) -> int:
    # Keep the credit window below the retention: in block mode the server
    # keeps sent-but-uncredited bytes retained, so with a window as large as
    # the retention the program would stop at every round trip.
    if retain_bytes is not None:
        return min(window, max(1, retain_bytes // 2))
    return window


async def exec_command(
    client: ProcessHost,
    command: str | Sequence[str],
    *,
    timeout: float | None = None,
    env: Mapping[str, str] | None = None,
    cwd: str | None = None,
    input: bytes | str | None = None,
    tty: bool = False,
    retain_bytes: int | None = None,
    limits: Limits | None = None,
    window: int = 256 * 1024,
    beside: str | None = None,
    record_input: bool = False,
) -> ExecResult:
    """Runs a command to completion and returns its output, exit code and reason.

    ``command`` is shell text (``str``, run by ``/bin/sh -c``) or argv (a
    sequence). ``timeout`` (seconds) is the server-side deadline: when it
    fires the result has ``reason == "timeout"`` and ``exit_code == 124``.
    ``input`` is written to stdin, which is then closed (without it, stdin
    is ``/dev/null``). The output is collected in memory: to stream a large
    output use :meth:`AsyncClient.exec_stream`. Raises :class:`SpawnFailed`
    when the program cannot be started.

    One request (``POST /v1/exec``) runs it and brings the first MiB of
    each stream; a longer stream's rest is read back from the server's
    retention (``--retain-bytes`` per stream, 64 MiB by default), and a
    stream longer than both loses its middle, counted in ``dropped``.
    Cancelling the call kills the command. With ``retain_bytes`` given, or
    an ``input`` too large for one request body (over 512 KiB encoded, or
    refused by the server's ``--max-body-bytes``), the
    process is spawned and attached to instead, in block mode (the server
    keeps every byte until this client has read it, pacing the program), so
    the output is complete whatever the retention; ``window`` is that
    attachment's credit window. ``beside`` (a process id or name) runs it
    with that process's user, group and working directory.
    """
    if retain_bytes is None and fits_one_request(input):
        body = spawn_body(
            command,
            timeout=timeout,
            env=env,
            cwd=cwd,
            tty=tty,
            overflow="block",
            limits=limits,
            beside=beside,
            record_input=record_input,
        )
        try:
            info, stdout, stderr, lost = await exec_once(client, body, input)
        except BodyTooLarge:
            # A server with a smaller --max-body-bytes refused the input
            # before starting anything: attach and stream it instead.
            pass
        else:
            status = ExitStatus.of(info, lost)
            return ExecResult(**{**status.__dict__, "stdout": stdout, "stderr": stderr})
    body = spawn_body(
        command,
        timeout=timeout,
        env=env,
        cwd=cwd,
        stdin=input is not None and not tty,
        tty=tty,
        retain_bytes=retain_bytes,
        overflow="block",
        limits=limits,
        beside=beside,
        record_input=record_input,
    )
    process = await client.spawn_request(body)
    async with client.attach(process.id, window=_exec_window(window, retain_bytes)) as attachment:
        if input is not None:
            await attachment.write(input)
            await attachment.close_stdin()
        readers = [asyncio.ensure_future(_collect(r)) for r in (attachment.stdout, attachment.stderr)]
        try:
            out, err = await asyncio.gather(*readers)
        finally:
            # If one failed, the other must not outlive this call.
            for task in readers:
                task.cancel()
        info = await asyncio.wait_for(attachment.wait(), EXIT_GRACE)
    status = ExitStatus.of(info, out[1] + err[1])
    return ExecResult(**{**status.__dict__, "stdout": out[0], "stderr": err[0]})


async def _collect(reader: OutputReader) -> tuple[bytes, int]:
    data = await reader.read()
    return data, reader.dropped


class Run:
    """A running command whose output is streamed, from :meth:`AsyncClient.exec_stream`.

    ``async for chunk in run`` yields the chunks of both streams as they
    arrive (:class:`Data` with ``chunk.stream`` ``"stdout"`` or
    ``"stderr"``, or a :class:`Dropped` notice), and ends when both streams
    have; at most the credit window of each stream is held in memory, the
    rest waits on the server (block mode paces the program). Or read
    ``run.stdout`` and ``run.stderr`` separately. :meth:`wait` gives the
    :class:`ExitStatus`. Leaving the ``async with`` block before the process
    has exited kills it.
    """

    def __init__(self, process: ProcessInfo, attachment: Attachment) -> None:
        self.process = process
        """The process object as spawned."""
        self.attachment = attachment
        """The underlying attachment (stdin, resize, signal)."""
        self.stdout: OutputReader = attachment.stdout
        """The stdout reader."""
        self.stderr: OutputReader = attachment.stderr
        """The stderr reader."""
        self._dropped = 0

    def __aiter__(self) -> AsyncIterator[Chunk]:
        return self._iterate()

    async def _iterate(self) -> AsyncIterator[Chunk]:
        async for chunk in self.attachment.chunks():
            if not isinstance(chunk, Data):
                self._dropped += chunk.length
            yield chunk

    @property
    def buffered(self) -> int:
        """Bytes of both streams held in the client, waiting to be read."""
        return self.stdout.buffered + self.stderr.buffered

    async def write(self, data: bytes | str) -> None:
        """Writes to the process's stdin (spawned with ``stdin=True``)."""
        await self.attachment.write(data)

    async def close_stdin(self) -> None:
        """Closes the process's stdin."""
        await self.attachment.close_stdin()

    async def wait(self) -> ExitStatus:
        """The exit status, once the process has exited (read its output, or it may wait for you in block mode)."""
        info = await self.attachment.wait()
        return ExitStatus.of(info, self._dropped + self.stdout.dropped + self.stderr.dropped)


class RunContext:
    """What :meth:`AsyncClient.exec_stream` returns: ``async with`` it for a :class:`Run`."""

    def __init__(self, client: ProcessHost, body: dict[str, Any], window: int) -> None:
        self._client = client
        self._body = body
        self._window = _exec_window(window, body.get("retain_bytes"))
        self._run: Run | None = None

    async def __aenter__(self) -> Run:
        process = await self._client.spawn_request(self._body)
        try:
            attachment = await self._client.attach(process.id, window=self._window)
        except BaseException:
            with contextlib.suppress(TetherError):
                await self._client.remove(process.id, force=True)
            raise
        self._run = Run(process, attachment)
        return self._run

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        run = self._run
        if run is None:
            return
        exited = run.attachment.exit_info is not None
        await run.attachment.close()
        if not exited:
            with contextlib.suppress(TetherError):
                await self._client.remove(run.process.id, force=True)
