"""The ``tether.v1`` wire vocabulary: the process object and the WebSocket frames.

Every binary WebSocket message is one MessagePack map whose first key is the
string ``type``. Bytes travel as MessagePack ``bin``; offsets and counts are
unsigned 64-bit integers, encoded in the smallest width. This module holds no
IO: :func:`decode_server_frame` and :func:`decode_client_frame` turn bytes
into frame objects, and each frame's :meth:`encode` turns it back into the
exact bytes the Rust encoder produces (pinned by ``protocol/vectors``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, cast

import msgpack

_Bytes = bytes  # `Credit.bytes` shadows the builtin inside that class

SUBPROTOCOL = "tether.v1"
"""The WebSocket subprotocol offered on every attach."""

PROTOCOL_VERSION = 1
"""The protocol version carried in the ``hello`` frame."""

MAX_TERMINAL_SIZE = 4096
"""The largest accepted terminal width or height."""

MAX_ITEMS = 1 << 20
"""The most items (array elements and map entries, all levels together) a server frame may hold, counted from its MessagePack headers before it is decoded, as the Rust decoder counts them: a frame's size alone does not bound what it decodes into (a megabyte of empty strings is a million of them). 2^20 is past any argv the kernel runs and any process object tetherd sends."""

MAX_DEPTH = 1024
"""The deepest nesting of a decoded frame (``msgpack``'s own bound: deeper is a ``malformed_frame``; a frame nests three levels)."""

_U64_MAX = (1 << 64) - 1
_U32_MAX = (1 << 32) - 1

StreamName = Literal["stdout", "stderr"]
"""An output stream of a process. A PTY has only ``stdout``."""

STREAMS: tuple[StreamName, StreamName] = ("stdout", "stderr")
"""Both streams, in the order the server serves them."""

ExitReason = Literal["exit", "signal", "timeout", "killed", "unattached", "lost", "oom"]
"""Why a process ended: by itself, by a signal the server did not send for a
deadline, by the server's ``timeout_ms`` deadline (exit code 124), by
``DELETE`` / server shutdown, or (``oom``) by the kernel's OOM killer at its
memory limit (exit code 137)."""

Overflow = Literal["drop", "block"]
"""What a full retention does: evict the oldest bytes, or pace the program."""

ProcessStatus = Literal["running", "exited"]
"""``exited`` means reaped *and* output capture complete."""

# The one shape MessagePack values take after decoding with raw=False.
Wire = dict[str, Any]


class FrameDecodeError(ValueError):
    """Bytes that are not a valid frame.

    ``code`` tells the three cases apart as the server does:
    ``malformed_frame`` (not a MessagePack map with a string ``type``),
    ``unknown_type`` and ``invalid_frame`` (missing or mistyped fields).
    """

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message


@dataclass(frozen=True)
class Limits:
    """Resource limits of a process and everything it forks (``limits`` of a spawn request and of the process object); ``None`` is no limit.

    ``memory_bytes`` is ``memory.max`` with no swap (past it the OOM killer
    ends the process: reason ``oom``); ``cpus`` a share of CPUs as ``docker
    --cpus``; ``pids`` the most tasks (processes and threads) at once;
    ``memory_high_bytes`` a soft limit (``memory.high``, cgroup v2 only).
    """

    memory_bytes: int | None = None
    cpus: float | None = None
    pids: int | None = None
    memory_high_bytes: int | None = None

    @classmethod
    def from_wire(cls, value: object) -> Limits:
        """Builds limits from decoded JSON or MessagePack; raises ``ValueError`` when a field is mistyped."""
        if not isinstance(value, dict):
            raise ValueError("limits must be a map")
        v = cast(Wire, value)
        return cls(
            memory_bytes=_optional_uint(v, "memory_bytes"),
            cpus=None if v.get("cpus") is None else _number(v, "cpus"),
            pids=_optional_uint(v, "pids"),
            memory_high_bytes=_optional_uint(v, "memory_high_bytes"),
        )

    def to_wire(self) -> Wire:
        """The limits that are set, in the server's field order."""
        fields = (
            ("memory_bytes", self.memory_bytes),
            ("cpus", self.cpus),
            ("pids", self.pids),
            ("memory_high_bytes", self.memory_high_bytes),
        )
        return {name: value for name, value in fields if value is not None}


@dataclass(frozen=True)
class Usage:
    """What a process and everything it forked used: CPU seconds, the most memory (bytes) and tasks it had at once, and block IO where the kernel accounts it."""

    cpu_user_s: float
    cpu_system_s: float
    memory_peak_bytes: int
    processes: int
    io_read_bytes: int | None = None
    io_write_bytes: int | None = None

    @classmethod
    def from_wire(cls, value: object) -> Usage:
        """Builds usage from decoded JSON or MessagePack; raises ``ValueError`` when a field is missing or mistyped."""
        if not isinstance(value, dict):
            raise ValueError("usage must be a map")
        v = cast(Wire, value)
        return cls(
            cpu_user_s=_number(v, "cpu_user_s"),
            cpu_system_s=_number(v, "cpu_system_s"),
            memory_peak_bytes=_uint(v, "memory_peak_bytes"),
            processes=_uint(v, "processes"),
            io_read_bytes=_optional_uint(v, "io_read_bytes"),
            io_write_bytes=_optional_uint(v, "io_write_bytes"),
        )

    def to_wire(self) -> Wire:
        """The usage as a map, in the server's field order."""
        wire: Wire = {
            "cpu_user_s": self.cpu_user_s,
            "cpu_system_s": self.cpu_system_s,
            "memory_peak_bytes": self.memory_peak_bytes,
            "processes": self.processes,
        }
        if self.io_read_bytes is not None:
            wire["io_read_bytes"] = self.io_read_bytes
        if self.io_write_bytes is not None:
            wire["io_write_bytes"] = self.io_write_bytes
        return wire


@dataclass(frozen=True)
class ProcessInfo:
    """The process object, as every HTTP endpoint and the ``hello`` and ``exit`` frames report it.

    ``exit_code``, ``signal``, ``reason``, ``finished_at`` and ``duration_ms``
    are ``None`` while the process runs. ``exit_code`` is the program's own
    code, 128+N after signal N, and 124 when the server's deadline fired.
    """

    id: str
    pid: int
    argv: tuple[str, ...]
    tty: bool
    overflow: Overflow
    status: ProcessStatus
    started_at: str
    exit_code: int | None
    signal: str | None
    reason: ExitReason | None
    finished_at: str | None
    duration_ms: int | None
    stdout_bytes: int
    stderr_bytes: int
    output_incomplete: bool
    first_retained_at: str | None = None
    """RFC 3339 UTC with milliseconds: when the oldest retained byte (either stream) was written, from the server's time index (at most one mark's spacing early); ``None`` with nothing retained or no time known."""
    last_retained_at: str | None = None
    """When the newest retained byte was written; ``None`` as ``first_retained_at`` is."""
    records_input: bool = False
    """True when its input is recorded (the spawn's ``record_input``): what is typed into it shows in its recording."""
    limits: Limits | None = None
    """The resource limits applied; ``None`` when it has none."""
    usage: Usage | None = None
    """What it used, live while it runs and final at its exit; ``None`` where the server cannot account."""
    pids_limit_hit: bool = False
    """True once a fork failed at its ``pids`` limit."""

    @property
    def exited(self) -> bool:
        """True once the process has been reaped and its output capture has completed."""
        return self.status == "exited"

    @classmethod
    def from_wire(cls, value: object) -> ProcessInfo:
        """Builds a process object from decoded JSON or MessagePack; raises ``ValueError`` when a field is missing or mistyped."""
        if not isinstance(value, dict):
            raise ValueError(f"a process object must be a map, not {type(value).__name__}")
        v = cast(Wire, value)
        argv = _field(v, "argv", list)
        if not all(isinstance(a, str) for a in argv):
            raise ValueError("argv must be a list of strings")
        return cls(
            id=_field(v, "id", str),
            pid=_uint(v, "pid", _U32_MAX),
            argv=tuple(argv),
            tty=_field(v, "tty", bool),
            overflow=cast(Overflow, _field(v, "overflow", str)),
            status=cast(ProcessStatus, _field(v, "status", str)),
            started_at=_field(v, "started_at", str),
            exit_code=_optional(v, "exit_code", int),
            signal=_optional(v, "signal", str),
            reason=cast("ExitReason | None", _optional(v, "reason", str)),
            finished_at=_optional(v, "finished_at", str),
            duration_ms=_optional(v, "duration_ms", int),
            stdout_bytes=_uint(v, "stdout_bytes"),
            stderr_bytes=_uint(v, "stderr_bytes"),
            output_incomplete=_field(v, "output_incomplete", bool),
            first_retained_at=_optional(v, "first_retained_at", str),
            last_retained_at=_optional(v, "last_retained_at", str),
            records_input=bool(_optional(v, "records_input", bool)),
            limits=None if v.get("limits") is None else Limits.from_wire(v["limits"]),
            usage=None if v.get("usage") is None else Usage.from_wire(v["usage"]),
            pids_limit_hit=bool(_optional(v, "pids_limit_hit", bool)),
        )

    def to_wire(self) -> Wire:
        """The process object as a map, with the server's field order."""
        return {
            "id": self.id,
            "pid": self.pid,
            "argv": list(self.argv),
            "tty": self.tty,
            "overflow": self.overflow,
            "status": self.status,
            "started_at": self.started_at,
            "exit_code": self.exit_code,
            "signal": self.signal,
            "reason": self.reason,
            "finished_at": self.finished_at,
            "duration_ms": self.duration_ms,
            "stdout_bytes": self.stdout_bytes,
            "stderr_bytes": self.stderr_bytes,
            "output_incomplete": self.output_incomplete,
            **({} if self.first_retained_at is None else {"first_retained_at": self.first_retained_at}),
            **({} if self.last_retained_at is None else {"last_retained_at": self.last_retained_at}),
            **({"records_input": True} if self.records_input else {}),
            **({} if self.limits is None else {"limits": self.limits.to_wire()}),
            **({} if self.usage is None else {"usage": self.usage.to_wire()}),
            **({"pids_limit_hit": True} if self.pids_limit_hit else {}),
        }


def _field(v: Wire, name: str, kind: type[Any]) -> Any:
    if name not in v:
        raise ValueError(f"missing field {name!r}")
    value = v[name]
    # bool is an int in Python: keep them apart both ways.
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise ValueError(f"field {name!r} must be {kind.__name__}, not {type(value).__name__}")
    return value


def _optional(v: Wire, name: str, kind: type[Any]) -> Any:
    if v.get(name) is None:
        return None
    return _field(v, name, kind)


def _number(v: Wire, name: str) -> float:
    if name not in v:
        raise ValueError(f"missing field {name!r}")
    value = v[name]
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < float("inf"):
        raise ValueError(f"field {name!r} must be a non-negative number, not {value!r}")
    return float(value)


def _optional_uint(v: Wire, name: str) -> int | None:
    return None if v.get(name) is None else _uint(v, name)


def _uint(v: Wire, name: str, limit: int = _U64_MAX) -> int:
    value = cast(int, _field(v, name, int))
    if not 0 <= value <= limit:
        raise ValueError(f"field {name!r} is out of range: {value}")
    return value


def _pack(value: Wire) -> bytes:
    # use_bin_type keeps bytes as `bin` and str as `str`; dicts keep their
    # insertion order, so the bytes match the Rust encoder's named maps.
    return cast(bytes, msgpack.packb(value, use_bin_type=True))


# ---------------------------------------------------------------- server frames


@dataclass(frozen=True)
class Hello:
    """First frame of every attachment: the process now, and the offsets this attachment starts from."""

    version: int
    process: ProcessInfo
    stdout: int
    stderr: int

    def to_wire(self) -> Wire:
        """The frame as a map, ``type`` first."""
        return {
            "type": "hello",
            "version": self.version,
            "process": self.process.to_wire(),
            "stdout": self.stdout,
            "stderr": self.stderr,
        }

    def encode(self) -> bytes:
        """The frame's MessagePack bytes."""
        return _pack(self.to_wire())


@dataclass(frozen=True)
class Data:
    """Bytes of ``stream``; ``offset`` is that of ``data[0]`` since spawn."""

    stream: StreamName
    offset: int
    data: bytes

    @property
    def end(self) -> int:
        """The offset just past this chunk."""
        return self.offset + len(self.data)

    def to_wire(self) -> Wire:
        """The frame as a map, ``type`` first."""
        return {"type": self.stream, "offset": self.offset, "data": self.data}

    def encode(self) -> bytes:
        """The frame's MessagePack bytes."""
        return _pack(self.to_wire())


@dataclass(frozen=True)
class Dropped:
    """Bytes ``offset .. offset+length`` of ``stream`` were evicted before this attachment was sent them."""

    stream: StreamName
    offset: int
    length: int

    @property
    def end(self) -> int:
        """The offset just past the lost range."""
        return self.offset + self.length

    def to_wire(self) -> Wire:
        """The frame as a map, ``type`` first."""
        return {"type": "dropped", "stream": self.stream, "offset": self.offset, "length": self.length}

    def encode(self) -> bytes:
        """The frame's MessagePack bytes."""
        return _pack(self.to_wire())


@dataclass(frozen=True)
class Screen:
    """A PTY's screen at stdout ``offset`` (attach with ``screen=1``): ``data``
    written to a fresh ``cols`` x ``rows`` terminal reproduces it; stdout
    continues from exactly ``offset``."""

    offset: int
    cols: int
    rows: int
    data: bytes

    def to_wire(self) -> Wire:
        """The frame as a map, ``type`` first."""
        return {"type": "screen", "offset": self.offset, "cols": self.cols, "rows": self.rows, "data": self.data}

    def encode(self) -> bytes:
        """The frame's MessagePack bytes."""
        return _pack(self.to_wire())


@dataclass(frozen=True)
class Exit:
    """The last frame: the exited process, sent once all of its output has been sent."""

    process: ProcessInfo

    def to_wire(self) -> Wire:
        """The frame as a map, ``type`` first."""
        return {"type": "exit", "process": self.process.to_wire()}

    def encode(self) -> bytes:
        """The frame's MessagePack bytes."""
        return _pack(self.to_wire())


@dataclass(frozen=True)
class ErrorFrame:
    """A refused request (the attachment continues) or a protocol error (a Close follows)."""

    code: str
    message: str

    def to_wire(self) -> Wire:
        """The frame as a map, ``type`` first."""
        return {"type": "error", "code": self.code, "message": self.message}

    def encode(self) -> bytes:
        """The frame's MessagePack bytes."""
        return _pack(self.to_wire())


@dataclass(frozen=True)
class InputAck:
    """How far the attachment's numbered input (``input=ID``) has been applied: every unit before ``applied``, once."""

    applied: int

    def to_wire(self) -> Wire:
        """The frame as a map, ``type`` first."""
        return {"type": "input_ack", "applied": self.applied}

    def encode(self) -> bytes:
        """The frame's MessagePack bytes."""
        return _pack(self.to_wire())


ServerFrame = Hello | Data | Dropped | Screen | InputAck | Exit | ErrorFrame
"""A frame the server sends."""

# ---------------------------------------------------------------- client frames


@dataclass(frozen=True)
class Stdin:
    """Bytes for the process's stdin."""

    data: bytes

    def to_wire(self) -> Wire:
        """The frame as a map, ``type`` first."""
        return {"type": "stdin", "data": self.data}

    def encode(self) -> bytes:
        """The frame's MessagePack bytes."""
        return _pack(self.to_wire())


@dataclass(frozen=True)
class StdinEof:
    """Close stdin (on a PTY: type the terminal's EOF character)."""

    def to_wire(self) -> Wire:
        """The frame as a map, ``type`` first."""
        return {"type": "stdin_eof"}

    def encode(self) -> bytes:
        """The frame's MessagePack bytes."""
        return _pack(self.to_wire())


@dataclass(frozen=True)
class Signal:
    """Send a signal, by name such as ``INT``, to the process group."""

    signal: str

    def to_wire(self) -> Wire:
        """The frame as a map, ``type`` first."""
        return {"type": "signal", "signal": self.signal}

    def encode(self) -> bytes:
        """The frame's MessagePack bytes."""
        return _pack(self.to_wire())


@dataclass(frozen=True)
class Resize:
    """Set the PTY window size (ignored for pipes); both 1 to 4096."""

    cols: int
    rows: int

    def to_wire(self) -> Wire:
        """The frame as a map, ``type`` first."""
        return {"type": "resize", "cols": self.cols, "rows": self.rows}

    def encode(self) -> bytes:
        """The frame's MessagePack bytes."""
        return _pack(self.to_wire())


@dataclass(frozen=True)
class Credit:
    """Grant ``bytes`` more of ``stream`` (with ``window=`` flow control)."""

    stream: StreamName
    bytes: int

    def to_wire(self) -> Wire:
        """The frame as a map, ``type`` first."""
        return {"type": "credit", "stream": self.stream, "bytes": self.bytes}

    def encode(self) -> _Bytes:
        """The frame's MessagePack bytes."""
        return _pack(self.to_wire())


InputAction = Stdin | StdinEof | Signal | Resize
"""What a numbered :class:`Input` does: the unnumbered frame of the same type."""


def input_units(action: InputAction) -> int:
    """Units of the input sequence an action takes: its bytes for stdin, one for every other action."""
    return len(action.data) if isinstance(action, Stdin) else 1


@dataclass(frozen=True)
class Input:
    """One numbered input (attach with ``input=ID``): ``seq`` is the sequence position of the action's first unit."""

    seq: int
    action: InputAction

    def to_wire(self) -> Wire:
        """The frame as a map, ``type`` first."""
        return {"type": "input", "seq": self.seq, "action": self.action.to_wire()}

    def encode(self) -> bytes:
        """The frame's MessagePack bytes."""
        return _pack(self.to_wire())


ClientFrame = Stdin | StdinEof | Signal | Resize | Input | Credit
"""A frame a client sends."""

# ---------------------------------------------------------------- decoding


def too_many_items(payload: bytes) -> int | None:
    """The count of items at which ``payload`` passes :data:`MAX_ITEMS`, read from the MessagePack headers alone (nothing is decoded; a count declared is counted, whether or not its items follow), or ``None`` when it does not; malformed bytes are left to the decoder to name."""
    at = 0
    pending = 1  # values still to be read: the frame, then the items of every array and map begun
    items = 0
    end = len(payload)

    def length(width: int) -> int | None:
        return int.from_bytes(payload[at : at + width], "big") if at + width <= end else None

    while pending > 0:
        pending -= 1
        if at >= end:
            return None
        marker = payload[at]
        at += 1
        begun = 0
        per_item = 0
        skip = 0
        if marker <= 0x7F or marker >= 0xE0 or 0xC0 <= marker <= 0xC3:
            pass
        elif marker <= 0x8F:
            begun, per_item = marker & 0x0F, 2
        elif marker <= 0x9F:
            begun, per_item = marker & 0x0F, 1
        elif marker <= 0xBF:
            skip = marker & 0x1F
        elif marker in (0xCC, 0xD0):
            skip = 1
        elif marker in (0xCD, 0xD1):
            skip = 2
        elif marker in (0xCA, 0xCE, 0xD2):
            skip = 4
        elif marker in (0xCB, 0xCF, 0xD3):
            skip = 8
        elif 0xD4 <= marker <= 0xD8:
            skip = 1 + (1 << (marker - 0xD4))
        elif marker in (0xC4, 0xD9, 0xC5, 0xDA, 0xC6, 0xDB, 0xC7, 0xC8, 0xC9):
            width = {0xC4: 1, 0xD9: 1, 0xC5: 2, 0xDA: 2, 0xC6: 4, 0xDB: 4, 0xC7: 1, 0xC8: 2, 0xC9: 4}[marker]
            size = length(width)
            if size is None:
                return None
            # ext: one more byte, its type
            skip = width + size + (1 if marker in (0xC7, 0xC8, 0xC9) else 0)
        else:  # 0xdc, 0xdd arrays and 0xde, 0xdf maps with 2- or 4-byte counts
            width = 2 if marker in (0xDC, 0xDE) else 4
            count = length(width)
            if count is None:
                return None
            begun, per_item, skip = count, (1 if marker in (0xDC, 0xDD) else 2), width
        items += begun
        if items > MAX_ITEMS:
            return items
        pending += begun * per_item
        at += skip
    return None


def _map_with_type(payload: bytes) -> tuple[str, Wire]:
    """Step one: a MessagePack map with a string ``type``, or ``malformed_frame``."""
    items = too_many_items(payload)
    if items is not None:
        raise FrameDecodeError(
            "invalid_frame",
            f"it holds {items} or more items (array elements and map entries); the most a frame may hold is {MAX_ITEMS}",
        )
    try:
        value = msgpack.unpackb(
            payload,
            raw=False,
            strict_map_key=True,
            max_array_len=MAX_ITEMS,
            max_map_len=MAX_ITEMS,
        )
    except Exception as e:  # msgpack raises several unrelated classes
        raise FrameDecodeError("malformed_frame", f"not MessagePack: {e}") from None
    if not isinstance(value, dict):
        raise FrameDecodeError("malformed_frame", "a frame must be a map")
    kind = value.get("type")
    if not isinstance(kind, str):
        raise FrameDecodeError("malformed_frame", "a frame needs a string field 'type'")
    return kind, cast(Wire, value)


def _stream(v: Wire, name: str = "stream") -> StreamName:
    value = _field(v, name, str)
    if value == "stdout" or value == "stderr":
        return "stdout" if value == "stdout" else "stderr"
    raise ValueError(f"field {name!r} must be 'stdout' or 'stderr', not {value!r}")


def decode_server_frame(payload: bytes) -> ServerFrame:
    """Decodes a frame sent by a server; raises :class:`FrameDecodeError`."""
    kind, v = _map_with_type(payload)
    try:
        if kind == "hello":
            return Hello(
                version=_uint(v, "version", _U32_MAX),
                process=ProcessInfo.from_wire(_field(v, "process", dict)),
                stdout=_uint(v, "stdout"),
                stderr=_uint(v, "stderr"),
            )
        if kind == "stdout" or kind == "stderr":
            return Data(
                stream=_stream({"stream": kind}), offset=_uint(v, "offset"), data=_field(v, "data", bytes)
            )
        if kind == "dropped":
            return Dropped(stream=_stream(v), offset=_uint(v, "offset"), length=_uint(v, "length"))
        if kind == "screen":
            return Screen(
                offset=_uint(v, "offset"),
                cols=_uint(v, "cols", _U32_MAX),
                rows=_uint(v, "rows", _U32_MAX),
                data=_field(v, "data", bytes),
            )
        if kind == "input_ack":
            return InputAck(applied=_uint(v, "applied"))
        if kind == "exit":
            return Exit(process=ProcessInfo.from_wire(_field(v, "process", dict)))
        if kind == "error":
            return ErrorFrame(code=_field(v, "code", str), message=_field(v, "message", str))
    except ValueError as e:
        raise FrameDecodeError("invalid_frame", f"invalid {kind} frame: {e}") from None
    raise FrameDecodeError("unknown_type", f"unknown frame type {kind!r}")


def _action(v: Wire) -> InputAction:
    kind = v.get("type")
    if kind == "stdin":
        return Stdin(data=_field(v, "data", bytes))
    if kind == "stdin_eof":
        return StdinEof()
    if kind == "signal":
        return Signal(signal=_field(v, "signal", str))
    if kind == "resize":
        return Resize(cols=_uint(v, "cols", _U32_MAX), rows=_uint(v, "rows", _U32_MAX))
    raise ValueError(f"action type must be stdin, stdin_eof, signal or resize, not {kind!r}")


def decode_client_frame(payload: bytes) -> ClientFrame:
    """Decodes a frame sent by a client (as the server does); raises :class:`FrameDecodeError`."""
    kind, v = _map_with_type(payload)
    try:
        if kind == "stdin":
            return Stdin(data=_field(v, "data", bytes))
        if kind == "stdin_eof":
            return StdinEof()
        if kind == "signal":
            return Signal(signal=_field(v, "signal", str))
        if kind == "resize":
            return Resize(cols=_uint(v, "cols", _U32_MAX), rows=_uint(v, "rows", _U32_MAX))
        if kind == "credit":
            return Credit(stream=_stream(v), bytes=_uint(v, "bytes"))
        if kind == "input":
            return Input(seq=_uint(v, "seq"), action=_action(_field(v, "action", dict)))
    except ValueError as e:
        raise FrameDecodeError("invalid_frame", f"invalid {kind} frame: {e}") from None
    raise FrameDecodeError("unknown_type", f"unknown frame type {kind!r}")


SIGNALS: dict[str, int] = {
    "HUP": 1,
    "INT": 2,
    "QUIT": 3,
    "KILL": 9,
    "USR1": 10,
    "USR2": 12,
    "PIPE": 13,
    "TERM": 15,
    "CONT": 18,
    "STOP": 19,
    "WINCH": 28,
}
"""Every signal the API accepts, with its number on Linux."""


def parse_signal(text: str) -> str | None:
    """The canonical name of a signal (``"TERM"``, ``"sigterm"`` and ``"15"`` all give ``"TERM"``), or ``None`` if the API does not accept it."""
    upper = text.strip().upper()
    name = upper[3:] if upper.startswith("SIG") else upper
    if name.isdigit():
        number = int(name)
        return next((n for n, k in SIGNALS.items() if k == number), None)
    return name if name in SIGNALS else None
