"""Replies and run reports are kept until the server acknowledges them (SPEC L10),
against a scripted link server on loopback."""

import asyncio
import json
import tempfile
import unittest
from pathlib import Path

from margin_connector import Connector, Ended, Handler

from .scripted import ScriptedServer, invoke


class Replier(Handler):
    """Each turn reports run `review` running and completed, then replies."""

    def __init__(self) -> None:
        self.turns: list[str] = []
        self.gate: asyncio.Event | None = None

    async def turn(self, turn):
        self.turns.append(turn.id)
        await turn.run("review", "Review", "running")
        if self.gate is not None:
            await self.gate.wait()
        await turn.run("review", "Review", "completed")
        return f"Reviewed {turn.id}."


class L10(unittest.IsolatedAsyncioTestCase):
    async def asyncSetUp(self):
        self.dir = tempfile.TemporaryDirectory()
        self.held = Path(self.dir.name) / "laptop.sessions.json"
        self.server = await ScriptedServer().__aenter__()
        self.tasks = []

    async def asyncTearDown(self):
        for task in self.tasks:
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)
        await self.server.__aexit__(None, None, None)
        self.dir.cleanup()

    def start(self, handler, **options):
        connector = Connector(self.server.url, credential="mgm_test", held_file=self.held, **options)
        task = asyncio.create_task(connector.run(handler))
        self.tasks.append(task)
        return task

    async def first_turn(self, handler):
        """Links, starts turn t1 of s1, reads its two reports and its reply."""
        self.start(handler)
        peer = await self.server.accept()
        await peer.welcome()
        self.assertEqual(peer.resume, {"type": "resume", "sessions": []})
        await peer.send(invoke())
        running = await peer.recv_type("run")
        completed = await peer.recv_type("run")
        reply = await peer.recv_type("reply")
        self.assertEqual((running["status"], completed["status"]), ("running", "completed"))
        self.assertEqual(reply, {"type": "reply", "session": "s1", "turn": "t1", "text": "Reviewed t1."})
        return peer

    async def test_reply_cut_before_its_ack_is_named_in_resume_and_sent_again_after_resumed(self):
        handler = Replier()
        peer = await self.first_turn(handler)
        await peer.send({"type": "run-received", "session": "s1", "run": "review", "attempt": 1, "status": "completed"})
        await peer.send({"type": "heartbeat", "seq": 1})
        await peer.recv_type("heartbeat-ack")
        peer.cut()
        again = await self.server.accept()
        await again.welcome()
        self.assertEqual(
            again.resume, {"type": "resume", "sessions": [{"session": "s1", "questions": [], "turn": "t1", "calls": []}]}
        )
        self.assertEqual(
            await again.recv_type("reply"), {"type": "reply", "session": "s1", "turn": "t1", "text": "Reviewed t1."}
        )
        await again.silent(0.3)
        self.assertEqual(handler.turns, ["t1"])

    async def test_reply_received_settles_the_reply(self):
        peer = await self.first_turn(Replier())
        await peer.send({"type": "reply-received", "session": "s1", "turn": "t1"})
        await peer.send({"type": "run-received", "session": "s1", "run": "review", "attempt": 1, "status": "completed"})
        await peer.send({"type": "heartbeat", "seq": 1})
        await peer.recv_type("heartbeat-ack")
        self.assertEqual(json.loads(self.held.read_text()), {"s1": {"questions": []}})
        peer.cut()
        again = await self.server.accept()
        await again.welcome()
        self.assertEqual(again.resume, {"type": "resume", "sessions": [{"session": "s1", "questions": []}]})
        await again.silent(0.3)

    async def test_run_report_is_sent_again_until_run_received_answers_it(self):
        handler = Replier()
        peer = await self.first_turn(handler)
        await peer.send({"type": "reply-received", "session": "s1", "turn": "t1"})
        # The acknowledgement of the superseded report settles nothing.
        await peer.send({"type": "run-received", "session": "s1", "run": "review", "attempt": 1, "status": "running"})
        await peer.send({"type": "heartbeat", "seq": 1})
        await peer.recv_type("heartbeat-ack")
        peer.cut()
        completed = {"type": "run", "session": "s1", "run": "review", "name": "Review", "status": "completed", "attempt": 1}
        second = await self.server.accept()
        await second.welcome()
        self.assertEqual(await second.recv_type("run"), completed)
        second.cut()
        third = await self.server.accept()
        await third.welcome()
        self.assertEqual(await third.recv_type("run"), completed)
        await third.send({"type": "run-received", "session": "s1", "run": "review", "attempt": 1, "status": "completed"})
        await third.send({"type": "heartbeat", "seq": 2})
        await third.recv_type("heartbeat-ack")
        third.cut()
        fourth = await self.server.accept()
        await fourth.welcome()
        await fourth.silent(0.3)
        self.assertEqual(handler.turns, ["t1"])

    async def test_session_busy_sends_the_reply_again_shortly_and_another_refusal_settles_it(self):
        peer = await self.first_turn(Replier())
        await peer.send({"type": "refusal", "code": "session_busy", "message": "busy", "session": "s1", "turn": "t1"})
        self.assertEqual((await peer.recv_type("reply", timeout=3))["turn"], "t1")
        await peer.send({"type": "refusal", "code": "unknown_turn", "message": "gone", "session": "s1", "turn": "t1"})
        await peer.send({"type": "refusal", "code": "run_capacity", "message": "full", "session": "s1", "run": "review"})
        await peer.send({"type": "heartbeat", "seq": 1})
        await peer.recv_type("heartbeat-ack")
        self.assertEqual(json.loads(self.held.read_text()), {"s1": {"questions": []}})

    async def test_an_invoke_of_a_later_turn_settles_the_kept_reply(self):
        handler = Replier()
        peer = await self.first_turn(handler)
        handler.gate = asyncio.Event()
        await peer.send(invoke(turn="t2"))
        await peer.recv_type("run")
        self.assertNotIn("reply", json.loads(self.held.read_text())["s1"])
        peer.cut()
        again = await self.server.accept()
        await again.welcome()
        self.assertEqual(again.resume["sessions"][0]["turn"], "t2")
        self.assertEqual((await again.recv_type("run"))["status"], "running")  # the kept report, once
        handler.gate.set()
        self.assertEqual((await again.recv_type("run"))["status"], "completed")
        self.assertEqual((await again.recv_type("reply"))["turn"], "t2")

    async def test_a_session_resumed_as_ended_settles_what_was_kept(self):
        peer = await self.first_turn(Replier())
        peer.cut()
        again = await self.server.accept()
        await again.welcome(resumed={"type": "resumed", "sessions": [], "ended": ["s1"]})
        await again.silent(0.3)
        self.assertEqual(json.loads(self.held.read_text()), {})

    async def test_the_same_invoke_again_while_the_turn_runs_starts_nothing(self):
        handler = Replier()
        handler.gate = asyncio.Event()
        self.start(handler)
        peer = await self.server.accept()
        await peer.welcome()
        await peer.send(invoke())
        await peer.recv_type("run")
        await peer.send(invoke())
        # Read in order: once the heartbeat is answered, the second invoke was handled while t1 ran.
        await peer.send({"type": "heartbeat", "seq": 1})
        await peer.recv_type("heartbeat-ack")
        handler.gate.set()
        await peer.recv_type("run")
        await peer.recv_type("reply")
        await peer.silent(0.3)
        self.assertEqual(handler.turns, ["t1"])

    async def test_an_invoke_of_a_turn_whose_reply_is_kept_sends_the_reply_again_and_starts_nothing(self):
        handler = Replier()
        peer = await self.first_turn(handler)
        await peer.send({"type": "run-received", "session": "s1", "run": "review", "attempt": 1, "status": "completed"})
        # The server sends the turn again: the reply it lacks goes again, the turn does not run again.
        await peer.send(invoke())
        self.assertEqual(
            await peer.recv_type("reply"), {"type": "reply", "session": "s1", "turn": "t1", "text": "Reviewed t1."}
        )
        await peer.silent(0.3)
        self.assertEqual(handler.turns, ["t1"])
        # Still kept until acknowledged: a second invoke sends it once more.
        await peer.send(invoke())
        self.assertEqual((await peer.recv_type("reply"))["turn"], "t1")
        await peer.send({"type": "reply-received", "session": "s1", "turn": "t1"})
        await peer.send({"type": "heartbeat", "seq": 1})
        await peer.recv_type("heartbeat-ack")
        self.assertEqual(json.loads(self.held.read_text()), {"s1": {"questions": []}})
        self.assertEqual(handler.turns, ["t1"])

    async def test_a_restarted_machine_names_the_kept_reply_and_sends_it_again(self):
        peer = await self.first_turn(Replier())
        await peer.send({"type": "run-received", "session": "s1", "run": "review", "attempt": 1, "status": "running"})
        await peer.send({"type": "heartbeat", "seq": 1})
        await peer.recv_type("heartbeat-ack")
        # The machine dies: its task is gone without a detach, its held file stays.
        task = self.tasks.pop()
        peer.cut()
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        self.held.write_text(
            '{"s1":{"questions":["c9"],"reply":{"turn":"t1","text":"Reviewed t1."},'
            '"runs":[{"run":"review","name":"Review","status":"completed","attempt":1}]}}'
        )
        handler = Replier()
        self.start(handler)
        again = await self.server.accept()
        await again.welcome()
        self.assertEqual(
            again.resume,
            {"type": "resume", "sessions": [{"session": "s1", "questions": ["c9"], "turn": "t1", "calls": []}]},
        )
        self.assertEqual(
            await again.recv_type("run"),
            {"type": "run", "session": "s1", "run": "review", "name": "Review", "status": "completed", "attempt": 1},
        )
        self.assertEqual((await again.recv_type("reply"))["text"], "Reviewed t1.")
        self.assertEqual(handler.turns, [])

    async def owing_and_settled(self, handler, *, until=None, resumable=True):
        """Links; leaves session s1 owing its reply of t1 and session `settled`
        owing nothing, both held. Returns the link and the machine's task."""
        connector = Connector(self.server.url, credential="mgm_test", held_file=self.held, resumable=resumable)
        task = asyncio.create_task(connector.run(handler, until=until))
        self.tasks.append(task)
        peer = await self.server.accept()
        await peer.welcome()
        for session in ("s1", "settled"):
            await peer.send(invoke(session=session))
            await peer.recv_type("run")
            await peer.recv_type("run")
            await peer.recv_type("reply")
            await peer.send({"type": "run-received", "session": session, "run": "review", "attempt": 1, "status": "completed"})
        await peer.send({"type": "reply-received", "session": "settled", "turn": "t1"})
        await peer.send({"type": "heartbeat", "seq": 1})
        await peer.recv_type("heartbeat-ack")
        self.assertEqual(
            json.loads(self.held.read_text()),
            {"s1": {"questions": [], "reply": {"turn": "t1", "text": "Reviewed t1."}}, "settled": {"questions": []}},
        )
        return peer, task

    OWING = {"s1": {"questions": [], "reply": {"turn": "t1", "text": "Reviewed t1."}}}

    async def test_a_machine_that_detaches_keeps_in_its_held_file_only_the_sessions_that_still_owe(self):
        until = asyncio.Event()
        peer, task = await self.owing_and_settled(Replier(), until=until)
        until.set()
        self.assertEqual(await peer.recv_type("detach"), {"type": "detach"})
        self.assertEqual(await asyncio.wait_for(task, 5), Ended.detached())
        self.assertEqual(json.loads(self.held.read_text()), self.OWING)
        # Started again, it names the turn and sends the reply again; nothing runs.
        handler = Replier()
        self.start(handler)
        again = await self.server.accept()
        await again.welcome()
        self.assertEqual(
            again.resume, {"type": "resume", "sessions": [{"session": "s1", "questions": [], "turn": "t1", "calls": []}]}
        )
        self.assertEqual(
            await again.recv_type("reply"), {"type": "reply", "session": "s1", "turn": "t1", "text": "Reviewed t1."}
        )
        await again.silent(0.3)
        self.assertEqual(handler.turns, [])

    async def test_a_machine_cancelled_detaches_and_keeps_the_sessions_that_still_owe(self):
        peer, task = await self.owing_and_settled(Replier())
        task.cancel()
        self.assertEqual(await peer.recv_type("detach"), {"type": "detach"})
        with self.assertRaises(asyncio.CancelledError):
            await task
        self.assertEqual(json.loads(self.held.read_text()), self.OWING)

    async def test_a_machine_cancelled_between_links_keeps_the_sessions_that_still_owe(self):
        peer, task = await self.owing_and_settled(Replier())
        await peer.close(1011, "going away")
        again = await self.server.accept()
        task.cancel()
        with self.assertRaises(asyncio.CancelledError):
            await task
        self.assertEqual(json.loads(self.held.read_text()), self.OWING)

    async def test_a_machine_that_is_not_resumable_forgets_everything_when_it_detaches(self):
        until = asyncio.Event()
        peer, task = await self.owing_and_settled(Replier(), until=until, resumable=False)
        until.set()
        self.assertEqual(await peer.recv_type("detach"), {"type": "detach"})
        self.assertEqual(await asyncio.wait_for(task, 5), Ended.detached())
        self.assertEqual(json.loads(self.held.read_text()), {})

    async def test_an_old_format_held_file_resumes_its_questions(self):
        self.held.write_text('{"s1":["c2","c1"]}')
        self.start(Replier())
        peer = await self.server.accept()
        await peer.welcome()
        self.assertEqual(peer.resume, {"type": "resume", "sessions": [{"session": "s1", "questions": ["c1", "c2"]}]})


if __name__ == "__main__":
    unittest.main()
