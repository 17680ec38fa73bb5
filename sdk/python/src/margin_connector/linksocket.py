"""One WebSocket to /machine, opened with the machine's credential.

Read as a queue: every text frame the server sends is kept, in order, until
the reader takes it, so nothing is lost between `welcome` and the loop that
serves the link, and every read waits at most as long as its caller says.
Written through one writer task, so frames go out in the order they were
handed over. How the socket ended becomes an `Ended`. Frames from the server
may be up to 64 MiB (MAX_SERVER_FRAME_BYTES); the machine's own stay within
1 MiB (MAX_FRAME_BYTES), checked before they are queued (see outbox.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from dataclasses import dataclass
from typing import Literal

from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidHandshake, InvalidStatus, InvalidURI

from .ended import Ended
from .errors import ConnectError
from .protocol import MAX_SERVER_FRAME_BYTES

# Most of an error body read from a refused upgrade.
MAX_ERROR_BODY_BYTES = 64 * 1024
# Most frames kept for a reader that is not reading before the link is cut.
MAX_UNREAD = 4096


@dataclass(frozen=True)
class Read:
    """What a read of the socket gave: a text frame, how the socket ended,
    `silent` (nothing came in time) or `aborted` (the machine is leaving)."""

    kind: Literal["text", "end", "silent", "aborted"]
    text: str = ""
    ended: Ended | None = None


class LinkSocket:
    """An open link socket."""

    def __init__(self, ws: ClientConnection) -> None:
        self._ws = ws
        self._unread: asyncio.Queue[Read] = asyncio.Queue()
        self._outgoing: asyncio.Queue[str | None] = asyncio.Queue()
        self._ended: Ended | None = None
        self._open = True
        self._reader = asyncio.create_task(self._read_frames())
        self._writer = asyncio.create_task(self._write_frames())

    @classmethod
    async def open(cls, url: str, credential: str, timeout: float) -> LinkSocket:
        """Connects to `url` with `credential`, within `timeout` seconds. A
        refused upgrade is a ConnectError `refused` with the error body's code."""
        try:
            ws = await connect(
                url,
                additional_headers={"Authorization": f"Bearer {credential}"},
                open_timeout=timeout,
                max_size=MAX_SERVER_FRAME_BYTES,
                # The server asks for heartbeats itself; the link speaks plain JSON.
                ping_interval=None,
                compression=None,
                proxy=None,
                close_timeout=2,
                max_queue=64,
            )
        except InvalidStatus as error:
            response = error.response
            code, message = _error_body(response.body or b"")
            raise ConnectError.refused(response.status_code, code, message) from error
        except InvalidURI as error:
            raise ConnectError.network(str(error)) from error
        except (OSError, TimeoutError, InvalidHandshake, asyncio.TimeoutError) as error:
            raise ConnectError.network(str(error) or type(error).__name__) from error
        return cls(ws)

    def send(self, text: str) -> bool:
        """Queues `text` for the server, in order; False when the socket is no longer open."""
        if not self._open:
            return False
        self._outgoing.put_nowait(text)
        return True

    async def read(self, timeout: float, aborted: asyncio.Event | None = None) -> Read:
        """The next thing the server sent, or how the socket ended, waiting at
        most `timeout` seconds, or until `aborted` is set."""
        if not self._unread.empty():
            return self._take()
        if aborted is not None and aborted.is_set():
            return Read("aborted")
        getter = asyncio.ensure_future(self._unread.get())
        waiters: set[asyncio.Future[object]] = {getter}
        stopper = None
        if aborted is not None:
            stopper = asyncio.ensure_future(aborted.wait())
            waiters.add(stopper)
        try:
            done, _ = await asyncio.wait(waiters, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
        finally:
            if stopper is not None:
                stopper.cancel()
        if getter in done:
            read = getter.result()
            if read.kind == "end":
                # An end stays readable: every later read sees it too.
                self._unread.put_nowait(read)
            return read
        getter.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await getter
        if not getter.cancelled() and getter.exception() is None:
            # It came just as the wait ended: keep it first in line.
            self._push_front(getter.result())
        if stopper is not None and aborted is not None and aborted.is_set():
            return Read("aborted")
        return Read("silent")

    @property
    def ended(self) -> Ended | None:
        return self._ended

    async def close(self, code: int = 1000) -> None:
        """Sends what is queued, then closes the socket with a close frame."""
        self._open = False
        self._outgoing.put_nowait(None)
        with contextlib.suppress(Exception):
            await asyncio.wait_for(asyncio.shield(self._writer), 2)
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self._ws.close(code), 3)
        await self._stop_tasks()

    async def terminate(self) -> None:
        """Cuts the socket at once, without a close frame."""
        self._open = False
        transport = self._ws.transport
        if transport is not None:
            transport.abort()
        await self._stop_tasks()

    async def _stop_tasks(self) -> None:
        for task in (self._reader, self._writer):
            task.cancel()
        await asyncio.gather(self._reader, self._writer, return_exceptions=True)

    def _take(self) -> Read:
        read = self._unread.get_nowait()
        if read.kind == "end":
            self._unread.put_nowait(read)
        return read

    def _push_front(self, read: Read) -> None:
        rest = []
        while not self._unread.empty():
            rest.append(self._unread.get_nowait())
        for item in [read, *rest]:
            self._unread.put_nowait(item)

    async def _read_frames(self) -> None:
        try:
            async for frame in self._ws:
                # The link speaks JSON text; binary frames carry nothing for us.
                if isinstance(frame, bytes):
                    continue
                if self._unread.qsize() >= MAX_UNREAD:
                    # A reader this far behind has lost the link anyway.
                    self._end(Ended.dropped("too many unread frames"))
                    transport = self._ws.transport
                    if transport is not None:
                        transport.abort()
                    return
                self._unread.put_nowait(Read("text", text=frame))
            self._end(self._closed_as())
        except ConnectionClosed:
            self._end(self._closed_as())
        except asyncio.CancelledError:
            self._end(Ended.dropped("the socket was cut"))
            raise
        except Exception as error:  # noqa: BLE001 - whatever broke, the link is gone
            self._end(Ended.dropped(str(error) or type(error).__name__))

    async def _write_frames(self) -> None:
        try:
            while True:
                text = await self._outgoing.get()
                if text is None:
                    return
                await self._ws.send(text)
        except ConnectionClosed:
            self._open = False
        except asyncio.CancelledError:
            raise
        except Exception:  # noqa: BLE001 - the reader reports how the link ended
            self._open = False

    def _closed_as(self) -> Ended:
        received = self._ws.protocol.close_rcvd
        if received is None:
            # 1006: the connection went without a close frame.
            sent = self._ws.protocol.close_sent
            why = f"closed ({sent.code})" if sent is not None else "connection closed"
            return Ended.dropped(why)
        return Ended.closed(received.code, received.reason)

    def _end(self, ended: Ended) -> None:
        if self._ended is not None:
            return
        self._open = False
        self._ended = ended
        self._unread.put_nowait(Read("end", ended=ended))


def _error_body(body: bytes) -> tuple[str | None, str]:
    """The code and message of an `{"error":{"code","message"}}` body (ErrorBody); none when unreadable."""
    try:
        parsed = json.loads(body[:MAX_ERROR_BODY_BYTES].decode("utf-8"))
        error = parsed.get("error") if isinstance(parsed, dict) else None
        if isinstance(error, dict) and isinstance(error.get("code"), str) and isinstance(error.get("message"), str):
            return error["code"], error["message"]
    except (ValueError, UnicodeDecodeError):
        # Not JSON: the status alone says what happened.
        pass
    return None, ""
