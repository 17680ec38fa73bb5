"""How to reach a server and keep a Planner linked to it.

The Connector opens links (`hello` with features and manifest, `welcome`),
and `run` serves a Handler across drops, linking again with backoff and
resuming (SPEC L1–L8, L10). `Linked.serve` serves one link only.
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .backoff import backoff
from .credential import CredentialKeeper, FileKeeper, MemoryKeeper
from .ended import Ended, describe_ended, is_final
from .errors import ConnectError
from .handler import Handler
from .linksocket import LinkSocket
from .log import LOGGER, warn
from .outbox import encode
from .protocol import PROTOCOL_VERSION, RESUMABLE_SESSIONS
from .serving import Serving

# How long opening a link (the upgrade, then `welcome`) may take, in seconds.
CONNECT_TIMEOUT = 10.0
# How long a link may be silent before it counts as dropped, in seconds: the
# server sends a heartbeat every 15 s, and closes a link after three unanswered.
SILENCE_TIMEOUT = 45.0

_HEADER_SAFE = re.compile(r"[\x20-\x7e]+")


@dataclass(frozen=True)
class Welcome:
    """What `welcome` said."""

    # The machine's name.
    machine: str
    # What the server offers (`features` granted, `durable_plans`).
    capabilities: dict[str, Any]

    @property
    def features(self) -> list[str]:
        features = self.capabilities.get("features")
        return [f for f in features if isinstance(f, str)] if isinstance(features, list) else []


class Connector:
    """A machine's way to the server: where, with which credential, asking for what."""

    def __init__(
        self,
        server: str,
        *,
        credential: str | None = None,
        credential_file: str | os.PathLike[str] | None = None,
        held_file: str | os.PathLike[str] | None = None,
        resumable: bool = True,
        planning: bool = False,
        run_capacity: int | None = None,
        on_link: Callable[[Welcome], None] | None = None,
        logger: logging.Logger | None = None,
        connect_timeout: float = CONNECT_TIMEOUT,
        silence_timeout: float = SILENCE_TIMEOUT,
    ) -> None:
        """`server` is `http(s)://` or `ws(s)://`. The credential (`mgm_…`) is kept
        in memory (`credential`), or read from `credential_file` at each
        connect and replaced there atomically (mode 0600) by each fresh one a
        link sends (SPEC L8). `held_file` keeps the sessions held and what is
        owed across the machine's restarts (SPEC L3, L10). `resumable` asks
        for `resumable-sessions` (SPEC L1); `planning` declares the manifest's
        `planning` (SPEC U1); `run_capacity` the live attempts per session
        (1–64). `on_link` is called with each link's `welcome` in `run`.
        Timeouts are in seconds."""
        self.server = server
        self.resumable = resumable
        self.planning = planning
        self.run_capacity = run_capacity
        self.held_file = None if held_file is None else os.fspath(held_file)
        self.on_link = on_link
        self.connect_timeout = connect_timeout
        self.silence_timeout = silence_timeout
        self._log = logger or LOGGER
        self.keeper: CredentialKeeper
        if credential_file is not None:
            self.keeper = FileKeeper(credential_file, self._log)
        elif credential is not None:
            self.keeper = MemoryKeeper(credential)
        else:
            raise TypeError("a Connector needs a credential or a credential_file")

    def features(self) -> list[str]:
        """The features this connector asks for in `hello`."""
        return [RESUMABLE_SESSIONS] if self.resumable else []

    def url(self) -> str:
        """The link's WebSocket address (`…/machine`)."""
        base = self.server.rstrip("/")
        for source, target in (("http://", "ws://"), ("https://", "wss://"), ("ws://", "ws://"), ("wss://", "wss://")):
            if base.startswith(source):
                return f"{target}{base[len(source):]}/machine"
        raise ConnectError.address(self.server)

    async def check_credential(self) -> None:
        """Checks that a credential is at hand (the file exists and holds one), without connecting."""
        await self.keeper.current()

    async def connect(self) -> Linked:
        """Opens a link with the current credential: connects, sends `hello`,
        waits for `welcome`. Raises ConnectError."""
        url = self.url()
        credential = await self.keeper.current()
        if not _HEADER_SAFE.fullmatch(credential):
            raise ConnectError.credential()
        socket = await LinkSocket.open(url, credential, self.connect_timeout)
        hello: dict[str, Any] = {"type": "hello", "protocol_version": PROTOCOL_VERSION, "features": self.features()}
        if self.run_capacity is not None:
            hello["run_capacity"] = self.run_capacity
        if self.planning:
            hello["manifest"] = {"planning": True}
        socket.send(encode(hello))
        try:
            welcome = await self._welcome(socket)
        except BaseException:
            await socket.terminate()
            raise
        return Linked(socket, welcome, self)

    async def run(self, handler: Handler | Any, *, until: asyncio.Event | None = None) -> Ended:
        """Serves `handler` until `until` is set (then it detaches) or the server
        ends the link for good (revoked, a refused `hello`, taken over with
        4409, or a credential it refuses), linking again after every other
        end with a pause from 250 ms doubling to 30 s, with jitter.

        With resumable sessions (the default) each link starts with `resume`:
        running turns carry on, their calls in flight get their answers after
        `resumed`, held answers and Stops arrive, and what the server has not
        acknowledged is sent again (SPEC L3, L5, W1, L10). Cancelling the task
        running this detaches, then raises CancelledError. Detaching (either
        way) lets go of the sessions that owe the server nothing; those still
        owing a reply or run report stay held (in `held_file` too), for the
        next start to name and send again — unless `resumable` is off.
        """
        serving = self.serving(handler)
        failures = 0
        try:
            while True:
                if until is not None and until.is_set():
                    serving.finish(keep_owed=self.resumable)
                    return Ended.detached()
                try:
                    linked = await self.connect()
                except ConnectError as error:
                    if error.final:
                        serving.finish(keep_owed=self.resumable)
                        return Ended.refused(str(error))
                    warn(self._log, "cannot link; trying again", error=str(error))
                else:
                    failures = 0
                    if self.on_link is not None:
                        self.on_link(linked.welcome)
                    ended = await serving.drive(linked.socket, self.keeper, until, self.resumable)
                    if is_final(ended):
                        return ended
                    warn(self._log, "link ended; linking again", ended=describe_ended(ended))
                if await _pause(backoff(failures), until):
                    continue
                failures += 1
        except asyncio.CancelledError:
            # Cancelled between links (a link being served detached already):
            # what is still owed stays held for the next start.
            serving.finish(keep_owed=self.resumable)
            raise
        finally:
            serving.close("the connector stopped serving")
            await serving.settle()

    def serving(self, handler: Handler | Any) -> Serving:
        """A Serving for `handler` with this connector's held file and bounds."""
        return Serving(handler, held_file=self.held_file, log=self._log, silence=self.silence_timeout)

    async def _welcome(self, socket: LinkSocket) -> Welcome:
        """The first message after `hello`: `welcome`, or why not."""
        import json

        read = await socket.read(self.connect_timeout)
        if read.kind == "silent":
            raise ConnectError.no_welcome(f"no answer to hello within {self.connect_timeout:g} s")
        if read.kind == "end":
            ended = read.ended
            closed = f"closed {ended.code} ({ended.reason})" if ended and ended.kind == "closed" else "closed"
            raise ConnectError.no_welcome(closed)
        try:
            answer = json.loads(read.text)
        except ValueError as error:
            raise ConnectError.no_welcome(f"unreadable answer: {error}") from error
        if isinstance(answer, dict) and answer.get("type") == "welcome":
            capabilities = answer.get("capabilities")
            return Welcome(str(answer.get("machine", "")), capabilities if isinstance(capabilities, dict) else {})
        if isinstance(answer, dict) and answer.get("type") == "refusal":
            raise ConnectError.hello(str(answer.get("code")), str(answer.get("message")))
        raise ConnectError.no_welcome(f"got {read.text[:200]}")


class Linked:
    """An open link, welcomed; `serve` runs it."""

    def __init__(self, socket: LinkSocket, welcome: Welcome, connector: Connector) -> None:
        self.socket = socket
        # What the server's `welcome` said.
        self.welcome = welcome
        self._connector = connector

    async def serve(self, handler: Handler | Any, *, until: asyncio.Event | None = None) -> Ended:
        """Serves `handler` on this one link until the server closes it or
        `until` is set (then the machine sends `detach`). Turns still running
        when the link ends are cancelled; `Connector.run` instead links again
        and resumes."""
        serving = self._connector.serving(handler)
        try:
            return await serving.drive(self.socket, self._connector.keeper, until, False)
        finally:
            serving.finish(keep_owed=False)
            serving.close("the link has ended")
            await serving.settle()


async def _pause(seconds: float, until: asyncio.Event | None) -> bool:
    """Sleeps `seconds`; True (at once) when `until` is set first."""
    if until is None:
        await asyncio.sleep(seconds)
        return False
    try:
        await asyncio.wait_for(until.wait(), seconds)
        return True
    except TimeoutError:
        return False
