""":class:`HttpApi`: tetherd's HTTP calls (spawn, get, list, wait, signal, kill, remove, stdin, resize, tokens), with retries where they are safe.

:class:`~tether_client.AsyncClient` is this plus the calls that attach
(``attach``, ``run``, ``exec``, ``terminal``); the split keeps each file to
one concern.
"""

from __future__ import annotations

import json
import math
import os
import ssl as _ssl
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .endpoint import Endpoint, base_url_of, segment
from .errors import (
    InvalidArgument,
    ProtocolError,
    ServerError,
    TetherError,
    TransportError,
    error_from_response,
)
from .local_token import local_token_for
from .protocol import Limits, Overflow, ProcessInfo, parse_signal
from .retry import Backoff, RetryPolicy
from .spawn import check_size, spawn_body
from .transport import CONNECT_TIMEOUT, DEFAULT_MAX_ANSWER_BYTES, HttpTransport

DEFAULT_SERVER = "http://127.0.0.1:7420"
"""The server used when neither an argument nor ``TETHER_SERVER`` names one."""

LONG_POLL = 25.0
"""Seconds each ``wait`` long-poll asks the server to hold (the server caps it at ``--max-wait-ms``)."""

EXEC_SILENCE_GRACE = 60.0
"""Seconds added to the request timeout for the silence an ``exec`` answer without a deadline may keep: the server sends a space every ping interval (20 s) while the command runs."""


@dataclass(frozen=True)
class MintedToken:
    """A token scoped to one process, from :meth:`AsyncClient.mint_token`.

    ``token`` is the bearer token to hand on (``AsyncClient(url,
    token=minted.token)``); ``token_id`` names it in the server's audit
    lines; ``process`` is the id of the one process it reaches; ``rights``
    what it may do there (``read`` always, ``write``, ``kill``);
    ``expires_at_ms`` its expiry, in milliseconds since the Unix epoch.
    """

    token: str
    token_id: str
    process: str
    rights: tuple[str, ...]
    expires_at_ms: int

    @classmethod
    def from_wire(cls, value: object) -> MintedToken:
        """Builds it from the server's JSON answer; raises :class:`ProtocolError` for one that is not a minted token."""
        if not isinstance(value, dict):
            raise ProtocolError("POST .../tokens did not answer an object")
        fields = {"token": str, "token_id": str, "process": str, "rights": list, "expires_at_ms": int}
        for name, kind in fields.items():
            if not isinstance(value.get(name), kind) or isinstance(value.get(name), bool):
                raise ProtocolError(f"POST .../tokens answered without a valid {name!r}")
        rights = value["rights"]
        if not all(isinstance(r, str) for r in rights):
            raise ProtocolError("POST .../tokens answered rights that are not strings")
        return cls(
            token=value["token"],
            token_id=value["token_id"],
            process=value["process"],
            rights=tuple(rights),
            expires_at_ms=value["expires_at_ms"],
        )


class HttpApi:
    """The HTTP calls of one tetherd; see :class:`~tether_client.AsyncClient`, which adds the attaching calls and documents the arguments."""

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
        if not max_answer_bytes > 0:
            raise InvalidArgument(f"max_answer_bytes must be positive, not {max_answer_bytes!r}")
        if not request_timeout > 0:
            raise InvalidArgument(f"request_timeout must be a positive number of seconds, not {request_timeout!r}")
        base = base_url_of(url or os.environ.get("TETHER_SERVER") or DEFAULT_SERVER)
        env_token = os.environ.get("TETHER_TOKEN")
        self._token_guessed: str | None = None
        """Where the token was guessed from (or looked for in vain): said with a 401."""
        if token is None and not env_token:
            found = local_token_for(base)
            if found is not None:
                env_token, self._token_guessed = found
        self.token: str | None = token if token is not None else (env_token or None)
        """The bearer token sent with every request, if any."""
        self.retry = retry or RetryPolicy()
        """The retry policy in force."""
        self.request_timeout = request_timeout
        """Timeout of each ordinary request, in seconds."""
        self.max_answer_bytes = max_answer_bytes
        """The largest HTTP answer body read; a longer one is a :class:`ProtocolError`, read no further."""
        headers = {"User-Agent": "tether-client-python"}
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        self.endpoint = Endpoint(base, headers, ssl)
        """Where the server is and how to reach it: what attachments are given."""
        self._http = HttpTransport(headers, ssl, request_timeout, max_answer_bytes)

    async def aclose(self) -> None:
        """Closes the HTTP connection pool. Attachments opened from this client should be closed first."""
        await self._http.close()

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
        limits: Limits | None = None,
        beside: str | None = None,
        record_input: bool = False,
    ) -> ProcessInfo:
        """Starts a process and returns its process object.

        ``command``: shell text (``str``) or argv (a sequence). ``env`` adds
        variables, ``cwd`` sets the directory, ``timeout`` (seconds) the
        server-side deadline, ``tty`` a PTY of ``cols`` x ``rows`` (80x24),
        ``retain_bytes`` the per-stream retention, ``stdin`` a stdin pipe
        (default: ``/dev/null``), ``overflow`` ``"drop"`` (default) or
        ``"block"``, ``beside`` a process (id or name) to run as: its user,
        group and working directory. The request carries a random ``Idempotency-Key`` and
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
            limits=limits,
            beside=beside,
            record_input=record_input,
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
                    await self._json(
                        "POST",
                        "/v1/processes",
                        content=payload,
                        idempotency_key=key,
                        timeout=backoff.clip(self.request_timeout),
                    )
                )
            except TetherError as e:
                await backoff.failed(e, contacted=self.endpoint.contacted)

    async def get(self, process_id: str) -> ProcessInfo:
        """The process object of ``process_id`` (``GET /v1/processes/{id}``); raises :class:`NotFound`."""
        return ProcessInfo.from_wire(await self._retried("GET", f"/v1/processes/{segment(process_id)}"))

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
        path = f"/v1/processes/{segment(process_id)}/wait"
        backoff = Backoff(self.retry)
        while True:
            poll = LONG_POLL if deadline is None else max(0.0, min(LONG_POLL, deadline - time.monotonic()))
            # Cut to what is left of the budget, the poll shortened to fit.
            bound = backoff.clip(poll + self.request_timeout)
            poll = max(0.0, min(poll, bound - min(self.request_timeout, bound)))
            try:
                value = await self._json("GET", f"{path}?timeout_ms={int(poll * 1000)}", timeout=bound)
            except TetherError as e:
                await backoff.failed(e, contacted=self.endpoint.contacted)
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
            await self._json("POST", f"/v1/processes/{segment(process_id)}/signal", content=body)
        )

    async def kill(self, process_id: str) -> ProcessInfo:
        """Kills the whole session of the process (SIGTERM, SIGKILL after the server's grace), waits for its exit and returns its final object (reason ``killed`` if it was running); the server keeps it, with its output and exit, until :meth:`remove` or its TTL (``tether kill``, ``docker kill``). Not retried."""
        return ProcessInfo.from_wire(
            await self._json(
                "POST",
                f"/v1/processes/{segment(process_id)}/kill",
                # The server answers once the process has exited: allow for
                # its kill grace and drain bound.
                timeout=self.request_timeout + 10.0,
            )
        )

    async def remove(self, process_id: str, *, force: bool = False) -> ProcessInfo:
        """Forgets an exited process, its output and its exit, and returns its last object (``tether rm``). A running one raises :class:`Conflict` (``still_running``) unless ``force``, which kills it first and forgets it once it has exited (``tether rm -f``). Not retried."""
        query = "?force=1" if force else ""
        return ProcessInfo.from_wire(
            await self._json(
                "DELETE",
                f"/v1/processes/{segment(process_id)}{query}",
                timeout=self.request_timeout + 10.0,
            )
        )

    async def set_unattached_timeout(self, process_id: str, timeout: float | None) -> ProcessInfo:
        """Sets a running process's unattached timeout in seconds (``None``: never), counted from now while nobody is attached (``PATCH /v1/processes/{id}``; the ``kill`` right). Raises :class:`NotRunning` once it has exited. Not retried."""
        if timeout is None:
            ms = 0
        elif not timeout > 0 or math.isinf(timeout):
            raise InvalidArgument(f"timeout must be a positive number of seconds or None, not {timeout!r}")
        else:
            ms = math.ceil(timeout * 1000)
        body = json.dumps({"unattached_timeout_ms": ms}).encode()
        return ProcessInfo.from_wire(
            await self._json("PATCH", f"/v1/processes/{segment(process_id)}", content=body)
        )

    async def write_stdin(self, process_id: str, data: bytes | str) -> None:
        """Writes bytes (a ``str`` is encoded as UTF-8) to the process's stdin over HTTP; the process needs ``stdin=True``. Not retried."""
        raw = data.encode() if isinstance(data, str) else bytes(data)
        await self._send(
            "POST",
            f"/v1/processes/{segment(process_id)}/stdin",
            content=raw,
            content_type="application/octet-stream",
        )

    async def close_stdin(self, process_id: str) -> None:
        """Closes the process's stdin over HTTP (it then reads end of file)."""
        await self._send("POST", f"/v1/processes/{segment(process_id)}/stdin/close")

    async def resize(self, process_id: str, cols: int, rows: int) -> None:
        """Sets the PTY window size of a process over HTTP (it gets SIGWINCH); both 1 to 4096."""
        check_size("cols", cols)
        check_size("rows", rows)
        body = json.dumps({"cols": cols, "rows": rows}).encode()
        await self._send("POST", f"/v1/processes/{segment(process_id)}/resize", content=body)

    async def exec_request(self, body: Mapping[str, Any], *, timeout: float | None) -> Any:
        """``POST /v1/exec`` of a ready body (a spawn body plus ``max_output_bytes``, ``input``...): the answer's JSON, once the command has exited.

        ``timeout`` bounds the whole request in seconds (``None``: as long as
        the command runs, but the answer may not stay silent for longer than
        the request timeout plus :data:`EXEC_SILENCE_GRACE`: the server sends
        a space every ping interval meanwhile). Retried only where the
        command cannot have started: no connection could be made, or the
        server refused it for want of room (503 ``too_many_processes``,
        ``retention_exhausted``); a retry connects within what is left of
        the retry budget. Leaving early (a cancelled task) closes the
        connection, and the server kills the command
        (``kill_on_disconnect``, its default).
        """
        payload = json.dumps(dict(body)).encode()
        backoff = Backoff(self.retry)
        while True:
            try:
                return await self._json(
                    "POST",
                    "/v1/exec",
                    content=payload,
                    timeout=timeout,
                    idle=self.request_timeout + EXEC_SILENCE_GRACE,
                    connect=backoff.clip(min(self.request_timeout, CONNECT_TIMEOUT)),
                )
            except TransportError as e:
                if not e.unsent:
                    raise
                await backoff.failed(e, contacted=self.endpoint.contacted)
            except ServerError as e:
                if e.code not in ("too_many_processes", "retention_exhausted"):
                    raise
                await backoff.failed(e, contacted=self.endpoint.contacted)

    async def read_output(
        self, process_id: str, stream: str = "stdout", offset: int = 0, *, timeout: float | None = None
    ) -> bytes:
        """The retained bytes of one stream from ``offset`` on (``GET /v1/processes/{id}/output``), as they are now; ranges already evicted are skipped.

        ``timeout`` bounds the whole request in seconds (default: the
        request timeout); the answer is at most ``max_answer_bytes``.
        """
        if stream not in ("stdout", "stderr"):
            raise InvalidArgument(f"stream must be 'stdout' or 'stderr', not {stream!r}")
        if offset < 0:
            raise InvalidArgument(f"offset must be 0 or more, not {offset}")
        path = f"/v1/processes/{segment(process_id)}/output?stream={stream}&offset={offset}"
        return await self._send("GET", path, timeout=self.request_timeout if timeout is None else timeout)

    async def mint_token(
        self, process_id: str, rights: Sequence[str] = ("read",), ttl: float | None = None
    ) -> MintedToken:
        """Mints a token scoped to this one process (``POST /v1/processes/{id}/tokens``; operator token only). Not retried.

        ``rights``: any of ``"read"``, ``"write"`` (stdin, resize, signal)
        and ``"kill"``; read is implied. ``ttl``: seconds until it expires
        (default: the server's, 1 hour; at most its ``--max-token-ttl-ms``).
        A client with the token reaches only that process: another one, a
        spawn or a list is refused with 403 ``out_of_scope``
        (:class:`Forbidden`), a call its rights do not cover with 403
        ``missing_right``, and every call once it has expired with 401
        ``token_expired`` (:class:`Unauthorized`).
        """
        if isinstance(rights, str) or not all(isinstance(r, str) for r in rights):
            raise InvalidArgument("rights must be a sequence of strings such as ('read', 'write')")
        body: dict[str, Any] = {"rights": list(rights)}
        if ttl is not None:
            if not ttl > 0 or math.isinf(ttl):
                raise InvalidArgument(f"ttl must be a positive number of seconds, not {ttl!r}")
            body["ttl_ms"] = math.ceil(ttl * 1000)
        value = await self._json(
            "POST", f"/v1/processes/{segment(process_id)}/tokens", content=json.dumps(body).encode()
        )
        return MintedToken.from_wire(value)

    # ------------------------------------------------------------ plumbing

    @property
    def base_url(self) -> str:
        """The server's base URL, without a trailing slash."""
        return self.endpoint.base_url

    @property
    def ssl(self) -> _ssl.SSLContext | None:
        """The TLS context for an https:// server, if one was given."""
        return self.endpoint.ssl

    def ws_url(self, path: str) -> str:
        """The ``ws://`` or ``wss://`` URL of an API path."""
        return self.endpoint.ws_url(path)

    @property
    def headers(self) -> dict[str, str]:
        """Headers sent with every request (the token among them)."""
        return dict(self.endpoint.headers)

    @property
    def contacted(self) -> bool:
        """True once the server has answered this client at least once."""
        return self.endpoint.contacted

    def _note_contact(self) -> None:
        self.endpoint.note_contact()

    async def _retried(self, method: str, path: str) -> Any:
        backoff = Backoff(self.retry)
        while True:
            try:
                return await self._json(method, path, timeout=backoff.clip(self.request_timeout))
            except TetherError as e:
                await backoff.failed(e, contacted=self.endpoint.contacted)

    async def _json(
        self,
        method: str,
        path: str,
        *,
        content: bytes | None = None,
        idempotency_key: str | None = None,
        timeout: float | None | bool = True,
        idle: float | None = None,
        connect: float | None = None,
    ) -> Any:
        body = await self._send(
            method,
            path,
            content=content,
            idempotency_key=idempotency_key,
            timeout=timeout,
            idle=idle,
            connect=connect,
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
        timeout: float | None | bool = True,
        idle: float | None = None,
        connect: float | None = None,
    ) -> bytes:
        """One request: the body of a success, else the mapped exception. ``timeout``, ``idle`` and ``connect`` as :meth:`HttpTransport.request`."""
        url = self.base_url + path
        headers: dict[str, str] = {}
        if content is not None:
            headers["Content-Type"] = content_type
        if idempotency_key is not None:
            headers["Idempotency-Key"] = idempotency_key
        status, body = await self._http.request(
            method, url, content=content, headers=headers, timeout=timeout, idle=idle, connect=connect
        )
        self._note_contact()
        if 200 <= status < 300:
            return body
        error = error_from_response(status, body)
        if status == 401 and self._token_guessed is not None:
            # A guessed token says where it was looked for.
            raise type(error)(error.status, error.code, f"{error.message} (token guessed from {self._token_guessed})")
        raise error
