""":class:`Attachment`: one process's output, input and exit over ``tether.v1``, with credit and automatic resume.

Design: one background task owns the WebSocket. It puts each output frame
into the queue of its stream; the application takes from each queue through
an :class:`OutputReader`. Credit is granted to the server for a stream only
as the application consumes that stream, so each queue holds at most
``window`` bytes and unread output waits on the server. Stdin, resize and
signal requests go through one small bounded queue, in order. When the
connection drops before the exit, the task reconnects with the next offset
of each stream, so every byte is delivered once, in order. A second task
long-polls ``wait``, so a reader reaches its end as soon as the process has
exited and that stream is complete, even while the other stream is unread.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import time
from collections.abc import AsyncIterator, Generator
from dataclasses import dataclass, field
from types import TracebackType
from typing import TYPE_CHECKING
from urllib.parse import urlencode

from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidHandshake, InvalidStatus

from .errors import (
    AttachmentClosed,
    InvalidArgument,
    NotFound,
    ProtocolError,
    TetherError,
    TransportError,
    error_from_response,
)
from .output import Chunk, OutputReader, StreamState
from .protocol import (
    MAX_TERMINAL_SIZE,
    SUBPROTOCOL,
    ClientFrame,
    Credit,
    Data,
    Dropped,
    ErrorFrame,
    Exit,
    FrameDecodeError,
    Hello,
    ProcessInfo,
    Resize,
    Signal,
    Stdin,
    StdinEof,
    StreamName,
    decode_server_frame,
    parse_signal,
)
from .retry import Backoff, RetryPolicy

if TYPE_CHECKING:
    from .client import AsyncClient

MAX_STDIN_FRAME = 64 * 1024
"""Largest stdin payload per frame (the server accepts messages up to 1 MiB)."""
COMMAND_QUEUE = 16
"""Stdin, resize and signal requests that may wait for the socket."""
MAX_WINDOW = 1 << 40
"""Largest credit window accepted."""


@dataclass(frozen=True)
class AttachOptions:
    """How to attach (see :meth:`AsyncClient.attach`)."""

    window: int = 256 * 1024
    readonly: bool = False
    stdout_offset: int = 0
    stderr_offset: int = 0
    reconnect: RetryPolicy = field(default_factory=RetryPolicy)
    connect_timeout: float = 10.0


class _Outcome:
    EXITED = "exited"
    CANCELLED = "cancelled"
    LOST = "lost"
    FATAL = "fatal"


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
        client: AsyncClient,
        process_id: str,
        options: AttachOptions,
        run: tuple[str, str] | None = None,
    ) -> None:
        if not 1 <= options.window <= MAX_WINDOW:
            raise InvalidArgument(f"window must be 1 to {MAX_WINDOW} bytes")
        self._client = client
        self._id = process_id
        # For a run, until its first hello: the spawn request (JSON) and the
        # idempotency key that makes a retried first connection attach to
        # the process a lost answer started; later connections go by id.
        self._pending_run = run
        self._options = options
        self._window = options.window
        self._any = asyncio.Event()
        self._wake = asyncio.Event()  # wakes the sender: credit or a command is due
        self._streams: dict[StreamName, StreamState] = {
            "stdout": StreamState("stdout", options.stdout_offset, options.window, self._any, self._wake.set),
            "stderr": StreamState("stderr", options.stderr_offset, options.window, self._any, self._wake.set),
        }
        self.stdout = OutputReader(self._streams["stdout"])
        """The process's stdout (the whole output of a PTY)."""
        self.stderr = OutputReader(self._streams["stderr"])
        """The process's stderr (empty for a PTY)."""
        self._commands: asyncio.Queue[ClientFrame] = asyncio.Queue(COMMAND_QUEUE)
        self._exit: ProcessInfo | None = None
        self._exit_error: TetherError | None = None
        self._exit_event = asyncio.Event()
        self._ended = asyncio.Event()  # the connection task is over
        self._closed = False
        self._stdin_closed = False
        self._eof_sent = False
        self._eof_in_doubt = False
        self._tty = False
        self._ws: ClientConnection | None = None
        self._task: asyncio.Task[None] | None = None
        self._poller: asyncio.Task[None] | None = None
        self.process: ProcessInfo | None = None
        """The process object of the first ``hello`` frame."""
        self.connections = 0
        """WebSocket connections opened so far: 1, plus one per automatic resume."""
        self.last_rejection: tuple[str, str] | None = None
        """Code and message of the last request the server refused without ending the attachment."""

    # ------------------------------------------------------------ public

    @property
    def id(self) -> str:
        """The process id (for a run, the new process's)."""
        return self._id

    @property
    def exit_info(self) -> ProcessInfo | None:
        """The exited process object, if the exit is already known."""
        return self._exit

    async def wait(self) -> ProcessInfo:
        """The exited process object, as soon as the server reports the exit (read or not); raises if the attachment failed first."""
        await self._exit_event.wait()
        if self._exit is not None:
            return self._exit
        assert self._exit_error is not None
        raise self._exit_error

    def chunks(self) -> AsyncIterator[Chunk]:
        """Both streams merged, as chunks arrive (``chunk.stream`` tells them apart), until both have ended."""
        return self._merged()

    async def _merged(self) -> AsyncIterator[Chunk]:
        streams = [self._streams["stdout"], self._streams["stderr"]]
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
            self._any.clear()
            await self._any.wait()

    async def write(self, data: bytes | str) -> None:
        """Queues bytes for the process's stdin (a ``str`` is encoded as UTF-8). Waits while the small command queue is full."""
        raw = data.encode() if isinstance(data, str) else bytes(data)
        self._check_input()
        if self._stdin_closed:
            raise AttachmentClosed("stdin was closed")
        for start in range(0, len(raw), MAX_STDIN_FRAME):
            await self._command(Stdin(raw[start : start + MAX_STDIN_FRAME]))

    async def close_stdin(self) -> None:
        """Closes the process's stdin (on a PTY: types the EOF character, usually Ctrl-D)."""
        self._check_input()
        if self._stdin_closed:
            return
        await self._command(StdinEof())
        self._stdin_closed = True

    async def resize(self, cols: int, rows: int) -> None:
        """Sets the PTY window size (the program gets SIGWINCH; ignored for pipes); both 1 to 4096."""
        for name, value in (("cols", cols), ("rows", rows)):
            if not 1 <= value <= MAX_TERMINAL_SIZE:
                raise InvalidArgument(f"{name} {value} is out of range 1..{MAX_TERMINAL_SIZE}")
        self._check_input()
        await self._command(Resize(cols, rows))

    async def signal(self, signal: str) -> None:
        """Sends a signal by name (``"INT"``, ``"TERM"``, ``"SIGHUP"``, ``"9"``...) to the process group."""
        name = parse_signal(signal)
        if name is None:
            raise InvalidArgument(f"unknown signal {signal!r}")
        self._check_input()
        await self._command(Signal(name))

    async def close(self) -> None:
        """Closes the attachment (the process runs on). Readers then end with :class:`AttachmentClosed` unless their stream was complete."""
        self._closed = True
        for task in (self._task, self._poller):
            if task is not None and not task.done():
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task
        ws, self._ws = self._ws, None
        if ws is not None:
            await _close(ws)
        self._fail(AttachmentClosed("the attachment was closed"))
        self._ended.set()

    async def __aenter__(self) -> Attachment:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    # ------------------------------------------------------------ handles' side

    def _check_input(self) -> None:
        if self._options.readonly:
            raise InvalidArgument("this attachment is read-only")
        if self._closed or self._task is None or self._task.done():
            raise AttachmentClosed("the attachment has ended")

    async def _command(self, frame: ClientFrame) -> None:
        """Queues a frame for the sender; waits while the queue is full, but never past the attachment's end."""
        if self._commands.full():
            put = asyncio.ensure_future(self._commands.put(frame))
            ended = asyncio.ensure_future(self._ended.wait())
            try:
                await asyncio.wait({put, ended}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                ended.cancel()
                if not put.done():
                    put.cancel()
            if not put.done() or put.cancelled():
                raise AttachmentClosed("the attachment has ended")
        else:
            self._commands.put_nowait(frame)
        self._wake.set()

    # ------------------------------------------------------------ state

    def _learn(self, info: ProcessInfo) -> None:
        """Records what a process object says about the exit and the final totals."""
        if not info.exited:
            return
        if self._exit is None and self._exit_error is None:
            self._exit = info
            self._exit_event.set()
        self._streams["stdout"].total = info.stdout_bytes
        self._streams["stderr"].total = info.stderr_bytes
        for s in self._streams.values():
            s.wake()

    def _fail(self, error: TetherError) -> None:
        for s in self._streams.values():
            if not s.at_end() and s.failure is None:
                s.failure = error
            s.finished = True
            s.wake()
        if self._exit is None and self._exit_error is None:
            self._exit_error = error
            self._exit_event.set()

    def _complete(self) -> bool:
        return all(s.at_end() for s in self._streams.values())

    # ------------------------------------------------------------ connection

    async def _start(self) -> None:
        """Opens the first connection (retried within the reconnect budget) and starts the background tasks."""
        backoff = Backoff(self._options.reconnect)
        while True:
            try:
                ws, hello = await self._connect()
                break
            except TetherError as e:
                await backoff.failed(e, contacted=self._client.contacted)
        self.process = hello
        self._tty = hello.tty
        self._learn(hello)
        self._ws = ws
        self._poller = asyncio.create_task(self._poll_exit())
        self._task = asyncio.create_task(self._run())

    async def _poll_exit(self) -> None:
        # Only a shortcut to the totals: the exit frame is authoritative, so
        # a failure here (even the client being closed) is not the caller's.
        with contextlib.suppress(Exception):
            self._learn(await self._client.wait(self._id))

    async def _connect(self) -> tuple[ClientConnection, ProcessInfo]:
        """Opens a connection from the saved offsets.

        The server counts the window afresh on every attach, so the new
        connection's window is sized from what is still queued: each
        stream's buffer stays within ``window`` bytes across reconnects.
        """
        out, err = self._streams["stdout"], self._streams["stderr"]
        conn_window = max(1, self._window - max(out.queued, err.queued))
        for s in (out, err):
            # This stream's allowance is conn_window + owed = window - queued.
            s.owed = self._window - s.queued - conn_window
        offsets = (out.next, err.next)
        key = None
        if self._pending_run is not None:
            request, key = self._pending_run
            # The spawn request rides form-encoded in the query, as the Rust
            # client sends it (a WebSocket upgrade has no body).
            url = self._client.ws_url("/v1/run?" + urlencode({"request": request, "window": conn_window}))
        else:
            url = self._client.ws_url(
                f"/v1/processes/{_quote(self._id)}/attach?stdout={offsets[0]}&stderr={offsets[1]}&window={conn_window}"
            )
        if self._options.readonly:
            url += "&readonly=1"
        try:
            ws, hello = await asyncio.wait_for(self._open(url, key), self._options.connect_timeout)
        except asyncio.TimeoutError:
            raise TransportError(_shown(url), "attach timed out", timeout=True) from None
        if (hello.stdout, hello.stderr) != offsets:
            await _close(ws)
            raise ProtocolError(
                f"the server resumed at offsets {(hello.stdout, hello.stderr)}, asked for {offsets}"
            )
        if self._pending_run is not None:
            self._id = hello.process.id
            self._pending_run = None
        try:
            await self._grant(ws, force=True)
        except TransportError:
            await _close(ws)
            raise
        self.connections += 1
        return ws, hello.process

    async def _open(self, url: str, idempotency_key: str | None = None) -> tuple[ClientConnection, Hello]:
        """Connects, checks the subprotocol and reads ``hello``."""
        headers = {k: v for k, v in self._client.headers.items() if k != "User-Agent"}
        if idempotency_key is not None:
            headers["Idempotency-Key"] = idempotency_key
        try:
            ws = await connect(
                url,
                subprotocols=[SUBPROTOCOL],  # type: ignore[list-item]
                additional_headers=headers,
                user_agent_header="tether-client-python",
                compression=None,
                open_timeout=None,
                # The hello carries argv (up to the server's 1 MiB body), data
                # frames at most one window.
                max_size=self._window + (2 << 20),
                ping_interval=20,
                ping_timeout=20,
                close_timeout=2,
                ssl=self._client.ssl if url.startswith("wss://") else None,
            )
        except InvalidStatus as e:
            raise error_from_response(e.response.status_code, bytes(e.response.body or b"")) from None
        except (OSError, InvalidHandshake, ConnectionClosed, EOFError) as e:
            raise TransportError(_shown(url), str(e) or type(e).__name__) from None
        self._client._note_contact()
        try:
            if ws.subprotocol not in (None, SUBPROTOCOL):
                raise ProtocolError(f"server chose subprotocol {ws.subprotocol!r}, not {SUBPROTOCOL}")
            try:
                message = await ws.recv()
            except ConnectionClosed as e:
                raise TransportError(_shown(url), f"closed before hello ({e})") from None
            if isinstance(message, str):
                raise ProtocolError("the server sent a text message")
            try:
                frame = decode_server_frame(message)
            except FrameDecodeError as e:
                raise ProtocolError(f"bad hello frame: {e}") from None
            if isinstance(frame, ErrorFrame):
                raise ProtocolError(f"attach refused: {frame.code}: {frame.message}")
            if not isinstance(frame, Hello):
                raise ProtocolError(f"expected hello, got {type(frame).__name__}")
            return ws, frame
        except BaseException:
            await _close(ws)
            raise

    async def _run(self) -> None:
        backoff = Backoff(self._options.reconnect)
        try:
            while True:
                ws = self._ws
                if ws is None:
                    if self._complete():
                        return
                    try:
                        ws, hello = await self._connect()
                    except TetherError as e:
                        if isinstance(e, NotFound):
                            self._fail(e)
                            return
                        try:
                            await backoff.failed(e)
                        except TetherError as final:
                            self._fail(final)
                            return
                        continue
                    self._learn(hello)
                    self._ws = ws
                started = time.monotonic()
                outcome, error, progressed = await self._session(ws)
                if outcome == _Outcome.EXITED:
                    self._ws = None
                    await _close(ws)
                    return
                if outcome == _Outcome.FATAL:
                    assert error is not None
                    self._fail(error)
                    return
                # Lost: resume.
                self._ws = None
                await _close(ws)
                if progressed or time.monotonic() - started > 1.0:
                    backoff.reset()
                assert error is not None
                try:
                    await backoff.failed(error)
                except TetherError as final:
                    self._fail(final)
                    return
        except Exception as e:  # a bug here must not leave readers waiting
            self._fail(ProtocolError(f"the attachment failed: {e!r}"))
        finally:
            if self._poller is not None:
                self._poller.cancel()
            # Whatever happened, nobody waits forever.
            self._fail(AttachmentClosed("the attachment has ended"))
            self._ended.set()

    async def _session(self, ws: ClientConnection) -> tuple[str, TetherError | None, bool]:
        """Serves one connection: how it ended, why, and whether any frame arrived."""
        # A lost stdin_eof would leave the process waiting for input forever.
        # On pipes closing twice is harmless, so it is repeated on every
        # resume; on a PTY it types ^D, so only when its sending failed.
        if self._eof_in_doubt or (self._eof_sent and not self._tty):
            try:
                await ws.send(StdinEof().encode())
                self._eof_in_doubt = False
            except ConnectionClosed as e:
                return _Outcome.LOST, self._lost(str(e)), False
        progress = [False]
        receiver = asyncio.ensure_future(self._receive(ws, progress))
        sender = asyncio.ensure_future(self._send_loop(ws))
        try:
            done, _ = await asyncio.wait({receiver, sender}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in (receiver, sender):
                task.cancel()
            await asyncio.gather(receiver, sender, return_exceptions=True)
        first = receiver if receiver in done else sender
        outcome, error = first.result()
        return outcome, error, progress[0]

    async def _receive(self, ws: ClientConnection, progress: list[bool]) -> tuple[str, TetherError | None]:
        while True:
            try:
                message = await ws.recv()
            except ConnectionClosed as e:
                code = e.rcvd.code if e.rcvd is not None else None
                if code in (None, 1000, 1001):
                    return _Outcome.LOST, self._lost(f"connection closed ({e})")
                detail = "{}: {}".format(*self.last_rejection) if self.last_rejection else "no error frame"
                return _Outcome.FATAL, ProtocolError(
                    f"server closed the attachment with code {code} ({detail})"
                )
            if isinstance(message, str):
                return _Outcome.FATAL, ProtocolError("the server sent a text message")
            progress[0] = True
            try:
                if self._frame(message):
                    return _Outcome.EXITED, None
            except ProtocolError as e:
                return _Outcome.FATAL, e
            if any(s.credit_due() for s in self._streams.values()):
                self._wake.set()

    async def _send_loop(self, ws: ClientConnection) -> tuple[str, TetherError | None]:
        while True:
            await self._wake.wait()
            self._wake.clear()
            try:
                await self._grant(ws, force=False)
            except TransportError as e:
                return _Outcome.LOST, e
            while not self._commands.empty():
                frame = self._commands.get_nowait()
                is_eof = isinstance(frame, StdinEof)
                try:
                    await ws.send(frame.encode())
                except ConnectionClosed as e:
                    self._eof_in_doubt |= is_eof
                    return _Outcome.LOST, self._lost(str(e))
                self._eof_sent |= is_eof

    async def _grant(self, ws: ClientConnection, force: bool) -> None:
        """Sends the credit owed on each stream, when it is due (or always, with ``force``)."""
        for s in self._streams.values():
            if s.credit_due(force):
                try:
                    await ws.send(Credit(s.name, s.take_credit()).encode())
                except ConnectionClosed as e:
                    raise self._lost(f"sending credit failed ({e})") from None

    def _lost(self, message: str) -> TransportError:
        return TransportError(f"{self._client.base_url}/v1/processes/{self._id}/attach", message)

    def _frame(self, payload: bytes) -> bool:
        """Handles one server frame; True for the exit frame."""
        try:
            frame = decode_server_frame(payload)
        except FrameDecodeError as e:
            raise ProtocolError(f"bad frame from the server: {e}") from None
        if isinstance(frame, Data):
            self._streams[frame.stream].push_data(frame)
        elif isinstance(frame, Dropped):
            self._streams[frame.stream].push_dropped(frame)
        elif isinstance(frame, Exit):
            self._learn(frame.process)
            for s in self._streams.values():
                s.finished = True
                s.wake()
            return True
        elif isinstance(frame, ErrorFrame):
            self.last_rejection = (frame.code, frame.message)
        elif isinstance(frame, Hello):
            raise ProtocolError("a second hello frame")
        else:
            raise ProtocolError("a screen frame this client did not ask for")
        return False


def _shown(url: str) -> str:
    """``url`` for an error message: a run's spawn request (its command, its env) left out."""
    return re.sub(r"([?&])request=[^&]*", r"\1request=…", url)


def _quote(process_id: str) -> str:
    from urllib.parse import quote

    return quote(process_id, safe="")


async def _close(ws: ClientConnection) -> None:
    """Completes the close handshake, bounded."""
    with contextlib.suppress(Exception):
        await asyncio.wait_for(ws.close(), 2.0)


class AttachContext:
    """What :meth:`AsyncClient.attach` returns: ``await`` it for an :class:`Attachment`, or ``async with`` it to have the attachment closed on exit."""

    def __init__(
        self,
        client: AsyncClient,
        process_id: str,
        options: AttachOptions,
        run: tuple[str, str] | None = None,
    ) -> None:
        self._client = client
        self._id = process_id
        self._options = options
        self._run = run
        self._attachment: Attachment | None = None

    async def _open(self) -> Attachment:
        attachment = Attachment(self._client, self._id, self._options, self._run)
        await attachment._start()
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
        if self._attachment is not None:
            await self._attachment.close()


__all__ = ["AttachContext", "AttachOptions", "Attachment", "Chunk", "OutputReader"]
