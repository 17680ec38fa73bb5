"""Serving a Handler on links: the one driver of a machine's work.

It reads each link's messages in order and carries them out — heartbeats,
turns, tool results, answers, Stops, `resumed` — and keeps, across links,
what a `resume` must name and what the server has not acknowledged yet
(SPEC L3, L5, W1, L10):

- a turn runs in its own task; its calls in flight wait through a resumable
  drop and are named in the next `resume`;
- its reply is kept (in the held file too, before it is sent) until
  `reply-received`, a refusal naming it, an `invoke` of a later turn of the
  session, or the session ending; meanwhile `resume` names its turn, and the
  reply is sent again after `resumed`;
- the latest report of each run is kept the same way until `run-received`
  answers that very report (same attempt and status) or a refusal names the
  run, and sent again after `resumed`;
- `session_busy` refusing either asks for it again after a second.

Nothing kept is sent twice on one link: a kept reply or report is sent again
after `resumed` only when it was last written on an earlier link (or read
from the held file).
"""

from __future__ import annotations

import asyncio
import inspect
import json
import logging
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from .calls import Calls
from .credential import CredentialKeeper, plausible_credential
from .ended import Ended, is_final
from .errors import ToolError
from .handler import Answer, Handler, Question, Services, SessionHandle, Turn
from .held import Held, KeptRun
from .linksocket import LinkSocket
from .log import debug, warn
from .outbox import Outbox, encode
from .protocol import MAX_HELD_CALLS, MAX_HELD_QUESTIONS, MAX_RESUME_SESSIONS
from .wire import SERVER_MESSAGE_FIELDS

# How long a stopped turn may take to settle before the Stop goes on without it.
STOP_GRACE = 5.0
# Answers remembered as delivered, so one sent again is not delivered twice.
MAX_DELIVERED = 4096
# Longest reply the SDK writes for a turn that failed (the server takes 4000 bytes).
MAX_FAILURE_REPLY = 1000
# How long to wait before sending again what the server refused as `session_busy`.
BUSY_PAUSE = 1.0
# How long to wait for a late end to a link cut on purpose.
DETACH_WAIT = 2.0

_JSON_TYPES: dict[str, tuple[type, ...]] = {
    "string": (str,),
    "integer": (int,),
    "number": (int, float),
    "boolean": (bool,),
    "array": (list,),
    "object": (dict,),
    "null": (type(None),),
}


@dataclass
class _Running:
    """A turn the SDK runs: named in `resume` while it runs."""

    id: str
    turn: Turn
    task: asyncio.Task[None] | None = None


@dataclass
class _Link:
    """The link being served: its number and socket."""

    number: int
    socket: LinkSocket
    # What was written on it of what is kept: ("reply", session, turn) and
    # ("run", session, run, attempt, status).
    written: set[tuple[Any, ...]] = field(default_factory=set)


class Serving:
    """One machine's work across the links `drive` serves, in order."""

    def __init__(
        self,
        handler: Handler | Any,
        *,
        held_file: str | None,
        log: logging.Logger,
        silence: float,
    ) -> None:
        self._handler = handler
        self._log = log
        self._silence = silence
        self._outbox = Outbox()
        self._calls = Calls(self._outbox, log)
        self._held = Held(held_file, log)
        self._services = Services(self._calls, self._outbox, self._held, log, self._report)
        # Each session's turn the SDK runs.
        self._turns: dict[str, _Running] = {}
        self._delivered: OrderedDict[str, None] = OrderedDict()
        self._tasks: set[asyncio.Task[Any]] = set()
        self._links = 0
        self._link: _Link | None = None
        # What was written on a link, by link number (kept ones only).
        self._written: dict[tuple[Any, ...], int] = {}

    async def drive(
        self,
        socket: LinkSocket,
        keeper: CredentialKeeper,
        until: asyncio.Event | None,
        resume: bool,
    ) -> Ended:
        """Runs one link until it ends or `until` is set (then it detaches).

        With `resume`, the first message is `resume`, and a drop keeps running
        turns, their calls in flight and what is owed for the next link.
        Without it, or when the end is final, everything ends with the link.
        """
        self._links += 1
        link = _Link(self._links, socket)
        self._link = link
        try:
            if resume:
                socket.send(encode(self._resume_message()))
            self._outbox.open(lambda message, text: self._write(link, message, text))
            ended = await self._serve(link, keeper, until)
            # Whatever ended the link, its socket's tasks end with it.
            await socket.terminate()
        except asyncio.CancelledError:
            # The machine is leaving: say so, so the server leases the sessions.
            self._link = None
            self._outbox.pause()
            socket.send(encode({"type": "detach"}))
            await socket.close(1000)
            self.finish(keep_owed=resume)
            raise
        self._link = None
        self._outbox.pause()
        # Nothing will be resumed: a result that was on its way is lost with the link.
        if not resume or is_final(ended):
            self.finish(keep_owed=resume)
        return ended

    async def _serve(self, link: _Link, keeper: CredentialKeeper, until: asyncio.Event | None) -> Ended:
        socket = link.socket
        while True:
            read = await socket.read(self._silence, until)
            if read.kind == "aborted":
                socket.send(encode({"type": "detach"}))
                await socket.close(1000)
                return Ended.detached()
            if read.kind == "silent":
                # The server sends a heartbeat every 15 s: this long without
                # one, the connection is gone even if no close says so.
                await socket.terminate()
                return Ended.dropped(f"no message from the server in {self._silence:g} s")
            if read.kind == "end":
                assert read.ended is not None
                return read.ended
            message = parse(read.text)
            if isinstance(message, str):
                warn(self._log, "unreadable server message ignored", why=message, frame=read.text[:200])
                continue
            if message["type"] == "credential":
                await self._keep_credential(keeper, message["credential"])
                continue
            try:
                answer = self._dispatch(message, link)
            except Exception as error:  # noqa: BLE001 - one odd message never ends the link
                warn(self._log, "a server message could not be handled", type=message["type"], error=repr(error))
                continue
            if answer is not None:
                socket.send(encode(answer))

    def finish(self, keep_owed: bool = False) -> None:
        """Ends everything: running turns, calls in flight, and what a resume
        would name — but with `keep_owed` (a resumable machine), the sessions
        that still owe the server a reply or run report stay held, so a later
        `resume` (after a restart, with a held file) names them and sends
        again what they owe (SPEC L10)."""
        gone = ToolError.link_closed()
        for session, running in list(self._turns.items()):
            self._abort(session, running, gone)
        self._turns.clear()
        self._calls.fail_all(gone)
        if keep_owed:
            self._held.forget_settled()
        else:
            self._held.forget_all()
        self._written.clear()
        self._outbox.clear()

    def close(self, why: str) -> None:
        """No link will come: every send from now on fails."""
        self._outbox.close(why)

    async def settle(self) -> None:
        """Waits a moment for the handler callbacks still running."""
        tasks = [task for task in self._tasks if not task.done()]
        if tasks:
            await asyncio.wait(tasks, timeout=DETACH_WAIT)

    @property
    def held(self) -> Held:
        return self._held

    # --- what the server sends -------------------------------------------

    def _dispatch(self, message: dict[str, Any], link: _Link) -> dict[str, Any] | None:
        """Handles one server message; returns an answer to send at once."""
        kind = message["type"]
        if kind == "heartbeat":
            return {"type": "heartbeat-ack", "seq": message["seq"]}
        if kind == "invoke":
            self._invoke(message)
        elif kind == "tool-result":
            error = message.get("error")
            output = message.get("output")
            if isinstance(error, dict):
                self._calls.settle(message["call_id"], error=ToolError.refused(error))
            elif output is None:
                self._calls.settle(message["call_id"], error=ToolError.output("a result with neither output nor error"))
            else:
                self._calls.settle(message["call_id"], output=output)
        elif kind == "input-result":
            session, request = message["session"], message["request"]
            self._held.settle_question(session, request)
            # Sent again after a `resumed` if the acknowledgement was lost:
            # acknowledged again, delivered once.
            if request not in self._delivered:
                self._remember(request)
                answer = Answer(self._session(session), request, message["answer"], message["answered_by"])
                self._spawn("answered", answer)
            return {"type": "input-received", "session": session, "request": request}
        elif kind == "stop":
            self._stop(message["session"])
        elif kind == "stop-withdrawn":
            self._spawn("stop_withdrawn", self._session(message["session"]))
        elif kind == "resumed":
            self._resumed(message, link)
        elif kind == "refusal":
            self._refusal(message)
        elif kind == "reply-received":
            if self._held.settle_reply(message["session"], message["turn"]):
                debug(self._log, "reply acknowledged", session=message["session"], turn=message["turn"])
        elif kind == "run-received":
            self._held.settle_run(message["session"], message["run"], message["attempt"], message["status"])
        elif kind == "welcome":
            warn(self._log, "a second welcome ignored")
        else:
            # A newer server's message: nothing this SDK can do with it.
            warn(self._log, "a server message of an unknown type ignored", type=kind)
        return None

    def _invoke(self, message: dict[str, Any]) -> None:
        """Starts a turn; an earlier turn of the session still running is
        aborted and an earlier turn's reply settled. An invoke of the turn the
        SDK runs starts nothing, and one of a turn whose reply is kept sends
        the reply again (SPEC L10): the handler sees each turn once."""
        session, turn_id = message["session"], message["turn"]
        running = self._turns.get(session)
        if running is not None and running.id == turn_id:
            # The same turn again (sent again after a resume that did not reach
            # the server, say): it runs already.
            debug(self._log, "an invoke of a turn already running ignored", session=session, turn=turn_id)
            return
        kept = self._held.reply(session)
        if kept is not None and kept[0] == turn_id:
            # The server asks for a turn this machine has replied to: the reply
            # did not reach it. It goes again; the turn does not run again.
            debug(self._log, "an invoke of a turn already replied to: the reply goes again", session=session, turn=turn_id)
            self._push_kept({"type": "reply", "session": session, "turn": turn_id, "text": kept[1]})
            return
        # A later turn settles the earlier reply: turns run one at a time.
        self._held.settle_reply(session)
        self._held.hold_session(session)
        if running is not None:
            self._abort(session, running, ToolError.aborted(f"turn {running.id} was superseded by turn {turn_id}"))
        turn = Turn(
            session=self._session(session),
            turn_id=turn_id,
            document=message["document"],
            messages=message["messages"],
            repair=[item for item in message.get("repair") or [] if isinstance(item, str)],
            plan=message.get("plan"),
            services=self._services,
        )
        running = _Running(turn_id, turn)
        self._turns[session] = running
        running.task = self._start(self._run_turn(session, running), f"turn {session} {turn_id}")

    async def _run_turn(self, session: str, running: _Running) -> None:
        """Runs a turn and sends its reply, kept until acknowledged. A turn that
        fails still replies, so the people waiting in Chat learn why. A turn
        stopped or superseded sends nothing."""
        turn = running.turn
        try:
            text = await _call(self._handler.turn, turn)
            if not isinstance(text, str):
                raise TypeError(f"the turn returned {type(text).__name__}, not the reply's text")
        except asyncio.CancelledError:
            if turn.aborted:
                return
            raise
        except Exception as error:  # noqa: BLE001 - a Planner's failure is told in Chat
            if turn.aborted:
                return
            if isinstance(error, ToolError) and error.kind == "link-closed":
                text = "The Planner lost its link during this turn and did not finish it."
            else:
                warn(self._log, "turn failed", session=session, turn=turn.id, error=repr(error))
                text = f"The Planner could not finish this turn: {error}"[:MAX_FAILURE_REPLY]
        if turn.aborted or self._turns.get(session) is not running:
            return
        # Kept (on disk too) before it is sent: from now on `resume` names the
        # turn by its kept reply, until the server acknowledges it (SPEC L10).
        del self._turns[session]
        self._held.keep_reply(session, turn.id, text)
        try:
            await self._outbox.push({"type": "reply", "session": session, "turn": turn.id, "text": text})
        except ToolError as error:
            if error.kind == "too-large":
                self._held.settle_reply(session, turn.id)
            warn(self._log, "the reply was not sent", session=session, turn=turn.id, error=str(error))

    async def _report(self, session: str, run: str, name: str, status: str, attempt: int | None) -> None:
        """Queues a run report, kept until the server acknowledges it (SPEC L10)."""
        message: dict[str, Any] = {"type": "run", "session": session, "run": run, "name": name, "status": status}
        if attempt is not None:
            message["attempt"] = attempt
        encode(message)  # a report too large for a frame is refused before it is kept
        self._held.keep_run(session, KeptRun(run, name, status, 1 if attempt is None else attempt))
        await self._outbox.push(message)

    def _stop(self, session: str) -> None:
        """A Stop: the session's turn is cancelled and given a moment to settle,
        the handler is told, then `stopped` is sent and the session forgotten."""
        running = self._turns.pop(session, None)
        handle = self._session(session)

        async def stop() -> None:
            if running is not None:
                self._abort(session, running, ToolError.aborted("the turn was stopped"))
                if running.task is not None:
                    await asyncio.wait({running.task}, timeout=STOP_GRACE)
            try:
                await _call(getattr(self._handler, "stop", None), handle)
            except Exception as error:  # noqa: BLE001 - the Stop goes on
                warn(self._log, "the stop handler failed", session=session, error=repr(error))
            try:
                await self._outbox.push({"type": "stopped", "session": session})
                self._held.forget_session(session)
            except ToolError:
                # The link is gone for good; the server ends the session itself.
                pass

        self._start(stop(), f"stop {session}")

    def _resumed(self, message: dict[str, Any], link: _Link) -> None:
        """What carries on after a drop: ended sessions are dropped with their
        turns, withdrawn questions settled, and what is still owed sent again."""
        for session in message["ended"]:
            if not isinstance(session, str):
                continue
            ended = ToolError.link_closed(f"session {session} ended while the link was down")
            running = self._turns.pop(session, None)
            if running is not None:
                self._abort(session, running, ended)
            self._calls.fail_session(session, ended)
            self._held.forget_session(session)
            self._spawn("session_ended", self._session(session))
        for carried in message["sessions"]:
            if not isinstance(carried, dict) or not isinstance(carried.get("session"), str):
                continue
            for request in carried.get("withdrawn") or []:
                if isinstance(request, str):
                    self._held.settle_question(carried["session"], request)
                    self._spawn("withdrawn", Question(self._session(carried["session"]), request))
        # Run reports first, then replies: the order a turn sent them in.
        for session in self._held.sessions():
            for report in self._held.runs(session):
                self._send_again(link, self._run_message(session, report))
        for session in self._held.sessions():
            kept = self._held.reply(session)
            if kept is not None:
                self._send_again(link, {"type": "reply", "session": session, "turn": kept[0], "text": kept[1]})

    def _refusal(self, message: dict[str, Any]) -> None:
        code, why = message["code"], message["message"]
        call_id, session = message.get("call_id"), message.get("session")
        if isinstance(call_id, str):
            again = self._calls.again(call_id) if code == "unknown_call" else None
            if again is not None:
                # Named in `resume`, never recorded: it died with the old link
                # before reaching the server. It never ran; send it again.
                debug(self._log, "a call the server never recorded sent again", call_id=call_id)
                self._push_kept(again)
                return
            refusal = {"code": code, "message": why, "read_again": False, "retry": False}
            self._calls.settle(call_id, error=ToolError.refused(refusal))
        elif isinstance(session, str) and isinstance(message.get("turn"), str):
            turn = message["turn"]
            if code == "session_busy":
                self._later(lambda: self._busy_reply(session, turn))
            elif self._held.settle_reply(session, turn):
                warn(self._log, "the server refused the reply", session=session, turn=turn, code=code, message=why)
        elif isinstance(session, str) and isinstance(message.get("run"), str):
            run = message["run"]
            if code == "session_busy":
                self._later(lambda: self._busy_run(session, run))
            else:
                self._held.settle_run(session, run)
                warn(self._log, "the server refused a run report", session=session, run=run, code=code, message=why)
        else:
            warn(self._log, "the server refused a message", code=code, message=why)

    def _busy_reply(self, session: str, turn: str) -> None:
        kept = self._held.reply(session)
        if kept is not None and kept[0] == turn:
            self._push_kept({"type": "reply", "session": session, "turn": turn, "text": kept[1]})

    def _busy_run(self, session: str, run: str) -> None:
        for report in self._held.runs(session):
            if report.run == run:
                self._push_kept(self._run_message(session, report))

    # --- what the machine sends -------------------------------------------

    def _write(self, link: _Link, message: dict[str, Any], text: str) -> bool:
        """Writes `message` on `link`; notes what a `resume` or resend needs."""
        if not link.socket.send(text):
            return False
        kind = message["type"]
        if kind == "tool-call":
            self._calls.written(message["call_id"])
        elif kind in ("reply", "run"):
            self._written[_kept_key(message)] = link.number
        return True

    def _send_again(self, link: _Link, message: dict[str, Any]) -> None:
        """Sends a kept message after `resumed`, unless this link already carried it."""
        if self._written.get(_kept_key(message)) == link.number:
            return
        self._write(link, message, encode(message))

    def _push_kept(self, message: dict[str, Any]) -> None:
        self._start(self._push_quietly(message), "send again")

    async def _push_quietly(self, message: dict[str, Any]) -> None:
        try:
            await self._outbox.push(message)
        except ToolError:
            pass

    def _resume_message(self) -> dict[str, Any]:
        """The `resume` naming what this machine holds: each session's questions,
        the turn it runs or whose reply is kept, and that turn's calls waiting."""
        held = self._held.entries()
        if len(held) > MAX_RESUME_SESSIONS:
            warn(self._log, "more sessions held than a resume may name; the rest end", held=len(held))
        sessions = []
        for session, questions in held[:MAX_RESUME_SESSIONS]:
            entry: dict[str, Any] = {"session": session, "questions": questions[:MAX_HELD_QUESTIONS]}
            running = self._turns.get(session)
            kept = self._held.reply(session)
            if running is not None:
                # A running turn is named even over a kept reply: its invoke
                # settled the earlier reply anyway.
                entry["turn"] = running.id
                entry["calls"] = self._calls.waiting(session, running.id)[:MAX_HELD_CALLS]
                self._calls.named(entry["calls"])
            elif kept is not None:
                entry["turn"] = kept[0]
                entry["calls"] = []
            sessions.append(entry)
        return {"type": "resume", "sessions": sessions}

    # --- helpers ---------------------------------------------------------

    def _abort(self, session: str, running: _Running, why: ToolError) -> None:
        """Aborts a turn of `session`: its task is cancelled and its calls fail with `why`."""
        running.turn.abort(why)
        if running.task is not None:
            running.task.cancel()
        self._calls.fail_turn(session, running.id, why)

    async def _keep_credential(self, keeper: CredentialKeeper, credential: str) -> None:
        """Keeps a fresh credential as the newest, unless it could not be one of ours."""
        if not plausible_credential(credential):
            warn(self._log, "a malformed credential from the server ignored")
            return
        await keeper.replace(credential)

    def _session(self, session: str) -> SessionHandle:
        return SessionHandle(session, self._services)

    def _run_message(self, session: str, report: KeptRun) -> dict[str, Any]:
        return {
            "type": "run",
            "session": session,
            "run": report.run,
            "name": report.name,
            "status": report.status,
            "attempt": report.attempt,
        }

    def _remember(self, request: str) -> None:
        self._delivered[request] = None
        while len(self._delivered) > MAX_DELIVERED:
            self._delivered.popitem(last=False)

    def _spawn(self, method: str, argument: Any) -> None:
        """Runs a handler callback on its own; a failure is logged, never raised into the link."""
        callback = getattr(self._handler, method, None)

        async def run() -> None:
            try:
                await _call(callback, argument)
            except Exception as error:  # noqa: BLE001 - the link carries on
                warn(self._log, f"the {method} handler failed", error=repr(error))

        self._start(run(), method)

    def _start(self, coroutine: Any, name: str) -> asyncio.Task[Any]:
        task = asyncio.create_task(coroutine, name=name)
        # Held until done: the loop keeps only weak references to tasks.
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    def _later(self, callback: Callable[[], None]) -> None:
        async def later() -> None:
            await asyncio.sleep(BUSY_PAUSE)
            callback()

        self._start(later(), "busy")


def _kept_key(message: dict[str, Any]) -> tuple[Any, ...]:
    if message["type"] == "reply":
        return ("reply", message["session"], message["turn"])
    return ("run", message["session"], message["run"], message.get("attempt") or 1, message["status"])


async def _call(callback: Any, argument: Any) -> Any:
    """Calls a handler method, sync or async; a missing one does nothing."""
    if callback is None:
        return None
    result = callback(argument)
    if inspect.isawaitable(result):
        result = await result
    return result


def parse(text: str) -> dict[str, Any] | str:
    """A server message, or why `text` is not one: not JSON, no string
    `type`, or a known type whose fields are missing or mistyped."""
    try:
        message = json.loads(text)
    except (ValueError, RecursionError) as error:
        return f"not JSON: {error}"
    if not isinstance(message, dict) or not isinstance(message.get("type"), str):
        return "not a message with a type"
    fields = SERVER_MESSAGE_FIELDS.get(message["type"])
    if fields is None:
        return message
    for name, (types, required) in fields.items():
        if name not in message:
            if required:
                return f"{message['type']} without {name}"
            continue
        if "any" in types:
            continue
        value = message[name]
        allowed = tuple(t for kind in types for t in _JSON_TYPES.get(kind, ()))
        # JSON's true is no integer, though Python's is.
        if isinstance(value, bool) and "boolean" not in types:
            return f"{message['type']} with a mistyped {name}"
        if not isinstance(value, allowed):
            return f"{message['type']} with a mistyped {name}"
    return message




