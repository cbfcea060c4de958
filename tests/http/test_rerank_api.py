"""``POST /v1/rerank`` end to end: proxy + fake upstream, every outcome of the fail-open contract.

In every case the answered indices are a permutation of the input's; only ``applied`` changes
the order, and only among the first ``candidates``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from proxy.rerank.order import SYSTEM_PROMPT
from proxy.testing.fake_upstream import FakeUpstream, Fault
from proxy.testing.harness import Harness
from proxy.testing.scrape import metric, scrape, series

DOCS = [f"passage number {i} about topic {i % 3}" for i in range(8)]
# The rerank budget: long enough that a loopback call answers within it on a busy CI machine
# (only the timeout test means to exceed it).
KEEP, CANDIDATES, TIMEOUT_MS = 3, 5, 2000


def is_rerank_call(body: dict[str, Any]) -> bool:
    return (body.get("messages") or [{}])[0].get("content") == SYSTEM_PROMPT


def write_policies(folder: Path, rerank: dict[str, Any] | None = None,
                   orgs: str = "") -> Path:
    folder.mkdir(exist_ok=True)
    settings = rerank if rerank is not None else {
        "enabled": "true", "keep": KEEP, "candidates": CANDIDATES, "timeout_ms": TIMEOUT_MS}
    fields = ", ".join(f"{k}: {v}" for k, v in settings.items())
    (folder / "platform.yaml").write_text(f"defaults:\n  rerank: {{{fields}}}\n{orgs}")
    return folder


class Rerank:
    """A started proxy with rerank policy, a key of org ``acme`` and the fake's rerank answer."""

    def __init__(self, harness: Harness) -> None:
        self.h = harness
        self.key = harness.create_key("acme")
        self.answer: Any = "[0, 1, 2, 3, 4]"

    def post(self, body: dict[str, Any], key: str | None = None) -> httpx.Response:
        return httpx.post(self.h.base_url + "/rerank", json=body, timeout=30,
                          headers={"Authorization": f"Bearer {key or self.key}"})

    def calls(self) -> list[dict[str, Any]]:
        return [b for b in self.h.fake.all_chat_requests() if is_rerank_call(b)]


@pytest.fixture
def make_rerank(make_harness: Callable[..., Harness], tmp_path: Path) -> Callable[..., Rerank]:
    def make(rerank: dict[str, Any] | None = None, orgs: str = "") -> Rerank:
        fake = FakeUpstream()
        folder = write_policies(tmp_path / "policies", rerank, orgs)
        r = Rerank(make_harness(fake=fake, env={"CONTEXT_PROXY_POLICIES": str(folder)}))
        fake.responder = lambda body: {"role": "assistant", "content": r.answer}
        return r

    return make


@pytest.fixture
def rr(make_rerank: Callable[..., Rerank]) -> Rerank:
    return make_rerank()


def indices(resp: httpx.Response) -> list[int]:
    assert resp.status_code == 200, resp.text
    got = [r["index"] for r in resp.json()["results"]]
    assert sorted(got) == list(range(len(got)))  # a permutation of the input, always
    return got


def body(docs: list[Any] | None = None, **extra: Any) -> dict[str, Any]:
    return {"model": "gpt-4o-mini", "query": "topic 2", "documents": docs or DOCS, **extra}


def test_off_by_default_returns_input_order_without_a_call(make_rerank: Callable[..., Rerank]
                                                            ) -> None:
    rr = make_rerank(rerank={"keep": 8})
    resp = rr.post(body(DOCS * 2))
    assert indices(resp) == list(range(16))
    assert resp.headers["X-Rerank"] == "skipped"
    assert rr.calls() == []


def test_at_most_keep_documents_is_skipped(rr: Rerank) -> None:
    resp = rr.post(body(DOCS[:KEEP]))
    assert indices(resp) == [0, 1, 2]
    assert resp.headers["X-Rerank"] == "skipped"
    assert rr.calls() == []


def test_good_reorder_moves_candidates_and_keeps_the_rest(rr: Rerank) -> None:
    rr.answer = "[4, 2, 0, 1, 3]"
    resp = rr.post(body())
    assert resp.headers["X-Rerank"] == "applied"
    assert indices(resp) == [4, 2, 0, 1, 3, 5, 6, 7]
    results = resp.json()["results"]
    assert [r["relevance_score"] for r in results] == [1 - i / 8 for i in range(8)]
    assert results[0]["document"] == {"text": DOCS[4]}
    (call,) = rr.calls()
    assert call["model"] == "gpt-4o-mini" and "tools" not in call
    assert "[4] " + DOCS[4] in call["messages"][1]["content"]
    assert "[5]" not in call["messages"][1]["content"]  # only the candidates are sent
    sent_auth = [r.headers.get("Authorization") for r in rr.h.fake.requests][-1]
    assert sent_auth == f"Bearer {rr.h.upstream_key}"
    assert rr.key not in str(rr.h.fake.requests[-1].headers)


def test_timeout_answers_input_order_within_the_bound(rr: Rerank) -> None:
    rr.h.fake.faults.append(Fault(status=200, delay_s=TIMEOUT_MS / 1000 + 2, match=is_rerank_call))
    rr.answer = "[4, 3, 2, 1, 0]"
    start = time.perf_counter()
    resp = rr.post(body())
    elapsed = time.perf_counter() - start
    assert resp.headers["X-Rerank"] == "timeout"
    assert indices(resp) == list(range(8))
    assert elapsed < TIMEOUT_MS / 1000 + 0.5, elapsed


@pytest.mark.parametrize("fault", [Fault(status=500), Fault(status=429), Fault(drop=True),
                                   Fault(status=200, body={"unexpected": True})],
                         ids=["500", "429", "dropped", "not-a-completion"])
def test_model_error_answers_input_order(rr: Rerank, fault: Fault) -> None:
    fault.match = is_rerank_call
    rr.h.fake.faults.append(fault)
    resp = rr.post(body())
    assert resp.headers["X-Rerank"] == "error"
    assert indices(resp) == list(range(8))


@pytest.mark.parametrize("answer", [
    "Passage 4 is the best, then 2.",  # prose
    "[4, 2, 0, 1]",  # missing
    "[4, 2, 0, 1, 1]",  # repeated
    "[4, 2, 0, 1, 7]",  # out of range (a non-candidate)
    "[4, 2, 0, 1, 3.0]",  # not integers
    '{"ranking": [4, 2, 0, 1, 3]}',  # not an array
    None,  # no text (e.g. a refusal or a tool call)
], ids=["prose", "missing", "repeated", "out-of-range", "float", "object", "no-text"])
def test_unparsable_answer_answers_input_order(rr: Rerank, answer: Any) -> None:
    rr.answer = answer
    resp = rr.post(body())
    assert resp.headers["X-Rerank"] == "unparsable"
    assert indices(resp) == list(range(8))


def test_policy_model_wins_and_no_model_skips(make_rerank: Callable[..., Rerank]) -> None:
    rr = make_rerank(rerank={"enabled": "true", "keep": 3, "model": "ranker-1"})
    rr.answer = "[1, 0, 2, 3, 4, 5, 6, 7]"
    resp = rr.post(body(model=None) | {"model": "rerank-english-v3.0"})
    assert resp.headers["X-Rerank"] == "applied" and indices(resp)[:2] == [1, 0]
    assert rr.calls()[-1]["model"] == "ranker-1"
    assert resp.json()["model"] == "ranker-1"


def test_no_model_anywhere_is_skipped(rr: Rerank) -> None:
    req = body()
    del req["model"]
    resp = rr.post(req)
    assert resp.headers["X-Rerank"] == "skipped" and indices(resp) == list(range(8))
    assert rr.calls() == []


def test_org_policy_governs(make_rerank: Callable[..., Rerank]) -> None:
    orgs = "orgs:\n  acme: {policy: {rerank: {enabled: true, keep: 2}}}\n"
    rr = make_rerank(rerank={"enabled": "false"}, orgs=orgs)
    rr.answer = "[7, 6, 5, 4, 3, 2, 1, 0]"
    assert rr.post(body()).headers["X-Rerank"] == "applied"
    other = rr.h.create_key("globex")
    resp = rr.post(body(), key=other)
    assert resp.headers["X-Rerank"] == "skipped" and indices(resp) == list(range(8))


def test_top_n_cuts_after_the_merge_and_documents_are_optional(rr: Rerank) -> None:
    rr.answer = "[4, 2, 0, 1, 3]"
    docs: list[Any] = [{"text": t, "id": f"doc-{i}"} for i, t in enumerate(DOCS)]
    resp = rr.post(body(docs, top_n=3))
    results = resp.json()["results"]
    assert [r["index"] for r in results] == [4, 2, 0]
    assert results[0]["document"] == {"text": DOCS[4], "id": "doc-4"}  # the client's object
    resp = rr.post(body(top_n=100, return_documents=False))
    assert indices(resp) == [4, 2, 0, 1, 3, 5, 6, 7]
    assert all("document" not in r for r in resp.json()["results"])


def test_empty_documents_answer_empty(rr: Rerank) -> None:
    resp = rr.post({"query": "x", "documents": []})
    assert resp.status_code == 200 and resp.json()["results"] == []
    assert resp.headers["X-Rerank"] == "skipped"


@pytest.mark.parametrize("bad,param", [
    ({"documents": DOCS}, "query"),
    ({"query": "  ", "documents": DOCS}, "query"),
    ({"query": 3, "documents": DOCS}, "query"),
    ({"query": "q"}, "documents"),
    ({"query": "q", "documents": "one doc"}, "documents"),
    ({"query": "q", "documents": ["ok", 5]}, "documents[1]"),
    ({"query": "q", "documents": [{"content": "no text"}]}, "documents[0]"),
    ({"query": "q", "documents": [{"text": None}]}, "documents[0]"),
    ({"query": "q", "documents": DOCS, "top_n": 0}, "top_n"),
    ({"query": "q", "documents": DOCS, "top_n": "3"}, "top_n"),
    ({"query": "q", "documents": DOCS, "top_n": True}, "top_n"),
    ({"query": "q", "documents": DOCS, "model": 4}, "model"),
    ({"query": "q", "documents": DOCS, "return_documents": "yes"}, "return_documents"),
])
def test_bad_requests_are_400_naming_the_field(rr: Rerank, bad: dict[str, Any],
                                               param: str) -> None:
    resp = rr.post(bad)
    assert resp.status_code == 400
    err = resp.json()["error"]
    assert err["type"] == "invalid_request_error" and err["param"] == param
    assert rr.calls() == []


def test_auth_json_and_method_errors(rr: Rerank) -> None:
    url = rr.h.base_url + "/rerank"
    assert httpx.post(url, json=body()).status_code == 401
    assert httpx.post(url, json=body(), headers={"Authorization": "Bearer nope"}
                      ).status_code == 401
    resp = httpx.post(url, content=b"{not json", headers={"Authorization": f"Bearer {rr.key}"})
    assert resp.status_code == 400 and resp.json()["error"]["code"] == "invalid_json"
    resp = httpx.get(url, headers={"Authorization": f"Bearer {rr.key}"})
    assert resp.status_code == 405 and resp.headers["Allow"] == "POST"


def test_metrics_count_outcomes(rr: Rerank) -> None:
    rr.answer = "[4, 2, 0, 1, 3]"
    rr.post(body())
    rr.answer = "nope"
    rr.post(body())
    rr.post(body(DOCS[:2]))
    text = scrape(rr.h.base_url)
    assert {labels["outcome"]: v for labels, v in series(text, "context_proxy_rerank_total")} \
        == {"applied": 1, "unparsable": 1, "skipped": 1, "timeout": 0, "error": 0}
    assert metric(text, "context_proxy_rerank_duration_seconds_count", outcome="applied") == 1
    assert metric(text, "context_proxy_requests_total", route="rerank", status_class="2xx") == 3
