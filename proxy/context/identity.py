"""Conversation identity: the public id of a conversation and the key it is stored under.

A conversation is named by the client's ``X-Conversation-Id`` header, else by a fingerprint of
the organization, the opening system/developer messages and the first user message. Either way the
stored key is namespaced by organization, so two organizations never share a conversation, and
one organization can never address another's records (its key simply differs).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from typing import Any

from proxy.context.tokens.formula import fingerprint

MAX_ID_LENGTH = 256


def conversation_key(org: str, public_id: str) -> str:
    """The stored key of ``public_id`` within ``org``."""
    found = _keys.get((org, public_id))
    if found is None:
        h = hashlib.blake2b(digest_size=16)
        for part in (org, public_id):
            data = part.encode("utf-8", "surrogatepass")
            h.update(len(data).to_bytes(8, "little"))
            h.update(data)
        if len(_keys) >= _MEMO_LIMIT:
            _keys.clear()
        found = _keys[(org, public_id)] = h.hexdigest()
    return found


_keys: dict[tuple[str, str], str] = {}  # a conversation's key is asked for on every turn


def fingerprint_id(org: str, messages: Sequence[Mapping[str, Any]]) -> str:
    """A stable public id for a conversation that sent no ``X-Conversation-Id``: a digest of
    the organization, the system/developer messages before the first user message and that
    message. A system message later in the list (an agent's note on its environment, which it
    may change from turn to turn) does not name the conversation."""
    picked: list[Mapping[str, Any]] = []
    for m in messages:
        role = m.get("role")
        if role in ("system", "developer") or role == "user":
            picked.append(m)
            if role == "user":
                break
    memo_key = _memo_key(org, picked)
    found = _memo.get(memo_key) if memo_key is not None else None
    if found is None:
        h = hashlib.blake2b(digest_size=12)
        h.update(org.encode())
        for m in picked:
            h.update(fingerprint(m))
        found = "fp-" + h.hexdigest()
        if memo_key is not None:
            if len(_memo) >= _MEMO_LIMIT:
                _memo.clear()
            _memo[memo_key] = found
    return found


# The same opening arrives every turn: remember its id by the exact values (a dict compares
# them after hashing, so a hit is never a collision), sparing the digest of the system prompt.
_memo: dict[tuple[Any, ...], str] = {}
_MEMO_LIMIT = 10_000


def _memo_key(org: str, picked: Sequence[Mapping[str, Any]]) -> tuple[Any, ...] | None:
    parts: list[Any] = [org]
    for m in picked:
        items = tuple(sorted(m.items()))
        if not all(type(v) is str for _, v in items):
            return None  # content parts and the like: digest them every time
        parts.append(items)
    return tuple(parts)


def valid_public_id(value: str) -> bool:
    return 0 < len(value) <= MAX_ID_LENGTH and value.isprintable()
