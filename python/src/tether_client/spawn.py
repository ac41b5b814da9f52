"""The body of ``POST /v1/processes`` (and of ``GET /v1/run``'s ``request``): :func:`spawn_body`, checked before it is sent."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from .errors import InvalidArgument
from .protocol import MAX_TERMINAL_SIZE, Limits, Overflow


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
    limits: Limits | None = None,
    beside: str | None = None,
    record_input: bool = False,
) -> dict[str, Any]:
    """The JSON body of ``POST /v1/processes``.

    ``command`` is shell text (run as ``/bin/sh -c TEXT``) when a ``str``, or
    a program and its arguments (PATH is searched) when a sequence.
    ``timeout`` is the server-side deadline in seconds (reason ``timeout``,
    exit code 124). ``limits`` caps its memory, CPU and tasks (each
    absent one is the server's default). ``beside`` (a process id or name)
    runs it as that process runs: with its user and group, in its working
    directory (its current one while it runs, so a shell's ``cd`` counts;
    ``cwd`` still wins); the server refuses it with a ``user`` or ``group``
    (400) and for an unknown process (404), and only the operator's token
    may spawn. ``record_input`` records what is written to its stdin as the
    ``i`` events of its recording (off by default: keystrokes include
    passwords). Raises :class:`InvalidArgument` for values the server would
    refuse.
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
            check_size(name, value)
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
    if limits is not None:
        wire = limits.to_wire()
        for name, value in wire.items():
            if isinstance(value, bool) or not value > 0 or math.isinf(value):
                raise InvalidArgument(f"limits.{name} must be a positive number, not {value!r}")
        if wire:
            body["limits"] = wire
    if beside is not None:
        if not isinstance(beside, str) or not beside:
            raise InvalidArgument("beside names a process: an id or a name")
        body["beside"] = beside
    if record_input:
        body["record_input"] = True
    return body


def check_size(name: str, value: int) -> None:
    if not 1 <= value <= MAX_TERMINAL_SIZE:
        raise InvalidArgument(f"{name} {value} is out of range 1..{MAX_TERMINAL_SIZE}")
