"""What a Planner's turns, runs and Stops send, in order.

Queued while no link is up (a resumable drop), written once one is, after its
`resume`. Each message is encoded once, when queued, and refused there if its
frame would be over the 1 MiB a machine's frame may carry (MAX_FRAME_BYTES).
Bounded: a sender waits for room once OUTBOX messages are waiting.
"""

from __future__ import annotations

import asyncio
import json
from collections import deque
from collections.abc import Callable
from typing import Any

from .errors import ToolError
from .protocol import MAX_FRAME_BYTES

# Messages that may wait before a sender waits for room.
OUTBOX = 256

# Writes one encoded message to the open link; False when it is not open.
Sink = Callable[[dict[str, Any], str], bool]


def encode(message: dict[str, Any]) -> str:
    """`message` as its frame's text; ToolError `too-large` when over MAX_FRAME_BYTES."""
    text = json.dumps(message, ensure_ascii=False, separators=(",", ":"))
    size = len(text.encode("utf-8"))
    if size > MAX_FRAME_BYTES:
        raise ToolError.too_large(f"a {message.get('type')} message", size, MAX_FRAME_BYTES)
    return text


class Outbox:
    """An ordered, bounded queue of messages in front of the link."""

    def __init__(self, limit: int = OUTBOX) -> None:
        self._limit = limit
        self._queue: deque[tuple[dict[str, Any], str]] = deque()
        self._room: deque[asyncio.Future[None]] = deque()
        self._sink: Sink | None = None
        self._closed: ToolError | None = None

    async def push(self, message: dict[str, Any]) -> None:
        """Queues `message`; returns once it is queued (not written). Raises a
        `link-closed` ToolError once the outbox is closed."""
        text = encode(message)
        while len(self._queue) >= self._limit and self._closed is None:
            room: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self._room.append(room)
            await room
        if self._closed is not None:
            raise self._closed
        self._queue.append((message, text))
        self.flush()

    def open(self, sink: Sink) -> None:
        """Writes what waits to `sink`, and from now on each message as it is queued."""
        self._sink = sink
        self.flush()

    def pause(self) -> None:
        """The link is down: messages wait for the next one."""
        self._sink = None

    def clear(self) -> None:
        """Forgets what waits: it was for a link whose work is gone."""
        self._queue.clear()
        self._release()

    def close(self, why: str) -> None:
        """No link will come: every send from now on fails, naming `why`."""
        self._closed = ToolError.link_closed(why)
        self._sink = None
        self._queue.clear()
        while self._room:
            waiter = self._room.popleft()
            if not waiter.done():
                waiter.set_result(None)

    def flush(self) -> None:
        while self._sink is not None and self._queue:
            message, text = self._queue[0]
            if not self._sink(message, text):
                self._sink = None
                break
            self._queue.popleft()
            self._release()

    def _release(self) -> None:
        while self._room and len(self._queue) < self._limit:
            waiter = self._room.popleft()
            if not waiter.done():
                waiter.set_result(None)
