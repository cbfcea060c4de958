"""Conversation identity and exact-prefix hashing."""

from __future__ import annotations

from factories import system, tool_turn, user

from proxy.context.identity import conversation_key, fingerprint_id, valid_public_id
from proxy.context.stages.messages import prefix_hash
from proxy.upstream.usage import UsageScanner, stated_window


def test_keys_are_namespaced_by_organization() -> None:
    assert conversation_key("acme", "c1") != conversation_key("globex", "c1")
    assert conversation_key("acme", "c1") == conversation_key("acme", "c1")
    # Length-prefixed parts: ("ab", "c") and ("a", "bc") must not collide.
    assert conversation_key("ab", "c") != conversation_key("a", "bc")


def test_fingerprint_id_uses_system_and_first_user_only() -> None:
    base = [system("S"), user("task")]
    later = [*base, *tool_turn("read_file", "x"), user("more")]
    assert fingerprint_id("acme", base) == fingerprint_id("acme", later)
    assert fingerprint_id("acme", base) != fingerprint_id("globex", base)
    assert fingerprint_id("acme", base) != fingerprint_id("acme", [system("S"), user("other")])
    assert fingerprint_id("acme", base).startswith("fp-")


def test_prefix_hash_is_exact() -> None:
    msgs = [system("S"), user("task"), *tool_turn("read_file", "out")]
    assert prefix_hash(msgs, 3) == prefix_hash([*msgs, user("new")], 3)
    assert prefix_hash(msgs, 3) != prefix_hash(msgs, 2)
    changed = [*msgs[:2], {**msgs[2], "content": "edited"}, msgs[3]]
    assert prefix_hash(changed, 3) != prefix_hash(msgs, 3)


def test_public_ids() -> None:
    assert valid_public_id("ticket-4711")
    assert not valid_public_id("")
    assert not valid_public_id("x" * 257)
    assert not valid_public_id("line\nbreak")


def test_usage_scanner_finds_usage_split_across_chunks() -> None:
    stream = (b'data: {"choices":[{"delta":{"content":"hi"}}]}\n\n'
              b'data: {"choices":[],"usage":{"prompt_tokens":1234,"completion_tokens":5}}\n\n'
              b"data: [DONE]\n\n")
    for cut in range(1, len(stream)):
        scanner = UsageScanner()
        scanner.feed(stream[:cut])
        scanner.feed(stream[cut:])
        assert scanner.prompt_tokens == 1234, cut


def test_stated_window() -> None:
    body = (b'{"error": {"message": "This model\'s maximum context length is 128,000 tokens. '
            b'However, your messages resulted in 130000 tokens."}}')
    assert stated_window(body) == 128_000
    assert stated_window(b'{"error": {"message": "prompt is too long"}}') is None
