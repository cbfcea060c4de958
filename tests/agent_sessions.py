"""Real agents (Claude Code, Codex, the OpenAI Agents SDK) in a tool-using session through the
proxy, against the fake upstream playing ``proxy.testing.agent_model.AgentModel``.

``start(...)`` writes the workspace and a policies folder (the model's window in the platform's
``models`` table, and in the fake's ``/v1/models``), starts the proxy in front of the fake and
issues a key; the test then runs its agent and hands the outcome to ``Session.check``, which
collects every failed expectation and fails once with all of them:

- the agent finished (exit 0, or the SDK's run returned);
- the fake refused nothing (``refusals``) and the proxy answered every agent request 200;
- no upstream request was over the window, by the fake's own measure;
- every fact planted in a file the agent read is in its final answer, or in a spill its answer
  names (readable at ``GET /v1/conversations/{id}/spills/{spill_id}``);
- masking was seen (an ``X-Context-Masked`` > 0, or a placeholder reached the fake) and so was
  compaction (a divider of the conversation, or a summary call at the fake).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
from conftest import need

from proxy.console import queries
from proxy.context.binding import builtin_bound
from proxy.context.stages.mask import PLACEHOLDER_PREFIX
from proxy.testing import agent_model
from proxy.testing.fake.fake_apis import MESSAGES, RESPONSES, as_chat
from proxy.testing.fake_upstream import FakeUpstream, Recorded, is_summary_request
from proxy.testing.harness import Answer, Harness

ROOT = Path(__file__).resolve().parent.parent
AGENTS_BIN_ENV = "CONTEXT_PROXY_AGENTS_BIN"
INSTALL_AGENTS = ("install them with `npm install --prefix .agents "
                  "@anthropic-ai/claude-code@2.1.337 @openai/codex@0.171.0` and "
                  "`node install.cjs` in .agents/node_modules/@anthropic-ai/claude-code, then set "
                  f"{AGENTS_BIN_ENV}=.agents/node_modules/.bin (.ci/run does all of it)")
MANAGED = (MESSAGES, RESPONSES, "/v1/chat/completions")
AGENT_TIMEOUT_S = 240
ORG = "acme"


def agent_bin(name: str) -> str:
    """The path of an agent's command: in ``$CONTEXT_PROXY_AGENTS_BIN``, the clone's
    ``.agents/node_modules/.bin``, or on ``PATH``."""
    folders = [os.environ.get(AGENTS_BIN_ENV, ""), str(ROOT / ".agents/node_modules/.bin")]
    for folder in folders:
        if folder and (Path(folder) / name).is_file():
            return str(Path(folder) / name)
    found = shutil.which(name)
    if found is None:
        need(f"the {name} command (npm)", INSTALL_AGENTS)
    assert found is not None
    return found


def node_env(home: Path, **extra: str) -> dict[str, str]:
    """A clean environment for an agent subprocess: ``PATH`` (node), a fresh ``HOME``."""
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(home),
           "LANG": "C.UTF-8", "NO_COLOR": "1", "TERM": "dumb"}
    if shutil.which("node", path=env["PATH"]) is None:
        need("Node.js (node on PATH)", "install Node.js 20 or newer")
    env.update(extra)
    return env


# Beta-only fields of the Messages API and the beta each needs (the real API refuses the field
# without its beta header: "Extra inputs are not permitted").
BETA_FIELDS = {"defer_loading": "advanced-tool-use-2025-11-20",
               "context_management": "context-management-2025-06-27"}


def _beta_problems(rec: Recorded) -> list[str]:
    """What the real Messages API would refuse in ``rec`` for a missing beta header."""
    if rec.path != MESSAGES or not rec.body:
        return []
    betas = {b.strip() for b in (rec.headers.get("anthropic-beta") or "").split(",")}
    body = rec.json
    fields = [f"tools.{i}.defer_loading" for i, t in enumerate(body.get("tools") or [])
              if isinstance(t, dict) and "defer_loading" in t]
    fields += ["context_management"] if "context_management" in body else []
    what = "the proxy's summary call" if is_summary_request(as_chat(MESSAGES, body)) else "POST"
    return [f"{what} {rec.path} -> (400) {f}: Extra inputs are not permitted (without "
            f"anthropic-beta: {BETA_FIELDS[f.rsplit('.', 1)[-1]]})" for f in fields
            if BETA_FIELDS[f.rsplit(".", 1)[-1]] not in betas][:1]


def refusals(fake: FakeUpstream) -> list[str]:
    """What the fake refused, or a real upstream would have: the one place that says it.

    A fake that names its own refusals (``FakeUpstream.refusals()``, a strict fake) is asked.
    Otherwise every recorded answer of status >= 400 counts, and so does a Messages request with
    a beta-only field (``defer_loading``, ``context_management``) but not its ``anthropic-beta``,
    which the real API refuses and today's fake lets through."""
    own = getattr(fake, "refusals", None)
    if callable(own):
        return [str(r) for r in own()]
    found = [f"{r.method} {r.path} -> {r.status}: {(r.error or '')[:600]}"
             for r in fake.requests if r.status is not None and r.status >= 400]
    return found + [p for r in fake.requests for p in _beta_problems(r)]


@dataclass
class Outcome:
    """What the agent left: its exit code, its final answer and its own output (for messages)."""

    returncode: int
    final: str
    output: str = ""


@dataclass
class Session:
    harness: Harness
    fake: FakeUpstream
    model: str
    window: int
    workspace: Path
    home: Path
    key: str
    calls: int = agent_model.CALLS
    started: float = field(default_factory=time.monotonic)

    @property
    def origin(self) -> str:
        """The proxy without ``/v1`` (Claude Code's ``ANTHROPIC_BASE_URL``)."""
        return self.harness.base_url.removesuffix("/v1")

    def run(self, argv: list[str], env: dict[str, str], stdin: str | None = None,
            timeout: float = AGENT_TIMEOUT_S) -> subprocess.CompletedProcess[str]:
        try:
            return subprocess.run(argv, cwd=self.workspace, env=env, input=stdin,
                                  capture_output=True, text=True, timeout=timeout, check=False)
        except subprocess.TimeoutExpired as e:
            out = (e.stdout or b"").decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
            err = (e.stderr or b"").decode() if isinstance(e.stderr, bytes) else (e.stderr or "")
            return subprocess.CompletedProcess(argv, -9, out, err + f"\n(timed out: {timeout}s)")

    # --- what happened ------------------------------------------------------------------

    def agent_answers(self) -> list[Answer]:
        """The proxy's answers to the agent (the test's own calls to /v1/conversations left out)."""
        return [a for a in self.harness.answers if not a.path.startswith("/v1/conversations/")]

    def upstream(self) -> list[Recorded]:
        """Requests of the managed APIs that reached the fake (summary calls included)."""
        return [r for r in self.fake.requests if r.path in MANAGED and r.body]

    def chat_of(self, rec: Recorded) -> dict[str, Any]:
        body = rec.json
        return body if rec.path == "/v1/chat/completions" else as_chat(rec.path, body)

    def agent_requests(self) -> list[Recorded]:
        """The agent's own requests as they reached the fake (the proxy's summaries left out)."""
        return [r for r in self.upstream() if not is_summary_request(self.chat_of(r))]

    def summary_requests(self) -> list[Recorded]:
        return [r for r in self.upstream() if is_summary_request(self.chat_of(r))]

    def summary_call_problems(self) -> list[str]:
        """How the summary calls that ride the cached prefix differ from the agent's request
        they compact (the next one upstream): on the Messages API ``tools``, ``tool_choice``,
        ``system`` and ``anthropic-beta`` byte for byte and at least 70% of the prompt read from
        the fake's cache; on the Responses API the same ``prompt_cache_key``."""
        problems: list[str] = []
        upstream = self.upstream()
        riding = [r for r in self.summary_requests() if "tools" in (r.json or {})]
        for rec in riding:
            later = upstream[upstream.index(rec) + 1:]
            main = next((r for r in later if not is_summary_request(self.chat_of(r))), None)
            if main is None:
                continue
            mine, theirs = rec.json, main.json
            fields = ("tools", "tool_choice", "system") if rec.path == "/v1/messages" \
                else ("tools", "prompt_cache_key")
            for name in fields:
                if json.dumps(mine.get(name)) != json.dumps(theirs.get(name)):
                    problems.append(f"summary call {name} differs from the request's")
            if rec.path == "/v1/messages":
                if rec.headers.get("anthropic-beta") != main.headers.get("anthropic-beta"):
                    problems.append("summary call anthropic-beta differs from the request's")
                usage = rec.usage or {}
                read = int(usage.get("cache_read_input_tokens") or 0)
                total = read + int(usage.get("input_tokens") or 0) + \
                    int(usage.get("cache_creation_input_tokens") or 0)
                if total and read < 0.7 * total:
                    problems.append(f"summary call {read}/{total} tokens from the cache")
        return problems

    def conversations(self) -> list[str]:
        """The conversations of the session: named in the proxy's answers, or stored for the
        organization (requests on a WebSocket share one answer, the upgrade)."""
        ids = {a.headers.get("X-Conversation-Id") for a in self.agent_answers()}
        ids |= {str(c["public_id"]) for c in queries.conversations(self.harness.state.store,
                                                                    ORG)}
        return sorted(i for i in ids if i)

    def api(self, path: str) -> httpx.Response:
        return httpx.get(f"{self.harness.base_url}{path}",
                         headers={"Authorization": f"Bearer {self.key}"}, timeout=30)

    def dividers(self) -> list[dict[str, Any]]:
        found: list[dict[str, Any]] = []
        for conv in self.conversations():
            resp = self.api(f"/conversations/{conv}/dividers")
            if resp.status_code == 200:
                found += resp.json()["data"]
        return found

    def spill_text(self, spill_id: str) -> str | None:
        for conv in self.conversations():
            resp = self.api(f"/conversations/{conv}/spills/{spill_id}")
            if resp.status_code == 200:
                return json.dumps(resp.json())
        return None

    def outcomes(self) -> list[str]:
        return [a.headers.get("X-Context-Compaction", "-") for a in self.agent_answers()
                if a.path in MANAGED]

    def report(self) -> str:
        """A few lines on the session, for failure messages."""
        answers = self.agent_answers()
        statuses: dict[str, int] = {}
        for a in answers:
            k = f"{a.method} {a.path} {a.status}"
            statuses[k] = statuses.get(k, 0) + 1
        masked = [a.headers.get("X-Context-Masked", "-") for a in answers if a.path in MANAGED]
        tokens = [f"{a.headers.get('X-Context-Tokens-Before', '-')}>"
                  f"{a.headers.get('X-Context-Tokens-After', '-')}"
                  for a in answers if a.path in MANAGED]
        return (f"proxy answers: {statuses}; compaction outcomes: {self.outcomes()}; masked: "
                f"{masked}; tokens before>after: {tokens}; upstream agent requests: "
                f"{len(self.agent_requests())}, summary calls: {len(self.summary_requests())}; "
                f"{time.monotonic() - self.started:.1f}s")

    # --- the checks -----------------------------------------------------------------------

    def failures(self, outcome: Outcome) -> list[str]:
        """Every expectation of a session that did not hold, each with what was seen."""
        failed: list[str] = []
        if outcome.returncode != 0:
            failed.append(f"the agent exited {outcome.returncode}: {outcome.output[-3000:]}")
        refused = refusals(self.fake)
        if refused:
            failed.append(f"the upstream refused (or would refuse) {len(refused)} request(s): "
                          + " | ".join(refused[:3]))
        not_ok = [f"{a.method} {a.path} -> {a.status} {(a.error or '')[:300]}"
                  for a in self.agent_answers() if a.status != 200
                  and not (a.status == 101 and a.method == "GET")]  # a WebSocket upgrade
        if not_ok:
            failed.append(f"the proxy did not answer 200 to {len(not_ok)} agent request(s): "
                          + " | ".join(not_ok[:3]))
        over = []
        for rec in self.upstream():
            tokens = self.fake.measure(self.chat_of(rec))[0]
            if tokens > self.window:
                over.append(tokens)
        if over:
            failed.append(f"{len(over)} upstream request(s) over the {self.window}-token window: "
                          f"{over[:10]}")
        failed += self.fact_failures(outcome.final)
        dropping = [r.dropped for r in self.agent_requests() if r.dropped]
        if len(dropping) > len(self.dividers()):
            failed.append(f"the provider dropped reasoning on {len(dropping)} request(s) "
                          f"({sum(dropping)} blocks or items) for {len(self.dividers())} "
                          "compaction(s): at most one request per compaction")
        masked = any(int(a.headers.get("X-Context-Masked", "0") or 0) > 0
                     for a in self.agent_answers())
        placeholder = any(PLACEHOLDER_PREFIX.encode() in r.body for r in self.upstream())
        # On a model that binds reasoning to its history masking leaves its steps to
        # compaction (each would cost the reasoning after it): compaction alone shows there.
        if not (masked or placeholder) and not builtin_bound(self.model):
            failed.append("no masking seen: no X-Context-Masked > 0, no placeholder upstream")
        if not (self.dividers() or self.summary_requests()):
            failed.append("no compaction seen: no divider, no summary call at the fake")
        failed += self.summary_call_problems()
        return failed

    def read_files(self) -> list[int]:
        """The file numbers the agent's tool calls named (as sent upstream): as calls, or as
        the call lines of a transcript a compaction carried verbatim into its summary (on a
        model that binds reasoning the newest turns travel so), and every file the model asked
        for (a call a compaction summarized before the next request saw it)."""
        responder = self.fake.responder
        done: set[int] = set(getattr(responder, "asked", ()))
        for rec in self.agent_requests():
            for m in self.chat_of(rec)["messages"]:
                for call in m.get("tool_calls") or []:
                    args = str((call.get("function") or {}).get("arguments"))
                    done |= {int(n) for n in agent_model.FILE_NAME.findall(args)}
                for line in str(m.get("content") or "").splitlines():
                    if line.startswith("-> calls "):
                        done |= {int(n) for n in agent_model.FILE_NAME.findall(line)}
        return sorted(done)

    def fact_failures(self, final: str) -> list[str]:
        read = self.read_files()
        failed: list[str] = []
        if len(read) < self.calls:
            failed.append(f"the agent read {len(read)} of the {self.calls} files: {read}")
        spills = agent_model.named_spills(final)
        spilled = " ".join(t for t in (self.spill_text(s) for s in spills) if t)
        missing = [agent_model.fact(i) for i in read
                   if agent_model.fact(i) not in final and agent_model.fact(i) not in spilled]
        if missing:
            failed.append(f"{len(missing)} fact(s) neither in the final answer nor in a spill it "
                          f"names: {missing}; final answer: {final[-1500:]!r}")
        return failed

    def check(self, outcome: Outcome) -> None:
        failed = self.failures(outcome)
        assert not failed, "\n".join(["", *failed, self.report()])


KEEP_RECENT = 2
"""``masking.keep_recent`` of the sessions: with 2–4k-token outputs at a 16k–32k window, the
default 5 newest outputs alone fill the trigger budget, so masking (rightly) waits and only
compaction would ever run; 2 lets both stages show. These sessions also take the seed's
masking steps (``masking.priced: false``): they check that both
stages work with each agent, not when a step pays for itself, which the session-cost matrix
judges."""


def start(make_harness: Callable[..., Harness], tmp_path: Path, model: str, window: int,
          keep_recent: int | None = KEEP_RECENT) -> Session:
    """The workspace, the proxy (window in its policy; ``keep_recent`` None: the platform's
    default) and the fake playing the agent model."""
    workspace = tmp_path / "work"
    home = tmp_path / "home"
    policies = tmp_path / "policies"
    for folder in (workspace, home, policies):
        folder.mkdir()
    agent_model.write_workspace(workspace)
    masking = (f"defaults: {{masking: {{keep_recent: {keep_recent}, priced: false}}}}\n"
               if keep_recent else "")
    (policies / "platform.yaml").write_text(
        f"models: {{{json.dumps(model)}: {{context_window: {window}}}}}\n{masking}")
    fake = FakeUpstream(models={model: window}, responder=agent_model.AgentModel(str(workspace)),
                        summarizer=agent_model.fact_summarizer, stream_delay_s=0.0)
    h = make_harness(fake=fake, env={"CONTEXT_PROXY_POLICIES": str(policies)})
    return Session(h, fake, model, window, workspace, home, h.create_key(ORG))


def last_json_lines(text: str) -> Iterator[dict[str, Any]]:
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("{"):
            try:
                value = json.loads(line)
            except ValueError:
                continue
            if isinstance(value, dict):
                yield value
