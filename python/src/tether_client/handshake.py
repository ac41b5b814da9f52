"""Opening one WebSocket of an attachment: the upgrade with the token and a run's ``Idempotency-Key``, the subprotocol check, the ``hello``."""

from __future__ import annotations

import asyncio
import contextlib
import errno
import re

from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidHandshake, InvalidStatus

from .endpoint import Endpoint
from .errors import InputExpired, ProtocolError, TransportError, error_from_response
from .protocol import (
    SUBPROTOCOL,
    ErrorFrame,
    FrameDecodeError,
    Hello,
    InputAck,
    ServerFrame,
    decode_server_frame,
)


MESSAGE_SLACK = 2 << 20
"""Bytes a server message may hold beyond the credit window: a ``hello`` carries argv (up to the server's 1 MiB body), data frames at most one window."""

UNSENT_BOUND = 1 << 20
"""Bytes waiting to be sent to the server past which it is taken as flooding: what this client sends itself waits while 32 KiB are unsent (the library's write limit), so only the automatic pongs to the server's pings can pile up past it, while the server sends pings and reads nothing."""


_CLOSED_FOR = {
    1002: "the server broke the WebSocket protocol",
    1007: "the server sent a text message that is not UTF-8",
    1009: "the server sent a message over this client's bound (the window + 2 MiB)",
}
"""The close codes this client sends when it refuses what the server sent."""


class BoundedConnection(ClientConnection):
    """A client connection that refuses a server which sends pings faster than it reads their pongs.

    The WebSocket library answers every ping with a pong at once, written
    whether or not the server reads: a server that floods pings and reads
    nothing would make this client queue pongs without bound. Past
    :data:`UNSENT_BOUND` bytes unsent, the connection is dropped and
    :attr:`overrun` says why (a protocol error, not a lost connection).
    A connection this client refused for what the server sent (a message
    over the bound, broken framing) is dropped at once too, rather than
    waiting for that server to finish a close handshake.
    """

    overrun: str | None = None

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        if self.overrun is not None:
            return
        unsent = self.transport.get_write_buffer_size()
        if unsent > UNSENT_BOUND:
            self.overrun = (
                f"the server sends pings faster than it reads their pongs ({unsent} bytes unsent): a ping flood"
            )
            self.transport.abort()
        sent = self.protocol.close_sent
        if sent is not None and sent.code in _CLOSED_FOR:
            self.transport.abort()


def refusal(ws: ClientConnection) -> ProtocolError | None:
    """The protocol error for which this client dropped ``ws``, if it did (a ping flood, a message over the bound, broken framing): such a connection is not lost but refused, and not resumed."""
    overrun = getattr(ws, "overrun", None)
    if isinstance(overrun, str):
        return ProtocolError(overrun)
    sent = ws.protocol.close_sent
    if sent is not None and sent.code in _CLOSED_FOR:
        detail = f" ({sent.reason})" if sent.reason else ""
        return ProtocolError(f"{_CLOSED_FOR[sent.code]}{detail}")
    return None


async def open_socket(
    endpoint: Endpoint, url: str, idempotency_key: str | None, window: int
) -> tuple[ClientConnection, Hello]:
    """Connects to ``url`` (with the ``Idempotency-Key`` of a run), checks the subprotocol and reads ``hello``; ``window`` bounds the messages accepted (``window`` + :data:`MESSAGE_SLACK`)."""
    headers = {k: v for k, v in endpoint.headers.items() if k != "User-Agent"}
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
            max_size=window + MESSAGE_SLACK,
            create_connection=BoundedConnection,
            ping_interval=20,
            ping_timeout=20,
            close_timeout=2,
            ssl=endpoint.ssl if url.startswith("wss://") else None,
        )
    except InvalidStatus as e:
        raise error_from_response(e.response.status_code, bytes(e.response.body or b"")) from None
    except (OSError, InvalidHandshake, ConnectionClosed, EOFError) as e:
        refused = isinstance(e, OSError) and e.errno == errno.ECONNREFUSED
        raise TransportError(shown_url(url), str(e) or type(e).__name__, refused=refused) from None
    endpoint.note_contact()
    try:
        if ws.subprotocol not in (None, SUBPROTOCOL):
            raise ProtocolError(f"server chose subprotocol {ws.subprotocol!r}, not {SUBPROTOCOL}")
        frame = await opening_frame(ws, url, "hello")
        if isinstance(frame, ErrorFrame):
            raise ProtocolError(f"attach refused: {frame.code}: {frame.message}")
        if not isinstance(frame, Hello):
            raise ProtocolError(f"expected hello, got {type(frame).__name__}")
        return ws, frame
    except BaseException:
        abort(ws)
        raise


async def opening_frame(ws: ClientConnection, url: str, what: str) -> ServerFrame:
    """The next frame of a connection's opening (``what``: ``hello``, ``input_ack``), or why there is none."""
    try:
        message = await ws.recv()
    except ConnectionClosed as e:
        refused = refusal(ws)
        if refused is not None:
            raise refused from None
        raise TransportError(shown_url(url), f"closed before {what} ({e})") from None
    if isinstance(message, str):
        raise ProtocolError("the server sent a text message")
    try:
        return decode_server_frame(message)
    except FrameDecodeError as e:
        raise ProtocolError(f"bad {what} frame: {e}") from None


async def read_input_ack(ws: ClientConnection, url: str) -> int:
    """Reads the ``input_ack`` the server sends right after ``hello`` to an attachment with numbered input: where its input stream stands."""
    frame = await opening_frame(ws, url, "input_ack")
    if isinstance(frame, ErrorFrame) and frame.code == "input_expired":
        # Told after the upgrade (so that browsers learn it too): the same
        # error a refused upgrade would be.
        raise InputExpired(409, frame.code, frame.message)
    if isinstance(frame, ErrorFrame):
        raise ProtocolError(f"attach refused: {frame.code}: {frame.message}")
    if not isinstance(frame, InputAck):
        raise ProtocolError(f"expected input_ack after hello (numbered input), got {type(frame).__name__}")
    return frame.applied


def shown_url(url: str) -> str:
    """``url`` for an error message: a run's spawn request (its command, its env) left out."""
    return re.sub(r"([?&])request=[^&]*", r"\1request=…", url)


async def close_quietly(ws: ClientConnection) -> None:
    """Completes the close handshake, bounded."""
    with contextlib.suppress(Exception):
        await asyncio.wait_for(ws.close(), 2.0)


def abort(ws: ClientConnection) -> None:
    """Drops a connection that failed at once, without a close handshake to wait for."""
    with contextlib.suppress(Exception):
        ws.transport.abort()
