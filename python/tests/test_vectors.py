"""The golden vectors of protocol/vectors/frames.json: the Python encoder produces, and the decoder accepts, exactly the Rust encoder's bytes."""

from __future__ import annotations

import json
from typing import Any

import msgpack
import pytest

from tether_client import Data, Dropped, Utf8Decoder
from tether_client.protocol import (
    FrameDecodeError,
    decode_client_frame,
    decode_server_frame,
)

from .conftest import REPO

VECTORS = json.loads((REPO / "protocol" / "vectors" / "frames.json").read_text())


def _plain(value: Any) -> Any:
    """The vector's JSON with ``{"$bin": hex}`` turned into bytes."""
    if isinstance(value, dict):
        if set(value) == {"$bin"}:
            return bytes.fromhex(value["$bin"])
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


def test_every_frame_type_is_covered() -> None:
    kinds = {v["frame"]["type"] for v in VECTORS}
    assert kinds == {
        "hello",
        "stdout",
        "stderr",
        "dropped",
        "screen",
        "input_ack",
        "exit",
        "error",
        "stdin",
        "stdin_eof",
        "signal",
        "resize",
        "input",
        "credit",
    }


@pytest.mark.parametrize("vector", VECTORS, ids=[v["name"] for v in VECTORS])
def test_vector_decodes_and_reencodes_to_the_same_bytes(vector: dict[str, Any]) -> None:
    raw = bytes.fromhex(vector["hex"])
    expected = _plain(vector["frame"])
    decode = decode_server_frame if vector["direction"] == "server" else decode_client_frame
    frame = decode(raw)
    assert frame.to_wire() == expected
    # Field order and integer widths match too: byte for byte.
    assert frame.encode() == raw
    # The frame built from the vector's JSON encodes the same way.
    assert msgpack.packb(expected, use_bin_type=True) == raw


@pytest.mark.parametrize(
    ("payload", "code"),
    [
        (b"\xc1", "malformed_frame"),
        (msgpack.packb([1, 2]), "malformed_frame"),
        (msgpack.packb({"offset": 1}), "malformed_frame"),
        (msgpack.packb({"type": "bogus"}), "unknown_type"),
        (msgpack.packb({"type": "stdout", "offset": -1, "data": b""}, use_bin_type=True), "invalid_frame"),
        (msgpack.packb({"type": "stdout", "offset": 0, "data": "text"}, use_bin_type=True), "invalid_frame"),
        (msgpack.packb({"type": "dropped", "stream": "stdin", "offset": 0, "length": 1}), "invalid_frame"),
        (msgpack.packb({"type": "exit", "process": {"id": "x"}}), "invalid_frame"),
    ],
)
def test_bad_server_frames_are_refused_with_the_servers_codes(payload: bytes, code: str) -> None:
    with pytest.raises(FrameDecodeError) as caught:
        decode_server_frame(payload)
    assert caught.value.code == code


def _vector(name: str) -> bytes:
    return bytes.fromhex(next(v["hex"] for v in VECTORS if v["name"] == name))


def test_a_code_point_split_across_frames_decodes_once_complete() -> None:
    first = decode_server_frame(_vector("stdout_split_code_point_first_half"))
    second = decode_server_frame(_vector("stdout_split_code_point_second_half"))
    assert isinstance(first, Data) and isinstance(second, Data)
    text = Utf8Decoder()
    assert text.push(first) == ""
    assert text.push(second) == "\u2500\n"
    assert text.finish() == ""


def test_a_gap_turns_a_partial_code_point_into_a_replacement() -> None:
    text = Utf8Decoder()
    assert text.push(b"a\xe2\x94") == "a"
    assert text.push(Dropped("stdout", 3, 10)) == "\ufffd"
    assert text.push(b"\x80b") == "\ufffdb"
    assert text.push(b"\xe2") == ""
    assert text.finish() == "\ufffd"
