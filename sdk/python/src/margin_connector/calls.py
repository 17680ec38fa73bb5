"""Tool calls waiting for their results, matched by call id.

A call stays waiting across a resumable drop: once its frame went out it is
named in the next `resume`, and what the server sends after `resumed` — its
result, or `interrupted`, `result_not_kept` — settles it (SPEC W1);
`unknown_call` to a call the `resume` named means it never reached the
server, so it never ran: it is sent again. Call ids are `c1`, `c2`, … for this machine's life.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from dataclasses import dataclass
from typing import Any

from .errors import ToolError
from .log import debug
from .outbox import Outbox


@dataclass
class _InFlight:
    session: str
    turn: str
    # Whether its frame went out on a link: only then can the server have it,
    # and only then is it named in `resume` (one still queued goes out after
    # the `resume`, and gets its result then).
    written: bool
    result: asyncio.Future[Any]
    # The `tool-call` itself, to send again when the server never recorded it.
    message: dict[str, Any]
    # Whether a `resume` named it since it was last written: only then does
    # `unknown_call` mean it never reached the server.
    named: bool = False


class Calls:
    def __init__(self, outbox: Outbox, log: logging.Logger) -> None:
        self._outbox = outbox
        self._log = log
        self._pending: dict[str, _InFlight] = {}
        self._ids = itertools.count(1)

    async def call(self, session: str, turn: str, name: str, arguments: dict[str, Any]) -> Any:
        """Calls tool `name` for `turn` of `session` and waits for its output."""
        call_id = f"c{next(self._ids)}"
        result: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        message = {"type": "tool-call", "session": session, "turn": turn, "call_id": call_id, "name": name, "arguments": arguments}
        self._pending[call_id] = _InFlight(session, turn, False, result, message)
        try:
            await self._outbox.push(message)
            return await result
        finally:
            # Answered, failed, or the turn was cancelled: nothing waits for it now.
            self._pending.pop(call_id, None)

    def written(self, call_id: str) -> None:
        """Call `call_id`'s frame went out on a link."""
        call = self._pending.get(call_id)
        if call is not None:
            call.written = True

    def waiting(self, session: str, turn: str) -> list[str]:
        """The calls of `turn` in `session` whose frames went out, oldest first."""
        return [cid for cid, call in self._pending.items() if call.written and call.session == session and call.turn == turn]

    def named(self, call_ids: list[str]) -> None:
        """A `resume` named `call_ids`: each gets one answer after `resumed`."""
        for call_id in call_ids:
            call = self._pending.get(call_id)
            if call is not None:
                call.named = True

    def again(self, call_id: str) -> dict[str, Any] | None:
        """The `tool-call` to send again when the server answered `unknown_call`
        to `call_id` named in a `resume`: it never reached the server, so it
        never ran and calling it again is safe (SPEC W1). None when the call
        waits no more or was not named (then the refusal is its answer)."""
        call = self._pending.get(call_id)
        if call is None or call.result.done() or not call.named:
            return None
        call.named = False
        call.written = False
        return call.message

    def settle(self, call_id: str, output: Any = None, error: ToolError | None = None) -> None:
        """The server answered `call_id`: its output, or `error`."""
        call = self._pending.pop(call_id, None)
        if call is None or call.result.done():
            debug(self._log, "a result for no call in flight ignored", call_id=call_id)
            return
        if error is not None:
            call.result.set_exception(error)
        else:
            call.result.set_result(output)

    def fail_turn(self, session: str, turn: str, error: ToolError) -> None:
        """Fails the calls of `turn` in `session` (stopped or superseded)."""
        self._fail(lambda call: call.session == session and call.turn == turn, error)

    def fail_session(self, session: str, error: ToolError) -> None:
        self._fail(lambda call: call.session == session, error)

    def fail_all(self, error: ToolError) -> None:
        """Fails every call in flight: its result, if any, went with the link."""
        self._fail(lambda call: True, error)

    def _fail(self, which: Any, error: ToolError) -> None:
        for call_id, call in list(self._pending.items()):
            if which(call):
                del self._pending[call_id]
                if not call.result.done():
                    call.result.set_exception(error)
