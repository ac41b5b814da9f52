""":class:`LoopThread`: an event loop on a daemon thread of its own, which the synchronous API runs every call on."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Coroutine, Iterator
from typing import Any, TypeVar

T = TypeVar("T")


class LoopThread:
    """An event loop running on a daemon thread of its own."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name="tether-client", daemon=True)
        self._thread.start()

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        """Runs ``coro`` on the loop and returns its result (or raises its exception)."""
        if threading.current_thread() is self._thread:
            coro.close()
            raise RuntimeError("a synchronous tether_client call from inside its own event loop")
        future = asyncio.run_coroutine_threadsafe(coro, self.loop)
        try:
            return future.result()
        except BaseException:
            # KeyboardInterrupt while waiting: cancel the call itself too.
            future.cancel()
            raise

    def iterate(self, iterator: AsyncIterator[T]) -> Iterator[T]:
        """A blocking iterator over an async iterator that lives on the loop."""

        async def step() -> T:
            return await iterator.__anext__()

        try:
            while True:
                try:
                    item = self.run(step())
                except StopAsyncIteration:
                    return
                yield item
        finally:
            aclose = getattr(iterator, "aclose", None)
            if aclose is not None and self.loop.is_running():

                async def close() -> None:
                    await aclose()

                self.run(close())

    def close(self) -> None:
        """Ends what is left on the loop (as ``asyncio.run`` does), then stops the loop and its thread."""
        if self.loop.is_running() and threading.current_thread() is not self._thread:
            # A connection's own tasks (websockets' keepalive, a closing
            # handshake) may outlive the close that started their end: a
            # loop stopped under them reports "Task was destroyed but it is
            # pending!" at exit.
            finishing = asyncio.run_coroutine_threadsafe(_cancel_the_rest(), self.loop)
            try:
                finishing.result(timeout=5)
            except Exception:  # noqa: BLE001: closing goes on whatever the tasks did
                finishing.cancel()
        if self.loop.is_running():
            self.loop.call_soon_threadsafe(self.loop.stop)
            self._thread.join(timeout=5)
        if not self.loop.is_running():
            self.loop.close()


async def _cancel_the_rest() -> None:
    """Cancels every other task of the running loop and waits for them, then finalises async generators."""
    current = asyncio.current_task()
    rest = [task for task in asyncio.all_tasks() if task is not current]
    for task in rest:
        task.cancel()
    await asyncio.gather(*rest, return_exceptions=True)
    await asyncio.get_running_loop().shutdown_asyncgens()
