"""Retries of transient failures: exponential backoff with jitter, within a time budget counted from the start of the call, which retries never outlast."""

from __future__ import annotations

import asyncio
import random
import time
from dataclasses import dataclass

from .errors import RetriesExhausted, TetherError, TransportError, Unreachable

FIRST_CONTACT_REFUSED = 0.4
"""Seconds a refused connection is retried while the server has never answered this client (the Rust client's ``FIRST_CONTACT_REFUSED``): a server being started may take that long to listen; past it there is no server, and saying so at once is what ``docker`` and ``kubectl`` do."""

_SHORTEST_ATTEMPT = 0.01
"""The least time an attempt is given, however little of the budget is left."""


@dataclass(frozen=True)
class RetryPolicy:
    """How transient failures are retried.

    Pauses start at ``initial_backoff`` seconds and double up to
    ``max_backoff`` (each shortened by up to a quarter at random, so many
    clients do not retry in lockstep), until ``budget`` seconds have passed
    since the call began, or since its last success (any answer from the
    server starts the budget afresh, so a ``wait`` of many hours survives
    many blips). A call therefore ends within the larger of the budget and
    its request timeout, retries included: each attempt's timeout is cut to
    what is left of that (as the Rust client does). Until a client has had
    its first answer from the server, a refused connection gets only
    ``first_contact_refused`` seconds (nothing listens: retrying longer
    cannot help) and other transport failures ``unreachable_budget``
    seconds, so a server that is not running is reported quickly.
    """

    budget: float = 30.0
    initial_backoff: float = 0.1
    max_backoff: float = 2.0
    unreachable_budget: float = 5.0
    first_contact_refused: float = FIRST_CONTACT_REFUSED

    @classmethod
    def none(cls) -> RetryPolicy:
        """No retries: the first failure is final."""
        return cls(budget=0.0, unreachable_budget=0.0, first_contact_refused=0.0)


class Backoff:
    """One run of attempts, from the start of a call or its last success, measured against a policy."""

    def __init__(self, policy: RetryPolicy) -> None:
        self._policy = policy
        self._since = time.monotonic()
        self._attempts = 0
        self._pause = policy.initial_backoff

    def reset(self) -> None:
        """After a success: the budget starts afresh from now."""
        self._since = time.monotonic()
        self._attempts = 0
        self._pause = self._policy.initial_backoff

    def clip(self, timeout: float) -> float:
        """The timeout of the next attempt: ``timeout``, cut to what is left of the call's deadline (the larger of the budget and ``timeout``, from the start of the run), so that retries never stretch a call past it."""
        deadline = max(self._policy.budget, timeout)
        left = deadline - (time.monotonic() - self._since)
        return max(min(timeout, left), _SHORTEST_ATTEMPT)

    async def failed(self, error: TetherError, *, contacted: bool = True) -> None:
        """After a failure: sleeps and returns when another attempt fits in the budget, else raises.

        A non-transient ``error`` is raised at once. When the budget is spent,
        raises :class:`Unreachable` (the last failure was a transport failure)
        or :class:`RetriesExhausted`. ``contacted`` is whether the server has
        ever answered this client; if not, a refused connection gets only the
        policy's ``first_contact_refused`` and another transport failure its
        ``unreachable_budget``.
        """
        if not error.transient:
            raise error
        self._attempts += 1
        elapsed = time.monotonic() - self._since
        budget = self._policy.budget
        if not contacted and isinstance(error, TransportError):
            first_contact = self._policy.first_contact_refused if error.refused else self._policy.unreachable_budget
            budget = min(budget, first_contact)
        remaining = budget - elapsed
        if remaining <= 0:
            if isinstance(error, TransportError):
                raise Unreachable(self._attempts, elapsed, error) from error
            raise RetriesExhausted(self._attempts, elapsed, error) from error
        pause = min(self._pause * (1 - random.random() / 4), remaining)
        self._pause = min(self._pause * 2, self._policy.max_backoff)
        await asyncio.sleep(pause)
