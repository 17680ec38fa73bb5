"""The demo Planner's one idea, with no model: a decision card for every
block that asks (ends in `?`) or is marked `TBD`, keyed by the block's digest
so a second turn over the same text replays its cards instead of adding twins
(SPEC D2, D3). The same rules as server/src/demo.rs and the TypeScript demo."""

from __future__ import annotations

import re

from margin_connector.wire import BlockEntry, CardInput

# Most cards one `open_decisions` batch may hold.
MAX_BATCH = 32
# Longest question a card may hold, in bytes.
MAX_QUESTION_BYTES = 500

# Questions that open with one of these are answered yes or no.
OPENERS = {"should", "shall", "do", "does", "did", "is", "are", "can", "could", "will", "would", "must"}

# Anything but letters and digits separates words (as \p{Alphabetic}\p{N} does).
_NON_WORD = re.compile(r"[^\w]|_")


def open_questions(outline: list[BlockEntry]) -> list[CardInput]:
    """A card for every block that asks or is marked `TBD`, in document order (at most one batch)."""
    cards: list[CardInput] = []
    for block in outline:
        if len(cards) >= MAX_BATCH:
            break
        text = block["text"].strip()
        asks = text.endswith("?") or text.endswith("？")
        tbd = "TBD" in _NON_WORD.split(text)
        if not asks and not tbd:
            continue
        cards.append(
            {
                "key": f"open-question-{block['digest'][:16]}",
                "question": one_line(text if asks else f"Decide what is still TBD: {text}"),
                "response": "yes_no" if asks and _is_yes_no(text) else "free_text",
                "choices": [],
                "passages": [{"index": block["index"], "digest": block["digest"]}],
            }
        )
    return cards


def _is_yes_no(question: str) -> bool:
    words = question.split()
    return bool(words) and words[0].lower() in OPENERS


def one_line(text: str) -> str:
    """`text` on one line, cut at a character boundary to fit a card."""
    line = " ".join(text.split())
    data = line.encode("utf-8")
    if len(data) <= MAX_QUESTION_BYTES:
        return line
    ellipsis = "…"
    end = MAX_QUESTION_BYTES - len(ellipsis.encode("utf-8"))
    # A UTF-8 continuation byte (10xxxxxx) is no boundary.
    while end > 0 and (data[end] & 0xC0) == 0x80:
        end -= 1
    return data[:end].decode("utf-8") + ellipsis
