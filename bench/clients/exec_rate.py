#!/usr/bin/env python3
"""Client exec throughput: how many `true` commands a second each client runs, one at a time and 50 in flight.

Beside the server's own rate (``POST /v1/exec`` over raw keep-alive
HTTP/1.1 connections, plain asyncio streams, nothing parsed beyond what
HTTP needs), it measures:

- ``python``: the Python client's ``AsyncClient.exec`` (one ``POST /v1/exec``);
- ``ts``: the TypeScript client's ``TetherClient.exec`` (``exec_rate.mjs``);
- ``httpx``, ``aiohttp``: each HTTP library alone, ``POST /v1/exec`` (what
  a client built on it could reach at best; httpx only if importable: the
  client no longer uses it).

``--check`` makes it a test that cannot flake on a slow machine: every
client exec must be one request (the server's ``tether_spawns_total`` rises
by the commands run and ``tether_attaches_total`` not at all), and each
client must reach ``--min-share`` (default 25%, half the goal of 50%) of the
server's own rate with 50 in flight, medians of the rounds.

The machine is shared and noisy, so every measurement runs ``--rounds``
times, interleaved (round 1 of each, then round 2 of each...), and the
table gives the median and the spread (min-max). Usage, from the
repository root, with the Python client installed in target/py-venv and
the TypeScript client built::

    target/py-venv/bin/python bench/clients/exec_rate.py [--tetherd target/release/tetherd] [--rounds 5] [--check]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Awaitable, Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BODY = b'{"command":"true"}'


def start_tetherd(binary: str) -> tuple[subprocess.Popen[bytes], str, Path]:
    scratch = Path(tempfile.mkdtemp(prefix="tether-exec-rate-"))
    proc = subprocess.Popen(
        [binary, "--listen", "127.0.0.1:0", "--no-token"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        env=dict(os.environ, RUST_LOG="warn", TMPDIR=str(scratch)),
    )
    assert proc.stdout is not None
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        line = proc.stdout.readline().decode()
        match = re.search(r"listening on (http://\S+)", line)
        if match:
            return proc, match.group(1).rstrip("/"), scratch
    proc.kill()
    raise SystemExit("tetherd printed no 'listening on' line")


async def rate(total: int, inflight: int, one: Callable[[], Awaitable[None]]) -> float:
    """Commands a second: ``total`` calls of ``one``, at most ``inflight`` at a time."""
    remaining = total

    async def worker() -> None:
        nonlocal remaining
        while remaining > 0:
            remaining -= 1
            await one()

    began = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(inflight)))
    return total / (time.perf_counter() - began)


async def raw_rate(host: str, port: int, total: int, inflight: int) -> float:
    """The server's own rate: pre-built requests on keep-alive connections, answers read by Content-Length."""
    request = (
        f"POST /v1/exec HTTP/1.1\r\nHost: {host}:{port}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(BODY)}\r\n\r\n"
    ).encode() + BODY
    pool: asyncio.Queue[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = asyncio.Queue()
    for _ in range(inflight):
        pool.put_nowait(await asyncio.open_connection(host, port))

    async def one() -> None:
        reader, writer = await pool.get()
        writer.write(request)
        head = await reader.readuntil(b"\r\n\r\n")
        length = int(re.search(rb"(?i)content-length: *(\d+)", head).group(1))  # type: ignore[union-attr]
        body = await reader.readexactly(length)
        if not head.startswith(b"HTTP/1.1 200") or b'"exit_code":0' not in body:
            raise RuntimeError(f"unexpected answer: {head!r} {body[:200]!r}")
        pool.put_nowait((reader, writer))

    try:
        return await rate(total, inflight, one)
    finally:
        while not pool.empty():
            pool.get_nowait()[1].close()


async def httpx_rate(base: str, total: int, inflight: int) -> float:
    import httpx

    limits = httpx.Limits(max_connections=inflight, max_keepalive_connections=inflight)
    async with httpx.AsyncClient(base_url=base, limits=limits, timeout=60) as client:

        async def one() -> None:
            answer = await client.post("/v1/exec", content=BODY)
            answer.raise_for_status()

        return await rate(total, inflight, one)


async def aiohttp_rate(base: str, total: int, inflight: int) -> float:
    import aiohttp

    connector = aiohttp.TCPConnector(limit=inflight)
    async with aiohttp.ClientSession(base_url=base, connector=connector) as session:

        async def one() -> None:
            async with session.post("/v1/exec", data=BODY) as answer:
                answer.raise_for_status()
                await answer.read()

        return await rate(total, inflight, one)


async def python_client_rate(base: str, total: int, inflight: int) -> float:
    from tether_client import AsyncClient

    async with AsyncClient(base) as client:

        async def one() -> None:
            result = await client.exec("true")
            if result.exit_code != 0:
                raise RuntimeError(f"exit {result.exit_code}")

        return await rate(total, inflight, one)


def ts_client_rate(base: str, total: int, inflight: int) -> float:
    out = subprocess.run(
        ["node", str(Path(__file__).with_name("exec_rate.mjs")), base, str(total), str(inflight)],
        cwd=ROOT / "typescript",
        capture_output=True,
        text=True,
        check=True,
    )
    return float(json.loads(out.stdout)["rate"])


def counters(base: str) -> dict[str, int]:
    """The server's spawn and attach totals, from ``/metrics``."""
    with urllib.request.urlopen(f"{base}/metrics", timeout=30) as answer:
        text = answer.read().decode()
    found = re.findall(r"^(tether_(?:spawns|attaches)_total) (\d+)$", text, re.MULTILINE)
    return {name: int(value) for name, value in found}


CLIENTS = ("Python AsyncClient.exec", "TypeScript TetherClient.exec")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tetherd", default=str(ROOT / "target/release/tetherd"))
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--serial", type=int, default=200, help="commands per measurement, one at a time")
    parser.add_argument("--parallel", type=int, default=1000, help="commands per measurement, 50 in flight")
    parser.add_argument("--json", help="write the results here too")
    parser.add_argument("--check", action="store_true", help="fail unless each client exec is one request and reaches --min-share")
    parser.add_argument("--min-share", type=float, default=0.25, help="with --check: least share of the server's rate at 50 in flight")
    args = parser.parse_args()
    if not Path(args.tetherd).exists():
        raise SystemExit(f"no tetherd at {args.tetherd}: cargo build --release -p tether-server, or --tetherd PATH")
    try:
        import httpx  # noqa: F401

        has_httpx = True
    except ImportError:
        has_httpx = False
    proc, base, scratch = start_tetherd(args.tetherd)
    host, port = base.removeprefix("http://").split(":")
    kinds: dict[str, Callable[[int, int], float]] = {
        "server (raw HTTP/1.1)": lambda n, c: asyncio.run(raw_rate(host, int(port), n, c)),
        **({"httpx alone": lambda n, c: asyncio.run(httpx_rate(base, n, c))} if has_httpx else {}),
        "aiohttp alone": lambda n, c: asyncio.run(aiohttp_rate(base, n, c)),
        "Python AsyncClient.exec": lambda n, c: asyncio.run(python_client_rate(base, n, c)),
        "TypeScript TetherClient.exec": lambda n, c: ts_client_rate(base, n, c),
    }
    results: dict[str, dict[int, list[float]]] = {k: {1: [], 50: []} for k in kinds}
    failures: list[str] = []
    try:
        for round_no in range(args.rounds):
            for inflight, total in ((1, args.serial), (50, args.parallel)):
                for name, measure in kinds.items():
                    before = counters(base)
                    value = measure(total, inflight)
                    after = counters(base)
                    spawned = after["tether_spawns_total"] - before["tether_spawns_total"]
                    attached = after["tether_attaches_total"] - before["tether_attaches_total"]
                    if name in CLIENTS and (spawned, attached) != (total, 0):
                        failures.append(f"{name}: {total} execs made {spawned} spawns and {attached} attaches, not {total} and 0")
                    results[name][inflight].append(value)
                    print(f"round {round_no + 1} {name:30} {inflight:2} in flight: {value:7.0f}/s", file=sys.stderr)
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        shutil.rmtree(scratch, ignore_errors=True)
    server = {c: statistics.median(results["server (raw HTTP/1.1)"][c]) for c in (1, 50)}
    print(f"\n`true` via POST /v1/exec or the client's exec; {args.rounds} interleaved rounds; median (min-max) commands/s; tetherd {args.tetherd}\n")
    print("| client | 1 at a time | 50 in flight | 50 in flight, share of the server's |")
    print("|---|---:|---:|---:|")
    for name, by in results.items():
        cells = [f"{statistics.median(by[c]):.0f} ({min(by[c]):.0f}-{max(by[c]):.0f})" for c in (1, 50)]
        share = statistics.median(by[50]) / server[50]
        print(f"| {name} | {cells[0]} | {cells[1]} | {share:.0%} |")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))
    if args.check:
        for name in CLIENTS:
            share = statistics.median(results[name][50]) / server[50]
            if share < args.min_share:
                failures.append(f"{name}: {share:.0%} of the server's rate with 50 in flight, under {args.min_share:.0%}")
        for failure in failures:
            print(f"FAIL {failure}", file=sys.stderr)
        if failures:
            return 1
        print(f"check passed: each client exec is one request, at least {args.min_share:.0%} of the server's rate", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
