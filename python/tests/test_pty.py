"""An interactive PTY: typed commands run, output is read, resize reaches the program, the exit code comes through."""

from __future__ import annotations

import asyncio

from tether_client import AsyncClient

from .conftest import WAIT

SHELL = ["bash", "--norc", "--noprofile", "-i"]
ENV = {"PS1": "$ ", "TERM": "dumb"}


async def test_a_shell_on_a_pty_computes_resizes_and_exits(client: AsyncClient) -> None:
    async with client.terminal(SHELL, cols=80, rows=24, env=ENV) as term:
        assert term.process.tty
        await term.write("echo $((6*7))\r")
        # The echo of the typed line shows 6*7, never 42: this is the output.
        await term.expect(rb"\r\n42\r\n", timeout=WAIT)
        await term.write("stty size\r")
        await term.expect(rb"24 80", timeout=WAIT)
        await term.resize(100, 30)
        await term.write("stty size\r")
        await term.expect(rb"30 100", timeout=WAIT)
        await client.resize(term.process.id, 120, 40)
        await term.write("stty size\r")
        await term.expect(rb"40 120", timeout=WAIT)
        await term.write("exit 5\r")
        status = await asyncio.wait_for(term.wait(), WAIT)
        assert (status.exit_code, status.reason) == (5, "exit")


async def test_ctrl_c_interrupts_the_foreground_job(client: AsyncClient) -> None:
    async with client.terminal(SHELL, env=ENV) as term:
        # "started" comes from the job itself, so once it shows, the job is
        # the terminal's foreground process group.
        await term.write("sh -c 'echo started; exec sleep 30'; echo not-interrupted\r")
        await term.expect(rb"\r\nstarted\r\n", timeout=WAIT)
        await term.write("\x03")
        # Type on only at the next prompt: the terminal discards typeahead
        # when it delivers the interrupt.
        await term.expect(rb"\^C[^$]*\$ ", timeout=WAIT)
        await term.write("echo after-$((1+1))\r")
        text = await term.expect(rb"after-2\r\n", timeout=WAIT)
        assert "not-interrupted" not in text
        # Ctrl-D ends the shell only when it reads it at an empty prompt: a
        # ^D typed while the terminal is still in cooked mode for the last
        # command would reach readline as a NUL byte.
        await term.expect(rb"\$ ", timeout=WAIT)
        await term.send_eof()
        status = await asyncio.wait_for(term.wait(), WAIT)
        assert status.reason == "exit"
