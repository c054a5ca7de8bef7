"""Registry names (`notes.write`) and the wire names providers accept (`notes_write`)."""

from __future__ import annotations

import re
from functools import lru_cache

WIRE_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")


@lru_cache(maxsize=4096)  # a run projects every call's name again on every turn
def wire_name(name: str) -> str:
    """The real OpenAI and Anthropic APIs reject names outside `^[a-zA-Z0-9_-]{1,64}$`."""
    return re.sub(r"[^a-zA-Z0-9_-]", "_", name)[:64]
