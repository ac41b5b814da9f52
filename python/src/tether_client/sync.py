"""The synchronous API, for scripts and notebooks: :class:`Client` runs :class:`AsyncClient` on a private event loop thread.

Every method blocks until its coroutine has finished on that loop, so it
works the same from a plain script, a thread, or a Jupyter notebook (whose
own event loop is never touched). Ctrl-C while a call blocks cancels the
call and raises ``KeyboardInterrupt``.
"""

from __future__ import annotations

import ssl as _ssl
import weakref
from collections.abc import Mapping, Sequence
from types import TracebackType

from .attach import Attachment
from .client import AsyncClient
from .files import DEFAULT_MAX_DOWNLOAD, DownloadTarget, UploadData
from .http_api import MintedToken
from .loop_thread import LoopThread
from .protocol import Limits, Overflow, ProcessInfo
from .retry import RetryPolicy
from .run import ExecResult, RunContext
from .transport import DEFAULT_MAX_ANSWER_BYTES
from .sync_handles import SyncAttachment, SyncReader, SyncRun, SyncTerminal
from .terminal import TerminalContext

# The handles are re-exported: ``tether_client.sync`` names everything blocking.
__all__ = ["Client", "SyncAttachment", "SyncReader", "SyncRun", "SyncTerminal"]


class Client:
    """A blocking client of one tetherd; the same calls as :class:`AsyncClient`, without ``await``.

    ``url`` defaults to ``TETHER_SERVER`` or ``http://127.0.0.1:7420``,
    ``token`` to ``TETHER_TOKEN``; the other arguments are
    :class:`AsyncClient`'s. Use ``with Client() as client:`` or call
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
        max_answer_bytes: int = DEFAULT_MAX_ANSWER_BYTES,
    ) -> None:
        self._runner = LoopThread()

        async def make() -> AsyncClient:
            return AsyncClient(
                url,
                token=token,
                retry=retry,
                request_timeout=request_timeout,
                ssl=ssl,
                max_answer_bytes=max_answer_bytes,
            )

        try:
            self.aio: AsyncClient = self._runner.run(make())
            """The :class:`AsyncClient` behind this one (use it only on this client's loop)."""
        except BaseException:
            self._runner.close()
            raise
        # A client never closed is closed when it is collected, or at exit
        # (the loop thread is still alive then): its connections go quietly,
        # without aiohttp's "Unclosed client session".
        self._finalizer = weakref.finalize(self, _close, self._runner, self.aio)

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
        self._finalizer()

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
        limits: Limits | None = None,
        beside: str | None = None,
        record_input: bool = False,
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
                limits=limits,
                beside=beside,
                record_input=record_input,
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
        """Kills the whole session and keeps the process until :meth:`remove` (:meth:`AsyncClient.kill`)."""
        return self._runner.run(self.aio.kill(process_id))

    def remove(self, process_id: str, *, force: bool = False) -> ProcessInfo:
        """Forgets the process; ``force`` kills a running one first (:meth:`AsyncClient.remove`)."""
        return self._runner.run(self.aio.remove(process_id, force=force))

    def set_unattached_timeout(self, process_id: str, timeout: float | None) -> ProcessInfo:
        """Sets a running process's unattached timeout (:meth:`AsyncClient.set_unattached_timeout`)."""
        return self._runner.run(self.aio.set_unattached_timeout(process_id, timeout))

    def write_stdin(self, process_id: str, data: bytes | str) -> None:
        """Writes to stdin over HTTP (:meth:`AsyncClient.write_stdin`)."""
        self._runner.run(self.aio.write_stdin(process_id, data))

    def close_stdin(self, process_id: str) -> None:
        """Closes stdin over HTTP (:meth:`AsyncClient.close_stdin`)."""
        self._runner.run(self.aio.close_stdin(process_id))

    def resize(self, process_id: str, cols: int, rows: int) -> None:
        """Sets a PTY's window size over HTTP (:meth:`AsyncClient.resize`)."""
        self._runner.run(self.aio.resize(process_id, cols, rows))

    def read_output(
        self, process_id: str, stream: str = "stdout", offset: int = 0, *, timeout: float | None = None
    ) -> bytes:
        """The retained bytes of one stream from ``offset`` on (:meth:`AsyncClient.read_output`)."""
        return self._runner.run(self.aio.read_output(process_id, stream, offset, timeout=timeout))

    def mint_token(
        self, process_id: str, rights: Sequence[str] = ("read",), ttl: float | None = None
    ) -> MintedToken:
        """Mints a token scoped to this one process (:meth:`AsyncClient.mint_token`)."""
        return self._runner.run(self.aio.mint_token(process_id, rights, ttl))

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
        limits: Limits | None = None,
        beside: str | None = None,
        record_input: bool = False,
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
                limits=limits,
                beside=beside,
                record_input=record_input,
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
        beside: str | None = None,
        record_input: bool = False,
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
            beside=beside,
            record_input=record_input,
            window=window,
            readonly=readonly,
            reconnect=reconnect,
            connect_timeout=connect_timeout,
        )

        return SyncAttachment(self._runner, self._runner.run(context.__aenter__()), context)

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

    def upload(
        self,
        process: str,
        path: str,
        data: UploadData,
        *,
        mode: int | None = None,
        timeout: float | None = None,
    ) -> int:
        """Writes ``data`` (bytes, text, a local path, a binary file object) to ``path`` as ``process`` sees it, as its user (:meth:`AsyncClient.upload`)."""
        return self._runner.run(self.aio.upload(process, path, data, mode=mode, timeout=timeout))

    def download(
        self,
        process: str,
        path: str,
        *,
        max_bytes: int = DEFAULT_MAX_DOWNLOAD,
        timeout: float | None = None,
        window: int = 256 * 1024,
    ) -> bytes:
        """The content of ``path`` as ``process`` sees it, at most ``max_bytes`` (64 MiB) (:meth:`AsyncClient.download`)."""
        return self._runner.run(
            self.aio.download(process, path, max_bytes=max_bytes, timeout=timeout, window=window)
        )

    def download_to(
        self,
        process: str,
        path: str,
        dest: DownloadTarget,
        *,
        max_bytes: int | None = None,
        timeout: float | None = None,
        window: int = 256 * 1024,
    ) -> int:
        """Streams ``path`` as ``process`` sees it into a local path or a binary file object with bounded memory (:meth:`AsyncClient.download_to`)."""
        return self._runner.run(
            self.aio.download_to(process, path, dest, max_bytes=max_bytes, timeout=timeout, window=window)
        )


def _close(runner: LoopThread, aio: AsyncClient) -> None:
    """Closes a client's pool on its loop, then stops the loop: :meth:`Client.close`, also run at collection or exit."""
    if runner.loop.is_running():
        runner.run(aio.aclose())
    runner.close()
