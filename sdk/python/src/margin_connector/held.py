"""What outlives a link: the sessions this machine holds, the questions each
waits on, and what it sent that the server has not acknowledged yet — a
turn's reply and the latest report of each run (SPEC L3, L5, L10).

Kept in memory, and with a held file also on disk in the KeptSessions format
every SDK shares (private, replaced atomically on each change, before the
change is acted on), so a machine that restarts resumes its sessions and
sends again what was owed. A file older SDKs wrote (each session a bare list
of question ids) still reads.
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass, field
from pathlib import Path

from .credential import write_private_file
from .log import LOGGER, warn
from .wire import KeptSession as KeptSessionJson
from .wire import KeptSessions

_RUN_STATUSES = ("running", "paused", "completed", "failed", "stopped")


@dataclass(frozen=True)
class KeptRun:
    """A run's latest report, sent and not yet acknowledged."""

    run: str
    name: str
    status: str
    attempt: int


@dataclass
class _Kept:
    questions: set[str] = field(default_factory=set)
    # (turn, text) of a reply not yet acknowledged.
    reply: tuple[str, str] | None = None
    runs: dict[str, KeptRun] = field(default_factory=dict)


class Held:
    """The sessions held and what each still owes; every change is saved at once."""

    def __init__(self, path: str | os.PathLike[str] | None, log: logging.Logger = LOGGER) -> None:
        self.path = None if path is None else Path(path)
        self._log = log
        self._sessions: dict[str, _Kept] = {}
        if self.path is None:
            return
        try:
            text = self.path.read_text("utf-8")
        except FileNotFoundError:
            return
        except (OSError, UnicodeDecodeError) as error:
            warn(log, "the held sessions file is unreadable; resuming none", path=str(self.path), error=str(error))
            return
        try:
            self._sessions = _parse(json.loads(text))
        except (ValueError, TypeError) as error:
            warn(log, "the held sessions file is unreadable; resuming none", path=str(self.path), error=str(error))

    def entries(self) -> list[tuple[str, list[str]]]:
        """Each session held, sorted, with its questions, sorted."""
        return [(session, sorted(self._sessions[session].questions)) for session in sorted(self._sessions)]

    def sessions(self) -> list[str]:
        return sorted(self._sessions)

    def holds(self, session: str) -> bool:
        return session in self._sessions

    def reply(self, session: str) -> tuple[str, str] | None:
        """The kept reply of `session`: (turn, text)."""
        kept = self._sessions.get(session)
        return None if kept is None else kept.reply

    def runs(self, session: str) -> list[KeptRun]:
        """The kept run reports of `session`, sorted by run."""
        kept = self._sessions.get(session)
        return [] if kept is None else [kept.runs[run] for run in sorted(kept.runs)]

    def hold_session(self, session: str) -> None:
        if session not in self._sessions:
            self._sessions[session] = _Kept()
            self._save()

    def hold_question(self, session: str, request: str) -> None:
        kept = self._sessions.setdefault(session, _Kept())
        if request not in kept.questions:
            kept.questions.add(request)
            self._save()

    def settle_question(self, session: str, request: str) -> None:
        kept = self._sessions.get(session)
        if kept is not None and request in kept.questions:
            kept.questions.discard(request)
            self._save()

    def keep_reply(self, session: str, turn: str, text: str) -> None:
        """Keeps `turn`'s reply until the server acknowledges it (SPEC L10)."""
        self._sessions.setdefault(session, _Kept()).reply = (turn, text)
        self._save()

    def settle_reply(self, session: str, turn: str | None = None) -> bool:
        """Drops the kept reply of `session` (only if it is `turn`'s, when given)."""
        kept = self._sessions.get(session)
        if kept is None or kept.reply is None or (turn is not None and kept.reply[0] != turn):
            return False
        kept.reply = None
        self._save()
        return True

    def keep_run(self, session: str, report: KeptRun) -> None:
        """Keeps the latest report of a run, replacing the one before (SPEC L10)."""
        self._sessions.setdefault(session, _Kept()).runs[report.run] = report
        self._save()

    def settle_run(self, session: str, run: str, attempt: int | None = None, status: str | None = None) -> bool:
        """Drops the kept report of `run` when it is the one answered (same
        attempt and status, when given); a newer report stays kept."""
        kept = self._sessions.get(session)
        report = None if kept is None else kept.runs.get(run)
        if report is None:
            return False
        if attempt is not None and report.attempt != attempt:
            return False
        if status is not None and report.status != status:
            return False
        del kept.runs[run]
        self._save()
        return True

    def forget_session(self, session: str) -> None:
        """The session ended: everything kept for it is settled."""
        if self._sessions.pop(session, None) is not None:
            self._save()

    def forget_settled(self) -> None:
        """Lets go of the sessions that owe the server nothing; those that
        still owe a reply or run report stay held, with their questions, so a
        restarted machine names them and sends again what they owe (SPEC L10)."""
        settled = [session for session, kept in self._sessions.items() if kept.reply is None and not kept.runs]
        if settled:
            for session in settled:
                del self._sessions[session]
            self._save()

    def forget_all(self) -> None:
        if self._sessions:
            self._sessions.clear()
            self._save()

    def to_json(self) -> KeptSessions:
        """What the held file holds, in the KeptSessions format."""
        out: KeptSessions = {}
        for session in sorted(self._sessions):
            kept = self._sessions[session]
            entry: KeptSessionJson = {"questions": sorted(kept.questions)}
            if kept.reply is not None:
                entry["reply"] = {"turn": kept.reply[0], "text": kept.reply[1]}
            if kept.runs:
                entry["runs"] = [
                    {"run": r.run, "name": r.name, "status": r.status, "attempt": r.attempt}  # type: ignore[typeddict-item]
                    for r in (kept.runs[run] for run in sorted(kept.runs))
                ]
            out[session] = entry
        return out

    def _save(self) -> None:
        # Written before the change is acted on (before a reply goes out, or an
        # acknowledgement is forgotten), so a crash never loses what is owed.
        if self.path is None:
            return
        text = json.dumps(self.to_json(), separators=(",", ":"), ensure_ascii=False)
        try:
            write_private_file(self.path, text)
        except OSError as error:
            warn(self._log, "cannot save the held sessions", path=str(self.path), error=str(error))


def _parse(data: object) -> dict[str, _Kept]:
    """The sessions a held file holds; ValueError when it is not a KeptSessions."""
    if not isinstance(data, dict):
        raise ValueError("not an object")
    sessions: dict[str, _Kept] = {}
    for session, entry in data.items():
        if isinstance(entry, list):
            # Written before L10: only the questions.
            entry = {"questions": entry}
        if not isinstance(entry, dict) or set(entry) - {"questions", "reply", "runs"}:
            raise ValueError(f"session {session} is not a kept session")
        questions = entry.get("questions", [])
        if not isinstance(questions, list) or not all(isinstance(q, str) for q in questions):
            raise ValueError(f"session {session} does not list its questions")
        kept = _Kept(questions=set(questions))
        reply = entry.get("reply")
        if reply is not None:
            if not (isinstance(reply, dict) and isinstance(reply.get("turn"), str) and isinstance(reply.get("text"), str)):
                raise ValueError(f"session {session} has an unreadable reply")
            kept.reply = (reply["turn"], reply["text"])
        runs = entry.get("runs", [])
        if not isinstance(runs, list):
            raise ValueError(f"session {session} has unreadable runs")
        for run in runs:
            if not (
                isinstance(run, dict)
                and isinstance(run.get("run"), str)
                and isinstance(run.get("name"), str)
                and run.get("status") in _RUN_STATUSES
                and isinstance(run.get("attempt"), int)
                and not isinstance(run.get("attempt"), bool)
            ):
                raise ValueError(f"session {session} has an unreadable run report")
            kept.runs[run["run"]] = KeptRun(run["run"], run["name"], run["status"], run["attempt"])
        sessions[session] = kept
    return sessions
