"""The steady planner every SDK ships for the cross-SDK proxy matrix.

Reads MARGIN_SERVER, MARGIN_CREDENTIAL_FILE (renewals written back),
MARGIN_HELD_FILE and MARGIN_SILENCE_MS, and serves resumably until SIGTERM
or SIGINT (then it detaches and exits 0). Prints `linked` on each welcome and
`turn SESSION TURN` as each turn starts. Each turn reports run `review`
running, reads the document, opens one yes/no card on its first block,
reports `review` completed and replies `Reviewed TURN: N blocks.`

  python -m margin_connector.examples.steady_planner
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys

from margin_connector import Connector, Handler, Turn, describe_ended


class SteadyPlanner(Handler):
    async def turn(self, turn: Turn) -> str:
        print(f"turn {turn.session.id} {turn.id}", flush=True)
        await turn.run("review", "Review", "running", 1)
        read = await turn.read_document()
        outline = read["outline"]
        if outline:
            first = outline[0]
            await turn.open_decisions(
                {
                    "revision": read["revision"],
                    "cards": [
                        {
                            "key": f"steady-{turn.id}",
                            "question": f"Ship {turn.id}?",
                            "response": "yes_no",
                            "passages": [{"index": first["index"], "digest": first["digest"]}],
                        }
                    ],
                }
            )
        await turn.run("review", "Review", "completed", 1)
        return f"Reviewed {turn.id}: {len(outline)} blocks."


async def serve() -> int:
    env = os.environ
    silence_ms = int(env.get("MARGIN_SILENCE_MS", "45000"))
    connector = Connector(
        env.get("MARGIN_SERVER", "http://127.0.0.1:7070"),
        credential_file=env["MARGIN_CREDENTIAL_FILE"],
        held_file=env.get("MARGIN_HELD_FILE"),
        silence_timeout=silence_ms / 1000,
        on_link=lambda welcome: print("linked", flush=True),
    )
    until = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, until.set)
    ended = await connector.run(SteadyPlanner(), until=until)
    if ended.kind != "detached":
        print(f"steady planner stopped linking: {describe_ended(ended)}", file=sys.stderr)
        return 1
    return 0


def main() -> None:
    if "MARGIN_CREDENTIAL_FILE" not in os.environ:
        print("steady planner: set MARGIN_CREDENTIAL_FILE (and MARGIN_SERVER, MARGIN_HELD_FILE)", file=sys.stderr)
        sys.exit(2)
    sys.exit(asyncio.run(serve()))


if __name__ == "__main__":
    main()
