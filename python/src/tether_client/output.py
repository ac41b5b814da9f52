"""One output stream on the client side: :class:`StreamState` (the queue the connection fills, tied to credit) and :class:`OutputReader` (what the application reads it with)."""

from __future__ import annotations

import asyncio
import codecs
from collections import deque
from collections.abc import AsyncIterator, Callable

from .errors import ProtocolError, TetherError
from .protocol import Data, Dropped, StreamName

Chunk = Data | Dropped
"""One item of an output stream: bytes (:class:`Data`) or a loss notice (:class:`Dropped`)."""

COALESCE_BYTES = 16 * 1024
"""Small data frames are merged in a queue up to this size."""

_OFFSET_END = 1 << 64
"""Offsets are unsigned 64-bit: no range of a stream ends past 2^64 - 1."""


class StreamState:
    """One stream's queue and offsets, filled by the connection and emptied by the reader.

    Credit: bytes taken by the application are owed to the server as
    credit; ``on_credit_due`` is called when a grant is due (a quarter of
    the window owed, or the queue empty), so at most ``window`` bytes are
    ever queued here.
    """

    def __init__(
        self,
        name: StreamName,
        start: int,
        window: int,
        any_event: asyncio.Event,
        on_credit_due: Callable[[], None],
    ) -> None:
        self.name = name
        self.window = window
        self.threshold = max(1, window // 4)
        self.queue: deque[Chunk] = deque()
        self.queued = 0  # data bytes in queue
        self.next = start  # offset just past the last item received: where a resume starts
        self.total: int | None = None  # the final length, once the process has exited
        self.finished = False  # nothing more will come
        self.failure: TetherError | None = None  # reported after the queued items
        self.discard = False  # the reader gave up on this stream
        self.owed = 0  # credit to grant on this connection (negative: a debt)
        self.dropped = 0  # bytes read() skipped at gaps
        self.event = asyncio.Event()
        self._any = any_event
        self._on_credit_due = on_credit_due

    def at_end(self) -> bool:
        """True once nothing more will arrive (the queue may still hold items)."""
        return self.finished or (self.total is not None and self.next >= self.total)

    def wake(self) -> None:
        """Wakes this stream's reader and any merged reader."""
        self.event.set()
        self._any.set()

    def credit_due(self, force: bool = False) -> bool:
        """True when the credit owed should be granted now."""
        return self.owed > 0 and (force or self.discard or self.owed >= self.threshold or not self.queue)

    def take_credit(self) -> int:
        """The credit owed, now granted."""
        owed, self.owed = self.owed, 0
        return owed

    def consumed(self, n: int) -> None:
        """The application took ``n`` bytes."""
        self.queued -= n
        self.owed += n
        if self.credit_due():
            self._on_credit_due()

    def push_data(self, frame: Data) -> None:
        """A data frame from the server; raises :class:`ProtocolError` for a gap, an overlap, an end past 2^64 or more than the credit allows."""
        if frame.offset != self.next:
            raise ProtocolError(f"{self.name} data at offset {frame.offset}, expected {self.next}")
        n = len(frame.data)
        if frame.end >= _OFFSET_END:
            raise ProtocolError(f"{self.name} data at offset {frame.offset} of {n} bytes ends past 2^64")
        # What the server may still send: the window less what is queued and
        # what was consumed but not yet granted back as credit.
        if self.queued + self.owed + n > self.window:
            raise ProtocolError(
                f"the server sent more {self.name} than the credit window of {self.window} bytes"
            )
        self.next += n
        if n == 0:
            return
        if self.discard:
            self.owed += n
            return
        self.queued += n
        last = self.queue[-1] if self.queue else None
        if isinstance(last, Data) and last.end == frame.offset and len(last.data) + n <= COALESCE_BYTES:
            self.queue[-1] = Data(self.name, last.offset, last.data + frame.data)
        else:
            self.queue.append(frame)
        self.wake()

    def push_dropped(self, frame: Dropped) -> None:
        """A ``dropped`` notice; adjacent notices merge into one."""
        if frame.offset != self.next:
            raise ProtocolError(
                f"dropped range of {self.name} starts at {frame.offset}, expected {self.next}"
            )
        if frame.end >= _OFFSET_END:
            raise ProtocolError(
                f"dropped range of {self.name} at {frame.offset} of {frame.length} bytes ends past 2^64"
            )
        self.next = frame.end
        if self.discard:
            return
        last = self.queue[-1] if self.queue else None
        if isinstance(last, Dropped) and last.end == frame.offset:
            self.queue[-1] = Dropped(self.name, last.offset, last.length + frame.length)
        else:
            self.queue.append(frame)
        self.wake()

    def pop(self) -> Chunk | None:
        """The next queued item, accounted for as consumed, or ``None``."""
        if not self.queue:
            return None
        item = self.queue.popleft()
        if isinstance(item, Data):
            self.consumed(len(item.data))
        return item

    def ended(self) -> bool:
        """True at the end of an empty queue; raises the failure, if any, once the queue is empty."""
        if self.queue:
            return False
        if self.failure is not None:
            raise self.failure
        return self.at_end()


class OutputReader:
    """Reads one output stream of an :class:`~tether_client.Attachment`.

    As chunks (:meth:`chunk`, or ``async for chunk in reader``), which
    reports ``dropped`` gaps as :class:`Dropped` items, or as bytes
    (:meth:`read`), which skips gaps and counts them in :attr:`dropped`. The
    stream ends once the process has exited and every byte of this stream
    has been read, whatever happens to the other stream. If the attachment
    fails, the items received before the failure come first, then the error.
    """

    def __init__(self, state: StreamState) -> None:
        self._s = state

    @property
    def stream(self) -> StreamName:
        """Which stream this reads."""
        return self._s.name

    @property
    def buffered(self) -> int:
        """Bytes of this stream held in the client, waiting to be read; never more than the window."""
        return self._s.queued

    @property
    def offset(self) -> int:
        """The offset of the next byte this reader will return (the stream's end once all is read)."""
        return self._s.queue[0].offset if self._s.queue else self._s.next

    @property
    def dropped(self) -> int:
        """Bytes that :meth:`read` skipped because the server had dropped them."""
        return self._s.dropped

    async def chunk(self) -> Chunk | None:
        """The next chunk (:class:`Data` or :class:`Dropped`), or ``None`` at the end of the stream."""
        s = self._s
        while True:
            item = s.pop()
            if item is not None:
                return item
            if s.ended():
                return None
            s.event.clear()
            await s.event.wait()

    def __aiter__(self) -> AsyncIterator[Chunk]:
        return self._iterate()

    async def _iterate(self) -> AsyncIterator[Chunk]:
        while True:
            item = await self.chunk()
            if item is None:
                return
            yield item

    async def read(self, n: int = -1) -> bytes:
        """Up to ``n`` bytes (at least one, unless at the end: then ``b""``); with ``n < 0``, every byte up to the end. Gaps are skipped and counted in :attr:`dropped`."""
        if n < 0:
            parts: list[bytes] = []
            while piece := await self.read(1 << 20):
                parts.append(piece)
            return b"".join(parts)
        if n == 0:
            return b""
        s = self._s
        while True:
            if s.queue:
                item = s.queue.popleft()
                if isinstance(item, Dropped):
                    s.dropped += item.length
                    continue
                taken = item.data[:n]
                if len(item.data) > n:
                    s.queue.appendleft(Data(item.stream, item.offset + n, item.data[n:]))
                s.consumed(len(taken))
                return taken
            if s.ended():
                return b""
            s.event.clear()
            await s.event.wait()

    def discard(self) -> None:
        """Stops buffering this stream: what is queued and whatever comes is credited and thrown away, so it never holds the process back."""
        s = self._s
        s.discard = True
        s.owed += s.queued
        s.queued = 0
        s.queue.clear()
        s.wake()
        s.consumed(0)


class Utf8Decoder:
    """Decodes one stream's chunks as UTF-8, incrementally.

    A code point split across chunks is held back until it is complete; at
    a :class:`Dropped` gap the partial code point becomes U+FFFD and
    decoding starts afresh. Use one decoder per stream, so that a gap or a
    split code point on stderr never corrupts stdout::

        text = Utf8Decoder()
        async for chunk in attachment.stdout:
            print(text.push(chunk), end="")
        print(text.finish(), end="")
    """

    def __init__(self) -> None:
        self._decoder = codecs.getincrementaldecoder("utf-8")("replace")

    def push(self, chunk: Chunk | bytes) -> str:
        """The text that ``chunk`` completes (a :class:`Dropped` gap flushes a partial code point as U+FFFD)."""
        if isinstance(chunk, Dropped):
            return self.finish()
        data = chunk.data if isinstance(chunk, Data) else chunk
        return str(self._decoder.decode(data))

    def finish(self) -> str:
        """At the end of the stream (or a gap): U+FFFD for an incomplete code point, else ``""``; decoding starts afresh."""
        rest = str(self._decoder.decode(b"", final=True))
        self._decoder.reset()
        return rest
