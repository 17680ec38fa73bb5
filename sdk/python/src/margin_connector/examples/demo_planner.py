"""The demo Planner on the Python SDK, as server/src/demo.rs is on the Rust
one and examples/demo-planner.ts on the TypeScript one: each turn reports a
run, reads the document, opens a decision card beside every open question
(open_questions.py), keeps a three-step plan it marks as it goes, and replies
with what it did. No model.

  margin machine pair ACCOUNT NAME --credential-file FILE
  python -m margin_connector.examples.demo_planner --server http://127.0.0.1:7070 --credential FILE [--no-resume]

The credential file is read at each connect and renewed by the link (mode
0600, SPEC L8); the sessions it holds are kept beside it (laptop.credential →
laptop.sessions.json), so a restarted demo resumes them (SPEC L3, L10).
Ctrl-C detaches.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import sys
from pathlib import Path

from margin_connector import ConnectError, Connector, Handler, Turn, describe_ended, is_refusal
from margin_connector.examples.open_questions import open_questions
from margin_connector.wire import PlanStep, StepStatus

LOG = logging.getLogger("margin_connector.demo")


class Checklist:
    """The demo's durable plan (SPEC U1–U3): three steps it marks as it goes.

    Progress reporting only; a refused update is logged and ends the
    checklist for the turn: the plan is never the work.
    """

    def __init__(self, turn: Turn) -> None:
        self._turn = turn
        self._revision = turn.plan["revision"] if turn.plan else 0
        self._on = True

    async def mark(self, progress: str | int) -> None:
        """`reading`, `capturing`, or the number of questions asked."""
        if not self._on:
            return
        statuses: tuple[StepStatus, StepStatus, StepStatus]
        if progress == "reading":
            statuses = ("in_progress", "pending", "pending")
        elif progress == "capturing":
            statuses = ("completed", "in_progress", "pending")
        elif progress == 0:
            statuses = ("completed", "completed", "completed")
        else:
            statuses = ("completed", "completed", "pending")
        read, capture, answers = statuses
        steps: list[PlanStep] = [
            {"id": "read", "description": "Read the plan", "status": read},
            {"id": "capture", "description": "Open a decision for each open question", "status": capture},
            # No count here: people answer after the turn, so a count would go
            # stale; the editor shows the cards' own states.
            {"id": "answers", "description": "People answer the decisions beside their paragraphs", "status": answers},
        ]
        try:
            updated = await self._turn.update_plan(
                {"expected_revision": self._revision, "explanation": "Reviewing the plan for open questions", "steps": steps}
            )
            self._revision = updated["plan"]["revision"]
        except Exception as error:
            if not is_refusal(error):
                raise
            LOG.warning("the demo's plan was not updated: %s", error)
            self._on = False


class DemoPlanner(Handler):
    async def turn(self, turn: Turn) -> str:
        run = f"review-{turn.id}"
        name = "Review the plan for open questions"
        plan = Checklist(turn)
        await plan.mark("reading")
        await turn.run(run, name, "running")
        read = await turn.read_document()
        cards = open_questions(read["outline"])
        if not cards:
            await turn.run(run, name, "completed")
            await plan.mark(0)
            return "I read the plan and found no open questions: nothing ends in a question mark or is marked TBD."
        await plan.mark("capturing")
        found = len(cards)
        try:
            opened = await turn.open_decisions({"revision": read["revision"], "cards": cards})
        except Exception:
            await turn.run(run, name, "failed")
            raise
        await turn.run(run, name, "completed")
        await plan.mark(found)
        return f"I read the plan and found {found} open question{'' if found == 1 else 's'}: {opened['summary']}."


def held_file_beside(credential: str) -> str:
    """`laptop.credential` → `laptop.sessions.json`, beside it."""
    path = Path(credential)
    return str(path.with_name(f"{path.stem}.sessions.json"))


async def serve(server: str, credential: str, resumable: bool) -> int:
    connector = Connector(
        server,
        credential_file=credential,
        held_file=held_file_beside(credential),
        resumable=resumable,
        planning=True,
        on_link=lambda welcome: print(f"demo Planner linked as machine {welcome.machine}", file=sys.stderr, flush=True),
    )
    await connector.check_credential()
    until = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, until.set)
    ended = await connector.run(DemoPlanner(), until=until)
    if ended.kind != "detached":
        print(f"the demo Planner stopped linking: {describe_ended(ended)}", file=sys.stderr)
        return 1
    return 0


def main() -> None:
    parser = argparse.ArgumentParser(prog="demo-planner", description="The demo Planner: no model.")
    parser.add_argument("--server", default=os.environ.get("MARGIN_SERVER", "http://127.0.0.1:7070"))
    parser.add_argument("--credential", required=True, help="the paired machine's credential file")
    parser.add_argument("--no-resume", action="store_true", help="do not ask for resumable sessions")
    args = parser.parse_args()
    try:
        sys.exit(asyncio.run(serve(args.server, args.credential, not args.no_resume)))
    except ConnectError as error:
        print(f"demo-planner: {error}", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
