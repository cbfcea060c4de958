"""Conversation identity: the public id of a conversation and the key it is stored under.

A conversation is named by the client's ``X-Conversation-Id`` header, else by a fingerprint of
the organization, the system/developer messages and the first user message. Either way the
stored key is namespaced by organization, so two organizations never share a conversation, and
one organization can never address another's records (its key simply differs).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from typing import Any

from proxy.context.token_formula import fingerprint

MAX_ID_LENGTH = 256


def conversation_key(org: str, public_id: str) -> str:
    """The stored key of ``public_id`` within ``org``."""
    h = hashlib.blake2b(digest_size=16)
    for part in (org, public_id):
        data = part.encode("utf-8", "surrogatepass")
        h.update(len(data).to_bytes(8, "little"))
        h.update(data)
    return h.hexdigest()


def fingerprint_id(org: str, messages: Sequence[Mapping[str, Any]]) -> str:
    """A stable public id for a conversation that sent no ``X-Conversation-Id``."""
    h = hashlib.blake2b(digest_size=12)
    h.update(org.encode())
    first_user = False
    for m in messages:
        role = m.get("role")
        if role in ("system", "developer") or (role == "user" and not first_user):
            h.update(fingerprint(m))
            first_user = first_user or role == "user"
    return "fp-" + h.hexdigest()


def valid_public_id(value: str) -> bool:
    return 0 < len(value) <= MAX_ID_LENGTH and value.isprintable()
