"""Numbered input (attach with ``input=ID``, docs/PROTOCOL.md): what the connection task has numbered and sent but the server has not yet acknowledged.

Every stdin byte takes one position of the input sequence, every other
action (``stdin_eof``, ``signal``, ``resize``) one. Actions are kept until
an ``input_ack`` covers them and, on a new connection, resent from where
the server says it stands, so each is applied once, in order, however often
the connection drops. At most :data:`MAX_UNACKNOWLEDGED` units wait: the
connection takes no more commands past it, so writers wait (back-pressure).
"""

from __future__ import annotations

from collections import deque

from .protocol import Input, InputAction, Stdin, input_units

MAX_UNACKNOWLEDGED = 1 << 20
"""Most input units held unacknowledged (one more command may be taken while under it)."""


class Outbox:
    """Numbered input not yet acknowledged, oldest first."""

    def __init__(self) -> None:
        self._pending: deque[tuple[int, InputAction]] = deque()
        self._next = 0
        self._acknowledged = 0

    def push(self, action: InputAction) -> Input:
        """Numbers ``action``, keeps it until acknowledged, and returns the frame that sends it."""
        seq = self._next
        self._next += input_units(action)
        self._pending.append((seq, action))
        return Input(seq, action)

    def acknowledge(self, applied: int) -> None:
        """The server has applied every unit before ``applied``: forget them."""
        applied = min(applied, self._next)
        if applied <= self._acknowledged:
            return
        self._acknowledged = applied
        while self._pending:
            seq, action = self._pending[0]
            units = input_units(action)
            if seq + units <= applied and not (units == 0 and seq == applied):
                self._pending.popleft()
                continue
            if seq < applied and isinstance(action, Stdin):
                # Applied in part: keep its tail.
                self._pending[0] = (applied, Stdin(action.data[applied - seq :]))
            break

    def unacknowledged(self) -> list[Input]:
        """The frames a new connection resends: only what the server has not applied."""
        return [Input(seq, action) for seq, action in self._pending]

    @property
    def started(self) -> bool:
        """True once anything was numbered: a new connection resumes the stream (``input_resume=1``)."""
        return self._next > 0

    @property
    def has_room(self) -> bool:
        """True while another command may be taken."""
        return self._next - self._acknowledged < MAX_UNACKNOWLEDGED
