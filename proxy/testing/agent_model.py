"""A scripted model for real coding agents (Claude Code, Codex, the OpenAI Agents SDK), played
by the fake upstream.

The agent runs for real (its own prompts, tools and side requests); this model stands in for the
LLM behind it. It reads each request as the fake gives it (a chat-style body: ``messages``,
``tools``; see ``proxy.testing.fake.fake_apis.as_chat``), finds the agent's file-reading tool in
``tools`` and asks for the next unread file of a workspace of ``FILES`` notes files, one planted
fact in each (``FACT-17: the invoice rounding mode is BANKERS-0017``). After ``calls`` reads (one
or two per turn) it answers with a final message listing every planted fact it can still see in
its transcript (tool outputs kept verbatim, a summary's text) and the spill id of every masked
output (``[tool output cleared: ... spill <id>]``), whose original the proxy serves at
``GET /v1/conversations/{id}/spills/{spill_id}``.

Everything is a pure function of the request: progress is read from the transcript itself (the
highest file number named by a tool call or a fact line), so masking and compaction — which keep
every call and carry facts into summaries — never make it lose its place. Requests that are not
the agent's main loop are answered with plain text: an agent's own compaction prompt (Codex's
``CONTEXT CHECKPOINT COMPACTION``, Claude Code's summary prompt) gets a summary that carries every
fact line; any request without a file-reading tool (titles, topics) gets a short line.

``fact_summarizer`` is the fake's summarizer for the proxy's own summary calls in these sessions:
it carries every fact line of the summarized transcript into the summary.
"""

from __future__ import annotations

import json
import random
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

FILES = 30
CALLS = 25
TASK = ("Read the notes files in the current folder one at a time with your file-reading tool. "
        "Each holds one planted fact line. When you have read them, list every fact you found.")
SUBJECTS = (
    "invoice rounding mode", "ledger export format", "tax table version", "currency fallback",
    "refund window code", "audit retention class", "dunning schedule", "credit note prefix",
    "payment retry policy", "late fee rule", "discount stacking mode", "fiscal year start",
    "vat registration scheme", "settlement batch size", "chargeback queue", "proration rule",
    "statement template", "exchange rate source", "invoice numbering scheme", "write off limit",
    "reminder cadence", "deposit hold rule", "revenue split key", "billing cycle anchor",
    "trial conversion rule", "coupon expiry policy", "escrow release code", "overage tier",
    "minimum charge rule", "account freeze trigger")
CODES = ("BANKERS", "PARQUET", "TAXV", "EURO", "REFUND", "KEEP", "DUNNING", "CREDIT", "RETRY",
         "LATEFEE", "STACK", "APRIL", "VATOSS", "BATCH", "DISPUTE", "DAILY", "STMT", "ECB",
         "SEQNUM", "WRITEOFF", "WEEKLY", "HOLD", "SPLIT", "ANCHOR", "TRIAL", "COUPON", "ESCROW",
         "TIER", "MINCHG", "FREEZE")
WORDS = tuple("amount balance cents customer decimal entry invoice ledger line module payment "
              "precision quantize record refund rounding schedule settle statement tax total "
              "value account batch cycle period".split())
FACT_LINE = re.compile(r"FACT-(\d{2}): the [a-z ]+ is [A-Z]+-\d{4}")
FILE_NAME = re.compile(r"notes_(\d{2})\.txt")
SPILL = re.compile(r"\[tool output cleared: [^\]]*?spill ([0-9a-f]{8,64})\]")
SPILL_NAMED = re.compile(r"\bspill ([0-9a-f]{8,64})\b")  # as the final answer names them
AGENT_COMPACTION = ("CONTEXT CHECKPOINT COMPACTION",
                    "create a detailed summary of the conversation",
                    "summary of the conversation so far")


def fact(i: int) -> str:
    """The fact planted in file ``i`` (1-based)."""
    return f"FACT-{i:02d}: the {SUBJECTS[i - 1]} is {CODES[i - 1]}-{i:04d}"


def file_name(i: int) -> str:
    return f"notes_{i:02d}.txt"


def file_tokens(i: int) -> int:
    """A size between 2,000 and 4,000 tokens (o200k_base, budgeted at 14.5 a line), by file."""
    return 2000 + (i * 739) % 2001


def file_text(i: int) -> str:
    """File ``i``: a heading, its fact on the third line, then numbered lines of words."""
    rng = random.Random(i)
    lines = [f"# notes {i:02d} of the billing service", "", fact(i), ""]
    while len(lines) * 14.5 < file_tokens(i):
        lines.append(f"{len(lines):>4}: " + " ".join(rng.choices(WORDS, k=10)))
    return "\n".join(lines) + "\n"


def write_workspace(root: Path, files: int = FILES) -> list[str]:
    """Write the workspace's files into ``root``; the facts planted, in file order."""
    for i in range(1, files + 1):
        (root / file_name(i)).write_text(file_text(i))
    return [fact(i) for i in range(1, files + 1)]


# --- reading a request -------------------------------------------------------------------


def _texts(value: Any) -> Iterator[str]:
    """Every string of a content value (a string, or parts/blocks with ``text``)."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, list):
        for part in value:
            if isinstance(part, dict):
                yield from _texts(part.get("text"))
                yield from _texts(part.get("content"))
            elif isinstance(part, str):
                yield part


def transcript_text(messages: list[dict[str, Any]]) -> Iterator[str]:
    """The text of every message: contents and tool-call arguments."""
    for m in messages:
        yield from _texts(m.get("content"))
        for call in m.get("tool_calls") or []:
            args = (call.get("function") or {}).get("arguments")
            if isinstance(args, str):
                yield args


def facts_in(texts: Iterator[str] | list[str]) -> list[str]:
    """Every distinct fact line in ``texts``, in file order."""
    found = {m.group(0) for t in texts for m in FACT_LINE.finditer(t)}
    return sorted(found)


def spills_in(texts: Iterator[str] | list[str]) -> list[str]:
    """The spill ids of every masking placeholder in ``texts``, first seen first."""
    seen: dict[str, None] = {}
    for t in texts:
        for m in SPILL.finditer(t):
            seen.setdefault(m.group(1))
    return list(seen)


def named_spills(answer: str) -> list[str]:
    """The spill ids a final answer names (``spill <id>``)."""
    return list(dict.fromkeys(SPILL_NAMED.findall(answer)))


def fact_summarizer(body: dict[str, Any]) -> str:
    """The fake's summary for the proxy's summary calls: every fact line of the prompt."""
    lines = facts_in(list(transcript_text(body.get("messages") or [])))
    return ("Summary of the earlier conversation. The user asked to read the notes files and "
            "list their facts. Facts found so far:\n" + ("\n".join(lines) or "none"))


def _tool(tools: list[dict[str, Any]] | None) -> tuple[str, dict[str, Any]] | None:
    """The file-reading tool: (name, parameters schema), best first."""
    by_name = {}
    for t in tools or []:
        fn = t.get("function") or t
        if isinstance(fn.get("name"), str):
            by_name[fn["name"]] = fn.get("parameters") or {}
    for name in ("read_file", "Read", "exec_command", "shell", "Bash"):
        if name in by_name:
            return name, by_name[name]
    return None


def _arguments(name: str, schema: dict[str, Any], root: str, i: int) -> dict[str, Any]:
    props = schema.get("properties") or {}
    path = f"{root.rstrip('/')}/{file_name(i)}" if root else file_name(i)
    if name == "read_file":
        for field_name in ("path", "file_path", "filename", "file"):
            if field_name in props:
                return {field_name: path}
        required = schema.get("required") or list(props) or ["path"]
        return {required[0]: path}
    if name == "Read":
        return {"file_path": path}
    command = f"cat {path}"
    if name == "exec_command":
        return {"cmd": command}
    key = "command" if "command" in props or not props else next(iter(props))
    if (props.get(key) or {}).get("type") == "array":
        return {key: ["bash", "-lc", command]}
    return {key: command}


def progress(messages: list[dict[str, Any]]) -> int:
    """How many files the transcript shows as read: the highest file number a tool call names,
    or a fact line carries (a summary of turns compacted away)."""
    done = 0
    for m in messages:
        for call in m.get("tool_calls") or []:
            args = (call.get("function") or {}).get("arguments")
            for found in FILE_NAME.finditer(args if isinstance(args, str) else ""):
                done = max(done, int(found.group(1)))
        if m.get("role") != "assistant":
            for t in _texts(m.get("content")):
                for found in FACT_LINE.finditer(t):
                    done = max(done, int(found.group(1)))
    return done


def _last_user_text(messages: list[dict[str, Any]]) -> str:
    for m in reversed(messages):
        if m.get("role") == "user":
            return "\n".join(_texts(m.get("content")))
    return ""


@dataclass(frozen=True)
class AgentModel:
    """The responder: ``FakeUpstream(responder=AgentModel(root=str(workspace)))``.

    ``root`` is the workspace's absolute path (Claude Code's ``Read`` wants absolute paths);
    ``calls`` the file reads before the final answer."""

    root: str = ""
    calls: int = CALLS
    asked: list[int] = field(default_factory=list, compare=False)  # file numbers read, in order

    def __call__(self, chat: dict[str, Any]) -> dict[str, Any]:
        messages = chat.get("messages") or []
        texts = list(transcript_text(messages))
        last = _last_user_text(messages)
        if any(marker.lower() in last.lower() for marker in AGENT_COMPACTION):
            return {"role": "assistant", "content": fact_summarizer(chat)}
        tool = _tool(chat.get("tools"))
        if tool is None:  # a side request: a title, a topic, a quota probe
            return {"role": "assistant", "content": "Reading the workspace notes"}
        done = progress(messages)
        if done >= self.calls:
            return {"role": "assistant", "content": final_answer(texts)}
        first = done + 1
        batch = [first, first + 1] if first % 5 == 0 and first < self.calls else [first]
        self.asked.extend(batch)
        name, schema = tool
        return {"role": "assistant", "content": f"Reading {file_name(first)}.", "tool_calls": [
            {"id": f"call_read_{i:02d}", "type": "function", "function": {
                "name": name, "arguments": json.dumps(_arguments(name, schema, self.root, i))}}
            for i in batch]}


def final_answer(texts: list[str]) -> str:
    lines = facts_in(texts)
    spills = spills_in(texts)
    return ("Facts found:\n" + "\n".join(lines)
            + "\nOutputs cleared by the proxy (readable from spills): "
            + (", ".join(f"spill {s}" for s in spills) or "none") + "\n")
