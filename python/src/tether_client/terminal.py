""":class:`Terminal`: a program on a PTY, driven by a script (write, expect, resize, wait) or by a person (:meth:`Terminal.interact`)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import signal as signals
import sys
from types import TracebackType
from typing import Any

from .attach import Attachment
from .errors import ExpectTimeout, OutputEnded, TetherError
from .protocol import Data, ProcessInfo
from .run import ExitStatus, ProcessHost

MAX_PENDING = 1 << 20
"""Output kept for :meth:`Terminal.expect` while no match is found (the newest MiB)."""


class Terminal:
    """A program running on a PTY, from :meth:`AsyncClient.terminal`.

    Its output (``stdout``; a PTY has no stderr) is read by :meth:`expect`,
    :meth:`read` or ``async for data in terminal``. Typing is
    :meth:`write` (``"\\r"`` is Enter, ``"\\x03"`` Ctrl-C), the window size
    :meth:`resize`, end of input :meth:`send_eof` (Ctrl-D). :meth:`wait`
    gives the :class:`ExitStatus`. Leaving the ``async with`` block before
    the program has exited kills it.
    """

    def __init__(self, process: ProcessInfo, attachment: Attachment) -> None:
        self.process = process
        """The process object as spawned."""
        self.attachment = attachment
        """The underlying attachment."""
        self._pending = b""

    async def write(self, data: bytes | str) -> None:
        """Types ``data`` (a ``str`` is encoded as UTF-8) into the terminal."""
        await self.attachment.write(data)

    async def resize(self, cols: int, rows: int) -> None:
        """Sets the window size; the program gets SIGWINCH."""
        await self.attachment.resize(cols, rows)

    async def signal(self, signal: str) -> None:
        """Sends a signal (``"INT"``, ``"TERM"``...) to the program's process group."""
        await self.attachment.signal(signal)

    async def send_eof(self) -> None:
        """Types the terminal's EOF character (Ctrl-D). A shell takes it as end of input only at an empty prompt: typed while a command runs, it is lost (``expect`` the prompt first)."""
        await self.attachment.close_stdin()

    async def read(self, n: int = 65536) -> bytes:
        """Up to ``n`` bytes of output (what :meth:`expect` left over first); ``b""`` once the output has ended."""
        if self._pending:
            taken, self._pending = self._pending[:n], self._pending[n:]
            return taken
        return await self.attachment.stdout.read(n)

    def __aiter__(self) -> Terminal:
        return self

    async def __anext__(self) -> bytes:
        data = await self.read()
        if not data:
            raise StopAsyncIteration
        return data

    async def expect(self, pattern: str | bytes | re.Pattern[bytes], timeout: float = 10.0) -> str:
        """Reads output until ``pattern`` (a regular expression; ``str`` patterns are encoded as UTF-8) matches, and returns the output up to the end of the match as text.

        What follows the match stays for the next call. Raises
        :class:`ExpectTimeout` after ``timeout`` seconds without a match, and
        :class:`OutputEnded` if the output ends first.
        """
        if isinstance(pattern, re.Pattern):
            regex = pattern
        else:
            regex = re.compile(pattern.encode() if isinstance(pattern, str) else pattern)
        shown = regex.pattern.decode("utf-8", "replace")
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while True:
            match = regex.search(self._pending)
            if match is not None:
                taken, self._pending = self._pending[: match.end()], self._pending[match.end() :]
                return taken.decode("utf-8", "replace")
            left = deadline - loop.time()
            if left <= 0:
                raise ExpectTimeout(shown, timeout, self._pending)
            try:
                data = await asyncio.wait_for(self.attachment.stdout.read(65536), left)
            except asyncio.TimeoutError:
                raise ExpectTimeout(shown, timeout, self._pending) from None
            if not data:
                raise OutputEnded(shown, self._pending)
            self._pending = (self._pending + data)[-MAX_PENDING:]

    async def wait(self) -> ExitStatus:
        """The exit status, once the program has exited."""
        info = await self.attachment.wait()
        return ExitStatus.of(info, self.attachment.stdout.dropped)

    async def interact(self) -> ExitStatus:
        """Connects the local terminal to this one until the program exits, as ``tether run -t`` does.

        The local terminal is put in raw mode (and restored on every way
        out), keys are typed into the remote terminal (Ctrl-C included),
        its output goes to the local stdout, and local window size changes
        are forwarded. Needs a terminal on stdin; returns the exit status.
        """
        import termios
        import tty

        fd = sys.stdin.fileno()
        if not os.isatty(fd):
            raise TetherError("interact() needs a terminal on stdin")
        loop = asyncio.get_running_loop()
        saved = termios.tcgetattr(fd)
        keys: asyncio.Queue[bytes] = asyncio.Queue()

        def on_key() -> None:
            with contextlib.suppress(OSError):
                keys.put_nowait(os.read(fd, 4096))

        def on_winch() -> None:
            size = os.get_terminal_size(fd)
            loop.create_task(self.resize(size.columns, size.lines))

        async def forward_keys() -> None:
            while True:
                await self.write(await keys.get())

        def show(data: bytes) -> None:
            view = memoryview(data)
            while view:  # a terminal may take a large write in parts
                view = view[os.write(sys.stdout.fileno(), view) :]

        async def show_output() -> None:
            if self._pending:
                show(self._pending)
                self._pending = b""
            async for chunk in self.attachment.stdout:
                if isinstance(chunk, Data):
                    show(chunk.data)

        tty.setraw(fd)
        loop.add_reader(fd, on_key)
        # Signal handlers need the main thread's loop; the synchronous API's
        # loop runs elsewhere, and then window changes are not forwarded.
        winch = False
        with contextlib.suppress(ValueError, RuntimeError):
            loop.add_signal_handler(signals.SIGWINCH, on_winch)
            winch = True
        typist = loop.create_task(forward_keys())
        try:
            on_winch()
            await show_output()
            return await self.wait()
        finally:
            typist.cancel()
            loop.remove_reader(fd)
            if winch:
                loop.remove_signal_handler(signals.SIGWINCH)
            termios.tcsetattr(fd, termios.TCSADRAIN, saved)


class TerminalContext:
    """What :meth:`AsyncClient.terminal` returns: ``async with`` it for a :class:`Terminal`."""

    def __init__(self, client: ProcessHost, body: dict[str, Any]) -> None:
        self._client = client
        self._body = body
        self._terminal: Terminal | None = None

    async def __aenter__(self) -> Terminal:
        process = await self._client.spawn_request(self._body)
        try:
            attachment = await self._client.attach(process.id)
        except BaseException:
            with contextlib.suppress(TetherError):
                await self._client.remove(process.id, force=True)
            raise
        self._terminal = Terminal(process, attachment)
        return self._terminal

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        terminal = self._terminal
        if terminal is None:
            return
        exited = terminal.attachment.exit_info is not None
        await terminal.attachment.close()
        if not exited:
            with contextlib.suppress(TetherError):
                await self._client.remove(terminal.process.id, force=True)
