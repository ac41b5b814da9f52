"""The client against servers that lie (issue 48): every case of the shared list ``tests/hostile/cases.json``, against the fake server of ``hostile_server.py``.

Each call runs in a process of its own (``hostile_call.py``), which
measures its wall time and the growth of its peak memory; this process
runs the fake server and checks what the case expects. A case whose act,
call, client setting or expectation this suite does not know fails: the
list is never skipped in part.
"""

from __future__ import annotations

import asyncio
import json
import socket
import sys
from pathlib import Path
from typing import Any

import pytest

from .conftest import REPO
from .hostile_call import CALLS, CLIENT_KEYS
from .hostile_server import ACTS, HostileServer

CASES_FILE = REPO / "tests" / "hostile" / "cases.json"
CHILD = Path(__file__).with_name("hostile_call.py")
KNOWN_ACTS = set(ACTS) | {"tcp_refused"}
EXPECT_KEYS = {"outcome", "error_contains", "deadline_ms", "memory_mb", "requests_max"}
OUTCOMES = {"error": {"error"}, "bounded": {"error", "running"}}
"""Each outcome of the list, and the outcomes of a call that meet it."""
STARTUP_SLACK = 20.0
"""Seconds allowed on top of a case's deadline for its process to start and report, before it is killed."""


def _load() -> list[dict[str, Any]]:
    document = json.loads(CASES_FILE.read_text())
    assert document["format"] == 1, f"{CASES_FILE}: format {document['format']} is not one this suite reads"
    cases: list[dict[str, Any]] = document["cases"]
    return cases


CASES = _load()


def unhandled(case: dict[str, Any]) -> list[str]:
    """What in ``case`` this suite has no handler for."""
    missing = []
    if case.get("act") not in KNOWN_ACTS:
        missing.append(f"act {case.get('act')!r}")
    if case.get("call") not in CALLS:
        missing.append(f"call {case.get('call')!r}")
    missing += [f"client setting {k!r}" for k in case.get("client", {}) if k not in CLIENT_KEYS]
    missing += [f"expectation {k!r}" for k in case.get("expect", {}) if k not in EXPECT_KEYS]
    if case.get("expect", {}).get("outcome") not in OUTCOMES:
        missing.append(f"outcome {case.get('expect', {}).get('outcome')!r}")
    return missing


def test_the_list_holds_nothing_this_suite_cannot_run() -> None:
    ids = [c["id"] for c in CASES]
    assert len(ids) == len(set(ids)), "case ids repeat"
    problems = {c["id"]: unhandled(c) for c in CASES if unhandled(c)}
    assert not problems, f"cases this suite has no handler for: {problems}"


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def _run_call(base: str, case: dict[str, Any]) -> dict[str, Any]:
    spec = {
        "base": base,
        "call": case["call"],
        "client": case.get("client", {}),
        "stop_after_ms": case["expect"]["deadline_ms"],
    }
    child = await asyncio.create_subprocess_exec(
        sys.executable, str(CHILD), json.dumps(spec), stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    limit = 2 * case["expect"]["deadline_ms"] / 1000 + STARTUP_SLACK
    try:
        out, err = await asyncio.wait_for(child.communicate(), limit)
    except asyncio.TimeoutError:
        child.kill()
        await child.wait()
        pytest.fail(f"{case['id']}: the call did not end within {limit:g} s (killed)")
    lines = out.decode().strip().splitlines()
    assert child.returncode == 0 and lines, f"{case['id']}: the call's process failed:\n{err.decode()}"
    result: dict[str, Any] = json.loads(lines[-1])
    return result


@pytest.mark.parametrize("case", CASES, ids=[c["id"] for c in CASES])
async def test_hostile_case(case: dict[str, Any]) -> None:
    missing = unhandled(case)
    assert not missing, f"{case['id']}: this suite has no handler for {missing}"
    expect = case["expect"]
    server = None if case["act"] == "tcp_refused" else await HostileServer(case["act"]).start()
    try:
        base = server.base if server is not None else f"http://127.0.0.1:{_closed_port()}"
        result = await _run_call(base, case)
    finally:
        if server is not None:
            await server.stop()
    where = f"{case['id']} ({case['description']})"
    assert result["outcome"] in OUTCOMES[expect["outcome"]], f"{where}: {result}"
    if result["outcome"] == "error":
        for needle in expect.get("error_contains", []):
            assert needle.lower() in result["error"].lower(), f"{where}: no {needle!r} in {result['error']}"
        assert result["elapsed_ms"] < expect["deadline_ms"], f"{where}: took {result['elapsed_ms']:.0f} ms: {result}"
    if "memory_mb" in expect:
        assert result["growth_mib"] < expect["memory_mb"], f"{where}: peak memory grew {result['growth_mib']:.0f} MiB"
    if "requests_max" in expect:
        assert server is not None and server.requests <= expect["requests_max"], (
            f"{where}: {server.requests if server else 0} requests"
        )
