"""The fake upstream's prompt cache: what of a prompt a provider would serve from its cache."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class PromptCache:
    """A provider's prompt cache, emulated the way OpenAI bills it.

    Per API key, model and route (OpenAI's ``prompt_cache_key``: another key lands elsewhere, a
    miss) the recent prompts are remembered; a new prompt is served from cache for the longest
    prefix it shares with one of them: the same ``tools``, then the same leading messages, whole
    messages at a time. A prompt of another ``mode`` (Anthropic: another ``tool_choice`` or
    thinking setting) shares at most its ``head`` leading messages (the system prompt). Tools
    alone are never served: at least one leading message must be shared. Nothing is cached
    under ``min_tokens`` (1,024) shared tokens, and what is cached is counted in steps of
    ``step`` (128) tokens, rounded down (Anthropic bills exact counts: a simplification).
    """

    min_tokens: int = 1024
    step: int = 128
    keep: int = 64  # prompts remembered per key and model
    enabled: bool = True
    _seen: dict[tuple[str, str, str], list[tuple[Any, Any, list[dict[str, Any]]]]] = \
        field(default_factory=dict)

    def cached_tokens(self, key: str, body: dict[str, Any], message_tokens: list[int],
                      tools_tokens: int, *, route: str = "", mode: Any = None, head: int = 0
                      ) -> int:
        """What a prompt would be served from cache; the prompt is then remembered.
        ``message_tokens`` counts each message; ``tools_tokens`` the tools schemas."""
        if not self.enabled:
            return 0
        model, tools = str(body.get("model")), body.get("tools")
        messages = body.get("messages") or []
        seen = self._seen.setdefault((key, model, route), [])
        n = 0
        for old_tools, old_mode, old in reversed(seen):  # newest first: usually the previous turn
            if old_tools == tools:
                common = _common(messages, old)
                n = max(n, common if old_mode == mode else min(common, head))
                if n == len(old):
                    break
        seen.append((tools, mode, messages))
        del seen[:-self.keep]
        # Tools are rendered first, then the messages.
        shared = tools_tokens + sum(message_tokens[:n]) if n else 0
        return shared // self.step * self.step if shared >= self.min_tokens else 0


    def expire(self) -> None:
        """Forget every cached prompt: the conversation was idle longer than the provider keeps
        its cache (minutes on OpenAI and Anthropic's default cache)."""
        self._seen.clear()

    def written(self, prompt_tokens: int, cached: int) -> int:
        """OpenAI's ``cache_write_tokens`` (its newest models): the tokens of a prompt beyond
        its ``cached`` prefix that the cache now stores, under the same rules (nothing under
        ``min_tokens``, steps of ``step``)."""
        if not self.enabled or prompt_tokens < self.min_tokens:
            return 0
        return max(0, prompt_tokens // self.step * self.step - cached)


def _common(messages: list[dict[str, Any]], old: list[dict[str, Any]]) -> int:
    """How many leading messages two prompts share."""
    if len(old) <= len(messages) and messages[:len(old)] == old:
        return len(old)  # one comparison in C: the usual case, a grown conversation
    n = 0
    while n < min(len(messages), len(old)) and messages[n] == old[n]:
        n += 1
    return n
