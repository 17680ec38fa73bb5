"""The generated wire modules match the committed schemas (drift check)."""

import subprocess
import sys
import unittest
from pathlib import Path

SDK = Path(__file__).resolve().parent.parent


class GeneratedTypes(unittest.TestCase):
    def test_generated_modules_match_the_committed_schemas(self):
        check = subprocess.run(
            [sys.executable, "tools/generate.py", "--check"], cwd=SDK, capture_output=True, text=True, timeout=60
        )
        self.assertEqual(check.returncode, 0, check.stderr)

    def test_wire_module_names_every_link_message(self):
        from margin_connector import wire

        self.assertIn("reply-received", wire.SERVER_MESSAGE_FIELDS)
        self.assertEqual(wire.SERVER_MESSAGE_FIELDS["run-received"]["attempt"], (("integer",), True))
        self.assertTrue(hasattr(wire, "ReplyMessage"))
        self.assertTrue(hasattr(wire, "KeptSessions"))


if __name__ == "__main__":
    unittest.main()
