"""Where a connector keeps its machine's credential (SPEC L8).

In memory, or in a private file that each renewal replaces atomically, so a
Planner backend that restarts re-attaches with a credential still valid.
`write_private_file` is also how the held file is written.
"""

from __future__ import annotations

import itertools
import logging
import os
import re
import sys
from pathlib import Path
from typing import Protocol

from .errors import ConnectError
from .log import LOGGER, debug, warn

# Longest credential a `credential` message may carry and still be one of ours.
MAX_CREDENTIAL_BYTES = 128
_PLAUSIBLE = re.compile(r"mgm_[\x21-\x7e]+")
_temps = itertools.count()


class CredentialKeeper(Protocol):
    """The machine's current credential, for the next connect."""

    async def current(self) -> str:
        """The credential to connect with now."""
        ...

    async def replace(self, credential: str) -> None:
        """Keeps `credential` as the newest. Never raises: a failure is logged."""
        ...


class MemoryKeeper:
    """The newest credential, in memory."""

    def __init__(self, credential: str) -> None:
        self._credential = credential

    async def current(self) -> str:
        return self._credential

    async def replace(self, credential: str) -> None:
        self._credential = credential

    def __repr__(self) -> str:
        # Never shows the secret.
        return "MemoryKeeper(…)"


class FileKeeper:
    """A file holding the newest credential, read at each connect."""

    def __init__(self, path: str | os.PathLike[str], log: logging.Logger = LOGGER) -> None:
        self.path = Path(path)
        self._log = log

    async def current(self) -> str:
        return read_credential_file(self.path, self._log)

    async def replace(self, credential: str) -> None:
        """Replaces the file atomically and privately. When it cannot be written
        the file keeps the previous credential, still valid until its own
        expiry, and the failure is logged."""
        try:
            write_credential_file(self.path, credential)
            debug(self._log, "renewed credential saved", path=str(self.path))
        except OSError as error:
            warn(
                self._log,
                "cannot save the renewed credential; the file keeps the previous one until it expires",
                path=str(self.path),
                error=str(error),
            )

    def __repr__(self) -> str:
        return f"FileKeeper({str(self.path)!r})"


def read_credential_file(path: str | os.PathLike[str], log: logging.Logger = LOGGER) -> str:
    """Reads a credential file: its content, trimmed."""
    try:
        text = Path(path).read_text("utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise ConnectError.credential_file(str(path), str(error)) from error
    credential = text.strip()
    if not credential:
        raise ConnectError.empty_credential_file(str(path))
    if sys.platform != "win32":
        try:
            if os.stat(path).st_mode & 0o077:
                warn(
                    log,
                    "the credential file is readable by others; it becomes private (0600) at the first renewal",
                    path=str(path),
                )
        except OSError:
            pass
    return credential


def write_credential_file(path: str | os.PathLike[str], credential: str) -> None:
    """Writes `credential` to `path` atomically and privately (see `write_private_file`)."""
    write_private_file(path, credential + "\n")


def write_private_file(path: str | os.PathLike[str], contents: str) -> None:
    """Writes `contents` to `path` whole, privately and durably.

    A temporary file in the same folder, created with mode 0600, is written,
    flushed to disk and renamed over `path`, so `path` always holds a whole
    file and is never readable by others. The folder is synced too, so the
    rename survives a crash.
    """
    target = Path(path)
    temp = target.parent / f".{target.name}.{os.getpid()}-{next(_temps)}.tmp"
    # O_EXCL: the temporary file must not exist; the mode is masked by the
    # umask, so it is set again once open.
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        try:
            os.fchmod(fd, 0o600)
            os.write(fd, contents.encode("utf-8"))
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(temp, target)
    except BaseException:
        try:
            os.unlink(temp)
        except OSError:
            pass
        raise
    _sync_dir(target.parent)


def _sync_dir(folder: Path) -> None:
    """Makes a rename in `folder` durable, where the platform can."""
    if sys.platform == "win32":
        return
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        # Some filesystems cannot sync a folder; the rename is as durable as they make it.
        pass
    finally:
        os.close(fd)


def plausible_credential(credential: object) -> bool:
    """Whether a `credential` message's credential could be one of ours: one
    that could never open a link must not replace one that does."""
    return (
        isinstance(credential, str)
        and len(credential) <= MAX_CREDENTIAL_BYTES
        and _PLAUSIBLE.fullmatch(credential) is not None
    )
