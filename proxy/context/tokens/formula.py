"""The token-counting formula and the cache's fingerprints (used by the counter, ``.counter``).

Counting follows OpenAI's cookbook formula: every message costs ``PER_MESSAGE`` tokens plus its
role and content, a ``name`` costs one extra token, and a reply is primed with ``REPLY_PRIMING``
tokens. Tool calls count their function name and arguments (ids are not shown to the model), and
the request's ``tools`` schemas count as their compact JSON plus a small per-tool overhead.

Model to encoding: ``tiktoken`` knows OpenAI's names; other spellings of the OpenAI families are
mapped by rule (gpt-4o/4.1/4.5/5 and o1/o3/o4 → o200k_base, gpt-4/3.5 and embeddings →
cl100k_base). Unknown models (Llama, Qwen, Mistral, …) use **cl100k_base**, which is litellm's
fallback too; its smaller vocabulary tends to count slightly more tokens, the safe direction for a
window guard. The upstream's reported usage corrects the estimate later (SPEC section 3).

tiktoken cannot download encodings here, so ``TIKTOKEN_CACHE_DIR`` is pointed at the copies that
litellm ships (unless the user set it) without importing litellm, whose import takes seconds.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
from collections.abc import Iterable, Mapping
from typing import Any

import tiktoken
import tiktoken.model

PER_MESSAGE = 3
PER_NAME = 1
REPLY_PRIMING = 3
PER_TOOL_CALL = 3
PER_TOOL_SCHEMA = 8
TOOLS_PREAMBLE = 12
IMAGE_TOKENS = 765  # a 1024x1024 image at high detail; the usual size
IMAGE_TOKENS_LOW = 85
AUDIO_TOKENS = 200
DEFAULT_ENCODING = "cl100k_base"
# Encodings whose rank files are not shipped map to the closest one that is.
_SUBSTITUTE = {"r50k_base": "p50k_base", "p50k_edit": "p50k_base", "gpt2": "p50k_base"}
_O200K_FAMILIES = ("gpt-4o", "gpt-4.1", "gpt-4.5", "gpt-5", "chatgpt-4o", "gpt-oss")
_CL100K_FAMILIES = ("gpt-4", "gpt-3.5", "gpt-35", "text-embedding")

Message = Mapping[str, Any]


def _bundled_tiktoken_dir() -> str | None:
    spec = importlib.util.find_spec("litellm")  # locates the package without importing it
    if spec is None or spec.origin is None:
        return None
    path = os.path.join(os.path.dirname(spec.origin), "litellm_core_utils", "tokenizers")
    return path if os.path.isdir(path) else None


def configure_tiktoken_cache() -> None:
    """Point tiktoken at litellm's bundled encodings unless ``TIKTOKEN_CACHE_DIR`` is set."""
    if "TIKTOKEN_CACHE_DIR" not in os.environ:
        path = _bundled_tiktoken_dir()
        if path:
            os.environ["TIKTOKEN_CACHE_DIR"] = path


configure_tiktoken_cache()

def encoding_name_for(model: str) -> str:
    """The tiktoken encoding that counts ``model`` (a provider prefix like ``openai/`` dropped)."""
    base = model.strip().lower().rsplit("/", 1)[-1]
    try:
        name: str | None = tiktoken.model.encoding_name_for_model(base)
    except KeyError:
        name = None
    if name is None:
        reasoning = base[:2] in ("o1", "o3", "o4") and (len(base) == 2 or not base[2].isalnum())
        if reasoning or any(f in base for f in _O200K_FAMILIES):
            name = "o200k_base"
        elif any(f in base for f in _CL100K_FAMILIES):
            name = "cl100k_base"
        else:
            name = DEFAULT_ENCODING
    return _SUBSTITUTE.get(name, name)


# --- fingerprints: what the cache is keyed by ---------------------------------------------------


def _update_str(h: Any, key: str, s: str) -> None:
    data = s.encode("utf-8", "surrogatepass")  # JSON may carry lone surrogates
    h.update(b"%s\x00%d\x00" % (key.encode(), len(data)))  # length-prefixed: no run-ins
    h.update(data)


def _update_json(h: Any, key: str, v: Any) -> None:
    _update_str(h, key, json.dumps(v, sort_keys=True, ensure_ascii=False, default=str))


def fingerprint(message: Message) -> bytes:
    """A 128-bit digest of everything in ``message`` that its token count depends on.

    Strings are hashed directly; only small structured values go through ``json.dumps``, so a
    warm lookup costs about one pass of blake2b over the message's text.
    """
    h = hashlib.blake2b(digest_size=16)
    for key in sorted(message):
        value = message[key]
        if isinstance(value, str):
            _update_str(h, key, value)
        elif value is None:
            _update_str(h, key, "\x00None")
        elif key == "tool_calls" and isinstance(value, list):
            for call in value:
                fn = call.get("function") if isinstance(call, Mapping) else None
                if isinstance(fn, Mapping):
                    _update_str(h, "call.name", str(fn.get("name") or ""))
                    _update_str(h, "call.arguments", str(fn.get("arguments") or ""))
                else:
                    _update_json(h, "call", call)
        elif key == "content" and isinstance(value, list):
            for part in value:
                text = part.get("text") if isinstance(part, Mapping) else None
                if isinstance(text, str):
                    _update_str(h, "part." + str(part.get("type", "text")), text)
                else:
                    _update_json(h, "part", part)
        else:
            _update_json(h, key, value)
    return h.digest()


# --- the counting formula -----------------------------------------------------------------------

# Texts longer than this are encoded in pieces: tiktoken releases the GIL while it encodes but
# not while it builds the Python list of ids, which for one huge output would stall the loop.
CHUNK_CHARS = 65_536


def _boundary(text: str, lo: int, hi: int) -> int:
    """A split point in ``text[lo:hi]`` where tokenization starts afresh anyway.

    After a newline followed by a letter or digit, or before a space between two words, no
    pre-token of cl100k_base or o200k_base spans the split, so the pieces' counts add up to the
    whole's. Without such a point (a 64k-character blob), a hard cut may be off by a token.
    """
    i = text.rfind("\n", lo, hi)
    while i > lo:
        if text[i + 1].isalnum():
            return i + 1
        i = text.rfind("\n", lo, i)
    i = text.rfind(" ", lo, hi)
    while i > lo:
        if text[i - 1].isalnum() and text[i + 1].isalpha():
            return i
        i = text.rfind(" ", lo, i)
    return hi


def count_text(enc: tiktoken.Encoding, text: str) -> int:
    """Tokens of ``text`` (special-token text counts as plain text), never one huge list."""
    if len(text) <= SHORT_CHARS:
        return _short_count(enc, text)
    if len(text) <= CHUNK_CHARS:
        return len(enc.encode_ordinary(text))
    total, start = 0, 0
    while start < len(text):
        end = len(text) if len(text) - start <= CHUNK_CHARS else \
            _boundary(text, start + CHUNK_CHARS // 2, start + CHUNK_CHARS)
        total += len(enc.encode_ordinary(text[start:end]))
        start = end
    return total


# Short texts recur in every message (roles, names, tool names, small arguments): their counts
# are remembered, since each call into the encoder costs far more than its few characters (on a
# busy machine, its vocabulary lookups miss the CPU caches).
SHORT_CHARS = 48
_SHORT_LIMIT = 8192
_short: dict[tuple[str, str], int] = {}


def _short_count(enc: tiktoken.Encoding, text: str) -> int:
    key = (enc.name, text)
    n = _short.get(key)
    if n is None:
        n = len(enc.encode_ordinary(text))
        if len(_short) >= _SHORT_LIMIT:  # bounded: texts come from clients
            _short.clear()
        _short[key] = n
    return n


def _part_tokens(enc: tiktoken.Encoding, part: Any) -> int:
    if isinstance(part, Mapping):
        text = part.get("text")
        if isinstance(text, str):
            return count_text(enc, text)
        kind = part.get("type")
        if kind in ("image_url", "input_image", "image"):
            detail = part.get("image_url", {}) if isinstance(part.get("image_url"), Mapping) else {}
            return IMAGE_TOKENS_LOW if detail.get("detail") == "low" else IMAGE_TOKENS
        if kind in ("input_audio", "audio"):
            return AUDIO_TOKENS
    if isinstance(part, str):
        return count_text(enc, part)
    return count_text(enc, json.dumps(part, ensure_ascii=False, default=str))


def _content_tokens(enc: tiktoken.Encoding, content: Any) -> int:
    if content is None:
        return 0
    if isinstance(content, str):
        return count_text(enc, content)
    if isinstance(content, list):
        return sum(_part_tokens(enc, p) for p in content)
    return _part_tokens(enc, content)


def _call_tokens(enc: tiktoken.Encoding, call: Any) -> int:
    fn = call.get("function") if isinstance(call, Mapping) else None
    if not isinstance(fn, Mapping):
        return PER_TOOL_CALL + _part_tokens(enc, call)
    name, args = str(fn.get("name") or ""), fn.get("arguments") or ""
    args_text = args if isinstance(args, str) else json.dumps(args, default=str)
    return PER_TOOL_CALL + count_text(enc, name) + count_text(enc, args_text)


def encode_message(enc: tiktoken.Encoding, message: Message) -> tuple[int, int]:
    """(total tokens of the message, tokens of its content alone)."""
    content = _content_tokens(enc, message.get("content"))
    total = PER_MESSAGE + content
    for key, value in message.items():
        if key in ("content", "tool_call_id"):
            continue  # content counted above; call ids are not rendered to the model
        if key == "tool_calls" and isinstance(value, list):
            total += sum(_call_tokens(enc, c) for c in value)
        elif key == "function_call" and value is not None:
            total += _call_tokens(enc, {"function": value})
        elif isinstance(value, str):
            total += count_text(enc, value) + (PER_NAME if key == "name" else 0)
    return total, content


def approx_chars(messages: Iterable[Message]) -> int:
    n = 0
    for m in messages:
        c = m.get("content")
        if isinstance(c, str):
            n += len(c)
        elif isinstance(c, list):
            n += sum(len(str(p.get("text", ""))) if isinstance(p, Mapping) else 0 for p in c)
        for call in m.get("tool_calls") or ():
            fn = call.get("function") if isinstance(call, Mapping) else None
            if isinstance(fn, Mapping):
                n += len(str(fn.get("arguments") or ""))
    return n


def _frozen(value: Any) -> Any:
    """A hashable stand-in for a JSON value (rare shapes: lists and objects)."""
    return json.dumps(value, sort_keys=True, ensure_ascii=False, default=str)


def _call_key(call: Any) -> Any:
    fn = call.get("function") if isinstance(call, dict | Mapping) else None
    if isinstance(fn, dict | Mapping) and isinstance(fn.get("arguments", ""), str):
        return (fn.get("name"), fn.get("arguments"))
    return _frozen(call)


def _part_key(part: Any) -> Any:
    if isinstance(part, dict | Mapping) and isinstance(part.get("text"), str) and len(part) == 2:
        return (part.get("type"), part["text"])
    return _frozen(part)


def cache_key(message: Message) -> int:
    """The token cache's key for ``message``: every field its count depends on, hashed.

    Python's own (per-process randomized) string hashing over a frozenset of (field, value):
    several times cheaper than a cryptographic digest, blind to the order of the message's keys,
    and 64 bits, which makes a collision (a wrong count, never a wrong message) negligible for a
    cache of this size. Stored prefix hashes use ``fingerprint`` instead.
    """
    items: list[tuple[str, Any]] = []
    for key, value in message.items():
        if key == "tool_call_id":
            continue  # not rendered to the model: not part of the count
        if isinstance(value, str) or value is None:
            items.append((key, value))
        elif key == "tool_calls" and isinstance(value, list):
            items.append((key, tuple(_call_key(c) for c in value)))
        elif key == "content" and isinstance(value, list):
            items.append((key, tuple(_part_key(p) for p in value)))
        else:
            items.append((key, _frozen(value)))
    return hash(frozenset(items))
