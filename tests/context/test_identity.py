"""Conversation identity (``proxy.context.identity``): namespaced keys, fingerprints, public ids."""

from __future__ import annotations

from factories import system, tool_turn, user

from proxy.context.identity import conversation_key, fingerprint_id, valid_public_id


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


def test_public_ids() -> None:
    assert valid_public_id("ticket-4711")
    assert not valid_public_id("")
    assert not valid_public_id("x" * 257)
    assert not valid_public_id("line\nbreak")
