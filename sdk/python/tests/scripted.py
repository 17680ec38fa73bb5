"""A scripted link server for the tests: a real `websockets` server on
loopback whose every connection the test drives by hand — what the real
server cannot be made to do on demand (cut a link between a reply and its
acknowledgement, refuse with `session_busy`, fall silent)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from websockets.asyncio.server import ServerConnection, serve

# How long a test waits for the machine to say something.
WAIT = 5.0


class Peer:
    """One connection from the machine, driven by the test."""

    def __init__(self, ws: ServerConnection) -> None:
        self.ws = ws
        self.done = asyncio.get_running_loop().create_future()
        self.authorization = ws.request.headers.get("Authorization") if ws.request else None

    async def recv(self, timeout: float = WAIT) -> dict[str, Any]:
        """The machine's next message."""
        return json.loads(await asyncio.wait_for(self.ws.recv(), timeout))

    async def recv_type(self, kind: str, timeout: float = WAIT) -> dict[str, Any]:
        """The machine's next message, skipping heartbeat acks; it must be `kind`."""
        while True:
            message = await self.recv(timeout)
            if message["type"] != "heartbeat-ack" or kind == "heartbeat-ack":
                assert message["type"] == kind, f"expected {kind}, got {message}"
                return message

    async def silent(self, seconds: float) -> None:
        """Asserts the machine says nothing for `seconds`."""
        try:
            message = await asyncio.wait_for(self.ws.recv(), seconds)
        except TimeoutError:
            return
        raise AssertionError(f"expected silence, got {message}")

    async def send(self, message: dict[str, Any] | str) -> None:
        await self.ws.send(message if isinstance(message, str) else json.dumps(message))

    async def welcome(self, resumed: dict[str, Any] | None = None) -> dict[str, Any]:
        """Answers `hello` with `welcome`; returns the `hello`. With a
        `resumable-sessions` hello, also reads `resume` and answers it with
        `resumed` (nothing ended, unless given) — then `self.resume` is it."""
        hello = await self.recv()
        assert hello["type"] == "hello", hello
        await self.send(
            {
                "type": "welcome",
                "protocol_version": 1,
                "machine": "laptop",
                "capabilities": {"features": hello.get("features", []), "durable_plans": True},
            }
        )
        self.resume = None
        if "resumable-sessions" in hello.get("features", []):
            self.resume = await self.recv_type("resume")
            if resumed is None:
                resumed = {
                    "type": "resumed",
                    "sessions": [{"session": s["session"], "document": "d1", "withdrawn": []} for s in self.resume["sessions"]],
                    "ended": [],
                }
            await self.send(resumed)
        return hello

    def cut(self) -> None:
        """Cuts the connection with no close frame, as a dead network does."""
        transport = self.ws.transport
        if transport is not None:
            transport.abort()
        if not self.done.done():
            self.done.set_result(None)

    async def close(self, code: int, reason: str = "") -> None:
        await self.ws.close(code, reason)
        if not self.done.done():
            self.done.set_result(None)


class ScriptedServer:
    """Accepts machine links at /machine; each becomes a Peer for the test."""

    def __init__(self) -> None:
        self._peers: asyncio.Queue[Peer] = asyncio.Queue()
        self._server: Any = None
        self.port = 0

    async def __aenter__(self) -> ScriptedServer:
        self._server = await serve(self._handle, "127.0.0.1", 0, ping_interval=None, compression=None)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc: object) -> None:
        self._server.close()
        await self._server.wait_closed()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def accept(self, timeout: float = WAIT) -> Peer:
        """The machine's next connection."""
        return await asyncio.wait_for(self._peers.get(), timeout)

    async def _handle(self, ws: ServerConnection) -> None:
        peer = Peer(ws)
        await self._peers.put(peer)
        closed = asyncio.ensure_future(ws.wait_closed())
        await asyncio.wait({closed, peer.done}, return_when=asyncio.FIRST_COMPLETED)
        closed.cancel()


def invoke(session: str = "s1", turn: str = "t1", document: str = "d1") -> dict[str, Any]:
    return {
        "type": "invoke",
        "session": session,
        "turn": turn,
        "document": document,
        "messages": [{"seq": 1, "author": "bo", "kind": "member", "text": "@planner go", "created_at": 1}],
    }
