"""``exec`` in one request: ``POST /v1/exec``, with the output past its cap read back from retention.

A spawn, a WebSocket attach and the exit frame take three or more round
trips and a WebSocket handshake; ``POST /v1/exec`` is one request on a
pooled keep-alive connection, which is what lets an agent platform's many
commands in flight keep up with the server (docs/BENCHMARKS.md, "Client
exec throughput"). The answer holds the first :data:`OUTPUT_CAP` bytes of
each stream; a longer stream's rest is read from ``GET .../output`` (the
process has exited, so its retention no longer moves).
"""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping
from typing import Any, Protocol

from .errors import ProtocolError
from .protocol import ProcessInfo

OUTPUT_CAP = 1 << 20
"""Bytes of each stream an answer of ``POST /v1/exec`` carries: the server's default ``max_output_bytes`` (less if its ``--max-exec-output-bytes`` is less).

Not asked for: the server's default fits whatever it allows, and the answer
says the cap that applied. The server reserves three times it per stream
while the command runs (against ``--retain-total``), so it stays small: 50
commands in flight reserve 300 MiB. Output past it comes from retention.
"""

INPUT_IN_REQUEST = 512 << 10
"""Largest ``input`` sent inside the request, encoded (JSON text, or base64): half the server's default ``--max-body-bytes``. Larger input is streamed over an attachment, which has no such bound."""

ANSWER_GRACE = 60.0
"""Seconds allowed past a command's own deadline for its kill, drain and answer."""


class ExecHost(Protocol):
    """What a one-request exec needs of the client (:class:`~tether_client.AsyncClient` is one)."""

    request_timeout: float

    async def exec_request(self, body: Mapping[str, Any], *, timeout: float | None) -> Any: ...

    async def read_output(self, process_id: str, stream: str = ..., offset: int = ...) -> bytes: ...


def fits_one_request(input: bytes | str | None) -> bool:
    """True when ``input`` (as :func:`exec_once` encodes it) is at most :data:`INPUT_IN_REQUEST`."""
    if input is None:
        return True
    if isinstance(input, str):
        return len(json.dumps(input).encode()) <= INPUT_IN_REQUEST
    return 4 * ((len(input) + 2) // 3) <= INPUT_IN_REQUEST


async def exec_once(
    client: ExecHost, body: Mapping[str, Any], input: bytes | str | None
) -> tuple[ProcessInfo, bytes, bytes, int]:
    """Runs a spawn body to completion in one request: the exited process, its stdout, its stderr, and the bytes lost (evicted before they could be read)."""
    request = dict(body)
    if isinstance(input, str):
        request["input"] = input
    elif input is not None:
        request["input_base64"] = base64.b64encode(bytes(input)).decode("ascii")
    deadline = request.get("timeout_ms")
    timeout = None if deadline is None else deadline / 1000 + client.request_timeout + ANSWER_GRACE
    answer = await client.exec_request(request, timeout=timeout)
    try:
        info = ProcessInfo.from_wire(answer)
    except ValueError as e:
        raise ProtocolError(f"POST /v1/exec answered a bad process object: {e}") from None
    cap = answer.get("max_output_bytes")
    if not isinstance(cap, int) or isinstance(cap, bool) or cap < 0:
        raise ProtocolError("POST /v1/exec answered without a valid 'max_output_bytes'")
    streams: list[bytes] = []
    lost = 0
    for name, total in (("stdout", info.stdout_bytes), ("stderr", info.stderr_bytes)):
        captured = answer.get(name)
        data, dropped, truncated = _captured(name, captured)
        lost += dropped
        if truncated:
            rest = await client.read_output(info.id, name, cap)
            data += rest
            # Retention keeps a stream's newest bytes: what is missing is
            # between the cap and what was still retained.
            lost += max(0, total - cap - len(rest))
        streams.append(data)
    return info, streams[0], streams[1], lost


def _captured(name: str, value: object) -> tuple[bytes, int, bool]:
    """One stream of the answer: its bytes, those dropped within the cap, whether it was cut at the cap."""
    if not isinstance(value, dict):
        raise ProtocolError(f"POST /v1/exec answered without {name!r}")
    data, encoding = value.get("data"), value.get("encoding")
    dropped, truncated = value.get("dropped", 0), value.get("truncated", False)
    if not isinstance(data, str) or not isinstance(dropped, int) or not isinstance(truncated, bool):
        raise ProtocolError(f"POST /v1/exec answered a bad {name!r}")
    if encoding == "utf8":
        return data.encode("utf-8"), dropped, truncated
    if encoding == "base64":
        try:
            return base64.b64decode(data, validate=True), dropped, truncated
        except ValueError:
            raise ProtocolError(f"POST /v1/exec answered {name!r} that is not base64") from None
    raise ProtocolError(f"POST /v1/exec answered {name!r} in an unknown encoding {encoding!r}")
