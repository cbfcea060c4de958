"""What the real Anthropic Messages API refuses, as pure checks (the Responses API's:
``strict_responses``).

The fake upstream (``fake_apis.answer``) runs these before its responder when
``FakeUpstream.strict`` is on, and answers a refusal as the real API does: status 400,
``invalid_request_error``, with the real API's wording (the path of the faulty part first, as
``messages.3.content.0: ...``). Each check takes a parsed body and returns ``None`` when the real
API would accept it, else the refusal. Only refusals seen from the real APIs are made; where the
real rule is not known exactly, the check errs on the side of accepting.

The fake signs the thinking blocks it issues (``sign_thinking``) and remembers which reasoning
item each Responses item it issued followed (``FakeUpstream.reasoning_of``), so that a request
can be checked against what the fake really answered.

Not checked (the real APIs do): ``redacted_thinking`` data, the order of a turn's thinking
blocks under preserved thinking, Responses ``encrypted_content``, items looked up by id under
``store: false``, tool schemas, and anything of the chat API.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from proxy.testing.fake.prefixes import Prefix as Prefix
from proxy.testing.fake.prefixes import blocks as _blocks
from proxy.testing.fake.prefixes import canonical, digest
from proxy.testing.fake.prefixes import prefix_of as prefix_of

SECRET = b"fake-secret"
MID_CONVERSATION_SYSTEM = "mid-conversation-tool-changes-2026-07-01"
MAX_CACHE_CONTROL = 4
# Models with preserved thinking that bind a thinking block to its prefix (refused, or dropped
# under ``THINKING_BINDING``, when it changed: ``proxy.testing.fake.prefix_check``); names starting
# with one of these.
PRESERVED_THINKING = ("claude-fable-5", "claude-mythos-5", "claude-opus-5-5",
                      "claude-sonnet-5-5", "claude-haiku-5-5")
THINKING_BLOCKS = ("thinking", "redacted_thinking")
THINKING_BINDING = "thinking-binding-controls-2026-08-01"
THINKING_TYPES = ("enabled", "adaptive")

# Fields the Messages API accepts only under a beta: (where, field, beta). ``where`` is
# ``"tools"`` (a field of a tool definition) or ``""`` (a top-level field of the body).
BETA_FIELDS: tuple[tuple[str, str, str], ...] = (
    ("tools", "defer_loading", "advanced-tool-use-2025-11-20"),
    ("tools", "input_examples", "advanced-tool-use-2025-11-20"),
    ("", "context_management", "context-management-2025-06-27"),
)



@dataclass(frozen=True)
class Refusal:
    """A 400 ``invalid_request_error`` as the real API words it; ``param`` (Responses only)
    names the faulty field."""

    message: str
    param: str | None = None


# --- thinking signatures -----------------------------------------------------------------


def sign_thinking(text: str) -> str:
    """The signature the fake issues for a thinking block holding ``text``."""
    mac = hmac.new(SECRET, text.encode(), hashlib.sha256).digest()
    return base64.b64encode(mac).decode()


def thinking_block(text: str) -> dict[str, Any]:
    """A thinking block the fake would have issued: tests building histories use it."""
    return {"type": "thinking", "thinking": text, "signature": sign_thinking(text)}


def thinking_enabled(body: Mapping[str, Any]) -> bool:
    """Whether a Messages request asks for thinking (``enabled`` or ``adaptive``)."""
    thinking = body.get("thinking")
    return isinstance(thinking, dict) and thinking.get("type") in THINKING_TYPES


def betas(headers: Mapping[str, str]) -> frozenset[str]:
    """The betas named in ``anthropic-beta`` headers (comma-separated, any case of the name)."""
    found: set[str] = set()
    for name, value in headers.items():
        if name.lower() == "anthropic-beta":
            found |= {b.strip() for b in value.split(",") if b.strip()}
    return frozenset(found)


# --- Anthropic Messages ------------------------------------------------------------------


def _ids(blocks: list[dict[str, Any]], kind: str, field: str) -> list[str]:
    return [str(b.get(field)) for b in blocks if b.get("type") == kind]


def check_messages(body: Mapping[str, Any], beta: frozenset[str],
                   bound: Mapping[str, set[Prefix]] | None = None) -> Refusal | None:
    """The first thing the real Messages API refuses in ``body`` (sent with betas ``beta``).

    Checked: content blocks that are not objects with a string type; beta-only fields without
    their beta (``BETA_FIELDS``); more than 4
    ``cache_control`` markers; thinking with a forced tool, a temperature other than 1 or a
    budget not under ``max_tokens``; empty messages and empty text blocks; roles
    (``user``/``assistant``, and ``system`` under ``MID_CONVERSATION_SYSTEM``); a first message
    that is not the user's; tool results that answer no ``tool_use`` of the previous message
    and ``tool_use`` blocks the next message does not answer (system messages between them are
    passed over; a final assistant message's calls are not checked); thinking blocks whose
    signature the fake did not issue; with thinking on, a tool loop whose assistant turn (since
    the last user message that holds no tool result) does not start with a thinking block; on
    a model with preserved thinking (``PRESERVED_THINKING``), a thinking block the fake issued
    (``bound``: signature -> the prefixes it was issued after) whose prefix (system, tools,
    everything before it) changed, unless ``drop_block`` is asked for under its beta (then
    ``proxy.testing.fake.prefix_check.drop_thinking`` drops it and every later thinking block).
    """
    return (_shapes(body.get("messages") or []) or _beta_fields(body, beta)
            or _cache_controls(body) or _thinking_settings(body)
            or _empty(body.get("messages") or [])
            or _roles_and_tools(body.get("messages") or [], beta)
            or _signatures(body.get("messages") or []) or _thinking_turn(body)
            or _prefixes(body, beta, bound or {}))


def _shapes(messages: Any) -> Refusal | None:
    """A content block that is not an object with a string ``type`` (the API reads nothing
    else)."""
    for i, m in enumerate(messages if isinstance(messages, list) else []):
        blocks = m.get("content") if isinstance(m, dict) else None
        for j, b in enumerate(blocks if isinstance(blocks, list) else []):
            if not isinstance(b, dict) or not isinstance(b.get("type"), str):
                return Refusal(f"messages.{i}.content.{j}: Input should be a valid dictionary "
                               "with a string 'type'")
    return None


def _beta_fields(body: Mapping[str, Any], beta: frozenset[str]) -> Refusal | None:
    for where, name, needed in BETA_FIELDS:
        if needed in beta:
            continue
        if not where and name in body:
            return Refusal(f"{name}: Extra inputs are not permitted")
        for n, tool in enumerate(body.get(where) or [] if where else []):
            if isinstance(tool, dict) and name in tool:
                return Refusal(f"{where}.{n}.{name}: Extra inputs are not permitted")
    return None


def _thinking_settings(body: Mapping[str, Any]) -> Refusal | None:
    if not thinking_enabled(body):
        return None
    docs = "Please consult our documentation at https://docs.claude.com/en/docs/build-with-claude/"
    budget = body["thinking"].get("budget_tokens")
    if body["thinking"]["type"] == "enabled" and isinstance(budget, int) and not (
            isinstance(body.get("max_tokens"), int) and body["max_tokens"] > budget):
        return Refusal("`max_tokens` must be greater than `thinking.budget_tokens`. " + docs
                       + "extended-thinking#max-tokens-and-context-window-size")
    choice = body.get("tool_choice")
    if isinstance(choice, dict) and choice.get("type") in ("any", "tool"):
        return Refusal("Thinking may not be enabled when tool_choice forces tool use.")
    if body.get("temperature", 1) != 1:
        return Refusal("`temperature` may only be set to 1 when thinking is enabled. " + docs
                       + "extended-thinking#important-considerations-when-using-extended-"
                       "thinking")
    return None


def _empty(messages: list[Any]) -> Refusal | None:
    for i, m in enumerate(messages):
        if not isinstance(m, dict):
            return Refusal(f"messages.{i}: Input should be a valid dictionary")
        content = m.get("content")
        if not content and not (i == len(messages) - 1 and m.get("role") == "assistant"):
            return Refusal(f"messages.{i}: all messages must have non-empty content except for "
                           "the optional final assistant message")
        for b in content if isinstance(content, list) else []:
            text = b.get("text") if isinstance(b, dict) and b.get("type") == "text" else None
            if text == "":
                return Refusal("messages: text content blocks must be non-empty")
            if isinstance(text, str) and not text.strip():
                return Refusal("messages: text content blocks must contain non-whitespace text")
    return None


def _marked(value: Any) -> Iterator[None]:
    """One ``None`` per ``cache_control`` marker in a block list (tool results' nested
    content included)."""
    for block in value if isinstance(value, list) else []:
        if isinstance(block, dict):
            if block.get("cache_control"):
                yield None
            yield from _marked(block.get("content"))


def _cache_controls(body: Mapping[str, Any]) -> Refusal | None:
    found = sum(1 for _ in _marked(body.get("system"))) + sum(1 for _ in _marked(body.get("tools")))
    for m in body.get("messages") or []:
        found += sum(1 for _ in _marked(m.get("content") if isinstance(m, dict) else None))
    if found > MAX_CACHE_CONTROL:
        return Refusal(f"A maximum of {MAX_CACHE_CONTROL} blocks with cache_control may be "
                       f"provided. Found {found}.")
    return None


def last_cache_mark(body: Mapping[str, Any]) -> int | str | None:
    """Where a Messages request's last ``cache_control`` marker is: the index of its message,
    ``"system"``, ``"tools"``, or ``None`` when it has none."""
    for i in range(len(body.get("messages") or []) - 1, -1, -1):
        m = body["messages"][i]
        if any(True for _ in _marked(m.get("content") if isinstance(m, dict) else None)):
            return i
    if any(True for _ in _marked(body.get("system"))):
        return "system"
    return "tools" if any(True for _ in _marked(body.get("tools"))) else None


def _roles_and_tools(messages: list[Any], beta: frozenset[str]) -> Refusal | None:
    system_ok = MID_CONVERSATION_SYSTEM in beta
    previous: list[dict[str, Any]] | None = None  # the previous user/assistant message's blocks
    previous_at = -1
    pending: list[str] = []  # tool_use ids of the previous assistant message
    for i, m in enumerate(messages):
        role = m.get("role") if isinstance(m, dict) else None
        if role == "system" and system_ok:
            continue
        if role not in ("user", "assistant"):
            return Refusal(f"messages.{i}.role: Input should be 'user' or 'assistant'")
        if previous is None and role != "user":
            return Refusal('messages: first message must use the "user" role')
        blocks = _blocks(m)
        answered = set(_ids(blocks, "tool_result", "tool_use_id")) if role == "user" else set()
        missing = [u for u in pending if u not in answered]
        if missing:
            return Refusal(f"messages.{previous_at}: `tool_use` ids were found without "
                           f"`tool_result` blocks immediately after: {', '.join(missing)}. Each "
                           "`tool_use` block must have a corresponding `tool_result` block in "
                           "the next message.")
        for j, b in enumerate(blocks):
            if b.get("type") == "tool_result" and b.get("tool_use_id") not in pending:
                return Refusal(f"messages.{i}.content.{j}: unexpected `tool_use_id` found in "
                               f"`tool_result` blocks: {b.get('tool_use_id')}. Each "
                               "`tool_result` block must have a corresponding `tool_use` block "
                               "in the previous message.")
        pending = _ids(blocks, "tool_use", "id") if role == "assistant" else []
        previous, previous_at = blocks, i
    return None


def _signatures(messages: list[Any]) -> Refusal | None:
    for i, m in enumerate(messages):
        for j, b in enumerate(_blocks(m)):
            if b.get("type") == "thinking" and not hmac.compare_digest(
                    str(b.get("signature", "")), sign_thinking(str(b.get("thinking", "")))):
                return Refusal(f"messages.{i}.content.{j}: Invalid `signature` in `thinking` "
                               "block")
    return None


def preserves_thinking(model: Any) -> bool:
    return isinstance(model, str) and model.startswith(PRESERVED_THINKING)


def drops_asked(body: Mapping[str, Any], beta: frozenset[str]) -> bool:
    """Whether the request asks for a block with a changed prefix to be dropped: its beta and
    ``thinking.block_binding.prefix_mismatch_behavior == "drop_block"``."""
    thinking = body.get("thinking")
    binding = thinking.get("block_binding") if isinstance(thinking, dict) else None
    return THINKING_BINDING in beta and isinstance(binding, dict) and binding.get(
        "prefix_mismatch_behavior") == "drop_block"


def first_mismatch(body: Mapping[str, Any], bound: Mapping[str, set[Prefix]]
                   ) -> tuple[int, int, set[Prefix]] | None:
    """The first thinking block the fake issued (``bound``: signature -> the prefixes it was
    issued after) whose prefix in ``body`` is none of those: (message, block, its prefixes)."""
    for i, m in enumerate(body.get("messages") or []):
        for j, b in enumerate(_blocks(m)):
            made = bound.get(str(b.get("signature"))) if b.get("type") == "thinking" else None
            if made and prefix_of(body, i, j) not in made:
                return i, j, made
    return None


def _prefixes(body: Mapping[str, Any], beta: frozenset[str],
              bound: Mapping[str, set[Prefix]]) -> Refusal | None:
    if drops_asked(body, beta) or not preserves_thinking(body.get("model")):
        return None
    found = first_mismatch(body, bound)
    if found is None:
        return None
    i, j, made = found
    why = (" The `system` prompt differs from the one this block was created with."
           if digest(canonical(body.get("system"))) not in {p[0] for p in made} else "")
    return Refusal(
        f"messages.{i}.content.{j}: Invalid `signature` in `thinking` block. The block "
        "is bound to a different conversation. Remove the block, or set "
        "`thinking.block_binding.prefix_mismatch_behavior` to \"drop_block\". That "
        f"setting requires the `{THINKING_BINDING}` value in the `anthropic-beta` "
        f"header.{why}")


def _thinking_turn(body: Mapping[str, Any]) -> Refusal | None:
    """With thinking on and a tool result last, the assistant turn (from the last user message
    that is no tool result) must open with a thinking or redacted thinking block."""
    messages = [(i, m) for i, m in enumerate(body.get("messages") or [])
                if isinstance(m, dict) and m.get("role") in ("user", "assistant")]
    if not thinking_enabled(body) or not messages or not _ids(
            _blocks(messages[-1][1]), "tool_result", "tool_use_id"):
        return None
    first: tuple[int, dict[str, Any]] | None = None
    for i, m in reversed(messages):
        if m["role"] == "assistant":
            first = (i, m)
        elif not _ids(_blocks(m), "tool_result", "tool_use_id"):
            break
    if first is None:
        return None
    blocks = _blocks(first[1])
    found = blocks[0].get("type") if blocks else "nothing"
    if found in (*THINKING_BLOCKS, "compaction"):  # a compacted turn: not known, accepted
        return None
    return Refusal(
        f"messages.{first[0]}.content.0.type: Expected `thinking` or `redacted_thinking`, but "
        f"found `{found}`. When `thinking` is enabled, a final `assistant` message must start "
        "with a thinking block (preceeding the lastmost set of `tool_use` and `tool_result` "
        "blocks). We recommend you include thinking blocks from previous turns. To avoid this "
        "requirement, disable `thinking`. Please consult our documentation at "
        "https://docs.claude.com/en/docs/build-with-claude/extended-thinking")
