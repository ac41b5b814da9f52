"""The synchronous API, for scripts and notebooks: :class:`Client` runs :class:`AsyncClient` on a private event loop thread.

Every method blocks until its coroutine has finished on that loop, so it
works the same from a plain script, a thread, or a Jupyter notebook (whose
own event loop is never touched). Ctrl-C while a call blocks cancels the
call and raises ``KeyboardInterrupt``.
"""

from __future__ import annotations

import asyncio
import re
import ssl as _ssl
import threading
from collections.abc import AsyncIterator, Coroutine, Iterator, Mapping, Sequence
from types import TracebackType
from typing import Any, TypeVar

from .attach import Attachment, Chunk, OutputReader
from .client import AsyncClient
from .protocol import Overflow, ProcessInfo
from .retry import RetryPolicy
from .run import ExecResult, ExitStatus, Run, RunContext
from .terminal import Terminal, TerminalContext

T = TypeVar("T")


class _LoopThread:
    """An event loop running on a daemon thread of its own."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name="tether-client", daemon=True)
        self._thread.start()

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        """Runs ``coro`` on the loop and returns its result (or raises its exception)."""
        if threading.current_thread() is self._thread:
            coro.close()
            raise RuntimeError("a synchronous tether_client call from inside its own event loop")
        future = asyncio.run_coroutine_threadsafe(coro, self.loop)
        try:
            return future.result()
        except BaseException:
            # KeyboardInterrupt while waiting: cancel the call itself too.
            future.cancel()
            raise

    def iterate(self, iterator: AsyncIterator[T]) -> Iterator[T]:
        """A blocking iterator over an async iterator that lives on the loop."""

        async def step() -> T:
            return await iterator.__anext__()

        try:
            while True:
                try:
                    item = self.run(step())
                except StopAsyncIteration:
                    return
                yield item
        finally:
            aclose = getattr(iterator, "aclose", None)
            if aclose is not None and self.loop.is_running():

                async def close() -> None:
                    await aclose()

                self.run(close())

    def close(self) -> None:
        """Stops the loop and its thread."""
        if self.loop.is_running():
            self.loop.call_soon_threadsafe(self.loop.stop)
            self._thread.join(timeout=5)
        if not self.loop.is_running():
            self.loop.close()


class Client:
    """A blocking client of one tetherd; the same calls as :class:`AsyncClient`, without ``await``.

    ``url`` defaults to ``TETHER_SERVER`` or ``http://127.0.0.1:7420``,
    ``token`` to ``TETHER_TOKEN``. Use ``with Client() as client:`` or call
    :meth:`close`.

    >>> with Client() as client:                     # doctest: +SKIP
    ...     result = client.exec("echo hi; exit 3")
    ...     result.stdout, result.exit_code
    (b'hi\\n', 3)
    """

    def __init__(
        self,
        url: str | None = None,
        *,
        token: str | None = None,
        retry: RetryPolicy | None = None,
        request_timeout: float = 30.0,
        ssl: _ssl.SSLContext | None = None,
    ) -> None:
        self._runner = _LoopThread()

        async def make() -> AsyncClient:
            return AsyncClient(url, token=token, retry=retry, request_timeout=request_timeout, ssl=ssl)

        try:
            self.aio: AsyncClient = self._runner.run(make())
            """The :class:`AsyncClient` behind this one (use it only on this client's loop)."""
        except BaseException:
            self._runner.close()
            raise

    @property
    def base_url(self) -> str:
        """The server's base URL."""
        return self.aio.base_url

    def __enter__(self) -> Client:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:
        """Closes the connection pool and stops the private event loop."""
        if self._runner.loop.is_running():
            self._runner.run(self.aio.aclose())
        self._runner.close()

    def spawn(
        self,
        command: str | Sequence[str],
        *,
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
        timeout: float | None = None,
        tty: bool = False,
        cols: int | None = None,
        rows: int | None = None,
        retain_bytes: int | None = None,
        stdin: bool = False,
        overflow: Overflow | None = None,
    ) -> ProcessInfo:
        """Starts a process and returns its process object (:meth:`AsyncClient.spawn`)."""
        return self._runner.run(
            self.aio.spawn(
                command,
                env=env,
                cwd=cwd,
                timeout=timeout,
                tty=tty,
                cols=cols,
                rows=rows,
                retain_bytes=retain_bytes,
                stdin=stdin,
                overflow=overflow,
            )
        )

    def get(self, process_id: str) -> ProcessInfo:
        """The process object (:meth:`AsyncClient.get`)."""
        return self._runner.run(self.aio.get(process_id))

    def list(self) -> list[ProcessInfo]:
        """Every process the server knows (:meth:`AsyncClient.list`)."""
        return self._runner.run(self.aio.list())

    def wait(self, process_id: str, timeout: float | None = None) -> ProcessInfo:
        """Waits for the exit, across long-poll expiries and transient errors (:meth:`AsyncClient.wait`)."""
        return self._runner.run(self.aio.wait(process_id, timeout))

    def signal(self, process_id: str, signal: str) -> ProcessInfo:
        """Sends a signal to the process group (:meth:`AsyncClient.signal`)."""
        return self._runner.run(self.aio.signal(process_id, signal))

    def kill(self, process_id: str) -> ProcessInfo:
        """Kills the whole session and forgets the process (:meth:`AsyncClient.kill`)."""
        return self._runner.run(self.aio.kill(process_id))

    def write_stdin(self, process_id: str, data: bytes | str) -> None:
        """Writes to stdin over HTTP (:meth:`AsyncClient.write_stdin`)."""
        self._runner.run(self.aio.write_stdin(process_id, data))

    def close_stdin(self, process_id: str) -> None:
        """Closes stdin over HTTP (:meth:`AsyncClient.close_stdin`)."""
        self._runner.run(self.aio.close_stdin(process_id))

    def resize(self, process_id: str, cols: int, rows: int) -> None:
        """Sets a PTY's window size over HTTP (:meth:`AsyncClient.resize`)."""
        self._runner.run(self.aio.resize(process_id, cols, rows))

    def exec(
        self,
        command: str | Sequence[str],
        *,
        timeout: float | None = None,
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
        input: bytes | str | None = None,
        tty: bool = False,
        retain_bytes: int | None = None,
    ) -> ExecResult:
        """Runs a command to completion and returns stdout, stderr, exit code and reason (:meth:`AsyncClient.exec`)."""
        return self._runner.run(
            self.aio.exec(
                command,
                timeout=timeout,
                env=env,
                cwd=cwd,
                input=input,
                tty=tty,
                retain_bytes=retain_bytes,
            )
        )

    def attach(
        self,
        process_id: str,
        *,
        window: int = 256 * 1024,
        readonly: bool = False,
        stdout_offset: int = 0,
        stderr_offset: int = 0,
        reconnect: RetryPolicy | None = None,
        connect_timeout: float = 10.0,
    ) -> SyncAttachment:
        """Attaches to a process (:meth:`AsyncClient.attach`); use ``with client.attach(id) as attachment:``."""

        async def open_() -> Attachment:
            return await self.aio.attach(
                process_id,
                window=window,
                readonly=readonly,
                stdout_offset=stdout_offset,
                stderr_offset=stderr_offset,
                reconnect=reconnect,
                connect_timeout=connect_timeout,
            )

        return SyncAttachment(self._runner, self._runner.run(open_()))

    def run(
        self,
        command: str | Sequence[str],
        *,
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
        timeout: float | None = None,
        tty: bool = False,
        cols: int | None = None,
        rows: int | None = None,
        retain_bytes: int | None = None,
        stdin: bool = False,
        overflow: Overflow | None = None,
        window: int = 256 * 1024,
        readonly: bool = False,
        reconnect: RetryPolicy | None = None,
        connect_timeout: float = 10.0,
    ) -> SyncAttachment:
        """Starts a process and attaches to it in one WebSocket (:meth:`AsyncClient.run`); use ``with client.run(cmd) as attachment:``."""
        context = self.aio.run(
            command,
            env=env,
            cwd=cwd,
            timeout=timeout,
            tty=tty,
            cols=cols,
            rows=rows,
            retain_bytes=retain_bytes,
            stdin=stdin,
            overflow=overflow,
            window=window,
            readonly=readonly,
            reconnect=reconnect,
            connect_timeout=connect_timeout,
        )

        async def open_() -> Attachment:
            return await context

        return SyncAttachment(self._runner, self._runner.run(open_()))

    def exec_stream(
        self,
        command: str | Sequence[str],
        *,
        timeout: float | None = None,
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
        stdin: bool = False,
        tty: bool = False,
        retain_bytes: int | None = None,
        window: int = 256 * 1024,
    ) -> SyncRun:
        """Runs a command and streams its output: ``with client.exec_stream(cmd) as run: for chunk in run: ...`` (:meth:`AsyncClient.exec_stream`)."""

        async def make() -> RunContext:
            return self.aio.exec_stream(
                command,
                timeout=timeout,
                env=env,
                cwd=cwd,
                stdin=stdin,
                tty=tty,
                retain_bytes=retain_bytes,
                window=window,
            )

        return SyncRun(self._runner, self._runner.run(make()))

    def terminal(
        self,
        command: str | Sequence[str] = ("bash", "--norc", "-i"),
        *,
        cols: int = 80,
        rows: int = 24,
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
        timeout: float | None = None,
    ) -> SyncTerminal:
        """Starts a program on a PTY: ``with client.terminal(["bash"]) as term:`` (:meth:`AsyncClient.terminal`)."""

        async def make() -> TerminalContext:
            return self.aio.terminal(command, cols=cols, rows=rows, env=env, cwd=cwd, timeout=timeout)

        return SyncTerminal(self._runner, self._runner.run(make()))


class SyncReader:
    """The blocking form of :class:`OutputReader`: ``read``, ``chunk``, or ``for chunk in reader``."""

    def __init__(self, runner: _LoopThread, reader: OutputReader) -> None:
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

    def __init__(self, runner: _LoopThread, attachment: Attachment) -> None:
        self._runner = runner
        self.aio = attachment
        """The :class:`Attachment` behind this one."""
        self.stdout = SyncReader(runner, attachment.stdout)
        """The stdout reader."""
        self.stderr = SyncReader(runner, attachment.stderr)
        """The stderr reader."""

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
        self.close()


class SyncRun:
    """The blocking form of :class:`Run`: ``with client.exec_stream(cmd) as run: for chunk in run: ...; status = run.wait()``."""

    def __init__(self, runner: _LoopThread, context: RunContext) -> None:
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

    def __init__(self, runner: _LoopThread, context: TerminalContext) -> None:
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
