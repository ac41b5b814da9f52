""":class:`Attachment`: one process's output, input and exit over ``tether.v1``, with credit and automatic resume.

This is the public handle: the readers, stdin, resize, signal, the exit.
The connection that carries it, resumes it and grants credit is
:class:`~tether_client.connection.Connection`.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable, Generator
from types import TracebackType

from .connection import AttachOptions, Connection, WaitExit
from .endpoint import Endpoint
from .errors import AttachmentClosed, InvalidArgument, TetherError
from .output import Chunk, OutputReader
from .protocol import MAX_TERMINAL_SIZE, ProcessInfo, Resize, Signal, Stdin, StdinEof, parse_signal

MAX_STDIN_FRAME = 64 * 1024
"""Largest stdin payload per frame (the server accepts messages up to 1 MiB)."""


class Attachment:
    """An attachment to a process: a reader per stream, stdin, resize, signal and the exit.

    Made by :meth:`AsyncClient.attach` or :meth:`AsyncClient.run`. ``stdout`` and ``stderr`` are
    independent :class:`OutputReader` s, each with its own credit window, so
    a program whose stderr nobody reads still delivers stdout, and the
    reverse. :meth:`chunks` merges both. :meth:`wait` gives the exit as soon
    as the server reports it. A dropped connection is resumed by itself from
    the saved offsets within the reconnect budget: every byte is delivered
    once, in order, and a loss only as a :class:`Dropped` notice.
    :attr:`connections` counts connections made. Stdin is sent at most once:
    a write handed to a connection that then broke may be lost, never
    repeated (``close_stdin`` is repeated after a resume on pipes, where
    closing twice is harmless). Close it with :meth:`close` or use it as an
    async context manager.
    """

    def __init__(
        self,
        endpoint: Endpoint,
        wait_exit: WaitExit,
        process_id: str,
        options: AttachOptions,
        run: tuple[str, str] | None = None,
    ) -> None:
        # For a run: the spawn request (JSON) and its idempotency key.
        self._conn = Connection(endpoint, wait_exit, process_id, options, run)
        self.stdout = OutputReader(self._conn.streams["stdout"])
        """The process's stdout (the whole output of a PTY)."""
        self.stderr = OutputReader(self._conn.streams["stderr"])
        """The process's stderr (empty for a PTY)."""
        self._stdin_closed = False

    @property
    def process(self) -> ProcessInfo | None:
        """The process object of the first ``hello`` frame."""
        return self._conn.process

    @property
    def connections(self) -> int:
        """WebSocket connections opened so far: 1, plus one per automatic resume."""
        return self._conn.connections

    @property
    def last_rejection(self) -> tuple[str, str] | None:
        """Code and message of the last request the server refused without ending the attachment."""
        return self._conn.last_rejection

    @property
    def id(self) -> str:
        """The process id (for a run, the new process's)."""
        return self._conn.process_id

    @property
    def exit_info(self) -> ProcessInfo | None:
        """The exited process object, if the exit is already known."""
        return self._conn.exit

    async def wait(self) -> ProcessInfo:
        """The exited process object, as soon as the server reports the exit (read or not); raises if the attachment failed first."""
        await self._conn.exit_event.wait()
        if self._conn.exit is not None:
            return self._conn.exit
        assert self._conn.exit_error is not None
        raise self._conn.exit_error

    def chunks(self) -> AsyncIterator[Chunk]:
        """Both streams merged, as chunks arrive (``chunk.stream`` tells them apart), until both have ended."""
        return self._merged()

    async def _merged(self) -> AsyncIterator[Chunk]:
        streams = [self._conn.streams["stdout"], self._conn.streams["stderr"]]
        turn = 0
        while True:
            item = None
            # Take turns, so that neither stream starves the other.
            for i in range(2):
                item = streams[(turn + i) % 2].pop()
                if item is not None:
                    turn = (turn + i + 1) % 2
                    break
            if item is not None:
                yield item
                continue
            # ended() raises a stream's failure once its queue is empty.
            if all([s.ended() for s in streams]):
                return
            self._conn.any_data.clear()
            await self._conn.any_data.wait()

    async def write(self, data: bytes | str) -> None:
        """Queues bytes for the process's stdin (a ``str`` is encoded as UTF-8). Waits while the small command queue is full."""
        raw = data.encode() if isinstance(data, str) else bytes(data)
        self._conn.check_input()
        if self._stdin_closed:
            raise AttachmentClosed("stdin was closed")
        for start in range(0, len(raw), MAX_STDIN_FRAME):
            await self._conn.command(Stdin(raw[start : start + MAX_STDIN_FRAME]))

    async def close_stdin(self) -> None:
        """Closes the process's stdin (on a PTY: types the EOF character, usually Ctrl-D)."""
        self._conn.check_input()
        if self._stdin_closed:
            return
        await self._conn.command(StdinEof())
        self._stdin_closed = True

    async def resize(self, cols: int, rows: int) -> None:
        """Sets the PTY window size (the program gets SIGWINCH; ignored for pipes); both 1 to 4096."""
        for name, value in (("cols", cols), ("rows", rows)):
            if not 1 <= value <= MAX_TERMINAL_SIZE:
                raise InvalidArgument(f"{name} {value} is out of range 1..{MAX_TERMINAL_SIZE}")
        self._conn.check_input()
        await self._conn.command(Resize(cols, rows))

    async def signal(self, signal: str) -> None:
        """Sends a signal by name (``"INT"``, ``"TERM"``, ``"SIGHUP"``, ``"9"``...) to the process group."""
        name = parse_signal(signal)
        if name is None:
            raise InvalidArgument(f"unknown signal {signal!r}")
        self._conn.check_input()
        await self._conn.command(Signal(name))

    async def close(self) -> None:
        """Closes the attachment (the process runs on). Readers then end with :class:`AttachmentClosed` unless their stream was complete."""
        await self._conn.close()

    async def __aenter__(self) -> Attachment:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()


KillProcess = Callable[[str], Awaitable[object]]
"""Kills and forgets a process by id (:meth:`AsyncClient.remove` with ``force``)."""


class AttachContext:
    """What :meth:`AsyncClient.attach` and :meth:`AsyncClient.run` return: ``await`` it for an :class:`Attachment`, or ``async with`` it to have the attachment closed on exit (and, for a run, the process killed if it has not exited)."""

    def __init__(
        self,
        endpoint: Endpoint,
        wait_exit: WaitExit,
        process_id: str,
        options: AttachOptions,
        run: tuple[str, str] | None = None,
        kill: KillProcess | None = None,
    ) -> None:
        self._endpoint = endpoint
        self._wait_exit = wait_exit
        self._id = process_id
        self._options = options
        self._run = run
        self._kill = kill
        self._attachment: Attachment | None = None

    async def _open(self) -> Attachment:
        attachment = Attachment(self._endpoint, self._wait_exit, self._id, self._options, self._run)
        await attachment._conn.start()
        return attachment

    def __await__(self) -> Generator[None, None, Attachment]:
        return self._open().__await__()

    async def __aenter__(self) -> Attachment:
        self._attachment = await self._open()
        return self._attachment

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        attachment = self._attachment
        if attachment is None:
            return
        # A run's process is this block's, as exec_stream's is: leaving the
        # block before its exit kills it (an attach leaves it running).
        exited = attachment.exit_info is not None
        await attachment.close()
        if self._kill is not None and not exited and attachment.id:
            with contextlib.suppress(TetherError):
                await self._kill(attachment.id)


__all__ = ["AttachContext", "AttachOptions", "Attachment", "Chunk", "OutputReader"]
