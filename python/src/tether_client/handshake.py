"""Opening one WebSocket of an attachment: the upgrade with the token and a run's ``Idempotency-Key``, the subprotocol check, the ``hello``."""

from __future__ import annotations

import asyncio
import contextlib
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


async def open_socket(
    endpoint: Endpoint, url: str, idempotency_key: str | None, window: int
) -> tuple[ClientConnection, Hello]:
    """Connects to ``url`` (with the ``Idempotency-Key`` of a run), checks the subprotocol and reads ``hello``; ``window`` bounds the messages accepted."""
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
            # The hello carries argv (up to the server's 1 MiB body), data
            # frames at most one window.
            max_size=window + (2 << 20),
            ping_interval=20,
            ping_timeout=20,
            close_timeout=2,
            ssl=endpoint.ssl if url.startswith("wss://") else None,
        )
    except InvalidStatus as e:
        raise error_from_response(e.response.status_code, bytes(e.response.body or b"")) from None
    except (OSError, InvalidHandshake, ConnectionClosed, EOFError) as e:
        raise TransportError(shown_url(url), str(e) or type(e).__name__) from None
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
        await close_quietly(ws)
        raise


async def opening_frame(ws: ClientConnection, url: str, what: str) -> ServerFrame:
    """The next frame of a connection's opening (``what``: ``hello``, ``input_ack``), or why there is none."""
    try:
        message = await ws.recv()
    except ConnectionClosed as e:
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
