"""The connection side of an :class:`~tether_client.Attachment`: the task that owns its WebSocket.

Design: one background task owns the WebSocket. It puts each output frame
into the queue of its stream (:class:`~tether_client.output.StreamState`);
the application takes from each queue through an ``OutputReader``. Credit
is granted to the server for a stream only as the application consumes that
stream, so each queue holds at most ``window`` bytes and unread output
waits on the server. Stdin, resize and signal requests go through one small
bounded queue, in order. When the connection drops before the exit, the task
reconnects with the next offset of each stream, so every byte is delivered
once, in order. A second task long-polls ``wait``, so a reader reaches its
end as soon as the process has exited and that stream is complete, even
while the other stream is unread.

It is given the :class:`~tether_client.endpoint.Endpoint` and the one HTTP
call it makes (``wait``), never the client, so it sits below the client.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from urllib.parse import urlencode

from websockets.asyncio.client import ClientConnection
from websockets.exceptions import ConnectionClosed

from .endpoint import Endpoint, segment
from .errors import (
    AttachmentClosed,
    InvalidArgument,
    NotFound,
    ProtocolError,
    TetherError,
    TransportError,
)
from .output import StreamState
from .protocol import (
    ClientFrame,
    Credit,
    Data,
    Dropped,
    ErrorFrame,
    Exit,
    FrameDecodeError,
    Hello,
    InputAck,
    ProcessInfo,
    Resize,
    Signal,
    Stdin,
    StdinEof,
    StreamName,
    decode_server_frame,
)
from .handshake import abort, close_quietly, open_socket, read_input_ack, refusal, shown_url
from .outbox import Outbox
from .retry import Backoff, RetryPolicy

COMMAND_QUEUE = 16
"""Stdin, resize and signal requests that may wait for the socket."""
MAX_WINDOW = 1 << 40
"""Largest credit window accepted."""

WaitExit = Callable[[str], Awaitable[ProcessInfo]]
"""The long-poll of a process's exit (``AsyncClient.wait``)."""


@dataclass(frozen=True)
class AttachOptions:
    """How to attach (see :meth:`AsyncClient.attach`)."""

    window: int = 256 * 1024
    readonly: bool = False
    stdout_offset: int = 0
    stderr_offset: int = 0
    reconnect: RetryPolicy = field(default_factory=RetryPolicy)
    connect_timeout: float = 10.0
    numbered_input: bool = True
    """Number the input (``input=ID``): each write, close, resize and signal is applied once, in order, across reconnects; a resume after the server forgot the stream fails with :class:`~tether_client.InputExpired`. False: sent at most once (what a broken connection carried may be lost)."""


class _Outcome:
    EXITED = "exited"
    CANCELLED = "cancelled"
    LOST = "lost"
    FATAL = "fatal"


class Connection:
    """An attachment's connection task, its queues and its exit; the public face is :class:`~tether_client.Attachment`."""

    def __init__(
        self,
        endpoint: Endpoint,
        wait_exit: WaitExit,
        process_id: str,
        options: AttachOptions,
        run: tuple[str, str] | None = None,
    ) -> None:
        if not 1 <= options.window <= MAX_WINDOW:
            raise InvalidArgument(f"window must be 1 to {MAX_WINDOW} bytes")
        self._endpoint = endpoint
        self._wait_exit = wait_exit
        self._id = process_id
        # For a run, until its first hello: the spawn request (JSON) and the
        # idempotency key that makes a retried first connection attach to
        # the process a lost answer started; later connections go by id.
        self._pending_run = run
        self._options = options
        self._window = options.window
        self.any_data = asyncio.Event()
        self._wake = asyncio.Event()  # wakes the sender: credit or a command is due
        self.streams: dict[StreamName, StreamState] = {
            "stdout": StreamState("stdout", options.stdout_offset, options.window, self.any_data, self._wake.set),
            "stderr": StreamState("stderr", options.stderr_offset, options.window, self.any_data, self._wake.set),
        }
        self._commands: asyncio.Queue[ClientFrame] = asyncio.Queue(COMMAND_QUEUE)
        self.exit: ProcessInfo | None = None
        self.exit_error: TetherError | None = None
        self.exit_event = asyncio.Event()
        self._ended = asyncio.Event()  # the connection task is over
        self._closed = False
        self._eof_sent = False
        self._eof_in_doubt = False
        self._tty = False
        self._ws: ClientConnection | None = None
        self._task: asyncio.Task[None] | None = None
        self._poller: asyncio.Task[None] | None = None
        # Numbered input: the stream's id, and what it has not acknowledged.
        self._input_id = uuid.uuid4().hex if options.numbered_input and not options.readonly else None
        self._outbox = Outbox()
        self.process: ProcessInfo | None = None  # of the first hello
        self.connections = 0
        self.last_rejection: tuple[str, str] | None = None

    @property
    def process_id(self) -> str:
        """The process id (for a run, known from the first hello on)."""
        return self._id

    # ------------------------------------------------------------ the handle's side

    def check_input(self) -> None:
        """Raises unless input may be sent: the attachment is writable and still running."""
        if self._options.readonly:
            raise InvalidArgument("this attachment is read-only")
        if self._closed or self._task is None or self._task.done():
            raise AttachmentClosed("the attachment has ended")

    async def command(self, frame: ClientFrame) -> None:
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

    async def close(self) -> None:
        """Stops the tasks and the socket; readers and the exit then fail with :class:`AttachmentClosed` unless complete."""
        self._closed = True
        for task in (self._task, self._poller):
            if task is not None and not task.done():
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task
        ws, self._ws = self._ws, None
        if ws is not None:
            await close_quietly(ws)
        self._fail(AttachmentClosed("the attachment was closed"))
        self._ended.set()

    # ------------------------------------------------------------ state

    def _learn(self, info: ProcessInfo) -> None:
        """Records what a process object says about the exit and the final totals."""
        if not info.exited:
            return
        if self.exit is None and self.exit_error is None:
            self.exit = info
            self.exit_event.set()
        self.streams["stdout"].total = info.stdout_bytes
        self.streams["stderr"].total = info.stderr_bytes
        for s in self.streams.values():
            s.wake()

    def _fail(self, error: TetherError) -> None:
        for s in self.streams.values():
            if not s.at_end() and s.failure is None:
                s.failure = error
            s.finished = True
            s.wake()
        if self.exit is None and self.exit_error is None:
            self.exit_error = error
            self.exit_event.set()

    def _complete(self) -> bool:
        return all(s.at_end() for s in self.streams.values())

    # ------------------------------------------------------------ connection

    async def start(self) -> None:
        """Opens the first connection (retried within the reconnect budget) and starts the background tasks."""
        backoff = Backoff(self._options.reconnect)
        while True:
            try:
                ws, hello = await self._connect(backoff.clip(self._options.connect_timeout))
                break
            except TetherError as e:
                await backoff.failed(e, contacted=self._endpoint.contacted)
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
            self._learn(await self._wait_exit(self._id))

    async def _connect(self, timeout: float) -> tuple[ClientConnection, ProcessInfo]:
        """Opens a connection from the saved offsets, within ``timeout`` seconds until its ``hello`` (and ``input_ack``).

        The server counts the window afresh on every attach, so the new
        connection's window is sized from what is still queued: each
        stream's buffer stays within ``window`` bytes across reconnects.
        """
        out, err = self.streams["stdout"], self.streams["stderr"]
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
            query: dict[str, str | int] = {"request": request, "window": conn_window}
            if self._input_id is not None:
                query["input"] = self._input_id
            url = self._endpoint.ws_url("/v1/run?" + urlencode(query))
        else:
            url = self._endpoint.ws_url(
                f"/v1/processes/{segment(self._id)}/attach?stdout={offsets[0]}&stderr={offsets[1]}&window={conn_window}"
            )
        if self._options.readonly:
            url += "&readonly=1"
        if self._input_id is not None and self._pending_run is None:
            url += f"&input={self._input_id}" + ("&input_resume=1" if self._outbox.started else "")

        async def opening() -> tuple[ClientConnection, Hello, int | None]:
            ws, hello = await open_socket(self._endpoint, url, key, self._window)
            try:
                if (hello.stdout, hello.stderr) != offsets:
                    raise ProtocolError(
                        f"the server resumed at offsets {(hello.stdout, hello.stderr)}, asked for {offsets}"
                    )
                applied = await read_input_ack(ws, url) if self._input_id is not None else None
            except BaseException:
                abort(ws)
                raise
            return ws, hello, applied

        try:
            ws, hello, applied = await asyncio.wait_for(opening(), timeout)
        except asyncio.TimeoutError:
            raise TransportError(
                shown_url(url), f"attach timed out: no hello within {timeout:.3g}s", timeout=True
            ) from None
        if applied is not None:
            self._outbox.acknowledge(applied)
        if self._pending_run is not None:
            self._id = hello.process.id
            self._pending_run = None
        try:
            await self._grant(ws, force=True)
        except TransportError:
            await close_quietly(ws)
            raise
        self.connections += 1
        return ws, hello.process

    async def _run(self) -> None:
        backoff = Backoff(self._options.reconnect)
        try:
            while True:
                ws = self._ws
                if ws is None:
                    if self._complete():
                        return
                    try:
                        ws, hello = await self._connect(backoff.clip(self._options.connect_timeout))
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
                    await close_quietly(ws)
                    return
                if outcome == _Outcome.FATAL:
                    assert error is not None
                    # No close handshake with a server that broke the protocol.
                    self._ws = None
                    abort(ws)
                    self._fail(error)
                    return
                # Lost: resume.
                self._ws = None
                await close_quietly(ws)
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
        # Numbered input resends instead only what the server has not applied
        # (it said where it stands right after hello).
        resend: list[ClientFrame] = list(self._outbox.unacknowledged()) if self._input_id is not None else []
        if self._input_id is None and (self._eof_in_doubt or (self._eof_sent and not self._tty)):
            resend = [StdinEof()]
        for frame in resend:
            try:
                await ws.send(frame.encode())
            except ConnectionClosed as e:
                return _Outcome.LOST, self._lost(str(e)), False
        self._eof_in_doubt = False
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
        if outcome == _Outcome.LOST:
            # Dropped by this client for what the server sent: not resumed.
            refused = refusal(ws)
            if refused is not None:
                return _Outcome.FATAL, refused, progress[0]
        return outcome, error, progress[0]

    async def _receive(self, ws: ClientConnection, progress: list[bool]) -> tuple[str, TetherError | None]:
        while True:
            try:
                message = await ws.recv()
            except ConnectionClosed as e:
                refused = refusal(ws)
                if refused is not None:
                    return _Outcome.FATAL, refused
                code = e.rcvd.code if e.rcvd is not None else None
                # 1012: the server restarts (a handover); 1013: try again later.
                if code in (None, 1000, 1001, 1012, 1013):
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
            if any(s.credit_due() for s in self.streams.values()):
                self._wake.set()

    async def _send_loop(self, ws: ClientConnection) -> tuple[str, TetherError | None]:
        while True:
            await self._wake.wait()
            self._wake.clear()
            try:
                await self._grant(ws, force=False)
            except TransportError as e:
                return _Outcome.LOST, e
            # Numbered input waits while the unacknowledged bound is reached
            # (an input_ack wakes this loop).
            while not self._commands.empty() and (self._input_id is None or self._outbox.has_room):
                frame = self._commands.get_nowait()
                is_eof = isinstance(frame, StdinEof)
                if self._input_id is not None and isinstance(frame, (Stdin, StdinEof, Signal, Resize)):
                    frame = self._outbox.push(frame)
                try:
                    await ws.send(frame.encode())
                except ConnectionClosed as e:
                    self._eof_in_doubt |= is_eof
                    return _Outcome.LOST, self._lost(str(e))
                self._eof_sent |= is_eof

    async def _grant(self, ws: ClientConnection, force: bool) -> None:
        """Sends the credit owed on each stream, when it is due (or always, with ``force``)."""
        for s in self.streams.values():
            if s.credit_due(force):
                try:
                    await ws.send(Credit(s.name, s.take_credit()).encode())
                except ConnectionClosed as e:
                    raise self._lost(f"sending credit failed ({e})") from None

    def _lost(self, message: str) -> TransportError:
        return TransportError(f"{self._endpoint.base_url}/v1/processes/{self._id}/attach", message)

    def _frame(self, payload: bytes) -> bool:
        """Handles one server frame; True for the exit frame."""
        try:
            frame = decode_server_frame(payload)
        except FrameDecodeError as e:
            raise ProtocolError(f"bad frame from the server: {e}") from None
        if isinstance(frame, Data):
            self.streams[frame.stream].push_data(frame)
        elif isinstance(frame, Dropped):
            self.streams[frame.stream].push_dropped(frame)
        elif isinstance(frame, Exit):
            self._learn(frame.process)
            for s in self.streams.values():
                s.finished = True
                s.wake()
            return True
        elif isinstance(frame, InputAck):
            self._outbox.acknowledge(frame.applied)
            self._wake.set()
        elif isinstance(frame, ErrorFrame):
            self.last_rejection = (frame.code, frame.message)
        elif isinstance(frame, Hello):
            raise ProtocolError("a second hello frame")
        else:
            raise ProtocolError("a screen frame this client did not ask for")
        return False
