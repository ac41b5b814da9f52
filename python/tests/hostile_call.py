"""Runs one call of a hostile case in a process of its own and prints what happened as one JSON line: how it ended, how long it took, how much its peak memory grew.

``python hostile_call.py SPEC``, SPEC being JSON: ``base`` (the server's
URL), ``call`` and ``client`` as in ``tests/hostile/cases.json``, and
``stop_after_ms``, when a call still running is stopped and reported as
``running``. Run by
``test_hostile.py``; importable for its vocabulary (:data:`CALLS`,
:data:`CLIENT_KEYS`).
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from collections.abc import Awaitable, Callable
from typing import Any

from tether_client import AsyncClient, RetryPolicy, TetherError

PROCESS_ID = "0123456789abcdef0123456789abcdef"


def _attach_options(settings: dict[str, Any]) -> dict[str, Any]:
    options: dict[str, Any] = {}
    if "window" in settings:
        options["window"] = settings["window"]
    if "connect_timeout_ms" in settings:
        options["connect_timeout"] = settings["connect_timeout_ms"] / 1000
    if "reconnect_budget_ms" in settings:
        options["reconnect"] = RetryPolicy(budget=settings["reconnect_budget_ms"] / 1000)
    return options


async def _attach_read(client: AsyncClient, settings: dict[str, Any]) -> None:
    async with client.attach(PROCESS_ID, **_attach_options(settings)) as attachment:
        await attachment.stdout.read()
        await attachment.wait()


async def _list(client: AsyncClient, settings: dict[str, Any]) -> None:
    await client.list()


async def _get(client: AsyncClient, settings: dict[str, Any]) -> None:
    await client.get(PROCESS_ID)


async def _read_output(client: AsyncClient, settings: dict[str, Any]) -> None:
    await client.read_output(PROCESS_ID)


async def _exec(client: AsyncClient, settings: dict[str, Any]) -> None:
    await client.exec("true")


CALLS: dict[str, Callable[[AsyncClient, dict[str, Any]], Awaitable[None]]] = {
    "list": _list,
    "get": _get,
    "read_output": _read_output,
    "exec": _exec,
    "attach_read": _attach_read,
}
"""Every ``call`` of the list."""

CLIENT_KEYS = {
    "request_timeout_ms",
    "retry_budget_ms",
    "reconnect_budget_ms",
    "connect_timeout_ms",
    "max_answer_bytes",
    "window",
}
"""Every ``client`` setting of the list (the attachment's are applied by :func:`_attach_options`)."""


def client_of(base: str, settings: dict[str, Any]) -> AsyncClient:
    unknown = set(settings) - CLIENT_KEYS
    if unknown:
        raise KeyError(f"client settings this suite does not know: {sorted(unknown)}")
    kwargs: dict[str, Any] = {}
    if "retry_budget_ms" in settings:
        kwargs["retry"] = RetryPolicy(budget=settings["retry_budget_ms"] / 1000)
    if "request_timeout_ms" in settings:
        kwargs["request_timeout"] = settings["request_timeout_ms"] / 1000
    if "max_answer_bytes" in settings:
        kwargs["max_answer_bytes"] = settings["max_answer_bytes"]
    # A token given: no runtime entry of this machine is looked for.
    return AsyncClient(base, token="hostile-test", **kwargs)


def _status_kib(field: str) -> int:
    """``VmRSS`` (resident now) or ``VmHWM`` (the most resident since this program started) in KiB.

    Not ``ru_maxrss``: Linux carries it across ``execve`` from the process
    that forked this one (the test runner, tens of MiB), so it would say
    nothing of this call.
    """
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"no {field} in /proc/self/status")


def _text(error: BaseException) -> str:
    """The error with its chain of causes."""
    parts = []
    seen: BaseException | None = error
    while seen is not None and len(parts) < 10:
        parts.append(f"{type(seen).__name__}: {seen}")
        seen = seen.__cause__ or seen.__context__
    return " <- ".join(parts)


async def run(spec: dict[str, Any]) -> dict[str, Any]:
    call = CALLS[spec["call"]]
    settings = spec["client"]
    async with client_of(spec["base"], settings) as client:
        before = _status_kib("VmRSS")
        started = time.monotonic()
        outcome: dict[str, Any] = {"outcome": "success"}
        try:
            await asyncio.wait_for(call(client, settings), spec["stop_after_ms"] / 1000)
        except asyncio.TimeoutError:
            outcome = {"outcome": "running"}
        except TetherError as e:
            outcome = {"outcome": "error", "error": _text(e)}
        except Exception as e:  # not the client's own error type: a bug
            outcome = {"outcome": "foreign", "error": _text(e)}
        elapsed_ms = (time.monotonic() - started) * 1000
        peak = _status_kib("VmHWM")
    return {**outcome, "elapsed_ms": elapsed_ms, "growth_mib": max(0, peak - before) / 1024}


if __name__ == "__main__":
    print(json.dumps(asyncio.run(run(json.loads(sys.argv[1])))), flush=True)
