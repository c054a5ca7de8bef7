"""Registry names (`notes.write`) and the wire names providers accept (`notes_write`)."""

from __future__ import annotations

import re

WIRE_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")


def wire_name(name: str) -> str:
    """The real OpenAI and Anthropic APIs reject names outside `^[a-zA-Z0-9_-]{1,64}$`."""
    return re.sub(r"[^a-zA-Z0-9_-]", "_", name)[:64]
