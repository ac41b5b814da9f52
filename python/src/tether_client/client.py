""":class:`AsyncClient`: the HTTP API of tetherd, with retries where they are safe."""

from __future__ import annotations

import json
import math
import ipaddress
import os
import ssl as _ssl
import time
import uuid
from pathlib import Path
from collections.abc import Mapping, Sequence
from types import TracebackType
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

import httpx

from .errors import InvalidArgument, ProtocolError, TetherError, TransportError, error_from_response
from .protocol import MAX_TERMINAL_SIZE, Overflow, ProcessInfo, parse_signal
from .retry import Backoff, RetryPolicy

if TYPE_CHECKING:
    from .attach import AttachContext
    from .run import ExecResult, RunContext
    from .terminal import TerminalContext

DEFAULT_SERVER = "http://127.0.0.1:7420"
"""The server used when neither an argument nor ``TETHER_SERVER`` names one."""

LONG_POLL = 25.0
"""Seconds each ``wait`` long-poll asks the server to hold (the server caps it at ``--max-wait-ms``)."""


def spawn_body(
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
) -> dict[str, Any]:
    """The JSON body of ``POST /v1/processes``.

    ``command`` is shell text (run as ``/bin/sh -c TEXT``) when a ``str``, or
    a program and its arguments (PATH is searched) when a sequence.
    ``timeout`` is the server-side deadline in seconds (reason ``timeout``,
    exit code 124). Raises :class:`InvalidArgument` for values the server
    would refuse.
    """
    body: dict[str, Any] = {}
    if isinstance(command, str):
        if not command:
            raise InvalidArgument("the command is empty")
        body["command"] = command
    else:
        argv = list(command)
        if not argv or not all(isinstance(a, str) for a in argv):
            raise InvalidArgument("argv must be a non-empty sequence of strings")
        body["argv"] = argv
    if env:
        body["env"] = dict(env)
    if cwd is not None:
        body["cwd"] = cwd
    if timeout is not None:
        if not timeout > 0 or math.isinf(timeout):
            raise InvalidArgument(f"timeout must be a positive number of seconds, not {timeout!r}")
        # Round up, so that a sub-millisecond deadline is not "none".
        body["timeout_ms"] = math.ceil(timeout * 1000)
    if tty:
        body["tty"] = True
    for name, value in (("cols", cols), ("rows", rows)):
        if value is not None:
            if not tty:
                raise InvalidArgument(f"{name} needs tty=True")
            _check_size(name, value)
            body[name] = value
    if retain_bytes is not None:
        if retain_bytes <= 0:
            raise InvalidArgument("retain_bytes must be positive")
        body["retain_bytes"] = retain_bytes
    if stdin:
        body["stdin"] = True
    if overflow is not None:
        if overflow not in ("drop", "block"):
            raise InvalidArgument(f"overflow must be 'drop' or 'block', not {overflow!r}")
        body["overflow"] = overflow
    return body


def _check_size(name: str, value: int) -> None:
    if not 1 <= value <= MAX_TERMINAL_SIZE:
        raise InvalidArgument(f"{name} {value} is out of range 1..{MAX_TERMINAL_SIZE}")


def _segment(process_id: str) -> str:
    return quote(process_id, safe="")


def local_token_path() -> Path | None:
    """Where a tetherd on this machine writes a token it generated (the server's rule).

    ``$TETHER_TOKEN_FILE``, else ``$XDG_RUNTIME_DIR/tether/token``, else
    ``~/.local/state/tether/token``.
    """
    if os.environ.get("TETHER_TOKEN_FILE"):
        return Path(os.environ["TETHER_TOKEN_FILE"])
    if os.environ.get("XDG_RUNTIME_DIR"):
        return Path(os.environ["XDG_RUNTIME_DIR"]) / "tether" / "token"
    home = os.environ.get("HOME")
    return Path(home) / ".local" / "state" / "tether" / "token" if home else None


def local_token() -> str | None:
    """The token in :func:`local_token_path`, if the file exists and holds one."""
    path = local_token_path()
    try:
        text = path.read_text() if path else ""
    except OSError:
        return None
    first = text.splitlines()[0].strip() if text.strip() else ""
    return first or None


def is_local_url(base: str) -> bool:
    """True for a base URL whose host is a loopback address or ``localhost``."""
    host = (httpx.URL(base).host or "").lower()
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class AsyncClient:
    """An asyncio client of one tetherd.

    ``url`` defaults to ``TETHER_SERVER`` or ``http://127.0.0.1:7420``;
    ``token`` to ``TETHER_TOKEN`` (sent as ``Authorization: Bearer``), else,
    for a server on this machine (a loopback address or ``localhost``), the
    token it generated, from :func:`local_token_path`. ``ssl`` is the TLS
    context for an ``https://`` server (a private CA, say).
    ``retry`` governs the calls that are safe to retry (spawn, get, list,
    wait, attach); ``request_timeout`` bounds each ordinary request in
    seconds (long-polls get that on top of their poll time). Use it as
    ``async with AsyncClient() as client:`` or call :meth:`aclose`.
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
        base = (url or os.environ.get("TETHER_SERVER") or DEFAULT_SERVER).strip().rstrip("/")
        for scheme in ("http://", "https://"):
            if base.startswith(scheme):
                if not base[len(scheme) :]:
                    raise InvalidArgument(f"server URL {url!r} has no host")
                break
        else:
            raise InvalidArgument(f"server URL {base!r} must start with http:// or https://")
        self.base_url = base
        """The server's base URL, without a trailing slash."""
        env_token = os.environ.get("TETHER_TOKEN")
        if token is None and not env_token and is_local_url(base):
            env_token = local_token()
        self.token: str | None = token if token is not None else (env_token or None)
        """The bearer token sent with every request, if any."""
        self.ssl = ssl
        """The TLS context for an https:// server, if one was given."""
        self.retry = retry or RetryPolicy()
        """The retry policy in force."""
        self.request_timeout = request_timeout
        """Timeout of each ordinary request, in seconds."""
        self._contacted = False
        headers = {"User-Agent": "tether-client-python"}
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        self._headers = headers
        self._http = httpx.AsyncClient(
            headers=headers,
            verify=ssl if ssl is not None else True,
            timeout=httpx.Timeout(request_timeout, connect=min(request_timeout, 10.0)),
        )

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Closes the HTTP connection pool. Attachments opened from this client should be closed first."""
        await self._http.aclose()

    # ------------------------------------------------------------ processes

    async def spawn(
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
        """Starts a process and returns its process object.

        ``command``: shell text (``str``) or argv (a sequence). ``env`` adds
        variables, ``cwd`` sets the directory, ``timeout`` (seconds) the
        server-side deadline, ``tty`` a PTY of ``cols`` x ``rows`` (80x24),
        ``retain_bytes`` the per-stream retention, ``stdin`` a stdin pipe
        (default: ``/dev/null``), ``overflow`` ``"drop"`` (default) or
        ``"block"``. The request carries a random ``Idempotency-Key`` and
        transient failures are retried with the same key, so the command
        starts at most once. Raises :class:`SpawnFailed` when the program
        cannot be started.
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
        )
        return await self.spawn_request(body)

    async def spawn_request(self, body: Mapping[str, Any]) -> ProcessInfo:
        """Starts a process from a ready ``POST /v1/processes`` body (see :func:`spawn_body`), with an ``Idempotency-Key`` and retries as :meth:`spawn`."""
        key = str(uuid.uuid4())
        payload = json.dumps(dict(body)).encode()
        backoff = Backoff(self.retry)
        while True:
            try:
                return ProcessInfo.from_wire(
                    await self._json("POST", "/v1/processes", content=payload, idempotency_key=key)
                )
            except TetherError as e:
                await backoff.failed(e, contacted=self._contacted)

    async def get(self, process_id: str) -> ProcessInfo:
        """The process object of ``process_id`` (``GET /v1/processes/{id}``); raises :class:`NotFound`."""
        return ProcessInfo.from_wire(await self._retried("GET", f"/v1/processes/{_segment(process_id)}"))

    async def list(self) -> list[ProcessInfo]:
        """Every process the server knows, running or exited (``GET /v1/processes``)."""
        value = await self._retried("GET", "/v1/processes")
        if not isinstance(value, list):
            raise ProtocolError("GET /v1/processes did not answer a list")
        return [ProcessInfo.from_wire(p) for p in value]

    async def wait(self, process_id: str, timeout: float | None = None) -> ProcessInfo:
        """Waits until the process has exited and returns its final process object.

        Long-polls the server, again after each server-side expiry, and
        retries transient failures (connection refused or reset, 429, 502,
        503, 504) within the retry budget, which starts afresh after every
        answer. With ``timeout`` (seconds) it returns the process object,
        ``status == "running"``, once that much time has passed without an
        exit. It never reports a failure as an exit: the result is a process
        object or an exception (:class:`NotFound` at once for an unknown id).
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        path = f"/v1/processes/{_segment(process_id)}/wait"
        backoff = Backoff(self.retry)
        while True:
            poll = LONG_POLL if deadline is None else max(0.0, min(LONG_POLL, deadline - time.monotonic()))
            try:
                value = await self._json(
                    "GET",
                    f"{path}?timeout_ms={int(poll * 1000)}",
                    timeout=poll + self.request_timeout,
                )
            except TetherError as e:
                await backoff.failed(e, contacted=self._contacted)
                continue
            info = ProcessInfo.from_wire(value)
            if info.exited or (deadline is not None and time.monotonic() >= deadline):
                return info
            backoff.reset()

    async def signal(self, process_id: str, signal: str) -> ProcessInfo:
        """Sends a signal (``"TERM"``, ``"INT"``, ``"KILL"``, ``"SIGHUP"``, ``"9"``...) to the process group. Not retried: a signal must not be delivered twice. Raises :class:`NotRunning` once it has exited."""
        name = parse_signal(signal)
        if name is None:
            raise InvalidArgument(f"unknown signal {signal!r}")
        body = json.dumps({"signal": name}).encode()
        return ProcessInfo.from_wire(
            await self._json("POST", f"/v1/processes/{_segment(process_id)}/signal", content=body)
        )

    async def kill(self, process_id: str) -> ProcessInfo:
        """Kills the whole session of the process (SIGTERM, SIGKILL after the server's grace), waits for its exit, forgets it on the server and returns its final object (reason ``killed`` if it was running). Not retried.

        This is the one place that knows how the server kills: today
        ``DELETE /v1/processes/{id}?force=1`` (a plain DELETE refuses a running
        process with 409 ``still_running``; ``POST .../kill`` kills and keeps).
        """
        return ProcessInfo.from_wire(
            await self._json(
                "DELETE",
                f"/v1/processes/{_segment(process_id)}?force=1",
                # The server answers once the process has exited: allow for
                # its kill grace and drain bound.
                timeout=self.request_timeout + 10.0,
            )
        )

    async def write_stdin(self, process_id: str, data: bytes | str) -> None:
        """Writes bytes (a ``str`` is encoded as UTF-8) to the process's stdin over HTTP; the process needs ``stdin=True``. Not retried."""
        raw = data.encode() if isinstance(data, str) else bytes(data)
        await self._send(
            "POST",
            f"/v1/processes/{_segment(process_id)}/stdin",
            content=raw,
            content_type="application/octet-stream",
        )

    async def close_stdin(self, process_id: str) -> None:
        """Closes the process's stdin over HTTP (it then reads end of file)."""
        await self._send("POST", f"/v1/processes/{_segment(process_id)}/stdin/close")

    async def resize(self, process_id: str, cols: int, rows: int) -> None:
        """Sets the PTY window size of a process over HTTP (it gets SIGWINCH); both 1 to 4096."""
        _check_size("cols", cols)
        _check_size("rows", rows)
        body = json.dumps({"cols": cols, "rows": rows}).encode()
        await self._send("POST", f"/v1/processes/{_segment(process_id)}/resize", content=body)

    # ------------------------------------------------------------ streams

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
    ) -> AttachContext:
        """Attaches to a process over WebSocket; see :class:`~tether_client.Attachment`.

        Use ``async with client.attach(id) as attachment:`` (closed on
        exit) or ``attachment = await client.attach(id)``. ``window`` is the
        credit window per stream: at most that many bytes of each stream are
        buffered here, the rest waits on the server. ``stdout_offset`` and
        ``stderr_offset`` say where to start (default 0: everything
        retained). A dropped connection is resumed from the next offsets
        within ``reconnect`` (default: this client's retry policy).
        """
        from .attach import AttachContext, AttachOptions

        options = AttachOptions(
            window=window,
            readonly=readonly,
            stdout_offset=stdout_offset,
            stderr_offset=stderr_offset,
            reconnect=reconnect or self.retry,
            connect_timeout=connect_timeout,
        )
        return AttachContext(self, process_id, options)

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
        from .attach import AttachContext, AttachOptions

        if readonly:
            raise InvalidArgument("run starts a new process: readonly does not apply")
        options = AttachOptions(
            window=window,
            reconnect=reconnect or self.retry,
            connect_timeout=connect_timeout,
        )
        return AttachContext(self, "", options, run=(json.dumps(dict(body)), str(uuid.uuid4())))

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
        window: int = 256 * 1024,
    ) -> ExecResult:
        """Runs a command to completion and returns its output and exit; see :func:`tether_client.run.exec_command`."""
        from .run import exec_command

        return await exec_command(
            self,
            command,
            timeout=timeout,
            env=env,
            cwd=cwd,
            input=input,
            tty=tty,
            retain_bytes=retain_bytes,
            window=window,
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
        from .run import RunContext

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
        from .terminal import TerminalContext

        return TerminalContext(
            self,
            spawn_body(command, tty=True, cols=cols, rows=rows, env=env, cwd=cwd, timeout=timeout),
        )

    # ------------------------------------------------------------ plumbing

    def ws_url(self, path: str) -> str:
        """The ``ws://`` or ``wss://`` URL of an API path."""
        if self.base_url.startswith("https://"):
            return "wss://" + self.base_url[len("https://") :] + path
        return "ws://" + self.base_url[len("http://") :] + path

    @property
    def headers(self) -> dict[str, str]:
        """Headers sent with every request (the token among them)."""
        return dict(self._headers)

    @property
    def contacted(self) -> bool:
        """True once the server has answered this client at least once."""
        return self._contacted

    def _note_contact(self) -> None:
        self._contacted = True

    async def _retried(self, method: str, path: str) -> Any:
        backoff = Backoff(self.retry)
        while True:
            try:
                return await self._json(method, path)
            except TetherError as e:
                await backoff.failed(e, contacted=self._contacted)

    async def _json(
        self,
        method: str,
        path: str,
        *,
        content: bytes | None = None,
        idempotency_key: str | None = None,
        timeout: float | None = None,
    ) -> Any:
        body = await self._send(
            method, path, content=content, idempotency_key=idempotency_key, timeout=timeout
        )
        try:
            return json.loads(body)
        except ValueError as e:
            raise ProtocolError(f"unexpected response from {self.base_url}{path}: {e}") from None

    async def _send(
        self,
        method: str,
        path: str,
        *,
        content: bytes | None = None,
        content_type: str = "application/json",
        idempotency_key: str | None = None,
        timeout: float | None = None,
    ) -> bytes:
        """One request: the body of a success, else the mapped exception."""
        url = self.base_url + path
        headers: dict[str, str] = {}
        if content is not None:
            headers["Content-Type"] = content_type
        if idempotency_key is not None:
            headers["Idempotency-Key"] = idempotency_key
        try:
            response = await self._http.request(
                method,
                url,
                content=content,
                headers=headers,
                timeout=timeout if timeout is not None else httpx.USE_CLIENT_DEFAULT,
            )
        except httpx.TimeoutException as e:
            raise TransportError(url, f"timed out ({type(e).__name__})", timeout=True) from e
        except httpx.TransportError as e:
            raise TransportError(url, _describe(e)) from e
        self._note_contact()
        if response.is_success:
            return response.content
        raise error_from_response(response.status_code, response.content)


def _describe(error: BaseException) -> str:
    """The innermost cause of an error, which says what happened ("Connection refused")."""
    inner: BaseException = error
    while inner.__cause__ is not None or inner.__context__ is not None:
        inner = inner.__cause__ or inner.__context__  # type: ignore[assignment]
    text = str(inner) or str(error) or type(error).__name__
    return text
