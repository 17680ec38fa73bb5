"""How a link ended, and whether linking again can help."""

import unittest

from margin_connector.ended import Ended, describe_ended, is_final
from margin_connector.errors import ConnectError, ToolError, is_refusal


class Endings(unittest.TestCase):
    def test_revoked_bad_hello_and_taken_over_are_final(self):
        for code in (4403, 4400, 4409):
            self.assertTrue(is_final(Ended.closed(code, "")), code)
        self.assertTrue(is_final(Ended.detached()))
        self.assertTrue(is_final(Ended.refused("no")))

    def test_unresponsive_shutdown_and_drops_link_again(self):
        for code in (4002, 1001, 1000, 1006):
            self.assertFalse(is_final(Ended.closed(code, "")), code)
        self.assertFalse(is_final(Ended.dropped("gone")))

    def test_each_ending_is_one_line(self):
        self.assertEqual(describe_ended(Ended.closed(4403, "revoked")), "closed by the server (4403: revoked)")
        self.assertEqual(describe_ended(Ended.dropped("silent")), "dropped (silent)")


class Errors(unittest.TestCase):
    def test_a_refused_credential_is_final_and_the_network_is_not(self):
        self.assertTrue(ConnectError.refused(401, "machine_revoked", "revoked").final)
        self.assertEqual(ConnectError.refused(401, "machine_revoked", "revoked").code, "machine_revoked")
        self.assertTrue(ConnectError.hello("unsupported_version", "no").final)
        self.assertTrue(ConnectError.address("ftp://x").final)
        self.assertFalse(ConnectError.network("refused").final)
        self.assertFalse(ConnectError.refused(503, None, "").final)
        self.assertFalse(ConnectError.credential_file("/x", "missing").final)

    def test_a_refusal_carries_its_code(self):
        error = ToolError.refused({"code": "stale_revision", "message": "m", "read_again": True})
        self.assertEqual(error.kind, "refused")
        self.assertEqual(error.code, "stale_revision")
        self.assertTrue(is_refusal(error))
        self.assertTrue(is_refusal(error, "stale_revision"))
        self.assertFalse(is_refusal(error, "interrupted"))
        self.assertFalse(is_refusal(ToolError.link_closed()))
        self.assertIn("stale_revision", str(error))


if __name__ == "__main__":
    unittest.main()
