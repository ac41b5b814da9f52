"""The blocking faces of what the synchronous :class:`~tether_client.Client` opens: readers, attachments, streamed runs, terminals.

Each wraps its asyncio counterpart and runs every call on the client's
private loop thread (:class:`~tether_client.loop_thread.LoopThread`).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from types import TracebackType

from .attach import AttachContext, Attachment, Chunk, OutputReader
from .loop_thread import LoopThread
from .protocol import ProcessInfo
from .run import ExitStatus, Run, RunContext
from .terminal import Terminal, TerminalContext


class SyncReader:
    """The blocking form of :class:`OutputReader`: ``read``, ``chunk``, or ``for chunk in reader``."""

    def __init__(self, runner: LoopThread, reader: OutputReader) -> None:
        self._runner = runner
        self._reader = reader

    @property
    def buffered(self) -> int:
        """Bytes held in the client, waiting to be read."""
        return self._reader.buffered

    @property
    def dropped(self) -> int:
        """Bytes :meth:`read` skipped at ``dropped`` gaps."""
        return self._reader.dropped

    @property
    def offset(self) -> int:
        """Offset of the next byte to be returned."""
        return self._reader.offset

    def read(self, n: int = -1) -> bytes:
        """Up to ``n`` bytes, ``b""`` at the end; every byte to the end with ``n < 0``."""
        return self._runner.run(self._reader.read(n))

    def chunk(self) -> Chunk | None:
        """The next chunk, or ``None`` at the end."""
        return self._runner.run(self._reader.chunk())

    def __iter__(self) -> Iterator[Chunk]:
        return self._runner.iterate(self._reader.__aiter__())

    def discard(self) -> None:
        """Stops buffering this stream (its output is credited and thrown away)."""
        self._runner.loop.call_soon_threadsafe(self._reader.discard)


class SyncAttachment:
    """The blocking form of :class:`Attachment`."""

    def __init__(self, runner: LoopThread, attachment: Attachment, context: AttachContext | None = None) -> None:
        self._runner = runner
        # The context that opened it, whose exit also kills an unexited run.
        self._context = context
        self.aio = attachment
        """The :class:`Attachment` behind this one."""
        self.stdout = SyncReader(runner, attachment.stdout)
        """The stdout reader."""
        self.stderr = SyncReader(runner, attachment.stderr)
        """The stderr reader."""

    @property
    def id(self) -> str:
        """The process id (for a run, the new process's)."""
        return self.aio.id

    @property
    def process(self) -> ProcessInfo | None:
        """The process object of the first ``hello`` frame."""
        return self.aio.process

    @property
    def exit_info(self) -> ProcessInfo | None:
        """The exited process object, if the exit is already known."""
        return self.aio.exit_info

    @property
    def last_rejection(self) -> tuple[str, str] | None:
        """Code and message of the last request the server refused without ending the attachment."""
        return self.aio.last_rejection

    @property
    def connections(self) -> int:
        """Connections opened so far (1 + automatic resumes)."""
        return self.aio.connections

    def chunks(self) -> Iterator[Chunk]:
        """Both streams merged, as chunks arrive."""
        return self._runner.iterate(self.aio.chunks())

    def write(self, data: bytes | str) -> None:
        """Writes to stdin."""
        self._runner.run(self.aio.write(data))

    def close_stdin(self) -> None:
        """Closes stdin (on a PTY: types EOF)."""
        self._runner.run(self.aio.close_stdin())

    def resize(self, cols: int, rows: int) -> None:
        """Sets the PTY window size."""
        self._runner.run(self.aio.resize(cols, rows))

    def signal(self, signal: str) -> None:
        """Sends a signal to the process group."""
        self._runner.run(self.aio.signal(signal))

    def wait(self) -> ProcessInfo:
        """The exited process object."""
        return self._runner.run(self.aio.wait())

    def close(self) -> None:
        """Closes the attachment (the process runs on)."""
        self._runner.run(self.aio.close())

    def __enter__(self) -> SyncAttachment:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._context is None:
            self.close()
        else:
            self._runner.run(self._context.__aexit__(exc_type, exc, tb))


class SyncRun:
    """The blocking form of :class:`Run`: ``with client.exec_stream(cmd) as run: for chunk in run: ...; status = run.wait()``."""

    def __init__(self, runner: LoopThread, context: RunContext) -> None:
        self._runner = runner
        self._context = context
        self._run: Run | None = None

    def __enter__(self) -> SyncRun:
        self._run = self._runner.run(self._context.__aenter__())
        self.stdout = SyncReader(self._runner, self._run.stdout)
        self.stderr = SyncReader(self._runner, self._run.stderr)
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._runner.run(self._context.__aexit__(exc_type, exc, tb))

    def _require(self) -> Run:
        if self._run is None:
            raise RuntimeError("use exec_stream() as a context manager: with client.exec_stream(...) as run:")
        return self._run

    @property
    def process(self) -> ProcessInfo:
        """The process object as spawned."""
        return self._require().process

    @property
    def buffered(self) -> int:
        """Bytes of both streams held in the client."""
        return self._require().buffered

    def __iter__(self) -> Iterator[Chunk]:
        return self._runner.iterate(self._require().__aiter__())

    def write(self, data: bytes | str) -> None:
        """Writes to stdin (spawned with ``stdin=True``)."""
        self._runner.run(self._require().write(data))

    def close_stdin(self) -> None:
        """Closes stdin."""
        self._runner.run(self._require().close_stdin())

    def wait(self) -> ExitStatus:
        """The exit status."""
        return self._runner.run(self._require().wait())


class SyncTerminal:
    """The blocking form of :class:`Terminal`: ``with client.terminal(["bash"]) as term:``."""

    def __init__(self, runner: LoopThread, context: TerminalContext) -> None:
        self._runner = runner
        self._context = context
        self._terminal: Terminal | None = None

    def __enter__(self) -> SyncTerminal:
        self._terminal = self._runner.run(self._context.__aenter__())
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._runner.run(self._context.__aexit__(exc_type, exc, tb))

    def _require(self) -> Terminal:
        if self._terminal is None:
            raise RuntimeError("use terminal() as a context manager: with client.terminal(...) as term:")
        return self._terminal

    @property
    def process(self) -> ProcessInfo:
        """The process object as spawned."""
        return self._require().process

    def write(self, data: bytes | str) -> None:
        """Types into the terminal."""
        self._runner.run(self._require().write(data))

    def expect(self, pattern: str | bytes | re.Pattern[bytes], timeout: float = 10.0) -> str:
        """Reads until ``pattern`` matches; returns the text up to the end of the match."""
        return self._runner.run(self._require().expect(pattern, timeout))

    def read(self, n: int = 65536) -> bytes:
        """Up to ``n`` bytes of output."""
        return self._runner.run(self._require().read(n))

    def resize(self, cols: int, rows: int) -> None:
        """Sets the window size."""
        self._runner.run(self._require().resize(cols, rows))

    def signal(self, signal: str) -> None:
        """Sends a signal to the program's process group."""
        self._runner.run(self._require().signal(signal))

    def send_eof(self) -> None:
        """Types Ctrl-D."""
        self._runner.run(self._require().send_eof())

    def wait(self) -> ExitStatus:
        """The exit status."""
        return self._runner.run(self._require().wait())

    def interact(self) -> ExitStatus:
        """Connects the local terminal to this one until the program exits."""
        return self._runner.run(self._require().interact())


__all__ = ["Client", "SyncAttachment", "SyncReader", "SyncRun", "SyncTerminal"]
