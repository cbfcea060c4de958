"""Token accounting: encodings, the cookbook formula, agreement with tiktoken, the cache."""

from __future__ import annotations

import asyncio
import copy
import json
import os
import subprocess
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
import tiktoken
from factories import assistant, parallel_turn, system, tool_call, tool_turn, user, words

from proxy.context.offload import (
    OFFLOAD_SWITCH_INTERVAL,
    offload_for,
    run_inline,
    run_off_loop,
)
from proxy.context.tokens import formula as tokens
from proxy.context.tokens.counter import TokenCounter
from proxy.context.tokens.formula import encoding_name_for

MIXED_CORPUS = [
    "The quick brown fox jumps over the lazy dog. " * 40,
    "def fib(n: int) -> int:\n    return n if n < 2 else fib(n - 1) + fib(n - 2)\n" * 30,
    json.dumps({"items": [{"id": i, "name": f"item-{i}", "price": i * 1.25} for i in range(80)]}),
    "上下文窗口管理：当对话变长时，代理会压缩较早的消息。" * 25,
    "Ünïcödé façade naïve café résumé — emojis 🚀🔥✨ and symbols ∑∫√≈ " * 20,
    "| col a | col b |\n|---|---|\n| 12,431 | 0x3f9a |\n" * 40,
    "2024-05-13T10:22:01Z ERROR [worker-7] connection reset by peer (errno=104)\n" * 30,
    "<|endoftext|> special tokens are counted as plain text here",
]


@pytest.mark.parametrize(
    ("model", "expected"),
    [
        ("gpt-4o", "o200k_base"),
        ("gpt-4o-mini-2024-07-18", "o200k_base"),
        ("gpt-4.1-mini", "o200k_base"),
        ("o3-mini", "o200k_base"),
        ("o1", "o200k_base"),
        ("gpt-5", "o200k_base"),
        ("openai/gpt-4o", "o200k_base"),
        ("azure/my-gpt-4o-deployment", "o200k_base"),
        ("gpt-4", "cl100k_base"),
        ("gpt-4-turbo", "cl100k_base"),
        ("gpt-3.5-turbo", "cl100k_base"),
        ("text-embedding-3-small", "cl100k_base"),
        ("text-davinci-003", "p50k_base"),
        ("davinci", "p50k_base"),  # r50k_base is not shipped; p50k_base is its closest
        ("meta-llama/Llama-3.1-8B-Instruct", "cl100k_base"),
        ("o1mini-custom", "cl100k_base"),
    ],
)
def test_encoding_for_model(model: str, expected: str) -> None:
    assert encoding_name_for(model) == expected


def test_every_mapped_encoding_loads_offline() -> None:
    counter = TokenCounter()
    for model in ("gpt-4o", "gpt-4", "text-davinci-003", "davinci", "gpt-oss-20b"):
        assert counter.text_tokens("hello world", model) == 2


def test_cache_dir_points_at_litellm_copies(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TIKTOKEN_CACHE_DIR", raising=False)
    tokens.configure_tiktoken_cache()
    path = os.environ["TIKTOKEN_CACHE_DIR"]
    assert path.endswith(os.path.join("litellm_core_utils", "tokenizers"))
    assert len([f for f in os.listdir(path) if len(f) == 40]) >= 3  # the sha1-named rank files


def test_user_cache_dir_is_respected(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", "/somewhere/else")
    tokens.configure_tiktoken_cache()
    assert os.environ["TIKTOKEN_CACHE_DIR"] == "/somewhere/else"


def test_importing_tokens_does_not_import_litellm() -> None:
    code = "import sys, proxy.context.tokens.counter; print('litellm' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_cookbook_formula() -> None:
    c = TokenCounter()
    # 3 per message + role (1) + "hello world" (2) + reply priming 3: what litellm also says.
    assert c.count_messages([user("hello world")], "gpt-4o") == 9
    named = c.count_messages([user("hello world", name="alice")], "gpt-4o")
    assert named == 9 + 1 + c.text_tokens("alice", "gpt-4o")
    assert c.count_messages([], "gpt-4o") == 3


def test_tool_calls_count_name_and_arguments() -> None:
    c = TokenCounter()
    args = {"path": "src/app.py", "content": words(300, 1)}
    call = tool_call("write_file", args)
    plain = c.message_tokens(assistant(None), "gpt-4o")
    with_call = c.message_tokens(assistant(None, call), "gpt-4o")
    expected = 3 + c.text_tokens("write_file", "gpt-4o") + c.text_tokens(
        call["function"]["arguments"], "gpt-4o")
    assert with_call - plain == expected


def test_tools_schemas_are_counted() -> None:
    c = TokenCounter()
    schema = {"type": "function", "function": {
        "name": "read_file", "description": words(200, 2),
        "parameters": {"type": "object", "properties": {"path": {"type": "string"}}}}}
    msgs = [user("hi")]
    extra = c.count_messages(msgs, "gpt-4o", tools=[schema]) - c.count_messages(msgs, "gpt-4o")
    body = json.dumps(schema["function"], separators=(",", ":"))
    assert extra == tokens.TOOLS_PREAMBLE + tokens.PER_TOOL_SCHEMA + c.text_tokens(body, "gpt-4o")


def test_content_parts_and_images() -> None:
    c = TokenCounter()
    parts = [{"type": "text", "text": "look at this"},
             {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}},
             {"type": "image_url", "image_url": {"url": "https://x/y.png", "detail": "low"}}]
    got = c.content_tokens(user(parts), "gpt-4o")  # type: ignore[arg-type]
    assert got == c.text_tokens("look at this", "gpt-4o") + tokens.IMAGE_TOKENS + \
        tokens.IMAGE_TOKENS_LOW
    assert c.message_tokens({"role": "assistant", "content": None}, "gpt-4o") == 4


def test_text_counts_equal_tiktoken() -> None:
    c = TokenCounter()
    for model in ("gpt-4o", "gpt-4"):
        enc = tiktoken.encoding_for_model(model)
        for text in MIXED_CORPUS:
            assert c.text_tokens(text, model) == len(enc.encode(text, disallowed_special=()))


def _corpus_messages() -> list[dict[str, Any]]:
    msgs: list[dict[str, Any]] = [system(MIXED_CORPUS[0])]
    for i, text in enumerate(MIXED_CORPUS):
        msgs.append(user(text))
        msgs += tool_turn("read_file", text, {"path": f"f{i}"})
        msgs.append(assistant(text[: len(text) // 2]))
    return msgs


@pytest.mark.parametrize("model", ["gpt-4o", "gpt-4"])
def test_message_counts_agree_with_tiktoken_within_two_percent(model: str) -> None:
    enc = tiktoken.encoding_for_model(model)
    msgs = _corpus_messages()
    text = "".join(str(m.get("content") or "") for m in msgs)
    reference = len(enc.encode(text, disallowed_special=()))
    got = TokenCounter().count_messages(msgs, model)
    assert abs(got - reference) / reference < 0.02


def test_message_counts_agree_with_litellm_within_two_percent() -> None:
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    import litellm

    msgs = _corpus_messages()
    for model in ("gpt-4o", "gpt-4"):
        ours = TokenCounter().count_messages(msgs, model)
        theirs = litellm.token_counter(model=model, messages=msgs)
        assert abs(ours - theirs) / theirs < 0.02


def test_one_new_turn_encodes_only_the_new_messages() -> None:
    c = TokenCounter()
    msgs = [system(), user("go")]
    for t in range(200):
        msgs += tool_turn("read_file", words(50, t), {"path": f"f{t}"})
    first = c.count_messages(msgs, "gpt-4o")
    assert c.encoded_messages == len(msgs)
    # The client resends the history, parsed afresh: equal content, new objects.
    resent = json.loads(json.dumps(msgs)) + tool_turn("grep", "3 matches")
    encoded = c.encoded_messages
    second = c.count_messages(resent, "gpt-4o")
    assert c.encoded_messages - encoded == 2
    assert second > first


def test_changed_content_is_a_miss() -> None:
    c = TokenCounter()
    a = tool_turn("read_file", "alpha beta")
    c.count_messages(a, "gpt-4o")
    b = copy.deepcopy(a)
    b[0]["tool_calls"][0]["function"]["arguments"] = '{"path": "other"}'
    b[1]["content"] = "alpha gamma delta"
    before = c.encoded_messages
    c.count_messages(b, "gpt-4o")
    assert c.encoded_messages - before == 2
    c.count_messages(a, "gpt-4")  # another encoding is another cache entry
    assert c.encoded_messages - before == 4


def test_cache_is_bounded() -> None:
    c = TokenCounter(max_entries=10)
    c.count_messages([user(f"message {i}") for i in range(25)], "gpt-4o")
    assert c.cache_size() == 10


def test_lone_surrogates_do_not_crash() -> None:
    assert TokenCounter().message_tokens(user("bad \ud800 text"), "gpt-4o") > 3


def test_concurrent_counting_is_consistent() -> None:
    c, ref = TokenCounter(), TokenCounter()
    convs = [[user(words(30, s)), *parallel_turn({"a": words(80, s), "b": words(5, s)})]
             for s in range(40)]
    expected = [ref.count_messages(m, "gpt-4o") for m in convs]
    with ThreadPoolExecutor(4) as pool:
        got = list(pool.map(lambda m: c.count_messages(m, "gpt-4o"), convs * 3))
    assert got == expected * 3


def test_big_or_unloaded_inputs_are_offloaded() -> None:
    c = TokenCounter(offload_chars=1000)
    assert c.needs_offload([user("small")], "gpt-4o")  # the encoding is not loaded yet
    c.encoding("gpt-4o")
    assert not c.needs_offload([user("small")], "gpt-4o")
    assert c.needs_offload([user(words(2000))], "gpt-4o")
    assert c.needs_offload([user("small")], "gpt-4o", size=5000)  # a known body size decides
    assert offload_for(True) is run_off_loop and offload_for(False) is run_inline


def test_offloaded_work_runs_in_a_thread_and_inline_work_does_not() -> None:
    async def run() -> tuple[int, int]:
        return (await run_off_loop(threading.get_ident),
                await run_inline(threading.get_ident))

    worker, inline = asyncio.run(run())
    assert worker != threading.get_ident() == inline


def test_split_and_truncate() -> None:
    c = TokenCounter()
    text = words(1000, 5)
    pieces = c.split_text(text, "gpt-4o", 128)
    assert "".join(pieces) == text
    assert all(c.text_tokens(p, "gpt-4o") <= 130 for p in pieces)
    assert c.text_tokens(c.truncate_text(text, "gpt-4o", 50), "gpt-4o") <= 50
    assert c.truncate_text("short", "gpt-4o", 50) == "short"


@pytest.mark.parametrize("model", ["gpt-4o", "gpt-4"])
def test_huge_texts_are_counted_in_pieces_exactly(model: str) -> None:
    enc = tiktoken.encoding_for_model(model)
    code = "".join(MIXED_CORPUS[1:3]) * 60 + "\n".join(MIXED_CORPUS) * 20
    prose = words(120_000, 4)
    for text in (code, prose):
        assert len(text) > 3 * tokens.CHUNK_CHARS
        assert tokens.count_text(enc, text) == len(enc.encode_ordinary(text))
    blob = MIXED_CORPUS[3] * 400  # no newline or space to split at: a hard cut, nearly exact
    assert abs(tokens.count_text(enc, blob) - len(enc.encode_ordinary(blob))) <= 3


def test_off_loop_work_lowers_the_switch_interval_only_meanwhile() -> None:
    seen: list[float] = []

    async def run() -> None:
        await asyncio.gather(*(run_off_loop(lambda: seen.append(sys.getswitchinterval()))
                               for _ in range(3)))

    before = sys.getswitchinterval()
    asyncio.run(run())
    assert seen == [min(before, OFFLOAD_SWITCH_INTERVAL)] * 3
    assert sys.getswitchinterval() == before


def test_a_short_text_is_encoded_once_and_counted_the_same() -> None:
    from proxy.context.tokens import formula as token_formula

    calls: list[str] = []

    class Counting:
        name = "counting-test-encoding"

        def encode_ordinary(self, text: str) -> list[int]:
            calls.append(text)
            return list(range(len(text.split())))

    enc: Any = Counting()
    for _ in range(3):
        assert token_formula.count_text(enc, "user") == 1
        assert token_formula.count_text(enc, "read the file") == 3
    long = "word " * 20  # past the short texts: encoded every time
    assert token_formula.count_text(enc, long) == token_formula.count_text(enc, long) == 20
    assert calls == ["user", "read the file", long, long]
