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
an error, because the upstream rejects a request that ends that way (a chat request must carry
every result of the calls it shows).

``OrderingCheck`` takes the messages one at a time, so the request parser checks shape and
ordering in one walk; ``ordering_problems`` runs it over a whole list.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

VALID_ROLES = frozenset({"system", "developer", "user", "assistant", "tool", "function"})


class OrderingCheck:
    """Feed messages in order with ``feed``; ``finish`` returns every violation found."""

    __slots__ = ("caller", "pending", "problems")

    def __init__(self) -> None:
        self.problems: list[str] = []
        self.pending: list[str] = []  # calls of the current assistant message not yet answered
        self.caller = -1  # index of that assistant message

    def feed(self, i: int, msg: Any) -> None:
        # dict first: JSON gives dicts, and the ABC check is many times slower
        role = msg.get("role") if type(msg) is dict or isinstance(msg, Mapping) else None
        if role not in VALID_ROLES:
            self.problems.append(f"messages[{i}]: invalid role {role!r}")
            return
        self.step(i, role, msg)

    def step(self, i: int, role: str, msg: Mapping[str, Any]) -> None:
        """``feed`` for a message already known to be a mapping with a valid ``role``."""
        if role == "tool":
            cid = msg.get("tool_call_id")
            if cid in self.pending:
                self.pending.remove(cid)
            else:
                self.problems.append(
                    f"messages[{i}]: tool message answers no open call (tool_call_id {cid!r})")
            return
        if self.pending:
            self.problems.append(f"messages[{self.caller}]: tool calls {self.pending} not "
                                 f"answered before messages[{i}]")
            self.pending, self.caller = [], -1
        if role == "assistant":
            calls = msg.get("tool_calls")
            if calls is not None:
                self.pending, self.caller = _call_ids(i, calls, self.problems), i

    def finish(self) -> list[str]:
        if self.pending:
            self.problems.append(f"messages[{self.caller}]: tool calls {self.pending} never "
                                 "answered")
            self.pending = []
        return self.problems


def _call_ids(index: int, calls: Any, problems: list[str]) -> list[str]:
    if not isinstance(calls, list) or not calls:
        problems.append(f"messages[{index}]: tool_calls must be a non-empty list")
        return []
    ids: list[str] = []
    for j, call in enumerate(calls):
        cid = call.get("id") if type(call) is dict or isinstance(call, Mapping) else None
        if not isinstance(cid, str) or not cid:
            problems.append(f"messages[{index}].tool_calls[{j}]: missing id")
        elif cid in ids:
            problems.append(f"messages[{index}].tool_calls[{j}]: duplicate id {cid!r}")
        else:
            ids.append(cid)
    return ids


def ordering_problems(messages: Sequence[Any]) -> list[str]:
    """Every ordering violation in ``messages``; an empty list means the list is valid."""
    check = OrderingCheck()
    for i, msg in enumerate(messages):
        check.feed(i, msg)
    return check.finish()
