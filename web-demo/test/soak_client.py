"""The Python client's part of the mixed-client soak (test/soak.test.mjs, issue 43).

Usage: ``soak_client.py BASE_URL DIR ID...``. Attaches to every process with
the ``tether_client`` package's defaults (its own retry policy: nothing
tuned for the test), writes each stream, as its chunks arrive, to
``DIR/ID.stdout`` and ``DIR/ID.stderr``, and prints one JSON line per event
on stdout:

- ``{"attached": N}`` once all N attachments have had their first ``hello``;
- ``{"id", "exit_code", "connections", "dropped", "stdout", "stderr"}`` when a
  process has exited and both its streams were read to the end (``dropped``:
  bytes reported lost; the stream sizes are what was written to the files);
- ``{"id", "error"}`` when an attachment failed (gave up reconnecting);
- ``{"done": N}`` at the end.

The soak compares the files with what the process wrote.
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

from tether_client import AsyncClient, Attachment, Data, Dropped, OutputReader


def say(event: dict[str, object]) -> None:
    print(json.dumps(event), flush=True)


async def drain(reader: OutputReader, path: Path) -> tuple[int, int]:
    """Writes the stream's chunks to ``path`` as they come; (bytes written, bytes reported dropped)."""
    written = dropped = 0
    with path.open("wb", buffering=0) as out:
        async for chunk in reader:
            if isinstance(chunk, Data):
                out.write(chunk.data)
                written += len(chunk.data)
            elif isinstance(chunk, Dropped):
                dropped += chunk.length
    return written, dropped


async def follow(attachment: Attachment, directory: Path) -> None:
    pid = attachment.id
    try:
        (out, out_lost), (err, err_lost) = await asyncio.gather(
            drain(attachment.stdout, directory / f"{pid}.stdout"),
            drain(attachment.stderr, directory / f"{pid}.stderr"),
        )
        exited = await attachment.wait()
        say(
            {
                "id": pid,
                "exit_code": exited.exit_code,
                "connections": attachment.connections,
                "dropped": out_lost + err_lost,
                "stdout": out,
                "stderr": err,
            }
        )
    except Exception as e:  # a client that gave up: reported, not hidden
        say({"id": pid, "error": f"{type(e).__name__}: {e}"})
    finally:
        await attachment.close()


async def main(base: str, directory: Path, ids: list[str]) -> None:
    async with AsyncClient(base) as client:
        attachments = await asyncio.gather(*(client.attach(pid) for pid in ids))
        say({"attached": len(attachments)})
        await asyncio.gather(*(follow(a, directory) for a in attachments))
    say({"done": len(ids)})


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], Path(sys.argv[2]), sys.argv[3:]))
