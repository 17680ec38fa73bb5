"""The credential file: read at each connect, replaced whole and privately (SPEC L8)."""

import asyncio
import os
import stat
import tempfile
import unittest
from pathlib import Path

from margin_connector.credential import (
    FileKeeper,
    MemoryKeeper,
    plausible_credential,
    read_credential_file,
    write_credential_file,
)
from margin_connector.errors import ConnectError


class CredentialFile(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        self.path = Path(self.dir.name) / "laptop.credential"

    def tearDown(self):
        self.dir.cleanup()

    def test_written_private_and_whole_with_no_temporary_left(self):
        old = os.umask(0o022)
        try:
            write_credential_file(self.path, "mgm_first")
            write_credential_file(self.path, "mgm_second")
        finally:
            os.umask(old)
        self.assertEqual(self.path.read_text(), "mgm_second\n")
        self.assertEqual(stat.S_IMODE(self.path.stat().st_mode), 0o600)
        self.assertEqual(sorted(p.name for p in self.path.parent.iterdir()), ["laptop.credential"])

    def test_read_trims_and_names_a_missing_or_empty_file(self):
        self.path.write_text("  mgm_abc \n")
        self.assertEqual(read_credential_file(self.path), "mgm_abc")
        self.path.write_text("\n")
        with self.assertRaises(ConnectError) as empty:
            read_credential_file(self.path)
        self.assertEqual(empty.exception.kind, "empty-credential-file")
        with self.assertRaises(ConnectError) as missing:
            read_credential_file(Path(self.dir.name) / "nope")
        self.assertEqual(missing.exception.kind, "credential-file")

    def test_file_keeper_replaces_the_file_and_reads_it_back(self):
        keeper = FileKeeper(self.path)
        write_credential_file(self.path, "mgm_one")
        asyncio.run(keeper.replace("mgm_two"))
        self.assertEqual(asyncio.run(keeper.current()), "mgm_two")

    def test_a_keeper_that_cannot_write_keeps_the_previous_credential(self):
        write_credential_file(self.path, "mgm_one")
        keeper = FileKeeper(Path(self.dir.name) / "missing-dir" / "c")
        with self.assertLogs("margin_connector", "WARNING"):
            asyncio.run(keeper.replace("mgm_two"))

    def test_memory_keeper_never_shows_the_secret(self):
        keeper = MemoryKeeper("mgm_secret")
        self.assertNotIn("secret", repr(keeper))
        asyncio.run(keeper.replace("mgm_new"))
        self.assertEqual(asyncio.run(keeper.current()), "mgm_new")

    def test_only_a_plausible_credential_replaces_one(self):
        self.assertTrue(plausible_credential("mgm_abc"))
        self.assertFalse(plausible_credential("abc"))
        self.assertFalse(plausible_credential("mgm_a b"))
        self.assertFalse(plausible_credential("mgm_" + "a" * 200))
        self.assertFalse(plausible_credential(7))


if __name__ == "__main__":
    unittest.main()
