"""The summarizer's side of compaction: the prompt, the transcript, pieces and merging.

Pure: this module builds the prompts; the calls are made at the service edge
(``proxy.context.summary.summarizer``). The input is the transcript of the messages being summarized
(their original, unmasked text; an earlier summary among them is rendered as such and folded in).

When the transcript does not fit the summary model's window (``summary_window`` minus the
summary's ``max_tokens`` minus the prompt), it is split into pieces (an oversized single message
too), each piece is summarized, and the partial summaries are merged, in rounds if needed. Every
prompt is counted before it is sent and is never over the window.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from proxy.context.stages.shared import (
    is_result,
    is_summary,
    message_text,
    result_tool_name,
    summary_body,
    tool_names_by_call_id,
)
from proxy.context.tokens.counter import TokenCounter

Prompt = list[dict[str, Any]]

SUMMARY_SECTIONS = (
    "Goal and constraints: the user's goal and every requirement, preference and constraint "
    "they stated.",
    "Decisions: what was decided and the reasons.",
    "Done and failed: what was done, and what was tried and failed (with the error).",
    "Current state: where the work stands now.",
    "Key details: the files, paths, identifiers, names, numbers, commands and values that "
    "matter, copied exactly.",
    "Open questions and next steps.",
)
SUMMARY_SYSTEM_PROMPT = (
    "You compact the earlier part of a conversation between a user and an AI assistant that may "
    "use tools. The assistant will continue the work with only your summary and the most recent "
    "messages, so write a structured handoff with these sections:\n"
    + "\n".join(f"{i}. {s}" for i, s in enumerate(SUMMARY_SECTIONS, 1))
    + "\n\nIf the transcript holds an earlier summary, carry its content forward: drop nothing it "
    "records unless later messages superseded it. Be concise, but never drop a fact the "
    "assistant would need. Answer in plain text with the summary only; do not call tools."
)
PREFIX_INSTRUCTION = (
    SUMMARY_SYSTEM_PROMPT + "\n\nThe conversation above is being compacted. Write that handoff "
    "now, covering all of it; the newest messages, not shown here, stay verbatim after your "
    "summary.")
RESTORED_INTRO = ("For your summary only: the original text of tool outputs that were cleared "
                  "above.")
MERGE_INSTRUCTION = (
    "These are summaries of consecutive parts of one conversation, oldest first. Merge them into "
    "one handoff with the sections above; later parts supersede earlier ones where they differ."
)
MARGIN = 32  # tokens of slack for chat-format rendering the counter cannot know exactly
MIN_SUMMARY_TOKENS = 16


class SummaryFailed(RuntimeError):
    """The summary could not be made (empty answer, or no room in the summary window).

    The caller fails open: the conversation stays unchanged and no error text becomes a summary.
    """


def _render_calls(message: Mapping[str, Any]) -> list[str]:
    lines: list[str] = []
    calls = message.get("tool_calls")
    for call in calls if isinstance(calls, list) else ():
        fn = call.get("function") if isinstance(call, Mapping) else None
        if isinstance(fn, Mapping):
            lines.append(f"-> calls {fn.get('name')}({fn.get('arguments') or ''}) "
                         f"[id {call.get('id')}]")
    fc = message.get("function_call")
    if isinstance(fc, Mapping):
        lines.append(f"-> calls {fc.get('name')}({fc.get('arguments') or ''})")
    return lines


def render_transcript(messages: Sequence[Mapping[str, Any]]) -> list[str]:
    """One text block per message, in order, for the summarizer to read."""
    names = tool_names_by_call_id(messages)
    blocks: list[str] = []
    for n, m in enumerate(messages, 1):
        if is_summary(m):
            blocks.append(f"[{n}] EARLIER SUMMARY (of the conversation before this point):\n"
                          f"{summary_body(m)}")
            continue
        text = message_text(m)
        if isinstance(m.get("content"), list) and any(
            isinstance(p, Mapping) and not isinstance(p.get("text"), str) for p in m["content"]
        ):
            text += "\n[non-text content omitted]"
        if is_result(m):
            head = f"[{n}] TOOL RESULT of {result_tool_name(m, names)}"
            if m.get("tool_call_id"):
                head += f" [id {m.get('tool_call_id')}]"
        else:
            head = f"[{n}] {str(m.get('role', '?')).upper()}"
            if m.get("name"):
                head += f" ({m.get('name')})"
        blocks.append("\n".join([f"{head}:", text, *_render_calls(m)]).rstrip())
    return blocks


CARRIED_HEADING = "The latest messages before this point, verbatim:"


def with_carried(summary: str, carried: Sequence[Mapping[str, Any]]) -> str:
    """A summary's text followed by the messages a compaction carries verbatim
    (``CompactionPlan.carried``), as a transcript: every word of them stays readable."""
    return f"{summary.rstrip()}\n\n{CARRIED_HEADING}\n\n" + \
        "\n\n".join(render_transcript(carried))


def build_prompt(transcript: str, part: tuple[int, int] | None = None) -> list[dict[str, Any]]:
    """The summary request: the instructions, then the transcript (or one part of it)."""
    where = f" (part {part[0]} of {part[1]}; summarize this part only)" if part else ""
    return [
        {"role": "system", "content": SUMMARY_SYSTEM_PROMPT},
        {"role": "user", "content": f"Summarize this conversation transcript{where}.\n\n"
                                    f"<transcript>\n{transcript}\n</transcript>"},
    ]


def build_merge_prompt(partials: Sequence[str]) -> list[dict[str, Any]]:
    """The request that merges partial summaries (oldest first) into one."""
    body = "\n\n".join(f"<part {i}>\n{p}\n</part {i}>" for i, p in enumerate(partials, 1))
    return [
        {"role": "system", "content": SUMMARY_SYSTEM_PROMPT},
        {"role": "user", "content": f"{MERGE_INSTRUCTION}\n\n{body}"},
    ]


class Budget:
    """Token arithmetic for one summarization against the summary model's window."""

    def __init__(self, counter: TokenCounter, model: str, max_tokens: int, window: int) -> None:
        self.counter, self.model, self.window = counter, model, window
        frame = max(counter.count_messages(build_prompt("", (99_999, 99_999)), model),
                    counter.count_messages(build_merge_prompt([""]), model)) + MARGIN
        # Leave room for at least two partial summaries per merge, so merging always converges.
        self.max_tokens = min(max_tokens, (window - frame - MARGIN) // 3)
        if self.max_tokens < MIN_SUMMARY_TOKENS:
            raise SummaryFailed(f"summary window {window} is too small for a summary")
        self.text_budget = window - self.max_tokens - frame

    def fits(self, prompt: list[dict[str, Any]]) -> bool:
        return self.counter.count_messages(prompt, self.model) + self.max_tokens <= self.window

    def pack(self, blocks: Sequence[str]) -> list[list[str]]:
        """Blocks grouped, in order, into pieces whose text fits the budget (big blocks split)."""
        pieces: list[list[str]] = [[]]
        used = 0
        for block in blocks:
            tokens = self.counter.text_tokens(block, self.model) + 2  # the joining blank line
            parts = [(block, tokens)]
            if tokens > self.text_budget:
                split = self.counter.split_text(block, self.model, self.text_budget - 16)
                parts = [(p if i == 0 else f"(continued)\n{p}", self.text_budget)
                         for i, p in enumerate(split)]
            for part, t in parts:
                if pieces[-1] and used + t > self.text_budget:
                    pieces.append([])
                    used = 0
                pieces[-1].append(part)
                used += t
        return [p for p in pieces if p]


def transcript_prompts(budget: Budget, blocks: list[str]) -> list[list[dict[str, Any]]]:
    """Transcript prompts, each verified to fit; a piece that does not is halved."""
    pending = budget.pack(blocks)
    pieces: list[list[str]] = []
    while pending:
        piece = pending.pop(0)
        # Checked with the longest part header the final prompts can carry (5-digit numbers).
        if budget.fits(build_prompt("\n\n".join(piece), (99_999, 99_999))):
            pieces.append(piece)
        elif len(piece) > 1:
            mid = len(piece) // 2
            pending[:0] = [piece[:mid], piece[mid:]]
        else:
            tokens = budget.counter.text_tokens(piece[0], budget.model)
            halves = budget.counter.split_text(piece[0], budget.model, max(1, tokens // 2))
            if len(halves) < 2:
                raise SummaryFailed("a transcript block does not fit the summary window")
            pending[:0] = [[h] for h in halves]
    if len(pieces) == 1:
        return [build_prompt("\n\n".join(pieces[0]))]
    return [build_prompt("\n\n".join(p), (i, len(pieces))) for i, p in enumerate(pieces, 1)]


def merge_prompts(budget: Budget, partials: list[str]) -> list[list[dict[str, Any]]]:
    batches: list[list[str]] = [[]]
    for p in partials:
        if batches[-1] and not budget.fits(build_merge_prompt([*batches[-1], p])):
            batches.append([])
        batches[-1].append(p)
    return [build_merge_prompt(b) for b in batches]


def summary_prompts(messages: Sequence[Mapping[str, Any]], counter: TokenCounter, model: str,
                    max_tokens: int, summary_window: int) -> tuple[Budget, list[Prompt]]:
    """The budget and the first round of prompts that summarize ``messages`` (original text)
    within ``summary_window``; raises ``SummaryFailed`` when no summary can fit."""
    budget = Budget(counter, model, max_tokens, summary_window)
    return budget, transcript_prompts(budget, render_transcript(messages))


def prefix_prompt(masked: Sequence[Mapping[str, Any]], cut: int, restored: str,
                  counter: TokenCounter, model: str, tools: Sequence[Any] | None,
                  window: int) -> tuple[Prompt, int]:
    """The summary request that rides the provider's prompt cache, and the tokens its answer
    may have within ``window`` (negative: not even the prompt fits). It sends the covered range
    of the list as it is sent (``masked[:cut]``, a prefix of what the conversation's last
    request sent, so the cache serves it; the messages after the cut stay verbatim and need no
    summary, and this turn's new ones would only be paid uncached), then ``restored`` (what the
    cached part lacks: the original text of masked outputs in the covered range, as far as
    the budget reads them), then the instruction."""
    prompt = [m if isinstance(m, dict) else dict(m) for m in masked[:cut]]
    if restored:
        prompt.append({"role": "user", "content": RESTORED_INTRO + "\n\n" + restored})
    prompt.append({"role": "user", "content": PREFIX_INSTRUCTION})
    return prompt, prompt_room(prompt, counter, model, tools, 0, window)


def prompt_room(prompt: Prompt, counter: TokenCounter, model: str, tools: Sequence[Any] | None,
                max_tokens: int, window: int) -> int:
    """Tokens left in ``window`` after ``prompt`` and its answer (negative: it does not fit)."""
    return window - counter.count_messages(prompt, model, tools) - max_tokens - MARGIN


def clean_cut(text: str) -> str:
    """``text`` (cut at a token limit, mid-sentence) shortened to its last sentence or line end,
    when one lies in its second half; else as it is."""
    end = max(text.rfind("\n"), *(text.rfind(p) + 1 for p in (". ", "! ", "? ")))
    if text.endswith((".", "!", "?")):
        return text
    return text[:end].rstrip() if end > len(text) // 2 else text
