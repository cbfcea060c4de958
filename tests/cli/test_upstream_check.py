"""``serve`` looks at the upstream URL at start: no version segment, or a ``/models`` that is
not an OpenAI-compatible answer, is one WARNING naming the fix; start-up goes on regardless."""

from __future__ import annotations

import threading
from pathlib import Path

import openai
import pytest
from test_startup import HANG_GUARD_S, Served, cli, env, upstream  # noqa: F401  (fixtures)

from proxy.cli.upstream_check import answer_problem, probe, version_problem


@pytest.mark.parametrize("url", ["https://api.openai.com/v1", "http://127.0.0.1:11434/v1",
                                 "https://generativelanguage.googleapis.com/v1beta/openai",
                                 "https://gw.example/openai/v4/"])
def test_versioned_base_urls_pass(url: str) -> None:
    assert version_problem(url) is None


@pytest.mark.parametrize("url", ["http://127.0.0.1:8000", "https://api.openai.com/",
                                 "http://host:4000/api"])
def test_a_base_url_without_a_version_names_the_fix(url: str) -> None:
    problem = version_problem(url)
    assert problem is not None and "CONTEXT_PROXY_UPSTREAM_URL" in problem
    assert f"{url.rstrip('/')}/v1" in problem


def test_what_answers_like_an_openai_server() -> None:
    assert answer_problem("u", 200, {"object": "list", "data": []}) is None
    assert answer_problem("u", 401, {"error": {"message": "bad key"}}) is None
    for status, body in ((404, None), (200, {"models": []}), (200, None), (500, {"error": "x"})):
        problem = answer_problem("u", status, body)
        assert problem is not None and f"HTTP {status}" in problem


async def test_probe_of_the_fake_and_of_nothing(upstream: str) -> None:  # noqa: F811
    assert await probe(upstream, "sk-x") is None
    wrong = await probe(upstream.replace("/v1", "/v2"), "sk-x")
    assert wrong is not None and "HTTP 404" in wrong


def warnings_after_start(env: dict[str, str], log: Path) -> list[str]:  # noqa: F811
    """The WARNING lines of a ``serve`` that answered a request, once its check has said
    something (a WARNING, or the INFO line of a good upstream)."""
    served = Served(env, log)
    try:
        with openai.OpenAI(base_url=f"http://127.0.0.1:{served.port}/v1", api_key="cp-none",
                           max_retries=0) as client, pytest.raises(openai.AuthenticationError):
            client.models.list()  # start-up went on: the proxy answers
        for _ in range(HANG_GUARD_S * 20):
            text = log.read_text()
            if "WARNING" in text or "answers as an OpenAI-compatible server" in text:
                break
            threading.Event().wait(0.05)
        else:
            raise AssertionError("the upstream check said nothing")
    finally:
        text = served.stop()
    return [line for line in text.splitlines() if "WARNING" in line]


@pytest.mark.parametrize("fault", ["no version", "not openai"])
def test_serve_warns_once_and_still_serves(env: dict[str, str], upstream: str,  # noqa: F811
                                           tmp_path: Path, fault: str) -> None:
    url = upstream.removesuffix("/v1") if fault == "no version" \
        else upstream.replace("/v1", "/v2")
    lines = warnings_after_start({**env, "CONTEXT_PROXY_UPSTREAM_URL": url}, tmp_path / "s.log")
    assert len(lines) == 1, lines
    assert "CONTEXT_PROXY_UPSTREAM_URL" in lines[0] and "/v1" in lines[0]


def test_serve_is_quiet_about_a_good_upstream(env: dict[str, str], upstream: str,  # noqa: F811
                                              tmp_path: Path) -> None:
    assert warnings_after_start({**env, "CONTEXT_PROXY_UPSTREAM_URL": upstream},
                                tmp_path / "s.log") == []
