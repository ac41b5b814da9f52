"""Resource limits and usage (issue 31): the client sends ``limits`` and reads ``limits``, ``usage`` and reason ``oom`` back from a real tetherd."""

from __future__ import annotations

import pytest

from tether_client import Client, InvalidArgument, Limits
from tether_client.spawn import spawn_body

from .conftest import FAST_RETRY, Tetherd

HOG = "x = []\nwhile True:\n    x.append(bytearray(1 << 20))\n"


def test_spawn_body_carries_the_limits_that_are_set() -> None:
    body = spawn_body(["true"], limits=Limits(memory_bytes=64 << 20, cpus=0.5))
    assert body["limits"] == {"memory_bytes": 64 << 20, "cpus": 0.5}
    assert "limits" not in spawn_body(["true"], limits=Limits())
    with pytest.raises(InvalidArgument):
        spawn_body(["true"], limits=Limits(pids=0))


def test_a_memory_limit_ends_a_hog_with_reason_oom_and_a_bill(server: Tetherd) -> None:
    with Client(server.base, retry=FAST_RETRY) as client:
        process = client.spawn(["python3", "-c", HOG], limits=Limits(memory_bytes=64 << 20, pids=32))
        assert process.limits == Limits(memory_bytes=64 << 20, pids=32)
        exited = client.wait(process.id, timeout=20)
        assert (exited.reason, exited.exit_code) == ("oom", 137)
        assert exited.usage is not None
        assert 32 << 20 < exited.usage.memory_peak_bytes <= 65 << 20
        assert exited.usage.cpu_user_s + exited.usage.cpu_system_s > 0
