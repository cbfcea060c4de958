"""Summary prompts (``proxy.context.stages.summary``): the transcript of messages (calls and
their results named), prompts that fit the summary model's window (in pieces, then merged),
the prompt on the conversation's prefix, and an over-long summary cut at a sentence."""

from __future__ import annotations

from factories import agent_session, assistant, tool_call, tool_result, user

from proxy.context.stages.summary import (
    MARGIN,
    PREFIX_INSTRUCTION,
    SUMMARY_SYSTEM_PROMPT,
    build_merge_prompt,
    build_prompt,
    clean_cut,
    prefix_prompt,
    render_transcript,
    summary_prompts,
)
from proxy.context.tokens.counter import TokenCounter

COUNTER = TokenCounter()


def test_the_transcript_names_each_call_and_its_result() -> None:
    call = tool_call("grep", {"pattern": "TODO"}, "c1")
    lines = render_transcript([user("find the todos"), assistant(None, call),
                               tool_result(call, "src/a.py: TODO fix")])
    text = "\n".join(lines)
    assert "find the todos" in text and "grep" in text and "TODO fix" in text
    assert len(lines) == 3


def test_a_transcript_prompt_opens_with_the_instructions() -> None:
    prompt = build_prompt("USER: hi", part=(2, 3))
    assert prompt[0]["content"] == SUMMARY_SYSTEM_PROMPT and "USER: hi" in prompt[-1]["content"]
    assert "2" in prompt[-1]["content"] and "3" in prompt[-1]["content"]
    merged = build_merge_prompt(["first part", "second part"])
    assert "first part" in merged[-1]["content"] and "second part" in merged[-1]["content"]


def test_long_transcripts_come_in_pieces_that_each_fit() -> None:
    messages = agent_session(turns=20, output_tokens=800)
    budget, prompts = summary_prompts(messages, COUNTER, "gpt-4o", 1024, 8_000)
    assert len(prompts) > 1 and budget.max_tokens == 1024
    for prompt in prompts:
        assert budget.fits(prompt)
        assert COUNTER.count_messages(prompt, "gpt-4o") + 1024 <= 8_000


def test_the_prefix_prompt_is_the_covered_range_then_the_instruction_and_the_answers_room(
) -> None:
    messages = agent_session(turns=4, output_tokens=200)
    prompt, room = prefix_prompt(messages, 6, "", COUNTER, "gpt-4o", None, 64_000)
    assert prompt[:6] == messages[:6] and len(prompt) == 7  # the rest stays verbatim, unsent
    assert prompt[-1]["content"] == PREFIX_INSTRUCTION
    assert room == 64_000 - COUNTER.count_messages(prompt, "gpt-4o") - MARGIN
    noted, _ = prefix_prompt(messages, 6, "the notes", COUNTER, "gpt-4o", None, 64_000)
    assert noted[:6] == messages[:6] and noted[6]["content"].endswith("the notes")
    assert prefix_prompt(messages, 6, "", COUNTER, "gpt-4o", None, 600)[1] < 0  # cannot fit


def test_an_over_long_summary_is_cut_at_a_sentence() -> None:
    assert clean_cut("The first part is done. Two half wri") == "The first part is done."
    assert clean_cut("A. the rest runs on and on without any end") == \
        "A. the rest runs on and on without any end"  # its end is in the first half: kept
    assert clean_cut("Ends well.") == "Ends well."
