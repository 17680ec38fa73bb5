"""The link's mechanics against a scripted link server: calls and their ids
across a drop (SPEC W1), retry (L6), answers once (L5), Stop, bad input,
silence, final ends and detach."""

import asyncio
import logging
import unittest

from margin_connector import Connector, Ended, Handler, ToolError, is_refusal
from margin_connector.serving import parse

from .scripted import ScriptedServer, invoke


class Reader(Handler):
    """Each turn reads the document and replies with its revision (or the error)."""

    def __init__(self) -> None:
        self.answers = []
        self.stopped = []
        self.turns = []

    async def turn(self, turn):
        self.turns.append(turn.id)
        try:
            read = await turn.read_document()
        except ToolError as error:
            return f"error {error.code}"
        return f"revision {read['revision']}"

    async def answered(self, answer):
        self.answers.append((answer.request, answer.answer, answer.answered_by))

    async def stop(self, session):
        self.stopped.append(session.id)


class Link(unittest.IsolatedAsyncioTestCase):
    async def asyncSetUp(self):
        self.server = await ScriptedServer().__aenter__()
        self.tasks = []

    async def asyncTearDown(self):
        for task in self.tasks:
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)
        await self.server.__aexit__(None, None, None)

    def start(self, handler, **options):
        until = options.pop("until", None)
        connector = Connector(self.server.url, credential="mgm_test", **options)
        task = asyncio.create_task(connector.run(handler, until=until))
        self.tasks.append(task)
        return task

    async def test_hello_asks_for_resumable_sessions_with_the_manifest_and_capacity(self):
        self.start(Reader(), planning=True, run_capacity=4)
        peer = await self.server.accept()
        hello = await peer.welcome()
        self.assertEqual(
            hello,
            {
                "type": "hello",
                "protocol_version": 1,
                "features": ["resumable-sessions"],
                "run_capacity": 4,
                "manifest": {"planning": True},
            },
        )
        self.assertEqual(peer.authorization, "Bearer mgm_test")

    async def test_heartbeats_are_answered(self):
        self.start(Reader())
        peer = await self.server.accept()
        await peer.welcome()
        await peer.send({"type": "heartbeat", "seq": 7})
        self.assertEqual(await peer.recv_type("heartbeat-ack"), {"type": "heartbeat-ack", "seq": 7})

    async def test_a_call_whose_result_was_lost_is_named_in_resume_and_gets_its_result(self):
        handler = Reader()
        self.start(handler)
        peer = await self.server.accept()
        await peer.welcome()
        await peer.send(invoke())
        call = await peer.recv_type("tool-call")
        self.assertEqual(
            call,
            {"type": "tool-call", "session": "s1", "turn": "t1", "call_id": "c1", "name": "read_document", "arguments": {}},
        )
        peer.cut()
        again = await self.server.accept()
        await again.welcome()
        self.assertEqual(
            again.resume, {"type": "resume", "sessions": [{"session": "s1", "questions": [], "turn": "t1", "calls": ["c1"]}]}
        )
        await again.send(
            {"type": "tool-result", "session": "s1", "turn": "t1", "call_id": "c1", "output": {"revision": 3, "outline": []}}
        )
        self.assertEqual((await again.recv_type("reply"))["text"], "revision 3")
        self.assertEqual(handler.turns, ["t1"])

    async def test_a_call_the_server_never_recorded_fails_with_unknown_call(self):
        self.start(Reader())
        peer = await self.server.accept()
        await peer.welcome()
        await peer.send(invoke())
        await peer.recv_type("tool-call")
        await peer.send({"type": "refusal", "code": "unknown_call", "message": "never ran", "call_id": "c1"})
        self.assertEqual((await peer.recv_type("reply"))["text"], "error unknown_call")

    async def test_a_call_named_in_resume_and_answered_unknown_call_is_sent_again(self):
        # The call was written into a link that had already died: the server
        # never recorded it, so it never ran and calling it again is safe
        # (docs §8, SPEC W1) — the handler's call gets the call's result.
        handler = Reader()
        self.start(handler)
        peer = await self.server.accept()
        await peer.welcome()
        await peer.send(invoke())
        call = await peer.recv_type("tool-call")
        peer.cut()
        again = await self.server.accept()
        await again.welcome()
        self.assertEqual(again.resume["sessions"][0]["calls"], [call["call_id"]])
        await again.send({"type": "refusal", "code": "unknown_call", "message": "never ran", "call_id": call["call_id"]})
        resent = await again.recv_type("tool-call")
        self.assertEqual({k: v for k, v in resent.items() if k != "call_id"}, {k: v for k, v in call.items() if k != "call_id"})
        await again.send(
            {"type": "tool-result", "session": "s1", "turn": "t1", "call_id": resent["call_id"], "output": {"revision": 4, "outline": []}}
        )
        self.assertEqual((await again.recv_type("reply"))["text"], "revision 4")
        self.assertEqual(handler.turns, ["t1"])

    async def test_a_call_sent_again_after_unknown_call_is_named_in_the_next_resume(self):
        handler = Reader()
        self.start(handler)
        peer = await self.server.accept()
        await peer.welcome()
        await peer.send(invoke())
        call = await peer.recv_type("tool-call")
        peer.cut()
        again = await self.server.accept()
        await again.welcome()
        await again.send({"type": "refusal", "code": "unknown_call", "message": "never ran", "call_id": call["call_id"]})
        resent = await again.recv_type("tool-call")
        again.cut()
        third = await self.server.accept()
        await third.welcome()
        self.assertEqual(third.resume["sessions"][0]["calls"], [resent["call_id"]])
        await third.send(
            {"type": "tool-result", "session": "s1", "turn": "t1", "call_id": resent["call_id"], "output": {"revision": 5, "outline": []}}
        )
        self.assertEqual((await third.recv_type("reply"))["text"], "revision 5")
        self.assertEqual(handler.turns, ["t1"])

    async def test_a_refusal_marked_retry_is_tried_again_under_a_new_call_id(self):
        self.start(Reader())
        peer = await self.server.accept()
        await peer.welcome()
        await peer.send(invoke())
        first = await peer.recv_type("tool-call")
        refusal = {"code": "internal", "message": "could not decide", "read_again": False, "retry": True}
        await peer.send({"type": "tool-result", "session": "s1", "turn": "t1", "call_id": first["call_id"], "error": refusal})
        second = await peer.recv_type("tool-call", timeout=3)
        self.assertNotEqual(second["call_id"], first["call_id"])
        await peer.send(
            {"type": "tool-result", "session": "s1", "turn": "t1", "call_id": second["call_id"], "output": {"revision": 1, "outline": []}}
        )
        self.assertEqual((await peer.recv_type("reply"))["text"], "revision 1")

    async def test_a_refusal_without_retry_is_returned_at_once(self):
        self.start(Reader())
        peer = await self.server.accept()
        await peer.welcome()
        await peer.send(invoke())
        call = await peer.recv_type("tool-call")
        refusal = {"code": "no_access", "message": "no", "read_again": False}
        await peer.send({"type": "tool-result", "session": "s1", "turn": "t1", "call_id": call["call_id"], "error": refusal})
        self.assertEqual((await peer.recv_type("reply"))["text"], "error no_access")

    async def test_an_answer_is_acknowledged_every_time_and_delivered_once(self):
        handler = Reader()
        self.start(handler)
        peer = await self.server.accept()
        await peer.welcome()
        answer = {"type": "input-result", "session": "s1", "request": "c9", "answer": {"yes": True}, "answered_by": "bo"}
        for _ in range(2):
            await peer.send(answer)
            self.assertEqual(
                await peer.recv_type("input-received"), {"type": "input-received", "session": "s1", "request": "c9"}
            )
        await asyncio.sleep(0.05)
        self.assertEqual(handler.answers, [("c9", {"yes": True}, "bo")])

    async def test_stop_cancels_the_turn_tells_the_handler_then_confirms(self):
        handler = Reader()
        self.start(handler)
        peer = await self.server.accept()
        await peer.welcome()
        await peer.send(invoke())
        await peer.recv_type("tool-call")
        await peer.send({"type": "stop", "session": "s1"})
        self.assertEqual(await peer.recv_type("stopped"), {"type": "stopped", "session": "s1"})
        self.assertEqual(handler.stopped, ["s1"])
        await peer.silent(0.2)

    async def test_bad_server_input_is_ignored_and_the_link_carries_on(self):
        self.start(Reader())
        peer = await self.server.accept()
        await peer.welcome()
        with self.assertLogs("margin_connector", logging.WARNING):
            for frame in ("not json", "[1]", '{"type":"invoke","session":7}', '{"type":"tool-result"}', '{"type":"future"}',
                          '{"type":"heartbeat","seq":true}', "[" * 100000):
                await peer.send(frame)
            await peer.send({"type": "heartbeat", "seq": 2})
            self.assertEqual(await peer.recv_type("heartbeat-ack"), {"type": "heartbeat-ack", "seq": 2})

    async def test_a_silent_link_counts_as_dropped_and_links_again(self):
        self.start(Reader(), silence_timeout=0.3)
        peer = await self.server.accept()
        await peer.welcome()
        again = await self.server.accept(timeout=3)
        await again.welcome()

    async def test_revoked_ends_run_for_good(self):
        task = self.start(Reader())
        peer = await self.server.accept()
        await peer.welcome()
        await peer.close(4403, "revoked")
        self.assertEqual(await asyncio.wait_for(task, 5), Ended.closed(4403, "revoked"))

    async def test_setting_until_detaches(self):
        until = asyncio.Event()
        task = self.start(Reader(), until=until)
        peer = await self.server.accept()
        await peer.welcome()
        until.set()
        self.assertEqual(await peer.recv_type("detach"), {"type": "detach"})
        self.assertEqual(await asyncio.wait_for(task, 5), Ended.detached())

    async def test_cancelling_run_detaches(self):
        task = self.start(Reader())
        peer = await self.server.accept()
        await peer.welcome()
        task.cancel()
        self.assertEqual(await peer.recv_type("detach"), {"type": "detach"})
        with self.assertRaises(asyncio.CancelledError):
            await task

    async def test_a_fresh_credential_is_kept_for_the_next_link(self):
        self.start(Reader())
        peer = await self.server.accept()
        await peer.welcome()
        await peer.send({"type": "credential", "credential": "mgm_fresh", "expires_at": 1})
        await peer.send({"type": "heartbeat", "seq": 1})
        await peer.recv_type("heartbeat-ack")
        peer.cut()
        again = await self.server.accept()
        self.assertEqual(again.authorization, "Bearer mgm_fresh")


class Parse(unittest.TestCase):
    def test_a_message_missing_a_required_field_is_refused_on_receipt(self):
        self.assertEqual(parse('{"type":"reply-received","session":"s"}'), "reply-received without turn")
        self.assertIsInstance(parse('{"type":"reply-received","session":"s","turn":"t1"}'), dict)
        self.assertEqual(parse('{"type":"run-received","session":"s","run":"r","attempt":"1","status":"x"}'),
                         "run-received with a mistyped attempt")


class Refusals(unittest.TestCase):
    def test_is_refusal_names_the_code(self):
        self.assertTrue(is_refusal(ToolError.refused({"code": "interrupted", "message": ""}), "interrupted"))


if __name__ == "__main__":
    unittest.main()
