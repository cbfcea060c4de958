"""OpenAI's message-ordering rules for chat completions, as a validator.

Rules checked (each violation is reported with the index of the message at fault):

- every message is an object with a valid ``role``: system, developer, user, assistant, tool or
  function (the legacy function-calling role);
- an assistant ``tool_calls`` value is a non-empty list of calls, each with a string ``id`` that is
  unique within the message;
- every ``tool`` message has a ``tool_call_id`` answering a call of the assistant message just
  before the run of tool messages it belongs to, and answers it only once;
- every call is answered before the next non-tool message.

Trailing calls: an assistant ``tool_calls`` message at the very end whose calls are unanswered is
an error by default, because the upstream rejects a request that ends that way (a chat request must
carry every result of the calls it shows). Pass ``allow_trailing_calls=True`` to validate a
transcript that is still being produced (e.g. a stored history just before the tools ran).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

VALID_ROLES = frozenset({"system", "developer", "user", "assistant", "tool", "function"})


class OrderingError(ValueError):
    """The message list breaks OpenAI's ordering rules; ``problems`` lists each violation."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("; ".join(problems))
        self.problems = problems


def _call_ids(index: int, calls: Any, problems: list[str]) -> list[str]:
    if not isinstance(calls, list) or not calls:
        problems.append(f"messages[{index}]: tool_calls must be a non-empty list")
        return []
    ids: list[str] = []
    for j, call in enumerate(calls):
        cid = call.get("id") if isinstance(call, dict | Mapping) else None
        if not isinstance(cid, str) or not cid:
            problems.append(f"messages[{index}].tool_calls[{j}]: missing id")
        elif cid in ids:
            problems.append(f"messages[{index}].tool_calls[{j}]: duplicate id {cid!r}")
        else:
            ids.append(cid)
    return ids


def ordering_problems(
    messages: Sequence[Any], *, allow_trailing_calls: bool = False
) -> list[str]:
    """Every ordering violation in ``messages``; an empty list means the list is valid."""
    problems: list[str] = []
    pending: list[str] = []  # calls of the current assistant message not yet answered
    caller = -1  # index of that assistant message
    for i, msg in enumerate(messages):
        # dict first: JSON gives dicts, and the ABC check is many times slower
        if not isinstance(msg, dict | Mapping) or msg.get("role") not in VALID_ROLES:
            role = msg.get("role") if isinstance(msg, dict | Mapping) else None
            problems.append(f"messages[{i}]: invalid role {role!r}")
            continue
        role = msg["role"]
        if role == "tool":
            cid = msg.get("tool_call_id")
            if cid in pending:
                pending.remove(cid)
            else:
                problems.append(
                    f"messages[{i}]: tool message answers no open call (tool_call_id {cid!r})"
                )
            continue
        if pending:
            problems.append(
                f"messages[{caller}]: tool calls {pending} not answered before messages[{i}]"
            )
        pending, caller = [], -1
        if role == "assistant" and msg.get("tool_calls") is not None:
            pending, caller = _call_ids(i, msg.get("tool_calls"), problems), i
    if pending and not allow_trailing_calls:
        problems.append(f"messages[{caller}]: tool calls {pending} never answered")
    return problems


def check_ordering(messages: Sequence[Any], *, allow_trailing_calls: bool = False) -> None:
    """Raise ``OrderingError`` listing every violation unless ``messages`` is valid."""
    problems = ordering_problems(messages, allow_trailing_calls=allow_trailing_calls)
    if problems:
        raise OrderingError(problems)
