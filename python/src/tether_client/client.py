""":class:`AsyncClient`: the asyncio client of tetherd, its HTTP calls (:class:`~tether_client.http_api.HttpApi`) and the calls that attach.

``attach`` and ``run`` give an :class:`~tether_client.Attachment`,
``exec`` and ``exec_stream`` run a command to completion, ``terminal``
drives a PTY. Those layers are given what they need (the endpoint, the
calls they make), never this class, so that nothing below imports it.
"""

from __future__ import annotations

import functools
import json
import uuid
from collections.abc import Mapping, Sequence
from types import TracebackType
from typing import Any

from .attach import AttachContext, AttachOptions
from .errors import InvalidArgument
from .files import DEFAULT_MAX_DOWNLOAD, DownloadTarget, UploadData, download, download_to, upload
from .http_api import DEFAULT_SERVER, LONG_POLL, HttpApi, MintedToken
from .local_token import is_local_url, local_token_for, local_token_path, runtime_dir
from .protocol import Limits, Overflow
from .retry import RetryPolicy
from .run import ExecResult, RunContext, exec_command
from .spawn import spawn_body
from .terminal import TerminalContext

__all__ = [
    "DEFAULT_SERVER",
    "LONG_POLL",
    "AsyncClient",
    "MintedToken",
    "is_local_url",
    "local_token_for",
    "local_token_path",
    "runtime_dir",
    "spawn_body",
]


class AsyncClient(HttpApi):
    """An asyncio client of one tetherd.

    ``url`` defaults to ``TETHER_SERVER`` or ``http://127.0.0.1:7420``; one
    with a user or password, a query or a fragment raises
    :class:`InvalidArgument`. ``token`` defaults to ``TETHER_TOKEN`` (sent as
    ``Authorization: Bearer``), else, for a server on this machine (a
    loopback address or ``localhost``), the token it generated, from its
    runtime entry for exactly that origin (:func:`local_token_for`). ``ssl`` is the TLS
    context for an ``https://`` server (a private CA, say).
    ``retry`` governs the calls that are safe to retry (spawn, get, list,
    wait, attach); ``request_timeout`` bounds each ordinary request in
    seconds (long-polls get that on top of their poll time);
    ``max_answer_bytes`` bounds each HTTP answer body (64 MiB: a longer one
    is a :class:`ProtocolError`, read no further). Use it as
    ``async with AsyncClient() as client:`` or call :meth:`aclose`.
    """

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

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
        numbered_input: bool = True,
    ) -> AttachContext:
        """Attaches to a process over WebSocket; see :class:`~tether_client.Attachment`.

        Use ``async with client.attach(id) as attachment:`` (closed on
        exit) or ``attachment = await client.attach(id)``. ``window`` is the
        credit window per stream: at most that many bytes of each stream are
        buffered here, the rest waits on the server. ``stdout_offset`` and
        ``stderr_offset`` say where to start (default 0: everything
        retained). A dropped connection is resumed from the next offsets
        within ``reconnect`` (default: this client's retry policy). Input
        is numbered (``numbered_input``, the default): every write, close,
        resize and signal is applied once, in order, across reconnects; a
        resume after the server forgot the input stream fails with
        :class:`~tether_client.InputExpired`.
        """
        options = AttachOptions(
            window=window,
            readonly=readonly,
            stdout_offset=stdout_offset,
            stderr_offset=stderr_offset,
            reconnect=reconnect or self.retry,
            connect_timeout=connect_timeout,
            numbered_input=numbered_input,
        )
        return AttachContext(self.endpoint, self.wait, process_id, options)

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
        limits: Limits | None = None,
        beside: str | None = None,
        record_input: bool = False,
        window: int = 256 * 1024,
        readonly: bool = False,
        reconnect: RetryPolicy | None = None,
        connect_timeout: float = 10.0,
    ) -> AttachContext:
        """Starts a process and attaches to it in one WebSocket (``GET /v1/run``); see :class:`~tether_client.Attachment`.

        One round trip where :meth:`spawn` then :meth:`attach` take two; use
        it as ``async with client.run(cmd, stdin=True) as attachment:`` or
        ``attachment = await client.run(cmd)``. The spawn arguments are
        :meth:`spawn`'s, the rest :meth:`attach`'s. Output is read from the
        first byte; ``attachment.process`` (and ``id``) is the new process,
        and a dropped connection is resumed by attaching to it by id, never
        by running the command again. The first connection carries a random
        ``Idempotency-Key``, so a retry after a lost answer attaches to the
        process that answer started instead of starting another. A refused
        spawn raises the server's error (:class:`SpawnFailed` for
        ``spawn_failed`` and ``cannot_execute``, :class:`NameTaken`,
        :class:`InvalidRequest`...). ``readonly`` does not apply (a
        read-only run could not type): it raises :class:`InvalidArgument`.
        """
        body = spawn_body(
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
        return self.run_request(
            body, window=window, readonly=readonly, reconnect=reconnect, connect_timeout=connect_timeout
        )

    def run_request(
        self,
        body: Mapping[str, Any],
        *,
        window: int = 256 * 1024,
        readonly: bool = False,
        reconnect: RetryPolicy | None = None,
        connect_timeout: float = 10.0,
    ) -> AttachContext:
        """:meth:`run` of a ready ``POST /v1/processes`` body (see :func:`spawn_body`; ``name``, ``unattached_timeout_ms`` and other fields pass through)."""
        if readonly:
            raise InvalidArgument("run starts a new process: readonly does not apply")
        options = AttachOptions(
            window=window,
            reconnect=reconnect or self.retry,
            connect_timeout=connect_timeout,
        )
        return AttachContext(
            self.endpoint,
            self.wait,
            "",
            options,
            run=(json.dumps(dict(body)), str(uuid.uuid4())),
            # Leaving the block before the exit kills and forgets, as
            # exec_stream's and terminal's do.
            kill=functools.partial(self.remove, force=True),
        )

    async def exec(
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
        window: int = 256 * 1024,
        beside: str | None = None,
        record_input: bool = False,
    ) -> ExecResult:
        """Runs a command to completion and returns its output and exit; see :func:`tether_client.run.exec_command`."""
        return await exec_command(
            self,
            command,
            timeout=timeout,
            env=env,
            cwd=cwd,
            input=input,
            tty=tty,
            retain_bytes=retain_bytes,
            limits=limits,
            window=window,
            beside=beside,
            record_input=record_input,
        )

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
    ) -> RunContext:
        """Runs a command and streams its output: ``async with client.exec_stream(cmd) as run: async for chunk in run: ...``; see :class:`~tether_client.Run`.

        Block mode, as :meth:`exec`: every byte is delivered, and at most
        ``window`` bytes of each stream are held here at any time.
        """
        return RunContext(
            self,
            spawn_body(
                command,
                timeout=timeout,
                env=env,
                cwd=cwd,
                stdin=stdin,
                tty=tty,
                retain_bytes=retain_bytes,
                overflow="block",
            ),
            window,
        )

    def terminal(
        self,
        command: str | Sequence[str] = ("bash", "--norc", "-i"),
        *,
        cols: int = 80,
        rows: int = 24,
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
        timeout: float | None = None,
    ) -> TerminalContext:
        """Starts a program on a PTY for scripted interaction: ``async with client.terminal(["bash"]) as term:``; see :class:`~tether_client.Terminal`."""
        return TerminalContext(
            self,
            spawn_body(command, tty=True, cols=cols, rows=rows, env=env, cwd=cwd, timeout=timeout),
        )

    async def upload(
        self,
        process: str,
        path: str,
        data: UploadData,
        *,
        mode: int | None = None,
        timeout: float | None = None,
    ) -> int:
        """Writes ``data`` to ``path`` as ``process`` (an id or a name) sees it, as its user; returns the bytes written.

        ``data`` is bytes, text (UTF-8), a local file (a :class:`os.PathLike`
        such as a :class:`pathlib.Path`), a binary file object or an async
        iterable of bytes, streamed in 64 KiB chunks (at most 1 MiB
        unacknowledged). A relative ``path`` resolves against the process's
        current working directory; the file is created or truncated, its
        directory must exist. ``mode`` (``0o755``) is set afterwards.
        ``timeout`` (seconds) is the server-side deadline of the copy. Runs
        ``/bin/sh -c 'cat > "$1"'`` beside the process (its user, group and
        directory), so it needs the operator's token. Raises
        :class:`FileTransferFailed` with the shell's stderr when the file
        cannot be written, :class:`NotFound` for an unknown process. See
        :mod:`tether_client.files`.
        """
        return await upload(self, process, path, data, mode=mode, timeout=timeout)

    async def download(
        self,
        process: str,
        path: str,
        *,
        max_bytes: int = DEFAULT_MAX_DOWNLOAD,
        timeout: float | None = None,
        window: int = 256 * 1024,
    ) -> bytes:
        """The content of ``path`` as ``process`` (an id or a name) sees it, read as its user with ``cat`` beside it.

        At most ``max_bytes`` (64 MiB by default): a longer file raises
        :class:`FileTooLarge`, never a cut-short result (stream it with
        :meth:`download_to`). Raises :class:`FileTransferFailed` with
        ``cat``'s stderr when the file cannot be read.
        """
        return await download(self, process, path, max_bytes=max_bytes, timeout=timeout, window=window)

    async def download_to(
        self,
        process: str,
        path: str,
        dest: DownloadTarget,
        *,
        max_bytes: int | None = None,
        timeout: float | None = None,
        window: int = 256 * 1024,
    ) -> int:
        """Streams ``path`` as ``process`` sees it into ``dest`` (a local path or a binary file object) with bounded memory; returns the bytes written.

        At most ``window`` bytes are held here at a time, whatever the size;
        ``max_bytes`` (default: none) bounds the length. A local path is
        written only once the first byte has come, and removed if the
        download then fails.
        """
        return await download_to(
            self, process, path, dest, max_bytes=max_bytes, timeout=timeout, window=window
        )
