"""The exceptions of the library, mapped from the server's error codes in one place.

Every exception is a :class:`TetherError`. Errors the server answered carry
its HTTP ``status``, its stable ``code`` and its ``message``
(``{"error": {"code", "message"}}``), and have a class per case a caller can
act on (:class:`NotFound`, :class:`Unauthorized`, :class:`SpawnFailed`...).
:func:`error_from_response` is the one place that maps a status and code to a
class.
"""

from __future__ import annotations

import json


class TetherError(Exception):
    """Base class of every error raised by ``tether_client``."""

    @property
    def transient(self) -> bool:
        """True when retrying may help (transport failures, HTTP 429/502/503/504)."""
        return False


class ServerError(TetherError):
    """The server answered with an error status.

    ``status`` is the HTTP status, ``code`` the stable machine-readable code
    (such as ``not_found``; ``http_<status>`` for a body that is not the
    server's JSON error, say from a proxy) and ``message`` the explanation.
    """

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(f"server answered {status} {code}: {message}")
        self.status = status
        self.code = code
        self.message = message

    @property
    def transient(self) -> bool:
        """True for 429, 502, 503 and 504."""
        return self.status in (429, 502, 503, 504)


class InvalidRequest(ServerError):
    """400 ``invalid_request``: the server rejected the request's contents (bad field, size, signal, offset)."""


class Unauthorized(ServerError):
    """401: the server requires a token and none, or a wrong one, was sent (``unauthorized``), or a scoped token has expired (``token_expired``) or outlived its process (``token_process_gone``)."""


class Forbidden(ServerError):
    """403: a scoped token used on another process, or to spawn, list or mint (``out_of_scope``), or without the right the call needs (``missing_right``); or the request's Origin or Host is not allowed (``forbidden_origin``, ``forbidden_host``)."""


class NotFound(ServerError):
    """404 ``not_found``: no such process (never existed, or forgotten after its retention time)."""


class NotRunning(ServerError):
    """409 ``not_running``: the process has already exited."""


class StillRunning(ServerError):
    """409 ``still_running``: ``remove`` of a running process; ``remove(id, force=True)`` kills and forgets it (``tether rm -f``), ``kill`` only kills it."""


class StdinUnavailable(ServerError):
    """409 ``stdin_unavailable``: the process was spawned without ``stdin=True``, or its stdin is closed."""


class BodyTooLarge(ServerError):
    """413 ``body_too_large``: the request body is over the server's ``--max-body-bytes``."""


class SpawnFailed(ServerError):
    """422 ``spawn_failed``: the server could not start the program (missing program...); or 422 ``cannot_execute``: it was found but is not runnable (not executable, a directory, a missing ``cwd``). ``code`` tells them apart."""


class NameTaken(ServerError):
    """409 ``name_taken``: another known process has the ``name`` asked for."""


class IdempotencyConflict(ServerError):
    """422 ``idempotency_conflict``: an ``Idempotency-Key`` was reused with a different request."""


class InputExpired(ServerError):
    """409 ``input_expired``: an attachment resumed an input stream the server no longer knows (the connection was away longer than ``--input-ttl-ms``); its unacknowledged input was not sent again, so nothing was applied twice."""


class Overloaded(ServerError):
    """The server is at a limit: 503 ``too_many_processes`` / ``retention_exhausted``, 429 ``too_many_attachments``, or another 429/502/503/504."""


_BY_CODE: dict[str, type[ServerError]] = {
    "invalid_request": InvalidRequest,
    "unauthorized": Unauthorized,
    "token_expired": Unauthorized,
    "token_process_gone": Unauthorized,
    "out_of_scope": Forbidden,
    "missing_right": Forbidden,
    "user_unavailable": Forbidden,
    "forbidden_origin": Forbidden,
    "forbidden_host": Forbidden,
    "not_found": NotFound,
    "not_running": NotRunning,
    "still_running": StillRunning,
    "stdin_unavailable": StdinUnavailable,
    "body_too_large": BodyTooLarge,
    "spawn_failed": SpawnFailed,
    "cannot_execute": SpawnFailed,
    "name_taken": NameTaken,
    "idempotency_conflict": IdempotencyConflict,
    "input_expired": InputExpired,
    "too_many_processes": Overloaded,
    "retention_exhausted": Overloaded,
    "too_many_attachments": Overloaded,
}

_BY_STATUS: dict[int, type[ServerError]] = {
    400: InvalidRequest,
    401: Unauthorized,
    403: Forbidden,
    409: NotRunning,
    413: BodyTooLarge,
    422: SpawnFailed,
    429: Overloaded,
    502: Overloaded,
    503: Overloaded,
    504: Overloaded,
}


def error_from_response(status: int, body: bytes) -> ServerError:
    """The exception for an error answer: its class from the server's ``code`` (or, for a body that is not the server's JSON error, from the status), carrying status, code and message."""
    code: str | None = None
    message = ""
    try:
        parsed = json.loads(body)
        detail = parsed.get("error") if isinstance(parsed, dict) else None
        if isinstance(detail, dict) and isinstance(detail.get("code"), str):
            code = detail["code"]
            message = str(detail.get("message", ""))
    except ValueError:
        pass
    if code is None:
        text = body.decode("utf-8", "replace").strip()
        message = text[:200] if text else "(empty body)"
        cls = _BY_STATUS.get(status, ServerError)
        # A 404 from something that is not tetherd (a proxy, a wrong URL) is
        # not "no such process".
        return cls(status, f"http_{status}", message)
    cls = _BY_CODE.get(code) or _BY_STATUS.get(status, ServerError)
    if cls is NotRunning and status != 409:
        cls = ServerError
    return cls(status, code, message)


class TransportError(TetherError):
    """The server could not be reached, or the connection broke (refused, reset, timed out).

    ``url`` is what was being requested, ``timeout`` tells a timeout apart,
    ``unsent`` is true when no connection was made, so the request never
    reached the server (safe to send again even where a retry is not), and
    ``refused`` when the connection was refused (nothing listens there).
    """

    def __init__(
        self, url: str, message: str, *, timeout: bool = False, unsent: bool = False, refused: bool = False
    ) -> None:
        super().__init__(f"cannot reach tetherd at {url}: {message}")
        self.url = url
        self.message = message
        self.timeout = timeout
        self.unsent = unsent or refused
        self.refused = refused

    @property
    def transient(self) -> bool:
        """Always true: a transport failure may succeed when retried."""
        return True


class RetriesExhausted(TetherError):
    """Transient failures went on for longer than the retry budget.

    ``last`` is the final failure (a :class:`TransportError` or a transient
    :class:`ServerError`); ``attempts`` and ``elapsed`` (seconds) say how
    hard the client tried. ``status`` and ``code`` are those of ``last``.
    """

    def __init__(self, attempts: int, elapsed: float, last: TetherError) -> None:
        # Not super(): in Unreachable the next class is TransportError.
        TetherError.__init__(self, f"gave up after {attempts} attempts over {elapsed:.1f}s: {last}")
        self.attempts = attempts
        self.elapsed = elapsed
        self.last = last

    @property
    def status(self) -> int | None:
        """The HTTP status of the last failure, if the server (or a proxy) answered."""
        return self.last.status if isinstance(self.last, ServerError) else None

    @property
    def code(self) -> str | None:
        """The error code of the last failure, if the server (or a proxy) answered."""
        return self.last.code if isinstance(self.last, ServerError) else None


class Unreachable(RetriesExhausted, TransportError):
    """The server could not be reached at all within the retry budget (is tetherd running? is the URL right?).

    Both a :class:`RetriesExhausted` and a :class:`TransportError`.
    """

    def __init__(self, attempts: int, elapsed: float, last: TransportError) -> None:
        RetriesExhausted.__init__(self, attempts, elapsed, last)
        self.url = last.url
        self.message = last.message
        self.timeout = last.timeout
        self.unsent = last.unsent
        self.refused = last.refused
        self.args = (
            f"cannot reach tetherd at {last.url} ({last.message}) after {attempts} attempts "
            f"over {elapsed:.1f}s; is tetherd running there?",
        )

    @property
    def transient(self) -> bool:
        """False: the retries are already spent."""
        return False


class ProtocolError(TetherError):
    """The server broke the protocol (a bad frame, offsets out of order, more data than the credit window, an unexpected body), or closed an attachment with an error."""


class InvalidArgument(TetherError, ValueError):
    """An argument was rejected before anything was sent (a zero terminal size, an unknown signal, input on a read-only attachment)."""


class AttachmentClosed(TetherError):
    """The attachment has ended (the process exited, or the attachment was closed or failed), so the operation cannot be carried out."""


class FileTransferFailed(TetherError):
    """An upload or a download that the program beside the process could not do.

    ``exit_code`` and ``reason`` are its exit (``None`` when it did not get
    that far), ``stderr`` what it said (its first 16 KiB: ``sh: cannot
    create x/y: Directory nonexistent``, ``cat: y: No such file or
    directory``, ``Permission denied``...).
    """

    def __init__(
        self,
        message: str,
        *,
        process: str,
        path: str,
        exit_code: int | None = None,
        reason: str | None = None,
        stderr: str = "",
    ) -> None:
        super().__init__(message)
        self.process = process
        self.path = path
        self.exit_code = exit_code
        self.reason = reason
        self.stderr = stderr


class FileTooLarge(FileTransferFailed):
    """A download longer than its ``max_bytes``: nothing is returned (the file is never cut short), and the remote ``cat`` is killed."""

    def __init__(self, *, process: str, path: str, max_bytes: int) -> None:
        super().__init__(
            f"{process}:{path} is longer than max_bytes ({max_bytes} bytes): "
            "raise max_bytes, or stream it with download_to",
            process=process,
            path=path,
        )
        self.max_bytes = max_bytes


class ExpectTimeout(TetherError, TimeoutError):
    """:meth:`Terminal.expect` saw no match in time; ``output`` is what arrived meanwhile (its last MiB at most)."""

    def __init__(self, pattern: str, timeout: float, output: bytes) -> None:
        super().__init__(
            f"no {pattern!r} in the output after {timeout}s; the last output was {output[-200:]!r}"
        )
        self.pattern = pattern
        self.output = output


class OutputEnded(TetherError, EOFError):
    """The output ended (the process exited) before :meth:`Terminal.expect` saw a match; ``output`` is what came last."""

    def __init__(self, pattern: str, output: bytes) -> None:
        super().__init__(f"the output ended without {pattern!r}; the last output was {output[-200:]!r}")
        self.pattern = pattern
        self.output = output
