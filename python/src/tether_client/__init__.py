"""``tether_client``: the Python client of tetherd.

Run a command and get its output, exit code and reason, never hanging and
never losing the tail::

    from tether_client import Client

    with Client("http://127.0.0.1:7420") as client:
        result = client.exec("echo out; echo err >&2; exit 3", timeout=60)
        print(result.exit_code, result.reason, result.stdout_text, result.stderr_text)

- :class:`AsyncClient` (asyncio) and :class:`Client` (blocking, for scripts
  and notebooks): spawn, get, list, wait (across long-poll expiries and
  transient errors), signal, kill (keeps the process), remove (forgets it), stdin, resize.
- ``exec`` runs to completion; ``exec_stream`` streams the output chunk by
  chunk with bounded memory; ``attach`` gives an :class:`Attachment` with a
  reader per stream, credit flow control, automatic resume from the saved
  offsets, and ``dropped`` notices; ``run`` starts a process and attaches
  to it in one WebSocket; ``terminal`` drives a PTY
  (:class:`Terminal`: write, expect, resize, wait, interact).
- ``upload`` and ``download`` (``download_to`` streams) write and read a
  file as a running process sees it, beside it (its user and directory).
- Errors are :class:`TetherError` subclasses carrying the server's code.
"""

from .attach import AttachContext, Attachment, AttachOptions, Chunk, OutputReader
from .output import Utf8Decoder
from .files import DEFAULT_MAX_DOWNLOAD, DownloadTarget, UploadData
from .client import DEFAULT_SERVER, AsyncClient
from .http_api import MintedToken
from .local_token import local_token_for, local_token_path, runtime_dir
from .spawn import spawn_body
from .errors import (
    AttachmentClosed,
    BodyTooLarge,
    ExpectTimeout,
    FileTooLarge,
    FileTransferFailed,
    Forbidden,
    IdempotencyConflict,
    InputExpired,
    InvalidArgument,
    InvalidRequest,
    NameTaken,
    NotFound,
    NotRunning,
    OutputEnded,
    Overloaded,
    ProtocolError,
    RetriesExhausted,
    ServerError,
    StillRunning,
    SpawnFailed,
    StdinUnavailable,
    TetherError,
    TransportError,
    Unauthorized,
    Unreachable,
)
from .protocol import Data, Dropped, ExitReason, Limits, Overflow, ProcessInfo, StreamName, Usage
from .retry import FIRST_CONTACT_REFUSED, RetryPolicy
from .transport import DEFAULT_MAX_ANSWER_BYTES
from .run import ExecResult, ExitStatus, Run, RunContext
from .sync import Client, SyncAttachment, SyncReader, SyncRun, SyncTerminal
from .terminal import Terminal, TerminalContext

__version__ = "0.1.0"

__all__ = [
    "DEFAULT_MAX_ANSWER_BYTES",
    "DEFAULT_MAX_DOWNLOAD",
    "DEFAULT_SERVER",
    "FIRST_CONTACT_REFUSED",
    "AsyncClient",
    "AttachContext",
    "AttachOptions",
    "Attachment",
    "AttachmentClosed",
    "BodyTooLarge",
    "Chunk",
    "Client",
    "Data",
    "Dropped",
    "DownloadTarget",
    "ExecResult",
    "ExitReason",
    "ExitStatus",
    "ExpectTimeout",
    "FileTooLarge",
    "FileTransferFailed",
    "Forbidden",
    "IdempotencyConflict",
    "InputExpired",
    "InvalidArgument",
    "InvalidRequest",
    "Limits",
    "MintedToken",
    "NameTaken",
    "NotFound",
    "NotRunning",
    "OutputEnded",
    "OutputReader",
    "Overflow",
    "Overloaded",
    "ProcessInfo",
    "ProtocolError",
    "RetriesExhausted",
    "RetryPolicy",
    "Run",
    "RunContext",
    "ServerError",
    "StillRunning",
    "SpawnFailed",
    "StdinUnavailable",
    "StreamName",
    "SyncAttachment",
    "SyncReader",
    "SyncRun",
    "SyncTerminal",
    "Terminal",
    "TerminalContext",
    "TetherError",
    "TransportError",
    "Unauthorized",
    "Unreachable",
    "UploadData",
    "Usage",
    "local_token_for",
    "local_token_path",
    "runtime_dir",
    "Utf8Decoder",
    "spawn_body",
]
