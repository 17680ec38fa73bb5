"""What a Planner writes and gets.

The Handler the SDK calls, and the handles it passes: a Turn with typed tool
calls, a SessionHandle for run reports, an Answer to a question it asked.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

from .errors import ToolError
from .log import warn
from .wire import (
    AnswerBody,
    ChatMessageView,
    EditPlanInput,
    EditPlanOutput,
    OpenDecisionInput,
    OpenDecisionsInput,
    OpenDecisionsOutput,
    PlanView,
    ReadDocumentOutput,
    RunStatus,
    UpdatePlanInput,
    UpdatePlanOutput,
)

if TYPE_CHECKING:
    from .calls import Calls
    from .held import Held
    from .outbox import Outbox

# How many times a tool call the server could not decide is tried.
TRIES = 4
# The pause before the first retry, in seconds; it doubles after each.
FIRST_RETRY = 0.25


class Handler:
    """A Planner: the SDK calls it for each turn, answer and Stop.

    Subclass it and write `turn`; the other methods do nothing unless you
    write them. Any object with these methods (sync or async) serves too.
    """

    async def turn(self, turn: Turn) -> str:
        """Does a turn's work and returns the reply for Chat.

        Questions belong in decisions (`turn.open_decisions`), not in the
        reply (SPEC T2): a reply that asks gets a repair turn, whose
        `turn.repair` lists them. A turn that raises still replies, saying
        why. A Stop cancels the task running it.
        """
        raise NotImplementedError("a Planner's Handler must write turn()")

    async def answered(self, answer: Answer) -> None:
        """A member answered a question the session asked with `turn.ask`. Delivered once."""

    async def stop(self, session: SessionHandle) -> None:
        """A member pressed Stop: stop the session's work. The running turn (if
        any) is already cancelled and has settled or had 5 s to; `stopped` is
        sent once this returns."""

    async def stop_withdrawn(self, session: SessionHandle) -> None:
        """A member pressed Resume before this machine confirmed the Stop (SPEC L4)."""

    async def withdrawn(self, question: Question) -> None:
        """After a drop, the server says a question this machine held no longer
        waits (people discarded it, SPEC L3): no answer will come."""

    async def session_ended(self, session: SessionHandle) -> None:
        """After a drop, the server says a session this machine held has ended:
        its turn is cancelled and its questions will get no answer."""


@dataclass(frozen=True)
class Services:
    """What a turn or session handle needs from the link that serves it."""

    calls: Calls
    outbox: Outbox
    held: Held
    log: logging.Logger
    # Sends a run report and keeps it until the server acknowledges it (SPEC L10).
    report: Any


class SessionHandle:
    """A session, for what outlives a turn: run reports."""

    def __init__(self, session_id: str, services: Services) -> None:
        # The session's id, as the server named it.
        self.id = session_id
        self._services = services

    async def run(self, run: str, name: str, status: RunStatus, attempt: int | None = None) -> None:
        """Reports a run of this session and its status now (SPEC R1).

        `attempt` (from 1; none means 1) higher than before starts a new
        attempt, and a late report about an older one never repaints the run
        (SPEC R2, T4). Returns once the report is queued for the link; it is
        kept and sent again after a drop until the server acknowledges it
        (SPEC L10). A report the server refuses (`run_capacity`,
        `superseded_attempt`) is logged.
        """
        await self._services.report(self.id, run, name, status, attempt)

    def __repr__(self) -> str:
        return f"SessionHandle({self.id!r})"


@dataclass(frozen=True)
class Question:
    """A question the session asked that will get no answer."""

    session: SessionHandle
    request: str


@dataclass(frozen=True)
class Answer:
    """A member's answer to a question the session asked."""

    # The session that asked.
    session: SessionHandle
    # The question: the card id `ask` returned.
    request: str
    answer: AnswerBody
    answered_by: str


class Turn:
    """A turn: what started it, and the document tools for its session."""

    def __init__(
        self,
        *,
        session: SessionHandle,
        turn_id: str,
        document: str,
        messages: list[ChatMessageView],
        repair: list[str],
        plan: PlanView | None,
        services: Services,
    ) -> None:
        self.session = session
        # This turn's id (`t1`, `t2`, … in each session).
        self.id = turn_id
        # The document the turn is about.
        self.document = document
        # The Chat lines that started it, in order (steering included).
        self.messages = messages
        # A repair turn's questions: the last reply asked them in prose; open
        # them as decisions with stable keys and reply without asking.
        self.repair = repair
        # The session's plan, when the Planner declared `planning` and has
        # made one (SPEC U6): its own earlier words, as data.
        self.plan = plan
        self._services = services
        self._aborted: ToolError | None = None

    @property
    def aborted(self) -> bool:
        """Whether the turn was stopped or superseded: nothing more is sent for it."""
        return self._aborted is not None

    def abort(self, why: ToolError) -> None:
        self._aborted = why

    async def read_document(self) -> ReadDocumentOutput:
        """`read_document`: the outline at the current revision."""
        return cast(ReadDocumentOutput, await self.call("read_document", {}))

    async def edit_plan(self, input: EditPlanInput) -> EditPlanOutput:  # noqa: A002 - the tool's word
        """`edit_plan`: edits addressed at the current revision."""
        return cast(EditPlanOutput, await self.call("edit_plan", input))

    async def open_decisions(self, input: OpenDecisionsInput) -> OpenDecisionsOutput:  # noqa: A002
        """`open_decisions`: a batch of cards, atomic (SPEC D1)."""
        return cast(OpenDecisionsOutput, await self.call("open_decisions", input))

    async def open_decision(self, input: OpenDecisionInput) -> OpenDecisionsOutput:  # noqa: A002
        """`open_decision`: one card at the current revision."""
        return cast(OpenDecisionsOutput, await self.call("open_decision", input))

    async def ask(self, input: OpenDecisionInput) -> OpenDecisionsOutput:  # noqa: A002
        """`ask`: a question that waits on a member. The answer arrives later
        through `Handler.answered`, naming the card; until then the question
        is named in every `resume` (SPEC L3, L5)."""
        asked = cast(OpenDecisionsOutput, await self.call("ask", input))
        for capture in asked.get("captures", []):
            if isinstance(capture, dict) and capture.get("captured") and isinstance(capture.get("card_id"), str):
                self._services.held.hold_question(self.session.id, capture["card_id"])
        return asked

    async def update_plan(self, input: UpdatePlanInput) -> UpdatePlanOutput:  # noqa: A002
        """`update_plan` (SPEC U2, U3): replaces the session's plan whole."""
        return cast(UpdatePlanOutput, await self.call("update_plan", input))

    async def run(self, run: str, name: str, status: RunStatus, attempt: int | None = None) -> None:
        """Reports a run of the session (see `SessionHandle.run`)."""
        if self._aborted is not None:
            raise self._aborted
        await self.session.run(run, name, status, attempt)

    async def call(self, name: str, input: Any) -> dict[str, Any]:  # noqa: A002
        """Calls tool `name` with `input` and returns its output.

        A refusal marked `retry` (the server could not decide, SPEC L6) is
        tried again after a pause, up to 3 more times, under a new call id;
        every other refusal is the server's decision and raises at once, a
        ToolError of kind `refused`.
        """
        wait = FIRST_RETRY
        tries = 1
        while True:
            if self._aborted is not None:
                raise self._aborted
            try:
                output = await self._services.calls.call(self.session.id, self.id, name, dict(input))
            except ToolError as error:
                retry = error.kind == "refused" and bool(error.refusal and error.refusal.get("retry") is True)
                if not retry or tries >= TRIES:
                    raise
                warn(self._services.log, "the server could not decide; trying again", tool=name, code=error.code)
                await asyncio.sleep(wait)
                wait *= 2
                tries += 1
                continue
            if not isinstance(output, dict):
                raise ToolError.output(f"{name} answered {output!r:.200}, not an object")
            return output

    def __repr__(self) -> str:
        return f"Turn(session={self.session.id!r}, id={self.id!r}, document={self.document!r})"
