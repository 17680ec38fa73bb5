"""How a link ended, and whether linking again can help (the Rust SDK's `Ended`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from .protocol import Close

EndedKind = Literal["detached", "closed", "dropped", "refused"]


@dataclass(frozen=True)
class Ended:
    """How a link ended.

    `detached`: the machine left on purpose. `closed`: the server closed the
    link with `code` and `reason` (4403 revoked, 4002 unresponsive, 4409 taken
    over, 1001 shutting down, …). `dropped`: the connection broke without a
    close, or went silent. `refused`: the server refused to link again, for
    good (only `Connector.run` ends so).
    """

    kind: EndedKind
    code: int | None = None
    reason: str = ""

    @staticmethod
    def detached() -> Ended:
        return Ended("detached")

    @staticmethod
    def closed(code: int, reason: str) -> Ended:
        return Ended("closed", code, reason)

    @staticmethod
    def dropped(reason: str) -> Ended:
        return Ended("dropped", None, reason)

    @staticmethod
    def refused(reason: str) -> Ended:
        return Ended("refused", None, reason)


def is_final(ended: Ended) -> bool:
    """Whether linking again cannot help: the machine left, or the server ended
    this machine's link on purpose (revoked, bad `hello`, taken over)."""
    if ended.kind in ("detached", "refused"):
        return True
    if ended.kind == "closed":
        return ended.code in (Close.REVOKED, Close.BAD_HELLO, Close.SUPERSEDED)
    return False


def describe_ended(ended: Ended) -> str:
    """One line saying how the link ended."""
    if ended.kind == "closed":
        return f"closed by the server ({ended.code}: {ended.reason})"
    if ended.kind in ("dropped", "refused"):
        return f"{ended.kind} ({ended.reason})"
    return ended.kind
