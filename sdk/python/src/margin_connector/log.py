"""Where the SDK says what it could not do but carried on from.

A refused message, a credential it could not save, a link that ended: each is
a warning on the `margin_connector` logger (the standard `logging` module),
with the details as `key=value` after the message.
"""

from __future__ import annotations

import logging
from typing import Any

LOGGER = logging.getLogger("margin_connector")


def warn(log: logging.Logger, text: str, /, **fields: Any) -> None:
    log.warning("%s%s", text, _fields(fields))


def debug(log: logging.Logger, text: str, /, **fields: Any) -> None:
    log.debug("%s%s", text, _fields(fields))


def _fields(fields: dict[str, Any]) -> str:
    return "".join(f" {key}={value!r}" for key, value in fields.items())
