"""Message helpers (``proxy.context.stages.shared``): exact-prefix hashing."""

from __future__ import annotations

from factories import system, tool_turn, user

from proxy.context.stages.shared import prefix_hash


def test_prefix_hash_is_exact() -> None:
    msgs = [system("S"), user("task"), *tool_turn("read_file", "out")]
    assert prefix_hash(msgs, 3) == prefix_hash([*msgs, user("new")], 3)
    assert prefix_hash(msgs, 3) != prefix_hash(msgs, 2)
    changed = [*msgs[:2], {**msgs[2], "content": "edited"}, msgs[3]]
    assert prefix_hash(changed, 3) != prefix_hash(msgs, 3)
