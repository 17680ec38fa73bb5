"""The held file: sessions, questions and what is owed, in the KeptSessions format (SPEC L3, L10)."""

import json
import stat
import tempfile
import unittest
from pathlib import Path

from margin_connector.held import Held, KeptRun


class HeldFile(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        self.path = Path(self.dir.name) / "laptop.sessions.json"

    def tearDown(self):
        self.dir.cleanup()

    def test_written_in_the_kept_sessions_format_sorted_and_private(self):
        held = Held(self.path)
        held.hold_session("s2")
        held.hold_question("s1", "c9")
        held.hold_question("s1", "c1")
        held.keep_reply("s1", "t3", "Done.")
        held.keep_run("s1", KeptRun("zeta", "Zeta", "running", 1))
        held.keep_run("s1", KeptRun("deploy", "Deploy", "completed", 2))
        self.assertEqual(
            self.path.read_text(),
            '{"s1":{"questions":["c1","c9"],"reply":{"turn":"t3","text":"Done."},'
            '"runs":[{"run":"deploy","name":"Deploy","status":"completed","attempt":2},'
            '{"run":"zeta","name":"Zeta","status":"running","attempt":1}]},'
            '"s2":{"questions":[]}}',
        )
        self.assertEqual(stat.S_IMODE(self.path.stat().st_mode), 0o600)

    def test_round_trips_through_a_restart(self):
        held = Held(self.path)
        held.hold_question("s1", "c9")
        held.keep_reply("s1", "t3", "Done.")
        held.keep_run("s1", KeptRun("deploy", "Deploy", "failed", 2))
        again = Held(self.path)
        self.assertEqual(again.entries(), [("s1", ["c9"])])
        self.assertEqual(again.reply("s1"), ("t3", "Done."))
        self.assertEqual(again.runs("s1"), [KeptRun("deploy", "Deploy", "failed", 2)])

    def test_the_old_format_of_bare_question_lists_still_reads(self):
        self.path.write_text(json.dumps({"s1": ["c2", "c1"], "s2": []}))
        held = Held(self.path)
        self.assertEqual(held.entries(), [("s1", ["c1", "c2"]), ("s2", [])])
        self.assertIsNone(held.reply("s1"))
        self.assertEqual(held.runs("s1"), [])

    def test_an_unreadable_file_resumes_nothing(self):
        self.path.write_text('{"s1": {"questions": 7}}')
        with self.assertLogs("margin_connector", "WARNING"):
            held = Held(self.path)
        self.assertEqual(held.entries(), [])

    def test_a_reply_settles_only_for_its_own_turn(self):
        held = Held(self.path)
        held.keep_reply("s1", "t3", "Done.")
        self.assertFalse(held.settle_reply("s1", "t2"))
        self.assertTrue(held.settle_reply("s1", "t3"))
        self.assertIsNone(held.reply("s1"))
        self.assertEqual(json.loads(self.path.read_text()), {"s1": {"questions": []}})

    def test_a_run_report_settles_only_for_its_attempt_and_status(self):
        held = Held(self.path)
        held.keep_run("s1", KeptRun("r", "R", "running", 1))
        held.keep_run("s1", KeptRun("r", "R", "completed", 1))
        self.assertFalse(held.settle_run("s1", "r", 1, "running"))
        self.assertEqual(held.runs("s1"), [KeptRun("r", "R", "completed", 1)])
        self.assertTrue(held.settle_run("s1", "r", 1, "completed"))
        self.assertEqual(held.runs("s1"), [])

    def test_forgetting_a_session_settles_everything_kept_for_it(self):
        held = Held(self.path)
        held.keep_reply("s1", "t1", "x")
        held.keep_run("s1", KeptRun("r", "R", "running", 1))
        held.forget_session("s1")
        self.assertEqual(json.loads(self.path.read_text()), {})

    def test_letting_go_of_the_settled_keeps_the_sessions_that_still_owe(self):
        held = Held(self.path)
        held.hold_question("asks", "c1")
        held.keep_reply("replies", "t1", "Done.")
        held.keep_run("reports", KeptRun("review", "Review", "completed", 1))
        held.hold_question("reports", "c2")
        held.forget_settled()
        self.assertEqual(
            json.loads(self.path.read_text()),
            {
                "replies": {"questions": [], "reply": {"turn": "t1", "text": "Done."}},
                "reports": {
                    "questions": ["c2"],
                    "runs": [{"run": "review", "name": "Review", "status": "completed", "attempt": 1}],
                },
            },
        )
        held.forget_all()
        self.assertEqual(json.loads(self.path.read_text()), {})

    def test_without_a_file_it_keeps_in_memory(self):
        held = Held(None)
        held.keep_reply("s1", "t1", "x")
        self.assertEqual(held.reply("s1"), ("t1", "x"))


if __name__ == "__main__":
    unittest.main()
