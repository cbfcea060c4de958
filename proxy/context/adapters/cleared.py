"""The placeholder of cleared tool-call arguments (``masking.clear_tool_inputs``), as every
adapter and the masking stage know it: the chat-style arguments text is a JSON object,
``{"cleared": "[tool input cleared: N tokens from write_file; spill <id>]"}``, which keeps the
call valid in every API (an object for Anthropic's ``input``, a JSON object text for the chat and
Responses ``arguments``; a custom tool call's free-text ``input`` gets the placeholder itself).
"""

from __future__ import annotations

import json
from typing import Any

INPUT_PREFIX = "[tool input cleared: "
CLEARED_KEY = "cleared"
_CLEARED_HEAD = json.dumps({CLEARED_KEY: INPUT_PREFIX})[:-2]  # '{"cleared": "[tool input...'


def input_placeholder(tool_name: str, tokens: int, sid: str, short: int) -> str:
    """The placeholder text: the tool, the tokens cleared and the spill id's first ``short``
    digits."""
    return f"{INPUT_PREFIX}{tokens:,} tokens from {tool_name}; spill {sid[:short]}]"


def cleared_arguments(text: str) -> str:
    """The arguments text a cleared call carries: a JSON object naming what was cleared."""
    return json.dumps({CLEARED_KEY: text})


def is_cleared(arguments: Any) -> bool:
    return isinstance(arguments, str) and arguments.startswith(_CLEARED_HEAD)


def cleared_text(arguments: str) -> str:
    """The placeholder inside cleared arguments (for an API whose input is free text)."""
    value = json.loads(arguments).get(CLEARED_KEY)
    return value if isinstance(value, str) else arguments
