"""The SDK against the real `margin` server (target/debug/margin, or
$MARGIN_BIN): the demo and steady examples as people run them, and a drop
mid-turn — the call carries on, the reply is posted once (SPEC W1, L10)."""

from __future__ import annotations

import asyncio
import json
import os
import stat
import subprocess
import sys
import tempfile
import unittest
from pathlib import Path

from margin_connector import Connector, Handler

from .margin_server import MarginServer, Proxy, wait_for

SDK = Path(__file__).resolve().parents[1]
PATIENCE = 15.0


def example_env(**extra: str) -> dict[str, str]:
    env = dict(os.environ)
    # Found without an install too.
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(SDK / "src"), env.get("PYTHONPATH")]))
    env.update(extra)
    return env


class RealServer(unittest.IsolatedAsyncioTestCase):
    async def asyncSetUp(self):
        self.server = MarginServer()
        self.server.add_account("alice")
        await asyncio.to_thread(self.server.start)
        self.credential = self.server.dir / "laptop.credential"
        self.server.pair("alice", "laptop", self.credential)
        self.children: list[subprocess.Popen[bytes]] = []
        self.tasks: list[asyncio.Task] = []

    async def asyncTearDown(self):
        for task in self.tasks:
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)
        for child in self.children:
            if child.poll() is None:
                child.terminate()
                child.wait(10)
        self.server.cleanup()

    def run_example(self, args: list[str], env: dict[str, str]) -> subprocess.Popen:
        out = open(self.server.dir / f"example-{len(self.children)}.log", "wb")
        child = subprocess.Popen([sys.executable, *args], env=env, stdout=out, stderr=subprocess.STDOUT, cwd=SDK)
        self.children.append(child)
        return child

    def output(self, index: int = 0) -> str:
        return (self.server.dir / f"example-{index}.log").read_text(errors="replace")

    def fail_report(self) -> str:
        return f"server:\n{self.server.logs()}\nexample:\n{self.output() if self.children else ''}"

    async def test_the_demo_planner_opens_cards_and_replies_in_chat(self):
        doc = self.server.document_with("Plan", ["We launch in March.", "Which region first?", "Pricing: TBD."])
        demo = self.run_example(
            ["examples/demo_planner.py", "--server", self.server.url, "--credential", str(self.credential)], example_env()
        )
        await wait_for(lambda: self.server.planner(doc).get("state") == "available", PATIENCE, "the demo to link")
        self.server.say(doc, "@planner please review")
        replies = await wait_for(lambda: self.server.replies(doc), PATIENCE, "a reply")
        self.assertEqual(replies, ["I read the plan and found 2 open questions: added 2 decisions."], self.fail_report())
        _, cards = self.server.api("GET", f"/documents/{doc}/decisions", as_="alice")
        self.assertEqual(
            sorted((c["question"], c["response"], c["state"]) for c in cards["decisions"]),
            [("Decide what is still TBD: Pricing: TBD.", "free_text", "open"), ("Which region first?", "free_text", "open")],
        )
        view = self.server.planner(doc)
        self.assertEqual([(r["name"], r["status"]) for r in view["runs"]], [("Review the plan for open questions", "completed")])
        # The credential was renewed into its file, privately.
        self.assertEqual(stat.S_IMODE(self.credential.stat().st_mode), 0o600)
        held = self.server.dir / "laptop.sessions.json"
        await wait_for(lambda: held.exists() and "reply" not in json.dumps(json.loads(held.read_text())), PATIENCE, "the reply acknowledged")
        demo.send_signal(2)
        self.assertEqual(await asyncio.to_thread(demo.wait, 10), 0, self.output())

    async def test_the_steady_planner_prints_its_turns_and_replies(self):
        doc = self.server.document_with("Plan", ["One.", "Two."])
        steady = self.run_example(
            ["examples/steady_planner.py"],
            example_env(
                MARGIN_SERVER=self.server.url,
                MARGIN_CREDENTIAL_FILE=str(self.credential),
                MARGIN_HELD_FILE=str(self.server.dir / "steady.sessions.json"),
                MARGIN_SILENCE_MS="2000",
            ),
        )
        await wait_for(lambda: "linked" in self.output(), PATIENCE, "linked")
        self.server.say(doc, "@planner go")
        replies = await wait_for(lambda: self.server.replies(doc), PATIENCE, "a reply")
        self.assertEqual(replies, ["Reviewed t1: 2 blocks."], self.fail_report())
        self.assertRegex(self.output(), r"(?m)^turn \S+ t1$")
        _, cards = self.server.api("GET", f"/documents/{doc}/decisions", as_="alice")
        self.assertEqual([(c["question"], c["response"]) for c in cards["decisions"]], [("Ship t1?", "yes_no")])
        steady.terminate()
        self.assertEqual(await asyncio.to_thread(steady.wait, 10), 0, self.output())

    async def start_through(self, proxy: Proxy, handler: Handler, held: Path) -> None:
        connector = Connector(proxy.url, credential_file=self.credential, held_file=held, silence_timeout=5)
        self.tasks.append(asyncio.create_task(connector.run(handler)))

    async def test_a_drop_mid_turn_is_resumed_and_the_reply_posted_once(self):
        doc = self.server.document_with("Plan", ["Intro.", "Budget?"])
        proxy = await Proxy(self.server.port).start()
        self.addAsyncCleanup(proxy.close)
        gate = asyncio.Event()
        read_once = asyncio.Event()
        turns = []

        class Slow(Handler):
            async def turn(self, turn):
                turns.append(turn.id)
                await turn.run("review", "Review", "running")
                read = await turn.read_document()
                read_once.set()
                await gate.wait()
                opened = await turn.open_decisions(
                    {
                        "revision": read["revision"],
                        "cards": [
                            {
                                "key": "budget",
                                "question": "Budget?",
                                "response": "free_text",
                                "passages": [{"index": 1, "digest": read["outline"][1]["digest"]}],
                            }
                        ],
                    }
                )
                await turn.run("review", "Review", "completed")
                return f"Read {len(read['outline'])} blocks: {opened['summary']}."

        held = self.server.dir / "proxy.sessions.json"
        await self.start_through(proxy, Slow(), held)
        await wait_for(lambda: self.server.planner(doc).get("state") == "available", PATIENCE, "the machine to link")
        self.server.say(doc, "@planner review")
        await asyncio.wait_for(read_once.wait(), PATIENCE)
        proxy.cut()
        await wait_for(lambda: proxy.accepted >= 2, PATIENCE, "the machine to link again")
        gate.set()
        replies = await wait_for(lambda: self.server.replies(doc), PATIENCE, "a reply")
        self.assertEqual(replies, ["Read 2 blocks: added 1 decision."], self.server.logs())
        await asyncio.sleep(0.5)
        self.assertEqual(self.server.replies(doc), replies, "posted once")
        self.assertEqual(turns, ["t1"])
        view = self.server.planner(doc)
        self.assertEqual([(r["name"], r["status"]) for r in view["runs"]], [("Review", "completed")])

    async def test_a_reply_whose_ack_was_lost_is_sent_again_and_posted_once(self):
        doc = self.server.document_with("Plan", ["Intro."])
        proxy = await Proxy(self.server.port).start()
        self.addAsyncCleanup(proxy.close)

        class LosesTheAck(Handler):
            async def turn(self, turn):
                read = await turn.read_document()
                # From here the server's acknowledgement never arrives.
                proxy.hold_down()
                return f"Read {len(read['outline'])} block."

        held = self.server.dir / "ack.sessions.json"
        await self.start_through(proxy, LosesTheAck(), held)
        await wait_for(lambda: self.server.planner(doc).get("state") == "available", PATIENCE, "the machine to link")
        self.server.say(doc, "@planner read")
        await wait_for(lambda: self.server.replies(doc), PATIENCE, "the reply posted")
        self.assertIn('"reply":{"turn":"t1"', held.read_text(), "kept until acknowledged")
        with self.assertLogs("margin_connector", "WARNING") as logs:
            proxy.cut()
            await wait_for(lambda: '"reply"' not in held.read_text(), PATIENCE, "the resent reply settled")
        # The copy was refused: the server had posted it already.
        self.assertTrue(any("refused the reply" in line and "unknown_turn" in line for line in logs.output), logs.output)
        await asyncio.sleep(0.5)
        self.assertEqual(self.server.replies(doc), ["Read 1 block."], "posted once")


if __name__ == "__main__":
    unittest.main()
